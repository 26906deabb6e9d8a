"""RGMIIMac (behavioural DDR) in Verilog against cocotbext-eth's RGMII models.

Runs on Verilator (the runner's default; the build is cached by Verilog hash). Under
Icarus the cocotb handles of this two-clock design fail to resolve ("subsection not found"),
not investigated further."""
import pytest

from mcf_fpga.hdl.eth import RGMIIMac
from mcf_fpga.sim.cocotb_runner import run_cocotb


def test_rgmii_mac_against_cocotbext_eth(tmp_path):
    run_cocotb(RGMIIMac(), "tests.hdl.eth.cocotb_rgmii", work_dir=tmp_path,
               rename={"i": "s_axis", "o": "m_axis"})
