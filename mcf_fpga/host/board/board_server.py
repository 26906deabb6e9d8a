"""The board server (``mcf serve-board``): one node board's ``hw`` interface (``NodeHw`` on its
register window and DMA buffers) served over TCP to a coordinator (``host.board.remote``) in the
wire format of ``host.board.rpc``.

A :class:`BoardEndpoint` is one board: ``window``, DMA ``allocator``, ``clock``, how to ``reset``
it and what its clock is (``"wall"``: elapsed time on a real board, ``"sim"``: simulator cycles).
Requests (JSON header ``{"op": ..., ...}``, bytes as blobs) and answers (``{"result": ...}`` or
``{"error": type name, "message": ...}``):

========  =====================================================================================
hello     ``{"identify": the DMA front-end's sizes, "clock": "wall" | "sim", "board": name}``
reset     put the node in its reset state (simulated: reset the model; a real board has no soft
          reset of the PL yet, so it only checks that nothing has run since the overlay was loaded)
open      a fresh ``NodeHw`` with the given parameters (its DMA buffers are reused from the last
          ``open`` when the sizes match, so runs after runs do not exhaust the buffer memory)
push, pull_all, pending, axil_read, axil_write, cycle, step: the ``NodeHw`` calls (``axil_*``
          reach the node's registers 0x0000..0x7FFF also before ``open``, for ``configure``)
memory    (a fetching node) ``NodeHw.memory(port, size)``: ``{"id", "base", "size"}`` of a new DMA
          buffer (counted with the rings against ``max_dma_bytes`` of the ``open``); with ``share``
          instead of ``size`` (``NodeHw.memory(port, share=...)``: the RX placer's ``m_axi_rx``)
          the ``id`` of the buffer of this open that port shares, nothing allocated
load      one blob written at ``addr`` of the buffer ``id`` (``DmaImage.load``: inside it)
expect_sp_out  ``NodeHw.expect_sp_out(n)``: the ``sp_out`` descriptor of a fetched ``SPR``
tick      simulated boards only: ``n`` cycles of the whole simulated cluster (below); ``step`` and
          ``tick`` take at most ``max_cycles`` (the client splits longer ones)
========  =====================================================================================

After the handshake the server's first message says whether the connection is served
(``{"result": "ready", "limits": {"max_cycles": ..., "max_payload": ..., "max_blobs": ...}}``)
or the board is busy with another coordinator (an ``OSError`` answer, then it closes without
reading anything): a board serves one coordinator at a time. Its ``NodeHw`` is dropped when that
coordinator disconnects, and a connection idle for ``idle_timeout`` seconds is dropped.

Safety (docs/boards.md, "Running the server across boards safely"): the server binds 127.0.0.1
unless told otherwise and refuses a non-loopback address without a key of ``MIN_KEY_BYTES``;
every limit (:class:`BoardServer`) is checked before the work or the bytes it bounds: open
connections per board, handshake, idle and per-message deadlines, message sizes, cycles per
``step``/``tick``, DMA bytes per ``open``, input bytes queued by ``push``, the wait for the board's
lock. A refused request gets
an error answer naming the field and the limit and changes nothing; a malformed or
unauthenticated message closes its connection only, and no connection's failure reaches the
others or leaves a thread traceback.

:class:`SimBoardHost` serves a ``SimBoardCluster``'s boards, one endpoint (port) each; since
simulated boards advance in lockstep, ``tick(n)`` from board k adds ``n`` cycles board k is
owed, and the cluster steps by the least any board is owed (so by at most ``n`` per request):
after every board has sent ``tick(n)`` the cluster has stepped ``n`` cycles.
"""
from __future__ import annotations

import json
import socket
import sys
import threading
import time

import numpy as np

from .node_hw import NODE_WINDOW, BoardError, NodeHw, identify
from .rpc import MIN_KEY_BYTES, Limits, board_key, is_loopback, server_handshake

__all__ = ["BoardEndpoint", "BoardServer", "SimBoardHost", "open_local_endpoint", "check_fresh"]


class _ReusingAllocator:
    """Hands out the buffers of the previous ``NodeHw`` again (same order, shape and dtype);
    allocates from ``allocator`` what it does not have."""

    def __init__(self, allocator):
        self.allocator, self.bufs, self.k = allocator, [], 0

    def rewind(self):
        self.k = 0

    def allocate(self, shape, dtype):
        shape, dtype = tuple(np.atleast_1d(shape).tolist()), np.dtype(dtype)
        if self.k < len(self.bufs) and self.bufs[self.k].array.shape == shape and self.bufs[self.k].array.dtype == dtype:
            buf = self.bufs[self.k]
        else:
            buf = self.allocator.allocate(shape, dtype)
            self.bufs[self.k:self.k + 1] = [buf]
        self.k += 1
        return buf


def _check_addr(addr):
    if not isinstance(addr, int) or not 0 <= addr < NODE_WINDOW or addr % 4:
        raise ValueError(f"node register address {addr!r} must be a multiple of 4 in 0..{NODE_WINDOW - 4:#x}")


def _check_int(what: str, v, lo: int, hi: int):
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ValueError(f"{what}={v!r} must be an integer in {lo}..{hi}")
    return v


_OPEN_OPTIONS = ("ring_bytes", "rx_slots", "desc_depth", "poll_cycles", "kv_event_bits")


def _check_open(args: dict, info: dict, max_dma_bytes: int):
    """``open``'s parameters, checked before any buffer is allocated: known ``NodeHw`` options
    only, integers in range, and DMA buffers of at most ``max_dma_bytes`` together."""
    engine, opts = args.get("engine"), args.get("options") or {}
    if not isinstance(engine, dict):
        raise ValueError(f"open: engine={engine!r} must be a dict of the node's engine parameters")
    for k in ("pn", "pk"):
        _check_int(f"open: engine[{k!r}]", engine.get(k), 1, 1 << 16)
    for k in ("kv_cmd_bits", "kv_resp_bits"):
        _check_int(f"open: {k}", args.get(k), 1, 1 << 16)
    if not isinstance(opts, dict) or set(opts) - set(_OPEN_OPTIONS):
        raise ValueError(f"open: options {sorted(opts) if isinstance(opts, dict) else opts!r} must be "
                         f"among {', '.join(_OPEN_OPTIONS)}")
    rings = dict(NodeHw.RINGS)
    given = opts.get("ring_bytes") or {}
    if not isinstance(given, dict) or set(given) - set(rings):
        raise ValueError(f"open: ring_bytes={given!r} must map ring names ({', '.join(rings)}) to byte counts")
    for name, v in given.items():
        rings[name] = _check_int(f"open: ring_bytes[{name!r}]", v, 1, max_dma_bytes)
    slots = _check_int("open: rx_slots", opts.get("rx_slots", 16), 1, 0xFFFF)
    _check_int("open: desc_depth", opts.get("desc_depth", 4), 1, 1 << 16)
    _check_int("open: poll_cycles", opts.get("poll_cycles", 32), 0, 1 << 32)
    _check_int("open: kv_event_bits", opts.get("kv_event_bits", 0), 0, 96)
    rings["w"] = max(rings["w"], info.get("w_tile_bytes", 0))          # NodeHw grows it to a tile
    total = sum(rings.values()) + slots * info.get("rx_slot_bytes", 0)
    if total > max_dma_bytes:
        raise ValueError(f"open: the rings and RX slots need {total} bytes of DMA buffers, more than "
                         f"max_dma_bytes={max_dma_bytes}")
    return total


#: cycles one ``step``/``tick`` request may ask for (about 3 s of a simulated 2-board ring)
DEFAULT_MAX_CYCLES = 1 << 17
DEFAULT_IDLE_TIMEOUT = 600.0        #: seconds a connected coordinator may stay silent
DEFAULT_MAX_CONNECTIONS = 8         #: open connections per board (handshaking ones included)
DEFAULT_MAX_DMA_BYTES = 1 << 28     #: DMA buffer bytes one ``open`` may ask for
DEFAULT_MAX_QUEUED_BYTES = 1 << 29  #: input bytes ``push`` may leave queued on the board (host memory)
_MAX_MESSAGE = 4000                 #: characters of an error answer's message


class BoardEndpoint:
    """One board behind the server (module docstring). ``reset()`` resets the node; ``tick(n)``
    (or None) advances a simulated cluster. ``lock`` serialises requests to the board (boards of
    one simulated cluster share it)."""

    def __init__(self, name, window, allocator, clock, *, reset, clock_kind: str, tick=None,
                 lock: threading.Lock | None = None):
        self.name, self.window, self.clock, self.clock_kind = name, window, clock, clock_kind
        self.alloc = _ReusingAllocator(allocator)
        self._reset, self._tick = reset, tick
        self.lock = lock or threading.Lock()
        self.hw = None
        self.client = None                  # the coordinator being served
        self.images, self.dma_bytes = [], 0  # memory buffers of this open; its DMA bytes so far

    def _need_hw(self, op):
        if self.hw is None:
            raise ValueError(f"{op} before open: the coordinator must open the board's NodeHw first")
        return self.hw

    def handle(self, op: str, args: dict, blobs: list, *, max_cycles: int = DEFAULT_MAX_CYCLES,
               max_dma_bytes: int = DEFAULT_MAX_DMA_BYTES,
               max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES):
        """``(result, blobs)`` of one request; a refused request (ValueError naming the field and
        the limit) changes nothing; board errors propagate as exceptions."""
        if op == "hello":
            return {"identify": identify(self.window), "clock": self.clock_kind, "board": self.name}, []
        if op == "reset":
            self.hw = None
            self._reset()
            return None, []
        if op == "open":
            total = _check_open(args, identify(self.window), max_dma_bytes)
            self.hw, self.images, self.dma_bytes = None, [], total
            self.alloc.rewind()
            self.hw = NodeHw(self.window, self.alloc, self.clock, engine=args["engine"],
                             kv_cmd_bits=args["kv_cmd_bits"], kv_resp_bits=args["kv_resp_bits"],
                             **(args.get("options") or {}))
            return None, []
        if op == "push":
            if len(blobs) != 1:
                raise ValueError(f"push carries one frame, got {len(blobs)}")
            hw = self._need_hw(op)
            queued = (sum(hw.eng[e].queued_bytes() for e in ("cmd", "sp_in", "w") if e in hw.eng)
                      + len(hw.kv_queue) * hw.kv_cmd_bytes)
            if queued + len(blobs[0]) > max_queued_bytes:
                raise ValueError(f"push of {len(blobs[0])} bytes: {queued} bytes are queued on the board's "
                                 f"inputs already, max_queued_bytes={max_queued_bytes}")
            hw.push(str(args.get("port")), blobs[0])
            return None, []
        if op == "memory" and args.get("share") is not None:     # a buffer of this open, again
            img = self._need_hw(op).memory(str(args.get("port")), share=str(args["share"]))
            k = next(i for i, x in enumerate(self.images) if x is img)
            return {"id": k, "base": img.base, "size": img.size}, []
        if op == "memory":
            hw = self._need_hw(op)
            size = _check_int("memory: size (bytes; max_dma_bytes)", args.get("size"), 1, max_dma_bytes)
            if self.dma_bytes + size > max_dma_bytes:
                raise ValueError(f"memory: {size} more bytes of DMA buffers on top of this open's "
                                 f"{self.dma_bytes} exceed max_dma_bytes={max_dma_bytes}")
            img = hw.memory(str(args.get("port")), size)
            self.images.append(img)
            self.dma_bytes += size
            return {"id": len(self.images) - 1, "base": img.base, "size": img.size}, []
        if op == "load":
            if len(blobs) != 1:
                raise ValueError(f"load carries one blob, got {len(blobs)}")
            self._need_hw(op)
            if not self.images:
                raise ValueError("load before memory: this open has no DMA buffer to load")
            k = _check_int("load: id (a memory of this open)", args.get("id"), 0, len(self.images) - 1)
            self.images[k].load(_check_int("load: addr", args.get("addr"), 0, (1 << 64) - 1), blobs[0])
            return None, []
        if op == "expect_sp_out":
            self._need_hw(op).expect_sp_out(_check_int("expect_sp_out: n (words)", args.get("n"), 1, 1 << 24))
            return None, []
        if op == "pull_all":
            return None, list(self._need_hw(op).pull_all(str(args.get("port"))))
        if op == "pending":
            return self._need_hw(op).pending(str(args.get("port"))), []
        if op == "axil_read":
            _check_addr(args.get("addr"))
            return [self.window.read(args["addr"]), 0], []
        if op == "axil_write":
            _check_addr(args.get("addr"))
            self.window.write(args["addr"], _check_int("axil_write: value", args.get("value"), 0, 0xFFFFFFFF))
            return 0, []
        if op == "cycle":
            return self.clock.cycle, []
        if op == "step":
            self.clock.step(_check_int("step: n (cycles; max_cycles)", args.get("n"), 0, max_cycles))
            return None, []
        if op == "tick":
            if self._tick is None:
                raise ValueError("tick steps a simulated cluster; this board's time passes by itself")
            self._tick(_check_int("tick: n (cycles; max_cycles)", args.get("n"), 0, max_cycles))
            return None, []
        raise ValueError(f"unknown request {op!r}")


class BoardServer:
    """Serves ``endpoints`` on ``bind``, endpoint k on ``ports[k]`` (0 = any free port; see
    ``addresses``). ``start()`` serves in daemon threads, ``close()`` stops.

    ``key`` (default ``MCF_BOARD_KEY``) may be empty or short only on a loopback ``bind``;
    elsewhere a key of fewer than ``MIN_KEY_BYTES`` bytes is a ValueError. Limits (each a
    keyword, defaults documented in docs/boards.md): ``max_connections`` open at once per board
    (more are closed at once), ``handshake_timeout`` for the whole handshake, ``idle_timeout``
    between requests, ``message_timeout`` for each whole message, ``max_header``/``max_blobs``/
    ``max_payload`` for a request, ``max_cycles`` per ``step``/``tick``, ``max_dma_bytes`` per
    ``open``, ``max_queued_bytes`` of pushed input the board has not taken yet, ``lock_timeout``
    to wait for the board's lock (an error answer after), ``busy_wait`` for a previous
    coordinator's connection to end before a new one is told "busy"."""

    def __init__(self, endpoints, *, bind: str = "127.0.0.1", ports=None, key: bytes | None = None,
                 idle_timeout: float = DEFAULT_IDLE_TIMEOUT, handshake_timeout: float = 10.0,
                 message_timeout: float = Limits.message_timeout,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS, max_header: int = Limits.max_header,
                 max_blobs: int = Limits.max_blobs, max_payload: int = Limits.max_payload,
                 max_cycles: int = DEFAULT_MAX_CYCLES,
                 max_dma_bytes: int = DEFAULT_MAX_DMA_BYTES, max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES,
                 lock_timeout: float = 10.0,
                 busy_wait: float = 2.0, log=None):
        ports = list(ports) if ports is not None else [0] * len(endpoints)
        if len(ports) != len(endpoints):
            raise ValueError(f"{len(endpoints)} boards need {len(endpoints)} ports, got {len(ports)}")
        self.key = board_key() if key is None else bytes(key)
        self.check_key(self.key, bind)
        for name, v in (("idle_timeout", idle_timeout), ("handshake_timeout", handshake_timeout),
                        ("lock_timeout", lock_timeout)):
            if not v > 0:
                raise ValueError(f"{name}={v!r} must be > 0 seconds")
        if not busy_wait >= 0:
            raise ValueError(f"busy_wait={busy_wait!r} must be >= 0 seconds")
        for name, v in (("max_connections", max_connections), ("max_cycles", max_cycles),
                        ("max_dma_bytes", max_dma_bytes), ("max_queued_bytes", max_queued_bytes)):
            _check_int(name, v, 1, 1 << 62)
        self.limits = Limits(max_header=max_header, max_blobs=max_blobs, max_payload=max_payload,
                             message_timeout=message_timeout)
        self.endpoints = endpoints
        self.idle_timeout, self.handshake_timeout = idle_timeout, handshake_timeout
        self.max_connections, self.max_cycles = max_connections, max_cycles
        self.max_dma_bytes, self.max_queued_bytes = max_dma_bytes, max_queued_bytes
        self.lock_timeout, self.busy_wait = lock_timeout, busy_wait
        self.log = log or (lambda msg: None)
        self._stop = threading.Event()
        self._mutex = threading.Lock()            # guards _conns and every endpoint's ``client``
        self._conns = [set() for _ in endpoints]
        self.listeners = []
        try:
            for p in ports:
                s = socket.create_server((bind, p))
                s.settimeout(0.2)                    # accept() wakes to notice close()
                self.listeners.append(s)
        except OSError as exc:
            self.close()
            raise OSError(f"cannot listen on {bind}:{p}: {exc}") from None
        self.threads = []

    @staticmethod
    def check_key(key: bytes, bind: str):
        """ValueError unless ``key`` may protect a server on ``bind``: any key on a loopback
        address, at least ``MIN_KEY_BYTES`` bytes on any other."""
        if len(key) < MIN_KEY_BYTES and not is_loopback(bind):
            raise ValueError(f"refusing to serve on {bind}: MCF_BOARD_KEY must be at least {MIN_KEY_BYTES} "
                             f"bytes (it has {len(key)}) when the server listens on a non-loopback "
                             f"address; set it on every host, or bind 127.0.0.1 and use an SSH tunnel")

    @property
    def addresses(self) -> list:
        """``(host, port)`` each endpoint listens on."""
        return [s.getsockname()[:2] for s in self.listeners]

    def connections(self, k: int = 0) -> int:
        """Connections open to endpoint ``k`` now (handshaking, served or being refused)."""
        with self._mutex:
            return len(self._conns[k])

    def start(self):
        for k, (ep, s) in enumerate(zip(self.endpoints, self.listeners)):
            t = threading.Thread(target=self._accept_loop, args=(k, s), daemon=True, name=f"board {ep.name}")
            t.start()
            self.threads.append(t)
        return self

    def serve_forever(self):
        self.start()
        try:
            while any(t.is_alive() for t in self.threads):
                for t in self.threads:
                    t.join(0.5)
        finally:
            self.close()

    def close(self):
        """Stop accepting, end every connection, wait (a few seconds at most) for the threads."""
        self._stop.set()
        for s in self.listeners:
            s.close()
        with self._mutex:
            conns = [c for cs in self._conns for c in cs]
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in self.threads:
            if t is not threading.current_thread():
                t.join(5)

    def _accept_loop(self, k, listener):
        ep = self.endpoints[k]
        while not self._stop.is_set():
            try:
                conn, peer = listener.accept()
            except TimeoutError:
                continue
            except OSError as exc:
                if self._stop.is_set() or listener.fileno() < 0:
                    return                         # closed
                self.log(f"board {ep.name}: accept failed: {exc}")      # e.g. out of descriptors
                time.sleep(0.1)
                continue
            with self._mutex:
                full = len(self._conns[k]) >= self.max_connections
                if not full:
                    self._conns[k].add(conn)
            if full:
                conn.close()
                self.log(f"board {ep.name}: {peer[0]}:{peer[1]} refused: max_connections="
                         f"{self.max_connections} connections are open")
                continue
            try:
                threading.Thread(target=self._serve, args=(k, conn, peer), daemon=True,
                                 name=f"board {ep.name} {peer[0]}:{peer[1]}").start()
            except RuntimeError as exc:            # no thread to be had: refuse this one
                conn.close()
                with self._mutex:
                    self._conns[k].discard(conn)
                self.log(f"board {ep.name}: {peer[0]}:{peer[1]} refused: {exc}")

    def _serve(self, k, conn, peer):
        """One connection, start to end; whatever happens ends here with a log line (never a
        thread traceback) and the connection closed."""
        ep, who = self.endpoints[k], f"{peer[0]}:{peer[1]}"
        try:
            self._session(ep, conn, who)
        except Exception as exc:  # noqa: BLE001 -- a connection's failure must not kill the server
            self.log(f"board {ep.name}: connection from {who} failed: {type(exc).__name__}: {exc}")
        finally:
            conn.close()
            with self._mutex:
                self._conns[k].discard(conn)

    def _claim(self, ep, who) -> str | None:
        """Make ``who`` the board's coordinator: None, or whom the board is busy serving after
        waiting ``busy_wait`` for that connection to end."""
        end = time.monotonic() + self.busy_wait
        while True:
            with self._mutex:
                if ep.client is None:
                    ep.client = who
                    return None
                busy = ep.client
            if time.monotonic() >= end or self._stop.is_set():
                return busy
            time.sleep(0.05)

    def _session(self, ep, conn, who):
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            ch = server_handshake(conn, self.key, self.handshake_timeout, self.limits)
        except OSError as exc:
            self.log(f"board {ep.name}: {who} refused: {exc}")
            return
        busy = self._claim(ep, who)
        if busy is not None:                       # told before it sends anything; nothing is read
            try:
                ch.send({"error": "OSError", "message": f"board busy: serving {busy}"})
            except OSError:
                pass
            self.log(f"board {ep.name}: {who} refused: busy serving {busy}")
            return
        try:
            ch.send({"result": "ready", "limits": {"max_cycles": self.max_cycles,
                                                   "max_payload": self.limits.max_payload,
                                                   "max_blobs": self.limits.max_blobs}})
            self.log(f"board {ep.name}: serving {who}")
            while not self._stop.is_set():
                try:
                    head, blobs = ch.recv(self.idle_timeout)
                except ConnectionError:
                    self.log(f"board {ep.name}: {who} disconnected")
                    return
                try:
                    answer, out = {"result": None}, []
                    answer["result"], out = self._request(ep, head, blobs)
                    try:
                        json.dumps(answer, allow_nan=False)
                    except (TypeError, ValueError) as exc:
                        raise RuntimeError(f"the board's answer to {head.get('op')!r} is not JSON: "
                                           f"{exc}") from None
                except Exception as exc:  # noqa: BLE001 -- every board error goes back
                    answer, out = {"error": type(exc).__name__, "message": str(exc)[:_MAX_MESSAGE]}, []
                ch.send(answer, out)
        except OSError as exc:                     # ProtocolError, timeouts, a lost connection
            self.log(f"board {ep.name}: connection from {who} ended: {exc or type(exc).__name__}")
        finally:
            with self._mutex:
                ep.client, ep.hw = None, None      # the next coordinator opens afresh

    def _request(self, ep, head, blobs):
        if not ep.lock.acquire(timeout=self.lock_timeout):
            raise TimeoutError(f"board {ep.name} stayed locked for lock_timeout={self.lock_timeout:g} s "
                               f"(another board of this server is stepping); nothing was done")
        try:
            return ep.handle(head.get("op"), head, blobs, max_cycles=self.max_cycles,
                             max_dma_bytes=self.max_dma_bytes, max_queued_bytes=self.max_queued_bytes)
        finally:
            ep.lock.release()


def check_fresh(window):
    """A real board's ``reset``: the PL has no soft reset yet, so check that nothing has run since
    the overlay was loaded (no descriptor posted, no RX record, no KV command, no instruction
    retired); a BoardError naming the counters otherwise."""
    from mcf_fpga.boards.node_dma import ENGINES, KV_REGS, RX_REGS, engine_offset
    from mcf_fpga.boards.node_top import DMA_BASE
    counts = {f"{e.upper()} POSTED": window.read(DMA_BASE + engine_offset(e, "posted")) for e in ENGINES}
    counts["RX_WP"] = window.read(DMA_BASE + RX_REGS["rx_wp"])
    counts["KV_POSTED"] = window.read(DMA_BASE + KV_REGS["kv_posted"])
    counts["engine retired (0x0004)"] = window.read(0x0004)
    used = {k: v for k, v in counts.items() if v}
    if used:
        raise BoardError(f"the board has run since its overlay was loaded ({used}); the PL has no soft "
                         f"reset yet: reload the overlay (mcf flash) before the next run")


def open_local_endpoint(name: str = "local") -> BoardEndpoint:
    """The node board this process runs on: the ``mcf`` UIO window (it exists only while the
    overlay is loaded), a DMA buffer allocator, a :class:`WallClock`; OSError naming what is
    missing."""
    from .buffers import open_allocator
    from .driver import AXIL_BASE, AXIL_SIZE
    from .mmio import open_window
    from .wall_clock import WallClock
    window = open_window(AXIL_BASE, AXIL_SIZE, prefer=("uio",))
    try:
        identify(window)
    except BoardError as exc:
        window.close()
        raise OSError(f"the register window is not a node board: {exc}") from None
    clock = WallClock()

    def reset():
        check_fresh(window)
        clock.restart()
    return BoardEndpoint(name, window, open_allocator(), clock, reset=reset, clock_kind="wall")


class SimBoardHost:
    """``n`` simulated boards (``sim.boards.SimBoardCluster``, keyword arguments passed on)
    as endpoints sharing one lock; ``tick`` keeps them in lockstep (module docstring)."""

    def __init__(self, n: int, topology="ring", node_cfg=None, **kw):
        from mcf_fpga.sim.boards import SimBoardCluster
        self.cluster = SimBoardCluster(n, topology, node_cfg, **kw)
        self.owed = [0] * n
        lock = threading.Lock()
        self.endpoints = [BoardEndpoint(f"sim{k}", self.cluster.window(k), self.cluster.memory(k),
                                        self.cluster.clock(k), reset=self._resetter(k), clock_kind="sim",
                                        tick=self._ticker(k), lock=lock) for k in range(n)]

    def _resetter(self, k):
        def reset():
            self.cluster.node(k).reset()
            self.owed[k] = 0
        return reset

    def _ticker(self, k):
        def tick(n):
            if n < 0:
                raise ValueError(f"tick takes a cycle count >= 0, got {n}")
            self.owed[k] += n
            m = min(self.owed)
            if m:
                self.cluster.step(m)
                self.owed = [o - m for o in self.owed]
        return tick


def log_stderr(msg: str):
    print(f"[mcf serve-board] {msg}", file=sys.stderr, flush=True)
