"""AXI4 memory responder for simulation: a slave answering a DUT's AXI4 master port.

Contract (the C++ model in ``mcf_fpga/sim/verilator`` implements the same cycle behaviour)
-----------------------------------------------------------------------------------
* Memory is ``size`` bytes at ``[base, base + size)`` (both multiples of the bus width); ``load``/``dump`` access it directly.
* AR (resp. AW) is accepted while fewer than ``max_outstanding`` reads (resp. writes) are
  in flight -- the limit applies to each direction separately. A read is in flight from
  AR acceptance to its last R beat, a write from AW acceptance to its B handshake.
* W beats are accepted only for an already-accepted AW (in AW order); WLAST is not used,
  the burst ends after ``len + 1`` beats. The B response is offered from the cycle after
  the last W beat. WSTRB is honoured per byte lane.
* The first R beat of a burst is offered no earlier than ``latency`` cycles after its AR
  handshake; bursts are answered in order (one at a time). R beats are rate-limited by a
  token bucket: every cycle adds ``bytes_per_cycle`` tokens (capped at
  ``max(bytes_per_cycle, data_width // 8)``), a beat costs ``data_width // 8`` tokens and
  is offered only when enough tokens are present (the bucket starts full).
* Only INCR bursts with ``size <= log2(data_width // 8)`` are served; FIXED/WRAP or an
  oversize beat answer SLVERR. A beat touching an address outside ``[base, base + size)``
  answers DECERR; one overlapping an ``error_ranges`` entry ``(start, end, resp)``
  (half-open ``[start, end)``) answers that ``resp``. Reads: every affected beat carries
  the error and data 0. Writes: B carries the worst (numerically largest) beat response
  and an erroring burst changes no memory at all.
* ``ready_seed`` ``None``: AR/AW/W are ready whenever capacity allows. An int: every cycle
  a splitmix64 generator (seeded with it) stalls each of AR/AW/W ready with probability
  1/4 (bits 0-1, 2-3, 4-5 of the draw; a stall when the 2 bits are 0).
* ``log`` lists every accepted transaction as ``(cycle, kind, addr, len, resp)`` where
  ``kind`` is ``"R"`` or ``"W"``, ``cycle`` counts clock edges since ``serve`` started, and
  ``resp`` is the burst's response as defined above. In one cycle an AR is logged before an AW.
"""
from collections import deque
from dataclasses import dataclass, field
from typing import Sequence

from amaranth.hdl import Value

from mcf_fpga.hdl.bus import Resp, Burst

__all__ = ["AXI4Memory", "SplitMix64"]

_M64 = (1 << 64) - 1


class SplitMix64:
    """splitmix64 (Steele et al.); the C++ model uses the same generator."""

    def __init__(self, seed: int):
        self.state = seed & _M64

    def next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & _M64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
        return z ^ (z >> 31)


@dataclass
class _Read:
    id: int
    addr: int
    len: int
    size: int
    burst: int
    accepted: int
    beat: int = 0


@dataclass
class _Write:
    id: int
    addr: int
    len: int
    size: int
    burst: int
    resp: int
    beats: list = field(default_factory=list)


class AXI4Memory:
    """AXI4 slave memory model (see the module docstring for the exact behaviour)."""

    def __init__(self, size: int, *, data_width: int = 128, base: int = 0, latency: int = 20,
                 bytes_per_cycle: int | None = None, max_outstanding: int = 8,
                 error_ranges: Sequence[tuple[int, int, Resp]] = (), ready_seed: int | None = None):
        if size <= 0:
            raise ValueError(f"size must be > 0, got {size}")
        if data_width < 8 or data_width > 1024 or data_width & (data_width - 1):
            raise ValueError(f"data_width must be a power of two in 8..1024, got {data_width}")
        if base < 0 or base % (data_width // 8):
            raise ValueError(f"base must be >= 0 and a multiple of the bus width "
                             f"({data_width // 8} bytes), got {base:#x}")
        if size % (data_width // 8):
            raise ValueError(f"size must be a multiple of the bus width ({data_width // 8} bytes), "
                             f"got {size}")
        if latency < 1:
            raise ValueError(f"latency must be >= 1, got {latency}")
        if max_outstanding < 1:
            raise ValueError(f"max_outstanding must be >= 1, got {max_outstanding}")
        self.bytes_per_beat = data_width // 8
        if bytes_per_cycle is None:
            bytes_per_cycle = self.bytes_per_beat
        if bytes_per_cycle < 1:
            raise ValueError(f"bytes_per_cycle must be >= 1, got {bytes_per_cycle}")
        for start, end, resp in error_ranges:
            if end <= start:
                raise ValueError(f"error range ({start:#x}, {end:#x}): end must be > start")
            Resp(resp)
        self.size, self.data_width, self.base = size, data_width, base
        self.latency, self.bytes_per_cycle, self.max_outstanding = latency, bytes_per_cycle, max_outstanding
        self.error_ranges = [(int(s), int(e), Resp(r)) for s, e, r in error_ranges]
        self.ready_seed = ready_seed
        self.mem = bytearray(size)
        self.log: list[tuple[int, str, int, int, Resp]] = []
        self._reset_state()

    # ---------------------------------------------------------------- memory access
    def load(self, addr: int, data: bytes):
        off = addr - self.base
        if off < 0 or off + len(data) > self.size:
            raise ValueError(f"load of {len(data)} bytes at {addr:#x} outside memory "
                             f"[{self.base:#x}, {self.base + self.size:#x})")
        self.mem[off:off + len(data)] = data

    def dump(self, addr: int, n: int) -> bytes:
        off = addr - self.base
        if off < 0 or n < 0 or off + n > self.size:
            raise ValueError(f"dump of {n} bytes at {addr:#x} outside memory "
                             f"[{self.base:#x}, {self.base + self.size:#x})")
        return bytes(self.mem[off:off + n])

    # ---------------------------------------------------------------- model core
    def _reset_state(self):
        self.cycle = 0
        self._reads: deque[_Read] = deque()
        self._writes: deque[_Write] = deque()   # accepted AW still receiving W beats
        self._bq: deque[tuple[int, int]] = deque()  # (id, resp)
        self._n_writes = 0
        self._tokens = self._cap = max(self.bytes_per_cycle, self.bytes_per_beat)
        self._rng = SplitMix64(self.ready_seed) if self.ready_seed is not None else None
        self._draw()

    def _draw(self):
        if self._rng is None:
            self._ok = (True, True, True)
        else:
            r = self._rng.next()
            self._ok = (bool(r & 3), bool((r >> 2) & 3), bool((r >> 4) & 3))

    def _beat_addr(self, addr, size, i):
        n = 1 << size
        return addr if i == 0 else (addr & ~(n - 1)) + i * n

    def _beat_resp(self, addr, size, burst):
        if burst != Burst.INCR or (1 << size) > self.bytes_per_beat:
            return Resp.SLVERR
        lo, hi = addr, (addr & ~((1 << size) - 1)) + (1 << size)
        if lo < self.base or hi > self.base + self.size:
            return Resp.DECERR
        for s, e, r in self.error_ranges:
            if lo < e and s < hi:
                return r
        return Resp.OKAY

    def _burst_resp(self, addr, len_, size, burst):
        return max((self._beat_resp(self._beat_addr(addr, size, i), size, burst)
                    for i in range(len_ + 1)), default=Resp.OKAY)

    def outputs(self):
        """Slave outputs for the current cycle: (ar_ready, aw_ready, w_ready, r, b) where
        ``r`` is None or (id, data, resp, last) and ``b`` is None or (id, resp)."""
        ok_ar, ok_aw, ok_w = self._ok
        ar_ready = len(self._reads) < self.max_outstanding and ok_ar
        aw_ready = self._n_writes < self.max_outstanding and ok_aw
        w_ready = bool(self._writes) and ok_w
        r = None
        if self._reads:
            t = self._reads[0]
            if self.cycle >= t.accepted + self.latency and self._tokens >= self.bytes_per_beat:
                a = self._beat_addr(t.addr, t.size, t.beat)
                resp = self._beat_resp(a, t.size, t.burst)
                data = 0
                if resp == Resp.OKAY:
                    off = (a & ~(self.bytes_per_beat - 1)) - self.base
                    data = int.from_bytes(self.mem[off:off + self.bytes_per_beat], "little")
                r = (t.id, data, int(resp), int(t.beat == t.len))
        b = self._bq[0] if self._bq else None
        return ar_ready, aw_ready, w_ready, r, b

    def edge(self, out, ar, aw, w, r_ready, b_ready):
        """Advance one clock edge. ``out`` is what :meth:`outputs` returned this cycle;
        ``ar``/``aw`` are None or (id, addr, len, size, burst) when valid; ``w`` is None or
        (data, strb) when valid; ``r_ready``/``b_ready`` are the master's readies."""
        ar_ready, aw_ready, w_ready, r, b = out
        if r is not None and r_ready:
            t = self._reads[0]
            t.beat += 1
            self._tokens -= self.bytes_per_beat
            if t.beat > t.len:
                self._reads.popleft()
        if b is not None and b_ready:
            self._bq.popleft()
            self._n_writes -= 1
        if w is not None and w_ready:
            t = self._writes[0]
            t.beats.append(w)
            if len(t.beats) > t.len:
                self._writes.popleft()
                if t.resp == Resp.OKAY:
                    for i, (data, strb) in enumerate(t.beats):
                        a = self._beat_addr(t.addr, t.size, i)
                        off = (a & ~(self.bytes_per_beat - 1)) - self.base
                        for j in range(self.bytes_per_beat):
                            if (strb >> j) & 1:
                                self.mem[off + j] = (data >> (8 * j)) & 0xFF
                self._bq.append((t.id, int(t.resp)))
        if ar is not None and ar_ready:
            id_, addr, len_, size, burst = ar
            self._reads.append(_Read(id_, addr, len_, size, burst, self.cycle))
            self.log.append((self.cycle, "R", addr, len_, self._burst_resp(addr, len_, size, burst)))
        if aw is not None and aw_ready:
            id_, addr, len_, size, burst = aw
            resp = self._burst_resp(addr, len_, size, burst)
            self._writes.append(_Write(id_, addr, len_, size, burst, resp))
            self._n_writes += 1
            self.log.append((self.cycle, "W", addr, len_, resp))
        self._tokens = min(self._cap, self._tokens + self.bytes_per_cycle)
        self.cycle += 1
        self._draw()

    # ---------------------------------------------------------------- Amaranth testbench
    def testbench(self, port):
        """``serve`` bound to ``port``: pass it to ``add_testbench(..., background=True)`` or
        ``run_simulation(..., background=[mem.testbench(dut.m_axi)])``."""
        async def serve_port(ctx):
            await self.serve(ctx, port)
        return serve_port

    async def serve(self, ctx, port):
        """Amaranth async testbench: answer ``port`` (the DUT's AXI4 master interface,
        ``hdl.bus.AXI4Signature``) forever. Add with ``sim.add_testbench(..., background=True)``."""
        check_port_width(port, self.data_width, "AXI4Memory")
        self._reset_state()
        sampled = port_samples(port)
        while True:
            out = self.outputs()
            drive_port(ctx, port, out)
            _, _, *v = await ctx.tick().sample(*sampled)
            self.edge(out, *parse_samples(v))


# ---------------------------------------------------------------- shared with SharedAXI4Memory
def check_port_width(port, data_width, who):
    width = Value.cast(port.r.payload.data).shape().width
    if width != data_width:
        raise ValueError(f"{who} data_width={data_width} but the port's r.data is {width} bits wide")


def port_samples(port):
    """The master-driven signals of ``port`` that :func:`parse_samples` decodes (17 values)."""
    ax = lambda ch: (ch.valid, ch.payload.id, ch.payload.addr, ch.payload.len,
                     ch.payload.size, ch.payload.burst)
    return (*ax(port.ar), *ax(port.aw), port.w.valid, port.w.payload.data,
            port.w.payload.strb, port.r.ready, port.b.ready)


def parse_samples(v):
    """Sampled values of :func:`port_samples` -> the ``ar, aw, w, r_ready, b_ready`` arguments of
    :meth:`AXI4Memory.edge`."""
    arv, *arp = v[0:6]
    awv, *awp = v[6:12]
    wv, wd, ws, rr, br = v[12:17]
    return (tuple(arp) if arv else None, tuple(awp) if awv else None,
            (wd, ws) if wv else None, bool(rr), bool(br))


def drive_port(ctx, port, out):
    """Set the slave outputs ``out`` (as :meth:`AXI4Memory.outputs` returns them) on ``port``."""
    ar_ready, aw_ready, w_ready, r, b = out
    ctx.set(port.ar.ready, ar_ready)
    ctx.set(port.aw.ready, aw_ready)
    ctx.set(port.w.ready, w_ready)
    ctx.set(port.r.valid, r is not None)
    if r is not None:
        ctx.set(port.r.payload.id, r[0])
        ctx.set(port.r.payload.data, r[1])
        ctx.set(port.r.payload.resp, r[2])
        ctx.set(port.r.payload.last, r[3])
    ctx.set(port.b.valid, b is not None)
    if b is not None:
        ctx.set(port.b.payload.id, b[0])
        ctx.set(port.b.payload.resp, b[1])
