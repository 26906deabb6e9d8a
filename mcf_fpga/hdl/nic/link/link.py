"""Reliable link: go-back-N ARQ over Ethernet II frames (one endpoint of a point-to-point link).

Contract
--------
* ``s_axis`` (node side, packets to send): accepted while the go-back-N window has a
  free slot; each packet (1..``max_packet`` bytes, ``keep`` contiguous on the last beat)
  is stored in the retransmit buffer (``amaranth.lib.memory``) and numbered. A packet
  that is empty or too long is consumed, dropped and counted in ``tx_bad_len``.
  Back-pressure: ``s_axis.ready`` is low while the window is full.
* ``tx`` (wire side): frames of ``golden.link.build_frame``, one per AXI-Stream packet,
  FCS included, preamble/SFD not. Priority: NAK, then data (carrying the cumulative
  ack), then a standalone ACK. Back-pressure on ``tx`` stalls the link, nothing else.
* ``rx`` (wire side): always ready. Frames are checked (``Deframer``); bad ones are
  dropped and counted per cause (``drop_*`` outputs, order of ``spec.link.Cause``).
  Every good frame's ack advances the sender; a data frame is delivered only if its
  sequence number is the next expected one, so ``m_axis`` sees every packet exactly once
  and in order. An out-of-order frame triggers one NAK per gap, a duplicate an ACK.
* ``m_axis`` (node side, delivered packets) drains a ring of ``rx_slots`` packet
  buffers; while it is full, in-order frames are dropped (``drop_overflow``) and
  resent later by the peer, so any back-pressure is tolerated.
* Timeout: after ``timeout`` cycles without ack progress while packets are outstanding,
  the sender resends from the oldest unacknowledged one. With finitely many losses every
  packet is delivered.
"""
from amaranth import Module, Signal, Cat, Const, Mux, Array
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.link import Cause, SEQ_MOD
from mcf_fpga.spec.meta import MetaOp
from mcf_fpga.hdl.bus import PacketSignature
from .deframer import Deframer
from .framer import Framer
from .params import LinkParams, DROP_COUNTERS, STAT_COUNTERS

__all__ = ["ReliableLink"]


class ReliableLink(wiring.Component):
    """One link endpoint (see module docstring).

    Parameters
    ----------
    params : LinkParams
    local_mac, peer_mac : bytes (6) or int
        This end's MAC (destination of accepted frames, source of sent ones) and the peer's.
    mac_ports : bool
        If True, the MACs are not constants but 48-bit inputs ``local_mac``/``peer_mac``
        (byte 0 most significant), e.g. from configuration registers; change them only
        while the link is idle.
    """

    def __init__(self, params: LinkParams = LinkParams(), local_mac=0x024D43460000,
                 peer_mac=0x024D43460001, *, mac_ports: bool = False):
        self.params = params
        self.mac_ports = mac_ports
        if not mac_ports:
            self._local_mac = LinkParams.mac(local_mac)
            self._peer_mac = LinkParams.mac(peer_mac)
        W = params.data_width
        members = {
            "s_axis": In(PacketSignature(W)),
            "m_axis": Out(PacketSignature(W)),
            "tx": Out(PacketSignature(W)),
            "rx": In(PacketSignature(W)),
        }
        for name in DROP_COUNTERS + STAT_COUNTERS:
            members[name] = Out(params.counter_width)
        if mac_ports:
            members["local_mac"] = In(48)
            members["peer_mac"] = In(48)
        super().__init__(members)
        if mac_ports:
            self._local_mac, self._peer_mac = self.local_mac, self.peer_mac

    def elaborate(self, platform):
        m = Module()
        p = self.params
        W, B = p.data_width, p.beat_bytes
        log2b = B.bit_length() - 1
        slot_bits = max(1, (p.window - 1).bit_length())
        rslot_bits = max(1, (p.rx_slots - 1).bit_length())

        def count(name, cond=1):
            sig = getattr(self, name)
            with m.If(cond):
                m.d.sync += sig.eq(sig + 1)

        # ---------------- memories and frame blocks ----------------
        m.submodules.tx_mem = tx_mem = Memory(shape=W, depth=p.window * p.tx_slot_beats, init=[])
        tx_wp = tx_mem.write_port()
        tx_rp = tx_mem.read_port()
        m.submodules.rx_mem = rx_mem = Memory(shape=W, depth=p.rx_slots * p.rx_slot_beats, init=[])
        rx_wp = rx_mem.write_port()
        rx_rp = rx_mem.read_port()

        m.submodules.framer = framer = Framer(p, self._local_mac, self._peer_mac)
        m.submodules.deframer = deframer = Deframer(p, self._local_mac)
        wiring.connect(m, framer.o, wiring.flipped(self.tx))
        wiring.connect(m, wiring.flipped(self.rx), deframer.i)
        m.d.comb += [tx_rp.addr.eq(framer.rd_addr), framer.rd_data.eq(tx_rp.data),
                     rx_wp.addr.eq(deframer.wr_addr), rx_wp.data.eq(deframer.wr_data),
                     rx_wp.en.eq(deframer.wr_en)]

        # ---------------- sender state ----------------
        base = Signal(16)
        next_seq = Signal(16)
        send_ptr = Signal(16)
        sent_hw = Signal(16)
        timer = Signal(range(p.timeout + 1))
        lengths = Array(Signal(16, name=f"tx_len{k}") for k in range(p.window))

        # ---------------- receiver state ----------------
        expected = Signal(16)
        nak_sent = Signal()
        ack_pending = Signal()
        nak_pending = Signal()
        wr = Signal(rslot_bits + 1)
        rd = Signal(rslot_bits + 1)
        rx_lengths = Array(Signal(16, name=f"rx_len{k}") for k in range(p.rx_slots))

        # ---------------- ingest: s_axis -> retransmit buffer ----------------
        s = self.s_axis
        in_beat = Signal(range(p.tx_slot_beats + 1))
        wslot = next_seq[:slot_bits] if p.window > 1 else Const(0, 1)
        # A slot is free once acknowledged, but a retransmission of it may still be on the
        # wire (an ack for an earlier copy overtook it): wait until the framer is done with it.
        m.d.comb += s.ready.eq(((next_seq - base)[:16] < p.window)
                               & ~(framer.reading & (framer.reading_slot == wslot)))
        keep_mask = Cat(*[s.payload.keep[k].replicate(8) for k in range(B)])
        m.d.comb += [tx_wp.addr.eq(wslot * p.tx_slot_beats + in_beat),
                     tx_wp.data.eq(s.payload.data & keep_mask)]
        ingest_done = Signal()
        with m.If(s.valid & s.ready):
            m.d.comb += tx_wp.en.eq(in_beat < p.tx_slot_beats)
            with m.If(s.payload.last):
                nbytes = Signal(range(p.tx_slot_beats * B + B + 1))
                m.d.comb += nbytes.eq((in_beat << log2b) + sum(s.payload.keep[k] for k in range(B)))
                m.d.sync += in_beat.eq(0)
                with m.If((nbytes == 0) | (nbytes > p.max_packet) | (in_beat >= p.tx_slot_beats)):
                    count("tx_bad_len")
                with m.Else():
                    m.d.sync += lengths[wslot].eq(nbytes)
                    m.d.comb += ingest_done.eq(1)
            with m.Elif(in_beat < p.tx_slot_beats):
                m.d.sync += in_beat.eq(in_beat + 1)
        with m.If(ingest_done):
            m.d.sync += next_seq.eq(next_seq + 1)

        # ---------------- transmit scheduling: NAK > data > ACK ----------------
        req = framer.req
        data_avail = send_ptr != next_seq
        sslot = send_ptr[:slot_bits] if p.window > 1 else Const(0, 1)
        send_nak = nak_pending
        send_data = ~nak_pending & data_avail
        m.d.comb += [
            req.valid.eq(nak_pending | data_avail | ack_pending),
            req.payload.kind.eq(Mux(send_nak, int(MetaOp.NAK), Mux(send_data, int(MetaOp.DATA), int(MetaOp.ACK)))),
            req.payload.seq.eq(Mux(send_data, send_ptr, 0)),
            req.payload.ack.eq(expected),
            req.payload.length.eq(Mux(send_data, lengths[sslot], 0)),
            req.payload.slot.eq(sslot),
        ]
        took = req.valid & req.ready
        take_data = Signal()
        retrans = Signal()
        m.d.comb += [take_data.eq(took & send_data), retrans.eq(send_ptr != sent_hw)]
        with m.If(took):
            m.d.sync += ack_pending.eq(0)          # every frame carries the ack
            with m.If(send_nak):
                m.d.sync += nak_pending.eq(0)
            count("tx_ctrl_frames", ~send_data)
            count("tx_data_frames", send_data)
            count("tx_retransmits", send_data & retrans)

        sp1 = Signal(16)
        hw1 = Signal(16)
        m.d.comb += [sp1.eq(send_ptr + take_data), hw1.eq(sent_hw + (take_data & ~retrans))]
        sp2 = Signal(16)
        base2 = Signal(16)
        m.d.comb += [sp2.eq(sp1), base2.eq(base)]

        # ---------------- received frame verdicts ----------------
        v = deframer.verdict
        done = deframer.done
        good = done & v.good
        for c, name in zip(Cause, DROP_COUNTERS):
            if c <= Cause.LENGTH or c in (Cause.CRC, Cause.DST, Cause.ETHERTYPE, Cause.KIND):
                count(name, done & ~v.good & (v.cause == c))
        count("rx_good_frames", good)

        # ack processing (every good frame)
        a = v.ack
        ack_ok = (a - base)[:16] <= (sent_hw - base)[:16]
        progress = Signal()
        with m.If(good):
            with m.If(ack_ok):
                m.d.comb += [base2.eq(a), progress.eq(a != base)]
                with m.If((v.kind == int(MetaOp.NAK)) | ((sp1 - a)[:16] > (hw1 - a)[:16])):
                    m.d.comb += sp2.eq(a)
            with m.Else():
                count("drop_bad_ack")

        # retransmission timer
        fire = Signal()
        with m.If((base == next_seq) | progress):
            m.d.sync += timer.eq(0)
        with m.Elif(timer >= p.timeout - 1):
            m.d.sync += timer.eq(0)
            m.d.comb += [fire.eq(1), sp2.eq(base)]
            count("timeouts")
        with m.Else():
            m.d.sync += timer.eq(timer + 1)
        m.d.sync += [send_ptr.eq(sp2), base.eq(base2), sent_hw.eq(hw1)]

        # sequence check of data frames
        full = (wr - rd)[:rslot_bits + 1] == p.rx_slots
        wslot_rx = wr[:rslot_bits] if p.rx_slots > 1 else Const(0, 1)
        m.d.comb += [deframer.wr_base.eq(wslot_rx * p.rx_slot_beats), deframer.wr_allowed.eq(~full)]
        d = (v.seq - expected)[:16]
        with m.If(good & (v.kind == int(MetaOp.DATA))):
            with m.If(d == 0):
                with m.If(v.stored):
                    m.d.sync += [rx_lengths[wslot_rx].eq(v.length), wr.eq(wr + 1),
                                 expected.eq(expected + 1), ack_pending.eq(1), nak_sent.eq(0)]
                with m.Else():
                    count("drop_overflow")
            with m.Elif(d < SEQ_MOD // 2):
                count("drop_seq")
                with m.If(~nak_sent):
                    m.d.sync += [nak_pending.eq(1), nak_sent.eq(1)]
            with m.Else():
                count("drop_dup")
                m.d.sync += ack_pending.eq(1)

        # ---------------- delivery: receive ring -> m_axis ----------------
        mo = self.m_axis
        out_beat = Signal(range(p.rx_slot_beats + 1))
        rslot = rd[:rslot_bits] if p.rx_slots > 1 else Const(0, 1)
        rlen = rx_lengths[rslot]
        n_beats = (rlen + B - 1) >> log2b
        o_last = out_beat == n_beats - 1
        rem = rlen[:log2b] if log2b else Const(0, 1)
        m.d.comb += [mo.valid.eq(rd != wr), mo.payload.data.eq(rx_rp.data),
                     mo.payload.last.eq(o_last)]
        if log2b:
            m.d.comb += mo.payload.keep.eq(Mux(o_last & (rem != 0),
                                               (Const(1, B + 1) << rem) - 1, (1 << B) - 1))
        else:
            m.d.comb += mo.payload.keep.eq(1)
        oxfer = mo.valid & mo.ready
        rd_next = Signal.like(rd)
        ob_next = Signal.like(out_beat)
        m.d.comb += [rd_next.eq(rd), ob_next.eq(out_beat)]
        with m.If(oxfer):
            with m.If(o_last):
                m.d.comb += [rd_next.eq(rd + 1), ob_next.eq(0)]
                count("delivered")
            with m.Else():
                m.d.comb += ob_next.eq(out_beat + 1)
        m.d.sync += [rd.eq(rd_next), out_beat.eq(ob_next)]
        rslot_next = rd_next[:rslot_bits] if p.rx_slots > 1 else Const(0, 1)
        m.d.comb += rx_rp.addr.eq(rslot_next * p.rx_slot_beats + ob_next)
        return m
