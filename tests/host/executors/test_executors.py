"""Executors: every schedule's program gives IntModel's outputs and tokens bit for bit on the
golden executor, and the torch.distributed executor (real gloo send/recv, one rank per node)
agrees with it on outputs, tokens and KV layout."""
import dataclasses

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from mcf_fpga.host import mars
from mcf_fpga.host.config import ClusterConfig
from mcf_fpga.host.executors.dist import run_dist
from mcf_fpga.host.executors.golden import run_golden
from mcf_fpga.host.executors.runtime import ExecError
from mcf_fpga.host.program_ops import DecodeFinish, DecodeLogits, DecodePick, DecodeProject, Recv

from tests.host._common import BLOCK, CFG, IM, SCHEDULES, build, prompt

_REF = {}


def reference(S, K, seed):
    key = (S, K, seed)
    if key not in _REF:
        p = prompt(S, seed)
        _REF[key] = (p, IM.forward(p), IM.generate(p, K))
    return _REF[key]


@st.composite
def cases(draw, max_nodes=5):
    sched = draw(st.sampled_from(SCHEDULES))
    nodes = draw(st.integers(2, max_nodes))
    topo = draw(st.sampled_from(["ring", "mesh"]))
    chunk = BLOCK * draw(st.integers(1, 3))
    S = draw(st.integers(1, 56))
    K = draw(st.integers(0, 3))
    alpha = draw(st.floats(0.0, 2.0))
    seed = draw(st.integers(0, 3))
    placement = draw(st.sampled_from(mars.PLACEMENTS))
    return (sched, ClusterConfig(nodes=nodes, topology=topo, kv_bytes_per_node=1 << 20), S, K, chunk, alpha, seed,
            placement)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_golden_executor_equals_int_model(case):
    sched, cluster, S, K, chunk, alpha, seed, placement = case
    p, logits, tokens = reference(S, K, seed)
    prog = build(sched, cluster, S, K, chunk, alpha, placement=placement)
    res = run_golden(prog, IM, p)
    assert torch.equal(res.logits, logits)
    assert res.tokens == tokens
    assert res.layout == prog.expected_layout()
    assert all(not a and not b for a, b in res.leftovers)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_last_row_logits_equal_the_int_models_last_row(case):
    """Program.logits="last": the head runs on the last prompt row only; its logits are IntModel's
    last row bit for bit, the tokens and the layout are the full head's."""
    sched, cluster, S, K, chunk, alpha, seed, placement = case
    p, logits, tokens = reference(S, K, seed)
    prog = dataclasses.replace(build(sched, cluster, S, K, chunk, alpha, placement=placement), logits="last")
    res = run_golden(prog, IM, p)
    assert torch.equal(res.logits, logits[-1:])
    assert res.tokens == tokens
    assert res.layout == prog.expected_layout()
    assert all(not a and not b for a, b in res.leftovers)


def test_program_logits_refused():
    prog = build("mars", ClusterConfig(nodes=2, topology="ring", kv_bytes_per_node=1 << 20), 20, 1, BLOCK)
    with pytest.raises(ValueError, match=r"Program.logits='first': expected one of all, last"):
        dataclasses.replace(prog, logits="first")


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(max_nodes=4))
def test_dist_executor_agrees_with_golden(case):
    sched, cluster, S, K, chunk, alpha, seed, placement = case
    p, logits, tokens = reference(S, K, seed)
    prog = build(sched, cluster, S, K, chunk, alpha, placement=placement)
    g = run_golden(prog, IM, p)
    d = run_dist(prog, IM, p, timeout=30)
    assert torch.equal(d.logits, g.logits) and torch.equal(d.logits, logits)
    assert d.tokens == g.tokens == tokens
    assert d.layout == g.layout == prog.expected_layout()
    assert d.layout_states == g.layout_states
    assert d.layout_end == g.layout_end
    assert d.peak_slots == g.peak_slots


def test_every_schedule_on_four_dist_ranks():
    """One fixed 4-rank case per schedule (covers ring forwarding, PD hand-off, mesh routes)."""
    p, logits, tokens = reference(48, 3, 7)
    for sched in SCHEDULES:
        prog = build(sched, ClusterConfig(nodes=4, topology="mesh", kv_bytes_per_node=1 << 20), 48, 3, 16)
        d = run_dist(prog, IM, p, timeout=30)
        assert torch.equal(d.logits, logits), sched
        assert d.tokens == tokens, sched
        assert d.layout == prog.expected_layout(), sched


def test_a_failing_rank_fails_the_run_without_hanging():
    p, _, _ = reference(32, 2, 1)
    prog = build("ring", ClusterConfig(nodes=3, kv_bytes_per_node=1 << 20), 32, 2, 16)
    # rank 1 waits for a message nobody sends: the others finish or time out, the parent reports
    ops = prog.ops[1]
    i = next(i for i, op in enumerate(ops) if isinstance(op, Recv))
    ops[i] = dataclasses.replace(ops[i], msg=10 ** 6)
    with pytest.raises(ExecError):
        run_dist(prog, IM, p, timeout=3)
    with pytest.raises(ExecError, match="deadlock"):
        run_golden(prog, IM, p)


def test_prompt_length_must_match_the_program():
    prog = build("mars", ClusterConfig(nodes=2), 16, 0, 8)
    with pytest.raises(ValueError, match="compiled for 16"):
        run_golden(prog, IM, prompt(17))


def test_run_dispatches_by_backend_name():
    from mcf_fpga.host.executors import run
    prog = build("mars", ClusterConfig(nodes=2), 16, 2, 8)
    p, _, tokens = reference(16, 2, 0)
    assert run(prog, IM, p, backend="golden").tokens == tokens
    with pytest.raises(ValueError, match="backend='fpga'"):
        run(prog, IM, p, backend="fpga")
    with pytest.raises(OSError, match="UIO"):            # no node board on this machine
        run(prog, IM, p, backend="board")


# ---------------------------------------------------------------- tensor-parallel weight group (host.tp)

def test_tp_stages_gather_to_int_model():
    """Every W node's slice of the projection, the attention output, W_O, FFN and the head,
    gathered, equals IntModel's whole computation bit for bit (W = 2 and 4), and the token is
    IntModel's argmax with its tie rule (lowest index)."""
    from mcf_fpga.golden import numerics as nx
    from mcf_fpga.host.executors import tp_stages as tps
    from mcf_fpga.host.tp import WeightSplit
    g = torch.Generator().manual_seed(11)
    h = torch.randint(-(1 << 16), 1 << 16, (1, CFG.hidden_size), generator=g, dtype=torch.int64)
    H, d = CFG.num_heads, CFG.head_dim
    merged = nx.Partial(torch.randint(-3000, 0, (H, 1), generator=g, dtype=torch.int64),
                        torch.randint(1 << 15, 1 << 18, (H, 1), generator=g, dtype=torch.int64),
                        torch.randint(-(1 << 30), 1 << 30, (H, 1, d), generator=g, dtype=torch.int64))
    for W in (2, 4):
        sp = WeightSplit(CFG, tuple(range(W)), 16, IM.qm.kv_bits)
        for layer in range(CFG.num_layers):
            q, k, v = IM.project_qkv(layer, h, 21)
            parts = [tps.project_part(IM, layer, h, 21, sp, j) for j in range(W)]
            assert torch.equal(torch.cat([p[0][0] for p in parts]), q[0])
            assert torch.equal(torch.cat([p[0][1] for p in parts]), q[1])
            for i, ref in ((1, k), (2, v)):
                got = [p[i] for p in parts if p[i] is not None]
                assert torch.equal(torch.cat([x[0] for x in got]), ref[0])
                assert torch.equal(torch.cat([x[1] for x in got]), ref[1])
            a = torch.cat([tps.attn_part(tps.merged_rows(merged, sp, j)) for j in range(W)], 1)
            h1 = torch.cat([tps.o_part(IM, layer, h, a, sp, j) for j in range(W)], 1)
            s = torch.cat([tps.ffn_part(IM, layer, h1, sp, j) for j in range(W)], 1)
            h2 = torch.cat([tps.down_part(IM, layer, h1, s, sp, j) for j in range(W)], 1)
            assert torch.equal(h2, IM.post_attention(layer, h, nx.finalize(merged)))
        lg = IM.logits(h)[-1]
        best = [tps.best_part(IM, h, sp, j) for j in range(W)]
        assert tps.pick(best) == int(torch.argmax(lg)) and max(v for v, _ in best) == int(lg.max())
    assert tps.pick([(5, 10), (7, 40), (7, 20)]) == 20 and tps.pick([(7, 3), (-1, 0), (7, 1)]) == 1


TP_CASES = [("mars", (0, 1, 2, 3), 8, "ring"), ("ring", (2, 1), 8, "mesh"), ("pd", (3, 1, 0, 2), 4, "ring"),
            ("zigzag", (1, 0, 3, 2), 8, "mesh")]


@pytest.mark.parametrize("sched,w_group,kv_bits,topo", TP_CASES,
                         ids=[f"{c[0]}-W{len(c[1])}-kv{c[2]}" for c in TP_CASES])
def test_tp_decode_golden_equals_int_model(sched, w_group, kv_bits, topo):
    """A tensor-parallel W group gives IntModel's tokens and, at every decode step, IntModel's
    largest logit; W = 1 (w_group=(leader,)) is the same program as no w_group."""
    from mcf_fpga.golden.int_model import IntModel, quantize_model
    from mcf_fpga.golden.model import random_weights
    from tests.host._common import decode_reference
    im = IM if kv_bits == 8 else IntModel(quantize_model(random_weights(CFG, seed=5), block=BLOCK, kv_bits=4))
    cl = ClusterConfig(nodes=4, topology=topo, kv_bytes_per_node=1 << 20)
    p = prompt(45, 3)
    toks, picked = decode_reference(im, p, 6)
    prog = build(sched, cl, 45, 6, 16, w_group=w_group) if kv_bits == 8 else build_kv4(sched, cl, 45, 6, w_group)
    assert prog.leader == w_group[0] and prog.w_group == w_group
    r = run_golden(prog, im, p)
    assert r.tokens == toks and r.req_picked[0] == picked
    assert r.layout == prog.expected_layout()
    one = build(sched, cl, 45, 6, 16)
    same = build(sched, cl, 45, 6, 16, w_group=(one.leader,))
    assert same.wsplit is None and same.ops == one.ops


def build_kv4(sched, cl, S, K, w_group):
    from mcf_fpga.host import baselines, mars
    from tests.host._common import HW
    if sched == "mars":
        return mars.plan(CFG, cl, HW, S, K, block=BLOCK, kv_bits=4, params=mars.MarsParams(chunk=16),
                         w_group=w_group)
    return baselines.SCHEDULES[sched](CFG, cl, HW, S, K, chunk=16, block=BLOCK, kv_bits=4, w_group=w_group)


def test_tp_program_splits_every_linear_layer():
    """Op level: every W node's decode ops carry its slice, the slices of every linear layer are
    disjoint and cover it (so the group streams the single leader's weight bytes, once), and
    every gathered vector reaches every other W node."""
    prog = build("mars", ClusterConfig(nodes=4, kv_bytes_per_node=1 << 20), 40, 3, 16, w_group=(3, 0, 2, 1))
    sp = prog.wsplit
    full = {"q": CFG.q_dim, "k": CFG.kv_dim, "v": CFG.kv_dim, "o": CFG.hidden_size, "gate": CFG.intermediate_size,
            "up": CFG.intermediate_size, "down": CFG.hidden_size, "head": CFG.vocab_size}
    for lin, n in full.items():
        rows = sorted(sp.rows(lin, j) for j in range(4))
        covered = [r for a, b in rows for r in range(a, b)]
        assert covered == list(range(n)), lin
    for j, w in enumerate(prog.w_group):
        parts = {op.part for op in prog.ops[w] if isinstance(op, (DecodeProject, DecodeFinish, DecodeLogits))}
        assert parts == {(j, 4)}
        got = [(op.what, op.peer) for op in prog.ops[w] if isinstance(op, Recv) and op.what in ("a", "h1", "s", "h")]
        assert sorted(set(got)) == sorted((x, p) for x in ("a", "h1", "s", "h") for p in prog.w_group if p != w)
    stages = [op.name for op in prog.ops[2] if isinstance(op, DecodeFinish)]
    assert stages == ["attn", "o", "ffn", "down"] * (2 * CFG.num_layers)      # 2 decode steps
    assert sum(isinstance(op, DecodePick) for w in prog.w_group for op in prog.ops[w]) == 4 * 2


def test_tp_decode_on_dist_ranks():
    from tests.host._common import decode_reference
    p = prompt(45, 3)
    toks, picked = decode_reference(IM, p, 4)
    for topo, wg in (("mesh", (1, 2, 3, 0)), ("ring", (2, 0))):
        prog = build("mars", ClusterConfig(nodes=4, topology=topo, kv_bytes_per_node=1 << 20), 45, 4, 16, w_group=wg)
        d = run_dist(prog, IM, p, timeout=30)
        assert d.tokens == toks and d.req_picked[0] == picked
        assert d.layout == prog.expected_layout()


@pytest.mark.parametrize("pipeline", [False, True])
def test_tp_group_with_requests_and_pipelining(pipeline):
    """Two requests on an elastic program (pure W node 3 leading, a scale-up), W group (3, 0, 1, 2):
    every W node runs the W side in the leader's (pipelined) order; tokens equal IntModel."""
    from mcf_fpga.host.config import HardwareConfig
    from mcf_fpga.host.elastic.program import elastic_program
    cl = ClusterConfig(nodes=4, kv_bytes_per_node=1 << 20)
    prog = elastic_program(CFG, cl, HardwareConfig(), [40, 30], [6, 5], prefill_nodes=2, scale_ups={2: (0, 2)},
                           chunk=16, block=BLOCK, w_node=3, pipeline=pipeline, w_group=(3, 0, 1, 2))
    ps = [prompt(40, 1), prompt(30, 2)]
    r = run_golden(prog, IM, ps)
    for q, (pp, k) in enumerate(zip(ps, (6, 5))):
        assert r.req_tokens[q] == IM.generate(pp, k), q
    assert [op.kind for op in prog.ops[1] if isinstance(op, (DecodeFinish, DecodeProject))] == \
        [op.kind for op in prog.ops[3] if isinstance(op, (DecodeFinish, DecodeProject))]


def test_w_group_is_refused():
    cl = ClusterConfig(nodes=4, kv_bytes_per_node=1 << 20)
    for wg, msg in (((0, 7), r"w_group=\(0, 7\): nodes \[7\] are not nodes"), ((1, 1), "duplicate nodes"),
                    ((0, 1, 2), "num_heads=4 is not a multiple of 3"), ((), r"w_group=\(\)")):
        with pytest.raises(ValueError, match=msg):
            build("mars", cl, 40, 3, 16, w_group=wg)
    with pytest.raises(ValueError, match="w_tile=48: hidden_size=64 must be whole tiles of 48"):
        build("mars", cl, 40, 3, 16, w_group=(0, 1), w_tile=48)
    with pytest.raises(ValueError, match="w_tile=32: hidden_size=64 must be whole tiles of 32 rows, at least 4"):
        build("mars", cl, 40, 3, 16, w_group=(0, 1, 2, 3), w_tile=32)
    with pytest.raises(ValueError, match=r"w_group\[0\]=0 is the merge root"):
        build("pd", cl, 40, 3, 16, w_group=(0, 2))              # PD decodes on nodes 2, 3
    from mcf_fpga.host.config import HardwareConfig
    from mcf_fpga.host.elastic.program import elastic_program
    with pytest.raises(ValueError, match=r"w_group\[0\] must be the W node w_node=3"):
        elastic_program(CFG, cl, HardwareConfig(), 40, 3, prefill_nodes=2, scale_ups={}, chunk=16, block=BLOCK,
                        w_node=3, w_group=(0, 3))
