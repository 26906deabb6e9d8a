"""The node's NIC install path (``NodeConfig(kv_install=True)``, docs/memory.md "Node wiring"):
configuration checks, and on two Verilated nodes of the DDR cluster (the engine of
tests/host/executors/test_rtl_ddr.py with ``kv_install``; one build) a KV unit sent from node 0's DDR with KVS
and installed by node 1's NIC into its DDR, with no host on the data path.

Node 0's engine KVWs K and V rows into slot 3 of its region (over a random background image) and
sends the slot as one unit: a K-run packet and a V-run packet (``last``), Meta op KV_REPLICA, dst 1;
then a one-packet unit for a kv_id node 1 has no entry for, and a DATA packet. Node 1's host has
issued BEGIN_INSTALL for the unit only. Golden: ``golden.kvinstall.KVInstaller`` over node 1's golden
pool and ``KVStore`` (its initial image) receiving the packets golden builds from node 0's
``KVStore``. Checked: node 1's whole region equals golden's byte for byte (the installed slot holds
exactly the records, nothing else changed; node 1's engine port and the installer's port share the
memory image), LOOKUP answers REPLICA_VALID at BEGIN_INSTALL's slot, the installer's registers equal
golden's (committed 1, drop_state 1), ``m_axis_rx`` got only the DATA packet, and node 1's event
stream replays into ``golden.kvpool`` answer for answer, in the expected order and sources."""
import dataclasses
import random

import pytest

from mcf_fpga.golden.kvinstall import KVInstaller as GoldenInstaller, install_packet
from mcf_fpga.golden.kvpool import KVPool as GoldenPool
from mcf_fpga.spec.kvpool import Opcode, Source, State, Status, kv_id_from
from mcf_fpga.golden.kvstore import KVStore
from mcf_fpga.spec.topology import RouteTables
from mcf_fpga.hdl.bus import Resp
from mcf_fpga.spec.instr import EngineOpcode, KvsFlags, KvwFlags, SpwFlags
from mcf_fpga.hdl.kvinstall import REGISTERS as KVIN_REGS
from mcf_fpga.hdl.kvpool import resp_layout, unpack_event
from mcf_fpga.spec.meta import MetaFields, MetaOp, Stage
from mcf_fpga.golden.header import pack_header, pack_int
from mcf_fpga.hdl.node import KVINSTALL_WINDOW, SMALL_ENGINE, NodeConfig, NodeReg, node_windows
from tests.hdl.node_util import instr_bytes, words_bytes

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")

KVIN = {r.name: KVINSTALL_WINDOW[1] + r.offset for r in KVIN_REGS}
NODE = 0x3000


# ------------------------------------------------------------------ configuration
def _region(n_slots=8):
    from mcf_fpga.spec.kvregion import KVRegion
    return KVRegion(base=0x1000_0000, n_slots=n_slots, slot_rows=32, d=16)


@pytest.mark.parametrize("kw, msg", [
    (dict(kv_install=True), r"kv_install needs an engine that keeps K/V in DDR \(NodeConfig.engine\['kv_region'\]\)"),
    (dict(kv_install=True, kv_slots=9, engine=dict(SMALL_ENGINE, kv_region=_region(8))),
     "kv_slots=9 must not exceed the engine's kv_region.n_slots=8"),
    (dict(kv_install=1, engine=dict(SMALL_ENGINE, kv_region=_region(8))), "kv_install must be a bool"),
    (dict(kv_directory="tree"), "kv_directory must be 'cam' or 'table'"),
    (dict(kv_directory="table", kv_layers=2), r"kv_blocks is required with kv_directory='table'"),
    (dict(kv_directory="table", kv_blocks=2), r"kv_layers is required with kv_directory='table'"),
    (dict(kv_layers=2), "kv_layers / kv_blocks are parameters of kv_directory='table' only"),
    (dict(kv_slots=4097), r"kv_slots must be in 1..4096 with kv_directory='cam'"),
    (dict(kv_slots=65537, kv_directory="table", kv_layers=2, kv_blocks=2),
     r"kv_slots must be in 1..65536 with kv_directory='table'"),
])
def test_bad_install_config_names_field(kw, msg):
    with pytest.raises(ValueError, match=msg):
        NodeConfig(**kw)


def test_windows_and_ports_follow_kv_install():
    """The kvinstall window and the two ports exist only with kv_install; the table directory is
    selectable (and the CAM stays the default)."""
    from mcf_fpga.hdl.node import Node, WINDOWS
    plain = NodeConfig()
    assert node_windows(plain) == WINDOWS and plain.kv_directory == "cam" and not plain.kv_install
    cfg = NodeConfig(engine=dict(SMALL_ENGINE, kv_region=_region(8)), kv_slots=8, kv_install=True,
                     kv_directory="table", kv_layers=4, kv_blocks=4)
    assert node_windows(cfg) == WINDOWS + (KVINSTALL_WINDOW,)
    n = Node(cfg)
    members = n.signature.members
    assert {"m_axi_kvin", "m_axis_kvevent", "m_axi_kv"} <= set(members)
    assert n.kvpool.directory == "table" and n.kvpool.install_port and n.kvpool.events_on
    assert n.kvinstall.region.n_slots == 8 and n.kvinstall.region.slot_rows == 32
    assert members["m_axis_kvevent"].signature.members["payload"].shape == \
        -(-n.kv_event_layout.size // 8) * 8
    for name in ("m_axi_kvin", "m_axis_kvevent"):
        assert name not in Node(NodeConfig()).signature.members
    n._MustUse__silence = True


# ------------------------------------------------------------------ two Verilated nodes
@pytest.fixture(scope="module")
def cluster():
    from mcf_fpga.sim.cluster import SimCluster
    from tests.host.executors.test_rtl_ddr import ddr_config
    cfg = dataclasses.replace(ddr_config("ring", 8), kv_install=True)
    c = SimCluster(2, "ring", cfg, chunk=32)
    return c, cfg


def kv_cmd(opcode, kv):
    return (int(opcode) | kv << 4).to_bytes(5, "little")


def pool_answer(m, cfg, frame):
    v = int.from_bytes(frame, "little")
    lay = resp_layout(cfg.kv_slots, 15)
    from amaranth.lib import data
    from mcf_fpga.spec.kvpool import Response
    r = data.Const(lay, v & ((1 << lay.size) - 1))
    return Response(Status(r.status), int(r.slot), State(r.state), int(r.readers), bool(r.freed))


def ask(c, node, cfg, opcode, kv):
    m = c.node(node)
    m.push("s_axis_kvcmd", kv_cmd(opcode, kv))
    got = []
    assert c.run_until(lambda: got.extend(m.pull_all("m_axis_kvresp")) or got, max_cycles=2000, step=16)
    assert len(got) == 1
    return pool_answer(m, cfg, got[0])


def rand_rows(rng, n, d=16):
    return [([rng.randint(-128, 127) for _ in range(d)], rng.randint(-128, 127)) for _ in range(n)]


@pytest.mark.slow
def test_kv_unit_installed_by_the_nic(cluster):
    c, cfg = cluster
    reg = cfg.engine["kv_region"]
    rng = random.Random(11)
    rt = RouteTables(c.topo, cfg.nic.n_routes)
    rid = rt.add(0, [1])
    c.configure(rt)
    n0, n1 = c.node(0), c.node(1)
    stores, mems = [], []
    for i, m in enumerate((n0, n1)):
        st = KVStore(reg)
        st.image[:] = bytes(rng.randrange(256) for _ in range(reg.size))
        mem = m.memory("m_axi_kv", reg.size, base=reg.base, latency=100, ready_seed=1 + i)
        inst = m.memory("m_axi_kvin", latency=60, ready_seed=7 + i, share="m_axi_kv")
        inst.load(reg.base, bytes(st.image))          # through the installer's handle: one image
        stores.append(st)
        mems.append((mem, inst))
        for s in ("m_axis_rx", "m_axis_kvresp", "m_axis_kvevent"):
            m.pull_all(s)
    kv, kv_none = kv_id_from(1, 5), kv_id_from(0, 9)
    S = reg.slot_rows

    # ---- node 1's host allocates the unit (golden too)
    gpool = GoldenPool(cfg.kv_slots, cfg.kv_block_bytes, kv_id_width=32)
    want_begin = gpool.begin_install(kv)
    got_begin = ask(c, 1, cfg, Opcode.BEGIN_INSTALL, kv)
    assert got_begin == want_begin and got_begin.state == State.INSTALLING

    # ---- node 0: KVW K rows 0..3 and V rows 2..5 of slot 3, then KVS K run, V run (last), the
    # unit of kv_none (one packet), and a DATA packet
    slot0 = 3
    k_rows, v_rows = rand_rows(rng, 4), rand_rows(rng, 4)
    words = [v & 0xFFFFFFFF for vals, _ in k_rows + v_rows for v in vals]
    ewords = [e & 0xFFFFFFFF for _, e in k_rows + v_rows]
    for r, (vals, e) in enumerate(k_rows):
        stores[0].write_row(slot0, 0, r, vals, e)
    for r, (vals, e) in enumerate(v_rows):
        stores[0].write_row(slot0, 1, 2 + r, vals, e)
    D = reg.d
    meta = MetaFields(op=MetaOp.KV_REPLICA, stage=Stage.PREFILL, src=0, dst=1, route_id=rid,
                      kv_id=(kv & 0xFF, kv >> 8), length=0)
    meta_none = dataclasses.replace(meta, kv_id=(kv_none & 0xFF, kv_none >> 8))
    data_words = [rng.getrandbits(32) for _ in range(6)]
    dmeta = MetaFields(op=MetaOp.DATA, stage=Stage.PREFILL, src=0, dst=1, route_id=rid, length=4 * len(data_words))
    prog = [instr_bytes(EngineOpcode.SPW, dst=0, n0=len(words)), instr_bytes(EngineOpcode.SPW, flags=SpwFlags(em=True), dst=0, n0=len(ewords)),
            instr_bytes(EngineOpcode.KVW, flags=KvwFlags(v=False), a=0, so=D, len=D, n0=4, n1=1, ea=0, eo=1, ei=0, b=slot0, kvb=0),
            instr_bytes(EngineOpcode.KVW, flags=KvwFlags(v=True), a=4 * D, so=D, len=D, n0=4, n1=1, ea=4, eo=1, ei=0, b=slot0, kvb=2),
            instr_bytes(EngineOpcode.KVS, b=slot0, kvb=0, ntok=S, flags=KvsFlags(), meta=pack_int(meta)),
            instr_bytes(EngineOpcode.KVS, b=slot0, kvb=S, ntok=S, flags=KvsFlags(last=True), meta=pack_int(meta)),
            instr_bytes(EngineOpcode.KVS, b=1, kvb=S - 2, ntok=5, flags=KvsFlags(last=True), meta=pack_int(meta_none)),
            instr_bytes(EngineOpcode.SPW, dst=100, n0=len(data_words)),
            instr_bytes(EngineOpcode.EMIT, a=100, n0=len(data_words), meta=pack_int(dmeta))]
    for ins in prog:
        n0.push("s_axis_cmd", ins)
    n0.push("s_axis_sp", words_bytes(words) + words_bytes(ewords) + words_bytes(data_words))
    n0.sink_backpressure("m_axis_rx", 3)
    n1.sink_backpressure("m_axis_rx", 4)
    n1.sink_backpressure("m_axis_kvevent", 5)          # random back-pressure on the event stream

    # golden: the packets node 0 sends, received by node 1's golden installer
    row_bytes = reg.row_bytes
    pkts = [install_packet(kv, 0, stores[0].read_records(slot0, 0, S), False, row_bytes=row_bytes, meta=meta),
            install_packet(kv, S, stores[0].read_records(slot0, S, S), True, row_bytes=row_bytes, meta=meta),
            install_packet(kv_none, S - 2, stores[0].read_records(1, S - 2, 5), True, row_bytes=row_bytes,
                           meta=meta_none)]
    gins = GoldenInstaller(gpool, stores[1], max_payload=cfg.nic.max_payload)
    outcomes = [gins.receive(p).value for p in pkts]
    assert outcomes == ["installed", "committed", "drop_state"]

    rx, events = [], []

    def done():
        rx.extend(n1.pull_all("m_axis_rx"))
        events.extend(n1.pull_all("m_axis_kvevent"))
        return (n1.axil_read(KVIN["drop_state"])[0] == 1 and rx
                and not n1.axil_read(NODE + NodeReg.STATUS)[0] & 0b1100)
    assert c.run_until(done, max_cycles=300_000, step=512), "installer did not finish"
    c.step(2000)
    done()

    # node 1's DDR: golden's image, byte for byte (the installed slot and everything else)
    mem1, inst1 = mems[1]
    img = mem1.dump(reg.base, reg.size)
    assert img == inst1.dump(reg.base, reg.size)
    slot1 = got_begin.slot
    a = reg.slot_addr(slot1) - reg.base
    assert img[a:a + reg.slot_bytes] == stores[0].read_records(slot0, 0, 2 * S), "installed slot differs"
    assert img == bytes(stores[1].image), "node 1's region differs from golden KVStore"
    # the directory, the installer's registers, the event stream
    assert ask(c, 1, cfg, Opcode.LOOKUP, kv) == gpool.lookup(kv)
    assert gpool.lookup(kv).state == State.REPLICA_VALID and gpool.lookup(kv).slot == slot1
    events.extend(n1.pull_all("m_axis_kvevent"))
    regs = {r.name: n1.axil_read(KVIN[r.name]) for r in KVIN_REGS if r.name != "clear"}
    assert all(resp == Resp.OKAY for _, resp in regs.values())
    want = gins.registers()
    assert {k: v for k, (v, _) in regs.items() if k != "status"} == {k: v for k, v in want.items() if k != "overflow"}
    assert regs["committed"][0] == 1 and regs["drop_state"][0] == 1 and regs["status"][0] == 0
    # m_axis_rx: only the DATA packet; node 0 received nothing
    assert rx == [pack_header(dmeta) + words_bytes(data_words)]
    assert n0.pull_all("m_axis_rx") == []
    evs = [unpack_event(int.from_bytes(f, "little"), 32, cfg.kv_slots, 15) for f in events]
    assert [(e.src, e.opcode, e.kv_id) for e in evs] == [
        (Source.CMD, Opcode.BEGIN_INSTALL, kv), (Source.ICMD, Opcode.LOOKUP, kv), (Source.ICMD, Opcode.LOOKUP, kv),
        (Source.ICMD, Opcode.COMMIT_INSTALL, kv), (Source.ICMD, Opcode.LOOKUP, kv_none), (Source.CMD, Opcode.LOOKUP, kv)]
    GoldenPool(cfg.kv_slots, cfg.kv_block_bytes, kv_id_width=32).replay(evs)
    assert evs[4].resp.status == Status.UNKNOWN
    # the installer wrote exactly the unit's records: one descriptor per packet, nothing for kv_none
    w = [(addr, ln) for _c, kind, addr, ln, _r in inst1.log if kind == "W"]
    assert sum(ln + 1 for _, ln in w) * reg.bus_bytes == 2 * S * row_bytes
    assert all(reg.slot_addr(slot1) <= addr < reg.slot_addr(slot1) + reg.slot_bytes for addr, _ in w)
    assert not [1 for _c, kind, *_ in inst1.log if kind == "R"]
