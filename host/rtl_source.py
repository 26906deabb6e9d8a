"""Which RTL a measurement was taken on, and whether the tree still generates it.

Calibration data that takes long to make (the KR260 cost refit of ``scripts/check_kr260_costs.py``,
an hour of Verilator build) is committed with the source it was measured on:

* ``source_key``: ``hdl.sim.verilator.source_key`` of the node (the text of every file under
  ``hdl/`` and ``golden/`` plus the node's configuration): equal keys mean equal Verilog;
* ``verilog_sha256``: the SHA-256 of the node's generated Verilog, read from the Verilator build
  cache (``top.v`` next to the library), so that a change to ``hdl/`` that leaves the Verilog as it
  was (a comment, a simulation helper, a refactor) does not make the data stale.

:func:`freshness` compares a record with the current tree without building anything: equal keys,
or a cached build of the current key whose Verilog hash is equal, mean the data is current; a
cached build with another hash means stale; no cached build means it cannot tell (the script that
made the data rebuilds the node and says).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["node_source", "freshness"]


def _cached_verilog(key: str) -> Path | None:
    from hdl.sim.verilator import cache_root
    index = cache_root() / "keys" / key
    if not index.exists():
        return None
    top = Path(index.read_text().strip()).parent / "top.v"
    return top if top.exists() else None


def node_source(cfg) -> dict:
    """``{"source_key", "verilog_sha256"}`` of ``hdl.node.Node(cfg)`` as the cluster builds it
    (``hdl.cluster``); the hash is None when the node has not been built on this machine."""
    from hdl.sim.verilator import source_key
    key = source_key("hdl.node.Node", cfg)
    top = _cached_verilog(key)
    return {"source_key": key,
            "verilog_sha256": hashlib.sha256(top.read_bytes()).hexdigest() if top else None}


def freshness(record: dict, cfg) -> tuple[str, str]:
    """(``"current"`` | ``"stale"`` | ``"unknown"``, a sentence saying why) for data measured on
    ``hdl.node.Node(cfg)`` whose ``record`` holds the :func:`node_source` it was measured on."""
    now = node_source(cfg)
    if record.get("source_key") == now["source_key"]:
        return "current", "measured on this tree's hdl/ and golden/"
    if now["verilog_sha256"] is None:
        return "unknown", ("hdl/ or golden/ changed since it was measured and the node's Verilator build "
                           "of this tree is not cached, so its Verilog cannot be compared")
    if now["verilog_sha256"] == record.get("verilog_sha256"):
        return "current", "hdl/ or golden/ changed since, but the node's Verilog is the same"
    return "stale", "the node's Verilog changed since it was measured"
