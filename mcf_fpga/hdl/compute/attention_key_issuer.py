"""Attention key issuer: walks the keys of a job's blocks, one key per ``go``."""
from amaranth import Module, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["KeyIssuer", "block_entry_layout"]


def block_entry_layout(aw: int, pos_bits: int):
    """A block-table row: keys ``addr .. addr+len-1`` at positions ``pos ..``; ``void``: the block
    was refused (outside the KV memory, too long or empty: stored with len 1, fully masked)."""
    return data.StructLayout({"addr": unsigned(aw), "len": 16, "pos": pos_bits, "void": 1})


class KeyIssuer(wiring.Component):
    """Key counters over the block table: ``b`` block, ``j`` key within the block, ``z`` key
    within the row.

    ``b`` addresses the table (the parent's combinational read port) and ``entry`` is that
    row. ``first`` / ``last``: key ``j`` is the block's first / last; ``blk_last``: ``b`` is the
    job's last block (``nblk`` blocks). ``go`` issues key (b, j): j and z advance, after the
    block's last key to (b + 1, 0). ``clear`` (wins over ``go``) returns to block 0, key 0, z 0.
    """

    def __init__(self, aw: int, pos_bits: int, z_max: int):
        self.aw, self.pos_bits, self.z_max = aw, pos_bits, z_max
        super().__init__({
            "entry": In(block_entry_layout(aw, pos_bits)),
            "nblk": In(16),
            "go": In(1),
            "clear": In(1),
            "b": Out(16),
            "j": Out(16),
            "z": Out(range(z_max + 1)),
            "first": Out(1),
            "last": Out(1),
            "blk_last": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        b, j, z = self.b, self.j, self.z
        m.d.comb += [self.first.eq(j == 0), self.last.eq(j == self.entry.len - 1),
                     self.blk_last.eq(b == self.nblk - 1)]
        with m.If(self.go):
            m.d.sync += [j.eq(j + 1), z.eq(z + 1)]
            with m.If(self.last):
                m.d.sync += [j.eq(0), b.eq(b + 1)]
        with m.If(self.clear):
            m.d.sync += [b.eq(0), j.eq(0), z.eq(0)]
        return m
