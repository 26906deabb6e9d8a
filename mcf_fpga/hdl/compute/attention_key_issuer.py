"""Attention key issuer: walks the keys of a job's blocks, ``step`` (1 or 2) keys per ``go``."""
from amaranth import Module, Mux, Signal, unsigned
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

    ``lookahead``: ``first``, ``last``, ``two`` and ``blk_last`` come out of registers, set with
    the move to the key they describe (for the clock: no compare behind the table read). The
    issuer then also reads the next block's row, ``entry_next`` at ``b_next`` (= b + 1, a
    register), and takes ``len0``, block 0's stored length, for ``clear``, and ``nblk_m1`` (nblk - 1,
    a register of its user's) instead of ``nblk``. Same outputs otherwise.
    """

    def __init__(self, aw: int, pos_bits: int, z_max: int, step: int = 1, lookahead: bool = False):
        if step not in (1, 2):
            self._MustUse__silence = True      # a refused issuer is not an unused one
            raise ValueError(f"step must be 1 or 2, got {step}")
        self.aw, self.pos_bits, self.z_max, self.step, self.lookahead = aw, pos_bits, z_max, step, lookahead
        extra = {"entry_next": In(block_entry_layout(aw, pos_bits)), "len0": In(16), "b_next": Out(16),
                 "nblk_m1": In(16)} if lookahead else {"nblk": In(16)}
        super().__init__({
            **extra,
            "entry": In(block_entry_layout(aw, pos_bits)),
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
        if self.lookahead:
            return self._elaborate_lookahead()
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

    def _elaborate_lookahead(self):
        """rem = len - j (keys left in the block, the current issue's included) kept in a
        register: last = rem <= step, two = rem >= 2; after a step-2 issue that is not the
        block's last, rem >= 3, so it took two keys; the flags of the next key are compares of rem
        with constants, or of the next block's length."""
        m = Module()
        b, j, z, b1, step = self.b, self.j, self.z, self.b_next, self.step
        rem = Signal(16)
        nblk_m1 = self.nblk_m1

        def flags(length):     # (last, two) of a block's first key
            return (length == 1, 0) if step == 1 else (length <= 2, length >= 2)
        first, last, two, blk_last = Signal(), Signal(), Signal(), Signal()
        m.d.comb += [self.first.eq(first), self.last.eq(last), self.blk_last.eq(blk_last)]
        if step == 2:
            m.d.comb += self.two.eq(two)
        with m.If(self.clear):
            l0, t0 = flags(self.len0)
            m.d.sync += [b.eq(0), b1.eq(1), j.eq(0), z.eq(0), rem.eq(self.len0), first.eq(1), last.eq(l0),
                         two.eq(t0), blk_last.eq(nblk_m1 == 0)]
        with m.Elif(self.go):
            n = Mux(two, 2, 1) if step == 2 else 1
            m.d.sync += z.eq(z + n)
            with m.If(last):
                ln = self.entry_next.len
                l1, t1 = flags(ln)
                m.d.sync += [j.eq(0), b.eq(b1), b1.eq(b1 + 1), rem.eq(ln), first.eq(1), last.eq(l1), two.eq(t1),
                             blk_last.eq(b1 == nblk_m1)]
            with m.Else():
                m.d.sync += [j.eq(j + step), rem.eq(rem - step), first.eq(0)]
                if step == 1:
                    m.d.sync += last.eq(rem == 2)
                else:
                    m.d.sync += [last.eq(rem <= 4), two.eq(rem >= 4)]
        return m
