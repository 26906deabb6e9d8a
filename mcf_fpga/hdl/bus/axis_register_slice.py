"""AXI-Stream register slice: a three-entry buffer that registers a stream's forward path.

Contract: beats leave ``m_axis`` in the order they entered ``s_axis``, unchanged (data, keep,
last, user), none lost or duplicated. ``s_axis.ready`` is high while the buffer has room
(it is registered), so a continuous stream passes at one beat per cycle when ``m_axis`` is
always ready; back-pressure on ``m_axis`` fills the buffer and then stalls ``s_axis``. The
output is registered (one cycle of latency), which breaks long combinational paths between
blocks. Built on ``amaranth.lib.fifo.SyncFIFOBuffered(depth=3)`` (depth 2 would halve the throughput:
its inner FIFO cannot accept while full, even on a read).
"""
from amaranth import Module
from amaranth.lib import fifo, wiring
from amaranth.lib.wiring import In, Out

from .axis import PacketLayout, PacketSignature

__all__ = ["AXISRegisterSlice"]


class AXISRegisterSlice(wiring.Component):
    """Register slice for ``PacketLayout(data_width, user_width)`` streams."""

    def __init__(self, data_width: int = 64, user_width: int = 0):
        self.layout = PacketLayout(data_width, user_width)
        super().__init__({"s_axis": In(PacketSignature(data_width, user_width)),
                          "m_axis": Out(PacketSignature(data_width, user_width))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.buf = buf = fifo.SyncFIFOBuffered(width=self.layout.size, depth=3)
        wiring.connect(m, wiring.flipped(self.s_axis), buf.w_stream)
        m.d.comb += [self.m_axis.payload.eq(buf.r_stream.payload),
                     self.m_axis.valid.eq(buf.r_stream.valid),
                     buf.r_stream.ready.eq(self.m_axis.ready)]
        return m
