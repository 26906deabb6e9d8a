"""The board executor (host.executors.board) on simulated node boards (mcf_fpga/sim/boards.py):
Verilated NodeBoardTops with C++ DDR models on their HP ports, driven only through their AXI-Lite
window and DMA buffers (host.board.node_hw), linked as a 2-node ring. Programs give golden's
integer-model logits and tokens bit for bit and the golden executor's KV layout."""
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from mcf_fpga.golden.config import get_config
from mcf_fpga.golden.int_model import IntModel, quantize_model
from mcf_fpga.golden.model import random_weights
from mcf_fpga.sim.boards import SimBoardCluster
from mcf_fpga.host.executors.rtl import sim_node_config
from mcf_fpga.host.executors import run
from mcf_fpga.host.scenario import build_programs

torch.set_num_threads(1)

CFG = get_config("micro").replace(num_layers=1)
BLOCK = 16
IM = IntModel(quantize_model(random_weights(CFG, seed=5), block=BLOCK))


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(schedule=st.sampled_from(["mars", "ring", "zigzag"]), S=st.integers(17, 40), K=st.integers(1, 3),
       seed=st.integers(0, 1000), latency=st.sampled_from([1, 20, 120]),
       stalls=st.one_of(st.none(), st.integers(0, 2 ** 16)), drop=st.one_of(st.none(), st.integers(0, 3)),
       small=st.booleans())
def test_program_on_simulated_boards_equals_golden(schedule, S, K, seed, latency, stalls, drop, small):
    """Random programs on 2 simulated boards with DDR latency, random HP-port stalls and one
    dropped link frame (the ``drop``-th frame node 0 sends; the reliable link resends it), and
    with ``small`` host rings (commands, words and tiles stream through rings a few descriptors
    deep; a 2-slot RX ring back-pressures the NIC): IntModel's logits and tokens, golden's KV
    layout and pool peaks."""
    progs, _ = build_programs(CFG, nodes=2, topology="ring", prompt_len=S, max_new_tokens=K,
                              schedules=[schedule], chunk=16, block=BLOCK, kv_headroom=2.0)
    prog = progs[schedule]
    prompt = torch.randint(0, CFG.vocab_size, (S,), generator=torch.Generator().manual_seed(seed)).tolist()
    cl = SimBoardCluster(2, "ring", sim_node_config("ring"), chunk=64, ddr_latency=latency, ddr_stall_seed=stalls)
    if drop is not None:
        seen = [0]

        def fate(frame):
            seen[0] += 1
            return [] if seen[0] == drop + 1 else [frame]
        for port in (1, 2):
            cl.fault(0, port, fate)
    rings = dict(ring_bytes={"cmd": 1024, "sp_in": 2048, "w": 1024, "sp_out": 1 << 15}, rx_slots=2)
    r = run(prog, IM, prompt, backend="board", cluster=cl, chunk=64, hw_options=rings if small else None)
    assert torch.equal(r.logits, IM.forward(torch.tensor(prompt))), "logits differ from IntModel"
    assert r.tokens == IM.generate(prompt, K)
    g = run(prog, IM, prompt, backend="golden")
    assert r.layout == g.layout == prog.expected_layout()
    assert r.peak_slots == g.peak_slots
    assert r.ttft_cycles > 0
    if drop is not None:
        assert seen[0] > drop + 1              # the frame was dropped, and its resend went through


def test_refused_before_work():
    """A mesh (a board has two links) and a cluster of the wrong size are refused, naming why."""
    progs, _ = build_programs(CFG, nodes=4, topology="mesh", prompt_len=32, max_new_tokens=1,
                              schedules=["mars"], chunk=16, block=BLOCK)
    with pytest.raises(ValueError, match="form a ring; got mesh"):
        run(progs["mars"], IM, list(range(32)), backend="board", cluster="sim")
    progs, _ = build_programs(CFG, nodes=3, topology="ring", prompt_len=32, max_new_tokens=1,
                              schedules=["mars"], chunk=16, block=BLOCK)
    with pytest.raises(ValueError, match="the cluster has 2 boards, the program runs on 3 nodes"):
        run(progs["mars"], IM, list(range(32)), backend="board",
            cluster=SimBoardCluster(2, "ring", sim_node_config("ring")))
