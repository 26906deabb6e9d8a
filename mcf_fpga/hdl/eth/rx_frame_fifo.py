"""Clock-crossing FIFO for received frames from a MAC that cannot be back-pressured.

``i`` (In, ``w_domain``): ``PacketSignature(data_width, user_width=1)`` frames
from a MAC, ``user`` on ``last`` = bad frame; ``i.ready`` is always 1 (the MAC
cannot wait). ``o`` (Out, ``r_domain``): the same frames; ``user`` = 1 on the
last beat of a bad frame.

When the FIFO is full a beat is lost: the rest of that frame is dropped and,
as soon as there is room, one terminating beat (``data`` 0, ``keep`` 1,
``last`` 1, ``user`` 1) ends the truncated frame, so frames never merge and the
consumer sees the damage on ``user`` (a frame whose first beat is lost comes
out as that single bad beat). Frames arriving while a terminator still waits
for room are dropped whole. ``lost`` counts damaged or dropped frames (wraps).
"""
from amaranth import Module, Signal, Cat, Const
from amaranth.lib import wiring, fifo
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import PacketSignature

__all__ = ["RxFrameFIFO"]


class RxFrameFIFO(wiring.Component):
    def __init__(self, data_width=64, depth=512, w_domain="rx", r_domain="sync"):
        if depth < 4 or depth & (depth - 1):
            raise ValueError(f"depth must be a power of two >= 4, got {depth}")
        self.data_width, self.depth, self.w_domain, self.r_domain = data_width, depth, w_domain, r_domain
        super().__init__({"i": In(PacketSignature(data_width, user_width=1)),
                          "o": Out(PacketSignature(data_width, user_width=1)),
                          "lost": Out(16)})

    def elaborate(self, platform):
        m = Module()
        dw, kw = self.data_width, self.data_width // 8
        wd = self.w_domain
        m.submodules.q = q = fifo.AsyncFIFO(width=dw + kw + 2, depth=self.depth,
                                           w_domain=wd, r_domain=self.r_domain)
        i, o = self.i, self.o
        beat = Cat(i.payload.data, i.payload.keep, i.payload.last, i.payload.user)
        term = Cat(Const(0, dw), Const(1, kw), Const(1, 1), Const(1, 1))
        skip = Signal()   # TERM: beats arriving now belong to a frame dropped whole
        m.d.comb += i.ready.eq(1)
        with m.FSM(domain=wd):
            with m.State("NORMAL"):
                with m.If(i.valid & q.w_rdy):
                    m.d.comb += [q.w_en.eq(1), q.w_data.eq(beat)]
                with m.Elif(i.valid):
                    m.d[wd] += self.lost.eq(self.lost + 1)
                    with m.If(i.payload.last):
                        m.next = "TERM"
                    with m.Else():
                        m.next = "TRUNC"
            with m.State("TRUNC"):           # part of the frame is in: drop the rest
                with m.If(i.valid & i.payload.last):
                    m.next = "TERM"
            with m.State("TERM"):            # end the truncated frame with a bad last beat
                with m.If(i.valid & ~skip):
                    m.d[wd] += self.lost.eq(self.lost + 1)
                with m.If(q.w_rdy):
                    m.d.comb += [q.w_en.eq(1), q.w_data.eq(term)]
                    m.d[wd] += skip.eq(0)
                    with m.If((i.valid | skip) & ~(i.valid & i.payload.last)):
                        m.next = "SKIP"
                    with m.Else():
                        m.next = "NORMAL"
                with m.Elif(i.valid):
                    m.d[wd] += skip.eq(~i.payload.last)
            with m.State("SKIP"):            # nothing of this frame got in: drop it whole
                with m.If(i.valid & i.payload.last):
                    m.next = "NORMAL"
        m.d.comb += [o.payload.data.eq(q.r_data[:dw]), o.payload.keep.eq(q.r_data[dw:dw + kw]),
                     o.payload.last.eq(q.r_data[dw + kw]), o.payload.user.eq(q.r_data[dw + kw + 1]),
                     o.valid.eq(q.r_rdy), q.r_en.eq(o.ready & q.r_rdy)]
        return m
