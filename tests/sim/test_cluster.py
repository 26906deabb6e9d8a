"""Four nodes as a ring and as a 2x2 mesh on the Verilator backend (mcf_fpga/sim/cluster.py; one
build of a 4-port node serves both): node 0's engine writes random words into its scratchpad
(SPW; at an odd or an even address: the engine's ``emit_pairs`` sends an even count from an even
address two words a beat) and EMITs them twice -- a multicast KV replica to {1, 2, 3} and a point-to-point DATA
packet two hops away (node 2 on the ring, node 3 on the mesh). Each packet must arrive on exactly its
destinations' m_axis_rx with the Meta header packed by hdl.meta (independently of the engine)
and the words as little-endian bytes, under random back-pressure on every m_axis_rx and
m_axis_eth<p>. With a
corrupted frame on a link, the receiving link drops and counts it (link drop_crc, NIC CRC
counter), the sender retransmits, and every packet still arrives exactly once."""
from dataclasses import replace

import pytest
from hypothesis import given, strategies as st

from mcf_fpga.spec.topology import RouteTables
from mcf_fpga.hdl.bus import Resp
from mcf_fpga.spec.instr import EngineOpcode
from mcf_fpga.spec.meta import Collective, MetaFields, MetaOp, Stage
from mcf_fpga.golden.header import pack_header, pack_int
from mcf_fpga.spec.nic import ErrorCause, Reg
from mcf_fpga.hdl.node import counter_offset
from tests.hdl.node_util import instr_bytes, words_bytes
from tests.hdl.vl_node import TEST_CFG

NIC, NODE = 0x1000, 0x3000
SINKS = ("m_axis_rx", "m_axis_sp", "m_axis_kvresp")


@pytest.fixture(scope="module", params=["ring", "mesh"])
def ring(request):
    from mcf_fpga.sim.cluster import SimCluster
    c = SimCluster(4, request.param, TEST_CFG, chunk=16)
    rt = RouteTables(c.topo, TEST_CFG.nic.n_routes)
    far = 2 if request.param == "ring" else 3
    routes = {"mcast": rt.add(0, [1, 2, 3]), "p2p": rt.add(0, [far]), "far": far}
    return c, rt, routes


def run_emits(c, rt, routes, words, kv, seed, stage, at=7):
    """Configure, run SPW + two EMITs of the words at SP address ``at`` on node 0 (the test node's
    engine has ``emit_pairs``: from an even address an even count goes two words a beat); returns
    (expected per node, got per node)."""
    c.configure(rt)
    for i in range(c.n):
        for s in SINKS:
            c.node(i).pull_all(s)
        c.node(i).sink_backpressure("m_axis_rx", seed + i)
    for i, p, _, _ in c.wires:                       # the PHY side stalls the links too
        c.node(i).sink_backpressure(f"m_axis_eth{p}", seed + 16 * p + i)
    n = len(words)
    mc = MetaFields(op=MetaOp.KV_REPLICA, stage=stage, src=0, dst=1, route_id=routes["mcast"],
                    collective=Collective.MULTICAST, kv_id=kv, length=4 * n)
    far = routes["far"]
    pp = MetaFields(op=MetaOp.DATA, stage=stage, src=0, dst=far, route_id=routes["p2p"], length=4 * n)
    m0 = c.node(0)
    m0.push("s_axis_cmd", instr_bytes(EngineOpcode.SPW, dst=at, n0=n))
    m0.push("s_axis_sp", words_bytes(words))
    # the engine's Meta length field is overwritten with 4*n0: give it a wrong one
    m0.push("s_axis_cmd", instr_bytes(EngineOpcode.EMIT, a=at, n0=n, meta=pack_int(replace(mc, length=1))))
    m0.push("s_axis_cmd", instr_bytes(EngineOpcode.EMIT, a=at, n0=n, meta=pack_int(pp)))
    payload = words_bytes(words)
    want = {i: [pack_header(mc) + payload] if i else [] for i in range(c.n)}
    want[far].append(pack_header(pp) + payload)
    got = {i: [] for i in range(c.n)}

    def done():
        for i in range(c.n):
            got[i] += c.node(i).pull_all("m_axis_rx")
        return all(len(got[i]) >= len(want[i]) for i in range(c.n))
    assert c.run_until(done, max_cycles=100_000), f"packets missing after 100k cycles: {got}"
    c.step(2000)                        # nothing else may arrive
    done()
    for i in range(c.n):
        c.node(i).sink_backpressure("m_axis_rx", None)
    for i, p, _, _ in c.wires:
        c.node(i).sink_backpressure(f"m_axis_eth{p}", None)
    return want, got


@given(words=st.lists(st.integers(-2 ** 31, 2 ** 31 - 1), min_size=1, max_size=64),
       kv=st.tuples(st.integers(0, 255), st.integers(0, 2 ** 24 - 1)),
       stage=st.sampled_from(list(Stage)), seed=st.integers(0, 2 ** 16), at=st.sampled_from([7, 8]))
def test_emit_multicast_and_p2p(ring, words, kv, stage, seed, at):
    c, rt, routes = ring
    want, got = run_emits(c, rt, routes, words, kv, seed, stage, at)
    assert got == want
    for i in range(c.n):
        m = c.node(i)
        for cause in ErrorCause:
            assert m.axil_read(NIC + Reg.ERR_BASE + 4 * cause) == (0, Resp.OKAY), (i, cause.name)
        for p in (1, 2):
            assert m.axil_read(NODE + counter_offset(p, "tx_retransmits"))[0] == 0
    # per link of node 0: one data frame per packet whose route (golden tables) leaves on it
    for i, p, j, q in c.wires:
        if i == 0:
            sent = sum(rt.tables[0][routes[k]].mask >> p & 1 for k in ("mcast", "p2p"))
            assert c.node(0).axil_read(NODE + counter_offset(p, "tx_data_frames"))[0] == sent, p
            assert c.node(j).axil_read(NODE + counter_offset(q, "delivered"))[0] == sent, (j, q)


@given(words=st.lists(st.integers(-2 ** 31, 2 ** 31 - 1), min_size=1, max_size=64),
       where=st.integers(0, 10 ** 6), bit=st.integers(0, 7), seed=st.integers(0, 2 ** 16))
def test_corrupted_frame_is_dropped_counted_and_resent(ring, words, where, bit, seed):
    c, rt, routes = ring
    hit = []

    def corrupt_first_data_frame(frame):
        if not hit and frame[14] == MetaOp.DATA:       # link kind byte (golden.link)
            hit.append(frame)
            b = bytearray(frame)
            b[where % len(b)] ^= 1 << bit
            return [bytes(b)]
        return [frame]
    c.fault(0, 1, corrupt_first_data_frame)
    try:
        want, got = run_emits(c, rt, routes, words, (1, 2), seed, Stage.PREFILL)
    finally:
        c.fault(0, 1, None)
    assert hit and got == want
    (j, q), = [(j, q) for i, p, j, q in c.wires if (i, p) == (0, 1)]
    n1 = c.node(j)
    assert j == 1 and n1.axil_read(NODE + counter_offset(q, "drop_crc")) == (1, Resp.OKAY)
    assert n1.axil_read(NIC + Reg.ERR_BASE + 4 * ErrorCause.CRC) == (1, Resp.OKAY)
    assert c.node(0).axil_read(NODE + counter_offset(1, "tx_retransmits"))[0] >= 1
    for i in range(c.n):
        for cause in ErrorCause:
            if (i, cause) != (1, ErrorCause.CRC):
                assert c.node(i).axil_read(NIC + Reg.ERR_BASE + 4 * cause)[0] == 0, (i, cause.name)


@given(kvs=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5), st.sampled_from(["replica", "owner", "none"])),
                    min_size=1, max_size=6, unique_by=lambda t: t[:2]),
       seed=st.integers(0, 2 ** 16))
def test_replica_invalidate_reaches_the_kv_pool(ring, kvs, seed):
    """Node 0 EMITs replica_invalidate packets to node 2 (ring) / 3 (mesh); that node's NIC hands their kv_id to its
    KV pool (final = 1): replicas are invalidated, owners and unknown ids dropped and counted,
    exactly as golden.kvpool says; nothing is delivered on m_axis_rx."""
    from mcf_fpga.golden.kvpool import KVPool as GoldenKVPool
    from mcf_fpga.spec.kvpool import Opcode, kv_id_from
    from mcf_fpga.hdl.kvpool import cmd_layout, resp_layout
    from mcf_fpga.hdl.node import pad8
    c, rt, routes = ring
    c.configure(rt)
    cl, rl = cmd_layout(32), resp_layout(TEST_CFG.kv_slots, 15)
    n2 = c.node(routes["far"])
    for i in range(c.n):
        for s in SINKS:
            c.node(i).pull_all(s)
    n2.sink_backpressure("m_axis_kvresp", seed)
    gold = GoldenKVPool(TEST_CFG.kv_slots, TEST_CFG.kv_block_bytes, kv_id_width=32)

    def kvcmd(op, kv):
        n2.push("s_axis_kvcmd", (op | kv << cl["kv_id"].offset).to_bytes(pad8(cl.size) // 8, "little"))
        return gold.execute(op, kv)
    want = []
    for layer, block, how in kvs:
        if how != "none":
            want.append(kvcmd(Opcode.INSTALL_REPLICA if how == "replica" else Opcode.ALLOC_OWNER,
                              kv_id_from(layer, block)))
    c.step(500)
    m0 = c.node(0)
    m0.push("s_axis_cmd", instr_bytes(EngineOpcode.SPW, dst=0, n0=2))
    m0.push("s_axis_sp", words_bytes([seed, -seed]))
    applied = 0
    for layer, block, _ in kvs:
        meta = MetaFields(op=MetaOp.REPLICA_INVALIDATE, src=0, dst=routes["far"], route_id=routes["p2p"],
                          kv_id=(layer, block))
        m0.push("s_axis_cmd", instr_bytes(EngineOpcode.EMIT, a=0, n0=2, meta=pack_int(meta)))
        applied += gold.nic_invalidate(kv_id_from(layer, block), True)
    c.step(3000 + 300 * len(kvs))
    for layer, block, _ in kvs:
        want.append(kvcmd(Opcode.LOOKUP, kv_id_from(layer, block)))
    c.step(500)
    got = [int.from_bytes(f, "little") for f in n2.pull_all("m_axis_kvresp")]
    n2.sink_backpressure("m_axis_kvresp", None)
    dec = lambda v: {name: (v >> f.offset) & ((1 << f.width) - 1) for name, f in rl}
    assert [dec(g) for g in got] == [dict(status=int(w.status), slot=w.slot, state=int(w.state),
                                          readers=w.readers, freed=int(w.freed)) for w in want]
    assert n2.axil_read(0x2028) == (applied, Resp.OKAY)                  # nic_applied
    assert n2.axil_read(0x202C) == (len(kvs) - applied, Resp.OKAY)       # nic_dropped
    assert all(c.node(i).pull_all("m_axis_rx") == [] for i in range(c.n))


@given(big=st.integers(TEST_CFG.nic.max_payload // 4 + 1, 300), words=st.lists(st.integers(-2 ** 31, 2 ** 31 - 1),
                                                                              min_size=1, max_size=64))
def test_oversized_emit_is_dropped_and_counted(ring, big, words):
    """An EMIT longer than NicConfig.max_payload is dropped by node 0's NIC (LENGTH counter);
    the packet after it is delivered intact and nothing hangs."""
    c, rt, routes = ring
    c.configure(rt)
    for i in range(c.n):
        for s in SINKS:
            c.node(i).pull_all(s)
    far, m0 = routes["far"], c.node(0)
    m0.push("s_axis_cmd", instr_bytes(EngineOpcode.SPW, dst=0, n0=big))
    m0.push("s_axis_sp", words_bytes(list(range(big))))
    m0.push("s_axis_cmd", instr_bytes(EngineOpcode.SPW, dst=big, n0=len(words)))
    m0.push("s_axis_sp", words_bytes(words))
    pp = MetaFields(op=MetaOp.DATA, src=0, dst=far, route_id=routes["p2p"], length=4 * len(words))
    m0.push("s_axis_cmd", instr_bytes(EngineOpcode.EMIT, a=0, n0=big, meta=pack_int(replace(pp, length=4 * big))))
    m0.push("s_axis_cmd", instr_bytes(EngineOpcode.EMIT, a=big, n0=len(words), meta=pack_int(pp)))
    got = []
    assert c.run_until(lambda: got.extend(c.node(far).pull_all("m_axis_rx")) or got, max_cycles=50_000)
    c.step(2000)
    got += c.node(far).pull_all("m_axis_rx")
    assert got == [pack_header(pp) + words_bytes(words)]
    assert m0.axil_read(NIC + Reg.ERR_BASE + 4 * ErrorCause.LENGTH) == (1, Resp.OKAY)
    assert m0.axil_read(0x0000)[0] == 0 and m0.axil_read(0x0004)[0] == 4      # engine idle, 4 retired
