"""Elastic cluster programs (host.elastic.program) with random requests, ring or MARS prefill
(random placement and alpha), scale-ups, stalls, the scale-downs they imply, a W node with or
without KV and microbatch pipelining on or off, run on the golden executor: every request's
tokens and prompt logits equal IntModel bit for bit, the layout at prefill_done is the
program's owner-only layout, every decode op of a step runs under one routing version on every
node, and a finished request leaves no KV in any pool."""
import pytest
import torch
from hypothesis import assume, event, given, strategies as st

from mcf_fpga.golden.config import get_config
from mcf_fpga.golden.int_model import IntModel, quantize_model
from mcf_fpga.golden.model import random_weights
from mcf_fpga.host.config import ClusterConfig
from mcf_fpga.host.elastic.program import elastic_program
from mcf_fpga.host.executors import run
from mcf_fpga.host.mars import PLACEMENTS, MarsParams
from mcf_fpga.host.scenario import sim_hardware
from mcf_fpga.host.program_ops import DecodeFree, Publish

from tests.host._common import assert_one_route_version_per_step

torch.set_num_threads(1)
CFG = get_config("micro").replace(num_layers=1)
IM = IntModel(quantize_model(random_weights(CFG, seed=21), block=16))


@st.composite
def cases(draw):
    nodes = draw(st.integers(3, 5))
    P = draw(st.integers(1, nodes - 1))
    R = draw(st.integers(1, 3))
    lens = [draw(st.integers(8, 48)) for _ in range(R)]
    news = [draw(st.integers(2, 24)) for _ in range(R)]
    w_node = P if P + 1 < nodes and draw(st.booleans()) else None     # a W node without KV
    ups = {}
    pool = draw(st.permutations(range(P + (w_node is not None), nodes)))
    for q in range(R):                   # an own pool node: released when q finishes early
        if q < len(pool) and draw(st.booleans()):
            ups.setdefault(draw(st.integers(0, min(news[q] - 2, 4))), []).append((q, pool[q]))
    for _ in range(draw(st.integers(0, 2))):
        q = draw(st.integers(0, R - 1))
        ups.setdefault(draw(st.integers(0, news[q] - 2)), []).append(
            (q, draw(st.integers(P + (w_node is not None), nodes - 1))))
    stalls = {}
    for _ in range(draw(st.integers(0, 3))):
        stalls.setdefault(draw(st.integers(0, 20)), set()).add(draw(st.integers(0, R - 1)))
    mars = draw(st.none() | st.builds(MarsParams, alpha=st.floats(0.0, 2.0), placement=st.sampled_from(PLACEMENTS)))
    return nodes, P, lens, news, ups, stalls, w_node, draw(st.booleans()), mars, draw(st.integers(0, 2 ** 16))


@given(cases())
def test_random_elastic_programs_equal_intmodel(case):
    nodes, P, lens, news, ups, stalls, w_node, pipeline, mars, seed = case
    try:            # MARS with 16-token chunks: up to 3 chunks per request, replicas and prefetches
        prog = elastic_program(CFG, ClusterConfig(nodes=nodes, kv_bytes_per_node=60000), sim_hardware(),
                               tuple(lens), tuple(news), prefill_nodes=P, scale_ups=ups, stalls=stalls,
                               chunk=32 if mars is None else 16, w_node=w_node, pipeline=pipeline,
                               prefill="ring" if mars is None else "mars", mars=mars)
    except ValueError as e:              # a node joining a request it already serves, or too late
        assume("already holds" not in str(e) and "has finished" not in str(e) and "after the last" not in str(e))
        raise
    event(f"requests={len(lens)}")
    event(f"prefill={prog.stats['prefill']}")
    if mars is not None:
        event(f"mars replicas={any(h for p in prog.stats['mars_plans'] for h in p.holders)}, "
              f"prefetches={any(p.fetches for p in prog.stats['mars_plans'])}")
    event(f"w_node={w_node is not None}, pipeline={pipeline}")
    event(f"scale-downs={bool(prog.stats['scale_downs'])}")
    event(f"publishes={sum(isinstance(op, Publish) for op in prog.ops[0])}")
    gen = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, CFG.vocab_size, (n,), generator=gen).tolist() for n in lens]
    r = run(prog, IM, prompts if len(lens) > 1 else prompts[0], backend="golden")
    assert r.req_tokens == [IM.generate(p, k) for p, k in zip(prompts, news)]
    assert all(torch.equal(lg, IM.forward(torch.tensor(p))) for lg, p in zip(r.req_logits, prompts))
    assert r.layout == prog.expected_layout()           # owner-only at prefill_done
    assert_one_route_version_per_step(r.step_versions, prog)
    # a request that finished before the run ended left nothing in any pool
    freed = {op.req for ops in prog.ops for op in ops if isinstance(op, DecodeFree)}
    left = {prog.req_of(u) for lay in r.layout_end.values() for (_l, u) in lay}
    assert not freed & left
    # a node listed as scaled down holds no range of a live request right after
    hist = prog.stats["decode_groups"]
    for s, gone in prog.stats["scale_downs"].items():
        assert not set(gone) & {g for grp in hist[s].values() for g in grp}


def test_prompts_refused_with_the_request_named():
    prog = elastic_program(CFG, ClusterConfig(nodes=3, kv_bytes_per_node=60000), sim_hardware(), (20, 30), (3, 4),
                           prefill_nodes=2, scale_ups={}, chunk=32)
    with pytest.raises(ValueError, match="prompt of request 1 has 29 tokens"):
        run(prog, IM, [[1] * 20, [1] * 29], backend="golden")
    with pytest.raises(ValueError, match="1 given, the program holds 2 requests"):
        run(prog, IM, [[1] * 20], backend="golden")


def test_prefill_option_refused_with_the_field_named():
    cl = ClusterConfig(nodes=3, kv_bytes_per_node=60000)
    with pytest.raises(ValueError, match="prefill='zigzag'"):
        elastic_program(CFG, cl, sim_hardware(), 40, 4, prefill_nodes=2, scale_ups={}, chunk=16, prefill="zigzag")
    with pytest.raises(ValueError, match="MarsParams need prefill='mars'"):
        elastic_program(CFG, cl, sim_hardware(), 40, 4, prefill_nodes=2, scale_ups={}, chunk=16, mars=MarsParams())
    with pytest.raises(ValueError, match="MarsParams.chunk=32 differs from chunk=16"):
        elastic_program(CFG, cl, sim_hardware(), 40, 4, prefill_nodes=2, scale_ups={}, chunk=16, prefill="mars",
                        mars=MarsParams(chunk=32))


def test_mars_prefill_counts_earlier_requests_kv():
    """Two 64-token requests, MARS on nodes 0-1 with 16-token chunks (1088-byte slots, 1 layer):
    each alone needs 2 slots per node + 1 decode block (3264 bytes), but the second request's
    owner chunks come on top of the first's: 4 slots > 3264 // 1088 = 3, refused naming S_node."""
    cl = ClusterConfig(nodes=3, kv_bytes_per_node=3264)
    elastic_program(CFG, cl, sim_hardware(), 64, 2, prefill_nodes=2, scale_ups={}, chunk=16, prefill="mars")
    with pytest.raises(ValueError, match="node 0 would hold 4 KV slots of 1088 bytes.*kv_bytes_per_node=3264"):
        elastic_program(CFG, cl, sim_hardware(), (64, 64), (2, 2), prefill_nodes=2, scale_ups={}, chunk=16,
                        prefill="mars")


def test_policy_program_with_mars_prefill():
    """The scaling policy drives a MARS-prefilled program: the policy's initial table is the MARS
    owner layout the program really has at prefill_done (every prompt block on the node the
    program put its chunk on), the program's scale-downs equal the policy's releases
    (policy_program checks), and tokens and prompt logits equal IntModel."""
    from mcf_fpga.host.elastic.plan import _owners, policy_program
    from mcf_fpga.host.elastic.scaling import ScalingParams, kv_bytes_per_token
    bpt = kv_bytes_per_token(CFG)
    p = ScalingParams(c_kv_cap=56 * bpt, bw=48 * bpt, t_a_max=1.0, bytes_per_token=bpt, beta_mem=1.0,
                      beta_slo=1.0, t_step=1.0, t_prewarm=3.0, gamma=0.8)
    lens, news = (40, 24), (30, 52)
    mars = MarsParams(alpha=1.0, placement="snake")
    prog, plan = policy_program(CFG, ClusterConfig(nodes=3, kv_bytes_per_node=30000), sim_hardware(), lens, news,
                                p, chunk=16, block=16, prefill="mars", mars=mars)
    assert prog.stats["prefill"] == "mars" and prog.stats["scale_ups"] and prog.stats["scale_downs"]
    for r, n in enumerate(lens):
        units = [u for u in range(len(prog.units)) if prog.req_of(u) == r]
        have = [prog.owner[next(u for u in units if prog.units[u][0] <= 16 * b < prog.units[u][1])]
                for b in range(-(-n // 16))]
        assert _owners(n, plan.groups[r], 16, 16, mars) == have
    gen = torch.Generator().manual_seed(12)
    prompts = [torch.randint(0, 256, (n,), generator=gen).tolist() for n in lens]
    r = run(prog, IM, prompts, backend="golden")
    assert r.req_tokens == [IM.generate(pr, k) for pr, k in zip(prompts, news)]
    assert all(torch.equal(lg, IM.forward(torch.tensor(pr))) for lg, pr in zip(r.req_logits, prompts))
    assert r.layout == prog.expected_layout()
    assert_one_route_version_per_step(r.step_versions, prog)
