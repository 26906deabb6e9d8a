"""Fetching nodes on simulated boards (issue #19): the board executor (host.executors.board) runs
each node's compiled command stream through its command fetcher on HP0 and its data image through
its stream loader on HP2 of a Verilated NodeBoardTop (boards/node_top.py), both in DMA buffers the
board's allocator chose (host.board.node_hw.NodeHw.memory), not at the simulator cluster's fixed
bases. Same logits, tokens and KV rows in DDR as IntModel."""
import dataclasses

import pytest
import torch

from boards.sim_board import DDR_BASE, DDR_BYTES, SimBoardCluster
from golden.config import get_config
from golden.int_model import IntModel, quantize_model
from golden.model import random_weights
from hdl import cmdfetch as F
from hdl.node import CMDFETCH_WINDOW
from host.board.node_hw import BoardError
from host.executors.board import run_board
from host.executors.rtl import sim_ddr_node_config
from host.scenario import build_programs

torch.set_num_threads(1)

CFG = get_config("micro").replace(num_layers=1)
IM = IntModel(quantize_model(random_weights(CFG, seed=5), block=16))
FETCH = dataclasses.replace(sim_ddr_node_config("ring"), fetcher=True)


def prog_and_prompt(S=40, K=3):
    progs, _ = build_programs(CFG, nodes=2, topology="ring", prompt_len=S, max_new_tokens=K, schedules=["mars"],
                              chunk=16, block=16, kv_headroom=2.0)
    prompt = torch.randint(0, CFG.vocab_size, (S,), generator=torch.Generator().manual_seed(5)).tolist()
    return progs["mars"], prompt


def test_fetched_mars_program_on_simulated_boards_equals_int_model():
    """MARS on 2 boards, prefill and 2 decode steps, DDR latency and HP-port stalls: IntModel's
    logits and tokens bit for bit, every KV row the nodes hold equal in the HP3 region models; each
    fetcher ran its whole stream from a DMA buffer of its board (BASE in the allocator's DDR), and
    the host posted no command, weight or scratchpad-in descriptor (those readers are not built),
    only an sp_out descriptor per fetched SPR (NodeDriver.expect_reads)."""
    prog, prompt = prog_and_prompt()
    cl = SimBoardCluster(2, "ring", FETCH, chunk=64, ddr_latency=20, ddr_stall_seed=11)
    r = run_board(prog, IM, prompt, cluster=cl, node_cfg=FETCH, chunk=64)
    assert torch.equal(r.logits, IM.forward(torch.tensor(prompt))), "logits differ from IntModel"
    assert r.tokens == IM.generate(prompt, 3)
    assert all(n > 0 for n in r.kv_rows_checked)         # DDR rows compared with IntModel
    for i in range(2):
        w = cl.window(i)
        base = w.read(CMDFETCH_WINDOW[1] + F.BASE_LO) | w.read(CMDFETCH_WINDOW[1] + F.BASE_HI) << 32
        assert DDR_BASE <= base < DDR_BASE + DDR_BYTES
        assert w.read(CMDFETCH_WINDOW[1] + F.STATUS) == F.STATUS_DONE
        assert w.read(CMDFETCH_WINDOW[1] + F.LOADS) > 0


def test_fetching_board_refuses_host_streams_and_served_boards():
    """A fetching board's NodeHw has no cmd/w/sp_in rings: a push there is a BoardError naming the
    missing reader; a served cluster (no NodeHw.memory over the wire yet) is refused before work."""
    from host.executors.board import _make_hw
    from host.executors.rtl import _kv_widths
    cl = SimBoardCluster(2, "ring", FETCH)
    hw = _make_hw(cl, 0, engine=FETCH.engine, kv_cmd_bits=8 * _kv_widths(FETCH)[0], kv_resp_bits=32)
    assert hw.fetching and sorted(hw.eng) == ["sp_out"] and hw.pending("s_axis_w") == 0
    with pytest.raises(BoardError, match=r"push to s_axis_w: the board's node fetches .*ENGINES=0x8: no w reader"):
        hw.push("s_axis_w", bytes(32))
    mem = hw.memory("m_axi_load", 4096, base=0x30_0000_0000)
    assert mem.base != 0x30_0000_0000 and DDR_BASE <= mem.base < DDR_BASE + DDR_BYTES
    with pytest.raises(ValueError, match=r"m_axi_kv.*gives DMA buffers to m_axi_cmd, m_axi_load only"):
        hw.memory("m_axi_kv", 4096)

    class Served:
        n = 2

        def hw(self, i, **kw):
            raise AssertionError("not reached")
    prog, prompt = prog_and_prompt(K=1)
    with pytest.raises(ValueError, match="NodeConfig.fetcher on served boards"):
        run_board(prog, IM, prompt, cluster=Served(), node_cfg=FETCH)
