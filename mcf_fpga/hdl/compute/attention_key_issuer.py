"""Attention key issuer: walks the keys of a job's blocks, ``step`` (1 or 2) keys per ``go``."""
from amaranth import Module, Mux, unsigned
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
    row. ``go`` issues keys j .. j+step-1 of block b, clipped to the block (blocks never share an
    issue): ``two`` (step 2 only; always 0 for step 1) says key j+1 is in the block too. ``first``
    / ``last``: the issue holds the block's first / last key; ``blk_last``: ``b`` is the job's
    last block (``nblk`` blocks). j and z advance by the keys issued, after the block's last key
    to (b + 1, 0). ``clear`` (wins over ``go``) returns to block 0, key 0, z 0.
    """

    def __init__(self, aw: int, pos_bits: int, z_max: int, step: int = 1):
        if step not in (1, 2):
            self._MustUse__silence = True      # a refused issuer is not an unused one
            raise ValueError(f"step must be 1 or 2, got {step}")
        self.aw, self.pos_bits, self.z_max, self.step = aw, pos_bits, z_max, step
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
            "two": Out(1),
            "blk_last": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        b, j, z = self.b, self.j, self.z
        if self.step == 1:
            m.d.comb += self.last.eq(j == self.entry.len - 1)
        else:
            m.d.comb += [self.two.eq(j + 1 < self.entry.len), self.last.eq(j + 2 >= self.entry.len)]
        m.d.comb += [self.first.eq(j == 0), self.blk_last.eq(b == self.nblk - 1)]
        with m.If(self.go):
            n = Mux(self.two, 2, 1) if self.step == 2 else 1
            m.d.sync += [j.eq(j + n), z.eq(z + n)]
            with m.If(self.last):
                m.d.sync += [j.eq(0), b.eq(b + 1)]
        with m.If(self.clear):
            m.d.sync += [b.eq(0), j.eq(0), z.eq(0)]
        return m
