#!/usr/bin/env python3
"""Simulator speed, side by side: one design (the AXIS register slice, 64-bit, the same
continuous stream of 256-byte frames) on the Amaranth simulator, cocotb + Verilator 5.48
(cocotbext-axi source/sink) and the MCF Verilator backend (C++ harness, one C call per
N cycles). Prints cycles/s of each and the ratios; the LAST line is the Verilator
backend's cycles/s. Builds are cached and not timed.

    .venv/bin/python scripts/bench_sim.py [--amaranth-cycles N] [--cocotb-cycles N] [--verilator-cycles N]
"""
import argparse
import tempfile
import time
from pathlib import Path


from amaranth.sim import Simulator  # noqa: E402

from mcf_fpga.hdl.bus.axis_register_slice import AXISRegisterSlice  # noqa: E402
from mcf_fpga.sim.kit import StreamSink, StreamSource, packets_to_beats  # noqa: E402

DATA_WIDTH = 64
FRAME = bytes(range(256))
BEATS_PER_FRAME = len(FRAME) * 8 // DATA_WIDTH


def design():
    return AXISRegisterSlice(DATA_WIDTH)


def bench_amaranth(cycles):
    dut = design()
    beats = packets_to_beats([FRAME] * (cycles // BEATS_PER_FRAME + 2), DATA_WIDTH)
    src, snk = StreamSource(dut.s_axis), StreamSink(dut.m_axis)
    sim = Simulator(dut)
    sim.add_clock(1e-8)

    async def tx(ctx):
        await src.send(ctx, beats[:cycles])
    async def rx(ctx):            # the sink is always ready: one beat per cycle
        await snk.collect(ctx, cycles)
    sim.add_testbench(tx)
    sim.add_testbench(rx)
    t = time.perf_counter()
    sim.run()
    dt = time.perf_counter() - t
    return cycles / dt


def bench_cocotb(cycles):
    from mcf_fpga.sim.cocotb_runner import run_cocotb
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "rate"
        run_cocotb(design(), "mcf_fpga.sim._bench_cocotb", work_dir=d, simulator="verilator",
                   extra_env={"MCF_BENCH_CYCLES": str(cycles), "MCF_BENCH_OUT": str(out)})
        return float(out.read_text())


def bench_verilator(cycles):
    from mcf_fpga.sim.verilator import build
    m = build(design())
    m.reset()
    for _ in range(cycles // BEATS_PER_FRAME + 2):
        m.push("s_axis", FRAME)
    t = time.perf_counter()
    m.step(cycles)
    dt = time.perf_counter() - t
    n = len(m.pull_all("m_axis"))
    assert n >= cycles // BEATS_PER_FRAME - 2, n
    return cycles / dt


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--amaranth-cycles", type=int, default=5_000)
    ap.add_argument("--cocotb-cycles", type=int, default=50_000)
    ap.add_argument("--verilator-cycles", type=int, default=5_000_000)
    a = ap.parse_args()
    print(f"design: AXISRegisterSlice(data_width={DATA_WIDTH}), continuous 256-byte frames, "
          f"sink always ready")
    am = bench_amaranth(a.amaranth_cycles)
    print(f"amaranth simulator     : {am:12,.0f} cycles/s  ({a.amaranth_cycles} cycles)")
    cc = bench_cocotb(a.cocotb_cycles)
    print(f"cocotb + verilator     : {cc:12,.0f} cycles/s  ({a.cocotb_cycles} cycles)")
    vb = bench_verilator(a.verilator_cycles)
    print(f"verilator backend      : {vb:12,.0f} cycles/s  ({a.verilator_cycles} cycles)")
    print(f"ratios: backend/amaranth = {vb / am:,.0f}x, backend/cocotb = {vb / cc:,.0f}x, "
          f"cocotb/amaranth = {cc / am:,.1f}x")
    print(f"verilator backend cycles/s: {vb:.0f}")


if __name__ == "__main__":
    main()
