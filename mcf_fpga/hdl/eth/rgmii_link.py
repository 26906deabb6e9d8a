"""One RGMII link as the node sees it: frames in and out in the node's clock domain.

``tx_i`` (In ``PacketSignature(8)``, ``sync``): frames to send (destination
address onward, no FCS). ``rx_o`` (Out ``PacketSignature(8, user_width=1)``,
``sync``): frames received, FCS stripped, ``user`` = 1 on the last beat of a bad
frame. Inside: :class:`TxFrameFIFO` (``sync`` → ``tx``, store and forward, so the
MAC never starves mid-frame) → :class:`RGMIIMac` → ``AsyncFIFO`` (``rx`` →
``sync``; the MAC applies its own overrun policy when this FIFO is full).

Domains: ``sync`` (node), ``tx`` (125 MHz), ``rx`` (clocked by RXC; defined
here, or by the parent with ``define_rx_domain=False`` so it can drive its reset). ``pins``: the platform's ``rgmii`` resource,
or None for simulation (the pins become members, see :class:`RGMIIMac`).
"""
from amaranth import Module, Cat, ClockDomain
from amaranth.lib import wiring, fifo
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import PacketSignature
from .rgmii import RGMIIMac
from .tx_frame_fifo import TxFrameFIFO

__all__ = ["RGMIILink"]


class RGMIILink(wiring.Component):
    def __init__(self, pins=None, fifo_depth=2048, *, define_rx_domain=True):
        if fifo_depth < 16 or fifo_depth & (fifo_depth - 1):
            raise ValueError(f"fifo_depth must be a power of two >= 16, got {fifo_depth}")
        self._pins, self.fifo_depth, self._define_rx = pins, fifo_depth, define_rx_domain
        self.mac = RGMIIMac(pins, define_rx_domain=False)
        members = {"tx_i": In(PacketSignature(8)), "rx_o": Out(PacketSignature(8, user_width=1)),
                   "tx_frames": Out(16), "tx_underruns": Out(16), "rx_frames": Out(16), "rx_errors": Out(16)}
        if pins is None:
            members.update(td=Out(4), tx_ctl=Out(1), txc=Out(1), rd=In(4), rx_ctl=In(1), rxc=In(1))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        if self._define_rx:
            m.domains.rx = ClockDomain("rx")     # clocked by RXC through the MAC
        m.submodules.mac = mac = self.mac
        if self._pins is None:
            m.d.comb += [self.td.eq(mac.td), self.tx_ctl.eq(mac.tx_ctl), self.txc.eq(mac.txc),
                         mac.rd.eq(self.rd), mac.rx_ctl.eq(self.rx_ctl), mac.rxc.eq(self.rxc)]
        m.submodules.txf = txf = TxFrameFIFO(8, self.fifo_depth, "sync", "tx")
        wiring.connect(m, wiring.flipped(self.tx_i), txf.i)
        wiring.connect(m, txf.o, mac.i)
        m.submodules.rxf = rxf = fifo.AsyncFIFO(width=10, depth=self.fifo_depth, w_domain="rx",
                                                r_domain="sync")
        o = self.rx_o
        m.d.comb += [rxf.w_data.eq(Cat(mac.o.payload.data, mac.o.payload.last, mac.o.payload.user)),
                     rxf.w_en.eq(mac.o.valid), mac.o.ready.eq(rxf.w_rdy),
                     o.payload.data.eq(rxf.r_data[:8]), o.payload.keep.eq(1),
                     o.payload.last.eq(rxf.r_data[8]), o.payload.user.eq(rxf.r_data[9]),
                     o.valid.eq(rxf.r_rdy), rxf.r_en.eq(o.ready & rxf.r_rdy),
                     self.tx_frames.eq(mac.tx_frames), self.tx_underruns.eq(mac.tx_underruns),
                     self.rx_frames.eq(mac.rx_frames), self.rx_errors.eq(mac.rx_errors)]
        return m
