"""Store-and-forward clock-crossing FIFO in front of a MAC transmitter.

``i`` (In, ``w_domain``) and ``o`` (Out, ``r_domain``) are ``PacketSignature(data_width)``
streams, one frame per packet. A MAC must be fed without gaps once a frame has
started, but the writer may be slower (another clock, or back-pressure), so a
*chunk* — a whole frame, or ``depth // 2`` beats of a longer one — is released
on ``o`` only when all of it is in the FIFO. Inside a released chunk, ``o.valid``
stays high until its last beat is taken. A frame longer than ``depth // 2``
beats is released in chunks and can show a gap between them (the MAC then
ends it with an error); nothing ever waits forever: the writer stalls only
while the FIFO is full, and a full FIFO always holds a released chunk.

Implementation: an ``AsyncFIFO`` for the beats and a small ``AsyncFIFO`` of
chunk tokens, written one cycle after the chunk's last beat so that a token
never becomes visible before its data.
"""
from amaranth import Module, Signal, Cat
from amaranth.lib import wiring, fifo
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import PacketSignature

__all__ = ["TxFrameFIFO"]


class TxFrameFIFO(wiring.Component):
    """See module docstring. ``depth``: beats, a power of two >= 16."""

    def __init__(self, data_width=8, depth=2048, w_domain="sync", r_domain="tx"):
        if depth < 16 or depth & (depth - 1):
            raise ValueError(f"depth must be a power of two >= 16, got {depth}")
        self.data_width, self.depth = data_width, depth
        self.w_domain, self.r_domain = w_domain, r_domain
        super().__init__({"i": In(PacketSignature(data_width)), "o": Out(PacketSignature(data_width))})

    def elaborate(self, platform):
        m = Module()
        dw, kw = self.data_width, self.data_width // 8
        limit = self.depth // 2
        wd, rd = self.w_domain, self.r_domain
        m.submodules.data = data = fifo.AsyncFIFO(width=dw + kw + 1, depth=self.depth,
                                                  w_domain=wd, r_domain=rd)
        m.submodules.tok = tok = fifo.AsyncFIFO(width=1, depth=4, w_domain=wd, r_domain=rd)

        # write side
        cnt = Signal(range(limit + 1))
        push_tok = Signal()
        i = self.i
        m.d.comb += [data.w_data.eq(Cat(i.payload.data, i.payload.keep, i.payload.last)),
                     i.ready.eq(data.w_rdy & tok.w_rdy & ~push_tok),
                     data.w_en.eq(i.valid & i.ready),
                     tok.w_en.eq(push_tok), tok.w_data.eq(0)]
        m.d[wd] += push_tok.eq(0)
        with m.If(data.w_en):
            m.d[wd] += cnt.eq(cnt + 1)
            with m.If(i.payload.last | (cnt == limit - 1)):
                m.d[wd] += [push_tok.eq(1), cnt.eq(0)]

        # read side
        o = self.o
        active = Signal()
        rcnt = Signal(range(limit + 1))
        m.d.comb += [o.payload.data.eq(data.r_data[:dw]), o.payload.keep.eq(data.r_data[dw:dw + kw]),
                     o.payload.last.eq(data.r_data[-1]),
                     o.valid.eq(active & data.r_rdy), data.r_en.eq(o.valid & o.ready)]
        with m.If(~active & tok.r_rdy):
            m.d.comb += tok.r_en.eq(1)
            m.d[rd] += [active.eq(1), rcnt.eq(0)]
        with m.If(data.r_en):
            m.d[rd] += rcnt.eq(rcnt + 1)
            with m.If(o.payload.last | (rcnt == limit - 1)):
                m.d[rd] += active.eq(0)
        return m
