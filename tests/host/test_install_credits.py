"""Install credits (``host.install_credits``): with NIC installs a KV unit takes a slot of its
receiver's pool the moment it arrives, so senders that run ahead can overfill it. The credits must
keep every pool within its budget under *any* timing, and never deadlock.

The property runs each credited program under an adversarial scheduler: at every step a random
node that can move runs its next op; a KV unit is installed in its receivers' pools the moment
its send runs (the earliest any network could deliver it), and the receiver's own ops take and
free slots as the compiler's pool model says (``NodeCompiler.pool_trace``). Every pool must stay
within the budget at every step and every node must reach its end. The same scheduler on the
program without credits overfills a pool for some order (the check can fail), and a budget below
the program's own need is refused."""
import collections
import dataclasses
import random

import pytest
from hypothesis import assume, given, strategies as st

from mcf_fpga.golden.config import get_config
from mcf_fpga.host import program_ops as O
from mcf_fpga.host.compiler import CompileError, compile_program
from mcf_fpga.host.executors.rtl import SIM_ENGINE, sim_node_config
from mcf_fpga.host.install_credits import (CREDIT_BLOCK, collective_key, credit_key, credit_meta,
                                           happens_before, install_credits, min_budget)
from mcf_fpga.host.scenario import build_programs
from mcf_fpga.spec.kvregion import KVRegion

CFG = get_config("micro")
BLOCK, CHUNK = 8, 16


def ncfg(slots=64):
    region = KVRegion(base=0x40_0000_0000, n_slots=slots + 40, slot_rows=CFG.num_kv_heads * CHUNK,
                      d=CFG.head_dim, kv_bits=8)
    eng = dict(SIM_ENGINE, kv_region=region, kv_win_rows=8, kv_n_win=2)
    return dataclasses.replace(sim_node_config("ring", kv_slots=slots), engine=eng, kv_install=True)


_PROGS = {}


def program(schedule, nodes, S):
    """The program, or None when the default cluster's memory does not take it."""
    key = (schedule, nodes, S)
    if key not in _PROGS:
        try:
            progs, _ = build_programs(CFG, nodes=nodes, topology="ring", prompt_len=S, max_new_tokens=2,
                                      schedules=[schedule], chunk=CHUNK, block=BLOCK)
            _PROGS[key] = progs[schedule]
        except ValueError:
            _PROGS[key] = None
    return _PROGS[key]


def compiled(prog, cfg, budget=None):
    rid = collections.defaultdict(int)
    return compile_program(prog, cfg, rid_max=rid, rid_sum=rid, kv_budget=budget)


def own_need(prog, cfg) -> int:
    """The most slots any node's pool holds in its own program order (installs at their recv)."""
    return max(c.pool.peak_slots for c in compiled(prog, cfg))


def adversarial_run(prog, cfg, budget, seed) -> int:
    """Run ``prog`` under a random schedule with installs at send time; returns the most slots
    any pool held; AssertionError on a deadlock."""
    comps = compiled(prog, cfg, budget)
    ops = prog.ops
    N = len(ops)
    delta = []                                    # per node, per op: (taken, freed) by the op itself
    for c in comps:
        prev, d = (0, 0), []
        for t, f in c.pool_trace:
            d.append((t - prev[0], f - prev[1]))
            prev = (t, f)
        delta.append(d)
    members = collections.Counter(k for node_ops in ops for k in {collective_key(o) for o in node_ops} if k)
    rng = random.Random(seed)
    ptr, used, sent, peak = [0] * N, [0] * N, set(), 0
    waiting = collections.defaultdict(set)
    while True:
        ready = []
        for n in range(N):
            if ptr[n] == len(ops[n]):
                continue
            op = ops[n][ptr[n]]
            bar = collective_key(op)
            if isinstance(op, O.Recv) and (op.msg, n) not in sent:
                continue
            if bar is not None:
                waiting[bar].add(n)
                if len(waiting[bar]) < members[bar]:
                    continue
            ready.append(n)
        if not ready:
            break
        n = rng.choice(ready)
        op = ops[n][ptr[n]]
        bar = collective_key(op)
        movers = sorted(waiting.pop(bar)) if bar is not None else [n]
        for m in movers:
            o, (t, f) = ops[m][ptr[m]], delta[m][ptr[m]]
            if not (isinstance(o, O.Recv) and o.what == "kv"):    # an install took its slot at the send
                used[m] += t
            used[m] -= f
            if isinstance(o, O.Send):
                sent.update((o.msg, d) for d in o.dsts)
                if o.what == "kv":
                    for d in o.dsts:                  # installed at once: the earliest arrival
                        used[d] += 1
            peak = max(peak, *used)
            ptr[m] += 1
    assert all(ptr[n] == len(ops[n]) for n in range(N)), f"deadlock at {ptr}"
    return peak


@given(schedule=st.sampled_from(["mars", "ring", "zigzag", "pd"]), nodes=st.sampled_from([2, 3, 4]),
       units=st.integers(2, 8), slack=st.integers(0, 3), seeds=st.lists(st.integers(0, 10**6), min_size=3, max_size=3))
def test_credits_keep_every_pool_within_its_budget(schedule, nodes, units, slack, seeds):
    cfg = ncfg()
    prog = program(schedule, nodes, units * CHUNK)
    assume(prog is not None)
    budget = min_budget(prog, cfg) + slack
    assert budget >= own_need(prog, cfg)
    credited, credits = install_credits(prog, cfg, budget)
    assert happens_before(credited) is not None
    for seed in seeds:
        assert adversarial_run(credited, cfg, budget, seed) <= budget
    # every credit is a one-word message from the receiver to the sender, right where it says
    sends = [(n, o) for n, node_ops in enumerate(credited.ops) for o in node_ops
             if isinstance(o, O.Send) and o.what == "credit"]
    recvs = [(n, o) for n, node_ops in enumerate(credited.ops) for o in node_ops
             if isinstance(o, O.Recv) and o.what == "credit"]
    assert len(sends) == len(recvs) == len(credits)
    for n, o in sends:
        assert o.meta == credit_meta(n, o.dsts[0]) and o.meta.kv_id == (0, CREDIT_BLOCK) and o.nbytes == 4
    # the rest of the program is unchanged, in order
    assert [[o for o in node_ops if getattr(o, "what", None) != "credit"] for node_ops in credited.ops] == prog.ops


@pytest.mark.parametrize("schedule", ["ring", "zigzag"])
def test_without_credits_a_pool_overflows(schedule):
    """The adversarial scheduler finds the overflow the credits prevent (the property can fail)."""
    cfg = ncfg()
    prog = program(schedule, 2, 8 * CHUNK)
    budget = min_budget(prog, cfg)
    credited, credits = install_credits(prog, cfg, budget)
    assert credits
    peaks = [adversarial_run(prog, cfg, budget, seed) for seed in range(20)]
    assert max(peaks) > budget
    assert max(adversarial_run(credited, cfg, budget, seed) for seed in range(20)) <= budget


def test_no_credit_where_the_budget_has_room():
    cfg = ncfg()
    prog = program("ring", 2, 8 * CHUNK)
    assert install_credits(prog, cfg, 64) == (prog, [])


def test_a_budget_below_the_programs_own_need_is_refused():
    cfg = ncfg()
    prog = program("mars", 2, 8 * CHUNK)
    need = own_need(prog, cfg)
    with pytest.raises(CompileError, match="KV pool would answer FULL"):
        install_credits(prog, cfg, need - 1)
    with pytest.raises(CompileError, match="kv_budget=0"):
        install_credits(prog, cfg, 0)


def test_credit_compiles_to_one_word_out_and_a_wait_in():
    cfg = ncfg()
    prog = program("ring", 2, 8 * CHUNK)
    credited, credits = install_credits(prog, cfg, min_budget(prog, cfg))
    comps = compiled(credited, cfg, min_budget(prog, cfg))
    r, f, s, j = credits[0]
    from mcf_fpga.host import compiler as C
    from mcf_fpga.spec.instr import EngineOpcode
    emits = [x for x in comps[r].stream if isinstance(x, C.Ins) and x.fields["op"] == EngineOpcode.EMIT
             and x.fields["n0"] == 1]
    assert emits
    waits = [x for x in comps[s].stream if isinstance(x, C.Recv) and not x.fed]
    assert len(waits) == sum(1 for c in credits if c[2] == s)
    assert all(w.key == credit_key(r) == ("kv", r, 0, CREDIT_BLOCK) and w.sizes == (4,) for w in waits)
    # an RX placer lands them (a wait on its landed count, no load)
    assert {i for i, x in enumerate(comps[s].stream) if isinstance(x, C.Recv) and not x.fed} <= \
        C.placed_records(comps[s].stream)


def test_a_budget_without_room_for_the_units_in_flight_is_refused():
    """A ring's receivers can free nothing before the unit they pass on arrives: at the program's
    own peak every sender would wait for a credit its receiver can only give after sending."""
    cfg = ncfg()
    prog = program("ring", 3, 2 * CHUNK)
    need = own_need(prog, cfg)
    assert min_budget(prog, cfg) > need
    with pytest.raises(CompileError, match="no room for the units in flight"):
        install_credits(prog, cfg, need)
    install_credits(prog, cfg, min_budget(prog, cfg))


def test_the_performance_model_times_the_credits():
    """host.perfmodel runs a credited program: each credit is one EMIT word on the receiver and a
    wait for its packet on the sender, nothing else changes."""
    from mcf_fpga.host import perfmodel as pm
    cfg = ncfg()
    prog = program("ring", 2, 8 * CHUNK)
    credited, credits = install_credits(prog, cfg, min_budget(prog, cfg))
    P = pm.kv_in_ddr(pm.engine_params(pm.load_params(), SIM_ENGINE), send="kvs", install="nic")
    base, cred = pm.predict(prog, P), pm.predict(credited, P)
    emits = [c.get("emit", 0) - b.get("emit", 0) for b, c in zip(base.instr_counts, cred.instr_counts)]
    assert emits == [sum(1 for c in credits if c[0] == n) for n in range(2)] and sum(emits) == len(credits)
    assert all({k: v for k, v in c.items() if k != "emit"} == {k: v for k, v in b.items() if k != "emit"}
               for b, c in zip(base.instr_counts, cred.instr_counts))
    assert cred.ttft_cycles >= base.ttft_cycles          # waits and work added, nothing removed
