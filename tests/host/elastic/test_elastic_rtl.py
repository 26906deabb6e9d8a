"""Elastic decode (KernelFlume) on the simulated cluster: weightless A nodes join the decode
group mid-generation by route updates published at token boundaries (NIC shadow bank + flip);
the tokens equal golden's IntModel on the golden, torch.distributed and RTL executors, and no
packet is ever dropped by a half-updated route."""
import pytest
import torch

from mcf_fpga.golden.config import get_config
from mcf_fpga.golden.int_model import IntModel, quantize_model
from mcf_fpga.golden.model import random_weights
from mcf_fpga.host.config import ClusterConfig
from mcf_fpga.host.elastic.program import elastic_program
from mcf_fpga.host.executors import run
from mcf_fpga.host.scenario import sim_hardware
from mcf_fpga.host.program_ops import Append, DecodeAttend, Mark, Recv, Send

from tests.host._common import assert_one_route_version_per_step

torch.set_num_threads(1)
CFG = get_config("micro").replace(num_layers=1)
IM = IntModel(quantize_model(random_weights(CFG, seed=9), block=16))


def reference(prompt, k):
    return IM.forward(torch.tensor(prompt)), IM.generate(prompt, k)


def test_two_scale_ups_on_rtl_equal_golden():
    K = 22
    prog = elastic_program(CFG, ClusterConfig(nodes=4, kv_bytes_per_node=30000), sim_hardware(), 40, K,
                           prefill_nodes=2, scale_ups={2: 2, 9: 3}, chunk=32)
    prompt = torch.randint(0, 256, (40,), generator=torch.Generator().manual_seed(4)).tolist()
    lg, toks = reference(prompt, K)
    assert prog.stats["decode_groups"][0] == {0: (0, 1)} and prog.stats["decode_groups"][-1] == {0: (0, 1, 2, 3)}
    for backend in ("golden", "dist"):
        assert run(prog, IM, prompt, backend=backend).tokens == toks, backend
    r = run(prog, IM, prompt, backend="rtl")
    assert torch.equal(r.logits, lg) and r.tokens == toks
    assert [p["step"] for p in r.publishes] == [2, 9]
    assert [p["group"] for p in r.publishes] == [(0, 1, 2), (0, 1, 2, 3)]
    assert all(p["cycles"] > 0 for p in r.publishes)
    for n, c in r.nic_counters.items():              # nothing dropped: no stale or partial route
        assert set(c) == {"rx_frames"}, (n, c)


def test_bad_scale_up_refused():
    cl = ClusterConfig(nodes=4, kv_bytes_per_node=30000)
    with pytest.raises(ValueError, match="A-node pool"):
        elastic_program(CFG, cl, sim_hardware(), 40, 8, prefill_nodes=2, scale_ups={2: 1}, chunk=32)
    with pytest.raises(ValueError, match="decode steps"):
        elastic_program(CFG, cl, sim_hardware(), 40, 8, prefill_nodes=2, scale_ups={7: 2}, chunk=32)
    with pytest.raises(ValueError, match="prefill_nodes"):
        elastic_program(CFG, cl, sim_hardware(), 40, 8, prefill_nodes=4, scale_ups={}, chunk=32)


def test_scale_ups_and_scale_down_two_requests():
    """Request A (40-token prompt, 14 tokens) and B (24, 30) prefill on nodes 0-1 and decode in
    rounds. A's new blocks go to node 2 from round 1, B's to node 3 from round 3; A finishes after
    round 12: its holders free its ranges and node 2, holding nothing else, leaves the table at
    round 13 (scale-down); node 2 joins B as its tail at round 16 (a released node is reused)."""
    lens, news = (40, 24), (14, 30)
    prog = elastic_program(CFG, ClusterConfig(nodes=4, kv_bytes_per_node=30000), sim_hardware(), lens, news,
                           prefill_nodes=2, scale_ups={1: (0, 2), 3: (1, 3), 16: (1, 2)}, chunk=32)
    gen = torch.Generator().manual_seed(11)
    prompts = [torch.randint(0, 256, (n,), generator=gen).tolist() for n in lens]
    refs = [reference(p, k) for p, k in zip(prompts, news)]
    hist = prog.stats["decode_groups"]
    assert hist[12] == {0: (0, 1, 2), 1: (0, 1, 3)} and hist[13] == {1: (0, 1, 3)}
    assert hist[16] == {1: (0, 1, 3, 2)} and prog.stats["scale_downs"] == {13: [2]}
    # the blocks a scale-up tail received: A's block 3 (positions 48..) on node 2, B's 2 and 3
    owners = {(op.req, op.rows[0] // 16): n for n, ops in enumerate(prog.ops) for op in ops if isinstance(op, Append)}
    assert owners[(0, 3)] == 2 and owners[(1, 2)] == 3 and owners[(1, 3)] == 2
    for backend in ("golden", "dist"):
        r = run(prog, IM, prompts, backend=backend)
        assert r.req_tokens == [t for _lg, t in refs], backend
        assert_one_route_version_per_step(r.step_versions, prog)
        if backend == "golden":      # A's ranges are gone from every pool, B's prefill units remain
            left = {prog.req_of(u) for n in r.layout_end for (_l, u) in r.layout_end[n]}
            assert left == {1} and not r.layout_end[2] and not r.layout_end[3]
    r = run(prog, IM, prompts, backend="rtl")
    assert r.req_tokens == [t for _lg, t in refs]
    assert all(torch.equal(lg, ref) for lg, (ref, _t) in zip(r.req_logits, refs))
    assert_one_route_version_per_step(r.step_versions, prog)
    assert [(p["step"], p["groups"]) for p in r.publishes] == [
        (1, {0: (0, 1, 2), 1: (0, 1)}), (3, {0: (0, 1, 2), 1: (0, 1, 3)}), (13, {1: (0, 1, 3)}),
        (16, {1: (0, 1, 3, 2)})]
    (bank,) = set(r.publishes[0]["bank_before"].values())   # configure() leaves one active bank
    for p in r.publishes:                 # the hardware bank only flips at a publish, on every node
        assert set(p["bank_before"].values()) == {bank} and set(p["bank_after"].values()) == {1 - bank}
        bank = 1 - bank
    for n, c in r.nic_counters.items():   # nothing dropped: no stale or half-updated route
        assert set(c) == {"rx_frames"}, (n, c)


def test_policy_driven_program_on_rtl():
    """The scaling policy picks the steps (the case derived by hand in
    test_elastic_scaling.test_policy_plan_for_the_cluster_hand_derived): 3 nodes, N_A = 2,
    scale-ups A -> node 2 (round 9) and B -> node 2 (round 47, the node reused after its
    scale-down at round 30), capacity exhausted at round 22 so B waits (stalls), never dropped.
    Tokens equal IntModel on golden and RTL."""
    from mcf_fpga.host.elastic.plan import policy_program
    from mcf_fpga.host.elastic.scaling import ScalingParams, kv_bytes_per_token
    bpt = kv_bytes_per_token(CFG)
    p = ScalingParams(c_kv_cap=56 * bpt, bw=48 * bpt, t_a_max=1.0, bytes_per_token=bpt, beta_mem=1.0,
                      beta_slo=1.0, t_step=1.0, t_prewarm=3.0, gamma=0.8)
    lens, news = (40, 24), (30, 52)
    prog, plan = policy_program(CFG, ClusterConfig(nodes=3, kv_bytes_per_node=30000), sim_hardware(), lens, news,
                                p, chunk=32)
    assert prog.stats["scale_ups"] == {9: [(0, 2)], 47: [(1, 2)]} and prog.stats["scale_downs"] == {30: [2]}
    gen = torch.Generator().manual_seed(12)
    prompts = [torch.randint(0, 256, (n,), generator=gen).tolist() for n in lens]
    toks = [IM.generate(pr, k) for pr, k in zip(prompts, news)]
    r = run(prog, IM, prompts, backend="golden")
    assert r.req_tokens == toks
    assert_one_route_version_per_step(r.step_versions, prog)
    r = run(prog, IM, prompts, backend="rtl")
    assert r.req_tokens == toks
    assert_one_route_version_per_step(r.step_versions, prog)
    assert [p_["step"] for p_ in r.publishes] == [9, 30, 47]
    for n, c in r.nic_counters.items():
        assert set(c) == {"rx_frames"}, (n, c)


def test_query_first_changes_timing_only():
    """Query-first dispatch on the RTL: the leader sends Q before projecting K/V; the tokens and
    logits are unchanged (and equal IntModel), only the cycle count may differ."""
    K = 8
    prog = elastic_program(CFG, ClusterConfig(nodes=4, kv_bytes_per_node=30000), sim_hardware(), 40, K,
                           prefill_nodes=2, scale_ups={2: 2}, chunk=32)
    prompt = torch.randint(0, 256, (40,), generator=torch.Generator().manual_seed(5)).tolist()
    lg, toks = reference(prompt, K)
    base = run(prog, IM, prompt, backend="rtl")
    qf = run(prog, IM, prompt, backend="rtl", query_first=True)
    for r in (base, qf):
        assert torch.equal(r.logits, lg) and r.tokens == toks
    # the leader's queue really changed (same instructions, Q send moved ahead of W_K/W_V)
    lead = prog.leader
    a, b = [i for _o, i in base.issued[lead]], [i for _o, i in qf.issued[lead]]
    assert a != b and sorted(map(str, a)) == sorted(map(str, b))


def test_w_node_and_microbatch_pipelining_change_timing_only():
    """A pure W node (node 0: no KV, left out of the max all-reduce, adds nothing to the merge)
    and the requests of each round pipelined as microbatches (the W node's merge/W_O/FFN of one
    overlaps the A nodes' attention of the other): tokens equal IntModel on golden, dist and RTL,
    with and without pipelining; the programs hold the same ops in another order."""
    lens, news = (40, 24), (5, 5)
    gen = torch.Generator().manual_seed(11)
    prompts = [torch.randint(0, 256, (n,), generator=gen).tolist() for n in lens]
    toks = [IM.generate(p, k) for p, k in zip(prompts, news)]
    progs = [elastic_program(CFG, ClusterConfig(nodes=4, kv_bytes_per_node=30000), sim_hardware(), lens, news,
                             prefill_nodes=[[1, 2], [2, 1]], scale_ups={2: (0, 3)}, chunk=32, w_node=0,
                             pipeline=pipe) for pipe in (False, True)]
    serial, piped = progs
    assert serial.leader == 0 and not any(isinstance(op, (DecodeAttend, Append)) for op in serial.ops[0])
    key = lambda op: (op.kind, op.req, *(repr(getattr(op, f, None)) for f in ("layer", "rows", "name", "what")))  # noqa: E731
    for n in range(4):
        assert sorted(map(key, serial.ops[n])) == sorted(map(key, piped.ops[n]))
    assert [key(o) for o in serial.ops[0]] != [key(o) for o in piped.ops[0]]
    for prog in progs:
        for backend in ("golden", "dist", "rtl"):
            r = run(prog, IM, prompts, backend=backend)
            assert r.req_tokens == toks, backend
            assert_one_route_version_per_step(r.step_versions, prog)
        assert all(set(c) == {"rx_frames"} for c in r.nic_counters.values())


def test_mars_prefill_hands_over_to_elastic_decode():
    """MARS prefill (chunk 16, alpha 0.5) of two requests on nodes 0-1 of 4 hands its owner-only
    layout to elastic decode: chunk c of each request is owned by node c mod 2 (round robin) and
    those are the A nodes' initial ranges; replicas and prefetches really happen during prefill and
    are all gone at prefill_done. Then A's tail moves to node 2 (round 1), B's to node 3
    (round 3); A finishes after round 18, node 2 leaves (scale-down, round 19) and joins B again
    at round 22. Tokens and prompt logits equal IntModel for both requests on golden and RTL."""
    from mcf_fpga.host.mars import MarsParams
    lens, news = (64, 40), (20, 30)
    prog = elastic_program(CFG, ClusterConfig(nodes=4, kv_bytes_per_node=30000), sim_hardware(), lens, news,
                           prefill_nodes=2, scale_ups={1: (0, 2), 3: (1, 3), 22: (1, 2)}, chunk=16,
                           prefill="mars", mars=MarsParams(alpha=0.5))
    # A: 4 chunks (units 0-3), B: 3 chunks (units 4-6), round robin on nodes 0, 1
    assert prog.units == [(0, 16), (16, 32), (32, 48), (48, 64), (0, 16), (16, 32), (32, 40)]
    assert prog.owner == [0, 1, 0, 1, 0, 1, 0] and prog.unit_req == (0, 0, 0, 0, 1, 1, 1)
    plans = prog.stats["mars_plans"]
    assert sum(len(h) for p in plans for h in p.holders) > 0 and sum(len(p.fetches) for p in plans) > 0
    # replicas were sent and prefetches staged in the program (not just planned)
    assert prog.count("drain") > 0
    assert any(isinstance(op, Recv) and op.install == "stage" for ops in prog.ops for op in ops)
    hist = prog.stats["decode_groups"]
    assert hist[0] == {0: (0, 1), 1: (0, 1)} and hist[18] == {0: (0, 1, 2), 1: (0, 1, 3)}
    assert hist[19] == {1: (0, 1, 3)} and hist[22] == {1: (0, 1, 3, 2)}
    assert prog.stats["scale_downs"] == {19: [2]}
    # the first decode token of each request goes to the owner of its last prompt chunk (its
    # initial tail), later blocks to the scale-up tails
    owners = {(op.req, op.rows[0] // 16): n for n, ops in enumerate(prog.ops) for op in ops if isinstance(op, Append)}
    assert owners[(0, 4)] == 1 and owners[(0, 5)] == 2
    assert owners[(1, 2)] == 0 and owners[(1, 3)] == 3 and owners[(1, 4)] == 2
    gen = torch.Generator().manual_seed(13)
    prompts = [torch.randint(0, 256, (n,), generator=gen).tolist() for n in lens]
    refs = [reference(p, k) for p, k in zip(prompts, news)]
    for backend in ("golden", "rtl"):
        r = run(prog, IM, prompts, backend=backend)
        assert r.req_tokens == [t for _lg, t in refs], backend
        assert all(torch.equal(lg, ref) for lg, (ref, _t) in zip(r.req_logits, refs)), backend
        assert r.layout == prog.expected_layout(), backend        # owner-only at prefill_done
        assert all(s == "OWNER" for lay in r.layout_states.values() for s in lay.values()), backend
        assert_one_route_version_per_step(r.step_versions, prog)
    assert [(p["step"], p["groups"]) for p in r.publishes] == [
        (1, {0: (0, 1, 2), 1: (0, 1)}), (3, {0: (0, 1, 2), 1: (0, 1, 3)}), (19, {1: (0, 1, 3)}),
        (22, {1: (0, 1, 3, 2)})]
    for n, c in r.nic_counters.items():   # nothing dropped: no stale or half-updated route
        assert set(c) == {"rx_frames"}, (n, c)


def test_mars_prefill_on_three_of_four_ring_nodes_on_rtl():
    """MARS prefill of an 80-token prompt (5 chunks of 16, alpha 0.5) on nodes 0-2 of a 4-node
    ring: chunk 0 is replicated to nodes 1 and 2 (a multicast), some history is prefetched, and a
    prefetch from node 2 to node 0 crosses node 3 (the ring's short way, 2 -> 3 -> 0), an A-pool
    node that only forwards during prefill. Chunk c is owned by node c mod 3; node 1 (last chunk)
    is the first tail, node 3 joins as the tail at round 2. Tokens and prompt logits equal
    IntModel on golden and RTL; the layout at prefill_done is owner-only."""
    from mcf_fpga.host.mars import MarsParams
    K = 20
    prog = elastic_program(CFG, ClusterConfig(nodes=4, kv_bytes_per_node=30000), sim_hardware(), 80, K,
                           prefill_nodes=3, scale_ups={2: 3}, chunk=16, prefill="mars", mars=MarsParams(alpha=0.5))
    assert prog.owner == [0, 1, 2, 0, 1] and prog.leader == 1
    mp = prog.stats["mars_plans"][0]
    assert {h for h, _kf, _kl in mp.holders[0]} == {1, 2} and mp.fetches
    done = [next(i for i, op in enumerate(ops) if isinstance(op, Mark)) for ops in prog.ops]
    crossing = [(n, op.dsts) for n, ops in enumerate(prog.ops) for op in ops[:done[n]]
                if isinstance(op, Send) and any(3 in prog.topo.path(n, d)[1:-1] for d in op.dsts)]
    assert crossing and not prog.ops[3][:done[3]]          # node 3 does nothing in prefill but forward
    owners = {op.rows[0] // 16: n for n, ops in enumerate(prog.ops) for op in ops if isinstance(op, Append)}
    assert owners == {5: 1, 6: 3}
    prompt = torch.randint(0, 256, (80,), generator=torch.Generator().manual_seed(6)).tolist()
    lg, toks = reference(prompt, K)
    for backend in ("golden", "rtl"):
        r = run(prog, IM, prompt, backend=backend)
        assert torch.equal(r.logits, lg) and r.tokens == toks, backend
        assert r.layout == prog.expected_layout(), backend
        assert_one_route_version_per_step(r.step_versions, prog)
    assert [(p["step"], p["group"]) for p in r.publishes] == [(2, (0, 1, 2, 3))]
    for n, c in r.nic_counters.items():
        assert set(c) == {"rx_frames"}, (n, c)


def test_tp_group_on_an_elastic_pipelined_program():
    """A tensor-parallel W group (host.tp) led by the pure W node 3, with nodes 0, 1 (prefill, A
    nodes) and 2 (a scale-up tail from round 2) holding weight slices too; two requests as
    pipelined microbatches: tokens equal IntModel on golden and RTL, every step under one routing
    version, nothing dropped."""
    lens, news = (40, 30), (5, 4)
    prog = elastic_program(CFG, ClusterConfig(nodes=4, kv_bytes_per_node=30000), sim_hardware(), lens, news,
                           prefill_nodes=2, scale_ups={2: (0, 2)}, chunk=16, w_node=3, pipeline=True,
                           w_group=(3, 0, 1, 2))
    assert prog.w_group == (3, 0, 1, 2) and prog.leader == 3
    gen = torch.Generator().manual_seed(12)
    prompts = [torch.randint(0, 256, (n,), generator=gen).tolist() for n in lens]
    refs = [IM.generate(p, k) for p, k in zip(prompts, news)]
    for backend in ("golden", "rtl"):
        r = run(prog, IM, prompts, backend=backend)
        assert r.req_tokens == refs, backend
        assert_one_route_version_per_step(r.step_versions, prog)
    for n, c in r.nic_counters.items():
        assert set(c) == {"rx_frames"}, (n, c)
