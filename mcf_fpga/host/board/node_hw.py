"""The ``hw`` interface of ``host.executors.rtl.NodeDriver`` on a node board
(``mcf_fpga/boards/node_top.py``): the node's streams become DMA descriptors and ring records in host DMA
buffers, driven through the NodeDMA register window at ``DMA_BASE`` (formats and registers:
``mcf_fpga/boards/node_dma.py``).

=================  ==================================================================================
``hw`` call        on the board
=================  ==================================================================================
push s_axis_cmd    each instruction as a ``CMD_BYTES`` record in the command ring, ``cmd`` descriptor;
                   every ``SPR`` among them also posts an ``sp_out`` descriptor of 16*ceil(n0/4) bytes
push s_axis_w      one weight tile (beats padded to ``W_BEAT_BYTES``) per ``w`` descriptor
push s_axis_sp     words in the scratchpad-in ring, ``sp_in`` descriptor of 4*n bytes
push s_axis_kvcmd  ``KV_CMD_LO/HI`` then ``KV_GO`` (at most 4 outstanding)
pull m_axis_rx     RX ring records ``RX_RP``..``RX_WP``-1 (header checked), then ``RX_RP`` = ``RX_WP``
pull m_axis_sp     the words of every ``sp_out`` descriptor that is ``DONE``, in SPR order
expect_sp_out(n)   an ``SPR`` of n words the host did not push (a fetched stream): its ``sp_out``
                   descriptor
pull m_axis_kvresp ``KV_RESP`` while bit 31 (valid) is set
pull m_axis_kvevent (``kv_event_bits``, a ``kv_install`` node) while ``KV_EV_STATUS`` bit 0 is set
                   (at most ``KV_EV_DEPTH`` a call): ``KV_EV_W0..W2``, then ``KV_EV_POP``;
                   ``KV_EV_CTRL`` = 1 from the start
pending(port)      bytes pushed and not yet read by the node's DMA (queued + posted, not ``DONE``)
axil_read/write    the node's own registers, 0x0000..0x7FFF (its windows, the fetcher's at 0x5000
                   included; no DMA registers)
memory(port, n)    (a fetching node: ``m_axi_cmd``, ``m_axi_load``) a DMA buffer of n bytes that the
                   node's command fetcher (HP0) or stream loader (HP2) reads: ``.base`` (its
                   address, chosen by the allocator), ``.load(addr, bytes)``, ``.dump(addr, n)``
memory(port,       (a node with an RX placer: ``m_axi_rx``, ``share="m_axi_load"``) the loader's
  share=...)       buffer again, nothing allocated: the placer (HP0's writes) lands received
                   payloads in the landing zones of the node's image, which the loader reads
cycle / step(n)    the ``clock`` given (simulator cycles, or elapsed time on a board)
=================  ==================================================================================

A ``kv_install`` node reports every KV-pool command it executes on ``m_axis_kvevent``
(``host.executors.kv_events.PoolMirror`` replays them): with ``kv_event_bits`` set, :meth:`NodeHw.start`
turns the front-end's event queue on (``KV_EV_CTRL`` = 1: lossless, a full queue stalls the pool)
and every pull checks ``KV_EV_DISCARDED`` still reads what it read then: an event the front-end
discarded (the queue was off: a node reset, another host) is a :class:`BoardError`, never a gap in
the mirror. Each event is returned as the Verilated node's frame: ``kv_event_bits / 8`` bytes,
little-endian (``hdl.kvpool.event_layout``).

A fetching node's front-end has no ``cmd``, ``sp_in`` and ``w`` readers (its ``ENGINES`` register,
``mcf_fpga/boards/node_dma.py``): pushing to their streams raises ``BoardError``, no ring is allocated for
them and their ``pending`` is 0; the node reads its command stream and its image from buffers
given by :meth:`NodeHw.memory`.

Host data waits in a software queue until its ring has room and its engine has fewer than
``desc_depth`` descriptors outstanding, so no post is ever refused for a full queue; a refused
post, a DMA error code, an RX record cut to its slot or out of sequence raise
:class:`BoardError` naming the register and its value. Nothing here waits without bound: every
call does at most one pass over the registers.
"""
from __future__ import annotations

import collections

import numpy as np
from amaranth import Shape

from mcf_fpga.boards.node_dma import DMA_ID, ENGINES, FETCHED_ENGINES, HP_BYTES, INFO_REGS, KV_EV_DEPTH, KV_EV_REGS, KV_REGS, RX_REGS, \
    Reject, engine_offset
from mcf_fpga.boards.node_top import DMA_BASE
from mcf_fpga.hdl.bus import Resp
from mcf_fpga.hdl.compute.engine import INSTR
from mcf_fpga.spec.instr import EngineOpcode
from mcf_fpga.spec.dma import DmaStatus
from mcf_fpga.hdl.node import NODE_ID, WINDOWS

__all__ = ["NodeHw", "BoardError", "DmaImage", "identify", "instr_field", "NODE_WINDOW", "FETCH_PORTS",
           "SHARED_PORTS"]

NODE_WINDOW = DMA_BASE          #: the node's own registers: 0x0000..0x7FFF (mcf_fpga/boards/node_top.py)
#: the fetching node's AXI read masters whose memory is a host DMA buffer (``NodeHw.memory``)
FETCH_PORTS = ("m_axi_cmd", "m_axi_load")
#: the node's AXI write masters that write into a read master's buffer (``NodeHw.memory(port, share=)``)
SHARED_PORTS = {"m_axi_rx": "m_axi_load"}
_PORT_ENGINE = {"s_axis_cmd": "cmd", "s_axis_w": "w", "s_axis_sp": "sp_in"}
_NODE_ID_REG = dict((n, b) for n, b, _ in WINDOWS)["node"]
INSTR_BYTES = -(-INSTR.size // 8)


class BoardError(RuntimeError):
    """The board refused or failed a request (the message names the register and its value)."""


def instr_field(raw: int, name: str) -> int:
    """Field ``name`` of an instruction given as its ``INSTR`` bits (bit 0 = first field)."""
    f = INSTR[name]
    return (raw >> f.offset) & ((1 << Shape.cast(f.shape).width) - 1)


def _up16(n: int) -> int:
    return -(-n // HP_BYTES) * HP_BYTES


def identify(window) -> dict:
    """Check a register window holds a node board: the node's ID register (0x3000) and the DMA
    front-end's (0x8000); returns the front-end's sizes (``INFO_REGS`` but ``id``)."""
    nid = window.read(_NODE_ID_REG)
    if nid != NODE_ID:
        raise BoardError(f"no MCF node at the register window: node ID register {_NODE_ID_REG:#06x} "
                         f"reads {nid:#010x}, expected {NODE_ID:#010x}")
    did = window.read(DMA_BASE + INFO_REGS["id"])
    if did != DMA_ID:
        raise BoardError(f"no node DMA front-end: ID register {DMA_BASE:#06x} reads {did:#010x}, "
                         f"expected {DMA_ID:#010x}")
    return {k: window.read(DMA_BASE + off) for k, off in INFO_REGS.items() if k != "id"}


class _Ring:
    """In-order circular allocation of byte ranges (16-aligned) in one DMA buffer."""

    def __init__(self, name, buf):
        self.name, self.buf, self.size = name, buf, buf.nbytes
        self.head = 0                               # next free byte
        self.live = collections.deque()             # (offset, nbytes) in allocation order

    def alloc(self, n: int):
        """Offset of ``n`` free bytes (rounded up to 16) after the newest live range, wrapping
        to 0 when the end of the buffer is too short; None while the space is still in use."""
        n = _up16(n)
        if n > self.size:
            raise BoardError(f"{self.name}: {n} bytes do not fit its {self.size}-byte DMA buffer")
        if not self.live:
            start = 0
        elif self.head > self.live[0][0]:            # in use: [first, head)
            if self.head + n <= self.size:
                start = self.head
            elif n <= self.live[0][0]:
                start = 0
            else:
                return None
        elif self.head + n <= self.live[0][0]:       # wrapped: in use [first, size) + [0, head)
            start = self.head
        else:
            return None
        self.live.append((start, n))
        self._undo, self.head = self.head, start + n
        return start

    def undo(self):
        """Take back the newest allocation (its post was refused)."""
        self.live.pop()
        self.head = self._undo

    def release(self):
        self.live.popleft()
        if not self.live:
            self.head = 0

    def write(self, off: int, data: bytes):
        self.buf.array.view(np.uint8).reshape(-1)[off:off + len(data)] = np.frombuffer(data, np.uint8)

    def read(self, off: int, n: int) -> bytes:
        return self.buf.array.view(np.uint8).reshape(-1)[off:off + n].tobytes()

    def address(self, off: int) -> int:
        return self.buf.physical_address + off


class DmaImage:
    """A DMA buffer a node's AXI master reads (``NodeHw.memory``): ``base`` (its physical
    address), ``size``, ``load(addr, data)`` (written and flushed to DDR), ``dump(addr, n)``
    (invalidated first). Addresses are bus addresses inside ``[base, base + size)``."""

    def __init__(self, port, buf):
        self.port, self.buf = port, buf
        self.base, self.size = buf.physical_address, buf.nbytes

    def _range(self, addr, n):
        if not isinstance(addr, int) or addr < self.base or addr + n > self.base + self.size:
            raise ValueError(f"{self.port} memory: {n} bytes at {addr!r} leave its DMA buffer "
                             f"[{self.base:#x}, {self.base + self.size:#x})")
        return addr - self.base

    def load(self, addr: int, data: bytes):
        off = self._range(addr, len(data))
        self.buf.array.view(np.uint8).reshape(-1)[off:off + len(data)] = np.frombuffer(bytes(data), np.uint8)
        self.buf.flush()

    def dump(self, addr: int, n: int) -> bytes:
        off = self._range(addr, n)
        self.buf.invalidate()
        return self.buf.array.view(np.uint8).reshape(-1)[off:off + n].tobytes()


class _Engine:
    """One NodeDMA engine: host queue -> posted descriptors (<= depth) -> DONE."""

    def __init__(self, window, name, ring, depth):
        self.win, self.name, self.ring, self.depth = window, name, ring, depth
        self.queue = collections.deque()      # (data bytes | None, length, tag) not yet posted
        self.posted = collections.deque()     # (offset, length, tag) posted, not DONE
        self.done = 0                         # DONE count seen
        self.count = 0                        # posts made (POSTED expected)
        self.last_len = self.last_hi = None

    def reg(self, r):
        return DMA_BASE + engine_offset(self.name, r)

    def queued_bytes(self):
        return sum(q[1] for q in self.queue) + sum(p[1] for p in self.posted)

    def post_ready(self):
        """Post queued items while the ring and the descriptor queue have room."""
        while self.queue and len(self.posted) < self.depth:
            data, length, tag = self.queue[0]
            off = self.ring.alloc(length)
            if off is None:
                return
            self.queue.popleft()
            if data is not None:
                self.ring.write(off, data)
                self.ring.buf.flush()
            addr = self.ring.address(off)
            w = self.win.write
            w(self.reg("addr_lo"), addr & 0xFFFFFFFF)
            if addr >> 32 != self.last_hi:
                w(self.reg("addr_hi"), addr >> 32)
                self.last_hi = addr >> 32
            if length != self.last_len:
                w(self.reg("length"), length)
                self.last_len = length
            w(self.reg("go"), 1)
            code = self.win.read(self.reg("code"))
            if (code >> 8) & 0xF != Reject.NONE:       # refused: the item stays queued
                self.ring.undo()
                self.queue.appendleft((data, length, tag))
                raise BoardError(f"{self.name} GO refused: CODE={code:#x} (bits 11..8 = "
                                 f"{(code >> 8) & 0xF}: 8 queue full, 9 LENGTH={length} not whole "
                                 f"records); REJECTED={self.win.read(self.reg('rejected'))}")
            self.count += 1
            self.posted.append((off, length, tag))

    def retire(self):
        """Descriptors answered since the last call, as (offset, length, tag); errors raise."""
        if not self.posted:
            return []
        done = self.win.read(self.reg("done"))
        n = (done - self.done) & 0xFFFFFFFF
        if not n:
            return []
        if n > len(self.posted):
            raise BoardError(f"{self.name} DONE={done} but only {self.count} descriptors were posted")
        errors = self.win.read(self.reg("errors"))
        if errors:
            code = self.win.read(self.reg("code"))
            st = self.win.read(self.reg("st_addr_lo")) | self.win.read(self.reg("st_addr_hi")) << 32
            raise BoardError(f"{self.name} DMA error: ERRORS={errors}, CODE={code:#x} "
                             f"({DmaStatus(code & 0xF).name}), ST_ADDR={st:#x}")
        self.done = done
        out = []
        for _ in range(n):
            out.append(self.posted.popleft())
            self.ring.release()
        return out


class NodeHw:
    """See the module docstring.

    Parameters
    ----------
    window
        32-bit register access to the board's AXI-Lite window (``read(offset)``,
        ``write(offset, value)``; ``host.board.mmio`` or a simulated one).
    allocator
        DMA buffers (``allocate(shape, dtype)`` -> ``host.board.buffers.Buffer``).
    clock
        ``cycle`` (int) and ``step(n)``: simulator cycles, or elapsed time on a board.
    engine : dict
        The node's engine parameters (``pn``, ``pk``: the weight beat is pn*pk*4 bits).
    kv_cmd_bits, kv_resp_bits : int
        Widths of the KV pool's command and response words (``hdl.node.Node``).
    ring_bytes : dict
        DMA buffer bytes per ring (``cmd``, ``sp_in``, ``w``, ``sp_out``); ``rx_slots`` RX slots.
    desc_depth : int
        Descriptors posted at once per engine (NodeDMA ``desc_depth``).
    poll_cycles : int
        Reader engines' ``DONE`` registers are read at most once per this many cycles.
    kv_event_bits : int
        Width of the node's ``m_axis_kvevent`` frames (a multiple of 8, at most 96) when the node
        has ``kv_install`` (``hdl.node.Node.kv_event_layout``, padded to bytes); 0 (default): the
        node has no event stream and its event registers are not touched.
    """

    RINGS = {"cmd": 1 << 14, "sp_in": 1 << 17, "w": 1 << 14, "sp_out": 1 << 16}

    def __init__(self, window, allocator, clock, *, engine: dict, kv_cmd_bits: int, kv_resp_bits: int,
                 ring_bytes: dict | None = None, rx_slots: int = 16, desc_depth: int = 4,
                 poll_cycles: int = 32, kv_event_bits: int = 0):
        if isinstance(kv_event_bits, bool) or not isinstance(kv_event_bits, int) or \
                not (kv_event_bits == 0 or (8 <= kv_event_bits <= 96 and kv_event_bits % 8 == 0)):
            raise ValueError(f"kv_event_bits must be 0 or a multiple of 8 in 8..96, got {kv_event_bits!r}")
        self.kv_event_bytes = kv_event_bits // 8
        self.kv_ev_discarded = 0
        self.window, self.clock = window, clock
        self.poll_cycles, self._polled = poll_cycles, -poll_cycles
        self.info = self.identify()
        self.w_raw = engine["pn"] * engine["pk"] * 4 // 8
        if -(-self.w_raw // HP_BYTES) * HP_BYTES != self.info["w_beat_bytes"]:
            raise BoardError(f"W_BEAT_BYTES={self.info['w_beat_bytes']} does not hold a weight beat of "
                             f"{self.w_raw} bytes (engine pn={engine['pn']}, pk={engine['pk']})")
        if self.info["cmd_bytes"] < INSTR_BYTES:
            raise BoardError(f"CMD_BYTES={self.info['cmd_bytes']} is smaller than an instruction "
                             f"({INSTR_BYTES} bytes)")
        if not 1 <= rx_slots <= 0xFFFF:
            raise ValueError(f"rx_slots must be in 1..65535, got {rx_slots}")
        self.kv_cmd_bytes, self.kv_resp_bytes = -(-kv_cmd_bits // 8), -(-kv_resp_bits // 8)
        sizes = dict(self.RINGS, **(ring_bytes or {}))
        if sizes["w"] < self.info["w_tile_bytes"]:
            sizes["w"] = _up16(self.info["w_tile_bytes"])
        built = self.info["engines"]
        self.fetching = not any(built >> ENGINES[e] & 1 for e in FETCHED_ENGINES)
        if built & 1 << ENGINES["sp_out"] == 0 or not self.fetching and built != (1 << len(ENGINES)) - 1:
            raise BoardError(f"ENGINES={built:#x}: expected every engine ({(1 << len(ENGINES)) - 1:#x}) or, on a "
                             f"fetching node, sp_out only ({1 << ENGINES['sp_out']:#x})")
        self.allocator = allocator
        self.eng = {name: _Engine(window, name, _Ring(name, allocator.allocate((sizes[name],), np.uint8)),
                                  desc_depth) for name in ENGINES if built >> ENGINES[name] & 1}
        slot = self.info["rx_slot_bytes"]
        self.rx_buf = allocator.allocate((rx_slots * slot,), np.uint8)
        self.rx_slots, self.rx_seen = rx_slots, 0
        self.kv_queue = collections.deque()
        self.kv_out = 0
        self.images = {}                 # port -> its DmaImage (memory)
        self.start()

    def identify(self) -> dict:
        return identify(self.window)

    def start(self):
        """(Re)start the RX ring (after a node reset): base, slot count, read count 0."""
        a = self.rx_buf.physical_address
        self.window.write(DMA_BASE + RX_REGS["rx_base_lo"], a & 0xFFFFFFFF)
        self.window.write(DMA_BASE + RX_REGS["rx_base_hi"], a >> 32)
        self.window.write(DMA_BASE + RX_REGS["rx_rp"], 0)
        self.window.write(DMA_BASE + RX_REGS["rx_slots"], self.rx_slots)
        self.rx_seen = 0
        if self.kv_event_bytes:          # keep the pool's events from now on (losslessly)
            self.window.write(DMA_BASE + KV_EV_REGS["kv_ev_ctrl"], 1)
            if self.window.read(DMA_BASE + KV_EV_REGS["kv_ev_ctrl"]) & 1 != 1:
                raise BoardError("KV_EV_CTRL reads 0 after a write of 1: the board's node has no KV event "
                                 "queue (a top built without kv_install?)")
            self.kv_ev_discarded = self.window.read(DMA_BASE + KV_EV_REGS["kv_ev_discarded"])

    # ------------------------------------------------------------------ the hw interface
    @property
    def cycle(self) -> int:
        return self.clock.cycle

    def step(self, n: int):
        self.clock.step(n)

    def axil_read(self, addr: int):
        self._check_node_addr(addr)
        return self.window.read(addr), Resp.OKAY

    def axil_write(self, addr: int, value: int):
        self._check_node_addr(addr)
        self.window.write(addr, value)
        return Resp.OKAY

    @staticmethod
    def _check_node_addr(addr):
        if not isinstance(addr, int) or not 0 <= addr < NODE_WINDOW:
            raise ValueError(f"node register address {addr!r} must be in 0..{NODE_WINDOW - 1:#x} "
                             f"(the DMA window is driven by NodeHw itself)")

    def memory(self, port: str, size: int | None = None, *, base: int | None = None, share: str | None = None,
               **_model) -> DmaImage:
        """A DMA buffer of ``size`` bytes for a fetching node's read master ``port``
        (:data:`FETCH_PORTS`: the command fetcher on HP0, the stream loader on HP2; both see the
        board's one DDR). ``base`` is a wish the board does not honour (the allocator chooses:
        use the returned ``.base``); the memory-model keywords of the simulator's ``memory``
        (``latency``, ...) are ignored: the board's DDR has its own. With ``share`` (a write
        master of :data:`SHARED_PORTS` and its read master, e.g. the RX placer's ``m_axi_rx``
        and ``m_axi_load``): the buffer ``share`` already got, returned again (``size`` unused)."""
        if share is not None or port in SHARED_PORTS:
            if SHARED_PORTS.get(port) != share:
                raise ValueError(f"memory({port!r}, share={share!r}): a board shares "
                                 + ", ".join(f"{w}'s memory with {r}'s" for w, r in SHARED_PORTS.items()) + " only")
            if share not in self.images:
                raise ValueError(f"memory({port!r}, share={share!r}): allocate {share}'s buffer first")
            self.images[port] = self.images[share]
            return self.images[port]
        if port not in FETCH_PORTS:
            raise ValueError(f"memory({port!r}): a board gives DMA buffers to {', '.join(FETCH_PORTS)} only")
        if not self.fetching:
            raise BoardError(f"memory({port!r}): the board's node does not fetch (ENGINES="
                             f"{self.info['engines']:#x}: its front-end reads commands and data itself)")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"memory({port!r}): size must be a positive number of bytes, got {size!r}")
        self.images[port] = DmaImage(port, self.allocator.allocate((size,), np.uint8))
        return self.images[port]

    def _absent(self, port):
        raise BoardError(f"push to {port}: the board's node fetches its commands and data (ENGINES="
                         f"{self.info['engines']:#x}: no {_PORT_ENGINE[port]} reader); load them into "
                         f"memory('m_axi_cmd' / 'm_axi_load') instead")

    def push(self, port: str, data: bytes):
        data = bytes(data)
        if not data:
            raise ValueError(f"push to {port}: frames carry at least one byte")
        if _PORT_ENGINE.get(port) in FETCHED_ENGINES and _PORT_ENGINE[port] not in self.eng:
            self._absent(port)
        if port == "s_axis_cmd":
            self._push_cmd(data)
        elif port == "s_axis_w":
            self._push_w(data)
        elif port == "s_axis_sp":
            if len(data) % 4:
                raise ValueError(f"push to s_axis_sp: {len(data)} bytes is not a whole number of 32-bit words")
            self._queue("sp_in", data, 4)
        elif port == "s_axis_kvcmd":
            if len(data) != self.kv_cmd_bytes:
                raise ValueError(f"push to s_axis_kvcmd: {len(data)} bytes, a command is {self.kv_cmd_bytes}")
            self.kv_queue.append(int.from_bytes(data, "little"))
        else:
            raise ValueError(f"no input stream {port!r} (s_axis_cmd, s_axis_w, s_axis_sp, s_axis_kvcmd)")
        self.service()

    def _push_cmd(self, data):
        if len(data) % INSTR_BYTES:
            raise ValueError(f"push to s_axis_cmd: {len(data)} bytes is not a whole number of "
                             f"{INSTR_BYTES}-byte instructions")
        rec = self.info["cmd_bytes"]
        out = bytearray()
        for k in range(0, len(data), INSTR_BYTES):
            ins = data[k:k + INSTR_BYTES]
            raw = int.from_bytes(ins, "little")
            n = instr_field(raw, "n0")
            if instr_field(raw, "op") == EngineOpcode.SPR and n:  # its words leave through sp_out
                self._sp_out(n)
            out += ins + bytes(rec - INSTR_BYTES)
        self._queue("cmd", bytes(out), rec)

    def expect_sp_out(self, n: int):
        """The node will run an ``SPR`` of ``n`` words that the host did not push (a fetched
        stream, ``host.executors.rtl.NodeDriver.expect_reads``): queue its ``sp_out`` descriptor of
        16*ceil(n/4) bytes, in ``SPR`` order (``pull_all('m_axis_sp')`` returns its words)."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"expect_sp_out: an SPR reads at least one word, got {n!r}")
        self._sp_out(n)
        self.service()

    def _sp_out(self, n):
        self.eng["sp_out"].queue.append((None, _up16(4 * n), 4 * n))

    def _queue(self, name, data, record):
        """Queue ``data`` for engine ``name`` in pieces of whole records, each at most a quarter
        of its ring (so a long frame streams through the ring)."""
        e = self.eng[name]
        piece = max(record, e.ring.size // 4 // record * record)
        for k in range(0, len(data), piece):
            e.queue.append((data[k:k + piece], len(data[k:k + piece]), None))

    def _push_w(self, data):
        raw, beat = self.w_raw, self.info["w_beat_bytes"]
        if len(data) % raw:
            raise ValueError(f"push to s_axis_w: {len(data)} bytes is not a whole number of {raw}-byte beats")
        if raw != beat:
            data = b"".join(data[k:k + raw] + bytes(beat - raw) for k in range(0, len(data), raw))
        if len(data) > self.info["w_tile_bytes"]:
            raise ValueError(f"push to s_axis_w: a tile of {len(data)} bytes exceeds the largest weight tile "
                             f"(W_TILE_BYTES={self.info['w_tile_bytes']})")
        self.eng["w"].queue.append((data, len(data), None))

    def service(self):
        """Post what the rings and descriptor queues have room for; send queued KV commands."""
        poll = self.clock.cycle - self._polled >= self.poll_cycles
        if poll:
            self._polled = self.clock.cycle
        for name in ("cmd", "sp_in", "w"):
            e = self.eng.get(name)
            if e is None:
                continue
            if poll:
                e.retire()             # reader descriptors: DONE frees their ring space
            e.post_ready()
        self.eng["sp_out"].post_ready()
        while self.kv_queue and self.kv_out < 4:
            v = self.kv_queue.popleft()
            before = self.window.read(DMA_BASE + KV_REGS["kv_rejected"])
            self.window.write(DMA_BASE + KV_REGS["kv_cmd_lo"], v & 0xFFFFFFFF)
            if self.kv_cmd_bytes > 4:
                self.window.write(DMA_BASE + KV_REGS["kv_cmd_hi"], v >> 32)
            self.window.write(DMA_BASE + KV_REGS["kv_go"], 1)
            after = self.window.read(DMA_BASE + KV_REGS["kv_rejected"])
            if after != before:
                raise BoardError(f"KV_GO refused: KV_REJECTED={after} (was {before}; the 4-deep queue is full)")
            self.kv_out += 1

    def pending(self, port: str) -> int:
        self.service()
        if port == "s_axis_kvcmd":
            return len(self.kv_queue) * self.kv_cmd_bytes
        name = _PORT_ENGINE.get(port)
        if name is None:
            raise ValueError(f"no input stream {port!r} (s_axis_cmd, s_axis_w, s_axis_sp, s_axis_kvcmd)")
        return self.eng[name].queued_bytes() if name in self.eng else 0

    def pull_all(self, port: str) -> list:
        self.service()
        if port == "m_axis_rx":
            return self._pull_rx()
        if port == "m_axis_sp":
            e = self.eng["sp_out"]
            done = e.retire()
            if done:
                e.ring.buf.invalidate()
            out = [e.ring.read(off, n) for off, _, n in done]
            e.post_ready()
            return out
        if port == "m_axis_kvresp":
            out = []
            while self.kv_out:
                v = self.window.read(DMA_BASE + KV_REGS["kv_resp"])
                if not v >> 31:
                    return out
                self.kv_out -= 1
                out.append((v & 0x7FFFFFFF).to_bytes(self.kv_resp_bytes, "little"))
            return out
        if port == "m_axis_kvevent":
            return self._pull_kvevent()
        raise ValueError(f"no output stream {port!r} (m_axis_rx, m_axis_sp, m_axis_kvresp, m_axis_kvevent)")

    def _pull_kvevent(self) -> list:
        """The events queued in the front-end (at most ``KV_EV_DEPTH``), oldest first; a
        BoardError if the front-end discarded any since :meth:`start`."""
        if not self.kv_event_bytes:
            raise BoardError("pull m_axis_kvevent: this NodeHw was opened without kv_event_bits (the "
                             "node's kv_install event stream); its events are not queued")
        r = lambda name: self.window.read(DMA_BASE + KV_EV_REGS[name])  # noqa: E731
        discarded = r("kv_ev_discarded")
        if discarded != self.kv_ev_discarded:
            raise BoardError(f"KV_EV_DISCARDED={discarded} (was {self.kv_ev_discarded} when the queue was "
                             f"turned on; KV_EV_CTRL={r('kv_ev_ctrl')}): the front-end dropped KV pool "
                             f"events, the host's copy of the pool cannot follow the node (was it reset?)")
        words = -(-self.kv_event_bytes // 4)
        out = []
        # bit 0 (the queue's output holds an event) decides, not the count in bits 8..15: that
        # counts an event a cycle before it can be read; at most a queue's worth per call
        for _ in range(KV_EV_DEPTH):
            if not r("kv_ev_status") & 1:
                break
            v = 0
            for k in range(words):
                v |= r(f"kv_ev_w{k}") << (32 * k)
            self.window.write(DMA_BASE + KV_EV_REGS["kv_ev_pop"], 1)
            out.append(v.to_bytes(4 * words, "little")[:self.kv_event_bytes])
        return out

    def _pull_rx(self) -> list:
        wp = self.window.read(DMA_BASE + RX_REGS["rx_wp"])
        if wp == self.rx_seen:
            return []
        errors = self.window.read(DMA_BASE + RX_REGS["rx_errors"])
        if errors:
            code = self.window.read(DMA_BASE + RX_REGS["rx_code"])
            raise BoardError(f"RX ring write error: RX_ERRORS={errors}, RX_CODE={code:#x} ({DmaStatus(code & 0xF).name})")
        if (wp - self.rx_seen) & 0xFFFFFFFF > self.rx_slots:
            raise BoardError(f"RX_WP={wp} is more than RX_SLOTS={self.rx_slots} records past RX_RP={self.rx_seen}")
        self.rx_buf.invalidate()
        mem = self.rx_buf.array.view(np.uint8).reshape(-1)
        slot = self.info["rx_slot_bytes"]
        out = []
        for j in range(self.rx_seen, wp):
            s = (j % self.rx_slots) * slot
            length, flags, seq = (int.from_bytes(mem[s + 4 * i:s + 4 * i + 4].tobytes(), "little") for i in range(3))
            if flags & 1:
                raise BoardError(f"RX record {j}: flags={flags:#x}, bit 0: a packet cut to its slot of "
                                 f"{slot - HP_BYTES} bytes (length field {length})")
            if seq != j:
                raise BoardError(f"RX record in slot {j % self.rx_slots}: sequence {seq}, expected {j}")
            if length > slot - HP_BYTES:
                raise BoardError(f"RX record {j}: length {length} exceeds the slot's {slot - HP_BYTES} bytes")
            out.append(mem[s + HP_BYTES:s + HP_BYTES + length].tobytes())
        self.rx_seen = wp
        self.window.write(DMA_BASE + RX_REGS["rx_rp"], wp)
        return out
