"""Ethernet receive MAC, 1 Gb/s GMII (8 bits per clock at 125 MHz).

Input: GMII ``rxd``/``rx_dv``/``rx_er``. Output ``o``: a ``PacketSignature(8,
user_width=1)`` byte stream, one packet per received frame, FCS stripped
(padding kept). ``user`` is 1 on the ``last`` beat of a bad frame: FCS
mismatch (``amaranth.lib.crc`` residue check), RX_ER during the frame, shorter
than 64 bytes, or bytes lost to back-pressure; 0 on every other beat. The
consumer drops frames whose last beat has ``user`` set.

Frames need a preamble (one or more 0x55) then SFD 0xD5; anything else is
ignored until RX_DV falls. Frames with fewer than 5 bytes after the SFD
produce no output. Counters (wrap): ``frames`` good frames, ``errors`` bad or
dropped frames.

Back-pressure: the line cannot wait, so ``o`` has a one-beat holding register
(the stream contract holds: a held beat never changes). A byte that arrives
while the held beat is still not taken is lost and the frame is marked bad. If
a frame ends while one of its beats is held, an extra beat (data 0, ``last``,
``user`` = 1) follows the held one; a frame none of whose beats got out is
dropped whole. So every frame that produced output ends with ``last``, no two
frames merge, and it never hangs.
"""
from amaranth import Module, Signal, Cat
from amaranth.lib import wiring, crc, enum
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import PacketSignature
from mcf_fpga.spec.ethernet import MIN_PAYLOAD, SFD

__all__ = ["EthernetRx"]


class _State(enum.Enum):
    IDLE = 0
    PREAMBLE = 1
    DATA = 2
    DROP = 3


class EthernetRx(wiring.Component):
    """GMII receive MAC (see module docstring)."""
    rxd: In(8)
    rx_dv: In(1)
    rx_er: In(1)
    o: Out(PacketSignature(8, user_width=1))
    frames: Out(16)
    errors: Out(16)

    def elaborate(self, platform):
        m = Module()
        m.submodules.crc = fcs = crc.catalog.CRC32_ETHERNET(8).create()

        state = Signal(_State)
        shreg = Signal(5 * 8)       # last 5 bytes, newest in the top byte
        nmax = MIN_PAYLOAD + 5
        nbytes = Signal(range(nmax + 1))   # saturating byte count after SFD
        err = Signal()              # RX_ER seen or bytes lost in this frame

        # one-beat holding register on the output
        o = self.o
        held = Signal()          # o holds a beat the consumer has not taken
        owe_last = Signal()      # the held beat's frame ended while blocked: send a last beat
        m.d.comb += held.eq(o.valid & ~o.ready)
        with m.If(o.valid & o.ready):
            m.d.sync += o.valid.eq(0)

        def load(data, last, user):
            m.d.sync += [o.valid.eq(1), o.payload.data.eq(data), o.payload.last.eq(last),
                         o.payload.keep.eq(1), o.payload.user.eq(user)]

        with m.If(owe_last & ~held):
            load(0, 1, 1)
            m.d.sync += owe_last.eq(0)

        def push(data, last, user):
            """Offer a beat; returns the 'could not load' condition."""
            blocked = held | owe_last
            with m.If(~blocked):
                load(data, last, user)
            if last:
                with m.Elif(~owe_last & ~o.payload.last):
                    m.d.sync += owe_last.eq(1)     # held beat is this frame's: end it after it
                # else: this frame produced no output at all and is dropped
            else:
                with m.Else():
                    m.d.sync += err.eq(1)          # byte lost
            return blocked

        m.d.comb += fcs.data.eq(self.rxd)

        with m.Switch(state):
            with m.Case(_State.IDLE):
                # IDLE is left only while RX_DV is low, so the next RX_DV byte starts a frame
                with m.If(self.rx_dv & (self.rxd == 0x55) & ~self.rx_er):
                    m.d.sync += state.eq(_State.PREAMBLE)
                with m.Elif(self.rx_dv):
                    m.d.sync += state.eq(_State.DROP)
            with m.Case(_State.PREAMBLE):
                m.d.comb += fcs.start.eq(1)
                m.d.sync += [nbytes.eq(0), err.eq(0)]
                with m.If(~self.rx_dv):
                    m.d.sync += state.eq(_State.IDLE)
                with m.Elif(self.rx_er | ((self.rxd != 0x55) & (self.rxd != SFD))):
                    m.d.sync += state.eq(_State.DROP)
                with m.Elif(self.rxd == SFD):
                    m.d.sync += state.eq(_State.DATA)
            with m.Case(_State.DATA):
                with m.If(self.rx_dv):
                    m.d.comb += fcs.valid.eq(1)
                    m.d.sync += shreg.eq(Cat(shreg[8:], self.rxd))
                    with m.If(nbytes != nmax):
                        m.d.sync += nbytes.eq(nbytes + 1)
                    with m.If(self.rx_er):
                        m.d.sync += err.eq(1)
                    with m.If(nbytes >= 5):
                        push(shreg[:8], 0, 0)
                with m.Else():
                    m.d.sync += state.eq(_State.IDLE)
                    bad = err | ~fcs.match_detected | (nbytes < MIN_PAYLOAD + 4)
                    with m.If(nbytes >= 5):
                        blocked = push(shreg[:8], 1, bad)
                        # blocked: the frame ends with the extra bad last beat, or produced
                        # no output at all (dropped)
                        with m.If(bad | blocked):
                            m.d.sync += self.errors.eq(self.errors + 1)
                        with m.Else():
                            m.d.sync += self.frames.eq(self.frames + 1)
                    with m.Else():
                        m.d.sync += self.errors.eq(self.errors + 1)
            with m.Case(_State.DROP):
                with m.If(~self.rx_dv):
                    m.d.sync += [state.eq(_State.IDLE), self.errors.eq(self.errors + 1)]
        return m
