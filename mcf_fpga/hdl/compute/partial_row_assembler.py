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
    it for the whole row; change it only with ``clear``) takes a row's ``2d+4`` words on ``word``
    alone, as ``ports=1`` (the engine's acc ATT, whose partial rows come from one reader)."""

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
        f_idx = Signal(range(PW + 1))
        f_full = Signal()
        ins = [self.word] + ([self.word_b] if self.ports == 2 else [])
        p = self.row.payload
        serial = self.serial if self.ports == 2 else 1
        valid = ins[0].valid if self.ports == 1 else Mux(serial, ins[0].valid, ins[0].valid & ins[1].valid)
        take = valid & ~f_full
        m.d.comb += ins[0].ready.eq(take)
        if self.ports == 2:
            m.d.comb += ins[1].ready.eq(take & ~serial)
        m.d.comb += [self.row.valid.eq(f_full), p.m.eq(f_m), p.l.eq(f_l)]
        m.d.comb += [p.o[i].eq(f_o[i]) for i in range(d)]

        def fill_cases(words, ports):
            """Word index k of each of ``ports`` (``words`` per row each) into its field."""
            with m.Switch(f_idx):
                for k in range(words):
                    fill = [slot[j * words + k].eq(port.payload.data) for j, port in enumerate(ports)
                            if j * words + k in slot]
                    if fill:
                        with m.Case(k):
                            m.d.sync += fill
            m.d.sync += f_idx.eq(f_idx + 1)
            with m.If(f_idx == words - 1):
                m.d.sync += [f_idx.eq(0), f_full.eq(1)]
        with m.If(take):
            if self.ports == 2:
                with m.If(serial):
                    fill_cases(PW, ins[:1])
                with m.Else():
                    fill_cases(half, ins)
            else:
                fill_cases(half, ins)
        with m.If(self.row.valid & self.row.ready):
            m.d.sync += f_full.eq(0)
        with m.If(self.clear):
            m.d.sync += [f_idx.eq(0), f_full.eq(0)]
        return m
