"""NIC at the boundaries of every bounded header field, and every reduction op x lane width x
source count, against mcf_fpga/golden/nic.py.

The fault generators of ``frames.py`` draw out-of-range values uniformly (route ids from
[n_routes, 256), ...), so the first invalid value -- the one an off-by-one lets through -- is
hit about once in the range's size. Here every bounded field is drawn from its boundary values
(0, 1, max-1, max, max+1 and the width's top) mixed with random ones, and the route-id
boundary (n_routes - 1 accepted, n_routes dropped) is checked directly. The reduction engine is
run on every (reduce_op, lane width, source count) combination explicitly, with lane values at
the signed/unsigned boundaries, so that a MAX comparing unsigned or a SUM carrying across the
32-bit lanes shows up in one example, not only when a random draw combines them.
"""
import random

from hypothesis import given, settings, strategies as st

from mcf_fpga.golden.nic import NicModel, encode_i32, encode_i64, encode_partial, make_frame, reduce_payloads
from mcf_fpga.golden.numerics import M_EMPTY
from mcf_fpga.spec.topology import RouteEntry
from mcf_fpga.spec.meta import Collective, MetaFields, MetaOp, ReduceOp, Stage
from mcf_fpga.spec.nic import ErrorCause, NicConfig
from tests.hdl.nic.nic_tb import NicBench, check_interleaving, golden_outputs
from tests.hdl.nic import test_nic_collectives as coll

FEW = settings(max_examples=max(3, settings.default.max_examples // 3))

CFG = NicConfig(n_net=2, n_routes=8, max_payload=64)       # ring node: ports 0 (local), 1, 2
NUM_NODES, NUM_LAYERS, NUM_BLOCKS = 8, 4, 1000
MEMBERS = ((1 << CFG.max_nodes) - 1) & ~(1 << 6)            # node 6 is not a member


def edges(lo, hi, top):
    """Boundary values of a field valid in [lo, hi) whose wire width holds 0..top."""
    return sorted({v for v in (0, 1, lo, lo + 1, hi - 2, hi - 1, hi, hi + 1, top - 1, top) if 0 <= v <= top})


def bounded(lo, hi, top):
    """A field value: a boundary value or a random one over the whole wire range."""
    return st.one_of(st.sampled_from(edges(lo, hi, top)), st.integers(0, top))


def full_table():
    """Every entry non-empty; entry 0 and entry n_routes-1 lead to different single ports, so a
    frame misrouted through entry 0 is seen at the wrong port."""
    t = {r: RouteEntry(1 + r % 7, 0) for r in range(CFG.n_routes)}
    t[0] = RouteEntry(0b010, 0)
    t[CFG.n_routes - 1] = RouteEntry(0b100, 0)
    t[CFG.n_routes - 2] = RouteEntry(0b001, 1)      # a reduction root, fan-in 1
    return t


def model(table, num_nodes=NUM_NODES):
    g = NicModel(CFG, node_id=1, num_nodes=num_nodes, members=MEMBERS, num_layers=NUM_LAYERS,
                 num_blocks=NUM_BLOCKS)
    g.load_table(table)
    return g


def run(frames, table, seed=0, rp=0.7, vp=0.8, num_nodes=NUM_NODES):
    """Hardware vs golden: every output an interleaving of golden's, every counter equal."""
    golden = model(table, num_nodes)
    exp = golden_outputs(golden, frames)
    bench = NicBench(CFG, model(table, num_nodes), table, frames, seed=seed, valid_prob=vp, ready_prob=rp).run(
        exp, expect_inval=len(golden.invalidations))
    for p in range(CFG.n_ports):
        check_interleaving(exp.get(p, []), bench.out[p], p)
    assert sorted(bench.inval) == sorted(golden.invalidations)
    assert {c: bench.counters[c] for c in ErrorCause} == golden.errors
    assert bench.counters["rx_frames"] == golden.rx_frames
    return golden, exp


def data_frame(tag, **over):
    meta = MetaFields(op=MetaOp.DATA, stage=Stage.PREFILL, src=2, dst=3, kv_id=(0, tag), route_id=1,
                      collective=Collective.MULTICAST, length=16).replace(**over)
    return make_frame(meta, bytes((tag + i) % 256 for i in range(meta.length)), CFG)


def test_route_id_boundary_directly():
    """route_id n_routes-1 is forwarded by its own entry; n_routes (one past the table), n_routes+1
    and 255 are dropped and counted ROUTE on every input port, never forwarded through entry 0."""
    n = CFG.n_routes
    table = full_table()
    frames, tag = {p: [] for p in range(CFG.n_ports)}, 0
    rids = (0, 1, n - 1, n, n + 1, (1 << CFG.meta.route_bits) - 1)
    for rid in rids:
        for p in range(CFG.n_ports):
            for coll_ in (Collective.MULTICAST, Collective.P2P):
                tag += 1
                frames[p].append(data_frame(tag, route_id=rid, collective=coll_))
    golden, exp = run(frames, table, seed=1)
    # independently of golden: the documented rule (docs/nic.md, ErrorCause.ROUTE)
    n_bad = sum(1 for rid in rids if rid >= n) * CFG.n_ports * 2
    assert golden.errors[ErrorCause.ROUTE] == n_bad
    assert sum(golden.errors.values()) == n_bad
    out_ports = {f: {q for q in exp for _, g in exp[q] if g == f} for p in frames for f in frames[p]}
    for p in frames:
        for i, f in enumerate(frames[p]):
            rid = rids[i // 2]
            want = {q for q in range(CFG.n_ports) if table[rid].mask >> q & 1} if rid < n else set()
            assert out_ports[f] == want, (rid, p)


def test_route_table_last_entry_and_reduction_root_fanin_edges():
    """A reduction root entry at n_routes-2 with fan-in 1 completes at once; roots with fan-in
    0 and max_nodes+1 are ROUTE faults; max_nodes is accepted (the group stays open)."""
    table = full_table()
    table[3] = RouteEntry(0b001, 0)
    table[4] = RouteEntry(0b001, CFG.max_nodes + 1)
    table[5] = RouteEntry(0b001, CFG.max_nodes)
    frames = {0: [], 1: [], 2: []}
    for i, rid in enumerate((CFG.n_routes - 2, 3, 4, 5, CFG.n_routes - 2)):
        meta = MetaFields(op=MetaOp.REDUCTION, reduce_op=ReduceOp.MAX, stage=Stage.DECODE, src=(2, 3, 4, 5, 7)[i], dst=9,
                          kv_id=(0, 10 + i), route_id=rid, collective=Collective.ALL_REDUCE, length=16)
        frames[i % 3].append(make_frame(meta, encode_i32([-1, 2 ** 31 - 1, -2 ** 31, i]), CFG))
    golden, exp = run(frames, table, seed=2)
    assert golden.errors[ErrorCause.ROUTE] == 2 and sum(golden.errors.values()) == 2 and len(exp[0]) == 2


def test_route_mask_bits_beyond_the_ports():
    """An entry's mask bits at and above n_ports name no port: an entry with only such bits is
    empty (ROUTE), for a forwarded frame and for an all-to-all chunk; with a real port bit too,
    the frame leaves on the real ports only."""
    n = CFG.n_ports
    hi = (0xFF >> n) << n                      # every bit above the ports
    table = {0: RouteEntry(1 << n), 1: RouteEntry(hi), 2: RouteEntry(hi | 0b010), 3: RouteEntry((1 << n) | 0b101),
             4: RouteEntry(0b010), 5: RouteEntry(1 << n), 6: RouteEntry(hi | 0b100), 7: RouteEntry(0b001)}
    frames = {p: [] for p in range(n)}
    tag = 0
    for rid in range(4):
        for p in range(n):
            tag += 1
            frames[p].append(data_frame(tag, route_id=rid))
    for k in range(3):                         # all-to-all from the local port over entries 4..7
        meta = MetaFields(op=MetaOp.DATA, src=2, dst=0, route_id=4, collective=Collective.ALL_TO_ALL,
                          kv_id=(0, 100 + k), length=(32, 64, 32)[k])
        frames[0].append(make_frame(meta, bytes((k + i) % 256 for i in range(meta.length)), CFG))
    golden, exp = run(frames, table, seed=3, num_nodes=4)
    # independent of golden: entries 0, 1 and chunk 1 (entry 5) are empty
    assert golden.errors[ErrorCause.ROUTE] == 2 * n + 3, golden.errors
    assert sum(len(v) for v in exp.values()) == n + 2 * n + 3 * 3


def _field_frame(draw, tag):
    """One frame with one or two bounded fields at a boundary or random value (the others valid)."""
    mp = CFG.meta
    top_node, top_route = (1 << mp.node_bits) - 1, (1 << mp.route_bits) - 1
    meta = MetaFields(op=draw(st.sampled_from([MetaOp.DATA, MetaOp.QUERY, MetaOp.KV_REPLICA, MetaOp.REPLICA_INVALIDATE])),
                      stage=Stage.PREFILL, src=2, dst=3, kv_id=(1, tag), route_id=1,
                      collective=draw(st.sampled_from([Collective.P2P, Collective.MULTICAST])),
                      length=draw(st.sampled_from([0, 8, 13])))
    for field in draw(st.lists(st.sampled_from(["src", "dst", "route_id", "layer", "block", "length", "op",
                                                "payload", "reduce"]), min_size=1, max_size=2, unique=True)):
        if field == "src":
            meta = meta.replace(src=draw(st.one_of(bounded(0, CFG.max_nodes, top_node), st.just(6))))
        elif field == "dst":
            meta = meta.replace(collective=Collective.P2P, dst=draw(bounded(0, NUM_NODES, top_node)))
        elif field == "route_id":
            meta = meta.replace(route_id=draw(bounded(0, CFG.n_routes, top_route)))
        elif field == "layer":
            meta = meta.replace(op=MetaOp.KV_REPLICA, kv_id=(draw(bounded(0, NUM_LAYERS, (1 << mp.layer_bits) - 1)),
                                                         meta.kv_id[1]))
        elif field == "block":
            # the tag stays unique: boundary blocks go to the replica-invalidate path (no output frame)
            # or carry the tag in the layer field
            meta = meta.replace(op=MetaOp.KV_REPLICA, kv_id=(tag % 256, draw(bounded(0, NUM_BLOCKS, (1 << mp.block_bits) - 1))))
        elif field == "length":
            meta = meta.replace(length=draw(bounded(0, CFG.max_payload + 1, (1 << mp.length_bits) - 1)))
        elif field == "op":
            meta = meta.replace(op=draw(st.integers(0, 15)))
        elif field == "reduce":
            meta = meta.replace(reduce_op=draw(st.sampled_from(list(ReduceOp))),
                                op=draw(st.sampled_from([MetaOp.REDUCTION, MetaOp.PARTIAL_STATE, MetaOp.DATA])),
                                collective=Collective.ALL_REDUCE, route_id=CFG.n_routes - 2,
                                length=draw(st.sampled_from([0, 8, 16, 24, 12])))
    n = min(meta.length, CFG.max_payload + 8)
    if meta.length > CFG.max_payload:
        n = 8
    delta = 0
    if draw(st.booleans()) and draw(st.booleans()):
        delta = draw(st.sampled_from([-8, -1, 1, 8]))
    n = max(0, n + delta)
    payload = bytes((tag * 7 + i) % 256 for i in range(n))
    return make_frame(meta, payload, CFG)


@FEW
@given(st.data(), st.integers(0, 2 ** 16))
def test_every_bounded_field_at_its_edges_like_golden(data, seed):
    """Frames whose src, dst, route_id, kv layer/block, length, op, reduce pair or payload size sit
    at a boundary (or at random), with valid frames between them, on every port."""
    table = full_table()
    frames, tag = {p: [] for p in range(CFG.n_ports)}, 0
    for _ in range(data.draw(st.integers(6, 14))):
        tag += 1
        p = data.draw(st.integers(0, CFG.n_ports - 1))
        f = _field_frame(data.draw, tag) if data.draw(st.integers(0, 3)) else data_frame(tag)
        frames[p].append(f)
    # outputs must be unique for the interleaving check: drop exact duplicates (same tag never repeats)
    seen = set()
    for p in frames:
        frames[p] = [f for f in frames[p] if not (f in seen or seen.add(f))]
    run(frames, table, seed=seed)


# ---------------------------------------------------------------- reductions: op x lanes x sources

I32_EDGES = [-2 ** 31, -2 ** 31 + 1, -1, 0, 1, 2 ** 31 - 2, 2 ** 31 - 1]
I64_EDGES = [-2 ** 63, -2 ** 63 + 1, -2 ** 32, -1, 0, 1, 2 ** 31, 2 ** 32 - 1, 2 ** 63 - 1]


def lane_payload(rng, op, words, j):
    """Lane values at the signed boundaries, rotated by source index ``j`` so that every lane sees
    negative-vs-positive and min-vs-max pairs across sources, plus random lanes."""
    if op == MetaOp.PARTIAL_STATE:
        vals = [I64_EDGES[(i + 3 * j) % len(I64_EDGES)] if i % 3 != 2 else rng.randrange(-2 ** 63, 2 ** 63)
                for i in range(words)]
        return encode_i64(vals)
    vals = [I32_EDGES[(i + 2 * j) % len(I32_EDGES)] if i % 3 != 2 else rng.randrange(-2 ** 31, 2 ** 31)
            for i in range(2 * words)]
    return encode_i32(vals)


def merge_payload(rng, words, j):
    d = words - 2
    if j % 3 == 1:
        return encode_partial(M_EMPTY, 0, [0] * d)
    m = [0, -2 ** 16, 2 ** 16 - 1, 5][j % 4]
    return encode_partial(m, rng.randrange(0, 2 ** 36), [rng.choice([-2 ** 36, 2 ** 36 - 1, rng.randrange(-99, 99)])
                                                        for _ in range(d)])


def test_every_reduce_op_lane_width_and_source_count():
    """SUM and MAX in 32-bit lanes (REDUCTION) and 64-bit lanes (PARTIAL_STATE), and SOFTMAX_MERGE,
    each with 1, 2, 3 and max_nodes sources and 1 or max_payload_beats words, one group after
    another through the ReductionEngine: every result equals golden.nic.reduce_payloads."""
    cfg = NicConfig(n_net=2, n_routes=16, max_payload=64)
    rng = random.Random(26)
    combos = [(ReduceOp.SUM, MetaOp.REDUCTION), (ReduceOp.MAX, MetaOp.REDUCTION), (ReduceOp.SUM, MetaOp.PARTIAL_STATE),
              (ReduceOp.MAX, MetaOp.PARTIAL_STATE), (ReduceOp.SOFTMAX_MERGE, MetaOp.PARTIAL_STATE)]
    contribs, expect = [], []
    g = 0
    for rop, op in combos:
        for n_src in (1, 2, 3, cfg.max_nodes):
            for words in ((3, cfg.max_payload_beats) if rop == ReduceOp.SOFTMAX_MERGE else (1, cfg.max_payload_beats)):
                g += 1
                srcs = rng.sample(range(cfg.max_nodes), n_src)
                payloads = {}
                for j, s in enumerate(srcs):
                    p = (merge_payload(rng, words, j) if rop == ReduceOp.SOFTMAX_MERGE
                         else lane_payload(rng, op, words, j))
                    payloads[s] = p
                    meta = MetaFields(op=op, reduce_op=rop, stage=Stage.DECODE, src=s, dst=g % 16,
                                      route_id=0, collective=Collective.ALL_REDUCE, kv_id=(1, g), length=8 * words)
                    contribs.append((meta, p, n_src))
                expect.append(reduce_payloads(rop, [payloads[s] for s in sorted(payloads)], op=op))
    exp, exp_err, waiting = coll.golden_run(cfg, contribs)
    assert not waiting and exp_err == 0 and len(exp) == len(expect)
    hb = cfg.meta.header_bytes
    assert [f[hb:] for f in exp] == expect
    got, err, acc, total = coll.engine_run(cfg, contribs, seed=7, rp=0.7, vp=0.9)
    assert acc == total and err == 0
    assert got == exp


def test_all_to_all_length_boundaries():
    """A local all-to-all over n nodes must carry a positive multiple of 8n bytes: lengths 0, 8,
    8n-1 and 8n+1 are dropped and counted LENGTH (0 included: a zero-length split has no chunks,
    and 0 % 8n == 0 would let it through without its own check); 8n and 16n are split. Hardware
    and golden agree, and the counts are stated here, not taken from golden."""
    n = 4
    table = {4: RouteEntry(0b001), 5: RouteEntry(0b010), 6: RouteEntry(0b100), 7: RouteEntry(0b010)}
    lengths = (0, 8, 8 * n - 1, 8 * n, 8 * n + 1, 16 * n)
    frames = {p: [] for p in range(CFG.n_ports)}
    for k, length in enumerate(lengths):
        meta = MetaFields(op=MetaOp.DATA, src=2, dst=0, route_id=4, collective=Collective.ALL_TO_ALL,
                          kv_id=(0, 200 + k), length=length)
        frames[0].append(make_frame(meta, bytes((k + i) % 256 for i in range(length)), CFG))
    golden, exp = run(frames, table, seed=5, num_nodes=n)
    assert golden.errors[ErrorCause.LENGTH] == 4, golden.errors
    assert sum(len(v) for v in exp.values()) == 2 * n      # two good frames, n chunks each
