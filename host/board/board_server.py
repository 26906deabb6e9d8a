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
          reach the node's registers 0x0000..0x3FFF also before ``open``, for ``configure``)
tick      simulated boards only: ``n`` cycles of the whole simulated cluster (below)
========  =====================================================================================

A board serves one coordinator at a time (another gets a "busy" error); its ``NodeHw`` is
dropped when that coordinator disconnects, and a connection idle for ``idle_timeout`` seconds is
dropped. :class:`SimBoardHost` serves a ``SimBoardCluster``'s
boards, one endpoint (port) each; since simulated boards advance in lockstep, ``tick(n)`` from
board k adds ``n`` cycles board k is owed, and the cluster steps by the least any board is
owed: after every board has sent ``tick(n)`` the cluster has stepped ``n`` cycles.
"""
from __future__ import annotations

import socket
import sys
import threading
import time

import numpy as np

from .node_hw import NODE_WINDOW, BoardError, NodeHw, identify
from .rpc import ProtocolError, board_key, recv_msg, send_msg, server_handshake

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


class BoardEndpoint:
    """One board behind the server (module docstring). ``reset()`` resets the node; ``tick(n)``
    (or None) advances a simulated cluster."""

    def __init__(self, name, window, allocator, clock, *, reset, clock_kind: str, tick=None,
                 lock: threading.Lock | None = None):
        self.name, self.window, self.clock, self.clock_kind = name, window, clock, clock_kind
        self.alloc = _ReusingAllocator(allocator)
        self._reset, self._tick = reset, tick
        self.lock = lock or threading.Lock()
        self.hw = None
        self.client = None                  # the coordinator being served

    def _need_hw(self, op):
        if self.hw is None:
            raise ValueError(f"{op} before open: the coordinator must open the board's NodeHw first")
        return self.hw

    def handle(self, op: str, args: dict, blobs: list):
        """``(result, blobs)`` of one request; board errors propagate as exceptions."""
        if op == "hello":
            return {"identify": identify(self.window), "clock": self.clock_kind, "board": self.name}, []
        if op == "reset":
            self.hw = None
            self._reset()
            return None, []
        if op == "open":
            self.hw = None
            self.alloc.rewind()
            self.hw = NodeHw(self.window, self.alloc, self.clock, engine=args["engine"],
                             kv_cmd_bits=int(args["kv_cmd_bits"]), kv_resp_bits=int(args["kv_resp_bits"]),
                             **(args.get("options") or {}))
            return None, []
        if op == "push":
            if len(blobs) != 1:
                raise ValueError(f"push carries one frame, got {len(blobs)}")
            self._need_hw(op).push(str(args["port"]), blobs[0])
            return None, []
        if op == "pull_all":
            return None, list(self._need_hw(op).pull_all(str(args["port"])))
        if op == "pending":
            return self._need_hw(op).pending(str(args["port"])), []
        if op == "axil_read":
            _check_addr(args["addr"])
            return [self.window.read(args["addr"]), 0], []
        if op == "axil_write":
            _check_addr(args["addr"])
            self.window.write(args["addr"], args["value"])
            return 0, []
        if op == "cycle":
            return self.clock.cycle, []
        if op == "step":
            self.clock.step(int(args["n"]))
            return None, []
        if op == "tick":
            if self._tick is None:
                raise ValueError("tick steps a simulated cluster; this board's time passes by itself")
            self._tick(int(args["n"]))
            return None, []
        raise ValueError(f"unknown request {op!r}")


class BoardServer:
    """Serves ``endpoints`` on ``bind``, endpoint k on ``ports[k]`` (0 = any free port; see
    ``addresses``). ``start()`` serves in daemon threads, ``close()`` stops."""

    def __init__(self, endpoints, *, bind: str = "0.0.0.0", ports=None, key: bytes | None = None,
                 idle_timeout: float = 600.0, handshake_timeout: float = 10.0, log=None):
        ports = list(ports) if ports is not None else [0] * len(endpoints)
        if len(ports) != len(endpoints):
            raise ValueError(f"{len(endpoints)} boards need {len(endpoints)} ports, got {len(ports)}")
        self.endpoints, self.key = endpoints, board_key() if key is None else key
        self.idle_timeout, self.handshake_timeout = idle_timeout, handshake_timeout
        self.log = log or (lambda msg: None)
        self._stop = threading.Event()
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

    @property
    def addresses(self) -> list:
        """``(host, port)`` each endpoint listens on."""
        return [s.getsockname()[:2] for s in self.listeners]

    def start(self):
        for ep, s in zip(self.endpoints, self.listeners):
            t = threading.Thread(target=self._accept_loop, args=(ep, s), daemon=True, name=f"board {ep.name}")
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
        self._stop.set()
        for s in self.listeners:
            s.close()
        for t in self.threads:
            if t is not threading.current_thread():
                t.join(5)

    def _accept_loop(self, ep, listener):
        while not self._stop.is_set():
            try:
                conn, peer = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(ep, conn, peer), daemon=True).start()

    def _serve(self, ep, conn, peer):
        who = f"{peer[0]}:{peer[1]}"
        with conn:
            try:
                conn.settimeout(self.handshake_timeout)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                server_handshake(conn, self.key)
            except OSError as exc:
                self.log(f"board {ep.name}: {who} refused: {exc}")
                return
            for _ in range(20):                    # up to 2 s for a previous coordinator's close
                with ep.lock:
                    busy = ep.client
                    if busy is None:
                        ep.client = who
                        break
                time.sleep(0.1)
            try:
                conn.settimeout(self.idle_timeout)
                if busy is not None:
                    recv_msg(conn)
                    send_msg(conn, {"error": "OSError", "message": f"board busy: serving {busy}"})
                    return
                self.log(f"board {ep.name}: serving {who}")
                while not self._stop.is_set():
                    try:
                        head, blobs = recv_msg(conn)
                    except ConnectionError:
                        return                     # the coordinator closed the connection
                    try:
                        with ep.lock:
                            result, out = ep.handle(str(head.get("op")), head, blobs)
                        send_msg(conn, {"result": result}, out)
                    except (ProtocolError, ConnectionError):
                        raise
                    except Exception as exc:       # noqa: BLE001 -- every board error goes back
                        send_msg(conn, {"error": type(exc).__name__, "message": str(exc)})
            except OSError as exc:
                self.log(f"board {ep.name}: connection from {who} ended: {exc}")
            finally:
                if busy is None:
                    with ep.lock:
                        ep.client, ep.hw = None, None      # the next coordinator opens afresh


def check_fresh(window):
    """A real board's ``reset``: the PL has no soft reset yet, so check that nothing has run since
    the overlay was loaded (no descriptor posted, no RX record, no KV command, no instruction
    retired); a BoardError naming the counters otherwise."""
    from boards.node_dma import ENGINES, KV_REGS, RX_REGS, engine_offset
    from boards.node_top import DMA_BASE
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
    """``n`` simulated boards (``boards.sim_board.SimBoardCluster``, keyword arguments passed on)
    as endpoints sharing one lock; ``tick`` keeps them in lockstep (module docstring)."""

    def __init__(self, n: int, topology="ring", node_cfg=None, **kw):
        from boards.sim_board import SimBoardCluster
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
