"""Executors: every schedule's program gives IntModel's outputs and tokens bit for bit on the
golden executor, and the torch.distributed executor (real gloo send/recv, one rank per node)
agrees with it on outputs, tokens and KV layout."""
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from host import mars
from host.config import ClusterConfig
from host.executors.dist import run_dist
from host.executors.golden import run_golden
from host.executors.runtime import ExecError

from ._common import BLOCK, CFG, IM, SCHEDULES, build, prompt

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
    i = next(i for i, op in enumerate(ops) if op.kind == "recv")
    ops[i] = ops[i].__class__(**{**ops[i].__dict__, "msg": 10 ** 6})
    with pytest.raises(ExecError):
        run_dist(prog, IM, p, timeout=3)
    with pytest.raises(ExecError, match="deadlock"):
        run_golden(prog, IM, p)


def test_prompt_length_must_match_the_program():
    prog = build("mars", ClusterConfig(nodes=2), 16, 0, 8)
    with pytest.raises(ValueError, match="compiled for 16"):
        run_golden(prog, IM, prompt(17))


def test_run_dispatches_by_backend_name():
    from host.executors import run
    prog = build("mars", ClusterConfig(nodes=2), 16, 2, 8)
    p, _, tokens = reference(16, 2, 0)
    assert run(prog, IM, p, backend="golden").tokens == tokens
    with pytest.raises(ValueError, match="backend='fpga'"):
        run(prog, IM, p, backend="fpga")
    with pytest.raises(OSError, match="UIO"):            # no node board on this machine
        run(prog, IM, p, backend="board")
