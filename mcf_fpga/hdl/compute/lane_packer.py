"""Lane packer: 32-bit words -> one beat of ``n`` 8-bit lanes (the low byte of each word)."""
from amaranth import Module, Signal, Cat, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["LanePacker"]


class LanePacker(wiring.Component):
    """Takes words on ``word`` (``data``: lane i of the beat is the low byte of the i-th word;
    ``e``: the row exponent, the beat carries the last word's) and emits one ``beat`` of ``n``
    lanes (lane 0 in bits 0..7; lanes at and above ``n`` keep older bytes) after every ``n``
    words. One beat is held: while it waits for ``beat.ready`` no word is taken, and a beat is
    freed and the next word taken in the same cycle only on the next one. ``clear`` (wins over
    everything) empties the beat and restarts at lane 0. ``count`` = lanes filled so far.
    ``n`` (1..``lanes``) stays constant while a beat fills.

    ``pairs=True``: with its ``pair`` input set (constant while a beat fills; ``n`` even), a word
    beat carries two lanes, ``data`` then ``data1`` (the two-word readers' beats)."""

    def __init__(self, lanes, pairs=False):
        self.lanes, self.pairs = lanes, pairs
        super().__init__({
            "word": In(stream.Signature(data.StructLayout({"data": 8, "e": signed(8),
                                                           **({"data1": 8} if pairs else {})}))),
            "beat": Out(stream.Signature(data.StructLayout({"data": lanes * 8, "e": signed(8)}))),
            "n": In(range(lanes + 1)), "clear": In(1), "count": Out(range(lanes + 1)),
            **({"pair": In(1)} if pairs else {}),
        })

    def elaborate(self, platform):
        m = Module()
        lanes = [Signal(8, name=f"pk_l{i}") for i in range(self.lanes)]
        cnt, full, e = self.count, Signal(), Signal(signed(8))
        take = self.word.valid & ~full
        m.d.comb += [self.word.ready.eq(take), self.beat.valid.eq(full), self.beat.payload.data.eq(Cat(*lanes)),
                     self.beat.payload.e.eq(e)]
        pair = self.pair if self.pairs else 0
        with m.If(take):
            with m.Switch(cnt):
                for i in range(self.lanes):
                    with m.Case(i):
                        m.d.sync += lanes[i].eq(self.word.payload.data)
                        if self.pairs and i + 1 < self.lanes:
                            with m.If(pair):
                                m.d.sync += lanes[i + 1].eq(self.word.payload.data1)
            m.d.sync += [cnt.eq(cnt + 1 + pair if self.pairs else cnt + 1), e.eq(self.word.payload.e)]
            with m.If(cnt == (self.n - 1 - pair if self.pairs else self.n - 1)):
                m.d.sync += [cnt.eq(0), full.eq(1)]
        with m.If(full & self.beat.ready):
            m.d.sync += full.eq(0)
        with m.If(self.clear):
            m.d.sync += [cnt.eq(0), full.eq(0)]
        return m
