"""Which RTL a measurement was taken on, and whether the tree still generates it.

Calibration data that takes long to make (the KR260 cost refit of ``scripts/check_kr260_costs.py``,
an hour of Verilator build) is committed with the source it was measured on:

* ``source_key``: ``sim.verilator.source_key`` of the node (the text of every file under
  ``hdl/`` and ``golden/`` plus the node's configuration): equal keys mean equal Verilog;
* ``verilog_sha256``: the SHA-256 of the node's generated Verilog, read from the Verilator build
  cache (``top.v`` next to the library), so that a change to ``hdl/`` that leaves the Verilog as it
  was (a comment, a simulation helper, a refactor) does not make the data stale.

:func:`freshness` compares a record with the current tree without building anything: equal keys,
or a known Verilog hash of the current key (a cached build's ``top.v``, or an earlier
:func:`export_sha256`) that is equal, mean the data is current; another hash means stale; no known
hash means it cannot tell. :func:`export_sha256` finds out without a Verilator build: it exports
the node's Verilog (minutes for a KR260-sized node, no C++ compile) and remembers the hash under
the build cache (``verilog-sha/<key>``).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["node_source", "freshness", "export_sha256"]


def _known_sha256(key: str) -> str | None:
    """The Verilog hash of build key ``key`` if this machine knows it: a cached build's ``top.v``
    or a hash :func:`export_sha256` remembered."""
    from mcf_fpga.sim.verilator import cache_root
    index = cache_root() / "keys" / key
    if index.exists():
        top = Path(index.read_text().strip()).parent / "top.v"
        if top.exists():
            return hashlib.sha256(top.read_bytes()).hexdigest()
    known = cache_root() / "verilog-sha" / key
    return known.read_text().strip() if known.exists() else None


def node_source(cfg) -> dict:
    """``{"source_key", "verilog_sha256"}`` of ``hdl.node.Node(cfg)`` as the cluster builds it
    (``sim.cluster``); the hash is None when this machine has neither built nor exported it."""
    from mcf_fpga.sim.verilator import source_key
    key = source_key("hdl.node.Node", cfg)
    return {"source_key": key, "verilog_sha256": _known_sha256(key)}


def export_sha256(cfg) -> str:
    """SHA-256 of ``hdl.node.Node(cfg)``'s Verilog exactly as ``sim.verilator.build`` writes it
    (module ``top``, AMBA port names), exported now if this machine does not know it yet, and
    remembered under the build cache."""
    from mcf_fpga.hdl.node import Node
    from mcf_fpga.sim.verilator import cache_root, source_key
    from mcf_fpga.hdl.verilog import to_verilog
    key = source_key("hdl.node.Node", cfg)
    sha = _known_sha256(key)
    if sha is None:
        sha = hashlib.sha256(to_verilog(Node(cfg), "top").encode()).hexdigest()
        out = cache_root() / "verilog-sha" / key
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(sha + "\n")
    return sha


def freshness(record: dict, cfg) -> tuple[str, str]:
    """(``"current"`` | ``"stale"`` | ``"unknown"``, a sentence saying why) for data measured on
    ``hdl.node.Node(cfg)`` whose ``record`` holds the :func:`node_source` it was measured on."""
    now = node_source(cfg)
    if record.get("source_key") == now["source_key"]:
        return "current", "measured on this tree's hdl/ and golden/"
    if now["verilog_sha256"] is None:
        return "unknown", ("hdl/ or golden/ changed since it was measured and this tree's Verilog of the "
                           "node is not known here (built or exported), so it cannot be compared")
    if now["verilog_sha256"] == record.get("verilog_sha256"):
        return "current", "hdl/ or golden/ changed since, but the node's Verilog is the same"
    return "stale", "the node's Verilog changed since it was measured"
