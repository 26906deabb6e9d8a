"""The node board top (boards/node_top.py): the contract of boards/top.py, the build plan of
`mcf build --top node` (Verilog, XDC, Tcl referencing every source, manifest), and the AXI-Lite
map through the top (node registers unchanged at 0x0000.., DMA window at 0x8000, DECERR
elsewhere) in the Amaranth simulator with the test-sized engine.
"""
import json
import os

import pytest

from boards.flow import DEFAULT_TOP, TOPS, build, synth_split_modules
from boards.node_dma import DMA_ID, INFO_REGS
from boards.node_top import NodeBoardTop, DMA_BASE, weight_tile_words
from boards.top import describe_top
from hdl.bus import Resp
from hdl.node import NODE_ID, NodeConfig, SMALL_ENGINE
from hdl.sim.kit import AXI4LiteMaster, run_simulation


def test_tops_registered():
    assert {"node", "node-kr260", "standin"} <= set(TOPS)
    assert DEFAULT_TOP == "node"
    # tile of the small engine (K = 128, pk 16, group 32): header + one scale beat (4 groups of
    # the pk/2 = 8 a beat holds) + 8 weight beats, 2 words per beat
    assert weight_tile_words(SMALL_ENGINE) == (1 + 1 + 8) * 2
    with pytest.raises(ValueError, match="node_id"):
        NodeBoardTop(2, 2)
    with pytest.raises(ValueError, match="cfg"):
        NodeBoardTop(1, 0, cfg="small")


def test_build_plan_for_the_node_top(tmp_path):
    out = tmp_path / "b"
    r = build("kr260", top_name="node", out=str(out), synth=False, run_vivado=False, log=lambda *a: None)
    for f in ("mcf_node.v", "kr260_top.v", "kr260_top.xdc", "cdc.tcl", "build.tcl", "build_plan.md",
              "manifest.json"):
        assert (out / f).exists(), f
    tcl = (out / "build.tcl").read_text()
    for f in ("mcf_node.v", "kr260_top.v", "kr260_top.xdc", "cdc.tcl"):
        assert f in tcl, f
    man = json.loads((out / "manifest.json").read_text())
    assert man["hp_masters"] == [0, 1, 2] and man["links"] == [0, 1] and man["axil_size"] == 0x10000
    v = (out / "mcf_node.v").read_text()
    for port in ("s_axi_awaddr", "irq", "m_axi_hp0_arvalid", "m_axi_hp0_awvalid", "m_axi_hp1_wdata",
                 "m_axi_hp2_araddr", "m_axis_link0_tdata", "s_axis_link1_tuser"):
        assert port in v, port
    for k in (0, 1, 2):
        assert f"node/m_axi_hp{k}" in tcl
    assert "node/m_axi_hp3" not in tcl
    # the Yosys estimate's parts: the engine's module, found in this Verilog; a missing one is named
    assert synth_split_modules(NodeBoardTop, v) == ["mcf_node.dut.node.engine"]
    with pytest.raises(RuntimeError, match=r"synth_split 'node.nothing': 0 modules"):
        synth_split_modules(type("T", (), {"synth_split": ("node.nothing",)}), v)


def test_register_map_through_the_top():
    top = NodeBoardTop(1, 0, NodeConfig())
    assert describe_top(top).axil_addr_width == 16
    bus = AXI4LiteMaster(top.s_axi)
    seen = {}

    async def host(ctx):
        seen["node_id"] = await bus.read(ctx, 0x3000)
        seen["dma_id"] = await bus.read(ctx, DMA_BASE + INFO_REGS["id"])
        seen["hole"] = await bus.read(ctx, 0x4000)
        seen["past_dma"] = await bus.read(ctx, 0x9000)
        seen["w_hole"] = await bus.write(ctx, 0xC000, 1)
    run_simulation(top, [host], max_cycles=2000, vcd=False)
    assert seen["node_id"] == (NODE_ID, Resp.OKAY)
    assert seen["dma_id"] == (DMA_ID, Resp.OKAY)
    assert seen["hole"][1] == Resp.DECERR and seen["past_dma"][1] == Resp.DECERR
    assert seen["w_hole"] == Resp.DECERR
