"""The RTL executor (host.executors.rtl): programs of every schedule run on the Verilated cluster
and give golden's integer-model logits and tokens bit for bit, the same KV layout and the same
pool behaviour as the golden executor; bad configurations are refused before any work."""
import collections

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from mcf_fpga.golden.config import get_config
from mcf_fpga.golden.int_model import IntModel, quantize_model
from mcf_fpga.golden.model import random_weights
from mcf_fpga.host.executors import run
from mcf_fpga.host.scenario import build_programs
from mcf_fpga.host.program_ops import Embed, Mark, Project

torch.set_num_threads(1)

CFG = get_config("micro").replace(num_layers=1)
BLOCK = 16
IM = IntModel(quantize_model(random_weights(CFG, seed=3), block=BLOCK))
IM4 = IntModel(quantize_model(random_weights(CFG, seed=3), block=BLOCK, kv_bits=4))


def reference(prompt, k, im=IM):
    return im.forward(torch.tensor(prompt)), im.generate(prompt, k)


def prompt_of(n, seed):
    return torch.randint(0, CFG.vocab_size, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def check(schedule, nodes, S, K, seed, headroom=2.0, topology="ring", kv_bits=8, placement="round_robin"):
    im = IM4 if kv_bits == 4 else IM
    progs, _ = build_programs(CFG, nodes=nodes, topology=topology, prompt_len=S, max_new_tokens=K,
                              schedules=[schedule], chunk=16, block=BLOCK, kv_headroom=headroom,
                              kv_bits=kv_bits, placement=placement)
    prog = progs[schedule]
    prompt = prompt_of(S, seed)
    lg, toks = reference(prompt, K, im)
    r = run(prog, im, prompt, backend="rtl")
    assert torch.equal(r.logits, lg), f"{schedule}: logits differ from IntModel"
    assert r.tokens == toks
    g = run(prog, im, prompt, backend="golden")
    assert r.layout == g.layout == prog.expected_layout()
    assert r.peak_slots == g.peak_slots
    assert r.ttft_cycles > 0 and r.wire_bytes > 0
    return r


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(schedule=st.sampled_from(["mars", "ring", "zigzag"]), nodes=st.integers(2, 3),
       S=st.integers(17, 72), seed=st.integers(0, 1000))
def test_prefill_on_rtl_equals_golden(schedule, nodes, S, seed):
    check(schedule, nodes, S, 1, seed)


@pytest.mark.parametrize("schedule,kv_bits", [("mars", 8), ("pd", 8), ("zigzag", 4)])
def test_decode_on_rtl_equals_golden(schedule, kv_bits):
    r = check(schedule, 4, 40, 3, seed=7, kv_bits=kv_bits)
    assert r.decode_cycles > 0


def test_decode_folds_long_contexts_in_batches(monkeypatch):
    """A node with more decode blocks than partial slots folds them in batches (the running fold in
    slot 0, FOLD in place): still IntModel's tokens and logits. 2 slots, a 72-token PD prompt: one
    decode node holds 3 blocks."""
    from mcf_fpga.spec.instr import EngineOpcode
    from mcf_fpga.host import compiler
    monkeypatch.setattr(compiler, "DECODE_FOLD_SLOTS", 2)
    r = check("pd", 4, 72, 3, seed=7)
    carried = [ins for per in r.issued for _oi, ins in per
               if ins["op"] == EngineOpcode.FOLD and ins["a"] == ins["dst"]]
    assert carried, "no FOLD carried a running partial: the batched path did not run"


def test_snake_placement_on_rtl_equals_golden():
    """Snake placement on 2 nodes, 4 chunks, 2 layers: node 1 computes chunks 1 and 2 layer by
    layer together (one run: both chunks' hidden states live at once), node 0 chunks 0 and 3
    and leads the decode."""
    cfg = CFG.replace(num_layers=2)
    im = IntModel(quantize_model(random_weights(cfg, seed=4), block=BLOCK))
    progs, _ = build_programs(cfg, nodes=2, topology="ring", prompt_len=64, max_new_tokens=2, schedules=["mars"],
                              chunk=16, block=BLOCK, placement="snake")
    prog = progs["mars"]
    assert prog.owner == [0, 1, 1, 0]
    kinds = [(type(op), getattr(op, "unit", None)) for op in prog.ops[1] if isinstance(op, (Project, Embed))]
    assert [k for k, _u in kinds[:2]] == [Embed, Embed] and kinds[2:4] == [(Project, 1), (Project, 2)]
    prompt = prompt_of(64, 5)
    lg, toks = reference(prompt, 2, im)
    r = run(prog, im, prompt, backend="rtl")
    assert torch.equal(r.logits, lg) and r.tokens == toks
    assert r.layout == prog.expected_layout()


def test_last_row_head_on_rtl_equals_golden():
    """Program.logits="last" on the Verilated cluster: one head GEMM of one row (on the node of the
    last chunk), its logits IntModel's last row, the tokens and layout the full head's."""
    from mcf_fpga.host.compiler import Ins, Logits, compile_program
    from mcf_fpga.host.executors.rtl import sim_node_config
    from mcf_fpga.spec.instr import EngineOpcode
    progs, _ = build_programs(CFG, nodes=2, topology="ring", prompt_len=40, max_new_tokens=2, schedules=["mars"],
                              chunk=16, block=BLOCK, logits="last")
    prog = progs["mars"]
    rid = collections.defaultdict(int)        # decode's route ids: not looked at here
    streams = [c.stream for c in compile_program(prog, sim_node_config("ring"), rid_max=rid, rid_sum=rid)]
    heads = [r.fields["n0"] for s in streams for r in s if isinstance(r, Ins)
             and r.fields["op"] == EngineOpcode.GEMM and r.fields["n1"] == CFG.vocab_size]
    assert heads == [1, 1]                    # token 1's row, then the one decode step's
    assert [r.rows for s in streams for r in s if isinstance(r, Logits)] == [(39, 40)]
    prompt = prompt_of(40, 7)
    lg, toks = reference(prompt, 2)
    r = run(prog, IM, prompt, backend="rtl")
    assert torch.equal(r.logits, lg[-1:]) and r.tokens == toks
    assert r.layout == prog.expected_layout()


@pytest.mark.extended
def test_mesh_on_rtl_equals_golden():
    """A 2x2 mesh (4-port nodes: a second Verilator build, about 4 minutes of the suite, hence the
    extended tier; Verilated 4-port nodes in a mesh forward, multicast and reduce like golden in
    tests/sim/test_cluster.py, and mesh programs run on the golden and torch.distributed executors in
    tests/host/executors/test_executors.py)."""
    check("mars", 4, 48, 2, seed=11, topology="mesh")


def test_refused_before_work():
    progs, _ = build_programs(CFG, nodes=2, topology="ring", prompt_len=64, max_new_tokens=1,
                              schedules=["mars"], chunk=48, block=BLOCK)
    with pytest.raises(ValueError, match="t_max"):
        run(progs["mars"], IM, prompt_of(64, 0), backend="rtl")
    progs, _ = build_programs(CFG, nodes=2, topology="ring", prompt_len=64, max_new_tokens=1,
                              schedules=["mars"], chunk=16, block=BLOCK, kv_headroom=40.0)
    with pytest.raises(ValueError, match="kv_slots"):
        run(progs["mars"], IM, prompt_of(64, 0), backend="rtl")


# ---------------------------------------------------------------- tensor-parallel weight group (host.tp)

def _stream_bytes(K, N):
    """Bytes of the weight-tile stream of a K x N GEMM on the simulated node (docs/compute.md)."""
    from mcf_fpga.host.executors.rtl import SIM_ENGINE as E
    return N // E["pn"] * (1 + K // E["group"] * (1 + E["group"] // E["pk"])) * E["pn"] * E["pk"] // 2


def _decode_stream(prog, issued, node):
    """Weight bytes a node streamed for its decode ops (every GEMM queued after prefill_done)."""
    from mcf_fpga.spec.instr import EngineOpcode
    mark = next(i for i, op in enumerate(prog.ops[node]) if isinstance(op, Mark))
    return sum(_stream_bytes(ins["len"], ins["n1"]) for oi, ins in issued[node]
               if oi > mark and ins["op"] == EngineOpcode.GEMM)


_ONE = {}


def _single_leader(kv_bits):
    """The decode weight bytes of the same program with one W node (run once)."""
    if kv_bits not in _ONE:
        progs, _ = build_programs(CFG, nodes=4, topology="ring", prompt_len=40, max_new_tokens=3, schedules=["mars"],
                                  chunk=16, block=BLOCK, kv_bits=kv_bits)
        prog = progs["mars"]
        r = run(prog, IM4 if kv_bits == 4 else IM, prompt_of(40, 7), backend="rtl")
        _ONE[kv_bits] = [_decode_stream(prog, r.issued, n) for n in range(4)]
    return _ONE[kv_bits]


TP_RTL = [((0, 1, 2, 3), 8), ((3, 1, 0, 2), 4), ((2, 1), 8)]


@pytest.mark.parametrize("w_group,kv_bits", TP_RTL, ids=[f"W{len(c[0])}-kv{c[1]}" for c in TP_RTL])
def test_tp_decode_on_rtl_equals_golden(w_group, kv_bits):
    """A tensor-parallel W group on the Verilated ring of 4: tokens and every step's largest logit
    equal IntModel's; every W node streams exactly the weight tiles of its slices (GEMMs of its
    rows only) and the group together streams what the single leader streams."""
    from tests.host._common import decode_reference
    im = IM4 if kv_bits == 4 else IM
    progs, _ = build_programs(CFG, nodes=4, topology="ring", prompt_len=40, max_new_tokens=3, schedules=["mars"],
                              chunk=16, block=BLOCK, kv_bits=kv_bits, w_group=w_group)
    prog = progs["mars"]
    prompt = prompt_of(40, 7)
    toks, picked = decode_reference(im, prompt, 3)
    r = run(prog, im, prompt, backend="rtl")
    assert torch.equal(r.logits, im.forward(torch.tensor(prompt)))
    assert r.tokens == toks and r.req_picked[0] == picked
    assert run(prog, im, prompt, backend="golden").req_picked == r.req_picked
    sp, steps, D, I = prog.wsplit, 2, CFG.hidden_size, CFG.intermediate_size
    k_in = {"q": D, "k": D, "v": D, "o": CFG.q_dim, "gate": D, "up": D, "down": I}
    got = [_decode_stream(prog, r.issued, n) for n in range(4)]
    for j, w in enumerate(w_group):
        want = sum(_stream_bytes(k_in[lin], b - a) for lin, (a, b) in sp.weight_rows(j).items() if lin != "head"
                   and b > a) * CFG.num_layers + _stream_bytes(D, sp.vocab(j)[1] - sp.vocab(j)[0])
        assert got[w] == steps * want, (w, got[w], steps * want)
    assert sum(got) == sum(_single_leader(kv_bits)) and max(_single_leader(kv_bits)) == sum(got)
    assert all(got[n] == 0 for n in range(4) if n not in w_group)


def test_tp_group_refused_by_the_rtl_before_work():
    progs, _ = build_programs(CFG, nodes=4, topology="ring", prompt_len=40, max_new_tokens=3, schedules=["mars"],
                              chunk=16, block=BLOCK, w_group=(0, 1), w_tile=2)
    with pytest.raises(ValueError, match="w_tile=2 is not a multiple of the engine's GEMM tile pn=4"):
        run(progs["mars"], IM, prompt_of(40, 7), backend="rtl")
    progs, _ = build_programs(CFG, nodes=4, topology="ring", prompt_len=40, max_new_tokens=3, schedules=["mars"],
                              chunk=16, block=BLOCK, w_group=(0, 1))
    with pytest.raises(ValueError, match="query_first"):
        run(progs["mars"], IM, prompt_of(40, 7), backend="rtl", query_first=True)

def test_decode_merge_contexts_refused_before_work():
    """Decode's merge is 1 max group + the SUM groups of all heads' partial rows packed into
    max_payload packets: at Qwen2.5-1.5B (12 heads x 130 int64 words, 2 KB packets) 7 sum
    groups, 8 contexts; the micro model's 4 heads fit one packet. Too few reduce-pool contexts:
    refused before any simulation, naming the field and the value needed."""
    import dataclasses
    from mcf_fpga.host.executors.rtl import decode_sum_packets, sim_node_config
    assert decode_sum_packets(12, 128, 2048) == (512, 7)
    assert decode_sum_packets(CFG.num_heads, CFG.head_dim, 2048) == (512, 1)
    progs, _ = build_programs(CFG, nodes=2, topology="ring", prompt_len=32, max_new_tokens=2,
                              schedules=["mars"], chunk=16, block=BLOCK)
    ncfg = sim_node_config("ring")
    ncfg = dataclasses.replace(ncfg, nic=dataclasses.replace(ncfg.nic, max_payload=128, reduce_contexts=4))
    # 4 heads x 36 words = 576 bytes: 5 packets of <= 128 bytes + the max group = 6 contexts
    with pytest.raises(ValueError, match=r"reduce_contexts must be at least 6"):
        run(progs["mars"], IM, prompt_of(32, 0), backend="rtl", node_cfg=ncfg)


@pytest.mark.parametrize("schedule", ["mars", "ring"])
def test_prefill_folds_through_two_slots(monkeypatch, schedule):
    """Prefill attention folds a row set's block partials through 2 slots (host.prefill_fold): the
    running fold in slot 0, taking the next block in place by an ATT acc (MARS's blocks arrive in
    order: no window FOLD) or by a FOLD in place; ring's blocks arrive newest first
    and a passed-on unit leaves before its turn, so its partial is parked and copied in later
    (FOLD of one partial). Still IntModel's logits and tokens, bit for bit."""
    from mcf_fpga.spec.instr import EngineOpcode, FoldFlags
    from mcf_fpga.host import compiler
    monkeypatch.setattr(compiler, "fold_slots", lambda _words, _arena, nb: min(nb, 2))
    r = check(schedule, 3, 72, 2, seed=11)
    issued = [ins for per in r.issued for _oi, ins in per]
    folds = [ins for ins in issued if ins["op"] == EngineOpcode.FOLD and not FoldFlags.unpack(ins["flags"]).final]
    accs = [ins for ins in issued if ins["op"] == EngineOpcode.ATT and ins["sub"] & 2]
    assert accs and all(a["b"] == a["dst"] for a in accs), "no ATT acc carried a running partial in place"
    if schedule == "mars":              # no window FOLD (in place); decode's FOLDs remain
        assert not any(f["a"] == f["dst"] for f in folds)
    else:
        assert any(f["a"] == f["dst"] and f["nblk"] == 2 for f in folds), "no FOLD carried a running partial"
        assert any(f["nblk"] == 1 for f in folds), "no parked partial was copied into the run"
