"""Scaling policy (KernelFlume §4.2) against hand-derived values; node pool exhaustion makes
admission wait and never drops a request; scale-down only when a node's requests finish."""
import math
from types import SimpleNamespace

import pytest

from mcf_fpga.golden.config import get_config
from mcf_fpga.host.elastic.plan import elastic_plan
from mcf_fpga.host.elastic.routing import Range
from mcf_fpga.host.elastic.roles import Role, Roles
from mcf_fpga.host.elastic.scaling import (ElasticController, ScalingParams, c_thresh, fill_horizon,
                                  kv_bytes_per_token, n_a_after_prefill, owner_layout, t_a_max)


def test_c_thresh_hand_derived():
    # A6000: 48 GB, 768 GB/s, 80 ms SLO minus 4 ms overhead
    assert c_thresh(0.9, 48e9, 0.9, 0.076, 768e9) == pytest.approx(43.2e9)        # memory binds
    assert c_thresh(0.9, 48e9, 0.9, 0.050, 768e9) == pytest.approx(34.56e9)       # SLO binds
    assert t_a_max(0.080, 0.004) == pytest.approx(0.076)
    with pytest.raises(ValueError, match="beta_mem"):
        c_thresh(1.5, 1, 0.5, 1, 1)
    with pytest.raises(ValueError, match="no attention budget"):
        t_a_max(0.01, 0.02)


def test_kv_bytes_per_token_paper_and_mcf():
    llama8b = SimpleNamespace(num_layers=32, num_kv_heads=8, head_dim=128)
    assert kv_bytes_per_token(llama8b, kv_bits=16, exponent_bytes=0) == 131072   # 2*8*128*32*2 B
    micro = get_config("micro")                                                   # 2 layers, 2 heads, d=16
    assert kv_bytes_per_token(micro) == 2 * 2 * 2 * (16 + 1)


def test_n_a_and_fill_horizon_hand_derived():
    assert n_a_after_prefill(100, 30) == 4
    assert n_a_after_prefill(90, 30) == 3
    assert n_a_after_prefill(0, 30) == 1
    assert fill_horizon(100, 40, 3, 5) == pytest.approx(4.0)
    assert fill_horizon(100, 40, 0, 5) == math.inf


def test_owner_layout_coalesces_blocks():
    lay = owner_layout({"r": [3, 3, 5, 3]}, 8)
    assert lay["r"] == [Range(0, 16, 3), Range(16, 24, 5), Range(24, None, 3)]


def test_roles_validation():
    r = Roles.split(5, tp=2)
    assert r.w.members == (0, 1) and r.a_pool == (2, 3, 4) and r.role(1) is Role.W and r.role(4) is Role.A
    with pytest.raises(ValueError, match="both W and A"):
        Roles(r.w, (1, 2), 5)
    with pytest.raises(ValueError, match="tp=5"):
        Roles.split(5, tp=5)


def _params(**kw):
    base = dict(c_kv_cap=100, bw=1e9, t_a_max=1.0, bytes_per_token=1, beta_mem=0.5, beta_slo=1.0,
                t_step=1.0, t_prewarm=3.0, gamma=0.8)
    base.update(kw)
    return ScalingParams(**base)


def _decode(ctl, targets, steps=1000):
    """Drive the controller: each runnable request appends one token per step until it has
    ``targets[req]`` tokens; returns per-step runnable lists."""
    trace = []
    for _ in range(steps):
        live = [r for r in ctl.table.published.ranges if r not in ctl.done]
        if not live and not ctl.waiting:
            break
        view, run = ctl.begin()
        trace.append(run)
        for r in run:
            ctl.appended(r)
            if ctl.lengths[r] >= targets[r]:
                ctl.finished(r)
        ctl.end(view)
    return trace


def test_predictive_scale_up_hand_derived():
    """C_thresh = min(0.5*100, 1*1*1e9) = 50 tokens. Prewarm when (50 - b) * 1 s < 3 s, i.e. at
    b = 48; ready 3 steps later; published at b = 51 >= 0.8*50; the cut rounds up to 64."""
    p = _params()
    assert p.c_thresh == 50 and p.prewarm_steps == 3
    ctl = ElasticController(p, [1, 2, 3])
    ctl.table.align = 16
    assert ctl.admit("r", 32)
    _decode(ctl, {"r": 70})
    ev = {e.kind: e for e in ctl.events if e.kind in ("prewarm", "scale_up")}
    assert ev["prewarm"].step == 16 and ev["prewarm"].node == 2        # length 48 at step 16
    assert ev["scale_up"].step == 19 and ev["scale_up"].node == 2      # length 51
    hist = [s for s in ctl.table.history if "r" in s.ranges]
    assert hist[-1].ranges["r"] == (Range(0, 64, 1), Range(64, None, 2))
    assert ctl.count("scale_down") == 2 and sorted(ctl.free) == [1, 2, 3]


def test_scale_down_only_when_every_request_on_the_node_finishes():
    p = _params(c_kv_cap=1000)            # no scale-up in this test
    ctl = ElasticController(p, [1, 2])
    ctl.table.align = 4
    ctl.admit_layout({"a": 8, "b": 8}, {"a": [Range(0, None, 1)],
                                        "b": [Range(0, 4, 1), Range(4, None, 2)]})
    trace = _decode(ctl, {"a": 10, "b": 30})
    downs = [e for e in ctl.events if e.kind == "scale_down"]
    fin = {e.detail: e.step for e in ctl.events if e.kind == "finish"}
    # node 1 holds b's first range: released only after b finishes, not when a does
    assert [d.node for d in downs] == [1, 2] and all(d.step > fin["b"] for d in downs)


def test_pool_exhausted_admission_waits_nothing_dropped():
    """Pool of 2 A nodes, C_thresh = 50 tokens, hard capacity 100 each. a (45 tokens) and b
    (20) take one node each; c cannot be admitted (capacity exhausted) and waits; a's
    scale-up finds the pool empty, so a stalls at 100 tokens until b finishes and frees its
    node; every request still completes with all its tokens."""
    p = _params(beta_mem=0.5, c_kv_cap=100)
    ctl = ElasticController(p, [1, 2])
    ctl.table.align = 8
    assert ctl.admit("a", 45) and ctl.admit("b", 20)
    assert not ctl.admit("c", 40)
    assert ctl.count("capacity_exhausted") >= 1 and [w[0] for w in ctl.waiting] == ["c"]
    before = ctl.table.published
    assert "c" not in before.ranges                     # refused admission: state unchanged
    targets = {"a": 120, "b": 90, "c": 70}
    _decode(ctl, targets)
    assert ctl.done == {"a", "b", "c"} and not ctl.waiting
    assert all(ctl.lengths[r] == targets[r] for r in targets)       # no request dropped or cut
    stalls = [e for e in ctl.events if e.kind == "stall"]
    assert stalls and {e.detail for e in stalls} == {"a"}           # a's growth waited
    admit_c = [e.step for e in ctl.events if e.kind == "admit" and e.detail == "c"]
    fin = {e.detail: e.step for e in ctl.events if e.kind == "finish"}
    assert admit_c and admit_c[0] > fin["b"]
    assert sorted(ctl.free) == [1, 2]


def test_pool_deadlock_is_reported_not_hung():
    p = _params(beta_mem=0.5, c_kv_cap=100)
    ctl = ElasticController(p, [1])
    ctl.table.align = 8
    assert ctl.admit("a", 45)
    with pytest.raises(RuntimeError, match="capacity exhausted"):
        _decode(ctl, {"a": 500})


def test_bad_params_are_named():
    with pytest.raises(ValueError, match="prompt_len=0"):
        ElasticController(_params(), [1]).admit("r", 0)
    with pytest.raises(ValueError, match="c_kv_cap"):
        _params(c_kv_cap=0).c_thresh


def test_policy_plan_for_the_cluster_hand_derived():
    """The policy chooses the cluster program's steps (host.elastic.plan). Micro model with one
    layer: bytes_per_token = 2*1*2*(16+1) = 68. Capacities in tokens x 68: C_kv_cap = 56,
    beta_mem = 1 -> 56; beta_slo*T_A^max*BW = 48 -> C_thresh = 48 tokens (the SLO binds).
    A: 40-token prompt, 30 tokens; B: 24, 52; 3 nodes. N_A = ceil(64/48) = 2.
    Ring prefill (chunk 32, block 16): A on [0, 1] -> blocks 0:n0, 1:n1, 2:n1 (tail n1); B on
    [1, 0] -> 0:n1, 1:n0 (tail n0). Tokens: n0 = 16+8 = 24, n1 = 24+16 = 40.
    * tail n1 (A): b = 40+k after k rounds; tau_fill = 48-b < 3 steps first at k=6 -> prewarm
      node 2 (ready 6+3 = 9). Round 8: A opens block 3 (pos 48); n1 holds 48 tokens of blocks,
      +16 > 56 -> A stalls. Boundary 9: b = 48 >= 0.8*48 -> scale-up A -> node 2.
    * tail n0 (B): b = 24+k; tau_fill < 3 at k=22 -> pool empty: capacity exhausted. Round 24:
      B opens block 3 with n0 at 48 -> stalls (waits) in rounds 24..29.
    * A's 29th decode token is in round 29 (one stall) -> boundary 30: A's ranges freed, node 2
      holds nothing -> scale-down; n0 drops to 32 tokens of blocks, B resumes.
    * B: b = (48 + k-30) - 16 >= 46 at k=44 -> prewarm node 2 (ready 47); round 46 B opens block
      4 (n0 at 48 +16 > 56) -> stall; boundary 47: scale-up B -> node 2.
    * B's 51st decode token: 24 + 16 (rounds 30..45) + 11 (47..57) -> round 57, the last."""
    cfg = get_config("micro").replace(num_layers=1)
    bpt = kv_bytes_per_token(cfg)
    assert bpt == 68
    p = ScalingParams(c_kv_cap=56 * bpt, bw=48 * bpt, t_a_max=1.0, bytes_per_token=bpt, beta_mem=1.0,
                      beta_slo=1.0, t_step=1.0, t_prewarm=3.0, gamma=0.8)
    plan = elastic_plan((40, 24), (30, 52), p, 3, chunk=32, block=16)
    assert plan.n_a == 2 and plan.c_thresh == 48 * bpt and plan.groups == [[0, 1], [1, 0]]
    assert plan.scale_ups == {9: [(0, 2)], 47: [(1, 2)]}
    assert plan.stalls == {8: {0}, **{k: {1} for k in range(24, 30)}, 46: {1}}
    assert {s: v for s, v in plan.scale_downs.items() if s <= 57} == {30: [2]}
    ev = [(e.step, e.kind, e.node) for e in plan.events if e.kind in ("prewarm", "capacity_exhausted")]
    assert ev == [(6, "prewarm", 2), (22, "capacity_exhausted", None), (44, "prewarm", 2)]
    with pytest.raises(ValueError, match="capacity exhausted: N_A"):
        elastic_plan((40, 24), (30, 52), p, 2, chunk=32, block=16)      # no node left for scale-ups
    with pytest.raises(ValueError, match=r"max_new_tokens\[1\]=1"):
        elastic_plan((40, 24), (30, 1), p, 3, chunk=32, block=16)
