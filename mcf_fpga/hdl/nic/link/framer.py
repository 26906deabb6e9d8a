"""Framer: turns a frame request into one Ethernet II frame on the wire stream.

Contract
--------
``req`` (stream of ``FrameRequest``) names what to send: ``kind`` (MetaOp.DATA/ACK/NAK),
``seq``, ``ack``, ``length`` (packet bytes, 0 for ack/nak) and ``slot`` (where the
packet sits in the retransmit buffer). The framer accepts a request when idle (or
while the last beat of the previous frame leaves), reads the packet beats from the
buffer through ``rd_addr``/``rd_data`` (a synchronous read port, one cycle latency,
enabled every cycle; the slot must not change while it is read: ``reading`` and
``reading_slot`` say which one is) and emits on ``o``:
header beats, packet beats, zero padding, FCS, exactly the bytes of
``golden.link.build_frame``. The FCS is computed by ``amaranth.lib.crc``
(CRC-32/ISO-HDLC) over whole words: the body is a multiple of 8 bytes by
construction. Back-pressure on ``o`` simply stalls the frame; nothing is lost.
"""
from amaranth import Module, Signal, Cat, Const, Mux
from amaranth.lib import data, stream, wiring
from amaranth.lib.crc.catalog import CRC32_ISO_HDLC
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.link import ETHERTYPE, MIN_FRAME_BYTES, ALIGN_BYTES, HEADER_BYTES
from mcf_fpga.spec.meta import MetaOp
from mcf_fpga.hdl.bus import PacketSignature
from .params import LinkParams

__all__ = ["FrameRequest", "Framer", "body_beats"]


def FrameRequest(params: LinkParams) -> data.StructLayout:
    return data.StructLayout({"kind": 8, "seq": 16, "ack": 16, "length": 16,
                              "slot": max(1, (params.window - 1).bit_length())})


def body_beats(m: Module, length, params: LinkParams, name: str):
    """Beats before the FCS for a packet of ``length`` bytes: max(64, ceil8(24+length)) / B."""
    words8 = Signal(14, name=f"{name}_words8")
    m.d.comb += words8.eq((length + HEADER_BYTES + ALIGN_BYTES - 1) >> 3)
    beats = Signal(17, name=name)
    per = ALIGN_BYTES // params.beat_bytes
    m.d.comb += beats.eq(Mux(words8 < MIN_FRAME_BYTES // ALIGN_BYTES,
                             MIN_FRAME_BYTES // params.beat_bytes, words8 * per))
    return beats


class Framer(wiring.Component):
    """See module docstring. ``src_mac``/``dst_mac``: this node's and the peer's MAC
    (6 bytes, an int, or a 48-bit signal; byte 0 = first on the wire = most significant)."""

    def __init__(self, params: LinkParams, src_mac, dst_mac):
        self.params = params
        self._src = LinkParams.mac(src_mac)
        self._dst = LinkParams.mac(dst_mac)
        self.addr_width = max(1, (params.window * params.tx_slot_beats - 1).bit_length())
        super().__init__({
            "req": In(stream.Signature(FrameRequest(params))),
            "rd_addr": Out(self.addr_width),
            "rd_data": In(params.data_width),
            "o": Out(PacketSignature(params.data_width)),
            "reading": Out(1),
            "reading_slot": Out(FrameRequest(params)["slot"].shape),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.params
        W, B = p.data_width, p.beat_bytes
        H = p.header_beats

        busy = Signal()
        kind = Signal(8)
        seq = Signal(16)
        ack = Signal(16)
        length = Signal(16)
        slot = Signal.like(self.req.payload.slot)
        beat = Signal(17)
        pkt_beats = Signal(17)       # H + ceil(length / B): first padding beat
        fcs_start = Signal(17)       # body beats: first FCS beat
        last_beat = Signal(17)

        m.submodules.crc = crc = CRC32_ISO_HDLC(W).create()

        def mac_bytes(v):
            v = Const(v, 48) if isinstance(v, int) else v
            return [v.word_select(5 - i, 8) for i in range(6)]

        header = Cat(*mac_bytes(self._dst), *mac_bytes(self._src),
                     Const(ETHERTYPE >> 8, 8), Const(ETHERTYPE & 0xFF, 8),
                     kind, Const(0, 8), seq, ack, length, Const(0, 16))
        assert len(header) == 8 * HEADER_BYTES

        o = self.o
        xfer = Signal()
        is_last = Signal()
        m.d.comb += [xfer.eq(o.valid & o.ready), is_last.eq(beat == last_beat)]

        # Accept a request when idle or while the last beat leaves.
        m.d.comb += self.req.ready.eq(~busy | (xfer & is_last))
        req = self.req.payload
        r_body = body_beats(m, req.length, p, "req_body_beats")
        with m.If(self.req.valid & self.req.ready):
            m.d.sync += [busy.eq(1), beat.eq(0), kind.eq(req.kind), seq.eq(req.seq),
                         ack.eq(req.ack), length.eq(req.length), slot.eq(req.slot),
                         pkt_beats.eq(H + ((req.length + B - 1) >> (B.bit_length() - 1))),
                         fcs_start.eq(r_body),
                         last_beat.eq(r_body + p.fcs_beats - 1)]
        with m.Elif(xfer & is_last):
            m.d.sync += busy.eq(0)
        with m.If(xfer & ~is_last):
            m.d.sync += beat.eq(beat + 1)

        # Read-ahead: the port's data is the word addressed on the previous cycle.
        beat_next = Mux(xfer, beat + 1, beat)
        m.d.comb += self.rd_addr.eq(slot * p.tx_slot_beats + (beat_next - H))

        m.d.comb += [o.valid.eq(busy), self.reading.eq(busy & (kind == int(MetaOp.DATA))),
                     self.reading_slot.eq(slot)]
        fcs_index = (beat - fcs_start)[:2]
        with m.If(beat < H):
            m.d.comb += o.payload.data.eq(header.word_select(beat[:max(1, (H - 1).bit_length())], W))
        with m.Elif(beat < pkt_beats):
            m.d.comb += o.payload.data.eq(self.rd_data)
        with m.Elif(beat < fcs_start):
            m.d.comb += o.payload.data.eq(0)
        with m.Else():
            if W >= 32:
                m.d.comb += o.payload.data.eq(crc.crc)
            else:
                m.d.comb += o.payload.data.eq(crc.crc.word_select(fcs_index, W))
        m.d.comb += o.payload.last.eq(is_last)
        full_keep = (1 << B) - 1
        if W == 64:
            m.d.comb += o.payload.keep.eq(Mux(is_last, 0x0F, full_keep))
        else:
            m.d.comb += o.payload.keep.eq(full_keep)

        m.d.comb += [crc.start.eq(xfer & (beat == 0)),
                     crc.valid.eq(xfer & (beat < fcs_start)),
                     crc.data.eq(o.payload.data)]
        return m
