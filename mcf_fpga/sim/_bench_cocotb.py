"""cocotb half of scripts/bench_sim.py: stream MCF_BENCH_CYCLES cycles of frames through the
design's s_axis -> m_axis with cocotbext-axi and write the measured cycles/s to MCF_BENCH_OUT."""
import os
import time

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource


@cocotb.test()
async def bench(dut):
    cycles = int(os.environ["MCF_BENCH_CYCLES"])
    frame = bytes(range(256))
    Clock(dut.clk, 10, unit="ns").start()
    dut.rst.value = 1
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
    snk = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst)
    beats = len(frame) * 8 // len(dut.s_axis_tdata)
    for _ in range(cycles // beats + 2):
        src.send_nowait(AxiStreamFrame(frame))
    t = time.perf_counter()
    await ClockCycles(dut.clk, cycles)
    dt = time.perf_counter() - t
    assert snk.count() > 0
    with open(os.environ["MCF_BENCH_OUT"], "w") as f:
        f.write(f"{cycles / dt}\n")
