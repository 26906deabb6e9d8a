"""Word realigner: beats of one or two 32-bit words in, the same words out one or two at a time."""
from amaranth import Module, Signal, Mux
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["WordRealigner", "PAIR_BEAT"]

#: a beat of one word (``two`` = 0: ``data``) or two (``data`` first, then ``data1``)
PAIR_BEAT = data.StructLayout({"data": 32, "data1": 32, "two": 1})


class WordRealigner(wiring.Component):
    """The word stream of ``beat`` (each beat one word, or two with ``two``; taken only while
    ``en``) comes out on ``word`` in the same order, ``pair`` choosing how many a word-beat
    carries: two (``data`` then ``data1``) with ``pair``, else one (``data``). A beat's two words
    may leave in different word-beats: the realigner holds one word (across ``pair`` changes
    too, so a beat may straddle two of the engine's instructions), which goes out first. A
    word-beat is offered once its words are here (with ``pair``: the held word and the beat's
    first, or a beat of two); with ``pair`` a lone word is taken into the hold without waiting
    for ``word.ready``. Back-pressure on ``word`` holds ``beat``; nothing is dropped or
    reordered. ``word`` is offered only while ``en`` and its size follows ``pair``, so a change
    of either may withdraw an offer (the engine changes them between instructions, when no one
    takes ``word``); ``data1`` means something only with ``pair``."""

    def __init__(self):
        super().__init__({
            "beat": In(stream.Signature(PAIR_BEAT)),
            "word": Out(stream.Signature(data.StructLayout({"data": 32, "data1": 32}))),
            "pair": In(1),
            "en": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        b, w = self.beat, self.word
        held, hd = Signal(), Signal(32)            # a word held, and it
        bv = b.valid & self.en
        two = b.payload.two
        m.d.comb += [w.payload.data.eq(Mux(held, hd, b.payload.data)),
                     w.payload.data1.eq(Mux(held, b.payload.data, b.payload.data1))]
        fire = w.valid & w.ready
        with m.If(self.pair):
            # out: the held word and the beat's first, or the beat's two; a lone word is held
            m.d.comb += [w.valid.eq(bv & (held | two)),
                         b.ready.eq(self.en & Mux(held | two, w.ready, 1))]
            with m.If(bv & b.ready):
                m.d.sync += [held.eq(Mux(held, two, ~two)), hd.eq(Mux(held, b.payload.data1, b.payload.data))]
        with m.Else():
            # out: the held word, else the beat's first (its second is held)
            m.d.comb += [w.valid.eq(self.en & held | bv), b.ready.eq(self.en & ~held & w.ready)]
            with m.If(held & fire):
                m.d.sync += held.eq(0)
            with m.Elif(bv & b.ready):
                m.d.sync += [held.eq(two), hd.eq(b.payload.data1)]
        return m
