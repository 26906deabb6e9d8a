"""The K/V streamer's command layouts (:class:`hdl.dma.kvstream.KVStreamer`): ``load``, ``raw``
and ``kv_wr`` payloads, and the widths of their slot and row fields."""
from amaranth import signed
from amaranth.lib import data

__all__ = ["SLOT_BITS", "ROW_BITS", "load_layout", "raw_layout", "kv_wr_layout"]

SLOT_BITS, ROW_BITS = 20, 16          # command field widths (2**20 KV blocks: the Meta contract)


def load_layout(n_win: int):
    return data.StructLayout({"slot": SLOT_BITS, "row": ROW_BITS, "n": ROW_BITS,
                              "win": max(1, (n_win - 1).bit_length())})


def raw_layout():
    """A raw read: records ``rec0 .. rec0+n-1`` of ``slot`` (records: K rows then V rows)."""
    return data.StructLayout({"slot": SLOT_BITS, "rec0": ROW_BITS + 1, "n": ROW_BITS + 1})


def kv_wr_layout(d: int):
    return data.StructLayout({"sel": 1, "slot": SLOT_BITS, "row": ROW_BITS, "data": d * 8,
                              "e": signed(8)})
