"""The NIC's generated Verilog with AMBA port names, tested with cocotb + cocotbext-axi."""
import re

from mcf_fpga.hdl.nic.nic import Nic
from mcf_fpga.sim.cocotb_runner import run_cocotb
from mcf_fpga.hdl.verilog import to_verilog

from tests.hdl.nic.cocotb_nic import CFG


def test_amba_port_names():
    v = to_verilog(Nic(CFG))
    ports = set(re.findall(r"^\s*(?:input|output)\s+(?:wire\s+|reg\s+)?(?:\[[^\]]+\]\s*)?(\w+)\s*;", v, re.M))
    want = {"clk", "rst", "s_axi_awaddr", "s_axi_wdata", "s_axi_bresp", "s_axi_arvalid", "s_axi_rdata",
            "s_axis_tdata", "s_axis_tkeep", "s_axis_tlast", "s_axis_tvalid", "s_axis_tready",
            "m_axis_tdata", "m_axis_tvalid", "m_axis_inval_tdata", "crc_err"}
    for p in range(1, CFG.n_net + 1):
        want |= {f"s_axis_net{p}_tdata", f"m_axis_net{p}_tlast", f"m_axis_net{p}_tready"}
    assert want <= ports, sorted(want - ports)


def test_cocotb_multicast_and_reduction(tmp_path):
    run_cocotb(Nic(CFG), "tests.hdl.nic.cocotb_nic", work_dir=tmp_path)
