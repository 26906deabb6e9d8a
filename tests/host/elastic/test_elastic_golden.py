"""Elastic decode on golden: tokens identical to IntModel.generate while A nodes are added
(>= 2 scale-ups) and removed (>= 1 scale-down) mid-generation through the routing table."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from mcf_fpga.golden.config import get_config
from mcf_fpga.golden.int_model import IntModel, quantize_model
from mcf_fpga.golden.model import random_weights
from mcf_fpga.host.elastic.golden_run import run_elastic_decode
from mcf_fpga.host.elastic.scaling import ScalingParams, kv_bytes_per_token

CFG = get_config("micro")
QM = quantize_model(random_weights(CFG, seed=3), block=8)
BPT = kv_bytes_per_token(CFG)


def _prompts(seed, lens):
    g = torch.Generator().manual_seed(seed)
    return {name: torch.randint(0, CFG.vocab_size, (n,), generator=g).tolist() for name, n in lens.items()}


def _params(cap_tokens):
    # C_thresh = 0.9 * cap (memory binds); prewarm takes 2 steps
    return ScalingParams(c_kv_cap=cap_tokens * BPT, bw=1e12, t_a_max=1.0, bytes_per_token=BPT,
                         t_step=1.0, t_prewarm=2.0)


def test_mars_handover_scale_up_and_down_tokens_identical():
    """A (16-token prompt) lives on node 1; B's 3 blocks are owned by nodes 2, 3, 2 (a MARS
    owner-only layout). C_thresh = 36 tokens: A's and B's tails scale up (and B's again);
    A finishes first and its nodes are released while B keeps decoding."""
    prompts = _prompts(5, {"A": 16, "B": 24})
    max_new = {"A": 26, "B": 80}
    run = run_elastic_decode(QM, prompts, max_new, _params(40), pool=[1, 2, 3, 4, 5, 6, 7],
                             owners={"A": [1, 1], "B": [2, 3, 2]})
    ref = IntModel(QM)
    for r in prompts:
        assert run.tokens[r] == ref.generate(prompts[r], max_new[r]), r
    ctl = run.controller
    ups = [e for e in ctl.events if e.kind == "scale_up"]
    downs = [e for e in ctl.events if e.kind == "scale_down"]
    fin = {e.detail: e.step for e in ctl.events if e.kind == "finish"}
    assert len(ups) >= 3
    mid_downs = [d for d in downs if d.step <= fin["B"]]
    assert len(mid_downs) >= 1                         # removed while B still generates
    assert {d.node for d in mid_downs} >= {1}          # A's original node
    # the routed set changed during the run; every step used one published version
    versions = run.step_versions
    assert versions == sorted(versions) and len(set(versions)) >= 4
    assert len({tuple(h.get("B", ())) for h in run.step_holders}) >= 3
    # new KV went only to tails: every append an A node accepted was checked against its view
    assert all(a.versions == sorted(a.versions) for a in run.anodes.values())
    assert all(not a.kv for a in run.anodes.values())  # finished requests' KV freed


def test_balanced_initial_layout_tokens_identical():
    """No owner layout: N_A = ceil(C_total / C_thresh) balanced nodes after prefill."""
    prompts = _prompts(9, {"x": 40, "y": 9})
    max_new = {"x": 12, "y": 20}
    run = run_elastic_decode(QM, prompts, max_new, _params(24), pool=[1, 2, 3, 4, 5, 6])
    first = run.controller.table.history[1]
    assert len(first.active) == 3                      # ceil(49 / 21.6) = 3
    ref = IntModel(QM)
    for r in prompts:
        assert run.tokens[r] == ref.generate(prompts[r], max_new[r]), r
    assert run.controller.count("scale_up") >= 1


def test_mars_program_owner_layout_hands_over():
    """host.mars.plan's owner-only layout (chunk c on node c mod N) becomes the A nodes'
    initial ranges (prefill node n -> A node n + 1; node 0 is the W node)."""
    from mcf_fpga.host.config import ClusterConfig, HardwareConfig
    from mcf_fpga.host.elastic.golden_run import owners_from_program
    from mcf_fpga.host.mars import MarsParams, plan
    prompts = _prompts(2, {"m": 40})
    prog = plan(CFG, ClusterConfig(nodes=3), HardwareConfig(), 40, 6, block=8,
                params=MarsParams(chunk=8))
    owners = owners_from_program(prog, {n: n + 1 for n in range(3)})
    assert owners == [prog.owner[u] + 1 for u in range(5)]
    run = run_elastic_decode(QM, prompts, {"m": 6}, _params(64), pool=[1, 2, 3, 4],
                             owners={"m": owners})
    first = run.controller.table.history[1]
    assert [(r.start, r.node) for r in first.ranges["m"]] == [(8 * b, o) for b, o in enumerate(owners)]
    assert run.tokens["m"] == IntModel(QM).generate(prompts["m"], 6)


_MID = _prompts(7, {"p": 16, "q": 8})
_MID_NEW = {"p": 14, "q": 18}
_MID_REF = {}


@settings(max_examples=4)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 1)), min_size=1, max_size=4))
def test_publish_at_random_times_inside_steps(when):
    """Route changes staged and published in the middle of steps (after a random request's
    forward) take effect only at the next token boundary: every append of a step went to the
    tail of the step's snapshot (ANode.append checks it) and tokens stay identical."""
    if not _MID_REF:
        ref = IntModel(QM)
        _MID_REF.update({r: ref.generate(_MID[r], _MID_NEW[r]) for r in _MID})
    plan = {(s, ["p", "q"][i]) for s, i in when}
    seen = []

    def meddle(ctl, view, req):
        if (ctl.step_no, req) in plan and ctl.free and req not in ctl.done:
            n = ctl.free.popleft()
            ctl.table.stage_activate(n)
            ctl.table.stage_extend(req, n, ctl.lengths[req])
            ctl.table.publish()
            seen.append((view.version, ctl.table.published.version, ctl.table.pending is not None))

    run = run_elastic_decode(QM, _MID, _MID_NEW, _params(64), pool=[1, 2, 3, 4, 5, 6, 7],
                             owners={"p": [1, 2], "q": [3]}, mid_step=meddle)
    assert run.tokens == _MID_REF
    for v_step, v_pub, pending in seen:          # nothing was installed during the step
        assert v_pub == v_step and pending
    assert len(set(run.step_versions)) >= 1 + min(1, len(seen))


def test_handover_rejects_mismatched_owner_layout():
    with pytest.raises(ValueError, match="expected 2"):
        run_elastic_decode(QM, _prompts(1, {"a": 16}), {"a": 2}, _params(40), pool=[1],
                           owners={"a": [1]})
