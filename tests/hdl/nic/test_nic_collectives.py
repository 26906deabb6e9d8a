"""NIC all-to-all and reduction engine vs mcf_fpga/golden/nic.py (golden.numerics for softmax merge): whole
NICs (reductions arriving on several ports), and the ReductionEngine alone (random groups of every
reduce_op and lane width, interleaved, more groups than contexts, conflicts, back-pressure)."""
import random

from hypothesis import given, settings, strategies as st

# Each example simulates a whole NIC (~1-4 s): a third of the profile's examples.
FEW = settings(max_examples=max(3, settings.default.max_examples // 3))

from mcf_fpga.golden.nic import (NicModel, ReduceModel, decode_partial, encode_i32, encode_i64, encode_partial,
                        make_frame, reduce_payloads)
from mcf_fpga.golden.numerics import M_EMPTY, merge_partials
from mcf_fpga.spec.topology import RouteEntry
from mcf_fpga.spec.meta import Collective, MetaFields, MetaOp, ReduceOp, Stage
from mcf_fpga.spec.nic import ErrorCause, NicConfig
from tests.hdl.nic.nic_tb import NicBench, check_interleaving, golden_outputs

CFG = NicConfig(n_net=2, n_routes=16, max_payload=64)


def random_partial(rng, d):
    if rng.random() < 0.15:
        return encode_partial(M_EMPTY, 0, [0] * d)
    m = rng.randrange(-2 ** 16, 2 ** 16)
    return encode_partial(m, rng.randrange(0, 2 ** 36),
                          [rng.randrange(-2 ** 36, 2 ** 36) for _ in range(d)])


def random_words(rng, op, words):
    """``words`` 64-bit words of a SUM/MAX payload: int64 lanes for PARTIAL_STATE (values near
    the int64 limits too, so a 64-bit SUM wraps), else int32 lanes."""
    if op == MetaOp.PARTIAL_STATE:
        big = rng.random() < 0.5
        return encode_i64([rng.randrange(-2 ** 63, 2 ** 63) if big else rng.randrange(-2 ** 40, 2 ** 40)
                           for _ in range(words)])
    return encode_i32([rng.randrange(-2 ** 31, 2 ** 31) for _ in range(2 * words)])


def contribution_meta(rng, rop, dst, src, rid, words, op=MetaOp.REDUCTION, kv_id=(0, 7)):
    """(meta, payload) of one contribution; SOFTMAX_MERGE is always PARTIAL_STATE."""
    if rop == ReduceOp.SOFTMAX_MERGE:
        payload, op = random_partial(rng, words - 2), MetaOp.PARTIAL_STATE
    else:
        payload = random_words(rng, op, words)
    meta = MetaFields(op=op, reduce_op=rop, stage=Stage.DECODE, src=src, dst=dst, route_id=rid,
                      collective=Collective.ALL_REDUCE, kv_id=kv_id, length=8 * words)
    return meta, payload


def contribution(rng, rop, dst, src, rid, words, op=MetaOp.REDUCTION):
    return make_frame(*contribution_meta(rng, rop, dst, src, rid, words, op), CFG)


def run_reduction(seed, groups, rp, vp):
    """``groups``: [(reduce_op, dst, n_sources, words[, op])] -> contributions spread over ports in
    random order; compares the local output with golden (results are order-free per group)."""
    rng = random.Random(seed)
    table, frames, rid = {}, {0: [], 1: [], 2: []}, 0
    for rop, dst, n, words, *op in groups:
        srcs = rng.sample(range(CFG.max_nodes), n)
        for s in srcs:
            table[rid] = RouteEntry(0b001, n)
            frames[rng.randrange(3)].append(contribution(rng, rop, dst, s, rid, words, *op))
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
@given(st.integers(0, 2 ** 32), st.sampled_from(list(ReduceOp)[1:]), st.sampled_from([MetaOp.REDUCTION, MetaOp.PARTIAL_STATE]),
       st.integers(1, 6), st.integers(3, 8), st.floats(0.3, 1.0), st.floats(0.3, 1.0))
def test_reduction_bit_identical_to_golden(seed, rop, op, n, words, rp, vp):
    """One group through a whole NIC: SUM/MAX in 32-bit (REDUCTION) or 64-bit (PARTIAL_STATE)
    lanes, or SOFTMAX_MERGE; contributions on three ports with random gaps and back-pressure."""
    run_reduction(seed, [(rop, 9, n, words, op)], rp, vp)


@FEW
@given(st.integers(0, 2 ** 32), st.floats(0.3, 1.0))
def test_two_groups_in_flight(seed, rp):
    """Two groups (two contexts) whose contributions interleave."""
    rng = random.Random(seed)
    run_reduction(seed, [(rng.choice([ReduceOp.SUM, ReduceOp.MAX]), 3, rng.randrange(2, 5), 4,
                          rng.choice([MetaOp.REDUCTION, MetaOp.PARTIAL_STATE])),
                         (ReduceOp.SOFTMAX_MERGE, 4, rng.randrange(2, 5), 5)], rp, 0.8)


def test_softmax_merge_is_ascending_src_fold():
    """The golden the engine is compared with is merge_partials in ascending src order
    (guards the test itself: a different order gives different bits here)."""
    rng = random.Random(3)
    parts = [random_partial(rng, 4) for _ in range(6)]
    out = reduce_payloads(ReduceOp.SOFTMAX_MERGE, parts, op=MetaOp.PARTIAL_STATE)
    ref = merge_partials([decode_partial(p) for p in parts])
    assert decode_partial(out).equal(ref)
    orders = {reduce_payloads(ReduceOp.SOFTMAX_MERGE, parts[::-1], op=MetaOp.PARTIAL_STATE), out}
    for _ in range(20):
        rng.shuffle(parts)
        orders.add(reduce_payloads(ReduceOp.SOFTMAX_MERGE, parts, op=MetaOp.PARTIAL_STATE))
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
        meta = MetaFields(op=MetaOp.DATA, src=1, dst=0, route_id=base, collective=Collective.ALL_TO_ALL,
                          kv_id=(0, k), length=n)
        frames[0].append(make_frame(meta, bytes(rng.randrange(256) for _ in range(n)), CFG))
    frames[0].append(make_frame(MetaFields(op=MetaOp.DATA, src=1, dst=0, route_id=base, kv_id=(0, 99),
                                           collective=Collective.ALL_TO_ALL, length=8 * n_nodes + 8),
                                bytes(8 * n_nodes + 8), CFG))   # not a multiple: LENGTH
    model = NicModel(CFG, node_id=1, num_nodes=n_nodes)
    golden = NicModel(CFG, node_id=1, num_nodes=n_nodes); golden.load_table(table)
    exp = golden_outputs(golden, frames)
    bench = NicBench(CFG, model, table, frames, seed=seed, ready_prob=rp).run(exp)
    for p in range(CFG.n_ports):
        check_interleaving(exp.get(p, []), bench.out[p], p)
    assert {c: bench.counters[c] for c in ErrorCause} == golden.errors


# ---------------------------------------------------------------- golden: lane rule and pools

def test_lane_width_follows_the_op():
    """SUM/MAX over PARTIAL_STATE are int64 lanes (SUM wraps mod 2**64), over REDUCTION int32
    lanes: the same bytes reduce differently (a carry crosses the 32-bit lane boundary, a
    negative low word)."""
    a, b = encode_i64([2 ** 32 - 1, -5, 2 ** 63 - 1]), encode_i64([1, 7, 2])
    assert reduce_payloads(ReduceOp.SUM, [a, b], op=MetaOp.PARTIAL_STATE) == encode_i64([2 ** 32, 2, -2 ** 63 + 1])
    assert reduce_payloads(ReduceOp.SUM, [a, b], op=MetaOp.REDUCTION) == encode_i32([0, 0, 2, -1, 1, 2 ** 31 - 1])
    assert reduce_payloads(ReduceOp.MAX, [a, b], op=MetaOp.PARTIAL_STATE) == encode_i64([2 ** 32 - 1, 7, 2 ** 63 - 1])
    assert reduce_payloads(ReduceOp.MAX, [a, b], op=MetaOp.REDUCTION) == encode_i32([1, 0, 7, 0, 2, 2 ** 31 - 1])


def test_op_reduce_op_pairs():
    """PARTIAL_STATE may be summed / maxed (64-bit lanes) or softmax-merged; REDUCTION only summed
    or maxed: REDUCTION + SOFTMAX_MERGE and any other op with a reduce_op are OP faults."""
    nic = NicModel(CFG, node_id=5, num_nodes=16)
    nic.load_table({0: RouteEntry(0b001, 2)})
    verdict = lambda op, rop: nic.classify(1, make_frame(MetaFields(  # noqa: E731
        op=op, reduce_op=rop, collective=Collective.ALL_REDUCE, src=1, dst=3, length=24), bytes(24), CFG)).cause
    for rop in (ReduceOp.SUM, ReduceOp.MAX, ReduceOp.SOFTMAX_MERGE):
        assert verdict(MetaOp.PARTIAL_STATE, rop) is None
    for rop in (ReduceOp.SUM, ReduceOp.MAX):
        assert verdict(MetaOp.REDUCTION, rop) is None
        assert verdict(MetaOp.DATA, rop) == ErrorCause.OP
    assert verdict(MetaOp.REDUCTION, ReduceOp.SOFTMAX_MERGE) == ErrorCause.OP


def test_golden_pools_are_separate_and_a_full_pool_waits():
    """One SUM/MAX context and one SOFTMAX context: a second SUM group waits (and everything behind
    it: one input stream), while a SOFTMAX group could have opened beside the first SUM group."""
    rng = random.Random(1)
    model = ReduceModel(NicConfig(n_net=2, max_payload=64, reduce_contexts=1, merge_contexts=1))
    put = lambda rop, dst, src, **kw: model.contribute(  # noqa: E731
        contribution_meta(rng, rop, dst, src, 0, 4, **kw)[0], bytes(32), 2, 5)
    assert put(ReduceOp.SUM, 1, 0) == (None, None)
    assert put(ReduceOp.SOFTMAX_MERGE, 2, 0) == (None, None)          # the merge pool is separate
    assert len(model.groups) == 2 and not model.waiting
    assert put(ReduceOp.MAX, 3, 0, op=MetaOp.PARTIAL_STATE) == (None, None)   # reduce pool full: waits
    assert put(ReduceOp.SUM, 1, 1) == (None, None)                    # behind it, although its group is open
    assert len(model.waiting) == 2 and len(model.groups) == 2


# ---------------------------------------------------------------- the ReductionEngine alone

from mcf_fpga.hdl.nic.ingress import Cls, route_user_layout  # noqa: E402
from mcf_fpga.hdl.nic.reduce import ReductionEngine  # noqa: E402
from mcf_fpga.sim.kit import StreamSink, beats_to_packets, packets_to_beats, run_simulation  # noqa: E402

NODE_ID = 5


def engine_run(cfg, contribs, *, seed=0, rp=1.0, vp=1.0, quiet=120):
    """Feed ``contribs`` [(meta, payload, fanin)] to a ReductionEngine in order (random valid gaps,
    random back-pressure on ``m``); the run ends when neither ``s`` nor ``m`` moved for ``quiet``
    cycles (the feeder may be blocked for good). Returns (result frames, err pulses, input beats
    accepted, total input beats)."""
    dut = ReductionEngine(cfg)
    ulay = route_user_layout(cfg)
    frames = [make_frame(meta, payload, cfg) for meta, payload, _f in contribs]
    users = [int(ulay.const({"mask": 1, "cls": Cls.REDUCE, "fanin": f, "a2a": 0}).as_value().value)
             for _m, _p, f in contribs]
    beats = packets_to_beats(frames, 64, users) if frames else []
    rng = random.Random(seed)
    snk = StreamSink(dut.m, seed=seed + 1, ready_prob=rp)
    st_ = {"err": 0, "acc": 0, "still": 0}

    async def feed(ctx):        # StreamSource.send, written so that it may stay blocked at the end
        for b in beats:
            while rng.random() >= vp:
                ctx.set(dut.s.valid, 0)
                await ctx.tick()
            for k, v in b.items():
                ctx.set(dut.s.payload[k], v)
            ctx.set(dut.s.valid, 1)
            while not (await ctx.tick().sample(dut.s.ready))[2]:
                pass
        ctx.set(dut.s.valid, 0)

    async def watch(ctx):
        ctx.set(dut.node_id, NODE_ID)
        async for _clk, _rst, err, sv, sr, mv, mr in ctx.tick().sample(dut.err, dut.s.valid, dut.s.ready,
                                                                 dut.m.valid, dut.m.ready):
            st_["err"] += err
            st_["acc"] += sv and sr
            st_["still"] = 0 if (sv and sr) or (mv and mr) else st_["still"] + 1

    async def until_quiet(ctx):
        await ctx.tick()
        while st_["still"] < quiet:
            await ctx.tick()

    run_simulation(dut, [until_quiet], background=[feed, snk.run, watch], vcd=False, max_cycles=200_000)
    return beats_to_packets(snk.beats, 64), st_["err"], st_["acc"], len(beats)


def golden_run(cfg, contribs):
    """ReduceModel over ``contribs``: (result frames, REDUCE errors, contributions waiting)."""
    model = ReduceModel(cfg)
    out, errs = [], 0
    for meta, payload, fanin in contribs:
        res, err = model.contribute(meta, payload, fanin, NODE_ID)
        errs += err is not None
        if res is not None:
            out.append(res)
    return out, errs, model.waiting


@st.composite
def reduction_traffic(draw):
    """A small engine config and an arrival sequence of several groups' contributions, randomly
    interleaved, never more groups of a pool open than it holds (by construction: a group opens
    only when its pool has room), with duplicate-src and conflicting contributions to open groups."""
    kr, km = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    cfg = NicConfig(n_net=2, n_routes=16, max_payload=64, reduce_contexts=kr, merge_contexts=km)
    rng = random.Random(draw(st.integers(0, 2 ** 32)))
    groups = []
    for g in range(draw(st.integers(1, 7))):
        rop = draw(st.sampled_from([ReduceOp.SUM, ReduceOp.MAX, ReduceOp.SOFTMAX_MERGE]))
        op = MetaOp.PARTIAL_STATE if rop == ReduceOp.SOFTMAX_MERGE else draw(st.sampled_from([MetaOp.REDUCTION,
                                                                                          MetaOp.PARTIAL_STATE]))
        words = draw(st.integers(3 if rop == ReduceOp.SOFTMAX_MERGE else 1, cfg.max_payload_beats))
        fanin = draw(st.integers(1, 5))
        dst, kv = rng.randrange(16), (rng.randrange(4), g)          # (dst, kv_id) unique per group
        srcs = rng.sample(range(cfg.max_nodes), fanin)
        groups.append(dict(rop=rop, op=op, words=words, fanin=fanin, dst=dst, kv=kv,
                           todo=[contribution_meta(rng, rop, dst, s, 0, words, op, kv) for s in srcs]))
    out, opened, live = [], set(), {"reduce": 0, "merge": 0}
    pending = list(range(len(groups)))
    while pending:
        ready = [g for g in pending if g in opened
                 or live[ReduceModel.pool(groups[g]["rop"])] < (cfg.merge_contexts if groups[g]["rop"]
                                                                  == ReduceOp.SOFTMAX_MERGE else kr)]
        g = rng.choice(ready)
        G = groups[g]
        if g in opened and rng.random() < 0.2:                      # a conflicting contribution
            meta, payload = G["todo"][0]
            kind = rng.randrange(4)
            bad = (meta.replace(length=meta.length + 8) if kind == 0 and G["words"] < cfg.max_payload_beats
                   else meta.replace(reduce_op=ReduceOp.MAX if G["rop"] != ReduceOp.MAX else ReduceOp.SUM,
                                     op=MetaOp.PARTIAL_STATE) if kind == 1
                   else meta.replace(src=G["done"][0]) if kind == 2 else meta)
            fanin = G["fanin"] + 1 if kind == 3 else G["fanin"]
            out.append((bad, payload + bytes(bad.length - len(payload)), fanin))
            continue
        if g not in opened:
            opened.add(g)
            G["done"] = []
            live[ReduceModel.pool(G["rop"])] += 1
        meta, payload = G["todo"].pop(0)
        G["done"].append(meta.src)
        out.append((meta, payload, G["fanin"]))
        if not G["todo"]:
            pending.remove(g)
            live[ReduceModel.pool(G["rop"])] -= 1
    return cfg, out, len(groups)


@FEW
@given(reduction_traffic(), st.integers(0, 2 ** 16), st.floats(0.3, 1.0), st.floats(0.3, 1.0))
def test_engine_bit_identical_to_golden(traffic, seed, rp, vp):
    """The ReductionEngine alone equals golden.nic.ReduceModel bit for bit: SUM/MAX in both lane
    widths and SOFTMAX_MERGE groups, randomly interleaved, more groups than contexts (each pool
    reused), conflicting and duplicate contributions consumed and counted, random valid gaps and
    back-pressure. Every contribution is consumed and every group's result comes out."""
    cfg, contribs, n_groups = traffic
    exp, exp_err, waiting = golden_run(cfg, contribs)
    assert not waiting and len(exp) == n_groups            # the generator respects the pools
    got, err, acc, total = engine_run(cfg, contribs, seed=seed, rp=rp, vp=vp)
    assert acc == total, "the engine stopped accepting input"
    assert got == exp
    assert err == exp_err


def test_engine_full_pool_waits_without_loss():
    """reduce_contexts=1: a contribution opening a second SUM group waits on its last header beat
    (s.ready low, nothing dropped, no error, no output) as golden says; a SOFTMAX group opens in the
    merge pool beside the open SUM group and completes."""
    rng = random.Random(4)
    cfg = NicConfig(n_net=2, n_routes=16, max_payload=64, reduce_contexts=1, merge_contexts=1)
    a0 = contribution_meta(rng, ReduceOp.SUM, 1, 0, 0, 3, MetaOp.PARTIAL_STATE, (0, 1))
    m0, m1 = (contribution_meta(rng, ReduceOp.SOFTMAX_MERGE, 2, s, 0, 4, kv_id=(0, 2)) for s in (3, 4))
    b0 = contribution_meta(rng, ReduceOp.MAX, 1, 0, 0, 2, MetaOp.REDUCTION, (0, 3))
    a1 = contribution_meta(rng, ReduceOp.SUM, 1, 1, 0, 3, MetaOp.PARTIAL_STATE, (0, 1))
    contribs = [(*a0, 2), (*m0, 2), (*m1, 2), (*b0, 2), (*a1, 2)]
    exp, exp_err, waiting = golden_run(cfg, contribs)
    assert len(exp) == 1 and len(waiting) == 2 and exp_err == 0
    got, err, acc, total = engine_run(cfg, contribs, seed=3, rp=0.5, vp=0.7)
    assert got == exp and err == 0
    hb = cfg.header_beats
    assert acc == total - (hb + 2) - (hb + 3) + (hb - 1), "all of a0, m0, m1 and b0's header but its last beat"
    # once the SUM group closes the next one opens (no loss): same traffic, a1 before b0
    contribs = [(*a0, 2), (*m0, 2), (*m1, 2), (*a1, 2), (*b0, 1)]
    exp, _e, waiting = golden_run(cfg, contribs)
    got, err, acc, total = engine_run(cfg, contribs, seed=5, rp=0.5, vp=0.7)
    assert not waiting and len(exp) == 3 and got == exp and acc == total
