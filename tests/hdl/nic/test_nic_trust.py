"""The NIC trusts no sender's word. Boundary cases on the Amaranth simulator:

* source check: a frame's src must be allowed on the port it arrives on (SRC_ALLOW_p; the local
  port also always allows NODE_ID): allowed srcs and their neighbours one off, the cause order
  (SRC before SPOOF before DST), secure reset values, ERR_FLAGS / ERR_CLEAR;
* reduction timeout on the ReductionEngine alone, cycle exact: a group whose last contribution
  ends T - 1 cycles after its first one completes, at T it has timed out (also when the
  expiry falls mid-contribution); with every context held, the waiting contribution opens its
  group the cycle after the first expiry; REDUCE_TIMEOUT = 0 never times out;
* the topology's allowed sets (spec.topology.src_masks) cover every route's traffic.
"""
import random

import pytest
from hypothesis import given, strategies as st

from mcf_fpga.golden.nic import NicModel, ReduceModel, make_frame
from mcf_fpga.spec.topology import Mesh, Ring, RouteEntry, RouteTables, route_masks, src_masks
from mcf_fpga.spec.meta import Collective, MetaFields, MetaOp, ReduceOp, Stage
from mcf_fpga.spec.nic import ErrorCause, HEADER_CAUSE_ORDER, NicConfig, Reg, src_allow_reg
from mcf_fpga.hdl.nic.ingress import Cls, route_user_layout
from mcf_fpga.hdl.nic.nic import Nic
from mcf_fpga.hdl.nic.reduce import ReductionEngine
from mcf_fpga.sim.kit import AXI4LiteMaster, beats_to_packets, packets_to_beats, plain, run_simulation
from tests.hdl.nic.nic_tb import NicBench, check_interleaving, golden_outputs
from tests.hdl.nic.test_nic_collectives import contribution_meta

CFG = NicConfig(n_net=2, n_routes=8, max_payload=64)
NODE_ID = 5


# ---------------------------------------------------------------- source check (whole NIC)

def frame(src, *, port_tag, op=MetaOp.DATA, dst=1, route_id=0, length=8, **kw):
    meta = MetaFields(op=op, stage=Stage.PREFILL, src=src, dst=dst, route_id=route_id,
                      collective=Collective.P2P, kv_id=(0, port_tag), length=length, **kw)
    return make_frame(meta, bytes(range(length)), CFG)


def test_source_allowed_exactly_and_one_off():
    """Port 1 allows {2, 4}, port 2 allows {6}, port 0 allows {9} besides NODE_ID = 5: every
    allowed src passes, each neighbour one off is dropped as SPOOF; a non-member is SRC (before
    SPOOF), a bad op is OP (before), a spoof with a bad dst is SPOOF (after SRC, before DST)."""
    members = 0xFFFF & ~(1 << 3) & ~(1 << 11)
    model = NicModel(CFG, node_id=NODE_ID, num_nodes=16, members=members,
                     src_allow=[1 << 9, (1 << 2) | (1 << 4), 1 << 6])
    table = {0: RouteEntry(0b111)}
    tag = iter(range(1000))
    frames = {0: [], 1: [], 2: []}
    expect = {c: 0 for c in ErrorCause}
    for p, srcs in ((0, [4, 5, 6, 8, 9, 10]), (1, [1, 2, 3, 4, 5]), (2, [5, 6, 7])):
        for s in srcs:
            frames[p].append(frame(s, port_tag=next(tag)))
            ok = s in {0: (5, 9), 1: (2, 4), 2: (6,)}[p]
            if not ok:
                expect[ErrorCause.SRC if not (members >> s) & 1 else ErrorCause.SPOOF] += 1
    frames[1].append(frame(11, port_tag=next(tag)))                        # not a member: SRC
    frames[1].append(frame(6, port_tag=next(tag), op=MetaOp.ACK))             # OP before SPOOF
    frames[2].append(frame(2, port_tag=next(tag), dst=200))               # SPOOF before DST
    frames[0].append(frame(4, port_tag=next(tag), route_id=7))            # SPOOF before ROUTE
    frames[2].append(frame(6, port_tag=next(tag), dst=200))               # allowed: DST
    expect[ErrorCause.SRC] += 1
    expect[ErrorCause.OP] += 1
    expect[ErrorCause.SPOOF] += 2
    expect[ErrorCause.DST] += 1
    golden = model.fresh()
    golden.load_table(table)
    exp = golden_outputs(golden, frames)
    assert golden.errors == expect
    assert golden.rx_frames == 2 + 2 + 1
    bench = NicBench(CFG, model, table, frames, seed=4, ready_prob=0.7, valid_prob=0.8).run(exp)
    for p in range(CFG.n_ports):
        check_interleaving(exp.get(p, []), bench.out[p], p)
    assert {c: bench.counters[c] for c in ErrorCause} == golden.errors
    assert bench.counters["rx_frames"] == golden.rx_frames
    assert bench.counters["err_flags"] == golden.err_flags == sum(1 << c for c, n in expect.items() if n)


def test_header_cause_order_is_documented_and_complete():
    assert HEADER_CAUSE_ORDER.index(ErrorCause.SRC) < HEADER_CAUSE_ORDER.index(ErrorCause.SPOOF) \
        < HEADER_CAUSE_ORDER.index(ErrorCause.DST)
    assert set(ErrorCause) - set(HEADER_CAUSE_ORDER) == {ErrorCause.CRC, ErrorCause.REDUCE, ErrorCause.TIMEOUT}


def test_reset_values_are_secure_and_flags_clear():
    """After reset: SRC_ALLOW_p = 0 (a network port accepts nothing; the local port only NODE_ID),
    REDUCE_TIMEOUT = NicConfig.reduce_timeout. Frames then: net src dropped (SPOOF), local src
    NODE_ID forwarded; ERR_FLAGS shows SPOOF until ERR_CLEAR writes its bit."""
    cfg = NicConfig(n_net=1, n_routes=4, max_payload=64, reduce_timeout=1234)
    dut = Nic(cfg)
    axi = AXI4LiteMaster(dut.s_axi)
    seen = {}
    # frames from node 0 (reset NODE_ID) on the local port and on the network port
    good = make_frame(MetaFields(op=MetaOp.DATA, src=0, dst=1, route_id=0, length=8), bytes(8), cfg)

    async def send(ctx, port, pkt):
        for b in packets_to_beats([pkt], 64):
            for k, v in b.items():
                ctx.set(port.payload[k], v)
            ctx.set(port.valid, 1)
            while not (await ctx.tick().sample(port.ready))[2]:
                pass
        ctx.set(port.valid, 0)

    async def tb(ctx):
        ctx.set(dut.m_axis_net1.ready, 1)
        seen["allow"] = [(await axi.read(ctx, src_allow_reg(p)))[0] for p in range(cfg.n_ports)]
        seen["timeout"] = (await axi.read(ctx, Reg.REDUCE_TIMEOUT))[0]
        await axi.write(ctx, Reg.ROUTE_DATA, 0b10)         # route 0 -> net port 1
        await axi.write(ctx, Reg.BANK_FLIP, 1)
        await send(ctx, dut.s_axis_net1, good)              # src 0 on the network port: SPOOF
        await send(ctx, dut.s_axis, good)                   # src 0 = NODE_ID locally: forwarded
        out = 0
        for _ in range(40):
            _, _, v, last = await ctx.tick().sample(dut.m_axis_net1.valid, dut.m_axis_net1.payload.last)
            out += v and last
        seen["out"] = out
        seen["spoof"] = (await axi.read(ctx, Reg.ERR_BASE + 4 * ErrorCause.SPOOF))[0]
        seen["flags"] = (await axi.read(ctx, Reg.ERR_FLAGS))[0]
        await axi.write(ctx, Reg.ERR_CLEAR, 1 << ErrorCause.CRC)          # another bit: no change
        seen["flags2"] = (await axi.read(ctx, Reg.ERR_FLAGS))[0]
        await axi.write(ctx, Reg.ERR_CLEAR, 1 << ErrorCause.SPOOF)
        seen["flags3"] = (await axi.read(ctx, Reg.ERR_FLAGS))[0]
        seen["spoof2"] = (await axi.read(ctx, Reg.ERR_BASE + 4 * ErrorCause.SPOOF))[0]
    run_simulation(dut, [tb], vcd=False, max_cycles=5000)
    assert seen["allow"] == [0, 0] and seen["timeout"] == 1234
    assert seen["out"] == 1 and seen["spoof"] == 1
    assert seen["flags"] == seen["flags2"] == 1 << ErrorCause.SPOOF
    assert seen["flags3"] == 0 and seen["spoof2"] == 1             # the counter is not cleared


# ---------------------------------------------------------------- topology-derived allowed sets

@given(st.sampled_from([Ring(2), Ring(3), Ring(8), Ring(16), Mesh(1, 2), Mesh(2, 2), Mesh(3, 5), Mesh(4, 4)]),
       st.data())
def test_every_route_enters_each_node_on_a_port_that_allows_its_source(topo, data):
    """For random routes (multicast trees from random sources): every node the tree reaches is
    entered on a port whose src_masks bit of the source is set (over the ports of the golden
    cluster and of the hardware cluster's wiring, sim.cluster.link_wires); for n > 2 each other
    node is allowed on exactly one port, and never the node itself."""
    from mcf_fpga.sim.cluster import link_wires
    masks = [src_masks(topo, i) for i in range(topo.n)]
    for i in range(topo.n):
        assert masks[i][0] == 0 and not any(m >> i & 1 for m in masks[i])
        if topo.n > 2:
            union = 0
            for m in masks[i][1:]:
                assert union & m == 0
                union |= m
            assert union == ((1 << topo.n) - 1) & ~(1 << i)
    wires = {(i, p): (j, q) for i, p, j, q in link_wires(topo)}
    for _ in range(5):
        src = data.draw(st.integers(0, topo.n - 1))
        dsts = data.draw(st.lists(st.integers(0, topo.n - 1), min_size=1, max_size=topo.n, unique=True))
        tree = route_masks(topo, src, dsts)
        for node, mask in tree.items():
            for p in range(1, topo.n_net + 1):
                if mask >> p & 1:
                    nb = topo.neighbor(node, p)
                    assert masks[nb][topo.in_port(nb, node)] >> src & 1      # golden ClusterModel
                    j, q = wires[(node, p)]
                    assert j == nb and masks[j][q] >> src & 1                 # sim.cluster wiring


def test_golden_cluster_programs_the_masks():
    from mcf_fpga.golden.nic import ClusterModel
    topo = Mesh(2, 3)
    rt = RouteTables(topo, 16)
    rid = rt.add(4, [0, 1, 2, 5])
    cl = ClusterModel(topo, NicConfig(n_net=4, n_routes=16), rt.tables)
    assert [n.src_allow[:5] for n in cl.nodes] == [src_masks(topo, i) for i in range(topo.n)]
    cl.send(4, make_frame(MetaFields(op=MetaOp.DATA, src=4, dst=0, route_id=rid, collective=Collective.MULTICAST,
                                     length=8), bytes(8), cl.cfg))
    assert [len(d) for d in cl.delivered] == [1, 1, 1, 0, 0, 1]
    cl.send(4, make_frame(MetaFields(op=MetaOp.DATA, src=3, dst=0, route_id=rid, collective=Collective.MULTICAST,
                                     length=8), bytes(8), cl.cfg))          # node 4 posing as 3
    assert cl.nodes[4].errors[ErrorCause.SPOOF] == 1
    assert [len(d) for d in cl.delivered] == [1, 1, 1, 0, 0, 1]


# ---------------------------------------------------------------- reduction timeout (engine alone)

ECFG = NicConfig(n_net=2, n_routes=16, max_payload=64, reduce_contexts=2, merge_contexts=1)


def engine_timed(cfg, timeout, items, cycles):
    """Drive a ReductionEngine cycle by cycle. ``items``: [(meta, payload, fanin, start)] sent in
    order, beats back to back from cycle ``start(log)`` on (``log[i]`` = cycles in which item i's
    beats were accepted; ``start`` may be an int). ``m`` always ready. Returns (log, result
    frames, [(cycle, expired bits)], err pulses)."""
    dut = ReductionEngine(cfg)
    ulay = route_user_layout(cfg)
    beats = []
    for meta, payload, fanin, _s in items:
        user = int(ulay.const({"mask": 1, "cls": Cls.REDUCE, "fanin": fanin, "a2a": 0}).as_value().value)
        beats.append(packets_to_beats([make_frame(meta, payload, cfg)], 64, [user]))
    log = [[] for _ in items]
    res = {"out": [], "exp": [], "err": 0}

    async def tb(ctx):
        ctx.set(dut.timeout, timeout)
        ctx.set(dut.node_id, NODE_ID)
        ctx.set(dut.m.ready, 1)
        i, bi = 0, 0
        for cyc in range(cycles):
            start = None
            if i < len(items):
                s = items[i][3]
                start = s(log) if callable(s) else s
            drive = i < len(items) and (bi > 0 or cyc >= start)
            if drive:
                for k, v in beats[i][bi].items():
                    ctx.set(dut.s.payload[k], v)
            ctx.set(dut.s.valid, drive)
            _, _, sr, exp, err, mv, mp = await ctx.tick().sample(dut.s.ready, dut.expired, dut.err,
                                                                 dut.m.valid, dut.m.payload)
            if drive and sr:
                log[i].append(cyc)
                bi += 1
                if bi == len(beats[i]):
                    i, bi = i + 1, 0
            if exp:
                res["exp"].append((cyc, exp))
            res["err"] += err
            if mv:
                res["out"].append(plain(mp))
    run_simulation(dut, [tb], vcd=False, max_cycles=cycles + 10)
    return log, beats_to_packets(res["out"], 64), res["exp"], res["err"]


def contrib(rng, src, *, dst=1, kv=(0, 1), words=2, rop=ReduceOp.SUM, op=MetaOp.REDUCTION):
    return contribution_meta(rng, rop, dst, src, 0, words, op, kv)


@pytest.mark.parametrize("d", [5, 36, 39, 40, 41, 42, 43])
def test_group_completes_before_T_times_out_at_T(d):
    """T = 40, fan-in 2: the second contribution's last beat accepted d cycles after the first's.
    d < T: the result comes out. d >= T: at cycle c1 + T the group times out (one ``expired``
    pulse); for T <= d <= T + 2 its header came before, so it is consumed and discarded with the
    group (d = 41, 42: the expiry falls mid-contribution); for d = 43 its header comes after the
    expiry and it opens a new group, which times out in turn. A third contribution to the same
    (dst, kv_id) then opens a new group, no conflict, and with a fourth it completes."""
    T = 40
    rng = random.Random(d)
    a, b, c, e = (contrib(rng, s, words=3) for s in (0, 1, 0, 1))
    nb = 2 + 3                                     # header + payload beats
    items = [(*a, 2, 0), (*b, 2, lambda log: log[0][-1] + d - (nb - 1)),
             (*c, 2, lambda log: log[1][-1] + 60), (*e, 2, lambda log: log[2][-1] + 1)]
    log, out, exp, err = engine_timed(ECFG, T, items, 400)
    assert all(len(x) == nb for x in log), log
    assert all(x[-1] - x[0] == nb - 1 for x in log), "beats back to back"
    c1 = log[0][-1]
    assert log[1][-1] - c1 == d
    gm = ReduceModel(ECFG)
    want_first = gm.contribute(a[0], a[1], 2, NODE_ID)[0], gm.contribute(b[0], b[1], 2, NODE_ID)[0]
    gm2 = ReduceModel(ECFG)
    gm2.contribute(c[0], c[1], 2, NODE_ID)
    want_second = gm2.contribute(e[0], e[1], 2, NODE_ID)[0]
    assert err == 0
    if d < T:
        assert exp == [] and out == [want_first[1], want_second]
    elif log[1][1] < c1 + T:                      # header before the expiry
        assert exp == [(c1 + T, 0b001)] and out == [want_second]
    else:
        assert d == T + 3 and log[1][1] == c1 + T       # context 0 is free only from c1 + T + 1
        assert exp == [(c1 + T, 0b001), (log[1][-1] + T, 0b010)] and out == [want_second]


def test_full_pool_waits_until_the_first_timeout_then_opens():
    """reduce_contexts = 2, both held by incomplete groups: a third group's contribution waits on
    its last header beat and is accepted the cycle after the older group times out (cycle
    c1 + T + 1); the other group times out T cycles after its own first contribution; the third
    group completes with its second contribution. Golden (ReduceModel + advance) gives the same
    results and TIMEOUT count."""
    T = 50
    rng = random.Random(2)
    g1 = contrib(rng, 0, dst=1, kv=(0, 1))
    g2 = contrib(rng, 0, dst=2, kv=(0, 2), rop=ReduceOp.MAX)
    g3a = contrib(rng, 3, dst=3, kv=(0, 3), op=MetaOp.PARTIAL_STATE)
    g3b = contrib(rng, 4, dst=3, kv=(0, 3), op=MetaOp.PARTIAL_STATE)
    items = [(*g1, 2, 0), (*g2, 2, 0), (*g3a, 2, 0), (*g3b, 2, lambda log: log[2][-1] + 10)]
    log, out, exp, err = engine_timed(ECFG, T, items, 400)
    c1, c2 = log[0][-1], log[1][-1]
    hdr_last = log[2][1]                                     # g3a's last header beat (H = 2)
    assert log[2][0] == c2 + 1 and hdr_last == c1 + T + 1
    assert exp == [(c1 + T, 0b01), (c2 + T, 0b10)]
    gm = ReduceModel(ECFG, timeout=T)
    for m_, p_ in (g1, g2, g3a):
        assert gm.contribute(m_, p_, 2, NODE_ID) == (None, None)
    assert len(gm.waiting) == 1
    res, errs = gm.advance(T, NODE_ID)
    assert res == [] and errs == [ErrorCause.TIMEOUT] * 2 and not gm.waiting
    final, e = gm.contribute(*g3b, 2, NODE_ID)
    assert err == 0 and e is None and out == [final]


def test_timeout_zero_never_expires_and_golden_agrees():
    rng = random.Random(3)
    a = contrib(rng, 0)
    log, out, exp, err = engine_timed(ECFG, 0, [(*a, 2, 0)], 300)
    assert exp == [] and out == [] and err == 0
    gm = ReduceModel(ECFG, timeout=0)
    gm.contribute(*a, 2, NODE_ID)
    assert gm.advance(10 ** 9, NODE_ID) == ([], []) and len(gm.groups) == 1


def test_golden_timeout_boundary_and_waiting():
    """Golden: a group opened at model time t times out at t + T exactly (advance(T - 1) keeps
    it, one more cycle drops it); a contribution waiting for a full pool opens its group then and
    that group's own deadline counts from there."""
    rng = random.Random(5)
    cfg = NicConfig(n_net=2, max_payload=64, reduce_contexts=1, merge_contexts=1)
    gm = ReduceModel(cfg, timeout=100)
    a, b = contrib(rng, 0, dst=1), contrib(rng, 0, dst=2)
    gm.contribute(*a, 2, NODE_ID)
    gm.contribute(*b, 2, NODE_ID)
    assert len(gm.waiting) == 1
    assert gm.advance(99, NODE_ID) == ([], []) and len(gm.groups) == 1
    assert gm.advance(1, NODE_ID) == ([], [ErrorCause.TIMEOUT])
    assert not gm.waiting and list(gm.groups) == [(2, b[0].kv_id)]
    assert gm.advance(99, NODE_ID) == ([], [])
    assert gm.advance(1, NODE_ID) == ([], [ErrorCause.TIMEOUT]) and not gm.groups
