#!/usr/bin/env python
"""MCF paper tables and figures from the RTL-calibrated performance model (mcf_fpga/host/perfmodel.py).

At paper scale (Qwen2.5-1.5B shapes, the KR260 engine ``hdl.compute.engine.KR260`` at 200 MHz,
KR260 links: ``--link sfp10g`` 10 Gb/s SFP+ or ``rgmii1g`` 1 Gb/s RGMII, DDR4 weight streaming,
every DDR byte charged on the node's AXI HP ports at 16 B/cycle each and 64 B/cycle in total)
the programs of every schedule (``host.mars`` / ``host.baselines``, as ``host.scenario``) are
timed by ``host.perfmodel.predict`` with the calibration of ``scripts/calibrate_perf.py``
re-targeted to the KR260 engine shape (``perfmodel.engine_params``). The host is ideal (no step
quantization) at paper scale. The head (LM head GEMM and its SPR) runs on the last prompt row only
(``Program.logits="last"``: token 1's row), as an inference server runs it. ``--kv ddr`` (default): the ``node-kr260`` build, K/V in the DDR
region (``perfmodel.kv_in_ddr``: a KVL per ATT, KVS sends, NIC installs); ``--kv onchip``: the
``node-kr260-onchip`` build (K/V in the attention unit's memories).

Outputs in ``--out`` (default ``results/``): ``table1.csv`` (16K prefill, 2/4/8/16 nodes: TTFT
and GiB moved for MARS, ring, zigzag, with the compute-only bound), ``fig3_ttft_vs_len.csv/png``
(TTFT vs prompt length up to 8K, with PD), ``fig4_kv_memory.csv/png`` (per-rank peak KV memory and
mean replica factor, N = 8 and 16), ``fig5_chunk.csv/png`` (chunk-size sweep), ``table2_decode.csv``
(decode tokens/s on 4 nodes, the leader alone as weight node and a 4-node tensor-parallel weight
group, next to two rooflines: the whole DDR's (W x 64 B/cycle), which the roofline target uses,
and the weight ports' (W x 3 x 16 B/cycle: the weights striped over HP2, HPC0 and HPC1, what
the port plan lets the weights have); the decode targets use the best row),
``whatif_engine.csv/png`` (TTFT when the engine is 1..64x faster on the same links) and
``summary.md``. MARS appears twice: with its default round-robin placement (``mars``) and with
the snake placement (``mars_snake``); the targets use the faster of the two.
Prints the targets with the predicted values; the last line is the MARS-over-ring TTFT speedup at
16 nodes, 16K. ``--quick`` runs the same pipeline on the micro model and the simulated node's
engine at tiny sizes (the CI smoke run).
"""
from __future__ import annotations

import argparse
import csv
import os
import time
from typing import NamedTuple


from mcf_fpga.golden.config import get_config  # noqa: E402
from mcf_fpga.host import perfmodel as pm  # noqa: E402
from mcf_fpga.host.config import HardwareConfig  # noqa: E402
from mcf_fpga.host.program_ops import Acquire, Drain, Free, Mark, Project, Recv, Release  # noqa: E402
from mcf_fpga.host.tp import group_of_all  # noqa: E402

CLOCK = 200e6


def sec(cycles: float) -> float:
    """Seconds of ``cycles`` at the KR260 clock."""
    return cycles / CLOCK


def build(cfg, hw, *, nodes, prompt_len, max_new_tokens, schedules, chunk, block, headroom=2.0,
          topology="ring", w_group=None, logits="last"):
    """{schedule: Program} of host.scenario.build_programs for hardware ``hw``; the schedule
    ``mars_snake`` is MARS with the snake chunk placement (``host.mars.placement``); ``w_group``:
    decode's tensor-parallel weight group (host.tp); ``logits``: the prompt rows the head runs on
    (``Program.logits``; "last" by default: the first token needs only its row, as a server runs it)."""
    from mcf_fpga.host.scenario import build_programs
    kw = dict(nodes=nodes, topology=topology, prompt_len=prompt_len, max_new_tokens=max_new_tokens, chunk=chunk,
              block=block, kv_headroom=headroom, hw=hw, w_group=w_group, logits=logits)
    plain = [s for s in schedules if s != "mars_snake"]
    out = build_programs(cfg, schedules=plain, **kw)[0] if plain else {}
    if "mars_snake" in schedules:
        out["mars_snake"] = build_programs(cfg, schedules=["mars"], placement="snake", **kw)[0]["mars"]
    return {s: out[s] for s in schedules}


def pool_stats(prog):
    """Per node peak KV-pool bytes during prefill and the mean replica factor (copies per KV unit:
    its owner plus every replica installed), from the program's directory ops."""
    peaks, copies = [], {}
    for n, ops in enumerate(prog.ops):
        occ, refs, draining, peak = set(), {}, set(), 0
        for op in ops:
            match op:
                case Project() | Recv(install="owner" | "replica"):
                    key = (op.layer, op.unit)
                    occ.add(key)
                    copies[key] = copies.get(key, 0) + 1
                case Acquire():
                    for u in op.units:
                        refs[(op.layer, u)] = refs.get((op.layer, u), 0) + 1
                case Release():
                    for u in op.units:
                        kk = (op.layer, u)
                        refs[kk] -= 1
                        if refs[kk] == 0 and kk in draining:
                            occ.discard(kk)
                            draining.discard(kk)
                case Drain():
                    key = (op.layer, op.unit)
                    if refs.get(key, 0) == 0:
                        occ.discard(key)
                    else:
                        draining.add(key)
                case Free():
                    occ.discard((op.layer, op.unit))
                case Mark():
                    break
            peak = max(peak, len(occ))
        peaks.append(peak * prog.slot_bytes)
    return peaks, (sum(copies.values()) / len(copies) if copies else 0.0)


def weight_bytes(cfg, group):
    """Bytes of every int4 linear layer a decode token streams (scales: 1 byte per group, row
    header 5 bytes): the DDR roofline's numerator."""
    D, I, Q, KV, V = cfg.hidden_size, cfg.intermediate_size, cfg.num_heads * cfg.head_dim, \
        cfg.num_kv_heads * cfg.head_dim, cfg.vocab_size
    shapes = [(D, Q), (D, KV), (D, KV), (Q, D), (D, I), (D, I), (I, D)]
    total = 0
    for K, N in shapes:
        total += cfg.num_layers * (N * K // 2 + N * K // group + 5 * N)
    return total + V * D // 2 + V * D // group + 5 * V


def table2(cfg, hw, P, engine, *, prompt_len, chunk, block, nodes=4, K=4, say=print):
    """Table 2: decode tokens/s on ``nodes`` nodes (MARS and PD KV-stationary decode), each with the
    schedule's leader alone as weight node (W = 1) and with a tensor-parallel weight group of every
    node led by it (W = nodes, host.tp), next to the DDR roofline (W x ddr_bytes_per_cycle x clock
    / weight bytes per token: ``fraction_of_roofline``) and the roofline of the weight ports (the
    weights stream striped over ``weight_lanes`` read ports per node, host.ddrports:
    W x min(lanes x port_bytes_per_cycle, ddr_bytes_per_cycle): ``fraction_of_port_roofline``).
    Rows and the best row."""
    wbytes = weight_bytes(cfg, engine["group"])
    rows = []
    for s in ("mars", "pd"):
        one = build(cfg, hw, nodes=nodes, prompt_len=prompt_len, max_new_tokens=K, schedules=(s,), chunk=chunk,
                    block=block)[s]
        group = group_of_all(one.leader, nodes)
        for wg in ((one.leader,), group):
            prog = one if len(wg) == 1 else build(cfg, hw, nodes=nodes, prompt_len=prompt_len, max_new_tokens=K,
                                                  schedules=(s,), chunk=chunk, block=block, w_group=wg)[s]
            pr = pm.predict(prog, P, chunk=1)
            tps = CLOCK / (pr.decode_cycles / (K - 1))
            lanes = P["ddr"].get("weight_lanes", 1) if P.get("ddr") else 1
            port = min(lanes * hw.port_bytes_per_cycle, hw.ddr_bytes_per_cycle) if P.get("ddr") else hw.ddr_bytes_per_cycle
            roof = len(wg) * hw.ddr_bytes_per_cycle * CLOCK / wbytes
            proof = len(wg) * port * CLOCK / wbytes
            rows.append(dict(schedule=s, w_group=" ".join(map(str, wg)), nodes=nodes, prompt_len=prompt_len,
                             tokens_per_s=round(tps, 3), ddr_roofline_tokens_per_s=round(roof, 3),
                             fraction_of_roofline=round(tps / roof, 3),
                             port_roofline_tokens_per_s=round(proof, 3),
                             fraction_of_port_roofline=round(tps / proof, 3),
                             weight_mib_per_token=round(wbytes / 2 ** 20, 2)))
            say(f"table2 {rows[-1]}")
    return rows, max(rows, key=lambda r: r["tokens_per_s"])


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def plot(path, title, xlabel, ylabel, series, xs, logy=False, bound=None):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for name, ys in series.items():
        ax.plot(xs, ys, marker="o", label=name)
    if bound is not None:
        ax.plot(xs, bound, "k--", label="compute-only bound")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


class Sizes(NamedTuple):
    """The sizes of a run: Table 1's prompt ``S_big`` on ``Ns`` nodes, Fig. 3's prompt ``lens``,
    Fig. 5's ``chunks``, the chunk ``B`` and merge block ``blk``, Table 2's prompt ``dec_prompt``,
    Fig. 4's node counts ``fig4_N``, the node count ``fig_N`` of Figs. 3 and 5 and the what-if,
    and the what-if's engine ``speedups``."""
    S_big: int
    Ns: tuple
    lens: tuple
    chunks: tuple
    B: int
    blk: int
    dec_prompt: int
    fig4_N: tuple
    fig_N: int
    speedups: tuple


def setup(a, base) -> tuple:
    """(model config, engine, hardware, performance parameters, ``Sizes``) of ``--quick`` (the micro
    model on the simulated node's engine) or of the paper scale (Qwen2.5-1.5B on the KR260)."""
    if a.quick:
        from mcf_fpga.host.executors.rtl import SIM_ENGINE
        cfg, engine = get_config("micro").replace(num_layers=1), dict(SIM_ENGINE)
        z = Sizes(64, (2, 4), (32, 64), (8, 16), 16, 16, 32, (2, 4), 2, (1, 16))
        hw = HardwareConfig.kr260(link=a.link, clock_hz=CLOCK, macs_per_cycle=engine["pn"] * engine["pk"],
                                  kv_buffer_bytes=1 << 28)   # DDR-backed M_buf: the planners only check it
        P = pm.engine_params(base, engine, link_bytes_per_cycle=hw.link_bytes_per_cycle,
                             link_latency=hw.link_latency_cycles, ddr_bytes_per_cycle=hw.ddr_bytes_per_cycle,
                             port_bytes_per_cycle=hw.port_bytes_per_cycle, weight_lanes=hw.weight_ports)
        if a.kv == "ddr":
            P = pm.kv_in_ddr(P)
    else:
        cfg = get_config("qwen2.5-1.5b")
        hw, P, engine = pm.kr260_setup(a.link, CLOCK, base, kv=a.kv)
        z = Sizes(16384, (2, 4, 8, 16), (1024, 2048, 4096, 8192), (64, 128, 256), 256, 256, 1024, (8, 16), 8,
                  (1, 4, 16, 64))
    return cfg, engine, hw, P, z


def describe(a, cfg, engine, hw, P, say) -> tuple:
    """Says the assumptions of the run and where its instruction costs come from; returns both."""
    kv_mode = ("K/V in DDR (KVL per ATT, KVS sends, NIC installs on HP2.wr)" if P.get("kv")
               else "K/V on chip (attention unit memories; EMIT sends, host SPW+KVW installs)")
    assumptions = (f"{cfg.name}, engine pn={engine['pn']} pk={engine['pk']} d={engine['head_dim']} at 200 MHz, "
                   f"{a.link} ({hw.link_bytes_per_cycle:.3g} B/cycle, {hw.link_latency_cycles} cycles/hop), "
                   f"DDR {hw.ddr_bytes_per_cycle:.3g} B/cycle in total, HP ports {hw.port_bytes_per_cycle:.3g} "
                   f"B/cycle each (weights striped over {P.get('ddr', {}).get('weight_lanes', 1)} read ports from HP2.rd, "
                   f"K/V HP3), {kv_mode}")
    say(f"bench_paper: {assumptions}")
    sources = {}
    for k, src in P.get("instr_source", {}).items():
        sources.setdefault(src, []).append(k)
    sources = "; ".join(f"{src}: {', '.join(sorted(ks))}" for src, ks in sorted(sources.items())) or \
        "simulated node (quick mode)"
    say(f"instruction costs from: {sources}")
    if "kr260_refit" in P:
        fr = P["kr260_refit"]
        say(f"KR260 refit (results/perf_kr260.json, RTL {fr['rtl_commit']}): {fr['state']}: {fr['why']}"
            + {"current": "", "stale": "; re-run scripts/check_kr260_costs.py",
               "unknown": "; scripts/check_kr260_costs.py --check compares the Verilog"}[fr["state"]])
    return assumptions, sources


def table1(cfg, hw, P, z: Sizes, out: str, say) -> tuple:
    """Table 1: prefill of ``S_big`` tokens on ``Ns`` nodes. Returns (rows, {N: {schedule: Program}})."""
    t1, progs_big = [], {}
    for N in z.Ns:
        progs = build(cfg, hw, nodes=N, prompt_len=z.S_big, max_new_tokens=1,
                      schedules=("mars", "mars_snake", "ring", "zigzag"), chunk=z.B, block=z.blk)
        progs_big[N] = progs
        for s, prog in progs.items():
            pr = pm.predict(prog, P, chunk=1)
            tr = prog.traffic()
            t1.append(dict(nodes=N, schedule=s, ttft_s=round(sec(pr.ttft_cycles), 4),
                           gib_moved=round(tr.prefill_bytes / 2 ** 30, 4),
                           wire_gib=round(pr.wire_bytes / 2 ** 30, 4),
                           compute_bound_s=round(sec(pm.compute_only(pr)), 4),
                           ttft_over_bound=round(pr.ttft_cycles / pm.compute_only(pr), 3)))
            say(f"table1 N={N:2d} {s:10s} TTFT {t1[-1]['ttft_s']:9.3f} s  moved {t1[-1]['gib_moved']:7.3f} GiB  "
                f"bound {t1[-1]['compute_bound_s']:9.3f} s")
    write_csv(os.path.join(out, "table1.csv"), t1)
    return t1, progs_big


def fig3(cfg, hw, P, z: Sizes, out: str, say) -> list:
    """Fig. 3: TTFT vs prompt length (``fig_N`` nodes), with PD."""
    f3, series, bound = [], {s: [] for s in ("mars", "ring", "zigzag", "pd")}, []
    for S in z.lens:
        progs = build(cfg, hw, nodes=z.fig_N, prompt_len=S, max_new_tokens=1, schedules=tuple(series), chunk=z.B,
                      block=z.blk)
        row = dict(prompt_len=S)
        for s, prog in progs.items():
            pr = pm.predict(prog, P, chunk=1)
            row[s + "_s"] = round(sec(pr.ttft_cycles), 4)
            series[s].append(sec(pr.ttft_cycles))
            if s == "mars":
                row["compute_bound_s"] = round(sec(pm.compute_only(pr)), 4)
                bound.append(sec(pm.compute_only(pr)))
        f3.append(row)
        say(f"fig3 S={S}: {row}")
    write_csv(os.path.join(out, "fig3_ttft_vs_len.csv"), f3)
    plot(os.path.join(out, "fig3_ttft_vs_len.png"), f"TTFT vs prompt length ({z.fig_N} nodes)", "prompt tokens",
         "TTFT (s)", series, list(z.lens), logy=True, bound=bound)
    return f3


def fig4(progs_big: dict, z: Sizes, out: str, say) -> list:
    """Fig. 4: per-rank KV memory and mean replica factor of Table 1's programs on ``fig4_N`` nodes."""
    f4 = []
    for N in z.fig4_N:
        for s in ("mars", "ring", "zigzag"):
            peaks, rf = pool_stats(progs_big[N][s])
            f4.append(dict(nodes=N, schedule=s, peak_kv_mib_max=round(max(peaks) / 2 ** 20, 3),
                           peak_kv_mib_mean=round(sum(peaks) / len(peaks) / 2 ** 20, 3),
                           replica_factor=round(rf, 3), s_node_mib=round(progs_big[N][s].n_slots *
                                                                         progs_big[N][s].slot_bytes / 2 ** 20, 3)))
            say(f"fig4 {f4[-1]}")
    write_csv(os.path.join(out, "fig4_kv_memory.csv"), f4)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axs = plt.subplots(1, 2, figsize=(8, 3.4))
    for i, N in enumerate(z.fig4_N):
        rows = [r for r in f4 if r["nodes"] == N]
        axs[0].bar([x + 0.4 * i for x in range(len(rows))], [r["peak_kv_mib_max"] for r in rows], 0.4, label=f"N={N}")
        axs[1].bar([x + 0.4 * i for x in range(len(rows))], [r["replica_factor"] for r in rows], 0.4, label=f"N={N}")
    for ax, yl in zip(axs, ("peak KV per rank (MiB)", "mean replica factor")):
        ax.set_xticks([x + 0.2 for x in range(3)], ["mars", "ring", "zigzag"])
        ax.set_ylabel(yl)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "fig4_kv_memory.png"), dpi=110)
    plt.close(fig)
    return f4


def fig5(cfg, hw, P, z: Sizes, out: str, say) -> list:
    """Fig. 5: chunk-size sweep (``fig_N`` nodes, half the Table 1 prompt)."""
    f5, s5 = [], {"mars": [], "ring": []}
    S5 = z.S_big // 2
    for c in z.chunks:
        progs = build(cfg, hw, nodes=z.fig_N, prompt_len=S5, max_new_tokens=1, schedules=tuple(s5), chunk=c,
                      block=min(z.blk, c))
        row = dict(chunk=c, prompt_len=S5)
        for s, prog in progs.items():
            pr = pm.predict(prog, P, chunk=1)
            row[s + "_s"] = round(sec(pr.ttft_cycles), 4)
            s5[s].append(sec(pr.ttft_cycles))
        f5.append(row)
        say(f"fig5 {row}")
    write_csv(os.path.join(out, "fig5_chunk.csv"), f5)
    plot(os.path.join(out, "fig5_chunk.png"), f"TTFT vs chunk size ({z.fig_N} nodes, {S5} tokens)", "chunk (tokens)",
         "TTFT (s)", s5, list(z.chunks))
    return f5


def whatif(cfg, hw, P, z: Sizes, link: str, out: str, say) -> list:
    """What-if: a faster engine on the same links (where does communication start to show?)."""
    wi, wseries, S_w = [], {s: [] for s in ("mars", "mars_snake", "ring", "zigzag")}, z.S_big // 2
    progs = build(cfg, hw, nodes=z.fig_N, prompt_len=S_w, max_new_tokens=1, schedules=tuple(wseries), chunk=z.B,
                  block=z.blk)
    for x in z.speedups:
        Px = pm.engine_params(P, P["engine"], speedup=x)
        row, raw = dict(engine_speedup=x, nodes=z.fig_N, prompt_len=S_w), {}
        for s, prog in progs.items():
            pr = pm.predict(prog, Px, chunk=1)
            raw[s] = pr.ttft_cycles
            row[s + "_s"] = round(sec(pr.ttft_cycles), 6)
            wseries[s].append(sec(pr.ttft_cycles) * x)
            if s == "mars":
                row["compute_bound_s"] = round(sec(pm.compute_only(pr)), 6)
        row["ring_over_best_mars"] = round(raw["ring"] / min(raw["mars"], raw["mars_snake"]), 3)
        wi.append(row)
        say(f"whatif {row}")
    write_csv(os.path.join(out, "whatif_engine.csv"), wi)
    plot(os.path.join(out, "whatif_engine.png"), f"TTFT x engine speed-up ({z.fig_N} nodes, {S_w} tokens, {link})",
         "engine speed-up (what-if)", "TTFT x speed-up (s at 1x)", wseries, list(z.speedups))
    return wi


def targets_of(t1: list, best: dict, Nmax: int) -> tuple:
    """The paper's targets [(name, predicted, met)] and the MARS-over-ring TTFT speedup on ``Nmax`` nodes."""
    get = lambda N, s: next(r for r in t1 if r["nodes"] == N and r["schedule"] == s)  # noqa: E731
    m = min((get(Nmax, "mars"), get(Nmax, "mars_snake")), key=lambda row: row["ttft_s"])
    r = get(Nmax, "ring")
    speed = r["ttft_s"] / m["ttft_s"]
    dec = f"{best['schedule']}, w_group {best['w_group']}"
    targets = [
        ("MARS TTFT >= 3x faster than ring", f"{speed:.2f}x ({m['schedule']})", speed >= 3),
        ("MARS TTFT within 1.15x of the compute-only bound", f"{m['ttft_over_bound']:.2f}x",
         m["ttft_over_bound"] <= 1.15),
        ("decode >= 40 tokens/s on 4 nodes", f"{best['tokens_per_s']:.2f} tokens/s ({dec})",
         best["tokens_per_s"] >= 40),
        (">= 70% of the DDR roofline", f"{100 * best['fraction_of_roofline']:.1f}% of "
                                       f"{best['ddr_roofline_tokens_per_s']:.2f} tokens/s ({dec}; "
                                       f"{100 * best['fraction_of_port_roofline']:.1f}% of the weight ports' "
                                       f"{best['port_roofline_tokens_per_s']:.2f})",
         best["fraction_of_roofline"] >= 0.7)]
    return targets, speed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--link", choices=("sfp10g", "rgmii1g"), default="sfp10g")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(pm.DEFAULT_CALIBRATION)))
    ap.add_argument("--calibration", default=None, help="calibration JSON (default results/perf_calibration.json)")
    ap.add_argument("--quick", action="store_true", help="micro model, simulated node, tiny sizes (CI smoke)")
    ap.add_argument("--kv", choices=("ddr", "onchip"), default="ddr",
                    help="K/V in the DDR region (node-kr260, default) or in the attention unit (node-kr260-onchip)")
    a = ap.parse_args(argv)
    t_start = time.time()
    os.makedirs(a.out, exist_ok=True)
    base = pm.load_params(a.calibration)
    cfg, engine, hw, P, z = setup(a, base)
    say = lambda *x: print(*x, flush=True)  # noqa: E731
    assumptions, sources = describe(a, cfg, engine, hw, P, say)
    t1, progs_big = table1(cfg, hw, P, z, a.out, say)
    f3 = fig3(cfg, hw, P, z, a.out, say)
    f4 = fig4(progs_big, z, a.out, say)
    f5 = fig5(cfg, hw, P, z, a.out, say)
    wi = whatif(cfg, hw, P, z, a.link, a.out, say)
    # Table 2: decode tokens/s on 4 nodes (KV-stationary decode, W = 1 and a 4-node W group) vs
    # the DDR roofline and the weight ports' roofline
    t2, best = table2(cfg, hw, P, engine, prompt_len=z.dec_prompt, chunk=z.B, block=z.blk, say=say)
    write_csv(os.path.join(a.out, "table2_decode.csv"), t2)

    Nmax = z.Ns[-1]
    targets, speed = targets_of(t1, best, Nmax)
    lines = ["# MCF paper figures from the RTL-calibrated performance model", "",
             f"Model and node: {assumptions}; calibration {a.calibration or pm.DEFAULT_CALIBRATION}; "
             f"instruction costs from {sources}. "
             f"All times are *predicted* by mcf_fpga/host/perfmodel.py (validated against the Verilated cluster on "
             f"small configs, docs/perfmodel.md).", "",
             f"## Targets ({z.S_big} tokens, {Nmax} nodes)", "", "| target | predicted | met |", "|---|---|---|"]
    lines += [f"| {n} | {v} | {'yes' if ok else 'no'} |" for n, v, ok in targets]
    for title, rows in ((f"Table 1: prefill of {z.S_big} tokens", t1), ("Fig. 3: TTFT vs prompt length", f3),
                        ("Fig. 4: KV memory per rank and replica factor", f4), ("Fig. 5: chunk sweep", f5),
                        ("What-if: engine speed-up on the same links (TTFT in s)", wi),
                        ("Table 2: decode on 4 nodes", t2)):
        lines += ["", f"## {title}", "", "| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
        lines += ["| " + " | ".join(str(v) for v in row.values()) + " |" for row in rows]
    lines += ["", f"Run time {time.time() - t_start:.0f} s."]
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    for n, v, ok in targets:
        say(f"target: {n}: predicted {v} -> {'MET' if ok else 'NOT MET'}")
    say(f"MARS-over-ring TTFT speedup at {Nmax} nodes, {z.S_big} tokens: {speed:.2f}x")


if __name__ == "__main__":
    main()
