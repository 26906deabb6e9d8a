"""Ethernet transmit MAC, 1 Gb/s GMII (8 bits per clock at 125 MHz).

Input ``i``: a ``PacketSignature(8)`` byte stream, one frame per packet
(destination address onward, no FCS); ``keep`` is ignored. Output: GMII
``txd``/``tx_en``/``tx_er``, registered.

For each frame it sends 7×0x55 and the SFD 0xD5, the frame bytes, zero padding
up to 60 bytes, the FCS (CRC-32 by ``amaranth.lib.crc``, LSB first) and then
12 idle byte times of inter-frame gap. The frame starts as soon as its first
byte is valid; after that the source must keep up (one byte per clock). If it
does not (underrun), the MAC asserts TX_ER for one byte and ends the frame —
the receiver discards it — then drops the rest of that packet up to ``last``
and counts it in ``underruns``. It never waits on the source mid-frame, so it
cannot hang.
"""
from amaranth import Module, Signal, Const
from amaranth.lib import wiring, crc, enum
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import PacketSignature
from mcf_fpga.spec.ethernet import MIN_PAYLOAD, IFG_BYTES, SFD

__all__ = ["EthernetTx"]


class _State(enum.Enum):
    IDLE = 0
    PREAMBLE = 1
    DATA = 2
    PAD = 3
    FCS = 4
    DISCARD = 5
    IFG = 6


class EthernetTx(wiring.Component):
    """GMII transmit MAC (see module docstring).

    Members: ``i`` In(PacketSignature(8)); ``txd`` Out(8), ``tx_en`` Out(1),
    ``tx_er`` Out(1); counters ``frames`` and ``underruns`` Out(16) (wrap).
    """
    i: In(PacketSignature(8))
    txd: Out(8)
    tx_en: Out(1)
    tx_er: Out(1)
    frames: Out(16)
    underruns: Out(16)

    def elaborate(self, platform):
        m = Module()
        m.submodules.crc = fcs = crc.catalog.CRC32_ETHERNET(8).create()

        state = Signal(_State)
        count = Signal(range(max(IFG_BYTES, MIN_PAYLOAD, 8) + 1))
        d, en, er = Signal(8), Signal(), Signal()
        m.d.sync += [self.txd.eq(d), self.tx_en.eq(en), self.tx_er.eq(er)]
        m.d.comb += fcs.data.eq(d)

        with m.Switch(state):
            with m.Case(_State.IDLE):
                with m.If(self.i.valid):
                    m.d.sync += [state.eq(_State.PREAMBLE), count.eq(0)]
            with m.Case(_State.PREAMBLE):
                m.d.comb += [en.eq(1), d.eq(0x55), fcs.start.eq(1)]
                m.d.sync += count.eq(count + 1)
                with m.If(count == 7):
                    m.d.comb += d.eq(SFD)
                    m.d.sync += [state.eq(_State.DATA), count.eq(0)]
            with m.Case(_State.DATA):
                m.d.comb += [en.eq(1), self.i.ready.eq(1)]
                with m.If(self.i.valid):
                    m.d.comb += [d.eq(self.i.payload.data), fcs.valid.eq(1)]
                    with m.If(count < MIN_PAYLOAD):
                        m.d.sync += count.eq(count + 1)
                    with m.If(self.i.payload.last):
                        with m.If(count < MIN_PAYLOAD - 1):
                            m.d.sync += state.eq(_State.PAD)
                        with m.Else():
                            m.d.sync += [state.eq(_State.FCS), count.eq(0)]
                with m.Else():
                    m.d.comb += er.eq(1)
                    m.d.sync += [state.eq(_State.DISCARD), self.underruns.eq(self.underruns + 1)]
            with m.Case(_State.PAD):
                m.d.comb += [en.eq(1), d.eq(0), fcs.valid.eq(1)]
                m.d.sync += count.eq(count + 1)
                with m.If(count == MIN_PAYLOAD - 1):
                    m.d.sync += [state.eq(_State.FCS), count.eq(0)]
            with m.Case(_State.FCS):
                m.d.comb += en.eq(1)
                m.d.comb += d.eq(fcs.crc.word_select(count[:2], 8))
                m.d.sync += count.eq(count + 1)
                with m.If(count == 3):
                    m.d.sync += [state.eq(_State.IFG), count.eq(0), self.frames.eq(self.frames + 1)]
            with m.Case(_State.DISCARD):
                m.d.comb += self.i.ready.eq(1)
                with m.If(self.i.valid & self.i.payload.last):
                    m.d.sync += [state.eq(_State.IFG), count.eq(0)]
            with m.Case(_State.IFG):
                m.d.sync += count.eq(count + 1)
                # IFG_BYTES - 1 cycles here plus the IDLE cycle = IFG_BYTES idle bytes
                with m.If(count == IFG_BYTES - 2):
                    m.d.sync += state.eq(_State.IDLE)
        return m
