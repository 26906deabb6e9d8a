"""Multi-board runs through board servers (host.board.board_server, ``mcf serve-board``) over TCP
on localhost: one server hosts two simulated boards (mcf_fpga/sim/boards.py) as two endpoints, and the
coordinator's run_board drives them through RemoteHw (host.board.remote). Logits and tokens equal
IntModel bit for bit; unreachable hosts, a wrong board count, a wrong key and board-side errors
give clear errors naming the board."""
import json
import socket

import pytest
import torch

from mcf_fpga.golden.config import get_config
from mcf_fpga.golden.int_model import IntModel, quantize_model
from mcf_fpga.golden.model import random_weights
from mcf_fpga.host.board.board_server import BoardEndpoint, BoardServer, SimBoardHost, check_fresh
from mcf_fpga.host.board.node_hw import BoardError
from mcf_fpga.host.board.remote import BoardConnectionError, RemoteBoardCluster, parse_boards
from mcf_fpga.host.board.wall_clock import WallClock
from mcf_fpga.host.cli import main
from mcf_fpga.host.executors import run
from mcf_fpga.host.executors.rtl import sim_node_config
from mcf_fpga.host.scenario import build_programs

#: one worker runs this module's tests: they share Verilator builds, which the other worker would
#: otherwise sit waiting for (tests/conftest.py, "Shared builds")
pytestmark = pytest.mark.xdist_group("test_board_remote")

torch.set_num_threads(1)

CFG = get_config("micro").replace(num_layers=1)
BLOCK = 16
IM = IntModel(quantize_model(random_weights(CFG, seed=5), block=BLOCK))
NCFG = sim_node_config("ring")


@pytest.fixture(scope="module")
def served():
    """Two simulated boards served on two localhost ports (key "k"); ``.host`` = their SimBoardHost."""
    host = SimBoardHost(2, "ring", NCFG, chunk=64)
    server = BoardServer(host.endpoints, bind="127.0.0.1", key=b"k").start()
    server.host = host
    yield server
    server.close()


def _program(schedule, S, K):
    progs, _ = build_programs(CFG, nodes=2, topology="ring", prompt_len=S, max_new_tokens=K,
                              schedules=[schedule], chunk=16, block=BLOCK, kv_headroom=2.0)
    return progs[schedule]


def test_program_through_board_servers_equals_golden(served):
    """Two runs back to back on the same served boards (the second reuses the DMA buffers and
    starts from a reset): IntModel's logits and tokens, golden's KV layout."""
    for schedule, S, K, seed in (("mars", 24, 2, 3), ("ring", 20, 1, 4)):
        prog = _program(schedule, S, K)
        prompt = torch.randint(0, CFG.vocab_size, (S,), generator=torch.Generator().manual_seed(seed)).tolist()
        with RemoteBoardCluster(served.addresses, prog.topo, NCFG, key=b"k") as cl:
            assert cl.simulated and cl.n == 2
            r = run(prog, IM, prompt, backend="board", cluster=cl, chunk=64)
        assert torch.equal(r.logits, IM.forward(torch.tensor(prompt))), "logits differ from IntModel"
        assert r.tokens == IM.generate(prompt, K)
        assert r.layout == run(prog, IM, prompt, backend="golden").layout == prog.expected_layout()
        assert r.ttft_cycles > 0


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_and_wrong_count():
    """Nothing listening: a clear error naming the host; an address that drops SYNs (or has no
    route): the connect timeout's error, not a hang; --boards count != --nodes names both."""
    port = _free_port()
    with pytest.raises(BoardConnectionError, match=f"board 127.0.0.1:{port}: cannot connect"):
        RemoteBoardCluster([("127.0.0.1", port)], "ring", NCFG, connect_timeout=2)
    with pytest.raises(BoardConnectionError, match="board 10.255.255.1:7820: cannot connect within 0.5 s"):
        RemoteBoardCluster("10.255.255.1:7820", "ring", NCFG, connect_timeout=0.5)
    with pytest.raises(ValueError, match="--boards lists 3 boards, --nodes is 2"):
        parse_boards("a:1,b:2,c:3", nodes=2)
    with pytest.raises(ValueError, match="--boards: 'a:x' is not host:port"):
        parse_boards("a:x,b:2")


def test_board_side_errors_name_the_board(served):
    """Wrong key, a busy board, requests the board refuses: errors re-raised with the board's
    address; a server that accepts and stays silent: the handshake's timeout."""
    (h0, p0), (h1, p1) = served.addresses
    with pytest.raises(BoardConnectionError, match=f"board {h0}:{p0}: the board server refused the key"):
        RemoteBoardCluster(served.addresses, "ring", NCFG, key=b"wrong")
    with RemoteBoardCluster(served.addresses, "ring", NCFG, key=b"k") as cl:
        with pytest.raises(OSError, match=f"board {h0}:{p0}: OSError: board busy: serving"):
            RemoteBoardCluster(served.addresses, "ring", NCFG, key=b"k")
        b0 = cl.boards[0]
        assert b0.identify()["cmd_bytes"] > 0
        with pytest.raises(ValueError, match=f"board {h0}:{p0}: ValueError: push before open"):
            b0.push("s_axis_cmd", b"\0" * 8)
        with pytest.raises(ValueError, match=f"board {h0}:{p0}: .*node register address 32768"):
            b0.axil_read(0x8000)                 # the DMA window is the server's own
        cl.configure()
        hw = cl.hw(1, engine=NCFG.engine, kv_cmd_bits=64, kv_resp_bits=32)
        with pytest.raises(ValueError, match=f"board {h1}:{p1}: ValueError: no input stream 's_axis_x'"):
            hw.push("s_axis_x", b"1")
        with pytest.raises(BoardError, match=f"board {h1}:{p1}: BoardError: .*W_BEAT_BYTES"):
            cl.hw(1, engine=dict(NCFG.engine, pn=8), kv_cmd_bits=64, kv_resp_bits=32)
    silent = socket.create_server(("127.0.0.1", 0))
    try:
        with pytest.raises(BoardConnectionError, match="board 127.0.0.1:[0-9]+: cannot connect within 0.5 s: timed out"):
            RemoteBoardCluster([silent.getsockname()[:2]], "ring", NCFG, timeout=0.5, connect_timeout=0.5)
    finally:
        silent.close()


def test_a_used_board_is_not_fresh(served):
    """A real board's reset only checks it is fresh (no soft reset of the PL): after a run the
    counters it names are nonzero; a reset board passes."""
    w = served.host.cluster.window(0)
    served.host.cluster.node(0).reset()
    check_fresh(w)
    with RemoteBoardCluster(served.addresses, "ring", NCFG, key=b"k") as cl:
        prog = _program("mars", 17, 1)
        run(prog, IM, list(range(17)), backend="board", cluster=cl, chunk=64)
    with pytest.raises(BoardError, match="has run since its overlay was loaded .*CMD POSTED.*reload the overlay"):
        check_fresh(w)


def test_mcf_run_with_boards(served, capsys, monkeypatch):
    """``mcf run --backend board --boards``: the command through the served boards; a wrong
    count, a bad address and an unreachable board are clear errors naming them."""
    monkeypatch.setenv("MCF_BOARD_KEY", "k")
    boards = ",".join(f"{h}:{p}" for h, p in served.addresses)
    args = ["run", "--backend", "board", "--nodes", "2", "--layers", "1", "--prompt-len", "24",
            "--max-new-tokens", "2", "--schedules", "mars", "--json"]
    assert main(args + ["--boards", boards]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["backend"] == "board" and out["matches_golden"] is True
    assert out["runs"]["mars"]["tokens"] == out["runs"]["mars"]["golden_tokens"]
    assert main(args + ["--boards", boards + ",127.0.0.1:9"]) == 2
    assert "--boards lists 3 boards, --nodes is 2" in capsys.readouterr().err
    assert main(args + ["--boards", "127.0.0.1:0,x"]) == 2
    assert "--boards: '127.0.0.1:0' is not host:port" in capsys.readouterr().err
    port = _free_port()
    assert main(args + ["--boards", f"{boards.split(',')[0]},127.0.0.1:{port}"]) == 1     # runtime: unreachable
    assert f"board 127.0.0.1:{port}: cannot connect" in capsys.readouterr().err
    assert main(["run", "--boards", boards, "--prompt-len", "16"]) == 2
    assert "--boards needs --backend board" in capsys.readouterr().err


def test_mcf_serve_board_bad_input(capsys):
    """``mcf serve-board`` without a board (this machine: a runtime failure, exit 1) and with bad
    numbers (usage errors, exit 2): clear errors."""
    assert main(["serve-board", "--port", "0"]) == 2
    assert "--port=0 must be in 1..65535" in capsys.readouterr().err
    assert main(["serve-board", "--simulate-boards", "1"]) == 2
    assert "--simulate-boards=1 must be >= 2" in capsys.readouterr().err
    assert main(["serve-board", "--port", str(_free_port())]) == 1     # runtime: no board here
    assert "no UIO device named 'mcf'" in capsys.readouterr().err


def test_real_board_clock_is_the_coordinators(served):
    """A server whose clock is ``wall`` (a real board): the coordinator keeps one WallClock for
    every board (cycle counts up, step(n) lets at least n cycles pass); mixing such a board with
    simulated ones is refused, naming both."""
    wall = BoardEndpoint("wall0", served.host.cluster.window(0), served.host.cluster.memory(0),
                         WallClock(), reset=lambda: None, clock_kind="wall")
    server = BoardServer([wall], bind="127.0.0.1", key=b"k").start()
    try:
        (hw_, pw), = server.addresses
        with RemoteBoardCluster(server.addresses, "ring", NCFG, key=b"k") as cl:
            assert not cl.simulated and cl.boards[0].clock is cl.wall
            c0 = cl.boards[0].cycle
            cl.step(20_000)
            assert cl.boards[0].cycle >= c0 + 20_000
        with pytest.raises(ValueError, match=f"boards mix real and simulated ones: .*board {hw_}:{pw}': 'wall'"):
            RemoteBoardCluster([served.addresses[0], (hw_, pw)], "ring", NCFG, key=b"k")
    finally:
        server.close()


def test_long_steps_are_split_to_the_servers_limit(served):
    """A server with ``max_cycles=100`` over the same simulated boards: the coordinator's
    ``step(250)`` goes as ticks of at most 100 and the boards still advance in lockstep by 250;
    a tick above the limit is refused, naming it, and changes nothing; so is a push beyond
    ``max_queued_bytes``."""
    server = BoardServer(served.host.endpoints, bind="127.0.0.1", key=b"k", max_cycles=100,
                         max_queued_bytes=4096).start()
    try:
        with RemoteBoardCluster(server.addresses, "ring", NCFG, key=b"k") as cl:
            c0 = [b.cycle for b in cl.boards]
            cl.step(250)
            assert [b.cycle for b in cl.boards] == [c + 250 for c in c0]
            with pytest.raises(ValueError, match=r"tick: n \(cycles; max_cycles\)=101 must be an integer in 0..100"):
                cl.boards[0].conn.call("tick", n=101)
            cl.step(0)
            assert [b.cycle for b in cl.boards] == [c + 250 for c in c0]
            cl.configure()
            hw = cl.hw(0, engine=NCFG.engine, kv_cmd_bits=64, kv_resp_bits=32)
            hw.push("s_axis_sp", bytes(4096))
            before = hw.pending("s_axis_sp")
            assert before > 0
            with pytest.raises(ValueError, match=f"push of 4 bytes: {before} bytes are queued on the board's "
                                                 f"inputs already, max_queued_bytes=4096"):
                hw.push("s_axis_sp", bytes(4))
            assert hw.pending("s_axis_sp") == before
    finally:
        server.close()


def test_mcf_serve_board_simulated_in_a_subprocess(monkeypatch):
    """``mcf serve-board --simulate-boards 2`` in its own process and ``mcf run --boards`` here."""
    import os
    import subprocess
    import sys
    import threading
    port = _free_port()
    code = ("import sys; from mcf_fpga.host.cli import main; "
            f"sys.exit(main(['serve-board', '--simulate-boards', '2', '--bind', '127.0.0.1', '--port', '{port}']))")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=os.getcwd(), stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, MCF_BOARD_KEY="sub"))
    try:
        lines, ready = [], threading.Event()

        def read():
            for line in proc.stderr:
                lines.append(line)
                if sum("listening on" in x for x in lines) == 2:
                    ready.set()
            ready.set()                     # the server exited: fail now, not after the wait
        threading.Thread(target=read, daemon=True).start()
        assert ready.wait(600) and proc.poll() is None, f"server did not come up: {''.join(lines)}"
        assert f"listening on 127.0.0.1:{port}" in "".join(lines)
        monkeypatch.setenv("MCF_BOARD_KEY", "sub")
        assert main(["run", "--backend", "board", "--nodes", "2", "--layers", "1", "--prompt-len", "17",
                     "--max-new-tokens", "1", "--schedules", "mars", "--no-progress",
                     "--boards", f"127.0.0.1:{port},127.0.0.1:{port + 1}"]) == 0
    finally:
        proc.terminate()
        proc.wait(30)
        proc.stderr.close()
