"""Packetization buffer: a metadata FIFO and a payload FIFO in front of one packet stream.

MCF paper §5: the compute engine pushes payload words and MARS metadata
independently; the packetizer emits ``Packet = {Meta header, payload}`` as an
AXI-Stream packet. While the NIC is congested the compute side keeps pushing as
long as the FIFOs have room.

Packet format on the output (``PacketLayout(data_width[, user_width])``): the
``MetaParams.header_bytes`` wire header (``mcf_fpga/spec/meta.py``) in the first
``header_beats`` beats (full ``keep``, zero-padded to a whole beat), then
``ceil(length / beat_bytes)`` payload beats; the last beat's ``keep`` covers
``length mod beat_bytes`` bytes (all bytes when 0). ``last`` is on the final beat
(on the final header beat when ``length == 0``).
"""
from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import PacketSignature
from mcf_fpga.spec.meta import DEFAULT_PARAMS, MetaParams
from mcf_fpga.hdl.meta import meta_layout

__all__ = ["Packetizer", "PacketizerTop", "PacketJoiner", "joiner_desc_layout"]


def joiner_desc_layout(params: MetaParams, user_width: int, beat_bits: int) -> data.StructLayout:
    """Descriptor of ``PacketJoiner`` in NIC mode: ``meta``, ``user`` (copied onto every beat),
    ``drop`` (discard ``beats`` payload words without output)."""
    return data.StructLayout({"meta": meta_layout(params), "user": max(user_width, 1),
                              "drop": 1, "beats": beat_bits})


class PacketJoiner(wiring.Component):
    """Joins a descriptor stream and a payload-word stream into packets (no storage of its own).

    Members
    -------
    desc : In(stream)
        ``meta_layout(params)`` (simple mode) or ``joiner_desc_layout`` (``nic_mode``). A
        descriptor is consumed after its packet's last beat (or after draining a dropped one).
    words : In(stream)
        Payload words, ``data_width`` bits, ``ceil(length / beat_bytes)`` per packet.
    packet : Out(PacketSignature(data_width, user_width))
        Header beats then payload beats, back to back: the header of the next packet follows
        the last beat of the previous one with no idle cycle when both inputs are valid.

    Back-pressure on ``packet`` stalls both inputs; nothing is dropped, reordered or
    duplicated. In ``nic_mode`` a descriptor with ``drop`` consumes ``beats`` words and emits
    nothing.
    """

    def __init__(self, params: MetaParams = DEFAULT_PARAMS, data_width: int = 64,
                 user_width: int = 0, nic_mode: bool = False):
        if data_width < 64 or data_width & (data_width - 1):
            raise ValueError(f"data_width must be a power of two >= 64, got {data_width}")
        self.params, self.data_width, self.user_width, self.nic_mode = params, data_width, user_width, nic_mode
        self.beat_bytes = data_width // 8
        self.header_beats = params.header_beats(data_width)
        self.beat_bits = params.length_bits + 1
        desc = (joiner_desc_layout(params, user_width, self.beat_bits) if nic_mode
                else meta_layout(params))
        super().__init__({
            "desc": In(stream.Signature(desc)),
            "words": In(stream.Signature(data_width)),
            "packet": Out(PacketSignature(data_width, user_width)),
        })

    def elaborate(self, platform):
        m = Module()
        dw, bb, H = self.data_width, self.beat_bytes, self.header_beats
        lb = bb.bit_length() - 1
        d = self.desc.payload
        meta = d.meta if self.nic_mode else d
        user = d.user[:self.user_width] if self.user_width else None
        length = meta.length
        pay_beats = Signal(self.beat_bits)
        m.d.comb += pay_beats.eq((length + (bb - 1)) >> lb)
        rem = length[:lb]
        last_keep = Signal(bb)
        m.d.comb += last_keep.eq(Mux(rem == 0, (1 << bb) - 1, (Const(1, bb + 1) << rem) - 1))
        header = Signal(H * dw)
        m.d.comb += header.eq(meta.as_value())

        hidx = Signal(range(max(H, 2)))
        remaining = Signal(self.beat_bits)
        pkt = self.packet
        if user is not None:
            m.d.comb += pkt.payload.user.eq(user)

        with m.FSM():
            with m.State("HEADER"):
                def emit_header():
                    m.d.comb += [pkt.valid.eq(self.desc.valid),
                                 pkt.payload.data.eq(header.word_select(hidx, dw)),
                                 pkt.payload.keep.eq((1 << bb) - 1),
                                 pkt.payload.last.eq((hidx == H - 1) & (pay_beats == 0))]
                    with m.If(pkt.valid & pkt.ready):
                        with m.If(hidx == H - 1):
                            m.d.sync += hidx.eq(0)
                            with m.If(pay_beats == 0):
                                m.d.comb += self.desc.ready.eq(1)
                            with m.Else():
                                m.d.sync += remaining.eq(pay_beats)
                                m.next = "PAYLOAD"
                        with m.Else():
                            m.d.sync += hidx.eq(hidx + 1)
                if self.nic_mode:
                    with m.If(d.drop):
                        m.d.comb += self.desc.ready.eq(self.desc.valid & (d.beats == 0))
                        with m.If(self.desc.valid & (d.beats != 0)):
                            m.d.sync += remaining.eq(d.beats)
                            m.next = "DRAIN"
                    with m.Else():
                        emit_header()
                else:
                    emit_header()
            with m.State("PAYLOAD"):
                is_last = remaining == 1
                m.d.comb += [pkt.valid.eq(self.words.valid),
                             pkt.payload.data.eq(self.words.payload),
                             pkt.payload.keep.eq(Mux(is_last, last_keep, (1 << bb) - 1)),
                             pkt.payload.last.eq(is_last),
                             self.words.ready.eq(pkt.ready)]
                with m.If(pkt.valid & pkt.ready):
                    m.d.sync += remaining.eq(remaining - 1)
                    with m.If(is_last):
                        m.d.comb += self.desc.ready.eq(1)
                        m.next = "HEADER"
            with m.State("DRAIN"):
                m.d.comb += self.words.ready.eq(1)
                with m.If(self.words.valid):
                    m.d.sync += remaining.eq(remaining - 1)
                    with m.If(remaining == 1):
                        m.d.comb += self.desc.ready.eq(1)
                        m.next = "HEADER"
        return m


class Packetizer(wiring.Component):
    """Payload FIFO + metadata FIFO -> packet stream (``Packet = {Meta header, payload}``).

    Members
    -------
    meta : In(stream(meta_layout(params)))
        One entry per packet; ``length`` is the payload size in bytes (0 allowed).
    payload : In(stream(data_width))
        Payload words in order; packet ``k`` takes the next ``ceil(length_k / beat_bytes)``
        words (bytes beyond ``length`` in the last word are not sent).
    packet : Out(PacketSignature(data_width))
        See the module docstring for the format.

    Both inputs are accepted whenever their FIFO has room (``payload_depth`` words,
    ``meta_depth`` descriptors), independently of the output's back-pressure. Packets leave
    in ``meta`` order, back to back (1 beat/cycle, no idle cycle between packets while the
    next packet's words are present).
    """

    def __init__(self, params: MetaParams = DEFAULT_PARAMS, data_width: int = 64,
                 payload_depth: int = 64, meta_depth: int = 8):
        if payload_depth < 2 or meta_depth < 2:
            raise ValueError(f"payload_depth and meta_depth must be >= 2, got {payload_depth}, {meta_depth}")
        self.params, self.data_width = params, data_width
        self.payload_depth, self.meta_depth = payload_depth, meta_depth
        self._joiner = PacketJoiner(params, data_width)
        super().__init__({
            "meta": In(stream.Signature(meta_layout(params))),
            "payload": In(stream.Signature(data_width)),
            "packet": Out(PacketSignature(data_width)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.joiner = j = self._joiner
        m.submodules.meta_fifo = mf = fifo.SyncFIFOBuffered(width=meta_layout(self.params).size,
                                                            depth=self.meta_depth)
        m.submodules.payload_fifo = pf = fifo.SyncFIFOBuffered(width=self.data_width,
                                                               depth=self.payload_depth)
        m.d.comb += [
            mf.w_data.eq(self.meta.payload), mf.w_en.eq(self.meta.valid), self.meta.ready.eq(mf.w_rdy),
            pf.w_data.eq(self.payload.payload), pf.w_en.eq(self.payload.valid),
            self.payload.ready.eq(pf.w_rdy),
            j.desc.payload.eq(mf.r_data), j.desc.valid.eq(mf.r_rdy), mf.r_en.eq(j.desc.ready),
            j.words.payload.eq(pf.r_data), j.words.valid.eq(pf.r_rdy), pf.r_en.eq(j.words.ready),
        ]
        wiring.connect(m, wiring.flipped(self.packet), j.packet)
        return m


class PacketizerTop(wiring.Component):
    """AMBA-named wrapper of ``Packetizer`` for Verilog: ``s_axis_meta`` (``tdata`` = Meta
    bits, ``meta_layout``), ``s_axis`` (payload words), ``m_axis`` (packets)."""

    def __init__(self, data_width: int = 64, payload_depth: int = 64, meta_depth: int = 8):
        self._p = Packetizer(DEFAULT_PARAMS, data_width, payload_depth, meta_depth)
        super().__init__({
            "s_axis_meta": In(stream.Signature(meta_layout(DEFAULT_PARAMS).size)),
            "s_axis": In(stream.Signature(data_width)),
            "m_axis": Out(PacketSignature(data_width)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.packetizer = p = self._p
        m.d.comb += [p.meta.payload.eq(self.s_axis_meta.payload), p.meta.valid.eq(self.s_axis_meta.valid),
                     self.s_axis_meta.ready.eq(p.meta.ready)]
        wiring.connect(m, wiring.flipped(self.s_axis), p.payload)
        wiring.connect(m, p.packet, wiring.flipped(self.m_axis))
        return m
