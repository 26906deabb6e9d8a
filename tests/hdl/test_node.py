"""One node (mcf_fpga/hdl/node.py): configuration checks, AMBA-named Verilog export, and on the Verilator
backend the register map (every window, unmapped -> DECERR), the KV pool command path against
mcf_fpga/golden/kvpool.py, and an engine error that halts the engine but not the node. On the Amaranth
simulator: a fetching node picks tokens (ARGMAX and PAIRS) and PUTs them into its scratchpad in
stream order with its loads."""
import re

import pytest
from hypothesis import given, settings, strategies as st

from mcf_fpga.golden.kvpool import KVPool as GoldenKVPool
from mcf_fpga.hdl.bus import Access, Resp
from mcf_fpga.hdl.compute.engine import ERR_OPCODE, INSTR
from mcf_fpga.spec.instr import EngineOpcode, SpwFlags
from mcf_fpga.hdl.kvpool import cmd_layout, registers as kv_registers, resp_layout
from mcf_fpga.spec.nic import NIC_ID, NicConfig
from mcf_fpga.hdl.nic.link import COUNTERS, LinkParams
from mcf_fpga.hdl.nic.nic import nic_registers
from mcf_fpga.hdl.node import (DEFAULT_MAC, NODE_ID, WINDOWS, Node, NodeConfig, NodeReg, node_registers, pad8)
from tests.hdl.node_util import instr_bytes, words_bytes
from tests.hdl.vl_node import TEST_CFG

#: one worker runs this module's tests: they share Verilator builds, which the other worker would
#: otherwise sit waiting for (tests/conftest.py, "Shared builds")
pytestmark = pytest.mark.xdist_group("test_node")

ENGINE_REGS = {0x0: Access.RO, 0x4: Access.RO, 0x8: Access.RW}
KNOWN_OPS = set(EngineOpcode)
BAD_OPS = [o for o in range(16) if o not in KNOWN_OPS]


@pytest.fixture(scope="module")
def node():
    from mcf_fpga.sim.cluster import _model
    m = _model(TEST_CFG)
    m.reset()
    return m


# ------------------------------------------------------------------ configuration
@pytest.mark.parametrize("kw, msg", [
    (dict(engine={"pn": 4, "bogus": 1}), "engine has unknown parameter"),
    (dict(engine={"pn": 1, "pk": 1}), "pn\\*pk must be even"),
    (dict(nic=NicConfig(n_net=3)), "n_net must be 2"),
    (dict(nic=NicConfig(n_net=2, max_payload=512), link=LinkParams(max_packet=512)), "max_packet must be at least 528"),
    (dict(link=LinkParams(data_width=32, max_packet=4096)), "link.data_width must be 64"),
    (dict(kv_slots=0), "kv_slots must be in 1..4096"),
    (dict(pkt_meta_depth=1), "pkt_meta_depth must be in 2..256"),
    (dict(nic="ring"), "nic must be a NicConfig"),
])
def test_bad_config_names_field_and_limit(kw, msg):
    with pytest.raises(ValueError, match=msg):
        NodeConfig(**kw)


def test_cluster_refuses_bad_sizes():
    from mcf_fpga.sim.cluster import SimCluster
    with pytest.raises(ValueError, match="n must be in 2..16"):
        SimCluster(17, "ring", TEST_CFG)
    ring_cfg = NodeConfig(nic=NicConfig(n_net=2, max_payload=256), link=TEST_CFG.link)
    with pytest.raises(ValueError, match="needs nic.n_net >= 4"):
        SimCluster(4, "mesh", ring_cfg)


def test_verilog_has_amba_port_names():
    from mcf_fpga.hdl.verilog import to_verilog
    text = to_verilog(Node(TEST_CFG), "node")
    header = re.search(r"^module node\((.*?)\);", text, re.M | re.S).group(1)
    ports = {p.strip() for p in header.split(",")}
    want = {"clk", "rst", "irq"}
    want |= {f"s_axi_{c}{f}" for c, fs in (("aw", ("addr", "prot", "valid", "ready")),
                                            ("w", ("data", "strb", "valid", "ready")),
                                            ("b", ("resp", "valid", "ready")),
                                            ("ar", ("addr", "prot", "valid", "ready")),
                                            ("r", ("data", "resp", "valid", "ready"))) for f in fs}
    for s, fields in (("s_axis_cmd", "data"), ("s_axis_w", "data last"), ("s_axis_sp", "data"),
                      ("m_axis_sp", "data last"), ("m_axis_rx", "data keep last"),
                      ("s_axis_kvcmd", "data"), ("m_axis_kvresp", "data"),
                      *((f"{d}_axis_eth{p}", "data keep last") for d in "sm" for p in range(1, 5))):
        want |= {f"{s}_t{f}" for f in fields.split() + ["valid", "ready"]}
    assert want <= ports, sorted(want - ports)
    assert ports <= want, sorted(ports - want)
    widths = dict((n, int(w) + 1) for w, n in re.findall(r"(?:input|output)\s+(?:wire\s+)?\[(\d+):0\]\s+(\w+);", text))
    assert widths["s_axis_cmd_tdata"] == pad8(INSTR.size)
    assert widths["s_axis_w_tdata"] == 4 * 16 * 4
    assert widths["s_axi_awaddr"] == 16
    assert widths["s_axis_kvcmd_tdata"] == pad8(cmd_layout(32).size)


# ------------------------------------------------------------------ register map (Verilator)
def register_map(cfg):
    """Golden address map: absolute address -> Access, from each block's register list."""
    out = {}
    lists = {"engine": [(o, a) for o, a in ENGINE_REGS.items()],
             "nic": [(r.offset, r.access) for r in nic_registers(cfg.nic)],
             "kvpool": [(r.offset, r.access) for r in kv_registers(cfg.kv_slots)],
             "node": [(r.offset, r.access) for r in node_registers(cfg)]}
    for name, base, _ in WINDOWS:
        for off, acc in lists[name]:
            out[base + off] = acc
    return out


def test_register_map_values(node):
    rd = lambda a: node.axil_read(a)
    assert rd(0x3000 + NodeReg.ID) == (NODE_ID, Resp.OKAY)
    assert rd(0x1000) == (NIC_ID, Resp.OKAY)
    assert rd(0x2020) == (TEST_CFG.kv_slots, Resp.OKAY)            # KV pool n_slots
    assert rd(0x2024) == (TEST_CFG.kv_block_bytes, Resp.OKAY)
    assert rd(0x0000) == (0, Resp.OKAY)                            # engine STATUS: idle
    cfgwords = {NodeReg.N_NET: 4, NodeReg.ENGINE_PN: 4, NodeReg.ENGINE_PK: 16, NodeReg.ENGINE_HEAD_DIM: 16,
                NodeReg.ENGINE_SP_DEPTH: 16384, NodeReg.KV_SLOTS: 8, NodeReg.MAX_PAYLOAD: 256,
                NodeReg.STATUS: 0}
    for off, v in cfgwords.items():
        assert rd(0x3000 + off) == (v, Resp.OKAY), off.name
    for p in (1, 2, 3, 4):
        assert rd(0x3000 + 0x100 * p + 0x80) == (DEFAULT_MAC & 0xFFFFFFFF, Resp.OKAY)
        assert rd(0x3000 + 0x100 * p + 0x84) == (DEFAULT_MAC >> 32, Resp.OKAY)
        for k, c in enumerate(COUNTERS):
            assert rd(0x3000 + 0x100 * p + 4 * k) == (0, Resp.OKAY), c
    for a in (0x4000, 0xFFFC, 0x1100, 0x2100, 0x3000 + 0x100 * 5, 0x3000 + 0x100 + 0x90, 0x0002):
        assert rd(a) == (0, Resp.DECERR), hex(a)
        assert node.axil_write(a, 1) == Resp.DECERR, hex(a)


@given(addrs=st.lists(st.one_of(st.integers(0, 0xFFFF),
                                st.sampled_from(sorted(register_map(TEST_CFG)))), min_size=1, max_size=40))
def test_register_map_decode(node, addrs):
    """Reads of random addresses: OKAY exactly at the registers of some block, else DECERR (0)."""
    regs = register_map(TEST_CFG)
    for a in addrs:
        d, r = node.axil_read(a)
        if a in regs:
            assert r == Resp.OKAY, hex(a)
        else:
            assert (d, r) == (0, Resp.DECERR), hex(a)


# ------------------------------------------------------------------ KV pool (Verilator)
def fields_of(layout, value):
    out = {}
    for name, f in layout:
        out[name] = (value >> f.offset) & ((1 << f.width) - 1)
    return out


@given(cmds=st.lists(st.tuples(st.integers(0, 15), st.sampled_from([0, 1, 7, 0x100, 0xFFFFFFFF, 0x1234])),
                     min_size=1, max_size=40),
       seed=st.integers(0, 2 ** 16))
def test_kv_commands_match_golden(node, cmds, seed):
    cl = cmd_layout(32)
    rl = resp_layout(TEST_CFG.kv_slots, 15)
    node.reset()
    node.pull_all("m_axis_kvresp")
    node.sink_backpressure("m_axis_kvresp", seed)
    gold = GoldenKVPool(TEST_CFG.kv_slots, TEST_CFG.kv_block_bytes, kv_id_width=32)
    for op, kv in cmds:
        value = op | kv << cl["kv_id"].offset
        node.push("s_axis_kvcmd", value.to_bytes(pad8(cl.size) // 8, "little"))
    node.step(20 * len(cmds) + 50)
    got = [int.from_bytes(f, "little") for f in node.pull_all("m_axis_kvresp")]
    node.sink_backpressure("m_axis_kvresp", None)
    assert len(got) == len(cmds)
    for (op, kv), g in zip(cmds, got):
        want = gold.execute(op, kv)
        assert fields_of(rl, g) == dict(status=int(want.status), slot=want.slot, state=int(want.state),
                                        readers=want.readers, freed=int(want.freed)), (op, kv)
    assert node.axil_read(0x2018) == (gold.used_slots, Resp.OKAY)


# ------------------------------------------------------------------ engine errors (Verilator)
@given(bad=st.sampled_from(BAD_OPS), words=st.lists(st.integers(-2 ** 31, 2 ** 31 - 1), min_size=1, max_size=40),
       seed=st.integers(0, 2 ** 16))
def test_bad_opcode_halts_engine_not_node(node, bad, words, seed):
    node.reset()
    node.pull_all("m_axis_sp")
    node.push("s_axis_cmd", instr_bytes(bad))
    node.step(50)
    status, r = node.axil_read(0x0000)
    assert r == Resp.OKAY and status & 2 and (status >> 8) & ERR_OPCODE, hex(status)
    assert node.peek("irq") == 1
    assert node.axil_read(0x3000 + NodeReg.STATUS)[0] & 0xFF03 == (ERR_OPCODE << 8) | 3
    # the rest of the node keeps answering while the engine is halted
    assert node.axil_read(0x1000) == (NIC_ID, Resp.OKAY)
    assert node.axil_read(0x2020) == (TEST_CFG.kv_slots, Resp.OKAY)
    # queued work waits; CTRL resumes the engine and it runs SPW then SPR
    node.sink_backpressure("m_axis_sp", seed)
    node.push("s_axis_cmd", instr_bytes(EngineOpcode.SPW, dst=100, n0=len(words)))
    node.push("s_axis_sp", words_bytes(words))
    node.push("s_axis_cmd", instr_bytes(EngineOpcode.SPR, a=100, n0=len(words)))
    node.step(100)
    assert node.pull_all("m_axis_sp") == []
    assert node.axil_write(0x0008, 1) == Resp.OKAY
    node.step(20 * len(words) + 100)
    assert node.pull_all("m_axis_sp") == [words_bytes(words)]
    assert node.peek("irq") == 0
    assert node.axil_read(0x0000)[0] & 0xFF03 == 0
    assert node.axil_read(0x0004) == (2, Resp.OKAY)       # RETIRED: SPW, SPR
    node.sink_backpressure("m_axis_sp", None)


@given(shape=st.one_of(st.tuples(st.just("ring"), st.integers(2, 16)),
                       st.tuples(st.integers(1, 4), st.integers(1, 4)).filter(lambda rc: rc[0] * rc[1] >= 2)))
def test_cluster_wiring_follows_topology(shape):
    """SimCluster's links: port p of i reaches the port of j that faces i, every connected
    port carries exactly one outgoing and one incoming wire (ring and mesh)."""
    from mcf_fpga.spec.topology import Mesh, Ring
    from mcf_fpga.sim.cluster import link_wires
    topo = Ring(shape[1]) if shape[0] == "ring" else Mesh(*shape)
    wires = link_wires(topo)
    ports = {(i, p) for i in range(topo.n) for p in range(1, topo.n_net + 1) if topo.neighbor(i, p) is not None}
    assert sorted((i, p) for i, p, _, _ in wires) == sorted(ports)
    assert sorted((j, q) for _, _, j, q in wires) == sorted(ports)
    for i, p, j, q in wires:
        assert topo.neighbor(i, p) == j and topo.neighbor(j, q) == i


@given(T=st.integers(1, 4), kc=st.integers(1, 4), tiles=st.integers(1, 3), data=st.data())
def test_gemm_through_node_ports(node, T, kc, tiles, data):
    """s_axis_w feeds the engine's GEMM array: x and exponents in through s_axis_sp (SPW),
    weight tiles through s_axis_w, y out through m_axis_sp (SPR) equals golden QuantLinear."""
    import torch
    from mcf_fpga.golden.numerics import QuantLinear
    from mcf_fpga.hdl.compute.program import gemm_weight_beats
    pn, pk, group = 4, 16, 32
    K, N = kc * group, tiles * pn
    d = lambda lo, hi, n: data.draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n))
    q = torch.tensor(d(-7, 7, N * K)).view(N, K)
    ws = torch.tensor(d(1, 255, N * kc)).view(N, kc)
    we = torch.tensor(d(4, 14, N))
    bias = torch.tensor(d(-2 ** 20, 2 ** 20, N))
    x = torch.tensor(d(-128, 127, T * K)).view(T, K)
    xe = torch.tensor(d(0, 8, T))
    lin = QuantLinear(q, ws, we, bias, group)
    want = lin(x, xe).flatten().tolist()
    node.reset()
    node.pull_all("m_axis_sp")
    node.sink_backpressure("m_axis_sp", data.draw(st.integers(0, 2 ** 16)))
    xa, ya = 0, 1000
    node.push("s_axis_cmd", instr_bytes(EngineOpcode.SPW, dst=xa, n0=T * K))
    node.push("s_axis_sp", words_bytes(x.flatten().tolist()))
    node.push("s_axis_cmd", instr_bytes(EngineOpcode.SPW, flags=SpwFlags(em=True), dst=0, ed=0, n0=T))
    node.push("s_axis_sp", words_bytes(xe.tolist()))
    node.push("s_axis_cmd", instr_bytes(EngineOpcode.GEMM, a=xa, ea=0, n0=T, len=K, n1=N, dst=ya))
    node.push("s_axis_cmd", instr_bytes(EngineOpcode.SPR, a=ya, n0=T * N))
    beats = gemm_weight_beats(lin, pn, pk)
    tile = b""
    for b in beats:
        tile += int(b["data"]).to_bytes(pn * pk * 4 // 8, "little")
        if b["last"]:
            node.push("s_axis_w", tile)
            tile = b""
    node.step(2000 + 20 * T * K + 50 * len(beats))
    node.sink_backpressure("m_axis_sp", None)
    assert node.axil_read(0x0000)[0] == 0                       # idle, no error
    assert node.pull_all("m_axis_sp") == [words_bytes(want)]


def _spr_frames(dut, frames):
    """A background process of the Amaranth simulator: ``dut.m_axis_sp`` always ready, each
    frame of SPR words (up to ``last``) appended to ``frames``."""
    async def sink(ctx):
        cur = []
        ctx.set(dut.m_axis_sp.ready, 1)
        async for _, _, v, p in ctx.tick().sample(dut.m_axis_sp.valid, dut.m_axis_sp.payload):
            if v:
                cur.append(int(p.data))
                if p.last:
                    frames.append(cur)
                    cur = []
    return sink


# ------------------------------------------------------------------ the fetcher's PICK and PUT (Amaranth simulator)
@pytest.mark.parametrize("spw_pairs", [False, True])
def test_fetched_picks_put_tokens_into_the_scratchpad(spw_pairs):
    """A fetching node with the token picker runs one stream: an ARGMAX pick over an SPR frame of
    loaded logits; two PUTs (tokens[slot] + 1000, values[slot]) between two SP loads, all fed to
    one SPW and read back with SPR: the words in stream order; a PAIRS pick over (value, id)
    pairs (a tie: the first pair wins), its id and value PUT back (value + add wraps) -- no host
    on the way. The node's PICKS / PICK_ERRORS registers and the fetcher's STATUS agree.
    ``spw_pairs``: the loader's SP words two a beat, the PUTs one, realigned by SPW (odd loads,
    puts between pair beats, pair and word SPWs): the same words."""
    from mcf_fpga.spec.kvregion import KVRegion
    from mcf_fpga.hdl import cmdfetch as F
    from mcf_fpga.hdl.cmdstream import End, Engine, Load, Pick, Put, Wait, encode
    from mcf_fpga.spec.loader import Dest
    from mcf_fpga.hdl.node import CMDFETCH_WINDOW, SMALL_ENGINE
    from mcf_fpga.sim import AXI4Memory
    from mcf_fpga.sim.kit import AXI4LiteMaster, run_simulation
    from mcf_fpga.spec.token_picker import PickMode

    region = KVRegion(base=0x4000_0000, n_slots=16, slot_rows=16, d=SMALL_ENGINE["head_dim"])
    pairs_kw = dict(sp_pairs=True, vec_pipelined=True, spw_pairs=True) if spw_pairs else {}
    dut = Node(NodeConfig(engine=dict(SMALL_ENGINE, kv_region=region, **pairs_kw), fetcher=True, pick_slots=2))
    CMD, DATA, M = 0x10_0000, 0x20_0000, 2 ** 32 - 1
    logits, d, pairs = [5, -3 & M, 77, 77, 2], [0x11, 0x22, 0x33, 0x44], [-1 & M, 500, 9, 600, 9, 700]
    image = bytearray(0x400)
    for off, ws in ((0, logits), (64, d[:2]), (128, d[2:]), (192, pairs)):
        image[off:off + 4 * len(ws)] = b"".join(w.to_bytes(4, "little") for w in ws)
    SPW = lambda n, dst: Engine(dict(op=EngineOpcode.SPW, n0=n, dst=dst))
    SPR = lambda n, a: Engine(dict(op=EngineOpcode.SPR, n0=n, a=a))
    stream = encode([
        Load(Dest.SP, 5, DATA), SPW(5, 0), Pick(0, 0, 5, 1), SPR(5, 0), Wait(2, 1),        # frame 0 -> slot 1
        Load(Dest.SP, 2, DATA + 64), Put(1, 0, 1000), Put(1, 1), Load(Dest.SP, 2, DATA + 128),
        SPW(6, 16), SPR(6, 16),                                                            # frame 1
        Load(Dest.SP, 6, DATA + 192), SPW(6, 32), Pick(2, 0, 6, 0, PickMode.PAIRS), SPR(6, 32),
        Wait(2, 2), Put(0, 0), Put(0, 1, 2 ** 32 - 9), SPW(2, 48), SPR(2, 48), End()])    # frames 2, 3
    cmem = AXI4Memory(0x1000, data_width=128, base=CMD, latency=6)
    cmem.load(CMD, stream)
    dmem = AXI4Memory(0x1000, data_width=128, base=DATA, latency=10, bytes_per_cycle=8)
    dmem.load(DATA, bytes(image))
    frames, regs = [], {}
    sink = _spr_frames(dut, frames)

    async def host(ctx):
        bus, fb = AXI4LiteMaster(dut.s_axi), CMDFETCH_WINDOW[1]
        for off, v in ((F.BASE_LO, CMD), (F.LEN, len(stream) // 8), (F.WATCHDOG, 5000), (F.CTRL, F.CTRL_START)):
            await bus.write(ctx, fb + off, v)
        while (await bus.read(ctx, fb + F.STATUS))[0] & 1:
            await ctx.tick().repeat(20)
        for name, off in (("status", fb + F.STATUS), ("err_cause", fb + F.ERR_CAUSE), ("loads", fb + F.LOADS),
                          ("picks", 0x3000 + NodeReg.PICKS), ("pick_errors", 0x3000 + NodeReg.PICK_ERRORS)):
            regs[name] = (await bus.read(ctx, off))[0]

    run_simulation(dut, [host], background=[sink, cmem.testbench(dut.m_axi_cmd), dmem.testbench(dut.m_axi_load)],
                   vcd=False, max_cycles=20_000)
    assert regs == dict(status=F.STATUS_DONE, err_cause=0, loads=4, picks=2, pick_errors=0)
    assert frames == [logits,
                      [d[0], d[1], 2 + 1000, 77, d[2], d[3]],     # argmax token 2 (first 77), its value
                      pairs,
                      [600, 0]]                                  # PAIRS: id of the first 9; 9 + 2**32 - 9


# ------------------------------------------------------------------ the host's SP words two a beat (Amaranth simulator)
def _host_sp_run(spws, seed, vp):
    """SPW then SPR of each ``(dst, words)`` of ``spws`` on a node whose engine has ``spw_pairs``,
    the host's words one frame per SPW as ``hdl.host_sp`` beats (two a beat from the first, an odd
    count's last alone; ``vp``: valid probability). Returns the SPR frames and the cycles of the
    ``s_axis_sp`` transfers."""
    from mcf_fpga.hdl.compute.program import instr
    from mcf_fpga.hdl.node import SMALL_ENGINE
    from mcf_fpga.sim.kit import StreamSource, run_simulation

    dut = Node(NodeConfig(engine=dict(SMALL_ENGINE, sp_pairs=True, vec_pipelined=True, spw_pairs=True)))
    frames, taken = [], []
    sink = _spr_frames(dut, frames)

    async def watch(ctx):
        cycle = 0
        async for _, _, v, r in ctx.tick().sample(dut.s_axis_sp.valid, dut.s_axis_sp.ready):
            if v and r:
                taken.append(cycle)
            cycle += 1

    async def cmds(ctx):
        src = StreamSource(dut.s_axis_cmd, seed=seed)
        for dst, words in spws:
            await src.send(ctx, [INSTR.const(instr(EngineOpcode.SPW, dst=dst, n0=len(words))).as_value().value,
                                 INSTR.const(instr(EngineOpcode.SPR, a=dst, n0=len(words))).as_value().value])

    async def host(ctx):
        src = StreamSource(dut.s_axis_sp, seed=seed + 1, valid_prob=vp)
        for _, words in spws:
            w = [x & 0xFFFF_FFFF for x in words]
            await src.send(ctx, [{"data": w[j] | (w[j + 1] if j + 1 < len(w) else 0) << 32,
                                  "keep": 0xff if j + 1 < len(w) else 0x0f} for j in range(0, len(w), 2)])
        while len(frames) < len(spws):
            await ctx.tick()

    run_simulation(dut, [host], background=[sink, watch, cmds], vcd=False, max_cycles=20_000)
    return frames, taken


@settings(max_examples=4, deadline=None)
@given(spws=st.lists(st.tuples(st.integers(0, 60), st.lists(st.integers(-2 ** 31, 2 ** 31 - 1), min_size=1,
                                                             max_size=9)), min_size=1, max_size=4),
       seed=st.integers(0, 2 ** 16), vp=st.sampled_from([1.0, 0.5]))
def test_host_sp_words_two_a_beat(spws, seed, vp):
    """``s_axis_sp`` of an engine with ``spw_pairs`` (``hdl.host_sp``): SPWs of any count to any
    address fed as pair beats with random valid gaps read back (SPR) bit-exact, the high word of a
    one-word beat ignored."""
    frames, _ = _host_sp_run(spws, seed, vp)
    assert frames == [[x & 0xFFFF_FFFF for x in words] for _, words in spws]


def test_host_sp_pairs_at_full_rate():
    """A 64-word SPW to an even address from the host at full rate: 32 pair beats on 32 consecutive
    cycles (the engine writes two words a cycle), read back bit-exact."""
    words = list(range(1000, 1064))
    frames, taken = _host_sp_run([(8, words)], 0, 1.0)
    assert frames == [words]
    assert len(taken) == 32 and taken[-1] - taken[0] == 31, taken
