"""Time of ``perfmodel.predict`` on one paper-scale plan per schedule (KR260, sfp10g, K/V in DDR).

    python scripts/bench_predict.py [NODES] [PROMPT] [--schedules mars,ring,zigzag] [--profile]
                                [--dump out.pkl] [--calibration results/perf_calibration.json] [--coarse]

Prints, per schedule, the seconds to build the program and to predict it (wall and this process's
CPU time: the machine may be shared), and the TTFT;
``--profile`` runs ``predict`` under cProfile (and prints the top functions), ``--dump`` pickles
every ``Prediction``'s fields ({schedule: dict}) to compare two versions of the model; ``--coarse``
also times the coarse model and the search's screen (CPU-s, TTFT error against the exact). Last line:
the largest CPU seconds of one ``predict`` over the schedules."""
import argparse
import cProfile
import dataclasses
import pickle
import pstats
import time

from bench_paper import build

from mcf_fpga.golden.config import get_config
from mcf_fpga.host import perfmodel as pm
from mcf_fpga.host.perfmodel_coarse import screen


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("nodes", nargs="?", type=int, default=16)
    ap.add_argument("prompt", nargs="?", type=int, default=16384)
    ap.add_argument("--schedules", default="mars")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--dump")
    ap.add_argument("--calibration")
    ap.add_argument("--coarse", action="store_true",
                    help="also time the coarse model (predict(coarse=True)) and the search's screen "
                         "(perfmodel_coarse.screen) and print their CPU-s and TTFT error")
    a = ap.parse_args(argv)
    cfg = get_config("qwen2.5-1.5b")
    base = pm.load_params(a.calibration)
    hw, P, _engine = pm.kr260_setup("sfp10g", 200e6, base, kv="ddr")
    out, cpu = {}, []
    for s in a.schedules.split(","):
        t0 = time.time()
        prog = build(cfg, hw, nodes=a.nodes, prompt_len=a.prompt, max_new_tokens=1, schedules=(s,),
                     chunk=256, block=256)[s]
        t1, c1 = time.time(), time.process_time()
        prof = cProfile.Profile() if a.profile else None
        if prof:
            prof.enable()
        pr = pm.predict(prog, P, chunk=1)
        if prof:
            prof.disable()
        t2, c2 = time.time(), time.process_time()
        print(f"{s}: build {t1 - t0:.2f} s, predict {t2 - t1:.2f} s wall ({c2 - c1:.2f} s CPU), "
              f"ttft {pr.ttft_cycles / 200e6:.6f} s", flush=True)
        if prof:
            pstats.Stats(prof).sort_stats("cumtime").print_stats(25)
        if a.coarse:
            c3 = time.process_time()
            co = pm.predict(prog, P, chunk=1, coarse=True).ttft_cycles
            c4 = time.process_time()
            sc = screen(prog, P, chunk=1)[0]
            c5 = time.process_time()
            print(f"{s}: coarse {c4 - c3:.2f} CPU-s (TTFT {co / pr.ttft_cycles - 1:+.3%}), screen {c5 - c4:.2f} "
                  f"CPU-s (TTFT {sc / pr.ttft_cycles - 1:+.3%}), exact {c2 - c1:.2f} CPU-s", flush=True)
        out[s] = dataclasses.asdict(pr)
        cpu.append(c2 - c1)
    if a.dump:
        with open(a.dump, "wb") as f:
            pickle.dump(out, f)
    print(f"predict of one {a.nodes}-node {a.prompt}-token plan: at most {max(cpu):.2f} CPU-s")


if __name__ == "__main__":
    main()
