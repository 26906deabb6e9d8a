"""FCS adapters between the node's reliable link (frames WITH FCS, 64-bit) and a MAC
(frames WITHOUT FCS, 8-bit), used by the board top (``mcf_fpga/boards/node_top.py``).

The node's ``hdl.nic.link.ReliableLink`` makes and checks its own FCS (CRC-32, the
Ethernet polynomial, ``golden.link.fcs``); the board's MACs (``mcf_fpga/hdl/eth/mac_tx.py``,
``mac_rx.py``) add/strip the Ethernet FCS on the wire. Both are the same CRC over the
same bytes, so:

* :class:`FcsStripTx` (node -> MAC): 64-bit beats (``keep`` contiguous from byte 0) in,
  bytes out with the frame's last 4 bytes (the link's FCS) removed -- the MAC appends the
  identical FCS on the wire. A frame of 4 bytes or fewer produces nothing.
* :class:`FcsAppendRx` (MAC -> node): bytes (``user`` = 1 on the last byte of a frame the
  MAC found bad: FCS error, RX_ER, overrun) in, 64-bit beats out with a fresh FCS
  (``amaranth.lib.crc`` CRC32_ETHERNET) appended -- inverted for a bad frame, so the
  link's deframer drops it and counts it (``drop_crc``; a truncated frame may fail the
  length check first and count as ``drop_length``). The last beat's ``keep`` is partial.

Back-pressure: both tolerate any pattern on either side (``lib.stream`` contract);
:class:`FcsAppendRx` takes no input for the 4 cycles it spends on the FCS bytes.
"""
from amaranth import Module, Signal, Cat, Mux
from amaranth.lib import crc, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import PacketSignature

__all__ = ["FcsStripTx", "FcsAppendRx", "FCS_BYTES"]

FCS_BYTES = 4


class FcsStripTx(wiring.Component):
    """``i``: frames with FCS, ``width``-bit beats; ``o``: 8-bit frames without FCS."""

    def __init__(self, width: int = 64):
        if width % 8 or width < 8:
            raise ValueError(f"FcsStripTx width must be a positive multiple of 8, got {width}")
        self.width = width
        super().__init__({"i": In(PacketSignature(width)), "o": Out(PacketSignature(8))})

    def elaborate(self, platform):
        m = Module()
        nb = self.width // 8
        # ---- serializer: beat -> bytes (b_*: the byte stream)
        idx = Signal(range(nb))
        keep = self.i.payload.keep
        nbytes = Signal(range(nb + 1))
        m.d.comb += nbytes.eq(sum(keep[k] for k in range(nb)))
        b_valid, b_ready, b_last = Signal(), Signal(), Signal()
        b_data = Signal(8)
        final = idx == nbytes - 1
        m.d.comb += [b_valid.eq(self.i.valid & (nbytes != 0)),
                     b_data.eq(self.i.payload.data.word_select(idx, 8)),
                     b_last.eq(self.i.payload.last & final)]
        with m.If(self.i.valid & (nbytes == 0)):
            m.d.comb += self.i.ready.eq(1)             # an empty beat carries no byte
        with m.Elif(b_valid & b_ready):
            with m.If(final):
                m.d.comb += self.i.ready.eq(1)
                m.d.sync += idx.eq(0)
            with m.Else():
                m.d.sync += idx.eq(idx + 1)
        # ---- stripper: hold the 4 most recent bytes; the ones still held at `last` are the FCS
        held = Signal(32)
        n = Signal(range(FCS_BYTES + 1))
        o = self.o
        with m.If(n < FCS_BYTES):
            m.d.comb += b_ready.eq(1)
            with m.If(b_valid):
                m.d.sync += [held.eq(Cat(held[8:], b_data)), n.eq(Mux(b_last, 0, n + 1))]
        with m.Else():
            m.d.comb += [o.valid.eq(b_valid), o.payload.data.eq(held[:8]), o.payload.keep.eq(1),
                         o.payload.last.eq(b_last), b_ready.eq(o.ready)]
            with m.If(b_valid & o.ready):
                m.d.sync += held.eq(Cat(held[8:], b_data))
                with m.If(b_last):
                    m.d.sync += n.eq(0)
        return m


class FcsAppendRx(wiring.Component):
    """``i``: 8-bit frames without FCS (``user`` = bad); ``o``: ``width``-bit frames with FCS."""

    def __init__(self, width: int = 64):
        if width % 8 or width < 8:
            raise ValueError(f"FcsAppendRx width must be a positive multiple of 8, got {width}")
        self.width = width
        super().__init__({"i": In(PacketSignature(8, user_width=1)), "o": Out(PacketSignature(width))})

    def elaborate(self, platform):
        m = Module()
        nb = self.width // 8
        m.submodules.crc = fcs = crc.catalog.CRC32_ETHERNET(8).create()
        # ---- byte stream with the FCS appended (b_*)
        b_valid, b_ready, b_last = Signal(), Signal(), Signal()
        b_data = Signal(8)
        in_fcs = Signal()
        k = Signal(2)
        bad = Signal()
        first = Signal(init=1)
        m.d.comb += [fcs.data.eq(self.i.payload.data), fcs.start.eq(first)]
        with m.If(~in_fcs):
            m.d.comb += [b_valid.eq(self.i.valid), b_data.eq(self.i.payload.data),
                         self.i.ready.eq(b_ready)]
            with m.If(self.i.valid & b_ready):
                m.d.comb += fcs.valid.eq(1)
                m.d.sync += first.eq(0)
                with m.If(self.i.payload.last):
                    m.d.sync += [in_fcs.eq(1), k.eq(0), bad.eq(self.i.payload.user)]
        with m.Else():
            value = Mux(bad, ~fcs.crc, fcs.crc)
            m.d.comb += [b_valid.eq(1), b_data.eq(value.word_select(k, 8)), b_last.eq(k == 3)]
            with m.If(b_ready):
                m.d.sync += k.eq(k + 1)
                with m.If(k == 3):
                    m.d.sync += [in_fcs.eq(0), first.eq(1)]
        # ---- packer: bytes -> beats (byte j of a beat in bits 8j..8j+7)
        o = self.o
        data = Signal(self.width)
        keep = Signal(nb)
        cnt = Signal(range(nb + 1))
        full = Signal()           # a finished beat waits in data/keep
        last = Signal()
        m.d.comb += [o.valid.eq(full), o.payload.data.eq(data), o.payload.keep.eq(keep),
                     o.payload.last.eq(last)]
        drain = o.valid & o.ready
        m.d.comb += b_ready.eq(~full | o.ready)
        with m.If(drain):
            m.d.sync += [full.eq(0), keep.eq(0), cnt.eq(0), data.eq(0)]
        with m.If(b_valid & b_ready):
            base_cnt = Mux(drain, 0, cnt)
            base_keep = Mux(drain, 0, keep)
            base_data = Mux(drain, 0, data)
            shift = Signal(range(self.width))
            m.d.comb += shift.eq(base_cnt * 8)
            m.d.sync += [data.eq(base_data | (b_data << shift)),
                         keep.eq(base_keep | (1 << base_cnt)),
                         cnt.eq(base_cnt + 1), last.eq(b_last)]
            with m.If(b_last | (base_cnt == nb - 1)):
                m.d.sync += full.eq(1)
        return m
