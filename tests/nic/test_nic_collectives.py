"""NIC all-to-all and reduction engine vs golden/nic.py (golden.numerics for softmax merge)."""
import random

from hypothesis import given, settings, strategies as st

# Each example simulates a whole NIC (~1-4 s): a third of the profile's examples.
FEW = settings(max_examples=max(3, settings.default.max_examples // 3))

from golden.nic import NicModel, decode_partial, encode_i32, encode_partial, make_frame, reduce_payloads
from golden.numerics import M_EMPTY, merge_partials
from golden.topology import RouteEntry
from hdl.meta import Collective, MetaFields, Op, ReduceOp, Stage
from hdl.nic.config import ErrorCause, NicConfig
from nic_tb import NicBench, check_interleaving, golden_outputs

CFG = NicConfig(n_net=2, n_routes=16, max_payload=64)


def random_partial(rng, d):
    if rng.random() < 0.15:
        return encode_partial(M_EMPTY, 0, [0] * d)
    m = rng.randrange(-2 ** 16, 2 ** 16)
    return encode_partial(m, rng.randrange(0, 2 ** 36),
                          [rng.randrange(-2 ** 36, 2 ** 36) for _ in range(d)])


def contribution(rng, rop, dst, src, rid, words):
    if rop == ReduceOp.SOFTMAX_MERGE:
        payload, op = random_partial(rng, words - 2), Op.PARTIAL_STATE
    else:
        payload = encode_i32([rng.randrange(-2 ** 31, 2 ** 31) for _ in range(2 * words)])
        op = Op.REDUCTION
    meta = MetaFields(op=op, reduce_op=rop, stage=Stage.DECODE, src=src, dst=dst, route_id=rid,
                      collective=Collective.ALL_REDUCE, kv_id=(0, 7), length=8 * words)
    return make_frame(meta, payload, CFG)


def run_reduction(seed, groups, rp, vp):
    """``groups``: [(reduce_op, dst, n_sources, words)] -> contributions spread over ports in
    random order; compares the local output with golden (results are order-free per group)."""
    rng = random.Random(seed)
    table, frames, rid = {}, {0: [], 1: [], 2: []}, 0
    for rop, dst, n, words in groups:
        srcs = rng.sample(range(CFG.max_nodes), n)
        for s in srcs:
            table[rid] = RouteEntry(0b001, n)
            frames[rng.randrange(3)].append(contribution(rng, rop, dst, s, rid, words))
            rid += 1
    for p in frames:
        rng.shuffle(frames[p])
    model = NicModel(CFG, node_id=5, num_nodes=16)
    golden = NicModel(CFG, node_id=5, num_nodes=16)
    golden.load_table(table)
    exp = golden_outputs(golden, frames)
    bench = NicBench(CFG, model, table, frames, seed=seed, ready_prob=rp, valid_prob=vp).run(exp)
    assert sorted(bench.out[0]) == sorted(f for _, f in exp[0])
    assert len(exp[0]) == len(groups)
    assert {c: bench.counters[c] for c in ErrorCause} == golden.errors
    return exp


@FEW
@given(st.integers(0, 2 ** 32), st.sampled_from(list(ReduceOp)[1:]), st.integers(1, 6),
       st.integers(3, 8), st.floats(0.3, 1.0), st.floats(0.3, 1.0))
def test_reduction_bit_identical_to_golden(seed, rop, n, words, rp, vp):
    run_reduction(seed, [(rop, 9, n, words)], rp, vp)


@FEW
@given(st.integers(0, 2 ** 32), st.floats(0.3, 1.0))
def test_two_groups_in_flight(seed, rp):
    """Two groups (two contexts) whose contributions interleave."""
    rng = random.Random(seed)
    run_reduction(seed, [(rng.choice([ReduceOp.SUM, ReduceOp.MAX]), 3, rng.randrange(2, 5), 4),
                         (ReduceOp.SOFTMAX_MERGE, 4, rng.randrange(2, 5), 5)], rp, 0.8)


def test_softmax_merge_is_ascending_src_fold():
    """The golden the engine is compared with is merge_partials in ascending src order
    (guards the test itself: a different order gives different bits here)."""
    rng = random.Random(3)
    parts = [random_partial(rng, 4) for _ in range(6)]
    out = reduce_payloads(ReduceOp.SOFTMAX_MERGE, parts)
    ref = merge_partials([decode_partial(p) for p in parts])
    assert decode_partial(out).equal(ref)
    orders = {reduce_payloads(ReduceOp.SOFTMAX_MERGE, parts[::-1]), out}
    for _ in range(20):
        rng.shuffle(parts)
        orders.add(reduce_payloads(ReduceOp.SOFTMAX_MERGE, parts))
    assert len(orders) > 1


def test_conflicting_contribution_dropped_and_counted():
    """A duplicate src and a contribution with a different length are dropped (REDUCE);
    the group still completes with the right result."""
    rng = random.Random(9)
    table = {0: RouteEntry(1, 3), 1: RouteEntry(1, 3), 2: RouteEntry(1, 3)}
    a = contribution(rng, ReduceOp.SUM, 2, 1, 0, 4)
    dup = contribution(rng, ReduceOp.SUM, 2, 1, 0, 4)
    wrong_len = contribution(rng, ReduceOp.SUM, 2, 3, 1, 3)
    b = contribution(rng, ReduceOp.SUM, 2, 3, 1, 4)
    c = contribution(rng, ReduceOp.SUM, 2, 0, 2, 4)
    frames = {1: [a, dup, wrong_len, b, c]}   # one port: the arrival order is fixed
    golden = NicModel(CFG, node_id=5, num_nodes=16); golden.load_table(table)
    exp = golden_outputs(golden, frames)
    assert golden.errors[ErrorCause.REDUCE] == 2
    bench = NicBench(CFG, NicModel(CFG, node_id=5, num_nodes=16), table, frames, seed=2).run(exp)
    assert bench.out[0] == [f for _, f in exp[0]]
    assert bench.counters[ErrorCause.REDUCE] == 2


@FEW
@given(st.integers(0, 2 ** 32), st.integers(2, 5), st.integers(1, 2), st.floats(0.3, 1.0))
def test_all_to_all_split_like_golden(seed, n_nodes, words, rp):
    """A local ALL_TO_ALL packet leaves as NUM_NODES chunk packets, chunk j routed by
    route_id + j (one of them empty: dropped and counted)."""
    rng = random.Random(seed)
    base = rng.randrange(0, CFG.n_routes - n_nodes + 1)
    table = {base + j: RouteEntry(rng.randrange(1, 8)) for j in range(n_nodes)}
    if rng.random() < 0.3:
        del table[base + rng.randrange(n_nodes)]
    frames = {0: []}
    for k in range(rng.randrange(1, 4)):
        n = 8 * words * n_nodes
        meta = MetaFields(op=Op.DATA, src=1, dst=0, route_id=base, collective=Collective.ALL_TO_ALL,
                          kv_id=(0, k), length=n)
        frames[0].append(make_frame(meta, bytes(rng.randrange(256) for _ in range(n)), CFG))
    frames[0].append(make_frame(MetaFields(op=Op.DATA, src=1, dst=0, route_id=base, kv_id=(0, 99),
                                           collective=Collective.ALL_TO_ALL, length=8 * n_nodes + 8),
                                bytes(8 * n_nodes + 8), CFG))   # not a multiple: LENGTH
    model = NicModel(CFG, node_id=1, num_nodes=n_nodes)
    golden = NicModel(CFG, node_id=1, num_nodes=n_nodes); golden.load_table(table)
    exp = golden_outputs(golden, frames)
    bench = NicBench(CFG, model, table, frames, seed=seed, ready_prob=rp).run(exp)
    for p in range(CFG.n_ports):
        check_interleaving(exp.get(p, []), bench.out[p], p)
    assert {c: bench.counters[c] for c in ErrorCause} == golden.errors
