"""Golden byte image of a KV region in DDR (the layout is ``spec.kvregion``'s).

The hardware twin is :class:`hdl.dma.kvstream.KVStreamer` (it computes the same addresses in
logic; the tests place K/V with this model and check written bytes against it).
"""
from __future__ import annotations

from mcf_fpga.spec.kvregion import KVRegion

__all__ = ["KVStore"]


class KVStore:
    """A byte image of a :class:`KVRegion` (what DDR holds), with row-level access."""

    def __init__(self, region: KVRegion):
        self.region = region
        self.image = bytearray(region.size)

    def write_row(self, slot, sel, row, values, e):
        r = self.region
        off = r.row_addr(slot, sel, row) - r.base
        self.image[off:off + r.row_bytes] = r.pack_row(values, e)

    def read_row(self, slot, sel, row):
        r = self.region
        off = r.row_addr(slot, sel, row) - r.base
        return r.unpack_row(bytes(self.image[off:off + r.row_bytes]))

    def read_rows(self, slot, sel, row, n):
        """``n`` consecutive rows from ``row`` (all inside the slot)."""
        if n < 1 or row + n > self.region.slot_rows:
            raise ValueError(f"rows [{row}, {row + n}) leave the slot's slot_rows={self.region.slot_rows}")
        return [self.read_row(slot, sel, row + i) for i in range(n)]

    def read_records(self, slot, rec0, n):
        """The bytes of records ``rec0 .. rec0+n-1`` of ``slot`` (``n >= 1``, all inside the slot's
        ``2 * slot_rows`` records: K rows then V rows), exactly as DDR holds them."""
        r = self.region
        if n < 1 or rec0 < 0 or rec0 + n > 2 * r.slot_rows:
            raise ValueError(f"records [{rec0}, {rec0 + n}) leave the slot's {2 * r.slot_rows} records")
        off = r.record_addr(slot, rec0) - r.base
        return bytes(self.image[off:off + n * r.row_bytes])
