"""The coordinator's side of a multi-board run: boards served by ``mcf serve-board``
(``host.board.board_server``) reached over TCP (``host.board.rpc``).

:class:`RemoteHw` is one board's ``hw`` interface for ``host.executors.rtl.NodeDriver`` (``push``,
``pull_all``, ``pending``, ``axil_read``, ``axil_write``, ``cycle``, ``step``, ``identify``; for a
fetching node ``memory`` and ``expect_sp_out``),
each call one request answered by the board's ``NodeHw``. :class:`RemoteBoardCluster` is the
cluster ``host.executors.board.run_board`` runs on: node k = the k-th address; ``configure``
(reset, NIC identity, routes, MACs through the node registers: ``sim.cluster.configure_nodes``),
``step(n)``, ``hw(k, **NodeHw parameters)``.

Time: on simulated boards ``cycle`` is the simulator's and ``step`` advances it (a cluster
``step`` is a ``tick`` to every board, which the server turns into one lockstep step). On real
boards (their servers say ``"clock": "wall"``) ``cycle`` is the coordinator's elapsed time since
the cluster was opened in 200 MHz cycles, one clock for all boards (board clocks are not
synchronised), and ``step(n)`` sleeps; cycle counts then include the network round trips.

The connection is mutually authenticated with ``MCF_BOARD_KEY`` and every message carries a MAC
and a sequence number (``host.board.rpc``): a server that does not know the key is refused. The
server's first message is "ready" with its limits (``step``/``tick`` counts above its
``max_cycles`` go as several requests) or "busy". A connection that cannot be made within
``connect_timeout``, a request not answered within ``timeout`` and a board-side error
(``BoardError``, ``ValueError``, ...: re-raised as its type) raise naming the board's address;
after a timeout the connection is not used again.
"""
from __future__ import annotations

import dataclasses
import time

from mcf_fpga.hdl.bus import Resp

from .node_hw import BoardError
from .rpc import Limits, ProtocolError, board_key, client_handshake, connect, parse_address
from .wall_clock import WallClock

__all__ = ["RemoteHw", "RemoteBoardCluster", "BoardConnectionError", "parse_boards"]

_ERRORS = {"BoardError": BoardError, "ValueError": ValueError, "OSError": OSError,
           "TimeoutError": TimeoutError, "RuntimeError": RuntimeError}


class BoardConnectionError(OSError):
    """A board server could not be reached, did not answer in time, or broke the protocol."""


def parse_boards(text: str, nodes: int | None = None) -> list:
    """``"host1:port,host2:port,..."`` -> ``[(host, port), ...]``; with ``nodes``, the count must
    equal it (a ValueError naming both)."""
    addrs = [parse_address(a) for a in text.split(",") if a.strip()]
    if not addrs:
        raise ValueError("--boards: no host:port given")
    if nodes is not None and len(addrs) != nodes:
        raise ValueError(f"--boards lists {len(addrs)} boards, --nodes is {nodes}: node k runs on the "
                         f"k-th board, so the counts must be equal")
    return addrs


CLIENT_LIMITS = Limits(max_header=1 << 20, max_blobs=1 << 16, max_payload=1 << 28)
"""What an answer may be (a ``pull_all`` can return many frames): checked before it is read."""


class _Connection:
    """One authenticated connection to a board server; ``call`` = request + answer. ``limits``
    = the server's (its ``ready`` message): ``step``/``tick`` counts above ``max_cycles`` are
    sent as several requests, a push above ``max_payload`` is refused here."""

    def __init__(self, host: str, port: int, *, timeout: float, connect_timeout: float, key: bytes):
        self.where, self.timeout = f"board {host}:{port}", timeout
        self.sock, self.broken = None, None
        try:
            self.sock = connect(host, port, connect_timeout)
            self.ch = client_handshake(self.sock, key, connect_timeout,
                                       dataclasses.replace(CLIENT_LIMITS, message_timeout=timeout))
        except ProtocolError as exc:
            self.close()
            raise BoardConnectionError(f"{self.where}: {exc}") from None
        except OSError as exc:
            self.close()
            raise BoardConnectionError(f"{self.where}: cannot connect within {connect_timeout:g} s: "
                                       f"{exc.strerror or exc or type(exc).__name__}") from None
        try:
            ready = self._answer("connect")[0]        # "ready", or the board is busy (raised)
        except BaseException:
            self.close()
            raise
        self.limits = ready.get("limits", {}) if isinstance(ready, dict) else {}

    def _answer(self, op: str):
        """The next answer (within ``timeout``); a board-side error is re-raised here."""
        try:
            head, out = self.ch.recv(self.timeout, deadline=time.monotonic() + self.timeout)
        except TimeoutError:
            self.broken = f"no answer to {op} within {self.timeout:g} s"
            self.close()
            raise BoardConnectionError(f"{self.where}: {self.broken}") from None
        except OSError as exc:
            self.broken = f"{op}: {exc}"
            self.close()
            raise BoardConnectionError(f"{self.where}: connection lost during {self.broken}") from None
        if "error" in head:
            kind = _ERRORS.get(head["error"], RuntimeError)
            raise kind(f"{self.where}: {head['error']}: {head.get('message', '')}")
        if op == "connect":
            return head, out
        return head.get("result"), out

    def call(self, op: str, blobs=(), **args):
        """The answer's ``(result, blobs)``; a board-side error is re-raised here."""
        if self.broken:
            raise BoardConnectionError(f"{self.where}: connection unusable ({self.broken})")
        size, limit = sum(len(b) for b in blobs), self.limits.get("max_payload")
        if limit is not None and size > limit:
            raise ValueError(f"{self.where}: {op} of {size} bytes exceeds the server's max_payload={limit}")
        try:
            self.ch.send(dict(args, op=op), blobs, timeout=self.timeout)
        except OSError as exc:
            self.broken = f"{op}: {exc}"
            self.close()
            raise BoardConnectionError(f"{self.where}: connection lost during {self.broken}") from None
        return self._answer(op)

    def cycles(self, op: str, n: int):
        """``op`` (``step`` or ``tick``) of ``n`` cycles, in requests of at most the server's
        ``max_cycles``."""
        if isinstance(n, bool) or int(n) != n or n < 0:
            raise ValueError(f"{self.where}: {op} takes a cycle count >= 0, got {n!r}")
        n, most = int(n), max(1, int(self.limits.get("max_cycles") or n or 1))
        while True:
            k = min(n, most)
            self.call(op, n=k)
            n -= k
            if n <= 0:
                return

    def close(self):
        if self.sock is not None:
            self.sock.close()


class _ServerClock:
    """A simulated board's cycle counter, read and stepped through its server."""

    def __init__(self, conn):
        self.conn = conn

    @property
    def cycle(self) -> int:
        return self.conn.call("cycle")[0]

    def step(self, n: int):
        self.conn.cycles("step", n)


class RemoteImage:
    """A served board's DMA buffer (``RemoteHw.memory``): ``base``, ``size``, ``load(addr, data)``
    (one request; the board checks the range)."""

    def __init__(self, conn, port, ident, base, size):
        self.conn, self.port, self.id, self.base, self.size = conn, port, ident, base, size

    def load(self, addr: int, data: bytes):
        self.conn.call("load", [bytes(data)], id=self.id, addr=addr)


class RemoteHw:
    """One served board's ``hw`` interface (module docstring); ``info`` = its ``hello``."""

    def __init__(self, conn: _Connection, clock=None):
        self.conn = conn
        try:
            self.info = conn.call("hello")[0]
        except BaseException:
            conn.close()
            raise
        self.clock = clock if clock is not None and self.info["clock"] == "wall" else _ServerClock(conn)

    @property
    def where(self) -> str:
        return self.conn.where

    def identify(self) -> dict:
        return self.conn.call("hello")[0]["identify"]

    def reset(self):
        self.conn.call("reset")

    def open(self, *, engine: dict, kv_cmd_bits: int, kv_resp_bits: int, **options):
        """A fresh ``NodeHw`` on the board with these parameters (``NodeHw``'s; of ``engine`` only
        what ``NodeHw`` reads, ``pn`` and ``pk``: an engine keeping K/V in DDR also holds a
        ``KVRegion``, which JSON does not carry)."""
        self.conn.call("open", engine={k: engine[k] for k in ("pn", "pk")}, kv_cmd_bits=kv_cmd_bits,
                       kv_resp_bits=kv_resp_bits, options=options)

    def push(self, port: str, data: bytes):
        self.conn.call("push", [bytes(data)], port=port)

    def pull_all(self, port: str) -> list:
        return self.conn.call("pull_all", port=port)[1]

    def memory(self, port: str, size: int | None = None, *, base: int | None = None, share: str | None = None,
               **_model) -> "RemoteImage":
        """A DMA buffer on the board for a fetching node's ``port`` (``NodeHw.memory``: the
        board's allocator chooses ``.base``; ``base`` and the simulator's memory keywords are
        ignored); with ``share``, the buffer that port got (``NodeHw.memory``'s ``share``)."""
        r = self.conn.call("memory", port=port, **({"share": share} if share is not None else {"size": size}))[0]
        return RemoteImage(self.conn, port, r["id"], r["base"], r["size"])

    def expect_sp_out(self, n: int):
        self.conn.call("expect_sp_out", n=n)

    def pending(self, port: str) -> int:
        return self.conn.call("pending", port=port)[0]

    def axil_read(self, addr: int):
        v, r = self.conn.call("axil_read", addr=addr)[0]
        return v, Resp(r)

    def axil_write(self, addr: int, value: int):
        return Resp(self.conn.call("axil_write", addr=addr, value=value)[0])

    @property
    def cycle(self) -> int:
        return self.clock.cycle

    def step(self, n: int):
        self.clock.step(n)

    def tick(self, n: int):
        self.conn.cycles("tick", n)

    def close(self):
        self.conn.close()


class RemoteBoardCluster:
    """Boards at ``addresses`` (``[(host, port)]`` or ``"host:port,..."``) as a cluster for
    ``run_board`` (module docstring); ``topology`` and ``node_cfg`` are the program's (for
    ``configure``). Use as a context manager or ``close()`` it: a board serves one coordinator
    at a time."""

    def __init__(self, addresses, topology, node_cfg, *, timeout: float = 30.0,
                 connect_timeout: float = 5.0, key: bytes | None = None):
        if isinstance(addresses, str):
            addresses = parse_boards(addresses)
        self.n, self.topology, self.cfg = len(addresses), topology, node_cfg
        key = board_key() if key is None else key
        self.wall = WallClock()
        self.boards = []
        try:
            for host, port in addresses:
                conn = _Connection(host, port, timeout=timeout, connect_timeout=connect_timeout, key=key)
                self.boards.append(RemoteHw(conn, self.wall))
        except BaseException:
            self.close()
            raise
        kinds = {b.info["clock"] for b in self.boards}
        if len(kinds) != 1:
            self.close()
            raise ValueError(f"boards mix real and simulated ones: "
                             f"{ {b.where: b.info['clock'] for b in self.boards} }")
        self.simulated = kinds == {"sim"}

    def configure(self, routes=None, **kw):
        """Reset every board, write NIC identity, routes and MACs (``sim.cluster.configure_nodes``)."""
        from mcf_fpga.spec.topology import Topology, make_topology
        from mcf_fpga.sim.cluster import configure_nodes
        topo = self.topology if isinstance(self.topology, Topology) else make_topology(self.topology, self.n)
        configure_nodes(self.boards, topo, self.cfg, routes, **kw)
        self.wall.restart()

    def step(self, n: int):
        if self.simulated:
            for b in self.boards:
                b.tick(n)
        else:
            self.wall.step(n)

    def hw(self, i: int, **params) -> RemoteHw:
        """Board ``i`` with a fresh ``NodeHw`` of ``params`` opened on it."""
        self.boards[i].open(**params)
        return self.boards[i]

    def close(self):
        for b in self.boards:
            b.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
