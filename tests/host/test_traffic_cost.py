"""Bytes moved (MCF eqs. 17-22) and TTFT (eqs. 23-25) as the RTL-calibrated performance model
(host.perfmodel) predicts it."""
import functools

from hypothesis import given, settings, strategies as st

from mcf_fpga.host import mars, perfmodel as pm
from mcf_fpga.host.config import ClusterConfig, HardwareConfig, kv_unit_bytes

from ._common import BLOCK, CFG, SCHEDULES, build, min_s_node


@settings(max_examples=15)
@given(st.integers(2, 4), st.integers(1, 6), st.integers(1, 2), st.sampled_from(["ring", "zigzag"]))
def test_ring_traffic_is_eq_21(N, C, blocks_per_piece, sched):
    """On a ring topology with equal pieces, ring/zigzag move M_chunk (N-1) C(C+1)/2 bytes."""
    per = 2 * N if sched == "zigzag" else N
    B = BLOCK * blocks_per_piece * per
    prog = build(sched, ClusterConfig(nodes=N, kv_bytes_per_node=1 << 24), C * B, 0, B)
    M_chunk = CFG.num_layers * kv_unit_bytes(CFG, B)
    assert prog.traffic().prefill_bytes == M_chunk * (N - 1) * C * (C + 1) // 2
    assert mars.predicted_volume(CFG, ClusterConfig(nodes=N), C * B, B)["ring"] == M_chunk * (N - 1) * C * (C + 1) // 2


@settings(max_examples=12)
@given(st.integers(2, 6), st.sampled_from(["ring", "mesh"]), st.integers(2, 4), st.floats(0.0, 2.0),
       st.floats(1.0, 4.0), st.integers(1, 2))
def test_mars_moves_fewer_bytes_than_ring_on_long_prompts(N, topo, chunks_per_node, alpha, mem, bpp):
    """MCF §4 (eqs. 20 vs 21): the ring restreams the history for every chunk, MARS moves each
    block at most a bounded number of times; with C >= 2N chunks MARS moves fewer bytes for
    any memory budget from owner-only to 4x it and any alpha."""
    B = BLOCK * bpp
    S = B * N * chunks_per_node
    cl = ClusterConfig(nodes=N, topology=topo, kv_bytes_per_node=int(mem * min_s_node(N, S, B)))
    m = build("mars", cl, S, 0, B, alpha).traffic().prefill_bytes
    r = build("ring", cl.replace(kv_bytes_per_node=1 << 24), S, 0, B).traffic().prefill_bytes
    assert m < r, (m, r)


def test_pd_hand_off_moves_every_block_once():
    cl = ClusterConfig(nodes=4, topology="ring", kv_bytes_per_node=1 << 24)
    S, B = 64, 16
    prog = build("pd", cl, S, 0, B)
    L = CFG.num_layers
    ring2 = L * kv_unit_bytes(CFG, B) * 1 * (4 * 5 // 2)     # eq. 21 on the 2 prefill nodes, C = 4
    hand = 8 * L * kv_unit_bytes(CFG, 8) * 2                  # 8 units of 8 tokens, 0->2 / 1->3: 2 hops
    assert prog.units == [(8 * i, 8 * i + 8) for i in range(8)]
    assert prog.owner == [2, 3] * 4
    assert prog.traffic().prefill_bytes == ring2 + hand


@functools.cache
def _params(link):
    """Calibrated model parameters for the KR260 engine on ``link`` (the simulated node's
    calibration, extrapolated: independent of a local KR260 refit). Calibrates on first use, not
    at collection."""
    hw, P, _ = pm.kr260_setup(link, base=pm.load_params(), kr260=None)
    return P


@settings(max_examples=15)
@given(st.sampled_from(SCHEDULES), st.integers(2, 5), st.integers(1, 64), st.sampled_from([8, 16]))
def test_ttft_bounds_and_monotone_in_link_speed(sched, N, S, B):
    cl = ClusterConfig(nodes=N, kv_bytes_per_node=1 << 22)
    prog = build(sched, cl, S, 1, B)                              # prefill only: TTFT vs its work
    ef, es = pm.predict(prog, _params("sfp10g"), chunk=1), pm.predict(prog, _params("rgmii1g"), chunk=1)
    assert es.ttft_cycles >= ef.ttft_cycles
    assert ef.prefill_cycles >= max(ef.compute_busy) - 1         # no better than the busiest node
    assert ef.prefill_cycles >= sum(ef.compute_busy) / N - 1     # nor than perfect parallelism
    assert ef.ttft_cycles <= ef.prefill_cycles


def test_slow_links_never_speed_anything_up():
    """At 1 Gb/s every schedule is at least as slow as at 10 Gb/s, and ring moves more KV than
    MARS at 2048 tokens on 4 nodes. (With the calibrated engine both hide most of their
    communication at this size, so the TTFT gap between link speeds is small: docs/perfmodel.md.)"""
    from mcf_fpga.golden.config import get_config
    from mcf_fpga.host import baselines
    tiny = get_config("tiny")
    hw = HardwareConfig.kr260(link="rgmii1g")
    cl = ClusterConfig(nodes=4, kv_bytes_per_node=1 << 26)
    m = mars.plan(tiny, cl, hw, 2048, 0, block=16, params=mars.MarsParams(chunk=128))
    r = baselines.ring(tiny, cl, hw, 2048, 0, chunk=128 * 4, block=16)
    assert m.traffic().prefill_bytes < r.traffic().prefill_bytes
    for p in (m, r):
        assert pm.predict(p, _params("rgmii1g"), chunk=1).ttft_cycles >= \
            pm.predict(p, _params("sfp10g"), chunk=1).ttft_cycles
