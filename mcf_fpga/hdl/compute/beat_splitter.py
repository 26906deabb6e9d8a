"""Beat splitter: ``width``-bit bus beats -> 32-bit words, low word first."""
from amaranth import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["BeatSplitter"]


class BeatSplitter(wiring.Component):
    """Takes a beat {data, last} on ``beat`` (only while ``en``) and emits its ``width // 32``
    words on ``word``, low word first, ``last`` on the final word of a ``last`` beat. Two beats
    are held (the one being split and the next), so ``beat.ready`` is ``en`` and a register: it
    does not depend on ``word.ready`` (the engine's sequencer drives that, and the streamer's AXI
    R ``ready`` hangs on ``beat.ready``), and a beat a word-run keeps up (no bubble).
    ``width`` a multiple of 32."""

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
        buf, nxt = Signal(self.width), Signal(self.width)      # the beat being split, the next one
        full, n_full = Signal(), Signal()
        last, n_last = Signal(), Signal()                      # the beat is the run's last
        idx = Signal(range(n_w))
        fire = self.word.valid & self.word.ready
        drain = fire & (idx == n_w - 1)
        take = self.beat.valid & self.beat.ready
        m.d.comb += [self.beat.ready.eq(self.en & ~n_full), self.word.valid.eq(full),
                     self.word.payload.data.eq(buf[:32]), self.word.payload.last.eq(last & (idx == n_w - 1))]
        with m.If(fire):
            m.d.sync += [buf.eq(buf >> 32), idx.eq(idx + 1)]
        with m.If(drain):                # the next beat (held or arriving) takes the splitter
            m.d.sync += idx.eq(0)
            with m.If(n_full):
                m.d.sync += [buf.eq(nxt), last.eq(n_last), n_full.eq(0)]
            with m.Elif(take):
                m.d.sync += [buf.eq(self.beat.payload.data), last.eq(self.beat.payload.last)]
            with m.Else():
                m.d.sync += full.eq(0)
        with m.Elif(take):
            with m.If(full):             # held until the splitter's beat drains
                m.d.sync += [nxt.eq(self.beat.payload.data), n_last.eq(self.beat.payload.last), n_full.eq(1)]
            with m.Else():
                m.d.sync += [buf.eq(self.beat.payload.data), last.eq(self.beat.payload.last), full.eq(1),
                             idx.eq(0)]
        return m
