"""RGMII (v2.0, 1 Gb/s) MAC: :class:`EthernetTx`/:class:`EthernetRx` on DDR pins.

RGMII carries a GMII byte as two nibbles per clock: on the rising edge
``d[3:0]`` and ``CTL = EN/DV``, on the falling edge ``d[7:4]`` and
``CTL = EN xor ER`` (DV xor ER). The KR260's DP83867 PHYs add the 2 ns clock
skew on both directions (``rgmii-id``), so TXC leaves edge-aligned with the data
(an ODDR of 1/0) and RXC samples the data directly.

Clock domains: ``tx`` (125 MHz, provided by the parent; the TX MAC and the TX
DDR registers run on it) and ``rx`` (created here from the RXC pin; its reset
may be driven by the parent, e.g. a ResetSynchronizer, and is 0 otherwise: the
RX state machine also resynchronises on every RX_DV low).

The DDR registers come from a *DDR adapter*:

* :class:`RGMIIPlatformDDR` — on a board, ``amaranth.lib.io.DDRBuffer`` on
  the platform's pins (ODDRE1/IDDRE1 on UltraScale+).
* :class:`RGMIISimDDR` — behavioural DDR for simulation and Verilog tests;
  the pins become ports ``td tx_ctl txc rd rx_ctl rxc`` of :class:`RGMIIMac`.
"""
from amaranth import Module, Signal, Cat, ClockDomain, ClockSignal, Mux, Elaboratable, DomainRenamer
from amaranth.lib import wiring, io
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import PacketSignature
from .mac_tx import EthernetTx
from .mac_rx import EthernetRx

__all__ = ["RGMIIMac", "RGMIISimDDR", "RGMIIPlatformDDR"]


class RGMIISimDDR(Elaboratable):
    """Behavioural RGMII DDR registers (IDDR SAME_EDGE_PIPELINED / ODDR semantics).

    ``tx_rise``/``tx_fall`` (5 bits: nibble, ctl) are taken at the ``tx`` rising
    edge and driven during the high/low half of that cycle; ``rx_rise``/
    ``rx_fall`` are the pins sampled at an RXC rising edge and the following
    falling edge, presented together one RXC cycle later. TXC is the ``tx``
    clock itself: a simulated PHY that samples just after each TXC edge (as
    cocotbext-eth's RgmiiSink does) sees the nibble launched at that edge, which
    is what the DP83867's internal 2 ns TX delay gives on the board.
    """

    def __init__(self):
        self.td, self.tx_ctl, self.txc = Signal(4), Signal(), Signal()
        self.rd, self.rx_ctl, self.rxc = Signal(4), Signal(), Signal()
        self.tx_rise, self.tx_fall = Signal(5), Signal(5)
        self.rx_rise, self.rx_fall = Signal(5), Signal(5)

    def elaborate(self, platform):
        m = Module()
        m.domains.rx_neg = ClockDomain("rx_neg", reset_less=True, clk_edge="neg")
        m.d.comb += [ClockSignal("rx").eq(self.rxc), ClockSignal("rx_neg").eq(self.rxc)]
        rise, fall = Signal(5), Signal(5)
        m.d.tx += [rise.eq(self.tx_rise), fall.eq(self.tx_fall)]
        out = Mux(ClockSignal("tx"), rise, fall)
        m.d.comb += [self.td.eq(out[:4]), self.tx_ctl.eq(out[4]), self.txc.eq(ClockSignal("tx"))]
        p, n = Signal(5), Signal(5)
        m.d.rx += p.eq(Cat(self.rd, self.rx_ctl))
        m.d.rx_neg += n.eq(Cat(self.rd, self.rx_ctl))
        m.d.rx += [self.rx_rise.eq(p), self.rx_fall.eq(n)]
        return m


class RGMIIPlatformDDR(Elaboratable):
    """RGMII DDR registers on platform pins (``platform.request("rgmii", n, dir="-")``)."""

    def __init__(self, pins):
        self.pins = pins
        self.tx_rise, self.tx_fall = Signal(5), Signal(5)
        self.rx_rise, self.rx_fall = Signal(5), Signal(5)

    def elaborate(self, platform):
        m = Module()
        pins = self.pins
        m.submodules.rxc = rxc = io.Buffer("i", pins.rxc)
        m.d.comb += ClockSignal("rx").eq(rxc.i)
        m.submodules.td = td = io.DDRBuffer("o", pins.td, o_domain="tx")
        m.submodules.tx_ctl = tx_ctl = io.DDRBuffer("o", pins.tx_ctl, o_domain="tx")
        m.submodules.txc = txc = io.DDRBuffer("o", pins.txc, o_domain="tx")
        m.d.comb += [td.o[0].eq(self.tx_rise[:4]), td.o[1].eq(self.tx_fall[:4]),
                     tx_ctl.o[0].eq(self.tx_rise[4]), tx_ctl.o[1].eq(self.tx_fall[4]),
                     txc.o[0].eq(1), txc.o[1].eq(0)]
        m.submodules.rd = rd = io.DDRBuffer("i", pins.rd, i_domain="rx")
        m.submodules.rx_ctl = rx_ctl = io.DDRBuffer("i", pins.rx_ctl, i_domain="rx")
        m.d.comb += [self.rx_rise.eq(Cat(rd.i[0], rx_ctl.i[0])),
                     self.rx_fall.eq(Cat(rd.i[1], rx_ctl.i[1]))]
        return m


class RGMIIMac(wiring.Component):
    """1 Gb/s RGMII MAC.

    Members: ``i`` In(PacketSignature(8)) frames to send (``tx`` domain),
    ``o`` Out(PacketSignature(8, user_width=1)) frames received (``rx`` domain,
    ``user`` on ``last`` = bad frame), counters ``tx_frames tx_underruns``
    (``tx``) and ``rx_frames rx_errors`` (``rx``). With ``pins=None`` the RGMII
    pins are members too (``td tx_ctl txc`` Out, ``rd rx_ctl rxc`` In) for
    simulation; otherwise ``pins`` is the platform's ``rgmii`` resource.
    ``define_rx_domain=False`` leaves defining the ``rx`` domain to the parent
    (which must then define it; the MAC still drives its clock from RXC).
    See the module docstring for the contracts of the TX and RX MACs.
    """

    def __init__(self, pins=None, *, define_rx_domain=True):
        self._pins = pins
        self._define_rx = define_rx_domain
        members = {
            "i": In(PacketSignature(8)),
            "o": Out(PacketSignature(8, user_width=1)),
            "tx_frames": Out(16), "tx_underruns": Out(16),
            "rx_frames": Out(16), "rx_errors": Out(16),
        }
        if pins is None:
            members.update(td=Out(4), tx_ctl=Out(1), txc=Out(1), rd=In(4), rx_ctl=In(1), rxc=In(1))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        # RX clock domain: clocked by RXC (driven by the DDR adapter); its reset may be driven
        # by the parent (e.g. a ResetSynchronizer) and is 0 otherwise
        if self._define_rx:
            m.domains.rx = ClockDomain("rx")
        if self._pins is None:
            m.submodules.ddr = ddr = RGMIISimDDR()
            m.d.comb += [self.td.eq(ddr.td), self.tx_ctl.eq(ddr.tx_ctl), self.txc.eq(ddr.txc),
                         ddr.rd.eq(self.rd), ddr.rx_ctl.eq(self.rx_ctl), ddr.rxc.eq(self.rxc)]
        else:
            m.submodules.ddr = ddr = RGMIIPlatformDDR(self._pins)

        m.submodules.tx = tx = DomainRenamer("tx")(EthernetTx())
        wiring.connect(m, wiring.flipped(self.i), tx.i)
        m.d.comb += [ddr.tx_rise.eq(Cat(tx.txd[:4], tx.tx_en)),
                     ddr.tx_fall.eq(Cat(tx.txd[4:], tx.tx_en ^ tx.tx_er)),
                     self.tx_frames.eq(tx.frames), self.tx_underruns.eq(tx.underruns)]

        m.submodules.rx = rx = DomainRenamer("rx")(EthernetRx())
        m.d.comb += [rx.rxd.eq(Cat(ddr.rx_rise[:4], ddr.rx_fall[:4])),
                     rx.rx_dv.eq(ddr.rx_rise[4]),
                     rx.rx_er.eq(ddr.rx_rise[4] ^ ddr.rx_fall[4])]
        wiring.connect(m, rx.o, wiring.flipped(self.o))
        m.d.comb += [self.rx_frames.eq(rx.frames), self.rx_errors.eq(rx.errors)]
        return m
