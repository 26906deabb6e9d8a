"""MARS equations checked on the *produced program*, not on the functions that compute them.

``test_mars_plan.py`` pins the formulas (eqs. 11, 15, 16) and the plan's own bookkeeping; these
tests read the per-node op streams a plan compiles to and check, from the ops alone, that every
equation the planner uses holds there (a planner that let the live copies of a block
exceed min(r(c), r_mem(k)) by one changed 108 of 300 plans and passed every other test).

The factors are recomputed here from the equations as written in docs/mars.md (not by calling
``mars.replica_factors``):

* eq. (11) r_mem(k) = floor(N S_node / (k M_chunk)), k 1-indexed, M_chunk = L * slot bytes;
* eq. (15) r_reuse(c) = max(1, min(N, 1 + floor(alpha (C - c))));
* eq. (16) r(c) = max(1, min(N, r_mem(c), r_reuse(c))).

Program facts used: chunk k's ``project`` on node n means n computes chunk k (then the ops of
that chunk and layer follow); a replica of (layer, block i) is live on node n from its
``recv install=replica`` to the ``release`` that follows its ``drain``.
"""
import dataclasses
import math
from collections import defaultdict

import pytest
from hypothesis import given, settings, strategies as st

from mcf_fpga.host import mars
from mcf_fpga.host.config import ClusterConfig, kv_unit_bytes
from mcf_fpga.host.program_ops import Acquire, AllReduce, Attend, Drain, Mark, Project, Recv, Release, Send, Unstage

from ._common import BLOCK, CFG, build, mars_cases, min_s_node


def factors(C, N, S_node, M_chunk, alpha):
    """(r_mem, r) per chunk, 0-indexed list, from eqs. 11, 15, 16."""
    out = []
    for c in range(1, C + 1):
        r_mem = (N * S_node) // (c * M_chunk)
        r_reuse = max(1, min(N, 1 + math.floor(alpha * (C - c))))
        out.append((r_mem, max(1, min(N, r_mem, r_reuse))))
    return out


def replica_windows(prog, C):
    """From the op streams: {(layer, block i): [(node, k_install, k_drain, k_release)]}, plus the
    chunk each node computes ({k: node}) and every (node, layer, unit) acquired per chunk."""
    windows = defaultdict(list)
    computes = {}
    acquired = defaultdict(set)          # (node, layer, k) -> units acquired by chunk k
    for n, ops in enumerate(prog.ops):
        cur = {}                          # layer -> chunk being computed
        open_ = {}                        # (layer, i) -> [k_install, k_drain]
        for op in ops:
            if isinstance(op, Mark):
                break                     # prefill ends here; decode follows
            if isinstance(op, Project):
                assert 0 <= op.unit < C
                cur[op.layer] = op.unit
                computes.setdefault(op.unit, set()).add(n)
            elif isinstance(op, Recv) and op.install == "replica":
                key = (op.layer, op.unit)
                assert key not in open_, f"node {n}: replica {key} installed twice"
                open_[key] = [cur[op.layer], None]
            elif isinstance(op, Acquire):
                acquired[(n, op.layer, cur[op.layer])] |= set(op.units)
            elif isinstance(op, Drain):
                key = (op.layer, op.unit)
                assert key in open_ and open_[key][1] is None, f"node {n}: drain of {key} not held"
                open_[key][1] = cur[op.layer]
            elif isinstance(op, Release):
                for u in op.units:
                    key = (op.layer, u)
                    if key in open_ and open_[key][1] is not None:
                        kf, kd = open_.pop(key)
                        windows[key].append((n, kf, kd, cur[op.layer]))
        assert not open_, f"node {n}: replicas never drained and released at prefill_done: {sorted(open_)}"
    return windows, computes, acquired


def check_program(prog, cluster, chunk, alpha, placement_kind):
    N, L = cluster.nodes, CFG.num_layers
    S = prog.prompt_len
    C = -(-S // chunk)
    slot = kv_unit_bytes(CFG, chunk, prog.kv_bits)
    assert prog.slot_bytes == slot
    fs = factors(C, N, cluster.kv_bytes_per_node, L * slot, alpha)
    windows, computes, acquired = replica_windows(prog, C)

    # placement: chunk k is computed on exactly one node, placement(C, N)[k], at every layer
    o = mars.placement(C, N, placement_kind)
    assert {k: n for k, ns in computes.items() for n in ns} == dict(enumerate(o))
    assert all(len(ns) == 1 for ns in computes.values())

    for (layer, i), ws in windows.items():
        assert 0 <= layer < L and 0 <= i < C
        holders = [n for n, *_ in ws]
        # one replica per node, never on the owner (eq. 16 counts the owner as the first copy)
        assert len(set(holders)) == len(holders) and o[i] not in holders
        # eq. (16): at most r(i) copies in all, owner included
        assert 1 + len(ws) <= fs[i][1], (layer, i, ws, fs[i])
        for n, kf, kd, kr in ws:
            # a replica is installed after its block exists and drained/released by one chunk
            assert i < kf <= kd == kr, (layer, i, n, kf, kd, kr)
            # eq. (14): made only where it is read: every chunk of n in the window acquires it,
            # and the window ends at a chunk that read it (break-even: no replica read zero times)
            reads = [k for k in range(kf, kd + 1) if o[k] == n]
            assert reads and reads[0] == kf and reads[-1] == kd
            assert all(i in acquired[(n, layer, k)] for k in reads), (layer, i, n, reads)
        # eq. (11) applied to all history: the live copies of block i during chunk k never exceed
        # min(r(i), r_mem(k))
        for k in range(i + 1, C):
            live = 1 + sum(1 for _, kf, _, kr in ws if kf <= k <= kr)
            assert live <= min(fs[i][1], fs[k][0]), (
                f"block {i} layer {layer}: {live} copies during chunk {k}, r({i + 1})={fs[i][1]}, "
                f"r_mem({k + 1})={fs[k][0]}")

    # every historical block a chunk attends to is local (owner / acquired replica) or staged
    for n, ops in enumerate(prog.ops):
        staged, owned, cur = set(), set(), {}
        for op in ops:
            if isinstance(op, Mark):
                break
            if isinstance(op, Project):
                cur[op.layer] = op.unit
                owned.add((op.layer, op.unit))
            elif isinstance(op, Recv) and op.install == "stage":
                staged.add((op.layer, op.unit))
            elif isinstance(op, Unstage):
                staged.remove((op.layer, op.unit))
            elif isinstance(op, Attend):
                k = cur[op.layer]
                assert set(op.units) == set(range(k + 1))
                have = {u for (l_, u) in owned | staged if l_ == op.layer} | acquired[(n, op.layer, k)]
                assert set(op.units) <= have, (n, op.layer, k, set(op.units) - have)
        assert not staged
    return windows, fs


@settings(max_examples=30)
@given(mars_cases(), st.data())
def test_live_copies_never_exceed_r_and_r_mem_in_the_program(case, data):
    """Random plans, with S_node drawn from the boundary values (the owner-only minimum, +1, and
    the tight region where r_mem binds) as well as at random."""
    cluster, S, K, chunk, alpha, placement = case
    lo = min_s_node(cluster.nodes, S, chunk, K)
    slot_l = CFG.num_layers * kv_unit_bytes(CFG, chunk)
    s_node = data.draw(st.one_of(st.sampled_from([lo, lo + 1, lo + slot_l - 1, lo + slot_l, 2 * lo, 2 * lo - 1]),
                                 st.just(cluster.kv_bytes_per_node)))
    alpha = data.draw(st.one_of(st.sampled_from([0.0, 1.0, 2.0]), st.just(alpha)))
    cluster = ClusterConfig(nodes=cluster.nodes, topology=cluster.topology, kv_bytes_per_node=s_node)
    prog = build("mars", cluster, S, K, chunk, alpha, placement=placement)
    check_program(prog, cluster, chunk, alpha, placement)


@settings(max_examples=30)
@given(mars_cases())
def test_step_memory_is_eq_9_of_the_program(case):
    """Eqs. (9)-(10) on the produced program: the plan's per-step memory of node n (what its
    admission used) is exactly n's owner units that exist by step s -- a chunk's units from the
    first step of its run (consecutive chunks of one node advance layer by layer together) --
    plus every replica the op streams place on n, counted from the step its block is produced
    to the chunk that releases it; and never above S_node. An admission that counted a node's
    later owner units from step 0 plans fewer replicas and passes every bound above."""
    cluster, S, K, chunk, alpha, placement = case
    prog = build("mars", cluster, S, K, chunk, alpha, placement=placement)
    plan, N, L = prog.stats["plan"], cluster.nodes, CFG.num_layers
    C = -(-S // chunk)
    o = mars.placement(C, N, placement)
    start = [k if k == 0 or o[k - 1] != o[k] else None for k in range(C)]
    for k in range(1, C):
        start[k] = start[k] if start[k] is not None else start[k - 1]
    windows, _, _ = replica_windows(prog, C)
    count = [[L * sum(1 for k in range(C) if o[k] == n and start[k] <= s) for n in range(N)] for s in range(C)]
    for (_layer, i), ws in windows.items():
        for n, _kf, _kd, kr in ws:
            for s in range(i, kr + 1):
                count[s][n] += 1
    assert plan.step_mem[:C] == [[c * prog.slot_bytes for c in row] for row in count]
    assert max(max(row) for row in plan.step_mem) <= cluster.kv_bytes_per_node


def test_memory_bound_binds_in_a_known_plan():
    """A plan where r_mem(k) < r(c) for later chunks, so the eq. 11 bound is what ends replica
    windows: the check above is exercised at its boundary (some block has exactly
    min(r(c), r_mem(k)) live copies while r_mem(k) < r(c))."""
    tight = 0
    for nodes, S, chunk, mult in [(4, 12 * 8, 8, 2), (6, 12 * 8, 8, 2), (5, 12 * 16, 16, 3), (4, 10 * 8, 8, 3)]:
        lo = min_s_node(nodes, S, chunk)
        cluster = ClusterConfig(nodes=nodes, topology="ring", kv_bytes_per_node=mult * lo)
        prog = build("mars", cluster, S, 0, chunk, alpha=2.0)
        windows, fs = check_program(prog, cluster, chunk, 2.0, "round_robin")
        C = len(fs)
        for (layer, i), ws in windows.items():
            for k in range(i + 1, C):
                live = 1 + sum(1 for _, kf, _, kr in ws if kf <= k <= kr)
                if fs[k][0] < fs[i][1] and live == fs[k][0]:
                    tight += 1
    assert tight > 0, "no plan reached the r_mem bound: the scenario no longer tests eq. 11"


# ---------------------------------------------------------------- eqs. 18-22, placement, eq. 10 edge

@given(st.integers(1, 30), st.integers(2, 16), st.sampled_from([8, 16, 32]))
def test_predicted_volume_identities(C, N, B):
    """Eqs. 18-22 at their two ends, from the docstring's statement (eq. 19: every node without a
    replica reads every block of the history each chunk): no replication (alpha = 0, r = 1) makes
    eq. 20 the ring volume of eq. 21; replication of every chunk to all N nodes (ample memory,
    large alpha; r(C) = 1 by eq. 29) makes it the full-replication volume of eq. 22."""
    Mc = B * mars.m_token(CFG)
    ring = Mc * (N - 1) * C * (C + 1) // 2
    full = Mc * (N - 1) * C
    none = mars.predicted_volume(CFG, ClusterConfig(nodes=N, kv_bytes_per_node=10 ** 12), C * B, B, alpha=0.0)
    assert none["ring"] == none["mars_eq20"] == ring and none["full"] == full
    assert none["mars_one_reader"] == ring / N
    all_ = mars.predicted_volume(CFG, ClusterConfig(nodes=N, kv_bytes_per_node=10 ** 12), C * B, B, alpha=float(N))
    assert all_["mars_eq20"] == full
    assert all_["mars_one_reader"] == Mc * (N - 1) * (C - 1) + Mc * (N - 1) / N


@given(st.integers(1, 64), st.integers(2, 16))
def test_rotated_placement_follows_its_definition(C, N):
    """docs: round r (chunks rN .. rN+N-1) starts at node r * ceil(N / R), R = ceil(C / N) rounds,
    and goes round the nodes in order."""
    o = mars.placement(C, N, "rotated")
    R = -(-C // N)
    for c in range(C):
        r, j = divmod(c, N)
        assert o[c] == (r * -(-N // R) + j) % N


def test_owner_only_minimum_is_the_admission_edge():
    """eq. 10 with r = 1 at its edge: S_node = the owner-only minimum plans (and converges to
    owner-only with no replica); one byte less is refused with the field named."""
    for nodes, S, chunk in [(2, 40, 8), (4, 96, 8), (3, 50, 16)]:
        lo = min_s_node(nodes, S, chunk)
        prog = build("mars", ClusterConfig(nodes=nodes, kv_bytes_per_node=lo), S, 0, chunk)
        check_program(prog, ClusterConfig(nodes=nodes, kv_bytes_per_node=lo), chunk, 0.5, "round_robin")
        import pytest
        with pytest.raises(ValueError, match="kv_bytes_per_node"):
            build("mars", ClusterConfig(nodes=nodes, kv_bytes_per_node=lo - 1), S, 0, chunk)


def test_parameters_at_both_edges():
    """Every bounded MARS input at its edge: the extreme legal value is accepted, one beyond is
    refused with the field named (MarsParams, prompt length vs max_position, the propagation
    buffer vs one merge block, compile_prefill's node list and earlier requests' slots)."""
    import pytest
    from mcf_fpga.host.config import HardwareConfig
    from mcf_fpga.host.program import ProgramBuilder
    for kw in (dict(alpha=0.0), dict(gamma=1e-9), dict(min_chunks_per_node=1), dict(chunk=1), dict(chunk=None),
               *[dict(placement=p) for p in mars.PLACEMENTS]):
        mars.MarsParams(**kw)
    for kw, name in ((dict(alpha=-1e-9), "alpha"), (dict(alpha=float("nan")), "alpha"), (dict(gamma=0.0), "gamma"),
                     (dict(min_chunks_per_node=0), "min_chunks_per_node"), (dict(min_chunks_per_node=1.0), "min_chunks"),
                     (dict(chunk=0), "chunk"), (dict(chunk=1.5), "chunk"), (dict(placement="rr"), "placement")):
        with pytest.raises(ValueError, match=f"MarsParams.{name}"):
            mars.MarsParams(**kw)
    P = CFG.max_position
    mars.check_lengths(CFG, 1, 0)
    mars.check_lengths(CFG, P - 3, 3)
    for S, K, what in ((0, 0, "prompt_len"), (1.0, 0, "prompt_len"), (P - 3, 4, "max_position"), (P + 1, 0, "max_position")):
        with pytest.raises(ValueError, match=what):
            mars.check_lengths(CFG, S, K)
    # eq. 5 at one merge block: a buffer of exactly one block's KV plans, one byte less is refused
    cl = ClusterConfig(nodes=2, kv_bytes_per_node=10 ** 7)
    one = BLOCK * mars.m_token(CFG)
    ch = mars.choose_chunk(CFG, cl, HardwareConfig(kv_buffer_bytes=one), 64, BLOCK)
    assert ch["B"] == BLOCK
    with pytest.raises(ValueError, match="kv_buffer_bytes"):
        mars.choose_chunk(CFG, cl, HardwareConfig(kv_buffer_bytes=one - 1), 64, BLOCK)
    # compile_prefill's node list and held slots
    cl4 = ClusterConfig(nodes=4, kv_bytes_per_node=min_s_node(2, 32, 8))
    topo = cl4.make_topology()

    def compile_(nodes, held=None):
        b = ProgramBuilder(CFG, topo, BLOCK, 8, cl4.route_table_size)
        return mars.compile_prefill(b, cl4, 32, 0, 8, mars.MarsParams(chunk=8), nodes=nodes, held_slots=held)
    units, owner, plan = compile_([3, 0])
    assert set(owner) == {3, 0} and owner[0] == 3
    for bad in ([], [0, 0], [0, 4], [-1, 1]):
        with pytest.raises(ValueError, match="nodes="):
            compile_(bad)
    slots = cl4.kv_bytes_per_node // kv_unit_bytes(CFG, 8)
    need = CFG.num_layers * 2                            # 4 chunks over 2 nodes, L units each
    compile_([0, 1], {0: slots - need, 1: slots - need})
    with pytest.raises(ValueError, match="earlier"):
        compile_([0, 1], {0: slots - need + 1})


@pytest.mark.parametrize("kv_bits", [8, 4])
def test_m_token_is_eq_1(kv_bits):
    """Eq. (1) with the hardware format: 2 L H_kv d b bits per token, plus one exponent byte per
    (token, KV head) for K and for V."""
    L, H, d = CFG.num_layers, CFG.num_kv_heads, CFG.head_dim
    assert mars.m_token(CFG, kv_bits) == 2 * L * H * d * kv_bits // 8 + 2 * L * H


@pytest.mark.parametrize("nodes, S, chunk, K", [(2, 40, 8, 3), (4, 96, 8, 9), (3, 50, 16, 17)])
def test_fully_sharded_check_counts_decode_blocks(nodes, S, chunk, K):
    """check_fits at its edge with decode tokens: S_node = the owner-only minimum including the
    decode blocks plans; one byte less is refused by the fully-sharded check (before any work),
    not later by admission."""
    lo = min_s_node(nodes, S, chunk, K)
    build("mars", ClusterConfig(nodes=nodes, kv_bytes_per_node=lo), S, K, chunk)
    with pytest.raises(ValueError, match="even fully sharded"):
        build("mars", ClusterConfig(nodes=nodes, kv_bytes_per_node=lo - 1), S, K, chunk)


@settings(max_examples=10)
@given(mars_cases())
def test_every_message_carries_the_meta_of_its_op(case):
    """The Meta each op puts on the wire (mcf_fpga/spec/meta.py, docs/mars.md): a multicast send is
    MULTICAST on its route (dst = route_id), a unicast is P2P with route_id = dst = the
    destination; src is the sending node; KV sends name (layer, unit); length is the payload
    (capped at the 16-bit field); prefill sends are PREFILL, decode ones DECODE; the two
    all-reduces of decode are PARTIAL_STATE ALL_REDUCE, MAX then SUM, to the root."""
    from mcf_fpga.spec.meta import Collective, MetaOp, ReduceOp, Stage
    cluster, S, K, chunk, alpha, placement = case
    K = max(K, 2)                     # decode all-reduces: the memory drawn for K must hold K = 2 too
    cluster = dataclasses.replace(cluster, kv_bytes_per_node=max(cluster.kv_bytes_per_node,
                                                                 min_s_node(cluster.nodes, S, chunk, K)))
    prog = build("mars", cluster, S, K, chunk, alpha, placement=placement)
    seen = set()
    for n, ops in enumerate(prog.ops):
        decode = False
        for op in ops:
            if isinstance(op, Mark):
                decode = True
            if isinstance(op, Send):
                m = op.meta
                assert m.src == n and m.length == min(op.nbytes, 2 ** 16 - 1)
                assert m.stage == (Stage.DECODE if decode else Stage.PREFILL)
                if len(op.dsts) > 1:
                    assert m.collective == Collective.MULTICAST and m.dst == m.route_id >= prog.nodes
                else:
                    assert m.collective == Collective.P2P and m.dst == m.route_id == op.dsts[0] != n
                if op.what == "kv" and not decode:
                    assert m.op == MetaOp.KV_REPLICA and tuple(m.kv_id) == (op.layer, op.unit)
                seen.add("send")
            elif isinstance(op, AllReduce):
                m = op.meta
                assert (m.op, m.collective, m.stage) == (MetaOp.PARTIAL_STATE, Collective.ALL_REDUCE, Stage.DECODE)
                assert m.reduce_op == {"max": ReduceOp.MAX, "sum": ReduceOp.SUM}[op.name]
                assert m.src == n and m.dst == op.root and m.length == min(op.nbytes, 65535)
                seen.add(op.name)
            elif isinstance(op, Drain):
                m = op.meta
                assert (m.op, m.src, m.dst, tuple(m.kv_id)) == (MetaOp.REPLICA_INVALIDATE, n, n, (op.layer, op.unit))
    assert {"max", "sum"} <= seen


@settings(max_examples=10)
@given(mars_cases())
def test_traffic_counts_every_send_over_its_links(case):
    """Program.traffic() by its definition, recounted from the ops: a unicast crosses the hops of
    its path, a multicast the links of the union of its paths (each once); prefill and decode
    sends are counted apart, all-reduces count towards decode."""
    from mcf_fpga.spec.meta import Stage
    cluster, S, K, chunk, alpha, placement = case
    prog = build("mars", cluster, S, max(K, 1), chunk, alpha, placement=placement)
    topo = prog.topo
    want = dict(prefill_bytes=0, prefill_payload=0, prefill_messages=0, decode_bytes=0, decode_messages=0)
    for n, ops in enumerate(prog.ops):
        for op in ops:
            if isinstance(op, Send):
                links = {e for d in op.dsts for e in zip(topo.path(n, d), topo.path(n, d)[1:])}
                assert op.link_bytes == op.nbytes * len(links)
                if op.meta.stage == Stage.DECODE:
                    want["decode_bytes"] += op.link_bytes
                    want["decode_messages"] += 1
                else:
                    want["prefill_bytes"] += op.link_bytes
                    want["prefill_payload"] += op.nbytes
                    want["prefill_messages"] += 1
            elif isinstance(op, AllReduce):
                want["decode_bytes"] += op.link_bytes
    t = prog.traffic()
    assert {k: getattr(t, k) for k in want} == want
    assert want["prefill_messages"] == prog.count("send") - want["decode_messages"]
