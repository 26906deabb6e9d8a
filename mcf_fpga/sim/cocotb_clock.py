"""Clock and reset for cocotb tests of generated Verilog (import only inside cocotb modules).

``await clock_and_reset(dut)`` starts a clock on ``dut.clk``, drives the given idle input
values, holds ``dut.rst`` high for ``cycles`` clock edges, releases it and waits one more
edge: the same start for every block tested in Verilog (AMBA names, ``clk``/``rst``).
"""
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles

__all__ = ["clock_and_reset"]


async def clock_and_reset(dut, *, clk: str = "clk", rst: str = "rst", period_ns: float = 10,
                          cycles: int = 3, idle: dict | None = None):
    clock = getattr(dut, clk)
    Clock(clock, period_ns, unit="ns").start()
    for name, value in (idle or {}).items():
        getattr(dut, name).value = value
    getattr(dut, rst).value = 1
    await ClockCycles(clock, cycles)
    getattr(dut, rst).value = 0
    await ClockCycles(clock, 1)
