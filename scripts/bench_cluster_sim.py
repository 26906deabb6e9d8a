#!/usr/bin/env python3
"""Verilated cluster speed: its nodes stepped in 1 thread, in parallel threads, and in parallel processes.

The same program -- MARS prefill of 16 prompt tokens per node plus 2 decode tokens, 1 layer of the
micro model -- runs through ``host.executors.rtl.run_rtl`` on 4 and on 8 micro nodes (the default
simulated node, one Verilator build shared with the test suite), with ``threads=1``, every
count of ``--threads`` (default 2..the machine's cores) and every count of ``--ranks`` (local
torch.distributed processes, ``run_rtl(ranks=K)``: each steps a node group and runs its nodes'
host drivers; default 2..the cores), in turn: 1, K, ..., 1, K ... for ``--reps`` rounds, so a
load that drifts hits all alike. Every run must give the same cycles, logits,
tokens and wire bytes as the first (the bench stops otherwise). For each setting it prints the
median over the rounds of

* cluster cycles/s: ``cycles_simulated`` / the run's wall time (the host's work included:
  compiling the program, the drivers' Python, the frame exchanges);
* stepping cycles/s: ``cycles_simulated`` / the time spent inside ``SimCluster.step`` (the
  nodes' stepping and the frame exchanges only; threads only: the ranks step in other processes);
* CPU: CPU seconds (this process and its finished children) per wall second (1 thread near 1.0
  and 2 threads near 1.0 too means the second core was taken by other work: no speed-up is
  possible then);

and, per cluster size, the speed-up and its Amdahl bound: the share of a 1-thread run spent
stepping nodes (inside ``Cluster._advance``, what the threads divide) against the rest (the
host's Python, the frame exchanges, compiling the program), which stays on one thread.

The LAST line is the speed-up of cluster cycles/s of the best parallel setting over 1 thread on
the largest cluster, the figure first. Builds are cached and not timed.

    .venv/bin/python scripts/bench_cluster_sim.py [--nodes 4,8] [--threads 2] [--ranks 2] [--reps 3]
"""
import argparse
import os
import statistics
import sys
import time


import torch  # noqa: E402

torch.set_num_threads(1)


def program(nodes: int, per_node: int, new_tokens: int):
    from mcf_fpga.golden.config import get_config
    from mcf_fpga.golden.int_model import IntModel, quantize_model
    from mcf_fpga.golden.model import random_weights
    from mcf_fpga.host.scenario import build_programs
    cfg = get_config("micro").replace(num_layers=1)
    im = IntModel(quantize_model(random_weights(cfg, seed=3), block=16))
    S = per_node * nodes
    prog = build_programs(cfg, nodes=nodes, topology="ring", prompt_len=S, max_new_tokens=new_tokens,
                          schedules=["mars"], chunk=16, block=16)[0]["mars"]
    prompt = torch.randint(0, cfg.vocab_size, (S,), generator=torch.Generator().manual_seed(nodes)).tolist()
    return prog, im, prompt


class StepTimer:
    """Adds up the wall time spent in ``SimCluster.step`` (``seconds``) and in the nodes' stepping
    of ``Cluster._advance``, the part the threads share (``nodes_seconds``)."""

    def __init__(self):
        from mcf_fpga.sim.cluster import SimCluster
        from mcf_fpga.sim.verilator import Cluster
        self.seconds = self.nodes_seconds = 0.0
        self._wrap(SimCluster, "step", "seconds")
        self._wrap(Cluster, "_advance", "nodes_seconds")

    def _wrap(self, cls, name, field):
        real = getattr(cls, name)

        def timed(obj, *a):
            t = time.perf_counter()
            try:
                real(obj, *a)
            finally:
                setattr(self, field, getattr(self, field) + time.perf_counter() - t)
        setattr(cls, name, timed)


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def one_run(prog, im, prompt, setting, timer):
    """``setting``: ("threads", K) or ("ranks", K)."""
    from mcf_fpga.host.executors.rtl import run_rtl
    timer.seconds = timer.nodes_seconds = 0.0
    t, cpu = time.perf_counter(), _cpu()
    kind, k = setting
    r = run_rtl(prog, im, prompt, threads=k) if kind == "threads" else run_rtl(prog, im, prompt, ranks=k)
    wall, cpu = time.perf_counter() - t, _cpu() - cpu
    key = (r.cycles_simulated, r.ttft_cycles, r.decode_cycles, r.wire_bytes, tuple(r.tokens),
           r.logits.numpy().tobytes())
    return r.cycles_simulated, wall, timer.seconds, key, cpu, timer.nodes_seconds


def parse_list(text):
    return [int(x) for x in text.split(",") if x.strip()]


def main():
    cores = os.cpu_count() or 1
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", default="4,8", help="cluster sizes, comma-separated (default 4,8)")
    ap.add_argument("--threads", default=",".join(map(str, range(2, max(2, cores) + 1))),
                    help=f"thread counts to try against 1 thread (default 2..{max(2, cores)}, the cores)")
    ap.add_argument("--ranks", default=",".join(map(str, range(2, max(2, cores) + 1))),
                    help=f"process (rank) counts to try against 1 thread (default 2..{max(2, cores)}; '' for none)")
    ap.add_argument("--reps", type=int, default=3, help="rounds of (1 thread, each parallel setting); median")
    ap.add_argument("--per-node", type=int, default=16, help="prompt tokens per node (default 16)")
    ap.add_argument("--new-tokens", type=int, default=2, help="decode tokens (default 2)")
    args = ap.parse_args()
    sizes = parse_list(args.nodes)
    settings = [("threads", k) for k in parse_list(args.threads)] + [("ranks", k) for k in parse_list(args.ranks)]
    timer = StepTimer()
    load = os.getloadavg()
    print(f"bench_cluster_sim: {cores} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start; "
          f"MARS, micro model 1 layer, {args.per_node} prompt tokens per node + {args.new_tokens} decode "
          f"tokens; {args.reps} rounds, medians")
    last = None
    for nodes in sizes:
        prog, im, prompt = program(nodes, args.per_node, args.new_tokens)
        one_run(prog, im, prompt, ("threads", 1), timer)   # the build (cached) and warm-up, not timed
        runs = {t: [] for t in [("threads", 1), *[s for s in settings if s[1] <= nodes]]}
        ref = None
        for _ in range(args.reps):
            for t in runs:
                cycles, wall, stepping, key, cpu, nodes_s = one_run(prog, im, prompt, t, timer)
                if ref is None:
                    ref = key
                if key != ref:
                    sys.exit(f"{nodes} nodes, {t[1]} {t[0]}: the results differ from 1 thread's")
                runs[t].append((cycles, wall, stepping, cpu, nodes_s))
        med = {}
        for t, rows in runs.items():
            cycles = rows[0][0]
            wall, stepping, cpu, nodes_s = (statistics.median(r[j] for r in rows) for j in (1, 2, 3, 4))
            med[t] = (cycles / wall, cycles / stepping if stepping else None, nodes_s / wall)
            step_text = (f"stepping {stepping:6.2f} s ({cycles / stepping:8.0f} cycles/s)" if stepping
                         else "stepping in the rank processes")
            print(f"{nodes} nodes, {t[1]} {t[0]:7s}: {cycles} cycles, run {wall:6.2f} s "
                  f"({cycles / wall:8.0f} cluster cycles/s), {step_text}; CPU {cpu / wall:.2f} cores; walls "
                  f"{', '.join(f'{r[1]:.2f}' for r in rows)}")
        one = ("threads", 1)
        if len(med) > 1:
            best = max((t for t in med if t != one), key=lambda t: med[t][0])
            p = med[one][2]           # the share of a 1-thread run that the threads can divide
            bound = 1 / ((1 - p) + p / best[1])
            last = (med[best][0] / med[one][0], f"{best[1]} {best[0]}", nodes, med[one][0], med[best][0], bound)
            print(f"{nodes} nodes: {last[0]:.2f}x cluster cycles/s with {last[1]} vs 1 thread; node stepping is "
                  f"{p:.0%} of a 1-thread run, so threads give {bound:.2f}x at most with {best[1]} free cores "
                  f"(ranks also divide the host drivers)")
    load = os.getloadavg()
    if last is None:
        sys.exit("no parallel setting fits the cluster sizes given")
    print(f"{last[0]:.2f}x cluster cycles/s with {last[1]} vs 1 thread ({last[2]} micro nodes; "
          f"{last[3]:.0f} -> {last[4]:.0f} cycles/s; threads' Amdahl bound {last[5]:.2f}x; "
          f"{cores} cores, load average {load[0]:.2f} at the end)")


if __name__ == "__main__":
    main()
