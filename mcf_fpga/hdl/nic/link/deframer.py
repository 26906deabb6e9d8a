"""Deframer: checks one received Ethernet II frame and stores its packet bytes.

Contract
--------
``i`` is the wire-side frame stream; it is always ready (a PHY cannot wait), so
frames may arrive back to back. Every beat after the 24-byte header is written
to the receive buffer at ``wr_base + (beat - header_beats)`` through
``wr_addr``/``wr_data``/``wr_en`` — but only if ``wr_allowed`` was high when the
first packet beat arrived (``wr_base`` must stay constant during a frame); the
result reports this as ``stored``.

One cycle after a frame's last beat ``done`` pulses with the verdict: ``good``,
or the drop ``cause`` (``spec.link.Cause``, first failing check in golden's
order: runt, length/alignment, CRC, destination MAC, EtherType, kind, length
field), plus the header fields ``kind``, ``seq``, ``ack``, ``length``. The CRC is
checked with ``amaranth.lib.crc`` against the constant the register holds after
any good frame (``hdl.nic.link.params.crc_check_constant``). Sequence checks are the
receiver's business, not the deframer's.
"""
from amaranth import Module, Signal, Cat, Const, Mux
from amaranth.lib import data, wiring
from amaranth.lib.crc.catalog import CRC32_ISO_HDLC
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.link import (Cause, ETHERTYPE, MIN_FRAME_BYTES, ALIGN_BYTES, FCS_BYTES, OFF_KIND, OFF_SEQ,
                       OFF_ACK, OFF_LENGTH, max_frame_bytes)
from mcf_fpga.spec.meta import MetaOp
from mcf_fpga.hdl.bus import PacketSignature
from .framer import body_beats
from .params import LinkParams

__all__ = ["FrameVerdict", "Deframer"]

FrameVerdict = data.StructLayout({"good": 1, "cause": 4, "stored": 1, "kind": 8,
                                  "seq": 16, "ack": 16, "length": 16})


class Deframer(wiring.Component):
    """See module docstring. ``local_mac``: the destination MAC this end accepts
    (6 bytes, an int, or a 48-bit signal)."""

    def __init__(self, params: LinkParams, local_mac):
        self.params = params
        self._mac = LinkParams.mac(local_mac)
        self.addr_width = max(1, (params.rx_slots * params.rx_slot_beats - 1).bit_length())
        super().__init__({
            "i": In(PacketSignature(params.data_width)),
            "wr_base": In(self.addr_width),
            "wr_allowed": In(1),
            "wr_addr": Out(self.addr_width),
            "wr_data": Out(params.data_width),
            "wr_en": Out(1),
            "done": Out(1),
            "verdict": Out(FrameVerdict),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.params
        W, B, H = p.data_width, p.beat_bytes, p.header_beats
        i = self.i
        m.d.comb += i.ready.eq(1)

        limit = p.max_frame_beats + 1          # saturating beat counter: "too long"
        beat = Signal(range(limit + 1))
        hdr = Signal(8 * H * B)
        store = Signal()
        m.submodules.crc = crc = CRC32_ISO_HDLC(W).create()

        beat_ok = i.valid
        masked = Cat(*[Mux(i.payload.keep[k], i.payload.data.word_select(k, 8), 0) for k in range(B)])
        m.d.comb += [crc.start.eq(beat_ok & (beat == 0)), crc.valid.eq(beat_ok), crc.data.eq(masked)]

        with m.If(beat_ok):
            with m.If(i.payload.last):
                m.d.sync += beat.eq(0)
            with m.Elif(beat < limit):
                m.d.sync += beat.eq(beat + 1)
            with m.Switch(beat):
                for k in range(H):
                    with m.Case(k):
                        m.d.sync += hdr.word_select(k, W).eq(i.payload.data)

        store_now = Mux(beat == H, self.wr_allowed, store)
        with m.If(beat_ok & (beat == H)):
            m.d.sync += store.eq(self.wr_allowed)
        m.d.comb += [self.wr_en.eq(beat_ok & (beat >= H) & (beat < H + p.rx_slot_beats) & store_now),
                     self.wr_addr.eq(self.wr_base + (beat - H)),
                     self.wr_data.eq(i.payload.data)]

        # At the last beat: everything but the CRC verdict, into check registers.
        def byte(n):
            return hdr.word_select(n, 8)
        total = Signal(range(limit * B + B + 1))
        m.d.comb += total.eq(beat * B + sum(i.payload.keep[k] for k in range(B)))
        length = Cat(byte(OFF_LENGTH), byte(OFF_LENGTH + 1))
        kind = byte(OFF_KIND)
        frame_len = Signal(18)
        m.d.comb += frame_len.eq(body_beats(m, length, p, "rx_body_beats") * B + FCS_BYTES)
        mac = Cat(*[byte(k) for k in range(6)])
        mac_v = Const(self._mac, 48) if isinstance(self._mac, int) else self._mac
        mac_const = Cat(*[mac_v.word_select(5 - k, 8) for k in range(6)])

        chk = Signal()
        runt, bad_size, bad_dst, bad_type, bad_kind, bad_len = (Signal(name=n) for n in
            ("runt", "bad_size", "bad_dst", "bad_type", "bad_kind", "bad_len"))
        v = self.verdict
        m.d.sync += chk.eq(beat_ok & i.payload.last)
        with m.If(beat_ok & i.payload.last):
            known = (kind == int(MetaOp.DATA)) | (kind == int(MetaOp.ACK)) | (kind == int(MetaOp.NAK))
            m.d.sync += [
                runt.eq(total < MIN_FRAME_BYTES),
                bad_size.eq((total[:3] != FCS_BYTES % ALIGN_BYTES) | (total > max_frame_bytes(p.max_packet))),
                bad_dst.eq(mac != mac_const),
                bad_type.eq(Cat(byte(13), byte(12)) != ETHERTYPE),
                bad_kind.eq(~known),
                bad_len.eq((length > p.max_packet) | (frame_len != total)
                           | ((kind == int(MetaOp.DATA)) & (length == 0))),
                v.kind.eq(kind),
                v.seq.eq(Cat(byte(OFF_SEQ), byte(OFF_SEQ + 1))),
                v.ack.eq(Cat(byte(OFF_ACK), byte(OFF_ACK + 1))),
                v.length.eq(length),
                v.stored.eq((beat >= H) & store_now),
            ]
        bad_crc = crc.crc != p.crc_magic
        m.d.comb += self.done.eq(chk)
        with m.If(runt):
            m.d.comb += v.cause.eq(Cause.RUNT)
        with m.Elif(bad_size):
            m.d.comb += v.cause.eq(Cause.LENGTH)
        with m.Elif(bad_crc):
            m.d.comb += v.cause.eq(Cause.CRC)
        with m.Elif(bad_dst):
            m.d.comb += v.cause.eq(Cause.DST)
        with m.Elif(bad_type):
            m.d.comb += v.cause.eq(Cause.ETHERTYPE)
        with m.Elif(bad_kind):
            m.d.comb += v.cause.eq(Cause.KIND)
        with m.Elif(bad_len):
            m.d.comb += v.cause.eq(Cause.LENGTH)
        with m.Else():
            m.d.comb += v.good.eq(1)
        return m
