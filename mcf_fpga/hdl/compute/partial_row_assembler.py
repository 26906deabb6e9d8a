"""Partial-row assembler: the words of one scratchpad partial row -> one attention ``p_in`` beat."""
from amaranth import Module, Mux, Signal, signed, unsigned
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
    (wins) empties it and restarts at word 0.

    ``ports=2``: the row comes in two halves at once, words ``0 .. d+1`` on ``word`` and words
    ``d+2 .. 2d+3`` on ``word_b`` (the engine's two scratchpad readers), a pair taken in a cycle
    when both are valid: ``d + 2`` cycles per row instead of ``2d + 4``. Its ``serial`` input (hold
    it for the whole row; change it only with ``clear``) takes a row one word per cycle, its first
    half on ``word``, then its second half on ``word_b`` (only the port whose half is due is
    ready): the engine's acc ATT, whose partial rows come from one reader, feeds both ports from
    it. Each field keeps its one source, so the mode costs write enables, not data muxes."""

    def __init__(self, d, ports=1):
        if ports not in (1, 2):
            raise ValueError(f"ports={ports}: 1 or 2")
        self.d, self.ports = d, ports
        word = In(stream.Signature(data.StructLayout({"data": signed(32)})))
        super().__init__({
            "word": word,
            **({"word_b": word} if ports == 2 else {}),
            "row": Out(stream.Signature(data.StructLayout({
                "m": signed(32), "l": unsigned(ACC_BITS), "o": data.ArrayLayout(signed(ACC_BITS), d)}))),
            "clear": In(1),
            **({"serial": In(1)} if ports == 2 else {}),
        })

    def elaborate(self, platform):
        m = Module()
        d, prow = self.d, PartialRow(self.d)
        PW = prow.words
        f_m = Signal(signed(32))
        f_l = Signal(ACC_BITS)
        f_o = [Signal(signed(ACC_BITS), name=f"f_o{i}") for i in range(d)]
        # the field bits each word index fills (m's hi word: none)
        slot = {prow.M: f_m, prow.L: f_l[:32], prow.L + 1: f_l[32:]}
        for i in range(d):
            slot[prow.o_word(i)], slot[prow.o_word(i) + 1] = f_o[i][:32], f_o[i][32:]
        half = PW // self.ports                  # words per port per row
        f_idx = Signal(range(half + 1))
        f_full = Signal()
        ins = [self.word] + ([self.word_b] if self.ports == 2 else [])
        p = self.row.payload
        if self.ports == 1:
            take = ins[0].valid & ~f_full
            en = [take]                          # the port's words are written
            m.d.comb += ins[0].ready.eq(take)
        else:                                    # serial: `second` -- the second half is due
            second = Signal()
            sa, sb = ~self.serial | ~second, ~self.serial | second       # the ports taken now
            take = Mux(self.serial, Mux(second, ins[1].valid, ins[0].valid), ins[0].valid & ins[1].valid) & ~f_full
            en = [take & sa, take & sb]
            m.d.comb += [ins[0].ready.eq(~f_full & sa & (self.serial | ins[1].valid)),
                         ins[1].ready.eq(~f_full & sb & (self.serial | ins[0].valid))]
        m.d.comb += [self.row.valid.eq(f_full), p.m.eq(f_m), p.l.eq(f_l)]
        m.d.comb += [p.o[i].eq(f_o[i]) for i in range(d)]
        for j, port in enumerate(ins):
            with m.If(en[j]):
                with m.Switch(f_idx):
                    for k in range(half):
                        if j * half + k in slot:
                            with m.Case(k):
                                m.d.sync += slot[j * half + k].eq(port.payload.data)
        with m.If(take):
            m.d.sync += f_idx.eq(f_idx + 1)
            with m.If(f_idx == half - 1):
                m.d.sync += f_idx.eq(0)
                if self.ports == 2:
                    with m.If(self.serial & ~second):
                        m.d.sync += second.eq(1)
                    with m.Else():
                        m.d.sync += [f_full.eq(1), second.eq(0)]
                else:
                    m.d.sync += f_full.eq(1)
        with m.If(self.row.valid & self.row.ready):
            m.d.sync += f_full.eq(0)
        with m.If(self.clear):
            m.d.sync += [f_idx.eq(0), f_full.eq(0)]
            if self.ports == 2:
                m.d.sync += second.eq(0)
        return m
