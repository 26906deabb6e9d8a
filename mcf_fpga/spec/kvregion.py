"""The KV region in DDR: where a KV-pool slot's K and V rows live and how a row is packed.

The KV-pool directory (:mod:`spec.kvpool`) hands out slot numbers; this module turns a slot
into DDR addresses and row bytes. The hardware (:class:`hdl.dma.kvstream.KVStreamer`, the KV
installer) computes the same addresses in logic; ``golden.kvstore.KVStore`` is a byte image of
a region, which the tests check written bytes against.

Layout
------
* The region is ``n_slots`` slots of ``slot_bytes`` at ``base``: slot ``s`` starts at
  ``base + s * slot_bytes``. ``base`` and ``slot_bytes`` are multiples of the bus width.
* A slot holds ``slot_rows`` K rows, then ``slot_rows`` V rows:
  ``row_addr(s, sel, r) = base + s * slot_bytes + (sel * slot_rows + r) * row_bytes``
  (``sel`` 0 = K, 1 = V). A row is one (token, kv-head) vector of ``d`` values; which row holds
  which token/head is the program's choice (the executor: head g, token t at ``g * stride + t``).
* A row is a record of ``row_bytes`` = the smallest multiple of the bus width holding
  ``d * kv_bits + 8`` bits, read as one little-endian integer: value i (two's complement,
  ``kv_bits`` 8 or 4) at bits ``[kv_bits * i, kv_bits * (i + 1))``, the row's exponent ``e``
  (int8) at bits ``[d * kv_bits, d * kv_bits + 8)``, zeros above.
* On chip (the attention unit's K/V memory word, :func:`staging_word`) a row is the d values as
  int8 lanes (INT4 sign-extended), lane i at bits ``8i..8i+7``, and ``e`` at bits ``8d..8d+7``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["KVRegion", "staging_word", "GIB", "kr260_region"]

GIB = 1 << 30


def _check_value(name, x, bits):
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if not lo <= int(x) <= hi:
        raise ValueError(f"{name}={x} is outside the {bits}-bit range [{lo}, {hi}]")


@dataclass(frozen=True)
class KVRegion:
    """Address map of one node's KV region (see the module docstring).

    Parameters
    ----------
    base : int
        First byte of the region (a multiple of ``bus_bytes``).
    n_slots : int
        Slots in the region (the KV pool's ``n_slots``).
    slot_rows : int
        K rows (and as many V rows) per slot.
    d : int
        Values per row (head_dim).
    kv_bits : int
        8 or 4: bits per stored value.
    bus_bytes : int
        AXI data width in bytes (16 on the Zynq HP ports).
    name : str
        What the region is called in messages (e.g. ``kr260_region(kv_bits=8)``); not part of the
        layout (ignored by ``==``).
    """
    base: int
    n_slots: int
    slot_rows: int
    d: int
    kv_bits: int = 8
    bus_bytes: int = 16
    name: str = field(default="", compare=False)

    def __post_init__(self):
        if self.bus_bytes < 1 or self.bus_bytes & (self.bus_bytes - 1):
            raise ValueError(f"bus_bytes must be a power of two, got {self.bus_bytes}")
        if self.kv_bits not in (4, 8):
            raise ValueError(f"kv_bits must be 8 or 4, got {self.kv_bits}")
        if self.d < 1 or (self.d * self.kv_bits) % 8:
            raise ValueError(f"d={self.d} x kv_bits={self.kv_bits} must be a positive whole number of bytes")
        if self.base < 0 or self.base % self.bus_bytes:
            raise ValueError(f"base={self.base:#x} must be a non-negative multiple of bus_bytes={self.bus_bytes}")
        if self.n_slots < 1:
            raise ValueError(f"n_slots must be >= 1, got {self.n_slots}")
        if self.slot_rows < 1:
            raise ValueError(f"slot_rows must be >= 1, got {self.slot_rows}")

    @property
    def row_bits(self) -> int:
        """Meaningful bits of a row record: d values and the exponent."""
        return self.d * self.kv_bits + 8

    @property
    def row_bytes(self) -> int:
        return -(-self.row_bits // (8 * self.bus_bytes)) * self.bus_bytes

    @property
    def row_beats(self) -> int:
        return self.row_bytes // self.bus_bytes

    @property
    def slot_bytes(self) -> int:
        return 2 * self.slot_rows * self.row_bytes

    @property
    def size(self) -> int:
        """Bytes of the whole region."""
        return self.n_slots * self.slot_bytes

    @property
    def end(self) -> int:
        return self.base + self.size

    def slot_addr(self, slot: int) -> int:
        if not 0 <= slot < self.n_slots:
            raise ValueError(f"slot={slot} is outside the region's n_slots={self.n_slots}")
        return self.base + slot * self.slot_bytes

    def row_addr(self, slot: int, sel: int, row: int) -> int:
        """DDR address of row ``row`` of slot ``slot``'s K (``sel`` 0) or V (``sel`` 1) rows."""
        if sel not in (0, 1):
            raise ValueError(f"sel={sel} must be 0 (K) or 1 (V)")
        if not 0 <= row < self.slot_rows:
            raise ValueError(f"row={row} is outside the slot's slot_rows={self.slot_rows}")
        return self.slot_addr(slot) + (sel * self.slot_rows + row) * self.row_bytes

    def record_addr(self, slot: int, rec: int) -> int:
        """DDR address of record ``rec`` of slot ``slot``: a slot is ``2 * slot_rows`` records,
        K rows then V rows, so record ``sel * slot_rows + row`` is ``row_addr(slot, sel, row)``."""
        if not 0 <= rec < 2 * self.slot_rows:
            raise ValueError(f"record {rec} is outside the slot's 2 * slot_rows={2 * self.slot_rows} records")
        return self.slot_addr(slot) + rec * self.row_bytes

    def pack_row(self, values, e: int) -> bytes:
        """The ``row_bytes`` record of one row (values as signed ints, ``e`` int8)."""
        values = [int(v) for v in values]
        if len(values) != self.d:
            raise ValueError(f"a row has d={self.d} values, got {len(values)}")
        for i, v in enumerate(values):
            _check_value(f"value[{i}]", v, self.kv_bits)
        _check_value("e", e, 8)
        mask = (1 << self.kv_bits) - 1
        x = 0
        for i, v in enumerate(values):
            x |= (v & mask) << (self.kv_bits * i)
        x |= (int(e) & 0xFF) << (self.d * self.kv_bits)
        return x.to_bytes(self.row_bytes, "little")

    def unpack_row(self, rec: bytes):
        """``(values, e)`` of a row record (inverse of :meth:`pack_row`)."""
        if len(rec) != self.row_bytes:
            raise ValueError(f"a row record is row_bytes={self.row_bytes} bytes, got {len(rec)}")
        x = int.from_bytes(rec, "little")
        kb = self.kv_bits
        sx = lambda v, b: v - (1 << b) if v >> (b - 1) else v
        values = [sx((x >> (kb * i)) & ((1 << kb) - 1), kb) for i in range(self.d)]
        return values, sx((x >> (self.d * kb)) & 0xFF, 8)


def staging_word(values, e: int) -> int:
    """The on-chip K/V memory word of a row (the attention unit's ``kv_in`` data + e)."""
    x = 0
    for i, v in enumerate(values):
        x |= (int(v) & 0xFF) << (8 * i)
    return x | ((int(e) & 0xFF) << (8 * len(values)))


def kr260_region(base: int = 0x8_0000_0000, size: int = GIB, *, block: int = 256, n_kv_heads: int = 2,
                 d: int = 128, kv_bits: int = 8) -> KVRegion:
    """The KR260 preset: a ``size``-byte region (1 GiB) of slots that each hold one KV unit of
    ``block`` tokens x ``n_kv_heads`` heads of one layer (Qwen2.5-1.5B: 2 KV heads, d = 128)."""
    slot_rows = block * n_kv_heads
    one = KVRegion(base, 1, slot_rows, d, kv_bits)
    n = size // one.slot_bytes
    if n < 1:
        raise ValueError(f"size={size} holds no slot of {one.slot_bytes} bytes")
    return KVRegion(base, n, slot_rows, d, kv_bits,
                    name=f"kr260_region(kv_bits={kv_bits})" if size == GIB else
                    f"kr260_region(size={size:#_x}, kv_bits={kv_bits})")
