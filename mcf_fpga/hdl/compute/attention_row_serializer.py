"""Attention row serializer: one attention output row -> its scratchpad words."""
from amaranth import Module, Signal, Mux, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.numerics import ACC_BITS
from mcf_fpga.spec.partial import PartialRow

__all__ = ["AttentionRowSerializer"]


class AttentionRowSerializer(wiring.Component):
    """Takes an attention ``o_out`` beat {m, l, o[d], last} on ``row`` and emits its words on
    ``word``: with ``final`` the d words y[i] = o[i][:32]; else the ``2d+4`` words of a
    :class:`spec.partial.PartialRow` (m, l, o[i] each as an int64: lo word, hi word; m's hi word
    its sign). No register stage: ``word.valid`` is ``row.valid``, the row is consumed with its
    last word (the attention unit's ``o_out`` is a register: its P side computes the next row
    meanwhile). ``final`` stays constant during a row; ``clear`` restarts at word 0.

    ``pairs=True`` (``d`` even): ``word`` gains ``data1`` and a ``pair`` input, constant during a
    row; with ``pair`` each beat carries two words, ``data`` word 2k and ``data1`` word 2k + 1 (a
    partial row's pair k is m and its sign word, l's halves or o[i]'s halves: one d-way select), so
    a row leaves in half the cycles."""

    def __init__(self, d, pairs=False):
        if pairs and d % 2:
            raise ValueError(f"AttentionRowSerializer: d={d} must be even with pairs")
        self.d, self.pairs = d, bool(pairs)
        super().__init__({
            "row": In(stream.Signature(data.StructLayout({
                "m": signed(32), "l": unsigned(ACC_BITS), "o": data.ArrayLayout(signed(ACC_BITS), d), "last": 1}))),
            "word": Out(stream.Signature(data.StructLayout(
                {"data": signed(32), **({"data1": signed(32)} if pairs else {})}))),
            "final": In(1), "clear": In(1), **({"pair": In(1)} if pairs else {}),
        })

    def elaborate(self, platform):
        m = Module()
        d, prow, final = self.d, PartialRow(self.d), self.final
        idx = Signal(range(prow.words + 1))
        ob, ol, om = self.row.payload.o, self.row.payload.l, self.row.payload.m
        w = self.word.payload.data
        # finalized: word i = y[i] = o[i][:32]; partial: m, l, o[i] as int64 (lo, hi), so
        # word O + 2i + h is half h of o[i] (PartialRow): one d-way select of o[i], then lo/hi
        # o_i and head (idx < O) are registers, set with idx from its next value: the word select
        # starts from flip-flops, not from a subtract and a compare (timing: the whole engine's
        # path idx -> the writer's queue). A row's word 0 takes o_i = 0 (a partial row's head
        # words m, l do not read o_i)
        o_i = Signal(range(d))
        head = Signal(init=1)
        o_hi = Signal()
        o_w = Signal(signed(ACC_BITS))
        m.d.comb += o_hi.eq(~final & idx[0])
        with m.Switch(o_i):
            for i in range(d):
                with m.Case(i):
                    m.d.comb += o_w.eq(ob[i])
        m.d.comb += w.eq(Mux(o_hi, o_w[32:].as_signed(), o_w[:32]))
        m_sign = Mux(om < 0, -1, 0)                   # m as an int64: its high word
        with m.If(~final & head):                     # m, l
            with m.Switch(idx[:2]):
                with m.Case(prow.M):
                    m.d.comb += w.eq(om)
                with m.Case(prow.M + 1):
                    m.d.comb += w.eq(m_sign)
                with m.Case(prow.L):
                    m.d.comb += w.eq(ol[:32])
                with m.Case(prow.L + 1):
                    m.d.comb += w.eq(ol[32:])
        step = 1
        if self.pairs:                 # pair k: words 2k (data, above) and 2k + 1
            pair = self.pair
            step = 1 + pair
            o_odd = Signal(signed(ACC_BITS))           # final: y[idx + 1], an odd element
            with m.Switch(idx[1:]):
                for k in range(d // 2):
                    with m.Case(k):
                        m.d.comb += o_odd.eq(ob[2 * k + 1])
            hi_ml = Mux(idx[1], ol[32:], m_sign)   # m's high word (idx 0), l's (idx 2)
            m.d.comb += self.word.payload.data1.eq(
                Mux(final, o_odd[:32], Mux(head, hi_ml, o_w[32:].as_signed())))
        # the row's last word (pair): idx == nw - step as compares with constants, selected by
        # final and pair (no subtract in front of the compare: the whole engine's path idx ->
        # row.ready -> the attention unit's EMIT -> its o_run registers)
        ends = {(f, st_): idx == (d if f else prow.words) - st_ for f in (0, 1) for st_ in ((1, 2) if self.pairs else (1,))}
        if self.pairs:
            last = Mux(final, Mux(pair, ends[1, 2], ends[1, 1]), Mux(pair, ends[0, 2], ends[0, 1]))
        else:
            last = Mux(final, ends[1, 1], ends[0, 1])
        take = self.word.valid & self.word.ready
        m.d.comb += [self.word.valid.eq(self.row.valid), self.row.ready.eq(take & last)]
        nxt = Signal.like(idx)
        m.d.comb += nxt.eq(idx + step)
        with m.If(self.clear | (take & last)):
            m.d.sync += [idx.eq(0), o_i.eq(0), head.eq(1)]
        with m.Elif(take):
            m.d.sync += [idx.eq(nxt), o_i.eq(Mux(final, nxt, (nxt - prow.O) >> 1)), head.eq(nxt < prow.O)]
        return m
