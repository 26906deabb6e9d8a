"""MARS planning: equations (5)-(16), per-node memory (eq. 10), convergence r(C) = 1 (eq. 29),
and the replica lifecycle, checked on random configurations."""
import math

import pytest
from hypothesis import given, settings, strategies as st

from mcf_fpga.spec.kvpool import State
from mcf_fpga.host import mars
from mcf_fpga.host.config import ClusterConfig, HardwareConfig
from mcf_fpga.host.executors.golden import run_golden
from mcf_fpga.host.executors.runtime import ExecError
from mcf_fpga.host.program_ops import Acquire, Drain, MessageOp, Send

from ._common import BLOCK, CFG, HW, IM, build, mars_cases, min_s_node, prompt


# ---------------------------------------------------------------- equations

@given(st.integers(1, 40), st.integers(2, 16), st.integers(1, 10 ** 7), st.integers(1, 10 ** 6),
       st.floats(0, 4))
def test_replica_factors_follow_eqs_11_15_16(C, N, S_node, M_chunk, alpha):
    fs = mars.replica_factors(C, N, S_node, M_chunk, alpha)
    assert len(fs) == C
    for c, (r_mem, r_reuse, r) in enumerate(fs, start=1):
        assert r_mem == (N * S_node) // (c * M_chunk)                          # (11)
        assert r_reuse == max(1, min(N, 1 + math.floor(alpha * (C - c))))      # (15)
        assert r == max(1, min(N, r_mem, r_reuse))                             # (16)
        assert 1 <= r <= N
    assert fs[-1][2] == 1                                                      # (29): R_C = 0
    rs = [r for _, _, r in fs]
    assert all(a >= b for a, b in zip(rs, rs[1:]))                             # progressive


@settings(max_examples=20)
@given(st.sampled_from(["micro", "tiny"]), st.integers(2, 8), st.integers(16, 2048),
       st.floats(0.25, 4.0), st.sampled_from(["ring", "mesh"]))
def test_chunk_size_is_the_smallest_that_hides_propagation(name, N, S, gamma, topo):
    from mcf_fpga.golden.config import get_config
    model = get_config(name)
    cl = ClusterConfig(nodes=N, topology=topo)
    hw = HardwareConfig.kr260(link="rgmii1g")
    p = mars.MarsParams(gamma=gamma)
    ch = mars.choose_chunk(model, cl, hw, S, 16, 8, p)
    B = ch["B_eq8"]
    cap = max(16, (S // (2 * N)) // 16 * 16)
    assert ch["B"] == min(B, cap) and ch["capped"] == (B > cap)
    assert B % 16 == 0 and B * mars.m_token(model) <= hw.kv_buffer_bytes          # (5)
    t = cl.make_topology()

    def hides(b):
        C = -(-S // b)
        r1 = mars.replica_factors(C, N, cl.kv_bytes_per_node, b * mars.m_token(model), p.alpha)[0][2]
        return mars.t_attn(model, hw, N, b, 1) >= gamma * mars.t_prop(model, hw, t, b, r1)
    if ch["hidden"]:
        assert hides(B)                                                           # (8) constraint
        assert not any(hides(b) for b in range(16, B, 16))                        # (8) minimality
    else:
        assert not any(hides(b) for b in range(16, B + 1, 16))


def test_t_attn_and_t_prop_match_eqs_6_7():
    hw = HardwareConfig(link_bytes_per_cycle=2.0, link_latency_cycles=100, macs_per_cycle=64)
    cl = ClusterConfig(nodes=4, topology="ring")
    L, H, d = CFG.num_layers, CFG.num_heads, CFG.head_dim
    assert mars.t_attn(CFG, hw, 4, 32, 3) == 4 * L * H * d * 32 * 96 / (4 * 128)
    # r = 3 on a ring of 4: the two neighbours, tree of 2 links, depth 1
    assert mars.t_prop(CFG, hw, cl.make_topology(), 32, 3) == 32 * mars.m_token(CFG) * 2 / 2.0 + 100
    assert mars.t_prop(CFG, hw, cl.make_topology(), 32, 1) == 0


# ---------------------------------------------------------------- plans on random configs

@settings(max_examples=40)
@given(mars_cases())
def test_memory_bound_convergence_and_lifecycle(case):
    cluster, S, K, chunk, alpha, placement = case
    prog = build("mars", cluster, S, K, chunk, alpha, placement=placement)
    plan = prog.stats["plan"]
    # eq. (10) on the plan, per node and step
    assert all(m <= cluster.kv_bytes_per_node for step in plan.step_mem for m in step)
    # the KV pools (budget S_node) never overflow while the program runs; layout and lifecycle
    res = run_golden(prog, None, [0] * S, dry=True)
    assert all(p * prog.slot_bytes <= cluster.kv_bytes_per_node for p in res.peak_slots)
    # eq. (29): at prefill_done every node holds exactly its owner units, all in state OWNER
    assert res.layout == prog.expected_layout()
    assert all(st == "OWNER" for lay in res.layout_states.values() for st in lay.values())
    assert all(not staged and not held for staged, held in res.leftovers)
    # lifecycle: a replica is freed only when no chunk holds it
    for events in res.events:
        readers = {}
        for _idx, kind, kv, state, nreaders, freed in events:
            if kind in ("acquire", "release"):
                readers[kv] = nreaders
            if freed:
                assert kind in ("release", "drain") and nreaders == 0
                assert readers.get(kv, 0) == 0 or kind == "release"
    # the replica factor of Fig. 4b ends at 1 and never exceeds N
    assert len(plan.step_replica) == plan.C + 1 and plan.step_replica[-1] == 1.0
    assert plan.step_mem[-1] == plan.owner_mem[-1]
    assert all(1.0 <= r <= cluster.nodes for r in plan.step_replica)


def test_draining_replica_stays_readable_until_its_last_reader_releases():
    cluster = ClusterConfig(nodes=4, kv_bytes_per_node=10 ** 6)
    prog = build("mars", cluster, 96, 0, 8, alpha=1.0)
    res = run_golden(prog, IM, prompt(96))
    seen = 0
    for events in res.events:
        draining = {}
        for idx, kind, kv, state, nreaders, freed in events:
            if kind == "drain" and state == State.REPLICA_DRAINING.name:
                assert nreaders >= 1 and not freed          # in-flight reader keeps it
                draining[kv] = idx
            if kind == "release" and kv in draining:
                assert freed                                # last release frees it
                del draining[kv]
                seen += 1
        assert not draining
    assert seen > 0
    assert res.layout == prog.expected_layout()


def test_a_replica_read_after_it_is_freed_is_refused():
    """The executor's lifecycle checks can fail: move a drain before its chunk's acquire."""
    cluster = ClusterConfig(nodes=4, kv_bytes_per_node=10 ** 6)
    prog = build("mars", cluster, 96, 0, 8, alpha=1.0)
    for n, ops in enumerate(prog.ops):
        for i, op in enumerate(ops):
            if isinstance(op, Drain) and isinstance(ops[i - 1], Acquire):
                ops[i - 1], ops[i] = op, ops[i - 1]
                with pytest.raises(ExecError, match="KV pool answered UNKNOWN"):
                    run_golden(prog, None, [0] * 96, dry=True)
                return
    raise AssertionError("no drain found")


def test_replicas_go_to_the_nearest_future_consumers():
    cluster = ClusterConfig(nodes=8, topology="ring", kv_bytes_per_node=10 ** 7)
    prog = build("mars", cluster, 8 * 40, 0, 8, alpha=0.1)
    plan = prog.stats["plan"]
    topo = prog.topo
    for c, hs in enumerate(plan.holders):
        owner = c % 8
        got = [h for h, _, _ in hs]
        d = [len(topo.path(owner, h)) - 1 for h in got]
        assert d == sorted(d)
        if got:   # nobody closer was left out (all future consumers on a ring of round-robin chunks)
            left = [n for n in range(8) if n != owner and n not in got and any(k > c and k % 8 == n for k in range(plan.C))]
            assert all(len(topo.path(owner, n)) - 1 >= max(d) for n in left)


def wire_metas(prog) -> list:
    """The Meta header of every op that has one (sends, all-reduces, drains)."""
    return [op.meta for ops in prog.ops for op in ops if isinstance(op, (MessageOp, Drain)) and op.meta is not None]


def test_multicast_routes_fit_the_route_table_and_meta_packs():
    from mcf_fpga.golden.header import pack_header, unpack_header
    cluster = ClusterConfig(nodes=8, topology="mesh", kv_bytes_per_node=10 ** 7)
    prog = build("mars", cluster, 8 * 24, 2, 8, alpha=1.0)
    assert 0 < prog.stats["routes"] <= cluster.route_table_size
    metas = wire_metas(prog)
    assert metas
    for m in metas:
        assert unpack_header(pack_header(m, cluster.meta), cluster.meta) == m
    # a multicast send's depth on a 2x4 mesh is at most the diameter
    assert max(op.depth for ops in prog.ops for op in ops if isinstance(op, Send)) <= 4


# ---------------------------------------------------------------- bad input, refused before any work

def test_prompt_that_cannot_fit_even_sharded_is_refused():
    lo = min_s_node(4, 64, 8)
    build("mars", ClusterConfig(nodes=4, kv_bytes_per_node=lo), 64, 0, 8)
    for sched in ("mars", "ring", "zigzag", "pd"):
        with pytest.raises(ValueError, match=r"kv_bytes_per_node=\d+"):
            build(sched, ClusterConfig(nodes=4, kv_bytes_per_node=lo // 4), 64, 0, 8)


def test_chunk_beyond_the_buffer_is_refused():
    hw = HW.replace(kv_buffer_bytes=16 * mars.m_token(CFG))
    build("mars", ClusterConfig(nodes=2), 64, 0, 16, hw=hw)
    for sched in ("mars", "ring", "zigzag", "pd"):
        with pytest.raises(ValueError, match="kv_buffer_bytes=.*eq. 5"):
            build(sched, ClusterConfig(nodes=2), 64, 0, 24, hw=hw)
    with pytest.raises(ValueError, match="multiple of the KV merge block"):
        build("mars", ClusterConfig(nodes=2), 64, 0, 12)


def test_node_count_beyond_the_route_table_is_refused():
    with pytest.raises(ValueError, match="nodes=9.*route_table_size=8"):
        ClusterConfig(nodes=9, route_table_size=8)
    # more replica sets than entries: the table is never exceeded, extra sets go as unicasts
    big = build("mars", ClusterConfig(nodes=8, kv_bytes_per_node=10 ** 7), 8 * 32, 2, 8, alpha=1.0)
    small = build("mars", ClusterConfig(nodes=8, route_table_size=8, kv_bytes_per_node=10 ** 7), 8 * 32, 2, 8,
                  alpha=1.0)
    assert small.stats["routes"] == 8 < big.stats["routes"] and small.stats["route_fallbacks"] > 0
    assert all(m.route_id < 8 for m in wire_metas(small))
    assert small.traffic().prefill_bytes > big.traffic().prefill_bytes      # unicasts cost more links
    res = run_golden(small, None, [0] * (8 * 32), dry=True)
    assert res.layout == small.expected_layout()


def test_config_validation_names_field_and_limit():
    with pytest.raises(ValueError, match="ClusterConfig.nodes=1"):
        ClusterConfig(nodes=1)
    with pytest.raises(ValueError, match="ClusterConfig.topology='torus'"):
        ClusterConfig(topology="torus")
    with pytest.raises(ValueError, match="kv_bytes_per_node"):
        ClusterConfig(kv_bytes_per_node=0)
    with pytest.raises(ValueError, match="route_table_size=300, expected 1..256"):
        ClusterConfig(route_table_size=300)
    with pytest.raises(ValueError, match="HardwareConfig.macs_per_cycle"):
        HardwareConfig(macs_per_cycle=0)
    with pytest.raises(ValueError, match="HardwareConfig.link"):
        HardwareConfig.kr260(link="wifi")
    with pytest.raises(ValueError, match="MarsParams.alpha"):
        mars.MarsParams(alpha=-1)
    sfp, rg = HardwareConfig.kr260(), HardwareConfig.kr260(link="rgmii1g")
    assert sfp.clock_hz == 200e6 and sfp.link_bytes_per_cycle == 6.25 and rg.link_bytes_per_cycle == 0.625


@settings(max_examples=15)
@given(mars_cases(max_nodes=9))
def test_route_tables_deliver_each_multicast_exactly_to_its_destinations(case):
    """Walk every multicast send through the NIC route tables the program carries."""
    cluster, S, K, chunk, alpha, placement = case
    prog = build("mars", cluster, S, K, chunk, alpha, placement=placement)
    topo, tables = prog.topo, prog.routes.tables
    for src, ops in enumerate(prog.ops):
        for op in ops:
            if not isinstance(op, Send) or len(op.dsts) < 2:
                continue
            rid = op.meta.route_id
            assert op.meta.dst == rid
            delivered, frontier, links = set(), [src], 0
            while frontier:
                node = frontier.pop()
                mask = tables[node][rid].mask
                if mask & 1:
                    delivered.add(node)
                for port in range(1, topo.n_net + 1):
                    if mask >> port & 1:
                        frontier.append(topo.neighbor(node, port))
                        links += 1
            assert delivered == set(op.dsts)
            assert op.link_bytes == links * op.nbytes


@settings(max_examples=15)
@given(mars_cases())
def test_executor_pool_peak_never_exceeds_the_plans_memory(case):
    """Two independent accountings: the plan's per-step occupancy bounds the pools' real peak."""
    cluster, S, K, chunk, alpha, placement = case
    prog = build("mars", cluster, S, K, chunk, alpha, placement=placement)
    plan = prog.stats["plan"]
    res = run_golden(prog, None, [0] * S, dry=True)
    for n in range(prog.nodes):
        assert res.peak_slots[n] * prog.slot_bytes <= max(step[n] for step in plan.step_mem)


# ---------------------------------------------------------------- placement

@given(st.integers(1, 64), st.integers(2, 16), st.sampled_from(mars.PLACEMENTS))
def test_every_placement_gives_each_node_at_most_its_share(C, N, kind):
    o = mars.placement(C, N, kind)
    assert len(o) == C and all(0 <= n < N for n in o)
    assert max(o.count(n) for n in range(N)) <= -(-C // N)


@given(st.integers(1, 8), st.integers(2, 16))
def test_snake_and_lpt_balance_causal_work_over_whole_round_pairs(pairs, N):
    """Chunk c attends to c + 1 chunks. In rounds 2p, 2p+1 the snake gives node n chunks 2pN + n
    and 2pN + 2N-1-n: 4pN + 2N + 1 together, the same for every node; summed over the pairs,
    2N P(P-1) + P(2N+1). LPT's spread is at most one chunk."""
    C = 2 * N * pairs
    o = mars.placement(C, N, "snake")
    loads = [sum(c + 1 for c in range(C) if o[c] == n) for n in range(N)]
    assert loads == [2 * N * pairs * (pairs - 1) + pairs * (2 * N + 1)] * N
    o = mars.placement(C, N, "lpt")
    loads = [sum(c + 1 for c in range(C) if o[c] == n) for n in range(N)]
    assert max(loads) - min(loads) <= C
    rr = mars.placement(C, N, "round_robin")
    rr_loads = [sum(c + 1 for c in range(C) if rr[c] == n) for n in range(N)]
    assert max(rr_loads) - min(rr_loads) == (N - 1) * 2 * pairs      # one more per round per position


def test_unknown_placement_is_refused():
    with pytest.raises(ValueError, match="MarsParams.placement"):
        mars.MarsParams(placement="random")
