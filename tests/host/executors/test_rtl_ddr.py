"""K/V in DDR on the Verilated cluster: every node's engine keeps its KV in a region of
the AXI4 memory model (100-cycle latency, random ready stalls) and streams it through a staging
buffer of 2 windows x 8 rows -- at most 1/16 of the K (and of the V) rows each node holds. Every
schedule's prefill and KV-stationary decode give IntModel's logits and tokens bit for bit, the
directory answers golden.kvpool's (checked command by command), and after the run every KV row a
node holds for decode is in its DDR region as golden.kvstore packs it (``run_rtl`` compares them
with IntModel's K/V and fails on a difference)."""
import dataclasses

import pytest
import torch

from mcf_fpga.golden.config import get_config
from mcf_fpga.golden.int_model import IntModel, quantize_model
from mcf_fpga.spec.kvregion import KVRegion
from mcf_fpga.golden.model import random_weights
from mcf_fpga.spec.instr import EngineOpcode
from mcf_fpga.host.executors import run
from mcf_fpga.host.executors.rtl import SIM_ENGINE, sim_node_config
from mcf_fpga.host.scenario import build_programs
from mcf_fpga.host.install_credits import min_budget
from mcf_fpga.host.program_ops import AllReduce, DecodeProject, Recv, Send

#: one worker runs this module's tests: they share Verilator builds, which the other worker would
#: otherwise sit waiting for (tests/conftest.py, "Shared builds")
pytestmark = pytest.mark.xdist_group("test_rtl_ddr")

torch.set_num_threads(1)

CFG = get_config("micro")              # 2 layers, 2 KV heads, head_dim 16
BLOCK, CHUNK = 8, 16
WIN_ROWS, N_WIN = 8, 2                 # staging: 16 K rows and 16 V rows per node
KV_SLOTS = 48
IMS = {b: IntModel(quantize_model(random_weights(CFG, seed=3), block=BLOCK, kv_bits=b)) for b in (8, 4)}


def region(kv_bits=8, slots=KV_SLOTS + 40):
    """Slots of one 16-token unit (2 heads x 16 rows); the pool's 48, the rest stage."""
    return KVRegion(base=0x40_0000_0000, n_slots=slots, slot_rows=CFG.num_kv_heads * CHUNK,
                    d=CFG.head_dim, kv_bits=kv_bits)


def ddr_config(topology="ring", kv_bits=8):
    """The node with K/V in DDR whose NIC installs received KV units (``kv_install``)."""
    ncfg = sim_node_config(topology, kv_slots=KV_SLOTS)
    eng = dict(SIM_ENGINE, kv_region=region(kv_bits), kv_win_rows=WIN_ROWS, kv_n_win=N_WIN)
    return dataclasses.replace(ncfg, engine=eng, kv_install=True)


def prompt_of(n, seed):
    return torch.randint(0, CFG.vocab_size, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def run_ddr(schedule, nodes, S, K, seed, kv_bits=8, topology="ring", link_fate=None, kv_budget=None):
    im = IMS[kv_bits]
    progs, _ = build_programs(CFG, nodes=nodes, topology=topology, prompt_len=S, max_new_tokens=K,
                              schedules=[schedule], chunk=CHUNK, block=BLOCK, kv_bits=kv_bits)
    prog = progs[schedule]
    prompt = prompt_of(S, seed)
    cache = im.new_cache()
    lg = im.forward(torch.tensor(prompt), cache)
    r = run(prog, im, prompt, backend="rtl", node_cfg=ddr_config(topology, kv_bits), link_fate=link_fate,
            kv_budget=kv_budget)
    assert torch.equal(r.logits, lg), f"{schedule}: logits differ from IntModel"
    assert r.tokens == im.generate(prompt, K)
    g = run(prog, im, prompt, backend="golden")
    assert r.layout == g.layout == prog.expected_layout()
    # the pool also holds staged units and units that arrive before the program frees a slot
    assert all(p >= q for p, q in zip(r.peak_slots, g.peak_slots)), (r.peak_slots, g.peak_slots)
    # every KV unit a node receives was installed by its NIC (the installer's commits, counted by
    # the hardware), none went through the host: one commit per recv op of the program
    recvs = [sum(isinstance(op, Recv) and op.what == "kv" for op in ops) for ops in prog.ops]
    assert [c["committed"] for c in r.kv_installs] == recvs
    assert all(c["drop_full"] == 0 for c in r.kv_installs)
    assert sum(recvs) > 0
    for per, ops in zip(r.issued, r.program.ops):          # (the program run: credits included)
        sends = [ins for oi, ins in per if isinstance(ops[oi], Send) and ops[oi].what == "kv"]
        assert all(ins["op"] == EngineOpcode.KVS for ins in sends), "a KV unit left a node other than by KVS"
    # every KV row was checked against IntModel in DDR (run_rtl raises otherwise): count them
    # independently: the prompt's and the appended tokens' K and V rows, every layer and head
    held_tokens = S + max(K - 1, 0)
    assert sum(r.kv_rows_checked) == 2 * CFG.num_layers * CFG.num_kv_heads * held_tokens
    # the staging buffer (N_WIN x WIN_ROWS K rows, as many V rows) is at most 1/16 of the K rows
    # of every node that holds KV
    held = [n // 2 for n in r.kv_rows_checked if n]
    assert held and min(held) >= 16 * N_WIN * WIN_ROWS, held
    # attention read its KV only through the staging windows: a KVL before every ATT
    for per in r.issued:
        ops = [ins["op"] for _oi, ins in per]
        assert ops.count(EngineOpcode.KVL) == ops.count(EngineOpcode.ATT)
    assert all(rd > 0 and wr > 0 for rd, wr in r.kv_bus)
    if K > 1:
        # decode: a layer's first blocks load beside its projection, the sum phase's beside the max
        # reduction (compiler.next_local_atts): KVLs in those ops, their ATTs without a KVL of their own
        pre = [sum(ins["op"] == EngineOpcode.KVL for oi, ins in per if isinstance(ops[oi], DecodeProject))
               for per, ops in zip(r.issued, r.program.ops)]
        ahead = [sum(1 if ins["op"] == EngineOpcode.ATT else -1 if ins["op"] == EngineOpcode.KVL else 0
                     for oi, ins in per if isinstance(ops[oi], AllReduce) and ops[oi].name == "sum")
                 for per, ops in zip(r.issued, r.program.ops)]
        assert sum(pre) > 0 and sum(ahead) > 0, (pre, ahead)
    return r, prog


@pytest.mark.parametrize("schedule", ["mars", "ring", "zigzag", "pd"])
def test_schedules_with_kv_in_ddr_equal_int_model(schedule):
    """Prefill and 3 decode tokens on 2 nodes, a 128-token prompt: each node holds >= 64 tokens x
    2 layers x 2 heads = 256 K rows, 16x its 16 staging rows."""
    r, prog = run_ddr(schedule, 2, 128, 3, seed=7)
    assert r.decode_cycles > 0


def test_long_prompt_is_many_times_the_staging_buffer_int4():
    """INT4 KV, MARS on 2 nodes, a 256-token prompt: 512 K rows per node, 32x the staging rows."""
    run_ddr("mars", 2, 256, 2, seed=3, kv_bits=4)


def test_link_faults_lose_and_duplicate_no_install():
    """MARS (replicas multicast) with every 5th frame on every link dropped and every 7th
    duplicated (the reliable link resends / discards them): the same logits, tokens and DDR
    contents, one commit per received unit, no installer drop."""
    seen = {}

    def fate(node, port, frame):
        k = seen[(node, port)] = seen.get((node, port), 0) + 1
        if k % 5 == 0:
            return []
        return [frame, frame] if k % 7 == 0 else [frame]
    run_ddr("mars", 2, 128, 2, seed=11, link_fate=fate)
    assert sum(seen.values()) > 50


@pytest.mark.parametrize("schedule", ["ring", "zigzag", "mars"])
def test_install_credits_hold_every_pool_to_its_budget(schedule):
    """Each pool's budget register set to the least budget the program can run in with install
    credits (host.install_credits.min_budget: below n_slots, no headroom): a unit that found the
    pool full would be dropped (drop_full) and the run would fail. The credits go out, the same
    logits, tokens and DDR contents, and no pool ever holds more than the budget."""
    progs, _ = build_programs(CFG, nodes=2, topology="ring", prompt_len=128, max_new_tokens=2,
                              schedules=[schedule], chunk=CHUNK, block=BLOCK)
    budget = min_budget(progs[schedule], ddr_config())
    assert budget < KV_SLOTS
    r, prog = run_ddr(schedule, 2, 128, 2, seed=5, kv_budget=budget)
    assert max(r.peak_slots) <= budget
    credits = [sum(getattr(op, "what", None) == "credit" for op in ops) for ops in r.program.ops]
    assert sum(credits) == 2 * r.credits and r.credits > 0
