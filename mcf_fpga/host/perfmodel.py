"""Performance model of an MCF cluster, calibrated on the RTL.

``predict(program, params)`` compiles the program with the one compiler (``host.compiler``, the
streams the RTL executor runs: same engine instructions, shapes, EMIT/KVS packet splits, directory
commands and waits; the node's memories are not limited, :func:`model_node_config`) and times
every node's stream, op by op:

* **engine**: instructions run serially; an instruction starts when the engine is free and the
  host has pushed it; its cycles are a calibrated linear function of its shape features
  (:data:`FEATURES`, coefficients fitted by ``scripts/calibrate_perf.py`` on the Verilated node);
* **host**: like the RTL executor's host, it acts between cluster steps of ``chunk`` cycles: a
  KV-pool command costs one step, a ``recv`` resumes at the first step boundary after its last
  packet arrived, a ``logits`` at the first boundary after its SPR;
* **network**: a packet leaves ``tx(P)`` cycles after its EMIT retires, crosses each link at a
  step boundary (SimCluster moves frames every ``chunk`` cycles) and takes ``fwd(P)`` per
  intermediate node and ``rx(P)`` into the destination's ``m_axis_rx`` (calibrated per byte and per
  packet); with a configured ``link_bytes_per_cycle`` (board links) a frame also occupies the wire
  for its bytes (+ framing) / rate, one frame at a time per directed link, in the order frames
  reach it (host wake-ups, hops and arrivals are events on one time-ordered heap);
* **NIC reductions** (decode all-reduces): the root NIC merges when the last member's packet arrived
  (``red(P)``) and multicasts the result back;
* **DDR ports** (``params["ddr"]``, set by ``engine_params(port_bytes_per_cycle=...)`` and
  ``kr260_setup``): every instruction's bytes are charged to the node's AXI HP channels
  (``host.ddrports``: command records HP0, SPW/SPR HP1, weight tiles HP2, ATT's K/V rows and
  KVW's rows HP3, in the padded record size of ``spec.kvregion.KVRegion``) and the instruction
  takes ``max(compute cycles, busiest channel / port rate, total / DDR rate)``. Without
  ``params["ddr"]`` (the RTL calibration and validation) bytes are counted but cost nothing;
* **K/V in DDR** (``params["kv"]``, set by :func:`kv_in_ddr` and ``kr260_setup``; coefficients
  from the DDR node's calibration, ``params["kv_ddr"]``): every ATT gets a KVL queued as the
  executor queues it (``host.executors.kv_ddr.load_order``: the next block one job ahead within
  a batch; decode's first blocks an op ahead, ``DdrKV.preload``); a KVL starts when the KVWs before it are written (``kvfence``), its block is full
  ``kvload`` cycles later, data of successive loads one after another on the streamer's read
  channel (at the HP3 port rate with ``params["ddr"]``); the ATT starts when its window is full.
  KV units are sent with KVS (install packets of ``max_payload`` bytes at most: the records as
  stored) or EMIT (``send``), received units installed by the NIC (records on HP2.wr, the unit
  usable one B response after its last packet; no engine time) or by host SPW + KVW
  (``install``). Without ``params["kv"]``: K/V on chip, ATT and KVW move no DDR bytes.

Returns a :class:`Prediction`: ``ttft_cycles``, ``decode_cycles``, ``prefill_cycles`` and per node
the engine busy cycles, a timeline of ``(op index, kind, host start, engine end)``, the bytes per
HP channel (``port_bytes``; received packets are counted on HP0.wr, KV install packets on HP2.wr),
the cycles the DDR ports and window waits added to the engine (``ddr_cycles``; the waits alone:
``kv_wait``), the instructions run per kind (``instr_counts``), the engine cycles per kind
(``busy_by_kind``; the part counted as communication: ``comm_by_kind``, so that the rest adds up
to ``compute_busy``), the instructions run per shape (``instr_shapes``) and the engine's compute and
communication cycles per prefill unit (``unit_busy``: each op's share, by the unit it works for).

``params`` is the JSON written by the calibration (:func:`load_params`); :func:`engine_params`
re-targets it to another engine shape (``hdl.compute.engine.KR260``): the fitted coefficients
multiply features that carry ``pn``, ``pk``, ``group`` and ``head_dim`` explicitly, so the
dependence on those comes from the RTL's structure measured at the simulated node's shape.
"""
from __future__ import annotations

import bisect
import collections
import heapq
import json
import math
import os
from dataclasses import dataclass, field

from mcf_fpga.host import compiler as C
from mcf_fpga.host.compiler import up_to
from mcf_fpga.hdl.compute.vector import VecOp
from mcf_fpga.hdl.compute.attention import default_merge_lanes, row_cycles
from mcf_fpga.hdl.compute.gemm import tile_beats, tile_load_cycles
from mcf_fpga.host.ddrports import CHANNELS, HP_BYTES, DDRPorts, channel, cmd_bytes, instr_traffic, kv_row_bytes
from mcf_fpga.host.executors.kv_ddr import load_order
from mcf_fpga.host.perfmodel_coarse import send_unit
from mcf_fpga.host.program_ops import AllReduce, Recv, Send
from mcf_fpga.spec.instr import AttFlags, EmitFlags, EngineOpcode, FoldFlags, GemmFlags, SpwFlags
from mcf_fpga.spec.partial import PartialRow

__all__ = ["DEFAULT_CALIBRATION", "FEATURES", "KV_DDR_KINDS", "feature", "load_params", "predict", "Prediction",
           "instr_cycles", "engine_params", "params_from_measurements", "compute_only", "kv_in_ddr",
           "batch_cycles"]

#: The source checkout (the calibration lives in its results/, made by its scripts/).
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_CALIBRATION = os.path.join(REPO, "results", "perf_calibration.json")
#: Coefficients refitted on a KR260-sized node (scripts/check_kr260_costs.py), if measured.
KR260_CALIBRATION = os.path.join(os.path.dirname(DEFAULT_CALIBRATION), "perf_kr260.json")

#: Shape features of every instruction kind; cycles = sum(coef[f] * feature(f)).
FEATURES = {
    "spw": ("one", "n0"),
    "spr": ("one", "n0"),
    "gemm": ("one", "loadx", "tiles", "tilecost"),
    "vec_add": ("one", "rows", "elems"), "vec_swiglu": ("one", "rows", "elems"),
    # the row ops overlap rows (load of row r+1 under the later passes of row r): per row ~len
    # (RMSNorm: + its divider) plus one row's fill (RMSNorm: two); ROPE's len is the fixed head_dim
    # on a node, so its fill is pinned to one row: rowfill = rows * (len + 1) + len. RMSNorm rows
    # longer than a third of the unit's ring (2 * d_max) overlap two rows, not three: ring2
    "vec_quant": ("one", "rows", "elems", "len"), "vec_rmsnorm": ("one", "rows", "elems", "len", "ring2"),
    "vec_rope": ("one", "rowfill"),
    "kvw": ("one", "rows", "elems"),
    "att": ("one", "firstrow", "rowpace", "accfirst"),
    "fold": ("one", "rows", "partw", "finalw", "outw"),
    "emit": ("one", "n0"),
    # K/V in DDR (params["kv_ddr"], measured on the DDR node): the KVL instruction; KVS (one per
    # install packet: 2 header words + its records as 32-bit words); a block load's time from the
    # KVL's start to its window full (2 keys row_bytes / 16 bus beats of K and V rows); the write
    # fence (cycles after a KVW retires until a load may start: its rows' B responses)
    "kvl": ("one",),
    "kvs": ("one", "words"),
    "kvload": ("one", "beats"),
    "kvfence": ("one",),
}

#: Kinds whose coefficients the K/V-in-DDR calibration (``params["kv_ddr"]["instr"]``) supplies:
#: ATT reading a staging window, KVW writing DDR, and the DDR-only KVL, KVS, load and fence.
KV_DDR_KINDS = ("att", "kvw", "kvl", "kvs", "kvload", "kvfence")


def _vec_pairs(kind: str, s: dict, e: dict) -> bool:
    """A vector op of even rows moving two elements a cycle on a paired scratchpad: ADD / SWIGLU,
    QUANT with quant_pairs, RMSNORM with rms_pairs."""
    op = (kind in ("vec_add", "vec_swiglu") or kind == "vec_quant" and e.get("quant_pairs")
          or kind == "vec_rmsnorm" and e.get("rms_pairs"))
    return bool(op and e.get("sp_pairs") and e.get("vec_pipelined") and s["len"] % 2 == 0)


def _att_pair(s: dict, e: dict) -> int:
    """2 if an ATT / FOLD of shape ``s`` writes its rows two words a cycle on engine ``e``
    (``att_pairs`` and the shape's ``pair``: ``_kind_shape``), else 1."""
    return 2 if e.get("att_pairs") and s.get("pair") else 1


def feature(kind: str, name: str, s: dict, e: dict | None) -> float:
    """Value of feature ``name`` of an instruction ``kind`` with shape ``s`` on engine ``e``."""
    e = e or {}
    pn, pk, group, d = e.get("pn", 4), e.get("pk", 16), e.get("group", 32), e.get("head_dim", 16)
    pw = PartialRow(d).words             # words of one partial row (2d+4)
    if name == "one":
        return 1.0
    if name == "elems" or (name == "len" and kind in ("vec_quant", "vec_rmsnorm")):
        # the elements (QUANT's, RMSNORM's: and their rows' fill)
        n = s["rows"] * s["len"] if name == "elems" else s["len"]
        return n / (2 if _vec_pairs(kind, s, e) else 1)
    if name == "rowfill":
        return s["rows"] * (s["len"] + 1) + s["len"]
    if name == "ring2":
        n = s["rows"] * s["len"] if 3 * s["len"] > 2 * e.get("d_max", 8960) else 0
        return n / (2 if _vec_pairs(kind, s, e) else 1)
    if kind == "gemm":
        T, K, N = s["T"], s["K"], s["N"]
        tiles = N // pn
        if name == "loadx":          # LOAD_X: one scratchpad word per cycle (two, sp_pairs) + one beat per k-chunk (per reader)
            return 0 if s["reuse"] else T * (K / (1 + bool(e.get("sp_pairs"))) + K // pk) / e.get("loadx_ports", 1)
        if name == "tiles":
            return tiles
        if name == "tilecost":       # per tile: max(compute/output T*max(K/pk, pn), weight load)
            kc, cpg = K // pk, group // pk     # loader: 1 + G + kc cycles; DDR: tile_beats beats
            wb = max(tile_load_cycles(kc, cpg), tile_beats(kc, cpg, pk) * e.get("w_beat_cycles", 1.0))
            return tiles * max(T * max(K // pk, pn), wb)
    if kind == "att":
        # the unit takes its q rows beside the rows' compute (only the first row's d words are
        # serial: in "one" at a node's d); the first row's phase S overlaps nothing (firstrow);
        # then a row's output words leave while the next row's keys run, so a row paces at the
        # longer of the unit's row (``attention.row_cycles``: phase S's row, or the row state's
        # chain of merges and emit, which P's keys run beside; an acc row's partial merge, ATT
        # sub bit1, shape "acc", is in the chain; ``att_pipelined``: the staged unit's) and its
        # output (2d+4 partial words; ATT is modelled non-final). An acc job's row 0 partial
        # (2d+4 words, one reader) must be in before its P starts (accfirst). ``att_rows`` 2: the
        # rows go in pairs, a pair paces at its ``row_cycles`` or its two rows' output words, and
        # an acc pair's two partials are in before its P starts. ``att_emit_on_empty``: a row that
        # waits for its output is emitted a cycle after the one before has left the serializer
        kc = -(-s["keys"] // e.get("att_keys", 1))
        acc = s.get("acc", 0)
        H = e.get("att_rows", 1)
        if name == "firstrow":
            return kc
        if name == "rowpace":          # att_pairs: an eligible job's output words two a cycle; an
            # acc row's partial still comes in one word a cycle (reader B), so acc rows pace at 2d+4
            row = row_cycles(d, s["keys"], keys_per_cycle=e.get("att_keys", 1),
                             pipelined=bool(e.get("att_pipelined")), acc=bool(acc), rows_per_cycle=H)
            out = H * (pw / _att_pair(s, e) + bool(e.get("att_emit_on_empty")))
            return -(-s["rows"] // H) * max(row, out, acc * H * pw)
        if name == "accfirst":
            return acc * max(0, H * pw - kc)
        # the features of the attention unit before it took q rows beside the compute (the fits
        # of calibration records made on that RTL name them; new fits use the ones above)
        if name == "rowsd":
            return s["rows"] * pw / 36.0
        if name == "rowkeys":
            return s["rows"] * s["keys"]
        if name == "rowknee":        # the row's 2d+4 output words hide its keys up to about here
            return s["rows"] * max(0, s["keys"] - max(0, pw - d // default_merge_lanes(d) - 7))
    if kind == "fold":
        if name == "rows":
            return s["rows"]
        if name == "partw":          # every partial row read: 2d+4 words (by one or two SP readers)
            return s["parts"] * pw / e.get("fold_ports", 1)
        if name == "finalw":         # finalize: L dividers side by side, d/L rounds per row
            return s["rows"] * s["final"] * d // default_merge_lanes(d)
        if name == "outw":           # a non-final row writes its 2d+4 partial words (att_pairs: two a cycle)
            return s["rows"] * (1 - s["final"]) * pw / _att_pair(s, e)
    if kind == "emit" and name == "n0":      # emit_pairs: an eligible EMIT's words two a cycle
        return s["n0"] / (2 if e.get("emit_pairs") and s.get("pair") else 1)
    if kind == "spw" and name == "n0":       # spw_pairs: an eligible SPW's words two a cycle (pair beats in)
        return s["n0"] / (2 if e.get("spw_pairs") and s.get("pair") else 1)
    return float(s[name])


def params_from_measurements(coefs: dict, links: dict, kv: float, engine: dict, ncfg) -> dict:
    """The calibration JSON from the raw measurements of ``scripts/calibrate_perf.py``."""
    import numpy as np

    def lin(xs, ys):
        b, a = np.polyfit(np.array(xs, float), np.array(ys, float), 1)
        return {"a": float(a), "b": float(b)}
    one, two = links["one_hop"], links["two_hop"]
    emit = coefs["emit"]
    # tx: EMIT retired -> frame on the wire; rx: wire -> m_axis_rx; fwd: one more hop
    tx = lin([r["payload"] for r in one],
             [r["first_wire"] - (emit["one"] + emit["n0"] * r["payload"]) for r in one])
    rx = lin([r["payload"] for r in one], [r["arrive"] - r["first_wire"] for r in one])
    fwd = lin([r["payload"] for r in two], [t["arrive"] - o["arrive"] for o, t in zip(one, two)])
    # NIC reduction: every destination's NIC merges the contributions (each member's packet goes
    # to every destination of the route, fan-in = group size); the result is on its m_axis_rx
    # red(P) after the last contribution arrived (over one hop; the node's own packet after tx)
    f = lambda c, P: c["a"] + c["b"] * P  # noqa: E731
    red_pts = []
    for r in links.get("reduce", []):
        P = r["payload"]
        t_emit = emit["one"] + emit["n0"] * r["words"]
        last = t_emit + f(tx, P) + f(rx, P)
        red_pts.append((P, r["root"] - last))
    red = lin(*zip(*red_pts)) if red_pts else rx
    data_over = float(np.mean([r["data_frames"][0] - r["payload"] for r in one]))
    ack = float(np.mean([r["wire_bytes"] - sum(r["data_frames"]) for r in one]))
    return dict(instr=coefs, link={"tx": tx, "rx": rx, "fwd": fwd, "red": red, "frame_overhead": data_over,
                                   "ack_bytes": ack, "max_payload": ncfg.nic.max_payload,
                                   "rx_header": 16},
                kvpool_cycles=kv, engine=dict(engine), link_raw=links)


def _calibrated_nodes() -> dict:
    """{name: node configuration} of the simulated nodes ``scripts/calibrate_perf.py`` measures."""
    from mcf_fpga.host.executors.rtl import sim_ddr_node_config, sim_node_config
    return {"onchip": sim_node_config("ring"), "ddr": sim_ddr_node_config()}


def calibration_source() -> dict:
    """``host.rtl_source.node_source`` of the two simulated nodes ``scripts/calibrate_perf.py``
    measures (K/V on chip and in DDR): what a calibration records as ``source``."""
    from mcf_fpga.host.rtl_source import node_source
    return {name: node_source(cfg) for name, cfg in _calibrated_nodes().items()}


def calibration_stale(params: dict) -> str | None:
    """Why the calibration ``params`` no longer describes this tree's simulated nodes (a sentence), or
    None: no DDR section, no recorded ``source`` (made before sources were recorded), or a node whose
    Verilog changed or cannot be compared (``host.rtl_source.freshness``)."""
    if "kv_ddr" not in params:
        return "it predates the DDR node's calibration"
    if "source" not in params:
        return "it records no RTL source"
    from mcf_fpga.host.rtl_source import freshness
    for name, cfg in _calibrated_nodes().items():
        state, why = freshness(params["source"].get(name, {}), cfg)
        if state != "current":
            return f"{name} node: {why}"
    return None


def load_params(path: str | None = None, *, calibrate: bool = True) -> dict:
    """The calibration JSON (``results/perf_calibration.json`` unless ``path``). If it does not
    exist or is stale (:func:`calibration_stale`: measured on other RTL than this tree's simulated
    nodes, or before the DDR node's calibration), and ``calibrate``, ``scripts/calibrate_perf.py``
    runs now (a few minutes on the Verilated nodes, more when they must be built) and writes it: a
    cache, never typed in."""
    path = path or DEFAULT_CALIBRATION

    def stale():
        if not os.path.exists(path):
            return True
        with open(path) as f:
            return calibration_stale(json.load(f)) is not None
    if calibrate and stale():
        import fcntl
        import importlib.util
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path + ".lock", "w") as lock:      # one calibration when processes race (pytest -n)
            fcntl.flock(lock, fcntl.LOCK_EX)
            if stale():
                script = os.path.join(REPO, "scripts", "calibrate_perf.py")
                spec = importlib.util.spec_from_file_location("calibrate_perf", script)
                mod = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(mod)
                mod.main(["--out", path])
    if not os.path.exists(path):
        raise FileNotFoundError(f"no performance calibration at {path}; run scripts/calibrate_perf.py")
    with open(path) as f:
        return json.load(f)


def engine_params(params: dict, engine: dict, *, link_bytes_per_cycle: float | None = None,
                  link_latency: float | None = None, ddr_bytes_per_cycle: float | None = None,
                  speedup: float = 1.0, port_bytes_per_cycle: float | None = None,
                  weight_lanes: int = 1) -> dict:
    """``params`` re-targeted to engine shape ``engine`` (pn, pk, group, head_dim, ...) and, if
    given, a physical link rate (bytes/cycle: 10 Gb/s at 200 MHz = 6.25) with a per-hop latency,
    and the DDR rate of the weight loader (a weight beat of ``pn*pk`` int4 then takes
    ``max(1, beat bytes / ddr_bytes_per_cycle)`` cycles; the simulated node is fed one beat per
    cycle). ``speedup`` > 1 is a what-if: every engine instruction takes 1/speedup of its
    calibrated cycles (a faster engine -- and weight port -- on the same links), to find where
    communication starts to show (the DDR ports' cycles are divided by it too: a faster node).

    ``port_bytes_per_cycle`` (with ``ddr_bytes_per_cycle``): charge every instruction's DDR bytes
    to the node's HP channels at this rate each and ``ddr_bytes_per_cycle`` in total
    (``params["ddr"]``, module docstring), the GEMM weight tiles striped over ``weight_lanes`` read
    channels (``host.ddrports.WEIGHT_LANES``, the board's ``boards.striped_reader``)."""
    if not speedup > 0:
        raise ValueError(f"speedup={speedup!r}, expected > 0")
    if port_bytes_per_cycle is not None and ddr_bytes_per_cycle is None:
        raise ValueError("engine_params: port_bytes_per_cycle needs ddr_bytes_per_cycle (the ports' total)")
    out = dict(params)
    out["engine"] = dict(engine, speedup=speedup)
    if ddr_bytes_per_cycle is not None:
        beat = engine["pn"] * engine["pk"] / 2
        out["engine"]["w_beat_cycles"] = max(1.0, beat / ddr_bytes_per_cycle)
    if port_bytes_per_cycle is not None:
        DDRPorts(port_bytes_per_cycle, ddr_bytes_per_cycle, weight_lanes)          # validated
        out["ddr"] = {"port_bytes_per_cycle": port_bytes_per_cycle, "ddr_bytes_per_cycle": ddr_bytes_per_cycle,
                      "weight_lanes": weight_lanes}
    if link_bytes_per_cycle is not None:
        out["link"] = dict(params["link"], rate=link_bytes_per_cycle,
                           latency=params["link"]["fwd"]["a"] if link_latency is None else link_latency)
    return out


#: Host reaction per interaction on a board (``with_host``): one Linux user-space MMIO round trip
#: to the PL, about 0.7 us per register access measured with readl on a Zynq (cnblogs.com/
#: embedded-linux/p/6659828.html, "Linux外设寄存器"), rounded up to 1 us, at the fabric clock.
HOST_INTERACTION_S = 1e-6


def with_host(params: dict, seconds: float = HOST_INTERACTION_S, clock_hz: float = 200e6, *,
              fetched: bool = False, rx: bool = False, pick_slots: int = 0) -> dict:
    """``params`` whose host spends ``seconds`` per interaction (every record of a node's stream it
    serves: a push of instructions, a directory command, a feed, a wait, a read;
    ``host.compiler.host_interactions``), at the fabric clock ``clock_hz``. Without it the host is
    ideal (no time of its own beyond the ``chunk`` step). ``fetched``: the node's command fetcher
    serves the instructions, directory commands and waits (``NodeConfig.fetcher``); the host only
    the rest. ``rx`` (with ``fetched``): the node's RX placer lands received payloads and the node
    loads them (``NodeConfig.rx_entries``, ``host.compiler.placed_records``); ``pick_slots``
    (with ``fetched``): the node's token picker has that many slots and the node picks its tokens
    and loads their embeddings (``NodeConfig.pick_slots``, ``host.node_image.plan_picks``).
    ``fetched`` also means one weight lane: a fetching node's stream loader reads the GEMM weight
    tiles on HP2 alone (``NodeDMA`` stripes only its host-fed weight reader; the
    ``node-kr260-fetch`` top, ``boards.flow``), so ``params["ddr"]["weight_lanes"]`` becomes 1."""
    if not seconds >= 0:
        raise ValueError(f"with_host: seconds={seconds!r} must be >= 0")
    if not clock_hz > 0:
        raise ValueError(f"with_host: clock_hz={clock_hz!r} must be > 0")
    if (rx or pick_slots) and not fetched:
        raise ValueError("with_host: rx / pick_slots need fetched=True (the fetcher waits for them)")
    out = dict(params, host={"interaction_cycles": seconds * clock_hz, "fetched": bool(fetched), "rx": bool(rx),
                             "pick_slots": int(pick_slots)})
    if fetched and params.get("ddr"):
        out["ddr"] = dict(params["ddr"], weight_lanes=1)
    return out


#: ``kv_in_ddr`` choices: how a node sends its KV units and how received units reach its DDR.
KV_SEND = ("kvs", "emit")
KV_INSTALL = ("nic", "host")


def kv_in_ddr(params: dict, *, send: str = "kvs", install: str = "nic") -> dict:
    """``params`` for nodes whose engine keeps K/V in DDR (``ComputeEngine(kv_region=...)``):
    instruction costs of ATT (from a staging window), KVW (to DDR), KVL, KVS, the block load and
    the write fence from the DDR node's calibration (``params["kv_ddr"]``); every ATT gets a KVL
    in ``host.executors.kv_ddr.load_order``'s order and waits for its window. ``send``: ``"kvs"``
    (a unit's records straight from DDR as install packets) or ``"emit"`` (EMIT of a scratchpad
    copy, as ``run_rtl`` does today); ``install``: ``"nic"`` (the NIC's installer writes received
    units to DDR over HP2.wr: no host SPW/KVW) or ``"host"`` (SPW + KVW, as ``run_rtl``)."""
    if "kv_ddr" not in params:
        raise ValueError("kv_in_ddr: the calibration has no K/V-in-DDR section (params['kv_ddr']); "
                         "re-run scripts/calibrate_perf.py")
    if send not in KV_SEND:
        raise ValueError(f"kv_in_ddr: send={send!r}, expected one of {KV_SEND}")
    if install not in KV_INSTALL:
        raise ValueError(f"kv_in_ddr: install={install!r}, expected one of {KV_INSTALL}")
    if send == "kvs" and install == "host":
        raise ValueError("kv_in_ddr: send='kvs' sends install packets, which only the NIC's installer "
                         "takes (install='nic')")
    if send == "emit" and install == "nic":
        raise ValueError("kv_in_ddr: install='nic' takes install packets, which the compiler sends with "
                         "KVS (send='kvs')")
    return dict(params, kv={"send": send, "install": install})


def instr_cycles(params: dict, kind: str, shape: dict) -> float:
    c = params["instr"][kind]
    e = params["engine"]
    return max(1.0, sum(v * feature(kind, f, shape, e) for f, v in c.items())) / e.get("speedup", 1.0)


# ---------------------------------------------------------------------------- the compiler

class _Node:
    """One node's clocks while its compiled stream (``host.compiler``) is timed."""

    def __init__(self, n, program, params, mp):
        self.node, self.program, self.params = n, program, params
        self.head_dim = program.model.head_dim
        self.kv_bits, self.block, self.mp = program.kv_bits, program.block, mp
        self.eng = 0.0           # engine free at
        self.busy = 0.0
        self.comm_busy = 0.0     # EMIT / received-data SPW and KVW / reduction glue
        self.comm = False
        self.timeline = []
        self.t_logits = None
        self.t_tokens = []
        self.marks = {}
        self.cache = {}
        self.coefs = {}          # (kind, shape items) -> coef()
        self.kvs_costs = {}      # records -> (cost(), shapes key) of a KVS
        self.kv_lat = None       # coef("kvload", {"beats": 0})
        self.ports = DDRPorts(**params["ddr"]) if params.get("ddr") else None
        self.row_bytes, self.cmd = kv_row_bytes(self.head_dim, self.kv_bits), cmd_bytes()
        self.port_bytes = dict.fromkeys(CHANNELS, 0)
        self.ddr_cycles = 0.0    # cycles the DDR ports (and, K/V in DDR, window waits) added
        # K/V in DDR (params["kv"], kv_in_ddr): the DDR node's coefficients and its KV streamer
        self.kv = params.get("kv")
        self.IP = dict(params, instr={**params["instr"], **params["kv_ddr"]["instr"]}) if self.kv else params
        self.rd_free = 0.0       # the streamer's read data channel is free from
        self.win_full = {}       # staging window -> the time its queued load has filled it
        self.wr_done = 0.0       # every KVW row written so far has its B response at
        self.kv_wait = 0.0       # cycles ATTs waited for their window
        self.counts = {}         # instructions run, per kind
        self.host = 0            # host interactions
        self.by_kind = {}        # engine cycles per kind ("<kind> wait": waits for a window / fence)
        self.comm_by_kind = {}   # the part of by_kind counted as communication (comm_busy)
        self.shapes = {}         # (kind, shape items, comm) -> instructions run
        self.unit_busy = {}      # prefill unit (None: other ops) -> [compute, communication] engine cycles

    def cost(self, kind, shape):
        """(cycles, {channel: bytes}, cycles added by DDR) of one instruction (cached). A KVL's
        K/V bytes are counted here but timed on the streamer (``kvl``), not in the instruction."""
        key = (kind, tuple(sorted(shape.items())))
        got = self.cache.get(key)
        if got is None:
            c = instr_cycles(self.IP, kind, shape)
            e = self.params["engine"]
            tr = instr_traffic(kind, shape, {"pn": e.get("pn", 4), "pk": e.get("pk", 16), "group": e.get("group", 32),
                                             "w_lanes": self.ports.weight_lanes if self.ports else 1},
                               self.row_bytes, self.cmd,
                               kv_ddr=bool(self.kv))
            extra = 0.0
            if self.ports is not None:
                charged = {t: b for t, b in tr.items() if not (kind == "kvl" and t == "kv_load")}
                extra = max(0.0, self.ports.cycles(charged) / e.get("speedup", 1.0) - c)
            by_ch = {}
            for t, b in tr.items():
                by_ch[channel(t)] = by_ch.get(channel(t), 0) + b
            got = self.cache[key] = (c + extra, by_ch, extra)
        return got

    def run(self, kind, shape, h, at=None):
        """Run one instruction queued at host time ``h``; it starts when the engine is free (or at
        ``at``, if later: a KV fence or window wait). Returns the engine time it retires at."""
        comm = self.comm or kind in ("emit", "kvs")
        return self._account(kind, self.cost(kind, shape), (kind, tuple(sorted(shape.items())), comm), comm, h, at)

    def _account(self, kind, cost, skey, comm, h, at, times=1):
        """``run`` of an instruction whose ``cost()`` and shapes key are known: the counters, the
        DDR ports' bytes, the wait for ``at`` and the engine time. Returns the retire time.
        ``times``: that many of it back to back, accounted at once (the coarse model's KVS)."""
        c, by_ch, extra = cost
        if times != 1:
            c, extra = c * times, extra * times
            by_ch = {ch: b * times for ch, b in by_ch.items()}
        self.counts[kind] = self.counts.get(kind, 0) + times
        self.shapes[skey] = self.shapes.get(skey, 0) + times
        for ch, b in by_ch.items():
            self.port_bytes[ch] += b
        self.ddr_cycles += extra
        start = max(self.eng, h)
        if at is not None and at > start:
            wait = at - start
            self.busy += wait
            self.ddr_cycles += wait
            if comm:
                self.comm_busy += wait
                self.comm_by_kind[kind + " wait"] = self.comm_by_kind.get(kind + " wait", 0.0) + wait
            self.by_kind[kind + " wait"] = self.by_kind.get(kind + " wait", 0.0) + wait
            if kind == "att":
                self.kv_wait += wait
            start = at
        self.eng = start + c
        self.busy += c
        self.by_kind[kind] = self.by_kind.get(kind, 0.0) + c
        if comm:
            self.comm_busy += c
            self.comm_by_kind[kind] = self.comm_by_kind.get(kind, 0.0) + c
        if kind == "kvw" and self.kv:              # its rows' B responses fence later loads
            self.wr_done = max(self.wr_done, self.eng + self.coef("kvfence", {}))
        return self.eng

    def coef(self, kind, shape):
        """Cycles of a K/V-in-DDR mechanism (``kvload``, ``kvfence``) that is not an instruction."""
        key = (kind, tuple(sorted(shape.items())))
        got = self.coefs.get(key)
        if got is None:
            got = self.coefs[key] = instr_cycles(self.IP, kind, shape)
        return got

    def kvl(self, keys, h):
        """KVL of an ATT job's ``keys`` rows: the engine hands the load to the streamer once every
        earlier KVW row is written (``wr_done``); the load's data follow earlier loads' on the read
        channel (``rd_free``). Returns the time its window is full."""
        start = max(self.eng, h)
        take = max(start, self.wr_done)
        self.run("kvl", {"keys": keys}, h, at=take)
        sp = self.params["engine"].get("speedup", 1.0)
        beats = 2 * keys * self.row_bytes / HP_BYTES
        full = self.coef("kvload", {"beats": beats})
        lat = self.coef("kvload", {"beats": 0})
        xfer = full - lat
        if self.ports is not None:
            xfer = max(xfer, self.ports.cycles({"kv_load": 2 * keys * self.row_bytes}) / sp)
        done = max(take + lat, self.rd_free) + xfer
        self.rd_free = done
        return done

    def kvs_cost(self, records):
        """(``cost()``, shapes key) of a KVS of ``records`` records (cached)."""
        shape = {"records": records, "words": 2 + records * self.row_bytes // 4}
        got = self.kvs_costs[records] = (self.cost("kvs", shape), ("kvs", tuple(sorted(shape.items())), True))
        return got

    def kvs(self, records, h):
        """KVS of ``records`` records (one install packet): it reads them on the streamer after
        earlier KVW rows are written and after earlier loads' data. Returns its retire time.
        (Its cost and shapes key are cached per record count: a unit's sends are millions of KVS
        at paper scale.)"""
        cost, skey = self.kvs_costs.get(records) or self.kvs_cost(records)
        lat = self.kv_lat
        if lat is None:
            lat = self.kv_lat = self.coef("kvload", {"beats": 0})
        t = self._account("kvs", cost, skey, True, h, max(self.wr_done, self.rd_free - lat))
        if t > self.rd_free:
            self.rd_free = t
        return t

    def batch(self, items, h):
        """Instructions ``[(kind, shape)]`` queued together at host time ``h`` (one ``emit`` of
        the compiler). K/V in DDR: every ATT gets its KVL in ``kv_ddr.load_order``'s order (the
        order ``DdrKV.rewrite`` queues) and starts when its window is full. Returns the engine
        time the last one retires at (None for an empty batch)."""
        t = None
        if not self.kv:
            for kind, s in items:
                t = self.run(kind, s, h)
            return t
        ops = [EngineOpcode.ATT if k == "att" else EngineOpcode.KVW if k == "kvw" else EngineOpcode.NOP for k, _s in items]
        full = {}
        for what, j in load_order(ops):
            kind, s = items[j]
            if what == "kvl":
                full[j] = self.kvl(s["keys"], h)
            else:
                t = self.run(kind, s, h, at=full.pop(j, None))
        return t


@dataclass
class Prediction:
    ttft_cycles: float | None
    prefill_cycles: float
    decode_cycles: float | None
    engine_busy: list
    compute_busy: list
    timeline: list
    wire_bytes: float = 0.0
    stats: dict = field(default_factory=dict)
    port_bytes: list = field(default_factory=list)   # per node {"HP0.rd": bytes, ...} (host.ddrports)
    ddr_cycles: list = field(default_factory=list)   # per node: engine cycles added by the DDR ports
    instr_counts: list = field(default_factory=list)  # per node: {kind: instructions run}
    kv_wait: list = field(default_factory=list)      # per node: cycles ATTs waited for their window (K/V in DDR)
    busy_by_kind: list = field(default_factory=list)  # per node: {kind or "<kind> wait": engine cycles}
    comm_by_kind: list = field(default_factory=list)  # per node: the part of busy_by_kind that is communication
    instr_shapes: list = field(default_factory=list)  # per node: {(kind, shape items, comm): instructions run}
    host_interactions: list = field(default_factory=list)  # per node: records its host serves (host.compiler)
    # per node {unit: (compute, communication) engine cycles} of the ops working for each prefill
    # unit (chunk): its projection, attention, fold, KV sends and installs (key None: decode, the rest)
    unit_busy: list = field(default_factory=list)


class _Train:
    """The install packets of one KV unit's send (``count`` of them) as one arrival per receiver:
    the NIC installs them and the receiver waits for all (``WaitInstalled``), so the packets before
    the last to arrive change nothing when they land. Each packet's arrival still takes its event
    number (``_Net.seq``) when it is known, and the receiver's inbox gets all of them with the event
    of the last one, (time, number) as that packet's own event would have been: the same events
    in the same order as one event per packet."""

    def __init__(self, key, count):
        self.key, self.count = key, count
        self.seen = {}           # receiver -> (packets arrived, (time, number) of the last one)

    def got(self, net, t, d):
        n, last = self.seen.get(d, (0, None))
        if last is None or t >= last[0]:       # (t, seq): a later number wins a tie
            last = (t, net.seq)
        n += 1
        if n == self.count:
            del self.seen[d]
            heapq.heappush(net.events, (last[0], last[1], self._land, (net, d)))
        else:
            self.seen[d] = (n, last)

    def _land(self, t, net, d):
        key = (d,) + self.key
        net.inbox.setdefault(key, []).extend([t] * self.count)
        net.check(d, t)


class _Net:
    """The links, the NICs and the cluster's clock of events.

    Everything that happens later than "now" is an event on one heap, processed in time order:
    host wake-ups, a packet reaching a node (to cross its next links), a packet arriving in a
    node's ``m_axis_rx``. Each directed link serves frames in the order they reach it (FIFO in
    time), one at a time at the configured rate."""

    def __init__(self, program, params, chunk, trains=True, coarse=False):
        self.topo, self.params, self.chunk = program.topo, params, chunk
        self.coarse = coarse     # a KV unit's install packets as one train per link (perfmodel_coarse)
        L = params["link"]
        self.tx, self.rx, self.fwd, self.red_lin = L["tx"], L["rx"], L["fwd"], L["red"]
        self.rate = L.get("rate")
        self.lat = L.get("latency", 0.0)
        self.over = L["frame_overhead"]
        self.ack = L["ack_bytes"]
        self.wire_free = {}
        self.wire_bytes = 0.0
        self.trees = {}
        self.events = []
        self.seq = 0
        self.inbox = {}          # key -> arrival times (keys start with the receiving node)
        self.blocked = {}        # node -> (key, count, host time it blocked at)
        self.reds = {}           # (name, layer, h) -> {destination: arrivals of the contributions}
        self.rx_bytes = {}       # node -> bytes its RX ring received (record header + Meta + payload)
        self.trains = trains     # a KV unit's install packets arrive as one event per receiver (_Train)
        self.per_p = {}          # payload -> the link's figures of a packet of that size (_per_p)
        self.single = {}         # route tree -> whether every node of it receives one copy
        self.hop = self._hop     # (one bound method for every hop event)

    def simple(self, route):
        """Whether every node of ``route`` (``route()``) gets a packet over one link only."""
        got = self.single.get(id(route[0]))
        if got is None:
            into = [b for bs in route[0].values() for b in bs]
            got = self.single[id(route[0])] = len(into) == len(set(into))
        return got

    def _per_p(self, P):
        """(frame + ack bytes, their wire cycles, the frame's wire cycles, rx(P), fwd(P))."""
        frame = P + self.over
        wb = frame + self.ack
        got = self.per_p[P] = (wb, wb / self.rate if self.rate else None, frame / self.rate if self.rate else None,
                               self.f(self.rx, P), self.f(self.fwd, P))
        return got

    def at(self, t, fn, *args):
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, fn, args))

    def q(self, t):
        return _qz(t, self.chunk)

    def f(self, lin, P):
        return lin["a"] + lin["b"] * P

    def route(self, src, dsts):
        """(route tree, destination set) from src to dsts: ``send``'s ``route`` argument."""
        key = (src, tuple(dsts))
        r = self.trees.get(key)
        if r is None:
            out = {}
            for d in dsts:
                p = self.topo.path(src, d)
                for a, b in zip(p, p[1:]):
                    if b not in out.setdefault(a, []):
                        out[a].append(b)
            ds = frozenset(dsts)
            plan = {a: tuple((b, (a, b), b in ds, b in out) for b in bs) for a, bs in out.items()}
            r = self.trees[key] = (out, ds, plan)
        return r

    def send(self, src, route, P, t_emit, arrive, ring=True):
        """A P-byte packet whose EMIT retired at ``t_emit`` travels along ``route`` (``route()``):
        ``arrive(t, d)`` runs (as an event) when it is in d's ``m_axis_rx`` (``ring``: counted on
        the destination's RX ring, HP0.wr; not for KV install packets, which the NIC's installer
        writes). A multicast tree sends one copy over each of its links."""
        self.at(t_emit + self.f(self.tx, P), self.hop, src, route[2], P, arrive, ring)

    def _hop(self, t, a, plan, P, arrive, ring=True):
        """The packet is at node ``a`` at ``t``: it crosses ``a``'s links of the route tree
        (``plan``: node -> its links as (next node, link, a destination, forwards))."""
        wb, w, fr, rxP, fwdP = self.per_p.get(P) or self._per_p(P)
        C_ = self.chunk
        for b, ab, to_dst, inner in plan.get(a, ()):
            if w is not None:
                start = self.wire_free.get(ab, 0.0)
                if t > start:
                    start = t
                self.wire_free[ab] = start + w
                tb = start + fr + self.lat
            else:
                tb = t
            if C_ > 1:
                tb = _qz(tb, C_)
            self.wire_bytes += wb
            if to_dst:
                if ring:
                    self.rx_bytes[b] = self.rx_bytes.get(b, 0) + -(-(32 + P) // 16) * 16
                tr = tb + rxP
                self.seq += 1
                if type(arrive) is _Train:
                    arrive.got(self, tr, b)
                else:
                    heapq.heappush(self.events, (tr, self.seq, arrive, (b,)))
            if inner:
                self.seq += 1
                heapq.heappush(self.events, (tb + fwdP, self.seq, self.hop, (b, plan, P, arrive, ring)))

    def send_train(self, nd, ntoks, h, route, train):
        """KVS of every install packet of a unit (``ntoks`` records each) queued at host time ``h``
        on node ``nd`` and their packets sent (``send``, no RX ring); the last one's retire time.
        The first KVS is ``nd.kvs``; the others the same operations on local copies of the node's
        sums (the same floats: every sum still adds one packet after the other)."""
        src, plan, ev, push = nd.node, route[2], self.events, heapq.heappush
        tx_a, tx_b, hop = self.tx["a"], self.tx["b"], self.hop
        rb = nd.row_bytes
        n = ntoks[0]
        t = nd.kvs(n, h)
        P = 8 + n * rb
        self.seq += 1
        if len(ntoks) == 1:
            push(ev, (t + (tx_a + tx_b * P), self.seq, hop, (src, plan, P, train, False)))
            return t
        first = [(t + (tx_a + tx_b * P), self.seq, P)]
        costs, lat, wr_done = nd.kvs_costs, nd.kv_lat, nd.wr_done
        eng, rd_free, busy, comm_busy, ddr = nd.eng, nd.rd_free, nd.busy, nd.comm_busy, nd.ddr_cycles
        bk, cbk = nd.by_kind, nd.comm_by_kind
        k_busy, k_comm = bk["kvs"], cbk["kvs"]
        k_wait, kc_wait = bk.get("kvs wait"), cbk.get("kvs wait")
        seq = self.seq
        per = collections.Counter()
        for n in ntoks[1:]:
            got = costs.get(n)
            if got is None:
                nd.kvs_cost(n)
                got = costs[n]
            c, _by, extra = got[0]
            per[n] += 1
            at = wr_done if wr_done > rd_free - lat else rd_free - lat
            ddr += extra
            start = eng if eng > h else h
            if at > start:
                wait = at - start
                busy += wait
                ddr += wait
                comm_busy += wait
                kc_wait = (0.0 if kc_wait is None else kc_wait) + wait
                k_wait = (0.0 if k_wait is None else k_wait) + wait
                start = at
            t = eng = start + c
            busy += c
            k_busy += c
            comm_busy += c
            k_comm += c
            if t > rd_free:
                rd_free = t
            P = 8 + n * rb
            seq += 1
            first.append((t + (tx_a + tx_b * P), seq, P))
        self.seq = seq
        # the packets' first hops are events (time, number) as send() makes them; only the next
        # one waits on the heap (a smaller heap, the same order: the train's own in (time, number))
        first.sort()
        push(ev, (first[0][0], first[0][1], self._first_hop, ([0, first, src, plan, train],)))
        nd.eng, nd.rd_free, nd.busy, nd.comm_busy, nd.ddr_cycles = eng, rd_free, busy, comm_busy, ddr
        bk["kvs"], cbk["kvs"] = k_busy, k_comm
        if kc_wait is not None:
            cbk["kvs wait"] = kc_wait
        if k_wait is not None:
            bk["kvs wait"] = k_wait
        nd.counts["kvs"] += len(ntoks) - 1
        pb = nd.port_bytes
        for n, m in per.items():
            (_c, by_ch, _e), skey = costs[n]
            nd.shapes[skey] = nd.shapes.get(skey, 0) + m
            for ch, b in by_ch.items():
                pb[ch] += b * m
        return t

    def _first_hop(self, t, state):
        """A train's next packet at its source (``send_train``); queues the one after it."""
        i, first, src, plan, train = state
        P = first[i][2]
        i += 1
        if i < len(first):
            state[0] = i
            heapq.heappush(self.events, (first[i][0], first[i][1], self._first_hop, (state,)))
        self._hop(t, src, plan, P, train, False)

    def deliver_to(self, key):
        """An ``arrive`` callback: the packet lands in the inbox of ``(d,) + key``."""
        return lambda t, d: self.land(t, (d,) + key)

    def land(self, t, key):
        self.inbox.setdefault(key, []).append(t)
        self.check(key[0], t)

    def block(self, n, key, count, h):
        self.blocked[n] = (key, count, h)
        self.check(n, h)

    def check(self, n, now):
        """Wake node n (at ``now``, quantized to a host step) if what it waits for is all there."""
        b = self.blocked.get(n)
        if b is None:
            return
        key, count, _h = b
        got = self.inbox.get(key, ())
        if len(got) >= count:
            del self.blocked[n]
            self.inbox[key] = got[count:]
            self.at(self.q(now), "wake", n)


def predict(program, params: dict | None = None, *, chunk: int = 64, per_packet: bool = False,
            coarse: bool = False) -> Prediction:
    """Predicted cycles of ``program`` on the cluster described by ``params`` (module docstring).
    ``chunk`` is the mcf_fpga/host/link step of the RTL executor (``run_rtl(chunk=...)``); 1 models an
    ideal host with no step quantization (board figures). ``per_packet``: compile every KVS in
    full and make each install packet's arrival an event of its own (the same prediction, slower:
    the reference tests/host/test_perfmodel_fast.py compares the default against). ``coarse``: a
    KV unit's install packets cross each link as one train (``host.perfmodel_coarse``: a screening
    model, faster at paper scale and not exact; docs/perfmodel.md gives its measured error)."""
    P = params or load_params()
    _WAKE = "wake"
    mp = P["link"]["max_payload"]
    nodes = [_Node(n, program, P, mp) for n in range(program.nodes)]
    if coarse and per_packet:
        raise ValueError("predict: coarse and per_packet are two different link models; pick one")
    net = _Net(program, P, chunk, trains=not per_packet, coarse=coarse)
    from mcf_fpga.host.compiler import compile_program
    rid = collections.defaultdict(int)         # route ids: not timed
    comps = compile_program(program, model_node_config(program, P), rid_max=rid, rid_sum=rid,
                            kvs_shapes=not per_packet)
    gens = {nd.node: _drive(nd, program, net, comps[nd.node]) for nd in nodes}
    started = set()
    for n in gens:
        net.at(0.0, "wake", n)
    while net.events:
        t, _s, fn, args = heapq.heappop(net.events)
        if fn is not _WAKE:
            fn(t, *args)
            continue
        n = args[0]
        g = gens[n]
        try:
            ev = g.send(t) if n in started else next(g)
            started.add(n)
        except StopIteration:
            continue
        if ev[0] == "at":
            net.at(max(ev[1], t), "wake", n)
        elif ev[0] == "rx":
            net.block(n, ev[1], ev[2], t)
        else:
            raise AssertionError(ev)
    if net.blocked:
        raise RuntimeError(f"perfmodel: nodes {sorted(net.blocked)} wait for messages that are never sent "
                           f"({ {m: k for m, (k, _c, _h) in net.blocked.items()} })")
    first = [nd for nd in nodes if nd.t_logits is not None]
    lead = nodes[program.leader]
    dec = (lead.t_tokens[-1] - first[0].t_logits) if lead.t_tokens and first else None
    for nd in nodes:
        nd.port_bytes[channel("rx")] += net.rx_bytes.get(nd.node, 0)
    return Prediction(ttft_cycles=first[0].t_logits if first else None,
                      prefill_cycles=max(nd.marks.get("prefill_done", 0.0) for nd in nodes),
                      decode_cycles=dec, engine_busy=[nd.busy for nd in nodes],
                      compute_busy=[nd.busy - nd.comm_busy for nd in nodes],
                      timeline=[nd.timeline for nd in nodes], wire_bytes=net.wire_bytes,
                      port_bytes=[dict(nd.port_bytes) for nd in nodes], ddr_cycles=[nd.ddr_cycles for nd in nodes],
                      instr_counts=[dict(nd.counts) for nd in nodes], kv_wait=[nd.kv_wait for nd in nodes],
                      busy_by_kind=[dict(nd.by_kind) for nd in nodes],
                      comm_by_kind=[dict(nd.comm_by_kind) for nd in nodes],
                      instr_shapes=[dict(nd.shapes) for nd in nodes],
                      host_interactions=[nd.host for nd in nodes],
                      unit_busy=[{u: tuple(v) for u, v in nd.unit_busy.items()} for nd in nodes])


def _qz(t, C):
    return math.ceil(t / C) * C if C > 1 else t


#: KV slots beyond the program's the model's node has (staged units, units that arrive early)
_MODEL_SLOTS = 1 << 16


def model_node_config(program, params: dict):
    """The node configuration the model compiles ``program`` for (``host.compiler``): the engine
    of ``params["engine"]`` and the link's payload size, K/V in DDR and NIC installs as
    ``params["kv"]`` says. The model times a program whatever its memories need: the scratchpad,
    exponent memory, KV memory, staging windows, rows per GEMM and KV slots are not limited here
    (the RTL executor checks them against the real node before it runs anything). The prefill
    fold's slots are chosen from the real scratchpad (``fold_sp_depth``), as the node's compile."""
    from types import SimpleNamespace
    from mcf_fpga.spec.kvregion import KVRegion
    big = 1 << 40
    e = dict(params["engine"], sp_depth=big, em_depth=big, kv_depth=big, t_max=big, nq_max=big,
             blk_max=big, z_max=big, fold_sp_depth=params["engine"]["sp_depth"])
    e.pop("kv_region", None)
    kv = params.get("kv")
    slots = program.n_slots + (_MODEL_SLOTS if kv else 0)    # NIC installs: staged units are pool entries
    if kv:
        cfg = program.model
        unit_max = max(t1 - t0 for t0, t1 in program.units)
        e.update(kv_region=KVRegion(base=0, n_slots=slots + _MODEL_SLOTS,
                                    slot_rows=cfg.num_kv_heads * up_to(unit_max, program.block),
                                    d=cfg.head_dim, kv_bits=program.kv_bits),
                 kv_win_rows=big, kv_n_win=2)
    nic = SimpleNamespace(max_payload=params["link"]["max_payload"], reduce_contexts=big)
    return SimpleNamespace(engine=e, nic=nic, kv_slots=slots, kv_install=bool(kv) and kv["install"] == "nic")


_VEC_NAMES = {v: k.lower() for k, v in vars(VecOp).items() if k.isupper() and isinstance(v, int)}


def _att_pair_shape(f, final, e) -> dict:
    """``{"pair": 0/1}`` of an ATT / FOLD on an ``att_pairs`` engine ``e`` (its rows go two words a
    cycle when each starts at an even word: ``dst`` even, a finalized row's stride ``so`` even),
    else ``{}``."""
    if not (e or {}).get("att_pairs"):
        return {}
    return {"pair": int(f["dst"] % 2 == 0 and (not final or f["so"] % 2 == 0))}


def _kind_shape(f, e=None) -> tuple:
    """(cost kind, shape) of one compiled engine instruction (``INSTR`` fields) on engine ``e``
    (its keys that change a shape: ``emit_pairs``, ``spw_pairs``, ``att_pairs``; with ``spw_pairs`` both the
    stream loader and the host's ``s_axis_sp`` bring SP words two a beat, ``hdl.host_sp``)."""
    op = f["op"]
    rows = f["n0"] * max(1, f["n1"])
    if op == EngineOpcode.VEC:
        return "vec_" + _VEC_NAMES[f["sub"]], {"rows": rows, "len": f["len"]}
    if op == EngineOpcode.GEMM:
        return "gemm", {"T": f["n0"], "K": f["len"], "N": f["n1"], "reuse": int(GemmFlags.unpack(f["flags"]).reuse)}
    if op == EngineOpcode.ATT:
        acc = {"acc": 1} if f["sub"] & 2 else {}        # ATT acc (the running prefill fold)
        return "att", {"rows": rows, "keys": f["ntok"], **acc, **_att_pair_shape(f, AttFlags.unpack(f["flags"]).final, e)}
    if op == EngineOpcode.FOLD:
        final = FoldFlags.unpack(f["flags"]).final
        return "fold", {"rows": rows, "parts": rows * f["nblk"], "final": int(final), **_att_pair_shape(f, final, e)}
    if op == EngineOpcode.KVW:
        return "kvw", {"rows": rows, "len": f["len"]}
    if op == EngineOpcode.EMIT:
        if not (e or {}).get("emit_pairs"):
            return "emit", {"n0": rows}
        fl = EmitFlags.unpack(f["flags"])
        # SP words at an even address, an even count per row (and an even stride across rows):
        # two a beat with the engine's emit_pairs
        pair = not fl.em and not fl.packed and f["a"] % 2 == 0 and f["n0"] % 2 == 0 and (f["so"] % 2 == 0 or f["n1"] <= 1)
        return "emit", {"n0": rows, "pair": int(pair)}
    if op == EngineOpcode.SPW and (e or {}).get("spw_pairs"):
        # SP words (not packed) to an even address, an even count: two a cycle with spw_pairs
        # (a feed's words come in pair beats from its first)
        fl = SpwFlags.unpack(f["flags"])
        return "spw", {"n0": f["n0"], "pair": int(not fl.em and not fl.packed and f["dst"] % 2 == 0 and f["n0"] % 2 == 0)}
    if op in (EngineOpcode.SPW, EngineOpcode.SPR):
        return ("spw" if op == EngineOpcode.SPW else "spr"), {"n0": f["n0"]}
    raise ValueError(f"perfmodel: engine instruction {op} is not modelled")


def _emit_bytes(f) -> int:
    """Payload bytes of one EMIT: packed values (flags.1) or int32 words."""
    if EmitFlags.unpack(f["flags"]).packed:
        return f["n0"] * (f["bits"] or 16) // 8
    return 4 * f["n0"] * max(1, f["n1"])


def _by_op(stream) -> list:
    """A node's compiled stream cut into the records of each program op."""
    out, cur = [], []
    for r in stream:
        if isinstance(r, C.OpDone):
            out.append(cur)
            cur = []
        else:
            cur.append(r)
    return out


def _drive(nd, p, net, comp):
    """Generator: runs node ``nd``'s compiled stream (``comp``, a ``host.compiler.NodeCompiler``); yields ("at", t) to
    resume at host time t, ("rx", key, count) to wait for packets; receives the host time it
    resumes at. Engine instructions are timed as queued (host time ``h``); the program op of a
    record says where its packets go (``send``) and which message a wait is for."""
    h = 0.0
    C_ = net.chunk
    kvlat = net.params.get("kvpool_cycles", 3.0)
    nic = bool(nd.kv) and nd.kv["install"] == "nic"          # received KV installed by the NIC
    win = comp.ddr.win_rows if comp.ddr is not None else None     # an ATT's window: kvb // win
    hp = nd.params.get("host", {})
    host_lat = hp.get("interaction_cycles", 0.0)
    fetched = hp.get("fetched", False)                        # the node's fetcher serves its part
    from mcf_fpga.host.node_image import node_served                   # ... its RX placer and picker
    served = node_served(comp, hp.get("rx", False), hp.get("pick_slots", 0))
    placed = {id(comp.stream[i]) for i in served}             # by record (the ops' record lists)
    starts = [t0 for t0, _t1 in p.units]                      # _op_unit: the unit of a row

    def kv_wait(h):
        # the directory answers within a few cycles; the host sees it at the next step
        return ("at", _qz(h + kvlat, C_))

    for idx, (op, recs) in enumerate(zip(p.ops[nd.node], _by_op(comp.stream))):
        start = h
        b0, c0 = nd.busy, nd.comm_busy
        t = None
        route = arrive = None
        if isinstance(op, Send):
            if op.part:
                key = (op.what, nd.node, op.layer, op.unit)
            elif op.what == "kv":
                key = ("kv", nd.node, op.layer, op.unit)
            elif op.what == "token":
                key = ("token", nd.node, 0, 0)
            else:
                key = (op.what, nd.node, op.layer, 0)
            route, arrive = net.route(nd.node, op.dsts), net.deliver_to(key)
        nd.comm = isinstance(op, Recv)          # received words' SPW and KVW count as communication
        full = nd.win_full                      # a load may be queued an op ahead (DdrKV.preload)
        emits = 0
        root = group = None
        if isinstance(op, AllReduce):
            root, group = op.root, tuple(op.dsts)
            if nd.node == root and p.stats.get("w_only"):     # contributes nothing; the holders are the others
                group = tuple(g for g in group if g != root)
        prev = None
        for r in recs:
            if id(r) not in placed and C.host_serves(r, prev, fetched):
                nd.host += 1                 # a host interaction (host.compiler.host_interactions)
                h += host_lat
            prev = r
            if isinstance(r, C.Ins):
                f = r.fields
                o = f["op"]
                if o == EngineOpcode.KVL:
                    full[f["dst"]] = nd.kvl(f["ntok"], h)
                elif o == EngineOpcode.KVS:
                    # a unit's install packets (C.KvsRun: their record counts): the NIC installs
                    # them, the receiver waits for all of them (_Train: one arrival per receiver)
                    ntoks = f["ntoks"] if type(r) is C.KvsRun else (f["ntok"],)
                    if nic and net.coarse and net.simple(route):
                        t = send_unit(net, nd, ntoks, h, route, key)
                    elif nic and net.trains and net.simple(route):
                        t = net.send_train(nd, ntoks, h, route, _Train(key, len(ntoks)))
                    else:
                        for n in ntoks:
                            t = nd.kvs(n, h)
                            net.send(nd.node, route, 8 + n * nd.row_bytes, t, arrive, ring=not nic)
                elif o == EngineOpcode.ATT and nd.kv:
                    t = nd.run("att", _kind_shape(f, nd.params["engine"])[1], h, at=full.pop(f["kvb"] // win))
                else:
                    kind, shape = _kind_shape(f, nd.params["engine"])
                    t = nd.run(kind, shape, h)
                    if o == EngineOpcode.EMIT:
                        P = _emit_bytes(f)
                        if isinstance(op, AllReduce) and op.name == "max":
                            _reduce(net, ("max", op.layer, 0), nd.node, root, group, P, t, group)
                        elif isinstance(op, AllReduce):
                            emits += 1
                            _reduce(net, ("sum", op.layer, emits), nd.node, root, group, P, t, (root,))
                        else:
                            net.send(nd.node, route, P, t, arrive)
            elif isinstance(r, C.KvCmd):
                h = yield kv_wait(h)
            elif isinstance(r, C.Recv):
                kind = "kv" if op.what == "kv" else op.what
                key = (nd.node, kind, op.peer, op.layer, op.unit if (op.what == "kv" or op.part) else 0)
                h = yield ("rx", key, len(r.sizes))
            elif isinstance(r, C.WaitInstalled):
                # the NIC's installer writes the records to the slot (HP2.wr, store and forward)
                # and commits the unit after the last packet's B response; no host, no engine
                runs = r.packets
                h = yield ("rx", (nd.node, "kv", op.peer, op.layer, op.unit), len(runs))
                nd.port_bytes[channel("install")] += sum(runs) * nd.row_bytes
                rate = nd.ports.port_bytes_per_cycle if nd.ports else HP_BYTES
                tail = runs[-1] * nd.row_bytes / rate + nd.coef("kvfence", {})
                h = yield kv_wait(h + tail)                       # COMMIT_INSTALL, seen by the host
            elif isinstance(r, C.RecvMax):
                h = yield ("rx", (nd.node, "max", op.layer, 0), 1)
            elif isinstance(r, C.RecvSum):
                for j in range(len(r.keys)):
                    h = yield ("rx", (nd.node, "sum", op.layer, 1 + j), 1)
            elif isinstance(r, (C.Logits, C.DLogits, C.TpLogits, C.RecvToken, C.Pick)):
                h = yield ("at", _qz(t, C_))                     # the host reads the SPR's words
                if isinstance(r, C.Logits) and r.rows[1] == p.prompt_len:
                    nd.t_logits = h
                elif isinstance(r, (C.DLogits, C.Pick)):
                    nd.t_tokens.append(h)
            elif isinstance(r, C.Mark):
                nd.marks[r.name] = h
            # weights, embedding and RoPE rows, received words: fed while the engine runs
        nd.comm = False
        nd.timeline.append((idx, op.kind, start, nd.eng))
        if nd.busy != b0:
            u = _op_unit(op, starts, p.prompt_len)
            got = nd.unit_busy.get(u) or nd.unit_busy.setdefault(u, [0.0, 0.0])
            got[0] += (nd.busy - nd.comm_busy) - (b0 - c0)
            got[1] += nd.comm_busy - c0


def _op_unit(op, starts, prompt_len):
    """The prefill unit (chunk) a program op works for: a KV message's ``unit``, a prefill op's
    ``unit`` or the unit holding the first of its prompt ``rows`` (``starts``: the units' first
    tokens); None for the rest (decode, tensor-parallel messages, reference counts)."""
    if isinstance(op, (Send, Recv)):
        return op.unit if op.what == "kv" else None
    u = getattr(op, "unit", None)
    if u is not None:
        return u
    rows = getattr(op, "rows", None)
    if rows is None or not starts or not starts[0] <= rows[0] < prompt_len:
        return None
    return bisect.bisect_right(starts, rows[0]) - 1


def _reduce(net, key, member, root, group, P, t_emit, outs):
    """A member's contribution to a NIC all-reduce: its packet goes to every node of ``outs``
    (every member for the max, the root for the partial sums), whose NIC merges the group's
    contributions; the merged packet is there ``red(P)`` after the last one arrived."""
    def arrive(t, d):
        got = net.reds.setdefault(key, {}).setdefault(d, [])
        got.append(t)
        if len(got) == len(group):         # complete (the next decode step reuses the key)
            del net.reds[key][d]
            net.at(t + net.f(net.red_lin, P), net.land, (d,) + key)
    for d in outs:
        if member == d:
            net.at(t_emit + net.f(net.tx, P), arrive, d)
        else:
            net.send(member, net.route(member, [d]), P, t_emit, arrive)


def batch_cycles(params: dict, items, model, kv_bits: int = 8) -> float:
    """Cycles from queueing one batch of instructions ``[(kind, shape)]`` on an idle node of
    ``params`` (model shape ``model``: head_dim and KV heads) until the last retires; with K/V in
    DDR (``kv_in_ddr``) every ATT gets its KVL as the executor queues it. The calibration checks
    the K/V-in-DDR mechanism with it."""
    from types import SimpleNamespace
    nd = _Node(0, SimpleNamespace(model=model, kv_bits=kv_bits, block=16), params, params["link"]["max_payload"])
    return nd.batch(list(items), 0.0)


def compute_only(pred: Prediction) -> float:
    """Compute-only lower bound of a prediction: its compute instructions (everything but EMIT
    and the SPW/KVW of received data) spread evenly over the nodes, with free communication."""
    return sum(pred.compute_busy) / len(pred.compute_busy)


def kr260_setup(link: str = "sfp10g", clock_hz: float = 200e6, base: dict | None = None,
                kr260: str | None = KR260_CALIBRATION, kv: str = "ddr"):
    """(HardwareConfig, model parameters, engine parameters) of a KR260 node at paper scale:
    the KR260 engine (``hdl.compute.engine.KR260``), ``link`` rates, DDR-fed weights, every DDR
    byte charged on the node's HP ports (``params["ddr"]``: 16 B/cycle per channel,
    ``HardwareConfig.ddr_bytes_per_cycle`` in total) and a DDR-backed propagation buffer (the
    planners only check it). ``kv="ddr"`` (the ``node-kr260`` build, ``kr260_ddr_engine``): K/V
    in the DDR region (``kv_in_ddr``: KVL per ATT, sends with KVS, received units installed by the
    NIC over HP2.wr); ``kv="onchip"``: the ``node-kr260-onchip`` build (K/V in the attention
    unit's memories, sends by EMIT, received units by host SPW + KVW). The instruction costs are
    the RTL calibration (``load_params``) re-evaluated at the KR260 shapes, except the kinds
    refitted on a KR260-sized node in ``kr260`` (``scripts/check_kr260_costs.py``), when that file
    exists: its ``instr`` (GEMM, FOLD) and, with ``kv="ddr"``, its ``kv_ddr`` section (ATT from a
    window, KVW, KVL, KVS, loads, fence, measured on the ``node-kr260`` node; a refit of the on-chip
    node has no such section and its ATT stands for the DDR engine's). ``P["instr_source"]`` says
    which is which, ``P["kr260_refit"]`` whether the tree still generates the node it was measured
    on (``host.rtl_source.freshness``: current, stale or unknown, and why)."""
    if kv not in ("ddr", "onchip"):
        raise ValueError(f"kr260_setup: kv={kv!r}, expected 'ddr' or 'onchip'")
    from mcf_fpga.hdl.compute.engine import KR260
    from mcf_fpga.host.config import HardwareConfig
    engine = dict(KR260)
    hw = HardwareConfig.kr260(link=link, clock_hz=clock_hz, macs_per_cycle=engine["pn"] * engine["pk"],
                              kv_buffer_bytes=1 << 28)
    P = engine_params(base if base is not None else load_params(), engine,
                      link_bytes_per_cycle=hw.link_bytes_per_cycle, link_latency=hw.link_latency_cycles,
                      ddr_bytes_per_cycle=hw.ddr_bytes_per_cycle, port_bytes_per_cycle=hw.port_bytes_per_cycle,
                      weight_lanes=hw.weight_ports)
    P["instr_source"] = {k: "simulated node, extrapolated" for k in P["instr"]}
    if kv == "ddr":
        P = kv_in_ddr(P)
        P["instr_source"].update({k: "simulated DDR node, extrapolated" for k in P["kv_ddr"]["instr"]})
    if kr260 and os.path.exists(kr260):
        with open(kr260) as f:
            meas = json.load(f)
        P["instr"] = dict(P["instr"], **meas["instr"])
        src = f"KR260 node (RTL {meas.get('rtl_commit', '?')})"
        P["instr_source"].update({k: src for k in meas["instr"]})
        if kv == "ddr" and "kv_ddr" in meas:
            P["kv_ddr"] = dict(P["kv_ddr"], instr=dict(P["kv_ddr"]["instr"], **meas["kv_ddr"]["instr"]))
            P["instr_source"].update({k: f"KR260 DDR node (RTL {meas.get('rtl_commit', '?')})"
                                      for k in meas["kv_ddr"]["instr"]})
        elif kv == "ddr" and "att" in meas["instr"]:
            P["kv_ddr"] = dict(P["kv_ddr"], instr=dict(P["kv_ddr"]["instr"], att=meas["instr"]["att"]))
        P["kr260_refit"] = _refit_freshness(meas)
    return hw, P, engine


def _refit_freshness(meas: dict) -> dict:
    """Whether this tree still generates the node a KR260 refit was measured on (its ``node``)."""
    from mcf_fpga.host.executors.rtl import kr260_refit_node_config
    from mcf_fpga.host.rtl_source import freshness
    if "source_key" not in meas:
        return {"state": "unknown", "why": "the refit records no source", "rtl_commit": meas.get("rtl_commit")}
    state, why = freshness(meas, kr260_refit_node_config(meas.get("node", "onchip")))
    return {"state": state, "why": why, "rtl_commit": meas.get("rtl_commit")}
