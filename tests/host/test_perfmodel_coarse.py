"""host.perfmodel_coarse: the coarse link model (a KV unit's install packets as one train per link)
and the screening estimate (a few layers, extrapolated) stay close to the exact model on random
small programs; the tolerances are the measured worst errors rounded up (~110 random programs:
coarse 1.8 %, screen 7.2 %; docs/perfmodel.md). No simulation: seconds."""
import pytest
from hypothesis import HealthCheck, given, reject, settings, strategies as st

from mcf_fpga.golden.config import get_config
from mcf_fpga.host import perfmodel as pm
from mcf_fpga.host import perfmodel_coarse as pc
from mcf_fpga.host.scenario import build_programs

from .test_mars_search import perf

COARSE_TOL, SCREEN_TOL = 0.03, 0.10


@st.composite
def cases(draw):
    layers = draw(st.sampled_from([1, 2, 4]))
    schedule = draw(st.sampled_from(["mars", "ring", "zigzag", "pd"]))
    nodes, S = draw(st.integers(2, 5)), 16 * draw(st.integers(4, 12))
    link, speedup = draw(st.sampled_from(["sfp10g", "rgmii1g"])), draw(st.sampled_from([1, 16, 64]))
    payload, chunk = draw(st.sampled_from([96, 256, 2048])), draw(st.sampled_from([1, 64]))
    topo = draw(st.sampled_from(["ring", "mesh"]))
    hw, P = perf("sim", link)
    P = pm.engine_params(P, P["engine"], speedup=speedup) if speedup != 1 else P
    P = dict(P, link=dict(P["link"], max_payload=payload))
    try:
        progs, _ = build_programs(get_config("micro").replace(num_layers=layers), nodes=nodes, topology=topo,
                                  prompt_len=S, max_new_tokens=1, schedules=(schedule,), chunk=16, block=16,
                                  kv_headroom=4.0, hw=hw)
    except ValueError:
        reject()
    return progs[schedule], P, chunk


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(cases())
def test_coarse_and_screen_are_close_to_the_exact_model(case):
    prog, P, chunk = case
    exact = pm.predict(prog, P, chunk=chunk)
    coarse = pm.predict(prog, P, chunk=chunk, coarse=True)
    assert coarse.ttft_cycles == pytest.approx(exact.ttft_cycles, rel=COARSE_TOL)
    assert coarse.wire_bytes == pytest.approx(exact.wire_bytes, rel=1e-9)       # the same frames
    assert coarse.compute_busy == pytest.approx(exact.compute_busy, rel=1e-6)   # the same instructions
    assert pc.screen(prog, P, chunk=chunk)[0] == pytest.approx(exact.ttft_cycles, rel=SCREEN_TOL)


def test_truncate_keeps_the_first_layers_on_every_node():
    hw, P = perf("sim")
    progs, _ = build_programs(get_config("micro").replace(num_layers=4), nodes=3, topology="ring", prompt_len=96,
                              max_new_tokens=1, schedules=("mars",), chunk=16, block=16, kv_headroom=4.0, hw=hw)
    t = pc.truncate(progs["mars"], 2)
    assert t.model.num_layers == 2
    assert all(getattr(op, "layer", 0) < 2 for ops in t.ops for op in ops)
    assert sum(map(len, t.ops)) < sum(map(len, progs["mars"].ops))
    assert pm.predict(t, P, chunk=1).ttft_cycles < pm.predict(progs["mars"], P, chunk=1).ttft_cycles


def test_coarse_and_per_packet_exclude_each_other():
    hw, P = perf("sim")
    progs, _ = build_programs(get_config("micro").replace(num_layers=1), nodes=2, topology="ring", prompt_len=32,
                              max_new_tokens=1, schedules=("ring",), chunk=16, block=16, hw=hw)
    with pytest.raises(ValueError, match="coarse"):
        pm.predict(progs["ring"], P, coarse=True, per_packet=True)
