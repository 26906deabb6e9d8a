"""NIC forwarding / multicast / validation vs mcf_fpga/golden/nic.py, with random route tables, random
traffic (valid and faulty) and random back-pressure on every port."""
import random

from hypothesis import given, settings, strategies as st

# Each example simulates a whole NIC (~1-4 s): a third of the profile's examples.
FEW = settings(max_examples=max(3, settings.default.max_examples // 3))

from mcf_fpga.golden.nic import NicModel, make_frame, kv_id_int
from mcf_fpga.spec.topology import RouteEntry
from mcf_fpga.spec.meta import Collective, MetaFields, MetaOp
from mcf_fpga.golden.header import unpack_header
from mcf_fpga.spec.nic import ErrorCause, NicConfig, Reg
from tests.hdl.nic.nic_tb import NicBench, check_interleaving, golden_outputs, route_ops
from tests.hdl.nic.frames import FAULTS, FAULT_CAUSE, TrafficGen, random_src_allow, random_table

CFG2 = NicConfig(n_net=2, n_routes=8, max_payload=64)     # ring node
CFG4 = NicConfig(n_net=4, n_routes=8, max_payload=64)     # mesh node


def make_model(cfg, rng):
    """Random registers; SRC_ALLOW like a topology's (frames.random_src_allow), so that every
    port also sees spoofed srcs; every port allows at least one member."""
    model = NicModel(cfg, node_id=rng.randrange(cfg.max_nodes), num_nodes=rng.randrange(4, cfg.max_nodes + 1),
                     members=((1 << cfg.max_nodes) - 1) & ~(1 << rng.randrange(cfg.max_nodes)),
                     num_layers=rng.randrange(1, 8), num_blocks=1 << 20)
    allow = random_src_allow(rng, cfg, model)
    members = [i for i in range(cfg.max_nodes) if model.members >> i & 1]
    for p in range(cfg.n_ports):
        if not allow[p] & model.members:
            allow[p] |= 1 << rng.choice(members)
    model.src_allow = allow
    return model


def check_against_golden(cfg, seed, n_frames, fault_rate, vp, rp):
    rng = random.Random(seed)
    model = make_model(cfg, rng)
    table = random_table(rng, cfg, n_used=rng.randrange(1, cfg.n_routes))
    gen = TrafficGen(cfg, model, table, rng)
    frames = {p: [gen.faulty(rng.choice(FAULTS), p) if rng.random() < fault_rate else gen.valid(port=p)
                  for _ in range(n_frames[p])] for p in range(cfg.n_ports)}
    golden = model.fresh()
    golden.load_table(table)
    exp = golden_outputs(golden, frames)
    bench = NicBench(cfg, model, table, frames, seed=seed, valid_prob=vp, ready_prob=rp).run(
        exp, expect_inval=len(golden.invalidations))
    for p in range(cfg.n_ports):
        check_interleaving(exp.get(p, []), bench.out[p], p)
    assert sorted(bench.inval) == sorted(golden.invalidations)
    for c in ErrorCause:
        assert bench.counters[c] == golden.errors[c], f"error counter {c.name}"
    assert bench.counters["rx_frames"] == golden.rx_frames


@FEW
@given(st.integers(0, 2 ** 32), st.lists(st.integers(0, 5), min_size=5, max_size=5),
       st.floats(0, 0.5), st.lists(st.floats(0.3, 1.0), min_size=5, max_size=5),
       st.lists(st.floats(0.2, 1.0), min_size=5, max_size=5))
def test_mesh_node_routes_like_golden(seed, n_frames, fault_rate, vp, rp):
    """4 network ports + local: every packet reaches exactly its route's ports, payload
    unchanged, per-input order kept; faulty frames dropped and counted per cause."""
    check_against_golden(CFG4, seed, n_frames, fault_rate, vp, rp)


@FEW
@given(st.integers(0, 2 ** 32), st.lists(st.integers(0, 6), min_size=3, max_size=3),
       st.floats(0, 0.5), st.floats(0.3, 1.0), st.floats(0.2, 1.0))
def test_ring_node_routes_like_golden(seed, n_frames, fault_rate, vp, rp):
    check_against_golden(CFG2, seed, n_frames, fault_rate, vp, rp)


def test_every_fault_counted_and_valid_traffic_unaffected():
    """Each fault kind, interleaved with valid frames on the same port, lands in its own counter."""
    cfg = CFG2
    rng = random.Random(7)
    model = NicModel(cfg, node_id=1, num_nodes=8, members=0xFF, num_layers=4, num_blocks=1 << 20,
                     src_allow=[1 << 4, 0b00101100, 0b11000001])
    table = {0: RouteEntry(0b011), 1: RouteEntry(0b110), 2: RouteEntry(0b111)}
    gen = TrafficGen(cfg, model, table, rng)
    frames = {0: [], 1: [], 2: []}
    for f in FAULTS:
        for p in range(3):
            frames[p] += [gen.valid(port=p), gen.faulty(f, p), gen.valid(port=p)]
    hb = cfg.meta.header_bytes
    for n in range(1, hb):          # runts of every length, incl. a partial final header beat
        frames[n % 3].append(gen.valid(length=0, port=n % 3)[:n])
    golden = model.fresh()
    golden.load_table(table)
    exp = golden_outputs(golden, frames)
    for f in FAULTS:   # the generator's fault maps to the documented cause
        assert golden.errors[FAULT_CAUSE[f]] > 0
    bench = NicBench(cfg, model, table, frames, seed=3, ready_prob=0.6, valid_prob=0.8).run(exp)
    for p in range(3):
        check_interleaving(exp.get(p, []), bench.out[p], p)
    assert {c: bench.counters[c] for c in ErrorCause} == golden.errors
    assert sum(golden.errors.values()) == 3 * len(FAULTS) + hb - 1


def test_bank_flip_between_packets():
    """Routes rewritten in the shadow bank and flipped while traffic flows: every packet
    leaves entirely on the old route's ports or entirely on the new one's, old before new."""
    cfg = CFG4
    rng = random.Random(11)
    model = NicModel(cfg, node_id=0, num_nodes=16)
    old = {0: RouteEntry(0b00110)}
    new = {0: RouteEntry(0b11001)}
    gen = TrafficGen(cfg, model, old, rng)
    frames = {p: [gen.valid(route_id=0, op=MetaOp.DATA) for _ in range(12)] for p in (0, 1, 3)}
    g_old = NicModel(cfg, 0, 16); g_old.load_table(old)
    g_new = NicModel(cfg, 0, 16); g_new.load_table(new)
    exp_old = golden_outputs(g_old, frames)
    bench = NicBench(cfg, model, old, frames, seed=5, valid_prob=0.9, ready_prob=0.8)
    total = sum(len(f) for f in frames.values())
    bench.run({}, mid_ops=route_ops(new) + [(Reg.BANK_FLIP, 1)], mid_after_beats=40, settle=200)
    assert bench.counters["bank"] == 0   # flipped twice: initial load, then the update
    for p, fl in frames.items():
        seen_new = False
        for f in fl:
            ports = {q for q in range(cfg.n_ports) if f in bench.out[q]}
            for q in ports:
                assert bench.out[q].count(f) == 1
            assert ports in ({1, 2}, {0, 3, 4}), f"packet split across banks: ports {ports}"
            if ports == {0, 3, 4}:
                seen_new = True
            else:
                assert not seen_new, "an old-route packet after a new-route packet from the same port"
    n_new = sum(1 for fl in frames.values() for f in fl if f in bench.out[0])
    assert 0 < n_new < total, "the flip should land mid-traffic in this scenario"


def test_invalidation_reaches_kv_pool_only():
    """replica_invalidate delivered locally changes no data: its kv_id goes to m_axis_inval,
    nothing to m_axis; forwarded copies go out on the network ports unchanged."""
    cfg = CFG2
    model = NicModel(cfg, node_id=2, num_nodes=8, num_layers=4, num_blocks=1 << 20)
    table = {0: RouteEntry(0b011)}
    frames = {1: [make_frame(MetaFields(op=MetaOp.REPLICA_INVALIDATE, src=1, dst=2, route_id=0,
                                        kv_id=(3, 1000 + i), collective=Collective.MULTICAST), b"", cfg)
                  for i in range(5)]}
    golden = NicModel(cfg, 2, 8, num_layers=4, num_blocks=1 << 20); golden.load_table(table)
    exp = golden_outputs(golden, frames)
    bench = NicBench(cfg, model, table, frames, seed=1, inval_ready_prob=0.3).run(exp, expect_inval=5)
    assert bench.out[0] == []
    assert bench.inval == golden.invalidations == [kv_id_int(MetaFields(kv_id=(3, 1000 + i))) for i in range(5)]
    check_interleaving(exp[1], bench.out[1], 1)


def test_route_write_beyond_table_changes_nothing():
    """ROUTE_DATA with ROUTE_INDEX >= n_routes (n_routes not a power of two) writes nothing;
    ROUTE_READ returns the shadow bank, BANK_FLIP swaps."""
    from mcf_fpga.hdl.nic.nic import Nic
    from mcf_fpga.sim.kit import AXI4LiteMaster, run_simulation
    cfg = NicConfig(n_net=1, n_routes=12, max_payload=64)
    dut = Nic(cfg)
    axi = AXI4LiteMaster(dut.s_axi)
    seen = {}

    async def tb(ctx):
        for idx, val in [(3, 0x0103), (13, 0x0201), (15, 0x0301)]:
            await axi.write(ctx, Reg.ROUTE_INDEX, idx)
            await axi.write(ctx, Reg.ROUTE_DATA, val)
        shadow = []
        for idx in range(cfg.n_routes):
            await axi.write(ctx, Reg.ROUTE_INDEX, idx)
            shadow.append((await axi.read(ctx, Reg.ROUTE_READ))[0])
        await axi.write(ctx, Reg.BANK_FLIP, 1)
        await axi.write(ctx, Reg.ROUTE_INDEX, 3)
        seen["after_flip"] = (await axi.read(ctx, Reg.ROUTE_READ))[0]
        seen["bank"] = (await axi.read(ctx, Reg.BANK))[0]
        seen["shadow"] = shadow
    run_simulation(dut, [tb], vcd=False, max_cycles=5000)
    assert seen["shadow"] == [0x0103 if i == 3 else 0 for i in range(cfg.n_routes)]
    assert seen["after_flip"] == 0 and seen["bank"] == 1
