"""The board server (host.board.board_server, wire format host.board.rpc) against hostile
peers, on loopback with a fake board (a register file and a cycle counter: no Verilated model):
unauthenticated and wrong-key clients, a server without the key, altered, replayed, reordered
and reflected messages, bad cycle counts, slow senders, a connection flood, a busy board
announced before any payload is read, crafted headers and sizes, a held board lock, and the
bind/key rule. After each attack the server still serves a legitimate client, no server thread
dies with a traceback, and a message announcing more than the limits allocates nothing.

Limits are small and deadlines short (constructor parameters); every loop is bounded."""
import select
import socket
import struct
import threading
import time
import tracemalloc

import pytest

from mcf_fpga.boards.node_dma import DMA_ID, INFO_REGS
from mcf_fpga.boards.node_top import DMA_BASE
from mcf_fpga.host.board.board_server import BoardEndpoint, BoardServer
from mcf_fpga.host.board.node_hw import _NODE_ID_REG, NODE_ID
from mcf_fpga.host.board.remote import BoardConnectionError, RemoteBoardCluster, _Connection
from mcf_fpga.host.board.rpc import MAGIC, client_handshake, connect, is_loopback

KEY = b"test-key-of-24-bytes-abc"
PREFIX = struct.Struct("<QII")


class FakeWindow:
    """A node board's register window: the ID registers and the DMA front-end's sizes, other
    registers read back what was written."""

    def __init__(self):
        self.regs = {_NODE_ID_REG: NODE_ID, DMA_BASE + INFO_REGS["id"]: DMA_ID,
                     DMA_BASE + INFO_REGS["cmd_bytes"]: 32, DMA_BASE + INFO_REGS["w_beat_bytes"]: 16,
                     DMA_BASE + INFO_REGS["rx_slot_bytes"]: 64, DMA_BASE + INFO_REGS["w_tile_bytes"]: 256,
                     DMA_BASE + INFO_REGS["engines"]: 0xF}

    def read(self, addr):
        return self.regs.get(addr, 0)

    def write(self, addr, value):
        self.regs[addr] = value


class FakeClock:
    def __init__(self):
        self.cycle, self.steps = 0, []

    def step(self, n):
        self.steps.append(n)
        self.cycle += n


class NoAllocator:
    def allocate(self, shape, dtype):
        raise AssertionError(f"no buffer may be allocated here (asked {shape} {dtype})")


@pytest.fixture(autouse=True)
def no_thread_tracebacks(monkeypatch):
    """Every test: no thread may end with an uncaught exception."""
    died = []
    monkeypatch.setattr(threading, "excepthook", lambda args: died.append(args))
    yield
    assert not died, f"threads died: {[(a.thread.name, a.exc_type, a.exc_value) for a in died]}"


@pytest.fixture
def make_server():
    servers = []

    def make(**kw):
        clock = FakeClock()
        ep = BoardEndpoint("fake", FakeWindow(), NoAllocator(), clock, reset=lambda: None,
                           clock_kind="sim", tick=clock.step)
        logs = []
        opts = dict(bind="127.0.0.1", key=KEY, handshake_timeout=2.0, message_timeout=2.0,
                    idle_timeout=20.0, max_connections=4, max_header=4096, max_blobs=4,
                    max_payload=1 << 16, max_cycles=1000, lock_timeout=0.5, busy_wait=1.0,
                    log=logs.append)
        opts.update(kw)
        srv = BoardServer([ep], **opts).start()
        srv.ep, srv.clock, srv.logs, srv.addr = ep, clock, logs, srv.addresses[0]
        servers.append(srv)
        return srv
    yield make
    for s in servers:
        s.close()


def legit(srv, key=KEY) -> _Connection:
    return _Connection(*srv.addr, timeout=5.0, connect_timeout=5.0, key=key)


def wait_for(cond, what, limit=100):
    """Poll ``cond`` every 0.05 s, at most ``limit`` times."""
    for _ in range(limit):
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def assert_serves(srv, value=7):
    """A new coordinator connects, writes and reads a register; the board is then free again."""
    wait_for(lambda: srv.ep.client is None, "the board to be free")
    c = legit(srv)
    try:
        assert c.call("axil_write", addr=0x10, value=value)[0] == 0
        assert c.call("axil_read", addr=0x10)[0] == [value, 0]
    finally:
        c.close()


def assert_logged(srv, text):
    wait_for(lambda: any(text in line for line in srv.logs), f"log line with {text!r}: {srv.logs}")


def closed_by_peer(sock, wait=5.0) -> bool:
    """Whether the peer closes ``sock`` within ``wait`` s (whatever it sent before is skipped)."""
    sock.settimeout(wait)
    try:
        for _ in range(64):
            if not sock.recv(1 << 16):
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return False


def channel(srv, key=KEY):
    """A raw authenticated channel that has read the server's "ready"."""
    sock = connect(*srv.addr, 5.0)
    ch = client_handshake(sock, key, 5.0)
    head, _ = ch.recv(5.0)
    assert head["result"] == "ready" and head["limits"]["max_cycles"] == srv.max_cycles
    return ch


class _Tap:
    def __init__(self):
        self.data = []

    def settimeout(self, t):
        pass

    def sendall(self, b):
        self.data.append(bytes(b))


def frame(ch, header, blobs=()) -> bytes:
    """The bytes ``ch.send`` would put on the wire (its sequence number is used up)."""
    real, ch.sock = ch.sock, _Tap()
    try:
        ch.send(header, blobs)
        return ch.sock.data[0]
    finally:
        ch.sock = real


# ---------------------------------------------------------------- authentication


def test_unauthenticated_and_wrong_key_clients_refused(make_server):
    """A wrong key, no key, another protocol, an MCF-BOARD/1 client and a silent peer are
    refused without reaching the board; the server keeps serving."""
    srv = make_server()
    with pytest.raises(BoardConnectionError, match="refused the key"):
        legit(srv, key=b"wrong-key-of-24-bytes-xx")
    with pytest.raises(BoardConnectionError, match="refused the key"):
        legit(srv, key=b"")
    assert_logged(srv, "client failed the key check")
    for junk in (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"\0" * 32):      # HTTP; a v1 client's answer
        with socket.create_connection(srv.addr, timeout=5) as s:
            assert s.recv(len(MAGIC), socket.MSG_WAITALL) == MAGIC
            s.sendall(junk)
            assert closed_by_peer(s)
    assert_logged(srv, "not an MCF-BOARD/2 client")
    with socket.create_connection(srv.addr, timeout=5) as s:               # silent: the handshake deadline
        assert closed_by_peer(s, wait=10)
    assert_logged(srv, "timed out: handshake")
    assert srv.ep.window.regs.get(0x10) is None and srv.clock.cycle == 0
    assert_serves(srv)


def _fake_server(answer):
    """A one-shot server speaking MCF-BOARD/2's first step, then ``answer(nonces)``."""
    lst = socket.create_server(("127.0.0.1", 0))
    lst.settimeout(10)

    def run():
        try:
            conn, _ = lst.accept()
            with conn:
                conn.settimeout(5)
                conn.sendall(answer(None))
                conn.recv(len(MAGIC) + 64, socket.MSG_WAITALL)
                conn.sendall(answer(True))
                conn.recv(1)
        except OSError:
            pass
        finally:
            lst.close()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return lst.getsockname()[:2], t


def test_client_refuses_a_server_without_the_key():
    """A server that answers "OK" without knowing the key, and one speaking MCF-BOARD/1: the
    client refuses both with an error naming why."""
    addr, t = _fake_server(lambda step: MAGIC + b"n" * 32 if step is None else b"OK" + b"\0" * 32)
    with pytest.raises(BoardConnectionError, match="server failed the key check: it does not know MCF_BOARD_KEY"):
        RemoteBoardCluster([addr], "ring", None, key=KEY, timeout=5, connect_timeout=5)
    t.join(10)
    addr, t = _fake_server(lambda step: b"MCF-BOARD/1\n" + b"n" * 32 if step is None else b"")
    with pytest.raises(BoardConnectionError, match="speaks MCF-BOARD/1, this client MCF-BOARD/2"):
        RemoteBoardCluster([addr], "ring", None, key=KEY, timeout=5, connect_timeout=5)
    t.join(10)


def test_empty_key_works_on_loopback_only(make_server):
    """With no key the protocol still runs on loopback; any other address needs a key of 16
    bytes or more (one error naming MCF_BOARD_KEY and the limit)."""
    srv = make_server(key=b"")
    c = legit(srv, key=b"")
    assert c.call("cycle")[0] == 0
    c.close()
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3") and not is_loopback("::")
    for key in (b"", b"k" * 15):
        with pytest.raises(ValueError, match=f"refusing to serve on 0.0.0.0: MCF_BOARD_KEY must be at least "
                                             f"16 bytes \\(it has {len(key)}\\)"):
            BoardServer([srv.ep], bind="0.0.0.0", key=key)
    BoardServer.check_key(b"k" * 16, "0.0.0.0")
    BoardServer.check_key(b"", "127.0.0.2")


def test_serve_board_refuses_a_public_bind_without_key(monkeypatch, capsys):
    """``mcf serve-board --bind 0.0.0.0`` without MCF_BOARD_KEY: a usage error before any board
    is opened (nothing listens)."""
    from mcf_fpga.host.cli import main
    monkeypatch.delenv("MCF_BOARD_KEY", raising=False)
    assert main(["serve-board", "--bind", "0.0.0.0", "--simulate-boards", "2"]) == 2
    err = capsys.readouterr().err
    assert "MCF_BOARD_KEY must be at least 16 bytes" in err and "0.0.0.0" in err
    monkeypatch.setenv("MCF_BOARD_KEY", "short")
    assert main(["serve-board", "--bind", "::", "--simulate-boards", "2"]) == 2
    assert "(it has 5)" in capsys.readouterr().err
    assert main(["serve-board", "--max-connections", "0"]) == 2
    assert "--max-connections=0 must be >= 1" in capsys.readouterr().err


# ---------------------------------------------------------------- message authentication


def test_altered_message_closes_the_connection(make_server):
    """A bit flipped in the header, the payload or the MAC, and a sequence number rewritten to
    pass the order check: each closes that connection before anything is done."""
    srv = make_server()
    for where in ("header", "blob", "mac", "seq"):
        ch = channel(srv)
        if where == "seq":                                  # a replay renumbered to pass the order check
            first = frame(ch, {"op": "axil_write", "addr": 0x10, "value": 0})
            ch.sock.sendall(first)
            assert ch.recv(5.0)[0] == {"result": 0}
            del srv.ep.window.regs[0x10]
            data = bytearray(first)
            data[:8] = struct.pack("<Q", 1)
        else:
            data = bytearray(frame(ch, {"op": "axil_write", "addr": 0x10, "value": 99}, [b"payload"]))
            k = {"header": data.index(b"99"), "blob": len(data) - 32 - 3, "mac": len(data) - 1}[where]
            data[k] ^= 1
        ch.sock.sendall(bytes(data))
        assert closed_by_peer(ch.sock), where
        ch.close()
    wait_for(lambda: sum("message authentication failed" in line for line in srv.logs) == 4,
             f"four MAC failures logged: {srv.logs}")
    assert srv.ep.window.regs.get(0x10) is None
    assert_serves(srv)


def test_replayed_reordered_and_reflected_messages_refused(make_server):
    """A message sent again, a later message sent first, and the server's own message sent back
    to it: refused, the connection closed, the request not executed."""
    srv = make_server()
    ch = channel(srv)
    first = frame(ch, {"op": "axil_write", "addr": 0x20, "value": 1})
    ch.sock.sendall(first)
    assert ch.recv(5.0)[0] == {"result": 0}
    srv.ep.window.regs[0x20] = 5
    ch.sock.sendall(first)                                  # replay
    assert closed_by_peer(ch.sock)
    assert srv.ep.window.regs[0x20] == 5
    assert_logged(srv, "message sequence number 0, expected 1: replayed, reordered or lost")
    ch.close()

    ch = channel(srv)
    m0 = frame(ch, {"op": "axil_write", "addr": 0x20, "value": 2})
    m1 = frame(ch, {"op": "axil_write", "addr": 0x20, "value": 3})
    ch.sock.sendall(m1 + m0)                                # reordered
    assert closed_by_peer(ch.sock)
    assert srv.ep.window.regs[0x20] == 5
    assert_logged(srv, "message sequence number 1, expected 0")
    ch.close()

    # reflection: the server's "ready" (its message 0) sent back as the client's message 0
    sock = connect(*srv.addr, 5.0)
    ch = client_handshake(sock, KEY, 5.0)
    sock.settimeout(5)
    ready = b""
    while len(ready) < PREFIX.size:
        ready += sock.recv(PREFIX.size - len(ready))
    _, nhead, nblobs = PREFIX.unpack(ready)
    rest = sock.recv(nhead + 32, socket.MSG_WAITALL)
    assert nblobs == 0 and len(rest) == nhead + 32
    sock.sendall(ready + rest)
    assert closed_by_peer(sock)
    sock.close()
    assert_serves(srv)


# ---------------------------------------------------------------- request limits


@pytest.mark.parametrize("op", ["step", "tick"])
def test_bad_cycle_counts_refused(make_server, op):
    """step/tick with a negative, huge, boolean, fractional, text or missing count: an error
    answer naming the field and max_cycles, the clock unchanged, the connection still served; a
    count above max_cycles from the client goes as several requests."""
    srv = make_server()
    c = legit(srv)
    for n in (-1, 10 ** 15, 2 ** 64 - 1, True, 1.5, 1e15, "x", None, [3]):
        with pytest.raises(ValueError, match=f"{op}: n \\(cycles; max_cycles\\)=.* must be an integer in 0..1000"):
            c.call(op, n=n)
    assert srv.clock.cycle == 0 and srv.clock.steps == []
    c.call(op, n=1000)
    c.cycles(op, 2500)
    assert srv.clock.steps == [1000, 1000, 1000, 500] and srv.clock.cycle == 3500
    with pytest.raises(ValueError, match=f"{op} takes a cycle count >= 0, got -1"):
        c.cycles(op, -1)
    c.close()
    assert_serves(srv)


def test_bad_requests_change_nothing(make_server):
    """Unknown or missing op, a register value out of range, open with unknown options or more
    DMA memory than max_dma_bytes: error answers naming the field; nothing written or allocated."""
    srv = make_server(max_dma_bytes=1 << 20)
    c = legit(srv)
    with pytest.raises(ValueError, match="unknown request None"):
        c.call(None)
    with pytest.raises(ValueError, match="axil_write: value=4294967296 must be an integer in 0..4294967295"):
        c.call("axil_write", addr=0x10, value=1 << 32)
    engine = {"pn": 2, "pk": 8}
    with pytest.raises(ValueError, match="open: the rings and RX slots need .* bytes of DMA buffers, more than "
                                         "max_dma_bytes=1048576"):
        c.call("open", engine=engine, kv_cmd_bits=64, kv_resp_bits=32, options={"ring_bytes": {"w": 1 << 20}})
    with pytest.raises(ValueError, match="open: options \\['evil'\\] must be among ring_bytes"):
        c.call("open", engine=engine, kv_cmd_bits=64, kv_resp_bits=32, options={"evil": 1})
    with pytest.raises(ValueError, match="open: rx_slots=70000 must be an integer in 1..65535"):
        c.call("open", engine=engine, kv_cmd_bits=64, kv_resp_bits=32, options={"rx_slots": 70000})
    with pytest.raises(ValueError, match="push before open"):
        c.call("push", [b"x"], port="s_axis_cmd")
    with pytest.raises(ValueError, match="exceeds the server's max_payload=65536"):
        c.call("push", [b"x" * 65537], port="s_axis_cmd")
    assert srv.ep.window.regs.get(0x10) is None and srv.ep.hw is None
    assert c.call("cycle")[0] == 0                      # still served
    c.close()


def test_lock_wait_times_out(make_server):
    """A board whose lock stays held (another board of the server stepping): an error answer
    naming lock_timeout instead of a hang; served again once the lock is free."""
    srv = make_server()
    c = legit(srv)
    srv.ep.lock.acquire()
    try:
        with pytest.raises(TimeoutError, match="stayed locked for lock_timeout=0.5 s .*nothing was done"):
            c.call("axil_write", addr=0x10, value=1)
    finally:
        srv.ep.lock.release()
    assert srv.ep.window.regs.get(0x10) is None
    assert c.call("axil_write", addr=0x10, value=2)[0] == 0
    c.close()


# ---------------------------------------------------------------- slow peers and floods


def _trickle(sock, data: bytes) -> int:
    """Send ``data`` one byte per 0.2 s until the peer closes; how many bytes went out."""
    for k in range(len(data)):
        try:
            sock.sendall(data[k:k + 1])
        except OSError:
            return k
        if select.select([sock], [], [], 0.2)[0]:
            try:
                if not sock.recv(1 << 16, socket.MSG_PEEK | socket.MSG_DONTWAIT):
                    return k + 1
            except BlockingIOError:
                pass
            except ConnectionResetError:
                return k + 1
    return len(data)


def test_slow_handshake_dropped_while_others_are_served(make_server):
    """A client trickling its handshake one byte per 0.2 s is dropped at the handshake deadline
    (one deadline, not one per read); a legitimate client is served meanwhile."""
    srv = make_server(handshake_timeout=1.0)
    s = socket.create_connection(srv.addr, timeout=5)
    assert s.recv(len(MAGIC) + 32, socket.MSG_WAITALL)[:len(MAGIC)] == MAGIC
    done = []
    t = threading.Thread(target=lambda: done.append(_trickle(s, MAGIC + b"\0" * 64)))
    t.start()
    assert_serves(srv)                                   # while the trickle goes on
    t.join(30)
    assert done and done[0] < len(MAGIC) + 64, "the slow handshake was not cut off"
    s.close()
    assert_logged(srv, "timed out: handshake")


def test_slow_message_dropped_at_its_deadline(make_server):
    """An authenticated client trickling a request one byte per 0.2 s is dropped at the message
    deadline; the request is not executed and the board is free for the next coordinator."""
    srv = make_server(message_timeout=1.0)
    ch = channel(srv)
    data = frame(ch, {"op": "axil_write", "addr": 0x10, "value": 1, "pad": "x" * 40})
    sent = _trickle(ch.sock, data)
    assert sent < len(data), "the slow message was not cut off"
    ch.close()
    assert_logged(srv, "timed out: message")
    assert srv.ep.window.regs.get(0x10) is None
    assert_serves(srv)


def test_connection_flood_is_capped(make_server):
    """Connections beyond max_connections are closed at once; the coordinator already served
    keeps being served, and a new one is served once the flood is gone."""
    srv = make_server(max_connections=4, handshake_timeout=5.0)
    c = legit(srv)
    flood = []
    try:
        for _ in range(10):
            flood.append(socket.create_connection(srv.addr, timeout=5))
        greeted = 0
        for s in flood:
            head = s.recv(len(MAGIC), socket.MSG_WAITALL)
            if head == MAGIC:
                greeted += 1
            else:
                assert head == b""                       # closed without a word
        assert greeted == 3                               # 4 minus the coordinator's connection
        assert srv.connections(0) == 4
        assert c.call("axil_write", addr=0x10, value=3)[0] == 0
        assert c.call("axil_read", addr=0x10)[0] == [3, 0]
        assert_logged(srv, "refused: max_connections=4 connections are open")
    finally:
        for s in flood:
            s.close()
        c.close()
    wait_for(lambda: srv.connections(0) == 0, "the flood's connections to end")
    assert_serves(srv)


def test_busy_answer_comes_before_any_payload(make_server):
    """A second (authenticated) coordinator is told "busy" right after the handshake, before it
    sends anything; the server closes without reading the huge payload it then announces, well
    before the message deadline."""
    srv = make_server(message_timeout=60.0, max_payload=1 << 30)
    c = legit(srv)
    sock = connect(*srv.addr, 5.0)
    ch = client_handshake(sock, KEY, 5.0)
    head, _ = ch.recv(5.0)
    assert head["error"] == "OSError" and "board busy: serving 127.0.0.1:" in head["message"]
    try:
        sock.sendall(PREFIX.pack(0, 20, 1) + struct.pack("<Q", 1 << 29))   # 512 MiB announced
    except OSError:
        pass
    assert closed_by_peer(sock, wait=20)
    sock.close()
    with pytest.raises(OSError, match="board busy: serving"):
        legit(srv)
    assert c.call("cycle")[0] == 0
    c.close()
    assert_serves(srv)


# ---------------------------------------------------------------- crafted headers and sizes


CRAFTED = {            # name: (header bytes, what the server's log names)
    "Infinity": (b"[Infinity]", "Infinity is not a JSON number"),
    "NaN": (b'{"op": "step", "n": NaN}', "NaN is not a JSON number"),
    "-Infinity": (b'{"op": "step", "n": -Infinity}', "-Infinity is not a JSON number"),
    "deep nesting": (b"[" * 100_000 + b"]" * 100_000, "RecursionError"),
    "deep object": (b'{"a":' * 40_000 + b"1" + b"}" * 40_000, "RecursionError"),
    "huge int": (b'{"op": "step", "n": ' + b"9" * 5000 + b"}", "integer string conversion"),
    "invalid UTF-8": (b'{"op": "\xff\xfe"}', "UnicodeDecodeError"),
    "not JSON": (b"\x00\x01\x02", "JSONDecodeError"),
    "not an object": (b'"cycle"', "a JSON object expected, got str"),
    "truncated": (b'{"op": "cycle"', "JSONDecodeError"),
}


@pytest.mark.parametrize("name", list(CRAFTED))
def test_crafted_header_is_a_protocol_error(make_server, name):
    """A header from a key holder that is not strict JSON (NaN, Infinity, 10^5 levels of nesting,
    a 5000-digit integer, invalid UTF-8, not an object): a protocol error that closes only that
    connection (logged, no thread traceback); another coordinator is served after, and one
    connected before keeps being served."""
    srv = make_server(max_header=1 << 18)
    ch = channel(srv)
    head, expect = CRAFTED[name]
    ch.send_raw(head)
    assert closed_by_peer(ch.sock)
    ch.close()
    assert_logged(srv, "malformed message header")
    assert_logged(srv, expect)
    assert not any("failed:" in line for line in srv.logs), srv.logs
    assert_serves(srv)


def _authenticated_socket(srv):
    ch = channel(srv)
    return ch.sock


@pytest.mark.parametrize("prefix, sizes, expect", [
    (PREFIX.pack(0, 4097, 0), b"", "message header of 4097 bytes exceeds max_header=4096"),
    (PREFIX.pack(0, 2 ** 32 - 1, 0), b"", "exceeds max_header=4096"),
    (PREFIX.pack(0, 10, 5), b"", "message with 5 payloads exceeds max_blobs=4"),
    (PREFIX.pack(0, 2, 2 ** 32 - 1), b"", "exceeds max_blobs=4"),
    (PREFIX.pack(0, 2, 1), struct.pack("<q", -1),
     "message payloads of 18446744073709551615 bytes exceed max_payload=65536"),
    (PREFIX.pack(0, 2, 2), struct.pack("<QQ", 1 << 15, (1 << 15) + 1), "exceed max_payload=65536"),
    (PREFIX.pack(7, 2, 0), b"", "message sequence number 7, expected 0"),
])
def test_crafted_sizes_refused_before_reading(make_server, prefix, sizes, expect):
    """Sizes over the limits (or "negative" ones, i.e. 2**64-1) and a wrong sequence number
    are refused from the prefix: the connection closes at once, without the rest being sent."""
    srv = make_server(message_timeout=60.0)
    sock = _authenticated_socket(srv)
    sock.sendall(prefix + sizes)
    assert closed_by_peer(sock, wait=20)
    sock.close()
    assert_logged(srv, expect)
    assert_serves(srv)


def test_memory_stays_bounded(make_server):
    """A message announcing 1 GiB allocates nothing on the server; one announcing exactly the
    limit and sending little allocates about the limit, not more (tracemalloc, all threads)."""
    srv = make_server(max_payload=1 << 20, message_timeout=1.0)
    tracemalloc.start()
    try:
        sock = _authenticated_socket(srv)
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        sock.sendall(PREFIX.pack(0, 2, 1) + struct.pack("<Q", 1 << 30))
        assert closed_by_peer(sock)
        sock.close()
        assert_logged(srv, "exceed max_payload=1048576")
        over = tracemalloc.get_traced_memory()[1] - base
        assert over < 1 << 18, f"refusing a 1 GiB announcement took {over} bytes"

        wait_for(lambda: srv.ep.client is None, "the board to be free")
        sock = _authenticated_socket(srv)
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        sock.sendall(PREFIX.pack(0, 2, 1) + struct.pack("<Q", 1 << 20) + b"{}" + b"x" * 100)
        assert closed_by_peer(sock, wait=10)            # the message deadline
        sock.close()
        within = tracemalloc.get_traced_memory()[1] - base
        assert within < (1 << 20) + (1 << 18), f"a message within the limit took {within} bytes"
    finally:
        tracemalloc.stop()
    assert_serves(srv)


def test_closing_the_server_ends_its_connections(make_server):
    """``close()`` ends served and handshaking connections (their threads finish)."""
    srv = make_server()
    c = legit(srv)
    s = socket.create_connection(srv.addr, timeout=5)
    srv.close()
    assert closed_by_peer(s) and closed_by_peer(c.sock)
    s.close()
    c.close()
    wait_for(lambda: srv.connections(0) == 0, "the connections to end")


def test_idle_coordinator_dropped(make_server):
    """A coordinator silent for ``idle_timeout`` is dropped and the board freed for the next."""
    srv = make_server(idle_timeout=0.5)
    c = legit(srv)
    assert closed_by_peer(c.sock)
    c.close()
    assert_logged(srv, "timed out")
    assert_serves(srv)


def test_unserialisable_answer_is_an_error_answer(make_server):
    """A board answer JSON cannot carry (here NaN from a fake clock) becomes an error answer; the
    connection stays served."""
    srv = make_server()
    c = legit(srv)
    srv.clock.cycle = float("nan")
    with pytest.raises(RuntimeError, match="RuntimeError: the board's answer to 'cycle' is not JSON: Out of range float"):
        c.call("cycle")
    srv.clock.cycle = 5
    assert c.call("cycle")[0] == 5
    c.close()
