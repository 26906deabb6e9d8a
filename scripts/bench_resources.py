#!/usr/bin/env python3
"""Resource use of the KR260 PL design against the XCK26, from Yosys synth_xilinx -family xcup.

Side by side in one run: the top alone (today the stand-in, later the node) and the
whole PL logic (top + board glue: RGMII MACs, clock-crossing FIFOs; PS, SmartConnect
and vendor IP count as zero). The last line is the whole PL's LUT utilisation in
percent of the XCK26, the same figure `mcf build --board kr260` prints last.

Usage: scripts/bench_resources.py [--nodes N --node-id K] [-o DIR]
"""
import argparse
import os
import shutil
import tempfile


from mcf_fpga.boards.flow import build, NODE_MODULE          # noqa: E402
from mcf_fpga.boards.kr260 import XCK26_RESOURCES             # noqa: E402
from mcf_fpga.boards.utilisation import synthesize            # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--node-id", type=int, default=0)
    ap.add_argument("-o", "--out", default=None, help="keep the build here (default: a temp dir)")
    args = ap.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="mcf-bench-resources-")
    try:
        r = build("kr260", nodes=args.nodes, node_id=args.node_id, out=out, run_vivado=False,
                  log=lambda *a: None)
        ndir = os.path.join(out, "synth_node")
        os.makedirs(ndir, exist_ok=True)
        shutil.copyfile(os.path.join(out, f"{NODE_MODULE}.v"), os.path.join(ndir, f"{NODE_MODULE}.v"))
        node = synthesize([f"{NODE_MODULE}.v"], NODE_MODULE, ndir)
        whole = r.utilisation
        print(f"{'resource':<8} {'top only':>10} {'whole PL':>10} {'XCK26':>8} {'whole %':>8}")
        for res, avail in XCK26_RESOURCES.items():
            print(f"{res:<8} {node.used[res]:>10g} {whole.used[res]:>10g} {avail:>8} "
                  f"{whole.percent(res):>7.2f}%")
        print(f"LUT utilisation: {whole.percent('LUT'):.2f} % of XCK26 "
              f"({whole.used['LUT']} / {XCK26_RESOURCES['LUT']} LUTs)")
    finally:
        if args.out is None:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
