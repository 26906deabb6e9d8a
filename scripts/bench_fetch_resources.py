#!/usr/bin/env python3
"""What the autonomous node adds to a KR260 node, from Yosys ``synth_xilinx -family xcup``.

A whole KR260-sized node does not synthesize here in reasonable time (docs/boards.md
"Utilisation"), so this synthesizes, one by one, the blocks a fetching node adds at the KR260
node's parameters (registered blocks, ``hdl.blocks``): the command fetcher and the stream
loader (128-bit HP port, the KR260 engine's 2,048-bit weight beat, n_counters for the RX
placer's entries), the RX placer (``--rx-entries``, default the board top's
``boards.flow.KR260_RX_ENTRIES``; 2 KB packets), the AXI4 write arbiter that shares HP0's writes
between the RX-ring writer and the placer, and the token picker (4 slots). Each is flattened on
its own (no optimisation across blocks, glue not counted), and the sum is printed against the
XCK26 next to the measured node. What a fetching node removes
(the board front-end's cmd / sp_in / w readers) is not subtracted, so the sum errs high.

The last line prints the added LUTs in percent of the XCK26 first.

Usage: scripts/bench_fetch_resources.py [--rx-entries N] [-o DIR]
"""
import argparse
import os
import tempfile
import time


from mcf_fpga.boards.flow import KR260_RX_ENTRIES            # noqa: E402
from mcf_fpga.boards.kr260 import XCK26_RESOURCES             # noqa: E402
from mcf_fpga.boards.utilisation import synthesize            # noqa: E402
from mcf_fpga.hdl.blocks import get                           # noqa: E402
from mcf_fpga.hdl.dsp48e2 import XCUP                     # noqa: E402
from mcf_fpga.hdl.verilog import to_verilog               # noqa: E402


def blocks(rx_entries: int):
    """(registry name, KR260 parameters) of every block a fetching KR260 node adds."""
    from mcf_fpga.hdl.compute.engine import KR260, kr260_ddr_engine
    from mcf_fpga.hdl.node import NodeConfig
    w_bits = KR260["pn"] * KR260["pk"] * 4
    slot_rows = kr260_ddr_engine()["kv_region"].slot_rows
    return [
        ("command_fetcher", dict(addr_width=40, data_width=128, max_burst=16, n_counters=3 + rx_entries,
                                 slot_rows=slot_rows, fifo_depth=64, poll_gap=16, n_slots=NodeConfig().kv_slots,
                                 pick_slots=4)),
        ("stream_loader", dict(addr_width=40, data_width=128, max_burst=16, max_outstanding=4, w_bits=w_bits)),
        ("rx_placer", dict(entries=rx_entries, data_width=128, max_payload=2048)),
        ("axi_write_arbiter", dict(n=2, addr_width=40, data_width=128, id_width=4, max_outstanding=8)),
        ("token_picker", dict(slots=4)),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rx-entries", type=int, default=KR260_RX_ENTRIES,
                    help=f"RX placer entries (default {KR260_RX_ENTRIES}, the node-kr260-fetch top's: a request's "
                         "1 + 1 + 7 message streams at Qwen2.5-1.5B; 32 holds 3 requests)")
    ap.add_argument("-o", "--out", default=None, help="keep the Verilog and Yosys files here (default: a temp dir)")
    a = ap.parse_args()
    if not 1 <= a.rx_entries <= 253:
        ap.error(f"--rx-entries={a.rx_entries} must be in 1..253")
    out = a.out or tempfile.mkdtemp(prefix="mcf-fetch-resources-")
    total = dict.fromkeys(XCK26_RESOURCES, 0)
    print(f"{'block':<16} " + " ".join(f"{r:>8}" for r in XCK26_RESOURCES) + "  seconds", flush=True)
    for name, params in blocks(a.rx_entries):
        blk = get(name)
        top = blk.factory(**params)
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"{name}.v"), "w") as f:
            f.write(to_verilog(top, name, rename=blk.rename or None, platform=XCUP))
        t0 = time.monotonic()
        used = synthesize([f"{name}.v"], name, d).used
        for r in total:
            total[r] += used.get(r, 0)
        print(f"{name:<16} " + " ".join(f"{used.get(r, 0):>8g}" for r in XCK26_RESOURCES)
              + f"  {time.monotonic() - t0:7.0f}", flush=True)
    print(f"{'sum':<16} " + " ".join(f"{total[r]:>8g}" for r in XCK26_RESOURCES))
    pct = {r: 100 * total[r] / XCK26_RESOURCES[r] for r in XCK26_RESOURCES}
    print(f"{pct['LUT']:.2f} % of the XCK26's LUTs added by the fetching node's blocks (FF {pct['FF']:.2f} %, "
          f"BRAM36 {pct['BRAM36']:.2f} %, URAM {pct['URAM']:.2f} %, DSP {pct['DSP']:.2f} %; "
          f"rx_entries={a.rx_entries}, each block flattened alone, glue not counted)")


if __name__ == "__main__":
    main()
