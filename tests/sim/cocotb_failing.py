"""A cocotb test that must fail: proves run_cocotb reports failures (tests/sim/test_cocotb.py)."""
import cocotb
from cocotb.triggers import Timer


@cocotb.test()
async def always_fails(dut):
    await Timer(1, unit="ns")
    assert dut.m_axis_tvalid.value == 1, "m_axis_tvalid is low after reset, as expected"
