"""The node board top (mcf_fpga/boards/node_top.py): the contract of mcf_fpga/boards/top.py, the build plan of
`mcf build --top node` (Verilog, XDC, Tcl referencing every source, manifest), and the AXI-Lite
map through the top (node registers unchanged at 0x0000.., DMA window at 0x8000, DECERR
elsewhere) in the Amaranth simulator with the test-sized engine; the fourth HP master (S_AXI_HP3_FPD)
of a node keeping K/V in DDR, and which engine the KR260 board build uses; a fetching node's
fetcher and loader on HP0's and HP2's read channels, its RX placer's registers at 0x6000; the weight
lanes on S_AXI_HPC0/1_FPD (Tcl, overlay, manifest, the beats each lane reads) and which tops have them.
"""
import json
import os

import pytest

from mcf_fpga.boards.dts import AFI_HP, AFI_HPC, overlay_dtsi
from mcf_fpga.boards.flow import DEFAULT_TOP, KR260_W_LANES, TOPS, build, synth_split_modules
from mcf_fpga.boards.node_dma import DMA_ID, INFO_REGS
from mcf_fpga.boards.node_top import NodeBoardTop, DMA_BASE, weight_tile_words
from mcf_fpga.boards.top import describe_top
from mcf_fpga.spec.kvregion import KVRegion, kr260_region
from mcf_fpga.hdl.compute.engine import KR260
from mcf_fpga.hdl.bus import Resp
from mcf_fpga.hdl.node import NODE_ID, NodeConfig, SMALL_ENGINE
from mcf_fpga.sim.kit import AXI4LiteMaster, run_simulation


def test_tops_registered():
    assert {"node", "node-kr260", "node-kr260-fetch", "node-kr260-onchip", "standin"} <= set(TOPS)
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
    assert man["hpc_masters"] == [] and "HPC" not in tcl       # the default top keeps one weight lane
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


def _ddr_cfg(**dma):
    """The test-sized engine keeping K/V in a small region (4 slots of 16 tokens x 2 heads)."""
    region = KVRegion(base=0x8_0000_0000, n_slots=4, slot_rows=32, d=SMALL_ENGINE["head_dim"], kv_bits=8)
    return NodeConfig(engine=dict(SMALL_ENGINE, kv_region=region, kv_win_rows=16, kv_n_win=2,
                                  **({"kv_dma": dma} if dma else {})))


def test_kv_in_ddr_node_puts_the_streamer_on_hp3(tmp_path):
    """An engine with a kv_region: the top gains m_axi_hp3 (the engine's m_axi_kv), the block
    design enables S_AXI_HP3_FPD (S_AXI_GP5) at 128 bits and wires node/m_axi_hp3 to it, and the
    overlay's config-afi sets HP3's read and write widths to 128 bits (value 0)."""
    top = NodeBoardTop(1, 0, _ddr_cfg())
    ports = describe_top(top)
    assert ports.hp_masters == (0, 1, 2, 3) and ports.hp_addr_width == 40
    assert top.signature.members["m_axi_hp3"].signature == top.node.signature.members["m_axi_kv"].signature
    out = tmp_path / "b"
    build("kr260", top=top, out=str(out), synth=False, run_vivado=False, log=lambda *a: None)
    man = json.loads((out / "manifest.json").read_text())
    assert man["hp_masters"] == [0, 1, 2, 3]
    tcl = (out / "build.tcl").read_text()
    assert "CONFIG.PSU__USE__S_AXI_GP5 {1}" in tcl and "CONFIG.PSU__SAXIGP5__DATA_WIDTH {128}" in tcl
    assert "[get_bd_intf_pins node/m_axi_hp3] [get_bd_intf_pins hp3_ic/S00_AXI]" in tcl
    assert "[get_bd_intf_pins hp3_ic/M00_AXI] [get_bd_intf_pins ps/S_AXI_HP3_FPD]" in tcl
    v = (out / "mcf_node.v").read_text()
    for port in ("m_axi_hp3_araddr", "m_axi_hp3_arvalid", "m_axi_hp3_rdata", "m_axi_hp3_awaddr",
                 "m_axi_hp3_wdata", "m_axi_hp3_wstrb", "m_axi_hp3_bresp"):
        assert port in v, port
    dts = overlay_dtsi("mcf")
    rd, wr = AFI_HP[3]
    assert (rd, wr) == (10, 11)                  # AFIFM5 = S_AXI_HP3_FPD (S_AXI_GP5)
    assert f"<{rd} 0>" in dts and f"<{wr} 0>" in dts


def test_weight_lanes_on_hpc0_and_hpc1(tmp_path):
    """A node top with w_lanes=3: m_axi_hpc0/1 (HP2's signature) through the whole flow -- the
    Verilog ports, the manifest, the packaged IP's address spaces, S_AXI_HPC0/1_FPD (S_AXI_GP0/1) enabled at 128 bits and wired,
    the overlay's config-afi entries 0..3 (AFIFM0/1 read and write) at 128 bits (value 0) -- and
    in simulation each lane reads exactly its weight beats of a tile (beat k on lane k mod 3:
    HP2, HPC0, HPC1), nothing on HP0/HP1. The GEMM takes no tile without a RUN, so the
    descriptor stays open; the reads are what is checked."""
    from mcf_fpga.boards.node_dma import engine_offset
    from mcf_fpga.sim import AXI4Memory
    top = NodeBoardTop(1, 0, NodeConfig(), w_lanes=3)
    ports = describe_top(top)
    assert (ports.hp_masters, ports.hpc_masters) == ((0, 1, 2), (0, 1))
    for i in (0, 1):
        assert top.signature.members[f"m_axi_hpc{i}"].signature == top.signature.members["m_axi_hp2"].signature
    out = tmp_path / "b"
    build("kr260", top=top, out=str(out), synth=False, run_vivado=False, log=lambda *a: None)
    man = json.loads((out / "manifest.json").read_text())
    assert man["hp_masters"] == [0, 1, 2] and man["hpc_masters"] == [0, 1]
    tcl = (out / "build.tcl").read_text()
    v = (out / "mcf_node.v").read_text()
    for i in (0, 1):
        assert f"CONFIG.PSU__USE__S_AXI_GP{i} {{1}}" in tcl and f"CONFIG.PSU__SAXIGP{i}__DATA_WIDTH {{128}}" in tcl
        assert f"[get_bd_intf_pins hpc{i}_ic/M00_AXI] [get_bd_intf_pins ps/S_AXI_HPC{i}_FPD]" in tcl
        for sig in ("araddr", "arvalid", "arready", "rdata", "rlast", "awvalid", "wdata", "bready"):
            assert f"m_axi_hpc{i}_{sig}" in v, (i, sig)
    import xml.etree.ElementTree as ET
    from mcf_fpga.boards.ip.component_xml import SPIRIT
    ns = {"spirit": SPIRIT}
    root = ET.parse(out / "ip" / "component.xml").getroot()       # the packaged IP: AXI4 masters too
    for i in (0, 1):
        space = root.find(f"spirit:addressSpaces/spirit:addressSpace[spirit:name='m_axi_hpc{i}']", ns)
        assert int(space.find("spirit:width", ns).text) == 128
    dts = overlay_dtsi("mcf")
    assert AFI_HPC == {0: (0, 1), 1: (2, 3)}
    assert sorted(e for d in (AFI_HPC, AFI_HP) for p in d.values() for e in p) == list(range(12))
    for i in (0, 1):
        rd, wr = AFI_HPC[i]
        assert f"<{rd} 0>" in dts and f"<{wr} 0>" in dts

    base, w_at, words = 0x1_0000_0000, 0x1_0000_0100, weight_tile_words(SMALL_ENGINE)
    beats = words // 2                                   # 32-byte weight beats of the small engine
    names = ("m_axi_hp0", "m_axi_hp1", "m_axi_hp2", "m_axi_hpc0", "m_axi_hpc1")
    mems = [AXI4Memory(1 << 12, base=base, latency=3, max_outstanding=4) for _ in names]
    for mem in mems[1:]:
        mem.mem = mems[0].mem
    bus = AXI4LiteMaster(top.s_axi)

    async def host(ctx):
        for r, val in (("addr_lo", w_at & 0xFFFFFFFF), ("addr_hi", w_at >> 32), ("length", 16 * words), ("go", 1)):
            assert await bus.write(ctx, DMA_BASE + engine_offset("w", r), val) == Resp.OKAY
        for _ in range(400):
            if sum(len(mem.log) for mem in mems) >= beats:
                break
            await ctx.tick().repeat(10)
        await ctx.tick().repeat(100)                     # nothing more is read
    run_simulation(top, [host], max_cycles=20_000, vcd=False,
                   background=[mem.testbench(getattr(top, n)) for mem, n in zip(mems, names)])
    reads = {n: [(kind, a, ln) for _c, kind, a, ln, _r in mem.log] for n, mem in zip(names, mems)}
    assert reads["m_axi_hp0"] == reads["m_axi_hp1"] == []
    for lane, n in enumerate(names[2:]):
        assert reads[n] == [("R", w_at + 32 * k, 1) for k in range(lane, beats, 3)], n


def test_kv_port_must_match_the_hp_ports():
    with pytest.raises(ValueError, match=r"m_axi_kv is 128-bit data, 44-bit addresses.*addr_width=40"):
        NodeBoardTop(1, 0, _ddr_cfg(addr_width=44))


def test_kr260_board_top_keeps_kv_in_ddr():
    """`mcf build --top node-kr260` is the DDR node (kr260_region(), 2 windows x 256 rows, HP3);
    `node-kr260-onchip` is the 4,096-row on-chip build it replaces (HP0..2 only)."""
    ddr = TOPS["node-kr260"](1, 0)
    eng = ddr.cfg.engine
    assert eng["kv_region"] == kr260_region() and eng["kv_region"].base == 0x8_0000_0000
    assert (eng["kv_win_rows"], eng["kv_n_win"]) == (256, 2) == (KR260["blk_max"], 2)
    assert eng["kv_dma"] == dict(max_burst=16, max_outstanding=8)
    assert describe_top(ddr).hp_masters == (0, 1, 2, 3)
    assert ddr.cfg.kv_install and ddr.dma.kv_install          # the NIC install path, writes on HP2
    assert ddr.node.signature.members["m_axi_kvin"].signature == ddr.signature.members["m_axi_hp2"].signature
    onchip = TOPS["node-kr260-onchip"](1, 0)
    assert onchip.cfg.engine == KR260 and describe_top(onchip).hp_masters == (0, 1, 2)
    assert not onchip.cfg.kv_install and not onchip.dma.kv_install


def test_kr260_tops_stripe_weights_as_the_model_assumes():
    """The host-fed KR260 tops (node-kr260, the one kr260_setup(kv="ddr") models, and
    node-kr260-onchip, kv="onchip") stream weights over HP2, HPC0, HPC1 (NodeDMA w_lanes = 3 =
    HardwareConfig.kr260().weight_ports) and the flow wires S_AXI_HPC0/1_FPD for them; the
    fetching top's weights come through its loader on HP2 alone (no HPC ports), as
    with_host(fetched=True) models; the test-sized default top keeps one lane."""
    from mcf_fpga.boards.vivado import build_tcl
    from mcf_fpga.host.config import HardwareConfig
    from mcf_fpga.host import perfmodel as pm
    assert HardwareConfig.kr260().weight_ports == KR260_W_LANES == 3
    for name in ("node-kr260", "node-kr260-onchip"):
        top = TOPS[name](1, 0)
        ports = describe_top(top)
        assert top.dma.w_lanes == KR260_W_LANES and ports.hpc_masters == (0, 1), name
        assert ports.hp_masters[:3] == (0, 1, 2)
        tcl = build_tcl(ports, app="x", sources=["mcf_node.v"], constraints=[])
        for i in (0, 1):
            assert f"connect_bd_intf_net [get_bd_intf_pins node/m_axi_hpc{i}] [get_bd_intf_pins hpc{i}_ic/S00_AXI]" in tcl
            assert f"[get_bd_pins ps/saxihpc{i}_fpd_aclk]" in tcl
    fetch = TOPS["node-kr260-fetch"](1, 0)
    assert fetch.dma.fetch and fetch.dma.w_lanes == 1 and describe_top(fetch).hpc_masters == ()
    P = {"ddr": {"port_bytes_per_cycle": 16.0, "ddr_bytes_per_cycle": 64.0, "weight_lanes": 3}}
    assert pm.with_host(P, fetched=True)["ddr"]["weight_lanes"] == 1
    assert pm.with_host(P)["ddr"]["weight_lanes"] == 3 and P["ddr"]["weight_lanes"] == 3
    assert describe_top(TOPS[DEFAULT_TOP](1, 0)).hpc_masters == ()


def test_kv_install_node_top_reaches_installer_and_events():
    """A node with kv_install: the installer's registers answer at 0x4000 of the node window, the
    DMA's KV event registers at 0x298 of its window (events discarded until KV_EV_CTRL is set), the
    installer's master is HP2's signature (its writes leave on HP2's AW/W/B: tests/boards/
    test_node_dma.py), and a 0x4000 access of a node without it stays a DECERR hole (above)."""
    import dataclasses
    from mcf_fpga.boards.node_dma import KV_EV_REGS
    from mcf_fpga.hdl.kvinstall import REGISTERS as KVIN_REGS
    cfg = dataclasses.replace(_ddr_cfg(), kv_install=True, kv_slots=4)
    top = NodeBoardTop(1, 0, cfg)
    assert top.dma.kv_install and top.dma.kv_event_bits == -(-top.node.kv_event_layout.size // 8) * 8
    assert describe_top(top).hp_masters == (0, 1, 2, 3)
    bus = AXI4LiteMaster(top.s_axi)
    seen = {}
    kvin = {r.name: 0x4000 + r.offset for r in KVIN_REGS}

    async def host(ctx):
        seen["committed"] = await bus.read(ctx, kvin["committed"])
        seen["status"] = await bus.read(ctx, kvin["status"])
        seen["past"] = await bus.read(ctx, 0x4000 + 0x40)
        seen["ev_ctrl"] = await bus.write(ctx, DMA_BASE + KV_EV_REGS["kv_ev_ctrl"], 1)
        seen["ev_status"] = await bus.read(ctx, DMA_BASE + KV_EV_REGS["kv_ev_status"])
    run_simulation(top, [host], max_cycles=3000, vcd=False)
    assert seen["committed"] == (0, Resp.OKAY) and seen["status"] == (0, Resp.OKAY)
    assert seen["past"][1] == Resp.DECERR
    assert seen["ev_ctrl"] == Resp.OKAY and seen["ev_status"] == (0, Resp.OKAY)


def test_installer_port_must_match_hp2():
    import dataclasses
    cfg = dataclasses.replace(_ddr_cfg(id_width=2), kv_install=True, kv_slots=4)
    with pytest.raises(ValueError, match=r"m_axi_kvin is AXI4Signature\(addr_width=40, data_width=128, "
                                         r"id_width=2\); S_AXI_HP2_FPD's write channels need"):
        NodeBoardTop(1, 0, cfg)


def test_fetching_node_top_reads_its_stream_on_hp0_and_its_data_on_hp2():
    """A node with the command fetcher (NodeConfig.fetcher): the fetcher's registers answer at
    0x5000 of the node window through the top's decoder (BASE_LO read back, DOORBELL, past its
    6-bit window DECERR); started on a stream of MARK, LOAD and END in DDR, it reads the stream
    through m_axi_hp0 (AR/R) and its loader reads the LOAD's words through m_axi_hp2, nothing on
    HP1's reads; the front-end has no cmd/sp_in/w readers (ENGINES = sp_out only) and refuses their
    GO at once with NO_ENGINE, nothing posted."""
    import dataclasses
    from mcf_fpga.boards.node_dma import ENGINES, Reject, engine_offset
    from mcf_fpga.hdl import cmdfetch as F
    from mcf_fpga.hdl.cmdstream import End, Load, Mark, encode
    from mcf_fpga.spec.loader import Dest
    from mcf_fpga.hdl.node import CMDFETCH_WINDOW
    from mcf_fpga.sim import AXI4Memory
    cfg = dataclasses.replace(_ddr_cfg(), fetcher=True)
    top = NodeBoardTop(1, 0, cfg)
    assert describe_top(top).hp_masters == (0, 1, 2, 3)
    assert top.dma.fetch and top.dma.built == ("sp_out",)
    for port, hp in (("m_axi_cmd", 0), ("m_axi_load", 2)):
        assert top.node.signature.members[port].signature == top.signature.members[f"m_axi_hp{hp}"].signature
    base, size = 0x1_0000_0000, 1 << 16
    stream_at, words_at = base + 0x100, base + 0x2000
    mems = []
    for k in range(4):
        mem = AXI4Memory(size if k < 3 else cfg.engine["kv_region"].size, base=base if k < 3 else
                         cfg.engine["kv_region"].base, latency=3, max_outstanding=4)
        if 0 < k < 3:
            mem.mem = mems[0].mem                      # one DDR behind HP0..2
        mems.append(mem)
    data = encode([Mark(0x1234), Load(Dest.SP, 4, words_at), End()])
    mems[0].load(stream_at, data)
    mems[0].load(words_at, bytes(range(16)))
    bus = AXI4LiteMaster(top.s_axi)
    fb = CMDFETCH_WINDOW[1]
    seen = {}

    async def host(ctx):
        seen["engines"] = await bus.read(ctx, DMA_BASE + INFO_REGS["engines"])
        for e in ("cmd", "sp_in", "w"):
            seen[f"{e}_go"] = await bus.write(ctx, DMA_BASE + engine_offset(e, "go"), 1)
            seen[e] = [(await bus.read(ctx, DMA_BASE + engine_offset(e, r)))[0]
                       for r in ("code", "rejected", "posted", "done")]
        seen["past"] = await bus.read(ctx, fb + 0x40)
        for off, v in ((F.BASE_LO, stream_at & 0xFFFFFFFF), (F.BASE_HI, stream_at >> 32),
                       (F.LEN, len(data) // 8), (F.WATCHDOG, 5000), (F.DOORBELL, 7)):
            assert await bus.write(ctx, fb + off, v) == Resp.OKAY
        seen["base_lo"] = await bus.read(ctx, fb + F.BASE_LO)
        seen["doorbell"] = await bus.read(ctx, fb + F.DOORBELL)
        assert await bus.write(ctx, fb + F.CTRL, F.CTRL_START) == Resp.OKAY
        for _ in range(200):
            loads, _r = await bus.read(ctx, fb + F.LOADS)
            if loads:
                break
        seen["loads"] = loads
        seen["mark"] = await bus.read(ctx, fb + F.MARK)
        await ctx.tick().repeat(200)
    run_simulation(top, [host], max_cycles=20_000, vcd=False,
                   background=[mems[k].testbench(getattr(top, f"m_axi_hp{k}")) for k in range(4)])
    assert seen["engines"] == (1 << ENGINES["sp_out"], Resp.OKAY)
    for e in ("cmd", "sp_in", "w"):
        assert seen[f"{e}_go"] == Resp.OKAY and seen[e] == [Reject.NO_ENGINE << 8, 1, 0, 0], e
    assert seen["past"][1] == Resp.DECERR
    assert seen["base_lo"] == (stream_at & 0xFFFFFFFF, Resp.OKAY) and seen["doorbell"] == (7, Resp.OKAY)
    assert seen["loads"] == 1 and seen["mark"] == (0x1234, Resp.OKAY)
    reads = {k: [a for _c, kind, a, _ln, _r in mems[k].log if kind == "R"] for k in range(3)}
    assert reads[0] and all(stream_at & ~0xF <= a < stream_at + len(data) for a in reads[0])
    assert reads[2] == [words_at] and reads[1] == []
    assert not any(kind == "W" for k in range(3) for _c, kind, *_ in mems[k].log)


def test_kr260_fetching_top():
    """`mcf build --top node-kr260-fetch`: node-kr260 with the fetcher (HP0's reads) and the loader
    (HP2's reads, beside the installer's writes), the RX placer (KR260_RX_ENTRIES entries, HP0's
    writes beside the RX-ring writer), the front-end without its host readers."""
    from mcf_fpga.boards.flow import KR260_RX_ENTRIES
    top = TOPS["node-kr260-fetch"](1, 0)
    assert top.cfg.fetcher and top.cfg.kv_install and top.cfg.engine == TOPS["node-kr260"](1, 0).cfg.engine
    assert top.cfg.rx_entries == KR260_RX_ENTRIES == 16 and top.cfg.pick_slots == 4
    assert describe_top(top).hp_masters == (0, 1, 2, 3) and top.dma.built == ("sp_out",)
    for port, hp in (("m_axi_cmd", 0), ("m_axi_load", 2), ("m_axi_kvin", 2), ("m_axi_rx", 0)):
        assert top.node.signature.members[port].signature == top.signature.members[f"m_axi_hp{hp}"].signature


def test_rx_placer_top_answers_at_0x6000():
    """A fetching node with an RX placer: its registers answer at 0x6000 of the node window through
    the top's decoder (limit read back, a program of an entry past rx_entries counted in bad_sel,
    status idle, past its 7-bit window DECERR); with nothing received nothing is written on any
    HP port (the placer's writes through HP0's arbiter: tests/host/board/test_board_fetch.py)."""
    import dataclasses
    from mcf_fpga.hdl.rx_placer import CTRL_PROGRAM, REGISTERS as RX_REGS
    from mcf_fpga.sim import AXI4Memory
    cfg = dataclasses.replace(_ddr_cfg(), fetcher=True, rx_entries=2)
    top = NodeBoardTop(1, 0, cfg)
    assert top.node.signature.members["m_axi_rx"].signature == top.signature.members["m_axi_hp0"].signature
    rx = {r.name: 0x6000 + r.offset for r in RX_REGS}
    bus = AXI4LiteMaster(top.s_axi)
    mems = [AXI4Memory(1 << 12, base=0x1_0000_0000) for _ in range(3)]
    mems.append(AXI4Memory(cfg.engine["kv_region"].size, base=cfg.engine["kv_region"].base))
    seen = {}

    async def host(ctx):
        assert await bus.write(ctx, rx["limit"], 0x1230) == Resp.OKAY
        seen["limit"] = await bus.read(ctx, rx["limit"])
        assert await bus.write(ctx, rx["sel"], 5) == Resp.OKAY
        assert await bus.write(ctx, rx["ctrl"], CTRL_PROGRAM) == Resp.OKAY
        seen["bad_sel"] = await bus.read(ctx, rx["bad_sel"])
        seen["status"] = await bus.read(ctx, rx["status"])
        seen["past"] = await bus.read(ctx, 0x6000 + 0x80)
    run_simulation(top, [host], max_cycles=5000, vcd=False,
                   background=[mems[k].testbench(getattr(top, f"m_axi_hp{k}")) for k in range(4)])
    assert seen["limit"] == (0x1230, Resp.OKAY) and seen["bad_sel"] == (1, Resp.OKAY)
    assert seen["status"] == (0, Resp.OKAY) and seen["past"][1] == Resp.DECERR
    assert not any(mem.log for mem in mems)


def test_fetcher_ports_must_match_the_hp_ports():
    import dataclasses
    cfg = dataclasses.replace(_ddr_cfg(), fetcher=True)
    with pytest.raises(ValueError, match=r"the node's m_axi_cmd is AXI4Signature\(addr_width=40, .*S_AXI_HP0_FPD's "
                                         r"read channels need AXI4Signature\(addr_width=44"):
        NodeBoardTop(1, 0, cfg, addr_width=44)
