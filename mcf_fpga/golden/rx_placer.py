"""Golden model of the RX placer : packets the NIC delivers locally
land in DDR at addresses the host programmed beforehand, counted per entry, so the node's
command fetcher can WAIT on a count and LOAD the payload. The hardware twin is
:class:`hdl.rx_placer.RxPlacer`; both apply these rules bit for bit.

Key
---
A packet's key is ``packet_key(meta)`` of its Meta header (:mod:`spec.rx_placer`). An entry
``e`` (``0 <= e < entries``) holds a key, ``base`` (a multiple of ``align``),
``limit`` (bytes) and, once valid, ``offset`` (bytes used) and ``landed`` (packets landed).

Rules (applied to each packet in arrival order)
-----------------------------------------------
1. **Pass**: a frame shorter than ``header_bytes``, or whose key matches no valid entry, goes
   out unchanged (``passed`` += 1), whatever it contains.
2. Otherwise the lowest-indexed valid entry with that key owns it. **Malformed** (counted
   ``drop_malformed``, entry unchanged, nothing written): the frame is not ``header_bytes +
   length`` bytes, ``length == 0`` or ``length > max_payload``. (The hardware also drops as
   malformed a partial ``keep`` before the last beat or a last ``keep`` that disagrees with
   ``length``; a byte string cannot express those.)
3. **Overrun** (``drop_overrun``, entry unchanged): ``offset + land_bytes(length, align) >
   limit``.
4. **Written**: payload bytes ``[0, length)`` go to ``base + offset`` (one DMA descriptor of
   ``length`` rounded up to the bus width, bytes past ``length`` in the final beat have WSTRB
   0), cut into INCR bursts (:func:`spec.dma.plan_bursts`); ``offset += land_bytes``.
   A burst the memory answers SLVERR/DECERR writes nothing (the others land); the packet then
   counts ``axi_err`` and the first error since ``clear`` keeps its code (4 SLVERR, 5 DECERR)
   and the failing burst's address; ``landed`` is not incremented but ``offset`` stays
   advanced. Else ``landed[e]`` += 1 and ``placed`` += 1.

Control (the ``ctrl`` register, :meth:`RxPlacer.ctrl`): bit 2 clears every entry (invalid,
offset 0, landed 0) and every counter and the error registers (bits 0 and 1 ignored); else for
``sel < entries`` bit 0 programs entry ``sel`` (valid, offset 0, landed 0; it wins over bit 1)
and bit 1 invalidates it (offset and landed kept); ``sel >= entries`` with bit 0 or 1 changes
nothing and counts ``bad_sel``. Counters saturate at 2**32 - 1.
"""
from __future__ import annotations

import enum

from mcf_fpga.golden.header import unpack_header
from mcf_fpga.spec.dma import DmaParams, burst_resp, plan_bursts
from mcf_fpga.spec.meta import DEFAULT_PARAMS, MetaParams
from mcf_fpga.spec.rx_placer import check_params, land_bytes, packet_key

__all__ = ["Outcome", "RxPlacer", "SLVERR", "DECERR"]

SLVERR, DECERR = 4, 5             #: error codes kept (``spec.dma.DmaStatus`` values)
_AXI_SLVERR, _AXI_DECERR = 2, 3   #: AXI RESP values of an error range
_M32 = (1 << 32) - 1


class Outcome(enum.Enum):
    """What :meth:`RxPlacer.receive` did with a frame."""
    PASSED = "passed"
    DROP_MALFORMED = "drop_malformed"
    DROP_OVERRUN = "drop_overrun"
    PLACED = "placed"
    AXI_ERR = "axi_err"


class RxPlacer:
    """Golden RX placer (module docstring: the rules).

    Parameters
    ----------
    entries : int
        Table entries (1..256).
    max_payload : int
        Largest ``length`` placed (a multiple of 8); longer packets of an entry are malformed.
    align : int
        Landing alignment in bytes (a power of two, at least the bus width in bytes).
    data_width : int
        The AXI master's width in bits (64 or 128): the descriptor is ``length`` rounded up to it.
    max_burst : int
        The DMA's largest burst in beats (error ranges act per burst).
    error_ranges : [(start, end, resp)]
        Addresses ``[start, end)`` the memory answers with AXI ``resp`` (2 SLVERR, 3 DECERR), as
        :class:`sim.AXI4Memory`'s ``error_ranges``.
    addr_width : int
        Address bits: ``base + limit`` must not exceed ``2**addr_width``.
    meta : spec.meta.MetaParams
    """

    def __init__(self, entries: int, max_payload: int, *, align: int | None = None, data_width: int = 128,
                 max_burst: int = 16, error_ranges=(), addr_width: int = 40, meta: MetaParams = DEFAULT_PARAMS):
        check_params(entries, max_payload, align, data_width, meta)
        self.entries, self.max_payload, self.meta = entries, max_payload, meta
        self.bus_bytes = data_width // 8
        self.align = self.bus_bytes if align is None else align
        self.dma = DmaParams(data_width=data_width, max_burst=max_burst, addr_width=addr_width)
        self.addr_width = addr_width
        self.error_ranges = [(int(s), int(e), int(r)) for s, e, r in error_ranges]
        self.memory: dict[int, int] = {}     #: byte address -> byte, every byte written
        self.passed_frames: list[bytes] = []
        self.clear()

    # ------------------------------------------------------------------ table and control
    def clear(self):
        """ctrl bit 2 (and reset): every entry invalid, offsets, landed, counters and the error 0."""
        E = self.entries
        self.valid = [False] * E
        self.key = [(0, 0, 0, 0)] * E
        self.base, self.limit = [0] * E, [0] * E
        self.offset, self.landed = [0] * E, [0] * E
        self.passed = self.placed = self.drop_malformed = self.drop_overrun = self.axi_err = self.bad_sel = 0
        self.err_code = self.err_addr = 0

    def _check_e(self, e):
        if not isinstance(e, int) or not 0 <= e < self.entries:
            raise ValueError(f"entry must be in 0..{self.entries - 1}, got {e!r}")

    def program(self, e: int, key, base: int, limit: int):
        """ctrl bit 0: entry ``e`` := key (``(kind, src, layer, block)``; layer None: any layer,
        the ``key_any_layer`` register), base, limit, valid, offset 0, landed 0."""
        self._check_e(e)
        kind, src, layer, block = key
        mp = self.meta
        for name, v, bits in (("key kind", int(kind), 3), ("key src", src, mp.node_bits),
                              ("key layer", 0 if layer is None else layer, mp.layer_bits),
                              ("key block", block, mp.block_bits), ("limit", limit, 32)):
            if not isinstance(v, int) or not 0 <= v < 1 << bits:
                raise ValueError(f"{name} must be an integer in 0..{(1 << bits) - 1}, got {v!r}")
        if base % self.align or base < 0:
            raise ValueError(f"base must be a non-negative multiple of align={self.align}, got {base:#x}")
        if base + limit > 1 << self.addr_width:
            raise ValueError(f"base + limit = {base + limit:#x} exceeds the {self.addr_width}-bit address space")
        self.valid[e] = True
        self.key[e] = (int(kind), src, layer, block)
        self.base[e], self.limit[e] = base, limit
        self.offset[e] = self.landed[e] = 0

    def invalidate(self, e: int):
        """ctrl bit 1: entry ``e`` no longer matches (offset and landed kept)."""
        self._check_e(e)
        self.valid[e] = False

    def ctrl(self, value: int, sel: int, key=(0, 0, 0, 0), base: int = 0, limit: int = 0):
        """A write of ``value`` to the ``ctrl`` register with the other registers as given."""
        if value & 4:
            self.clear()
        elif value & 3:
            if not 0 <= sel < self.entries:
                self.bad_sel = min(self.bad_sel + 1, _M32)
            elif value & 1:
                self.program(sel, key, base, limit)
            else:
                self.invalidate(sel)

    def match(self, key) -> int | None:
        """The lowest valid entry whose key is ``key`` (any layer where the entry's is None), else None."""
        kind, src, layer, block = key
        for e in range(self.entries):
            k = self.key[e]
            if self.valid[e] and k[0] == kind and k[1] == src and k[3] == block and k[2] in (None, layer):
                return e
        return None

    # ------------------------------------------------------------------ one packet
    def receive(self, frame: bytes) -> Outcome:
        """Apply one frame (Meta header + payload, as the NIC delivers it)."""
        frame = bytes(frame)
        hb = self.meta.header_bytes
        e = None
        if len(frame) >= hb:
            meta = unpack_header(frame[:hb], self.meta)
            e = self.match(packet_key(meta))
        if e is None:
            self.passed_frames.append(frame)
            self.passed = min(self.passed + 1, _M32)
            return Outcome.PASSED
        length = meta.length
        if len(frame) != hb + length or length == 0 or length > self.max_payload:
            self.drop_malformed = min(self.drop_malformed + 1, _M32)
            return Outcome.DROP_MALFORMED
        land = land_bytes(length, self.align)
        if self.offset[e] + land > self.limit[e]:
            self.drop_overrun = min(self.drop_overrun + 1, _M32)
            return Outcome.DROP_OVERRUN
        addr = self.base[e] + self.offset[e]
        self.offset[e] += land
        payload = frame[hb:]
        bb = self.bus_bytes
        first_err = None
        for baddr, beats in plan_bursts(self.dma, addr, -(-length // bb) * bb):
            resp = burst_resp(self.error_ranges, baddr, beats * bb)
            if resp in (_AXI_SLVERR, _AXI_DECERR):
                if first_err is None:
                    first_err = (SLVERR if resp == _AXI_SLVERR else DECERR, baddr)
                continue
            for a in range(baddr, min(baddr + beats * bb, addr + length)):
                self.memory[a] = payload[a - addr]
        if first_err is not None:
            self.axi_err = min(self.axi_err + 1, _M32)
            if not self.err_code:
                self.err_code, self.err_addr = first_err
            return Outcome.AXI_ERR
        self.landed[e] = min(self.landed[e] + 1, _M32)
        self.placed = min(self.placed + 1, _M32)
        return Outcome.PLACED

    def registers(self) -> dict:
        """The global register values (``hdl.rx_placer.registers`` names; busy excluded)."""
        return {"passed": self.passed, "placed": self.placed, "drop_malformed": self.drop_malformed,
                "drop_overrun": self.drop_overrun, "axi_err": self.axi_err, "err_code": self.err_code,
                "err_addr_lo": self.err_addr & _M32, "err_addr_hi": self.err_addr >> 32, "bad_sel": self.bad_sel}
