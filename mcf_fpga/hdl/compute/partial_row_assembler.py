"""Partial-row assembler: the words of one scratchpad partial row -> one attention ``p_in`` beat."""
from amaranth import Module, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.numerics import ACC_BITS
from mcf_fpga.spec.partial import PartialRow

__all__ = ["PartialRowAssembler"]


class PartialRowAssembler(wiring.Component):
    """Takes the ``2d+4`` words of a :class:`spec.partial.PartialRow` (m, l, o[0..d-1], each an
    int64 as lo word then hi word) on ``word`` and emits them as one ``row`` beat {m (the lo
    word; the hi word is ignored), l, o[d]} (the attention unit's ``p_in`` layout, ACC_BITS-wide
    l and o). One row is held: no word is taken while it waits for ``row.ready``. ``clear``
    (wins) empties it and restarts at word 0."""

    def __init__(self, d):
        self.d = d
        super().__init__({
            "word": In(stream.Signature(data.StructLayout({"data": signed(32)}))),
            "row": Out(stream.Signature(data.StructLayout({
                "m": signed(32), "l": unsigned(ACC_BITS), "o": data.ArrayLayout(signed(ACC_BITS), d)}))),
            "clear": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        d, prow = self.d, PartialRow(self.d)
        PW = prow.words
        f_m = Signal(signed(32))
        f_l = Signal(ACC_BITS)
        f_o = [Signal(signed(ACC_BITS), name=f"f_o{i}") for i in range(d)]
        f_idx = Signal(range(PW + 1))
        f_full = Signal()
        w, p = self.word.payload.data, self.row.payload
        take = self.word.valid & ~f_full
        m.d.comb += [self.word.ready.eq(take), self.row.valid.eq(f_full), p.m.eq(f_m), p.l.eq(f_l)]
        m.d.comb += [p.o[i].eq(f_o[i]) for i in range(d)]
        with m.If(take):
            with m.Switch(f_idx):
                with m.Case(prow.M):
                    m.d.sync += f_m.eq(w)
                with m.Case(prow.L):
                    m.d.sync += f_l[:32].eq(w)
                with m.Case(prow.L + 1):
                    m.d.sync += f_l[32:].eq(w)
                for i in range(d):
                    with m.Case(prow.o_word(i)):
                        m.d.sync += f_o[i][:32].eq(w)
                    with m.Case(prow.o_word(i) + 1):
                        m.d.sync += f_o[i][32:].eq(w)
            m.d.sync += f_idx.eq(f_idx + 1)
            with m.If(f_idx == PW - 1):
                m.d.sync += [f_idx.eq(0), f_full.eq(1)]
        with m.If(self.row.valid & self.row.ready):
            m.d.sync += f_full.eq(0)
        with m.If(self.clear):
            m.d.sync += [f_idx.eq(0), f_full.eq(0)]
        return m
