"""Byte addresses in the KV region (:class:`spec.kvregion.KVRegion`) as Amaranth expressions:
the same arithmetic as ``KVRegion.row_addr`` / ``record_addr``, for the K/V streamer's parts."""

__all__ = ["row_addr", "record_addr"]


def row_addr(reg, slot, sel, row):
    """Address of row ``row`` of slot ``slot``'s K (``sel`` 0) or V (``sel`` 1) rows."""
    return reg.base + slot * reg.slot_bytes + (sel * reg.slot_rows + row) * reg.row_bytes


def record_addr(reg, slot, rec):
    """Address of record ``rec`` of slot ``slot`` (records: K rows then V rows)."""
    return reg.base + slot * reg.slot_bytes + rec * reg.row_bytes
