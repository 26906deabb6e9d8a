"""Beat splitter: ``width``-bit bus beats -> 32-bit words, low word first."""
from amaranth import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["BeatSplitter"]


class BeatSplitter(wiring.Component):
    """Takes a beat {data, last} on ``beat`` (only while ``en``) and emits its ``width // 32``
    words on ``word``, low word first, ``last`` on the final word of a ``last`` beat. One beat is
    held; the next is taken in the cycle its final word goes out (no bubble). ``width`` a
    multiple of 32."""

    def __init__(self, width):
        assert width % 32 == 0
        self.width = width
        super().__init__({
            "beat": In(stream.Signature(data.StructLayout({"data": width, "last": 1}))),
            "word": Out(stream.Signature(data.StructLayout({"data": 32, "last": 1}))),
            "en": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        n_w = self.width // 32
        buf = Signal(self.width)
        full = Signal()
        last = Signal()                  # the beat is the run's last
        idx = Signal(range(n_w))
        fire = self.word.valid & self.word.ready
        drain = fire & (idx == n_w - 1)
        m.d.comb += [self.beat.ready.eq(self.en & (~full | drain)), self.word.valid.eq(full),
                     self.word.payload.data.eq(buf[:32]), self.word.payload.last.eq(last & (idx == n_w - 1))]
        with m.If(fire):
            m.d.sync += [buf.eq(buf >> 32), idx.eq(idx + 1)]
            with m.If(drain):
                m.d.sync += [full.eq(0), idx.eq(0)]
        with m.If(self.beat.valid & self.beat.ready):
            m.d.sync += [buf.eq(self.beat.payload.data), full.eq(1), last.eq(self.beat.payload.last), idx.eq(0)]
        return m
