"""The performance model's host (host.perfmodel.with_host): every record of a
node's compiled stream the host serves costs it a fixed time before what it starts takes effect;
a node that fetches its stream leaves the host only the data records. Hand-made coefficients,
no simulation: seconds."""
import collections

import pytest

from mcf_fpga.golden.config import get_config
from mcf_fpga.host import compiler as C
from mcf_fpga.host import perfmodel as pm
from mcf_fpga.host.executors.rtl import SIM_ENGINE
from mcf_fpga.host.scenario import build_programs

from .test_perfmodel_ddr import _params

MICRO = get_config("micro").replace(num_layers=1)


def _prog():
    progs, _ = build_programs(MICRO, nodes=2, topology="ring", prompt_len=40, max_new_tokens=3, schedules=["mars"],
                              chunk=16, block=16)
    return progs["mars"]


def test_a_free_host_changes_nothing_and_interactions_are_the_streams():
    prog, P = _prog(), _params(dict(SIM_ENGINE))
    ideal = pm.predict(prog, P, chunk=1)
    free = pm.predict(prog, pm.with_host(P, 0.0), chunk=1)
    assert (free.ttft_cycles, free.decode_cycles, free.engine_busy) == (ideal.ttft_cycles, ideal.decode_cycles,
                                                                        ideal.engine_busy)
    rid = collections.defaultdict(int)              # route ids: not timed (as predict)
    comps = C.compile_program(prog, pm.model_node_config(prog, P), rid_max=rid, rid_sum=rid)
    assert free.host_interactions == [sum(C.host_interactions(c.stream).values()) for c in comps]
    assert [sum(C.host_interactions(c.stream, fetched=True).values()) for c in comps] == \
        pm.predict(prog, pm.with_host(P, 0.0, fetched=True), chunk=1).host_interactions


def test_host_time_delays_and_the_fetcher_takes_most_of_it():
    prog, P = _prog(), _params(dict(SIM_ENGINE))
    ideal = pm.predict(prog, P, chunk=1)
    slow = pm.predict(prog, pm.with_host(P, 5e-6, 200e6), chunk=1)        # 1,000 cycles each
    fetched = pm.predict(prog, pm.with_host(P, 5e-6, 200e6, fetched=True), chunk=1)
    assert slow.ttft_cycles > fetched.ttft_cycles >= ideal.ttft_cycles
    assert slow.decode_cycles > fetched.decode_cycles > ideal.decode_cycles
    assert sum(fetched.host_interactions) < sum(slow.host_interactions)


def test_with_host_refuses_nonsense():
    with pytest.raises(ValueError, match="seconds=-1"):
        pm.with_host({}, -1)
    with pytest.raises(ValueError, match="clock_hz=0"):
        pm.with_host({}, 1e-6, 0)


def test_spw_pairs_count_the_host_s_and_the_loader_s_words():
    """``spw_pairs`` halves an eligible SPW whoever feeds its words: the stream loader of a
    fetching node and the host's ``s_axis_sp`` both bring them two a beat (``hdl.host_sp``). The
    same program: as many pair SPWs host-fed as fetched, none on an engine without the key, and
    a shorter run with them."""
    prog = _prog()
    P = _params(dict(SIM_ENGINE, spw_pairs=True))
    P["instr"]["spw"] = {"one": 10.0, "n0": 1.0}        # SPW costs its words

    def pair_spws(pr):
        return sum(n for sh in pr.instr_shapes for (kind, items, _comm), n in sh.items()
                   if kind == "spw" and dict(items).get("pair"))

    host = pm.predict(prog, pm.with_host(P, 0.0), chunk=1)
    fetched = pm.predict(prog, pm.with_host(P, 0.0, fetched=True), chunk=1)
    no_key = pm.predict(prog, pm.with_host(_params(dict(SIM_ENGINE)) | {"instr": P["instr"]}, 0.0), chunk=1)
    assert pair_spws(host) == pair_spws(fetched) > 0
    assert pair_spws(no_key) == 0
    assert sum(host.engine_busy) < sum(no_key.engine_busy)
