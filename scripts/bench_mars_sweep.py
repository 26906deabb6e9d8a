#!/usr/bin/env python
"""MARS by search against every baseline over a sweep, from the performance model.

Points: nodes {2, 4, 8, 16} x prompt {2K, 4K, 8K, 16K} x links {sfp10g, rgmii1g} x engine
speed-up {1, 16, 64} (Qwen2.5-1.5B on the KR260, ``perfmodel.kr260_setup``; the speed-up as
bench_paper's what-if applies it, ``perfmodel.engine_params(speedup=...)``). At each point the
baselines (ring, zigzag, PD, as ``host.scenario.build_programs``) and MARS chosen by
``host.mars_search`` are timed by ``perfmodel.predict`` (ideal host; the search screens its
candidates with the coarse model and re-times the best few exactly, ``--no-screen``: all exactly). Writes
``results/mars_sweep.csv`` and ``results/mars_sweep.png`` (best baseline / MARS TTFT per point, a heat map per link and engine speed-up).
``--quick``: the micro model (one layer) on the simulated node's engine at small sizes.
Every program runs the head on the last prompt row only (``Program.logits="last"``, as
bench_paper). The chosen MARS plan's kind is reported per point: ``chunk`` (chunk-per-node MARS
with replication, ``host.mars.plan``), ``group`` (the same on a smaller prefill group) or
``streaming`` (r = 1 with zigzag or contiguous pieces: the baselines' own dataflow, which the
search may pick; then MARS only ties that baseline). The bound target (the issue's): MARS within
1.10x of the compute-only bound wherever the bound is within 1.10x of the best baseline.
Last line: the worst best-baseline/MARS ratio over the sweep, then how many points MARS wins
(never slower; how many of those are strict wins and how many ties).

The CSV is rewritten after every point, each row stamped with ``sweep_stamp()`` (a hash of the
planners' and the model's sources and both calibrations), so a long sweep can be run in parts:
``--resume`` keeps the CSV's rows whose stamp is this tree's and computes only the missing points
(a row of another stamp is stale and computed again); the summary and the PNG cover every point of
the requested grid. ``--jobs N`` computes N points at once (separate processes, the largest first; one job: the
smallest first). A run that would drop rows (stale, or no ``--resume``) first copies the CSV to
``mars_sweep.csv.bak``. ``--table`` computes nothing and prints the CSV's current rows as the
Markdown table of docs/mars.md, then the summary.
"""
from __future__ import annotations

import argparse
import csv
import functools
import hashlib
import json
import os
import shutil
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from mcf_fpga.golden.config import get_config
from mcf_fpga.host import mars_search
from mcf_fpga.host import perfmodel as pm
from mcf_fpga.host.config import HardwareConfig
from mcf_fpga.host.scenario import build_programs

BASELINES = ("ring", "zigzag", "pd")


def setup(quick: bool, link: str, base: dict):
    """(model, hardware, perf params, piece, block) of one link."""
    if quick:
        from mcf_fpga.host.executors.rtl import SIM_ENGINE
        e = dict(SIM_ENGINE)
        hw = HardwareConfig.kr260(link=link, clock_hz=200e6, macs_per_cycle=e["pn"] * e["pk"], kv_buffer_bytes=1 << 28)
        P = pm.kv_in_ddr(pm.engine_params(base, e, link_bytes_per_cycle=hw.link_bytes_per_cycle,
                                          link_latency=hw.link_latency_cycles, ddr_bytes_per_cycle=hw.ddr_bytes_per_cycle,
                                          port_bytes_per_cycle=hw.port_bytes_per_cycle))
        return get_config("micro").replace(num_layers=1), hw, P, 16, 16
    hw, P, _ = pm.kr260_setup(link, 200e6, base)
    return get_config("qwen2.5-1.5b"), hw, P, 256, 256


def point(cfg, hw, P, *, nodes, prompt_len, piece, block, headroom, screen=True):
    """One sweep point: {schedule: TTFT cycles} of the baselines (a baseline that cannot fit is
    left out) and the search result."""
    kw = dict(nodes=nodes, topology="ring", prompt_len=prompt_len, max_new_tokens=1, chunk=piece, block=block,
              kv_headroom=headroom, hw=hw, logits="last")
    out, (_, cluster) = {}, build_programs(cfg, schedules=("mars",), **kw)     # S_node as host.scenario sizes it
    for s in BASELINES:
        try:
            progs, _ = build_programs(cfg, schedules=(s,), **kw)
        except ValueError:
            continue
        out[s] = pm.predict(progs[s], P, chunk=1).ttft_cycles
    res = mars_search.search(cfg, cluster, hw, prompt_len, 1, perf=P, base_chunk=piece, block=block,
                             logits="last", screen=screen)
    return out, res


def plot(path, rows):
    """A heat map per link (rows of panels) and engine speed-up (columns): node count across, prompt
    length down, each cell best baseline / MARS TTFT with the plan kind ("s" streaming, "g" group).
    Red would be a point MARS loses; one shared colour scale."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm
    links, xs, Ns, Ss, by = grid(rows)
    top = max(float(r["best_baseline_over_mars"]) for r in rows)
    norm = LogNorm(vmin=1 / max(top, 1.01), vmax=max(top, 1.01))
    fig, axes = plt.subplots(len(links), len(xs), figsize=(3.1 * len(xs) + 1, 2.6 * len(links) + 0.6),
                             squeeze=False)
    for i, link in enumerate(links):
        for j, x in enumerate(xs):
            ax = axes[i][j]
            ratios = [[float("nan")] * len(Ns) for _ in Ss]
            for a, S in enumerate(Ss):
                for b, n in enumerate(Ns):
                    r = by.get((link, x, n, S))
                    if r is None:
                        continue
                    v = float(r["best_baseline_over_mars"])
                    ratios[a][b] = v
                    mark = {"streaming": " s", "group": " g"}.get(r["mars_kind"], "")
                    ax.text(b, a, f"{v:.2f}{mark}", ha="center", va="center", fontsize=7,
                            color="w" if v > 2.2 else "k")
            im = ax.imshow(ratios, cmap="RdYlGn", norm=norm, aspect="auto")
            ax.set_xticks(range(len(Ns)), [str(n) for n in Ns], fontsize=7)
            ax.set_yticks(range(len(Ss)), [prompt_label(S) for S in Ss], fontsize=7)
            ax.set_title(f"{LINK_NAMES.get(link, link)}, engine x{x}", fontsize=8)
            if i == len(links) - 1:
                ax.set_xlabel("nodes", fontsize=7)
            if j == 0:
                ax.set_ylabel("prompt", fontsize=7)
    bar = fig.colorbar(im, ax=axes, shrink=0.8, label="best baseline / MARS TTFT")
    ticks = [t for t in (0.5, 1, 1.5, 2, 3, 4, 6) if norm.vmin <= t <= norm.vmax]
    bar.set_ticks(ticks, labels=[f"{t:g}" for t in ticks])
    bar.minorticks_off()
    fig.suptitle("MARS by search against the best of ring, zigzag and PD (s: streaming plan, g: group)",
                 fontsize=9)
    fig.savefig(path, dpi=120)
    plt.close(fig)


@functools.lru_cache(maxsize=None)
def base_params() -> dict:
    """The simulated nodes' calibration, loaded once (the stamp and every point use this one, even
    if an hdl source changes and the file is recalibrated while a sweep runs)."""
    return pm.load_params()


#: the KR260 refit's provenance (which RTL it was measured on, how long it took): not what a sweep
#: row depends on -- a refit of a changed node that measures the same cycles keeps the stamp
REFIT_PROVENANCE = ("rtl_commit", "seconds", "source_key", "verilog_sha256", "verilog_sha256_note")


def _rounded(x):
    """``x`` with every float to 9 significant digits: a refit's least-squares coefficients differ
    in their last bits from run to run on the same measurements."""
    if isinstance(x, float):
        return float(f"{x:.9g}")
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_rounded(v) for v in x]
    return x


def sweep_stamp() -> str:
    """What a sweep row depends on: the sources of ``mcf_fpga/host`` and ``mcf_fpga/golden`` (the
    planners, the search, the model, the configurations), the calibration's parameters (not its
    timing or source keys: a recalibration to the same figures keeps the stamp) and the KR260
    refit's (its measurements, fits and node configuration, not :data:`REFIT_PROVENANCE`); floats
    to 9 significant digits (16 hex digits)."""
    root = Path(pm.REPO)
    files = sorted((root / "mcf_fpga" / "host").rglob("*.py")) + sorted((root / "mcf_fpga" / "golden").rglob("*.py"))
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    params = {k: v for k, v in base_params().items() if k not in ("calibration_seconds", "source")}
    h.update(json.dumps(_rounded(params), sort_keys=True).encode())
    refit = Path(pm.KR260_CALIBRATION)
    if refit.exists():
        kr = {k: v for k, v in json.loads(refit.read_text()).items() if k not in REFIT_PROVENANCE}
        h.update(b"kr260\0" + json.dumps(_rounded(kr), sort_keys=True).encode())
    return h.hexdigest()[:16]


def key(row) -> tuple:
    return (row["link"], int(row["speedup"]), int(row["nodes"]), int(row["prompt_len"]))


def grid(rows):
    """The sweep's axes (links, 10 Gb/s first; speed-ups; node counts; prompt lengths) and its rows by
    :func:`key`: what the table and the plot lay out."""
    return (sorted({r["link"] for r in rows}, key=lambda x: x != "sfp10g"), sorted({int(r["speedup"]) for r in rows}),
            sorted({int(r["nodes"]) for r in rows}), sorted({int(r["prompt_len"]) for r in rows}),
            {key(r): r for r in rows})


def prompt_label(S):
    return f"{S // 1024}K" if S % 1024 == 0 else str(S)


def sweep_row(quick, link, x, N, S, headroom, screen, stamp, base) -> dict:
    """One point of the sweep as a CSV row (computed in a worker process with ``--jobs``); ``base``:
    the calibration the stamp was made with."""
    cfg, hw, P0, piece, block = setup(quick, link, base)
    P = pm.engine_params(P0, P0["engine"], speedup=x) if x != 1 else P0
    t = time.time()
    ttft, res = point(cfg, hw, P, nodes=N, prompt_len=S, piece=piece, block=block, headroom=headroom, screen=screen)
    best = min(ttft, key=ttft.get)
    m = res.prediction.ttft_cycles
    bound = pm.compute_only(res.prediction)
    c = res.candidate
    kind = "streaming" if c.kind == "stream" else "group" if c.params.prefill_nodes else "chunk"
    return dict(link=link, speedup=x, nodes=N, prompt_len=S, mars_cycles=round(m),
                **{f"{s}_cycles": (round(ttft[s]) if s in ttft else "") for s in BASELINES},
                best_baseline=best, best_baseline_over_mars=round(ttft[best] / m, 4),
                compute_bound_cycles=round(bound), mars_over_bound=round(m / bound, 4),
                bound_target=("met" if m <= 1.10 * bound else "missed") if bound * 1.10 >= ttft[best] else "n/a",
                mars_kind=kind, mars_plan=c.label(), candidates=len(res.report), skipped=res.skipped,
                search_s=round(res.seconds, 1), point_s=round(time.time() - t, 1), stamp=stamp)


def read_rows(path, stamp, say) -> dict:
    """{point: row} of the CSV at ``path`` whose stamp is ``stamp`` (the others are said stale)."""
    if not os.path.exists(path):
        return {}
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    keep = {key(r): r for r in rows if r.get("stamp") == stamp}
    if len(keep) < len(rows):
        say(f"{path}: {len(rows) - len(keep)} rows of another stamp (stale: sources or calibration changed)")
    return keep


def write_rows(path, rows: dict):
    order = sorted(rows.values(), key=lambda r: (r["link"] != "sfp10g", int(r["speedup"]), int(r["nodes"]),
                                                 int(r["prompt_len"])))
    tmp = path + ".tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(order[0]))
        w.writeheader()
        w.writerows(order)
    os.replace(tmp, path)


def backup_stale(path, rows: dict, say):
    """Before a run first rewrites ``path``: if it holds rows that will not be kept (another stamp,
    or no ``--resume``), the file is copied to ``path + '.bak'`` (hours of points are not lost to a
    source edit or a forgotten ``--resume``)."""
    if not os.path.exists(path):
        return
    with open(path, newline="") as f:
        n = sum(1 for _ in csv.DictReader(f))
    if n > len(rows):
        shutil.copyfile(path, path + ".bak")
        say(f"{path}: {n - len(rows)} rows not kept; the file as it was is in {path}.bak")


LINK_NAMES = {"sfp10g": "10 Gb/s", "rgmii1g": "1 Gb/s"}


def table(rows, say):
    """The sweep as Markdown (docs/mars.md): best baseline / MARS per point, a row per link, speed-up
    and prompt, a column per node count; "(s)" marks a streaming plan (a baseline's dataflow, which
    MARS may also choose), "(g)" a smaller prefill group."""
    links, xs, Ns, Ss, by = grid(rows)
    say("| link | speed-up | prompt | " + " | ".join(f"N={n}" for n in Ns) + " |")
    say("|---|---|---|" + "---|" * len(Ns))
    for link in links:
        for x in xs:
            for S in Ss:
                cells = []
                for n in Ns:
                    r = by.get((link, x, n, S))
                    mark = {"streaming": " (s)", "group": " (g)"}.get(r["mars_kind"], "") if r else ""
                    cells.append(f"{float(r['best_baseline_over_mars']):.3f}{mark}" if r else "-")
                say(f"| {LINK_NAMES.get(link, link)} | x{x} | {prompt_label(S)} | " + " | ".join(cells) + " |")


def summary(rows, seconds, say):
    """The last lines: plans chosen, the bound target, the worst ratio and the wins."""
    ratio = [float(r["best_baseline_over_mars"]) for r in rows]
    worst = min(ratio)
    wins = sum(v >= 1 for v in ratio)
    strict = sum(v > 1 for v in ratio)
    kinds = {k: sum(r["mars_kind"] == k for r in rows) for k in ("chunk", "group", "streaming")}
    bt = [r["bound_target"] for r in rows if r["bound_target"] != "n/a"]
    say(f"sweep of {len(rows)} points ({seconds:.0f} s this run); chosen MARS plans: "
        + ", ".join(f"{v} {k}" for k, v in kinds.items()))
    say(f"bound target (MARS <= 1.10x compute-only bound where the bound is within 1.10x of the best "
        f"baseline): met at {bt.count('met')} of {len(bt)} such points")
    say(f"worst best-baseline/MARS {worst:.3f}; MARS wins {wins}/{len(rows)} points "
        f"({strict} strictly faster, {wins - strict} ties)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="micro model, simulated node, small sizes (< 1 min)")
    ap.add_argument("--out", default=os.path.dirname(pm.DEFAULT_CALIBRATION))
    ap.add_argument("--headroom", type=float, default=2.0, help="S_node over the owner-only minimum (default 2)")
    ap.add_argument("--nodes", help="comma-separated subset of node counts")
    ap.add_argument("--prompts", help="comma-separated subset of prompt lengths")
    ap.add_argument("--links", default="sfp10g,rgmii1g")
    ap.add_argument("--speedups", help="comma-separated subset of engine speed-ups")
    ap.add_argument("--no-screen", dest="screen", action="store_false",
                    help="time every candidate by the exact model (default: screen them with the coarse "
                         "model, the best 4 and the streaming plans exactly; host.mars_search)")
    ap.add_argument("--resume", action="store_true",
                    help="keep the CSV's rows of this tree's stamp and compute only the missing points")
    ap.add_argument("--jobs", type=int, default=1, help="points computed at once (processes)")
    ap.add_argument("--table", action="store_true",
                    help="compute nothing: print the CSV's rows of this tree's stamp as a Markdown table and the summary")
    a = ap.parse_args(argv)
    ints = lambda text, dflt: tuple(int(x) for x in text.split(",")) if text else dflt  # noqa: E731
    Ns = ints(a.nodes, (2, 4) if a.quick else (2, 4, 8, 16))
    Ss = ints(a.prompts, (64, 128) if a.quick else (2048, 4096, 8192, 16384))
    Xs = ints(a.speedups, (1, 64) if a.quick else (1, 16, 64))
    if a.jobs < 1:
        ap.error(f"--jobs {a.jobs}: at least 1")
    os.makedirs(a.out, exist_ok=True)
    csv_path = os.path.join(a.out, "mars_sweep_quick.csv" if a.quick else "mars_sweep.csv")
    say = lambda *x: print(*x, flush=True)  # noqa: E731
    stamp = sweep_stamp()
    rows = read_rows(csv_path, stamp, say) if (a.resume or a.table) else {}
    if a.table:
        if not rows:
            ap.error(f"--table: no rows of stamp {stamp} in {csv_path}")
        table(list(rows.values()), say)
        summary(list(rows.values()), 0, say)
        return
    backup_stale(csv_path, rows, say)
    grid = [(link, x, N, S) for link in a.links.split(",") for x in Xs for N in Ns for S in Ss]
    # one job: the smallest points first (whole prompt columns finish early); several: the largest first
    todo = sorted((p for p in grid if p not in rows), key=lambda p: p[2] * p[3] * p[3] * (-1 if a.jobs > 1 else 1))
    say(f"{len(grid)} points, {len(grid) - len(todo)} already in {csv_path} (stamp {stamp}), {len(todo)} to compute"
        f" with {a.jobs} job(s)")
    t0 = time.time()

    def done(row):
        rows[key(row)] = row
        write_rows(csv_path, rows)
        say(f"[{len(rows)}/{len(grid)}] {row['link']} x{row['speedup']} N={row['nodes']} S={row['prompt_len']}: "
            f"MARS {row['mars_cycles']} ({row['mars_plan']}), best baseline {row['best_baseline']} "
            f"{row[row['best_baseline'] + '_cycles']}, ratio {row['best_baseline_over_mars']:.3f} ({row['point_s']} s)")

    args = lambda p: (a.quick, *p, a.headroom, a.screen, stamp, base_params())  # noqa: E731
    if a.jobs == 1:
        for p in todo:
            done(sweep_row(*args(p)))
    else:
        with ProcessPoolExecutor(a.jobs) as ex:
            for fut in as_completed([ex.submit(sweep_row, *args(p)) for p in todo]):
                done(fut.result())
    sel = [rows[p] for p in grid]
    plot(os.path.join(a.out, "mars_sweep_quick.png" if a.quick else "mars_sweep.png"), sel)
    summary(sel, time.time() - t0, say)


if __name__ == "__main__":
    main()
