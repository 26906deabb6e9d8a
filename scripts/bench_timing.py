#!/usr/bin/env python3
"""Timing estimate of the KR260 engine's units: their slowest register-to-register paths.

Each unit (``bench_engine.UNITS``: the GEMM array, the vector unit, the attention unit with its KV
streamer, at the KR260 DDR engine's parameters) is synthesized alone with Yosys
(``synth_xilinx -family xcup -flatten``) and its netlist walked by ``mcf_fpga.boards.timing``:
for every register (or RAM / DSP input) the slowest path into it, with its logic levels (LUTs,
MUXFs, CARRY8-equivalents) and an estimated delay from ``timing.XCUP_1``'s per-cell and per-net
delays (assumptions for an UltraScale+ -1 part, named in that module; no placement or routing, so
the levels are the robust figure). ``engine`` (``--engine``) synthesizes the whole engine flattened,
its units with it: the figure of record, since a path may run from the engine's logic into a unit
(a command's ``valid`` into the unit's FSM); ``glue`` is the engine's own logic (sequencer, movers,
scratchpad) with the three units as black boxes (paths into and out of a unit end and start at its
ports, taken as registered: the per-unit runs are optimistic by exactly those crossing paths).
The names are ``bench_engine.py``'s.

Prints, per unit, the slowest ``--paths`` paths against the design's 200 MHz (5 ns) and 300 MHz
(3.33 ns) and writes ``results/engine_timing.json`` (each unit stamped with its Verilog's SHA-256
and the commit; a unit whose record is current is not synthesized again unless ``--force``).
Yosys takes tens of minutes per unit at KR260 size on this 2-core machine (the whole engine ~30;
``--quick``: the simulated node's engine, minutes); a KR260 unit's run (GEMM, vector, attention)
also refreshes its record in ``results/engine_resources.json`` (``bench_engine.py``'s; the engine's
and the glue's records there are ``bench_engine.py --synth``'s, ABC9). The LAST line: the slowest
path's estimate and the unit's estimated fmax.
"""
import argparse
import dataclasses
import functools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from bench_engine import RESOURCES_JSON, TIMING_JSON, UNITS, git_commit, kr260_unit, save_unit, verilog_sha256
from mcf_fpga.boards import timing
from mcf_fpga.boards.utilisation import count_resources, yosys_command

UNIT_NAMES = tuple(u for u in UNITS if u not in ("engine", "glue"))   # the default run: the three units
RECORDED = UNIT_NAMES       #: runs whose cell counts refresh bench_engine's resource record
#: pieces of a unit timed alone, and variants (no resource record): the GEMM's requantizer alone in
#: one stage and in four (``GemmRequantizer(stages=4)``, the KR260 preset's ``rq_stages=4``); the
#: units as they were before the KR260 preset took the pipelined ones (2026-12-05), for comparison:
#: (unit, engine options) -- the one-stage attention unit (with its KV streamer, ``att_pipelined``
#: off) and the GEMM array with its one-stage requantizer and dot products; the GEMM's adder tree 8
#: terms a stage and the whole engine without the cuts that cost cycles (the preset before
#: 2026-12-07's cycle-changing round); and a design option not in the preset: the attention unit at
#: two query rows per cycle (``att_rows=2``)
VARIANTS = {"attention-1stage": ("attention", {"att_pipelined": False}),
            "gemm-1stage": ("gemm", {"rq_stages": 1, "mac_pipelined": False}),
            # the dot products' adder tree 8 terms a stage (one stage less than the preset's 4)
            "gemm-tree8": ("gemm", {"mac_tree_arity": 8}),
            "attention-pairs": ("attention", {"att_rows": 2}),
            # the whole engine without the cuts that change cycles: the GEMM's adder tree 8 terms a
            # stage, EMIT into o_out as it empties, the row's bit length in one cycle, the vector
            # command checked as it is taken
            "engine-cycles": ("engine", {"mac_tree_arity": 8, "att_emit_on_empty": False, "vec_bitlen_stages": 1,
                                         "vec_cmd_stage": False})}
PARTS = ("requant", "requant4") + tuple(VARIANTS)
TARGETS_MHZ = (200, 300)


def unit(name, quick):
    """The Elaboratable of unit ``name`` (the whole engine for ``"engine"`` and ``"glue"``; the glue's
    units are black-boxed at synthesis, :func:`verilog_of`)."""
    from mcf_fpga.host.executors.rtl import SIM_ENGINE
    if name in VARIANTS:
        from mcf_fpga.hdl.compute.engine import kr260_ddr_engine
        base_unit, options = VARIANTS[name]
        return kr260_unit(base_unit, {**(SIM_ENGINE if quick else kr260_ddr_engine()), **options})
    if name in PARTS:           # the requantizer alone
        from mcf_fpga.hdl.compute.gemm_requant import GemmRequantizer
        g = kr260_unit("gemm", SIM_ENGINE if quick else None)
        return GemmRequantizer(g.pn, g.rq_lanes, g.fifo_depth, stages=4 if name == "requant4" else 1)
    return kr260_unit(name, SIM_ENGINE if quick else None)


@functools.lru_cache(maxsize=None)
def verilog_of(name, quick):
    """(module name, Verilog text, black-boxed module names)."""
    from amaranth.back import verilog
    from mcf_fpga.hdl.dsp48e2 import XCUP
    mod = f"{'sim' if quick else 'kr260'}_{name.replace('-', '_')}"
    text = verilog.convert(unit(name, quick), name=mod, platform=XCUP, emit_src=False)
    boxes = []
    if name == "glue":             # the units' modules, as Amaranth names them under the engine
        boxes = [f"{mod}.{sub}" for sub in ("gemm", "vec", "att") if f"module {mod}.{sub}(" in text
                 or f"module \\{mod}.{sub} " in text]
    return mod, text, boxes


def measure(name, quick, timeout, say):
    mod, text, boxes = verilog_of(name, quick)
    work = Path(tempfile.mkdtemp(prefix=f"mcf-timing-{name}-"))
    (work / f"{mod}.v").write_text(text)
    say(f"Yosys {name} ({len(text) // 1024} KiB Verilog{', units black-boxed: ' + ' '.join(boxes) if boxes else ''}; "
        f"work dir {work}) ...")
    t0 = time.monotonic()
    net = timing.netlist([f"{mod}.v"], mod, str(work), timeout=timeout, blackbox=boxes)
    paths, ends = timing.analyse(net, mod, n=25)
    seconds = round(time.monotonic() - t0)
    if not quick and name in RECORDED:    # the same synthesis: bench_engine's resource record
        used = count_resources(net["stat"]).used
        save_unit(RESOURCES_JSON, name, dict(
            verilog_sha256=verilog_sha256(text), commit=git_commit(), date=time.strftime("%Y-%m-%d"),
            hierarchical=False, yosys=" ".join(yosys_command()) + " (bench_timing: -noiopad -noclkbuf)",
            measured=True, used=used, seconds=seconds))
        say(f"  {name}: resources recorded in {RESOURCES_JSON.name}: " + ", ".join(f"{r} {v:g}" for r, v in used.items()))
    return dict(verilog_sha256=verilog_sha256(text), commit=git_commit(), date=time.strftime("%Y-%m-%d"),
                quick=quick, seconds=seconds, black_boxes=boxes, used=count_resources(net["stat"]).used,
                delays=dataclasses.asdict(timing.XCUP_1), ends=len(ends),
                ends_over={str(f): sum(1 for t in ends.values() if t > 1000 / f) for f in TARGETS_MHZ},
                over_by_block=timing.over_by_block(ends, 1000 / TARGETS_MHZ[0]),
                paths=[dict(delay_ns=p.delay_ns, levels=p.levels, luts=p.luts, carries=p.carries, muxf=p.muxf,
                            dsps=p.dsps, start=p.start, end=p.end, cells=" ".join(p.cells), via=" > ".join(p.via))
                       for p in paths])


def show(name, rec, n, say):
    say(f"\n{name}: slowest {n} paths (Yosys {rec['seconds']} s, {rec['date']}, commit {rec['commit']})")
    if rec.get("ends_over"):   # every end signal, not only the recorded paths (records since 2026-12-07)
        say(f"  end signals (registers, memories, outputs) {rec['ends']}: "
            + ", ".join(f"{v} slower than {f} MHz" for f, v in rec["ends_over"].items()))
    if rec.get("over_by_block"):   # where those slower than the first target sit (records since 2026-12-07)
        say(f"  slower than {TARGETS_MHZ[0]} MHz by block (count, worst ns): "
            + ", ".join(f"{b} {c} ({w:.2f})" for b, (c, w) in rec["over_by_block"].items()))
    if rec.get("used"):        # this synthesis's cells (Yosys's default ABC mapper, not bench_engine's ABC9)
        say("  cells (this synthesis, default ABC LUT mapping): " + ", ".join(f"{r} {v:g}" for r, v in rec["used"].items()))
    say(f"  {'ns':>6} {'levels':>6} {'LUT':>4} {'CARRY8':>6} {'MUXF':>4} {'DSP':>3}  "
        + "  ".join(f"slack@{f}" for f in TARGETS_MHZ) + "  start -> end")
    for p in rec["paths"][:n]:
        slack = "  ".join(f"{1000 / f - p['delay_ns']:+9.2f}" for f in TARGETS_MHZ)
        say(f"  {p['delay_ns']:6.2f} {p['levels']:6d} {p['luts']:4d} {p['carries']:6d} {p['muxf']:4d} {p['dsps']:3d}  "
            f"{slack}  {p['start']} -> {p['end']}")
        if p.get("via"):       # the design's signals on the way (most nets are Yosys's after mapping)
            say(f"  {'':>47}via {p['via']}")


#: every name the command line takes
RUNS = UNIT_NAMES + ("engine", "glue") + PARTS


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    # no ``choices``: argparse checks an empty positional list against them and refuses the default run
    ap.add_argument("units", nargs="*", metavar="UNIT",
                    help=f"default: {' '.join(UNIT_NAMES)}; engine: the whole engine flattened, glue: its own "
                         f"logic, units black-boxed (requant, requant4: the GEMM's requantizer alone, "
                         f"one stage and pipelined); variants: {', '.join(VARIANTS)} (VARIANTS)")
    ap.add_argument("--engine", action="store_true", help="also the whole engine, flattened (the figure of record)")
    ap.add_argument("--quick", action="store_true", help="the simulated node's engine (smaller, minutes)")
    ap.add_argument("--paths", type=int, default=8, help="paths printed per unit")
    ap.add_argument("--force", action="store_true", help="synthesize even when the record is current")
    ap.add_argument("--timeout", type=float, default=float(os.environ.get("MCF_SYNTH_TIMEOUT", 3600)),
                    help="seconds per Yosys run (default $MCF_SYNTH_TIMEOUT, which the timeout's message names, or 3600)")
    ap.add_argument("--out", default=str(TIMING_JSON))
    a = ap.parse_args(argv)
    bad = [u for u in a.units if u not in RUNS]
    if bad:
        ap.error(f"unknown unit {', '.join(bad)} (choose from {', '.join(RUNS)})")
    return a


def main(argv=None):
    a = parse_args(argv)
    say = lambda s="": print(s, flush=True)  # noqa: E731
    progress = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    names = list(a.units or UNIT_NAMES) + (["engine"] if a.engine and "engine" not in a.units else [])
    out = Path(a.out)
    rec = json.loads(out.read_text()) if out.exists() else {}
    key = "sim" if a.quick else "kr260"
    units = rec.setdefault(key, {})
    for name in names:
        old = units.get(name)
        if old and not a.force and old["verilog_sha256"] == verilog_sha256(verilog_of(name, a.quick)[1]):
            progress(f"{name}: record current (same Verilog), not synthesized again (--force to redo)")
        else:
            units[name] = measure(name, a.quick, a.timeout, progress)
            # the file as it is now: another run may have recorded its units while Yosys ran
            disk = json.loads(out.read_text()) if out.exists() else {}
            disk.setdefault(key, {})[name] = units[name]
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(disk, indent=1, sort_keys=True) + "\n")
        show(name, units[name], a.paths, say)
    say("\nDelay model (mcf_fpga/boards/timing.py XCUP_1, assumed UltraScale+ -1 figures, no placement): "
        + ", ".join(f"{k} {v} ns" for k, v in dataclasses.asdict(timing.XCUP_1).items()))
    worst = max(((u["paths"][0]["delay_ns"], n, u["paths"][0]) for n, u in units.items() if n in names and u["paths"]),
                default=None, key=lambda x: x[0])
    if worst is None:
        say("no paths")
        return
    ns, name, p = worst
    if all(units[n].get("ends_over") for n in names):    # every end signal counted
        over = {f: sum(units[n]["ends_over"][str(f)] for n in names) for f in TARGETS_MHZ}
        of = f"of {sum(units[n]['ends'] for n in names)} end signals"
    else:                                                # older records: the recorded paths only
        over = {f: sum(1 for n in names for q in units[n]["paths"] if q["delay_ns"] > 1000 / f) for f in TARGETS_MHZ}
        of = f"of the {sum(len(units[n]['paths']) for n in names)} slowest recorded"
    say(f"{ns:.2f} ns slowest estimated path ({name}: {p['levels']} levels, {p['start']} -> {p['end']}), "
        f"fmax ~{1000 / ns:.0f} MHz; paths over 200 MHz: {over[200]}, over 300 MHz: {over[300]} "
        f"({of}, {'simulated' if a.quick else 'KR260'} units)")


if __name__ == "__main__":
    main()
