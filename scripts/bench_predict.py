"""Time of ``perfmodel.predict`` on one paper-scale plan per schedule (KR260, sfp10g, K/V in DDR).

    python scripts/bench_predict.py [NODES] [PROMPT] [--schedules mars,ring,zigzag] [--profile]
                                [--dump out.pkl] [--calibration results/perf_calibration.json]

Prints, per schedule, the seconds to build the program and to predict it (wall and this process's
CPU time: the machine may be shared), and the TTFT;
``--profile`` runs ``predict`` under cProfile (and prints the top functions), ``--dump`` pickles
every ``Prediction``'s fields ({schedule: dict}) to compare two versions of the model. Last line:
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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("nodes", nargs="?", type=int, default=16)
    ap.add_argument("prompt", nargs="?", type=int, default=16384)
    ap.add_argument("--schedules", default="mars")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--dump")
    ap.add_argument("--calibration")
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
        out[s] = dataclasses.asdict(pr)
        cpu.append(c2 - c1)
    if a.dump:
        with open(a.dump, "wb") as f:
            pickle.dump(out, f)
    print(f"predict of one {a.nodes}-node {a.prompt}-token plan: at most {max(cpu):.2f} CPU-s")


if __name__ == "__main__":
    main()
