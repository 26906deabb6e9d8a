"""The DMA tops' AMBA-named Verilog under cocotb with cocotbext-axi AxiRam as the memory.

Icarus, not Verilator: a fresh Verilator build of each top costs ~45 s, which would eat
the memory tests' 3-minute budget; the Verilog is the same (Icarus build + run ~4 s)."""
import pytest

from mcf_fpga.hdl.dma.top import DMAReaderTop, DMAWriterTop
from mcf_fpga.sim.cocotb_runner import run_cocotb


@pytest.mark.parametrize("top,case", [(DMAReaderTop, "reader_reads_axiram"),
                                      (DMAWriterTop, "writer_writes_axiram")])
def test_dma_verilog_with_axiram(top, case, tmp_path):
    run_cocotb(top(addr_width=32, data_width=128, max_burst=16, max_outstanding=4),
               "tests.hdl.dma.cocotb_dma", work_dir=tmp_path, testcase=case,
               extra_env={"DMA_MAX_BURST": "16"}, simulator="icarus")


def test_memory_blocks_export_amba_verilog():
    """Every registered memory-system block exports with AMBA port names."""
    from mcf_fpga.hdl import blocks
    from mcf_fpga.hdl.verilog import amba_ports
    want = {"dma_reader": {"s_axis_desc", "m_axis", "m_axis_status", "m_axi"},
            "dma_writer": {"s_axis_desc", "s_axis", "m_axis_status", "m_axi"},
            "pingpong_loader": {"s_axis_desc", "m_axis", "m_axis_status", "m_axi"},
            "kv_pool": {"s_axis_cmd", "m_axis_resp", "s_axis_nic", "s_axi"}}
    for name, prefixes in want.items():
        comp, rename = blocks.build(name)
        assert {p.prefix for p in amba_ports(comp, rename=rename) if p.kind != "signal"} == prefixes
