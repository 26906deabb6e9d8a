"""NIC KV installs on simulated boards: a node built with ``NodeConfig.kv_install``
installs every received KV unit into its pool and region itself (its installer writes through
HP2 of the Verilated NodeBoardTop, into the same DDR image the engine's streamer reads on HP3) and
reports every pool command on ``m_axis_kvevent``; the board's DMA front-end queues those events in
its KV_EV registers (mcf_fpga/boards/node_dma.py) and host.board.node_hw.NodeHw hands them to the RTL
executor's PoolMirror, which learns the slot each install chose. Same logits, tokens and KV rows in
DDR as IntModel, one committed install per KV receive of the program, and a lost event is an
error, never a silent gap."""
import dataclasses

import pytest
import torch

from mcf_fpga.sim.boards import SimBoardCluster, install_ddr_base
from mcf_fpga.golden.config import get_config
from mcf_fpga.golden.int_model import IntModel, quantize_model
from mcf_fpga.golden.model import random_weights
from mcf_fpga.host.board.node_hw import BoardError, NodeHw
from mcf_fpga.host.executors.board import run_board
from mcf_fpga.host.executors.runtime import ExecError
from mcf_fpga.host.executors.rtl import sim_ddr_node_config
from mcf_fpga.host.scenario import build_programs
from tests.host.board.nic_installs import check_nic_installs, kv_recvs

#: one worker runs this module's tests: they share Verilator builds, which the other worker would
#: otherwise sit waiting for (tests/conftest.py, "Shared builds")
pytestmark = pytest.mark.xdist_group("test_board_kv_install")

torch.set_num_threads(1)

CFG = get_config("micro").replace(num_layers=1)
IM = IntModel(quantize_model(random_weights(CFG, seed=5), block=16))
#: host-driven node whose NIC installs received KV (K/V in DDR, the installer on HP2's writes):
#: node-kr260's node on the simulator's engine (the fetching one, with installs: test_board_fetch.py)
INSTALL = dataclasses.replace(sim_ddr_node_config("ring"), kv_install=True)


def prog_and_prompt(schedule, nodes=2, S=40, K=3):
    progs, _ = build_programs(CFG, nodes=nodes, topology="ring", prompt_len=S, max_new_tokens=K,
                              schedules=[schedule], chunk=16, block=16, kv_headroom=2.0)
    prompt = torch.randint(0, CFG.vocab_size, (S,), generator=torch.Generator().manual_seed(5)).tolist()
    return progs[schedule], prompt


def check_run(r, prog, prompt, cl, K=3):
    assert torch.equal(r.logits, IM.forward(torch.tensor(prompt))), "logits differ from IntModel"
    assert r.tokens == IM.generate(prompt, K)
    assert all(n > 0 for n in r.kv_rows_checked)            # DDR rows compared with IntModel
    check_nic_installs(r, prog, cl)


def test_host_driven_ring_with_nic_installs_on_simulated_boards():
    """The ring schedule on 2 host-driven boards with DDR latency and HP-port stalls: the host
    posts no KV receive; the installer writes each unit's rows into the HP3 region (through HP2,
    one DDR image) and the host learns its slot from the KV_EV registers."""
    prog, prompt = prog_and_prompt("ring")
    cl = SimBoardCluster(2, "ring", INSTALL, chunk=64, ddr_latency=20, ddr_stall_seed=3)
    r = run_board(prog, IM, prompt, cluster=cl, node_cfg=INSTALL, chunk=64)
    check_run(r, prog, prompt, cl)
    # the DMA buffers sit past the KV region in the one image HP2 and HP3 share
    region = INSTALL.engine["kv_region"]
    assert cl.memory(0).base == install_ddr_base(region) >= region.end


def test_a_lost_event_fails_the_run(monkeypatch):
    """Drop one event on its way from the registers to the mirror: the run fails (the mirror's
    replay or the installer's commit count disagrees), it does not finish with a wrong pool."""
    real = NodeHw._pull_kvevent
    seen = [0]

    def lossy(self):
        out = real(self)
        if out and seen[0] < 3 <= seen[0] + len(out):
            out = out[:3 - seen[0] - 1] + out[3 - seen[0]:]          # the 3rd event vanishes
            seen[0] += 1
        seen[0] += len(out)
        return out
    monkeypatch.setattr(NodeHw, "_pull_kvevent", lossy)
    prog, prompt = prog_and_prompt("ring")
    cl = SimBoardCluster(2, "ring", INSTALL, chunk=64)
    with pytest.raises(ExecError, match=r"node \d: .*the pool answered .*golden"):
        run_board(prog, IM, prompt, cluster=cl, node_cfg=INSTALL, chunk=64, stall_cycles=20_000)


def test_discarded_events_are_a_board_error():
    """Events the front-end discarded (its queue turned off behind the host's back, as a node
    reset does) are a BoardError naming KV_EV_DISCARDED at the next pull; a NodeHw opened without
    kv_event_bits refuses to pull events at all."""
    from mcf_fpga.host.executors.board import _kv_event_bits, _make_hw
    from mcf_fpga.host.executors.rtl import _kv_widths
    from mcf_fpga.sim.cluster import KV_BASE
    from mcf_fpga.spec.kvpool import Opcode
    cl = SimBoardCluster(2, "ring", INSTALL)
    cl.configure()
    params = dict(engine=INSTALL.engine, kv_cmd_bits=8 * _kv_widths(INSTALL)[0], kv_resp_bits=32)
    hw = _make_hw(cl, 0, kv_event_bits=_kv_event_bits(INSTALL), **params)
    hw.axil_write(KV_BASE + 0x1C, 8)                           # pool budget
    assert hw.pull_all("m_axis_kvevent") == []
    cmd = int(Opcode.LOOKUP) | 5 << 4                          # hdl.kvpool.cmd_layout: {opcode:4, kv_id}
    hw.push("s_axis_kvcmd", cmd.to_bytes(hw.kv_cmd_bytes, "little"))
    frames = []
    for _ in range(50):
        cl.step(64)
        frames += hw.pull_all("m_axis_kvevent")
        if frames:
            break
    assert len(frames) == 1 and len(frames[0]) == _kv_event_bits(INSTALL) // 8
    cl.window(0).write(0x8000 + 0x298, 0)                      # KV_EV_CTRL off: the next event is lost
    hw.push("s_axis_kvcmd", cmd.to_bytes(hw.kv_cmd_bytes, "little"))
    with pytest.raises(BoardError, match=r"KV_EV_DISCARDED=1 \(was 0 .*dropped KV pool events"):
        for _ in range(50):
            cl.step(64)
            hw.pull_all("m_axis_kvevent")
    plain = _make_hw(cl, 1, **params)
    with pytest.raises(BoardError, match="opened without kv_event_bits"):
        plain.pull_all("m_axis_kvevent")


def test_nic_installs_through_board_servers():
    """The host-driven ring on two served kv_install boards (mcf serve-board): the coordinator
    opens each board's NodeHw with kv_event_bits and pulls m_axis_kvevent through the server."""
    from mcf_fpga.host.board.board_server import BoardServer, SimBoardHost
    from mcf_fpga.host.board.remote import RemoteBoardCluster
    prog, prompt = prog_and_prompt("ring")
    host = SimBoardHost(2, "ring", INSTALL, chunk=64, ddr_stall_seed=5)
    server = BoardServer(host.endpoints, bind="127.0.0.1", key=b"k").start()
    try:
        with RemoteBoardCluster(server.addresses, prog.topo, INSTALL, key=b"k") as cl:
            r = run_board(prog, IM, prompt, cluster=cl, node_cfg=INSTALL, chunk=64)
    finally:
        server.close()
    assert torch.equal(r.logits, IM.forward(torch.tensor(prompt))), "logits differ from IntModel"
    assert r.tokens == IM.generate(prompt, 3)
    assert [c["committed"] for c in r.kv_installs] == kv_recvs(prog)
