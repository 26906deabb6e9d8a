"""Fetching nodes on simulated boards: the board executor (host.executors.board) runs
each node's compiled command stream through its command fetcher on HP0 and its data image through
its stream loader on HP2 of a Verilated NodeBoardTop (mcf_fpga/boards/node_top.py), both in DMA buffers the
board's allocator chose (host.board.node_hw.NodeHw.memory), not at the simulator cluster's fixed
bases; the token picker picks each token and the node loads its embedding; its RX placer lands its
received payloads and its NIC installs every received KV unit. The node is node-kr260-fetch's at
the simulator's engine size: every test here shares its one Verilator build. Same logits, tokens
and KV rows in DDR as IntModel."""
import dataclasses

import pytest
import torch

from mcf_fpga.sim.boards import DDR_BYTES, SimBoardCluster, install_ddr_base
from mcf_fpga.golden.config import get_config
from mcf_fpga.golden.int_model import IntModel, quantize_model
from mcf_fpga.golden.model import random_weights
from mcf_fpga.hdl import cmdfetch as F
from mcf_fpga.hdl.node import CMDFETCH_WINDOW
from mcf_fpga.host.board.node_hw import BoardError
from mcf_fpga.host.executors.board import run_board
from mcf_fpga.host.executors.rtl import sim_fetch_node_config
from mcf_fpga.host.scenario import build_programs
from tests.host.board.nic_installs import check_nic_installs

#: one worker runs this module's tests: they share Verilator builds, which the other worker would
#: otherwise sit waiting for (tests/conftest.py, "Shared builds")
pytestmark = pytest.mark.xdist_group("test_board_fetch")

torch.set_num_threads(1)

CFG = get_config("micro").replace(num_layers=1)
IM = IntModel(quantize_model(random_weights(CFG, seed=5), block=16))
#: node-kr260-fetch's node (boards.flow: the command fetcher, the token picker, the RX placer with
#: its writes sharing HP0's with the RX-ring writer, NIC installs through HP2's writes) on the
#: simulator's engine
FETCH = dataclasses.replace(sim_fetch_node_config("ring"), kv_install=True)


def prog_and_prompt(S=40, K=3):
    progs, _ = build_programs(CFG, nodes=2, topology="ring", prompt_len=S, max_new_tokens=K, schedules=["mars"],
                              chunk=16, block=16, kv_headroom=2.0)
    prompt = torch.randint(0, CFG.vocab_size, (S,), generator=torch.Generator().manual_seed(5)).tolist()
    return progs["mars"], prompt


def test_fetched_mars_program_on_simulated_boards_equals_int_model():
    """MARS on 2 boards, prefill and 2 decode steps, DDR latency and HP-port stalls: IntModel's
    logits and tokens bit for bit, every KV row the nodes hold equal in the HP3 region models.
    Each fetcher ran its whole stream from a DMA buffer of its board (BASE in the allocator's DDR);
    the host posted no command, weight or scratchpad-in descriptor (those readers are not built),
    only an sp_out descriptor per fetched SPR (NodeDriver.expect_reads). Each board's placer landed
    the received queries, max results and merged partials in the node's image through HP0's write
    arbiter (beside the RX-ring writer, which still carries what the placer passes on) and the
    stream loader read them back through HP2 -- the host collected none of them (no received-payload
    feeds: rx_log empty, no host interaction per decode token; without a placer it collects them,
    tests/host/executors/test_rtl_fetch.py), and every packet a placer took landed (no drop, no AXI
    error). The NIC installed every KV unit a node received (one commit per receive op; the
    fetched stream waits for each install, WAIT_KV, and patches the slot the installer chose) and
    the host replayed every pool event from the board's KV_EV registers, none discarded."""
    from mcf_fpga.hdl.node import NodeReg
    from mcf_fpga.host.executors.rtl import _rx_reg
    prog, prompt = prog_and_prompt()
    cl = SimBoardCluster(2, "ring", FETCH, chunk=64, ddr_latency=20, ddr_stall_seed=11)
    r = run_board(prog, IM, prompt, cluster=cl, node_cfg=FETCH, chunk=64)
    assert torch.equal(r.logits, IM.forward(torch.tensor(prompt))), "logits differ from IntModel"
    assert r.tokens == IM.generate(prompt, 3)
    assert all(n > 0 for n in r.kv_rows_checked)         # DDR rows compared with IntModel
    region = FETCH.engine["kv_region"]
    for i in range(2):
        w, ddr = cl.window(i), cl.memory(i)
        base = w.read(CMDFETCH_WINDOW[1] + F.BASE_LO) | w.read(CMDFETCH_WINDOW[1] + F.BASE_HI) << 32
        # a DMA buffer of the board, whose buffers sit past the KV region in the one DDR image
        assert ddr.base == install_ddr_base(region) >= region.end and ddr.base <= base < ddr.base + ddr.size
        assert w.read(CMDFETCH_WINDOW[1] + F.STATUS) == F.STATUS_DONE
        assert w.read(CMDFETCH_WINDOW[1] + F.LOADS) > 0
    # the leader picked the prompt's token and both decode steps' (run_board checks picks == arms)
    assert sorted(cl.window(i).read(0x3000 + NodeReg.PICKS) for i in range(2)) == [0, 3]
    # RX placement
    assert [log for log in r.rx_log if log] == [] and r.host_rates[1] == 0.0
    regs = [{k: cl.window(i).read(_rx_reg(k)) for k in ("placed", "passed", "drop_malformed", "drop_overrun",
                                                            "axi_err", "bad_sel")} for i in range(2)]
    assert all(g["drop_malformed"] == g["drop_overrun"] == g["axi_err"] == g["bad_sel"] == 0 for g in regs), regs
    assert all(g["placed"] > 0 for g in regs), regs
    check_nic_installs(r, prog, cl)


def test_fetching_board_refuses_host_streams():
    """A fetching board's NodeHw has no cmd/w/sp_in rings: a push there is a BoardError naming the
    missing reader; its memory() buffers come from the board's DMA memory, whatever base is asked;
    the RX placer's m_axi_rx shares the loader's buffer (and no other), once that one exists."""
    from mcf_fpga.host.executors.board import _make_hw
    from mcf_fpga.host.executors.rtl import _kv_widths
    cl = SimBoardCluster(2, "ring", FETCH)
    hw = _make_hw(cl, 0, engine=FETCH.engine, kv_cmd_bits=8 * _kv_widths(FETCH)[0], kv_resp_bits=32)
    assert hw.fetching and sorted(hw.eng) == ["sp_out"] and hw.pending("s_axis_w") == 0
    with pytest.raises(BoardError, match=r"push to s_axis_w: the board's node fetches .*ENGINES=0x8: no w reader"):
        hw.push("s_axis_w", bytes(32))
    with pytest.raises(ValueError, match=r"memory\('m_axi_rx', share='m_axi_load'\): allocate m_axi_load's buffer first"):
        hw.memory("m_axi_rx", share="m_axi_load")
    mem = hw.memory("m_axi_load", 4096, base=0x30_0000_0000)
    ddr = cl.memory(0)
    assert mem.base != 0x30_0000_0000 and ddr.base <= mem.base < ddr.base + ddr.size
    assert hw.memory("m_axi_rx", share="m_axi_load", latency=5) is mem      # the placer lands in the image
    with pytest.raises(ValueError, match=r"memory\('m_axi_rx', share='m_axi_cmd'\): a board shares m_axi_rx's "
                                         r"memory with m_axi_load's only"):
        hw.memory("m_axi_rx", share="m_axi_cmd")
    with pytest.raises(ValueError, match=r"m_axi_kv.*gives DMA buffers to m_axi_cmd, m_axi_load only"):
        hw.memory("m_axi_kv", 4096)


@pytest.fixture(scope="module")
def served():
    """Two fetching simulated boards served on localhost ports (key "k"), max_dma_bytes 1 MiB."""
    from mcf_fpga.host.board.board_server import BoardServer, SimBoardHost
    host = SimBoardHost(2, "ring", FETCH, chunk=64, ddr_stall_seed=5)
    server = BoardServer(host.endpoints, bind="127.0.0.1", key=b"k", max_dma_bytes=1 << 20).start()
    yield server
    server.close()


def test_fetched_program_through_board_servers_equals_int_model(served):
    """The same fetched MARS program on served boards (mcf serve-board): the stream and the image
    go through the server's memory/load requests, fetched SPRs' sp_out through expect_sp_out."""
    from mcf_fpga.host.board.remote import RemoteBoardCluster
    prog, prompt = prog_and_prompt()
    with RemoteBoardCluster(served.addresses, prog.topo, FETCH, key=b"k") as cl:
        r = run_board(prog, IM, prompt, cluster=cl, node_cfg=FETCH, chunk=64)
    assert torch.equal(r.logits, IM.forward(torch.tensor(prompt))), "logits differ from IntModel"
    assert r.tokens == IM.generate(prompt, 3)


def test_served_memory_requests_refuse_bad_input(served):
    """memory/load/expect_sp_out on a served board: beyond max_dma_bytes (with the rings already
    opened), outside the buffer, an unknown buffer id, before open, zero words: an error naming the
    field and the limit, nothing allocated or written; the RX placer's m_axi_rx gets the loader's
    buffer id again (share), nothing allocated, and no other port's."""
    from mcf_fpga.host.board.remote import RemoteBoardCluster
    from mcf_fpga.host.executors.rtl import _kv_widths
    with RemoteBoardCluster(served.addresses, "ring", FETCH, key=b"k") as cl:
        b0 = cl.boards[0]
        b0.reset()
        where = b0.where
        with pytest.raises(ValueError, match=rf"{where}: ValueError: memory before open"):
            b0.memory("m_axi_cmd", 4096)
        hw = cl.hw(0, engine=FETCH.engine, kv_cmd_bits=8 * _kv_widths(FETCH)[0], kv_resp_bits=32)
        with pytest.raises(ValueError, match=rf"{where}: ValueError: load before memory"):
            hw.conn.call("load", [b"x"], id=0, addr=0)
        with pytest.raises(ValueError, match=r"memory: size \(bytes; max_dma_bytes\)=2097152 must be an integer "
                                             r"in 1\.\.1048576"):
            hw.memory("m_axi_load", 2 << 20)
        with pytest.raises(ValueError, match=r"memory: 1000000 more bytes of DMA buffers on top of this open's "
                                             r"\d+ exceed max_dma_bytes=1048576"):
            hw.memory("m_axi_load", 1_000_000)
        mem = hw.memory("m_axi_cmd", 4096)
        lo = install_ddr_base(FETCH.engine["kv_region"])   # the boards' DMA memory, past the KV region
        assert lo <= mem.base < lo + DDR_BYTES and mem.size == 4096
        mem.load(mem.base, b"\x01" * 8)
        with pytest.raises(ValueError, match=r"m_axi_cmd memory: 8 bytes at .* leave its DMA buffer"):
            mem.load(mem.base + 4092, bytes(8))
        with pytest.raises(ValueError, match=r"load: id \(a memory of this open\)=1 must be an integer in 0\.\.0"):
            hw.conn.call("load", [b"x"], id=1, addr=mem.base)
        with pytest.raises(ValueError, match=r"expect_sp_out: n \(words\)=0 must be an integer in 1\.\."):
            hw.expect_sp_out(0)
        ld = hw.memory("m_axi_load", 4096)                 # the RX placer's m_axi_rx: that buffer again
        rx = hw.memory("m_axi_rx", share="m_axi_load")
        assert (rx.id, rx.base, rx.size) == (ld.id, ld.base, ld.size) and rx.id == 1
        with pytest.raises(ValueError, match=rf"{where}: ValueError: memory\('m_axi_rx', share='m_axi_cmd'\): a "
                                             r"board shares m_axi_rx's memory with m_axi_load's only"):
            hw.memory("m_axi_rx", share="m_axi_cmd")
