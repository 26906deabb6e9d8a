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
from amaranth import Module, Signal, Const, Mux
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.link import Cause, SEQ_MOD
from mcf_fpga.spec.meta import MetaOp
from mcf_fpga.hdl.bus import PacketSignature
from .deframer import Deframer
from .framer import Framer
from .params import LinkParams, DROP_COUNTERS, STAT_COUNTERS
from .retransmit_timer import RetransmitTimer
from .rx_ring import RxRing
from .tx_ingest import TxIngest

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
        W = p.data_width
        slot_bits = max(1, (p.window - 1).bit_length())

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
        m.submodules.ingest = ingest = TxIngest(p)
        m.submodules.timer = timer = RetransmitTimer(p.timeout)
        m.submodules.ring = ring = RxRing(p)
        wiring.connect(m, framer.o, wiring.flipped(self.tx))
        wiring.connect(m, wiring.flipped(self.rx), deframer.i)
        wiring.connect(m, wiring.flipped(self.s_axis), ingest.s_axis)
        wiring.connect(m, ring.m_axis, wiring.flipped(self.m_axis))
        m.d.comb += [tx_rp.addr.eq(framer.rd_addr), framer.rd_data.eq(tx_rp.data),
                     tx_wp.addr.eq(ingest.wr_addr), tx_wp.data.eq(ingest.wr_data),
                     tx_wp.en.eq(ingest.wr_en),
                     rx_wp.addr.eq(deframer.wr_addr), rx_wp.data.eq(deframer.wr_data),
                     rx_wp.en.eq(deframer.wr_en),
                     rx_rp.addr.eq(ring.rd_addr), ring.rd_data.eq(rx_rp.data),
                     deframer.wr_base.eq(ring.wr_base), deframer.wr_allowed.eq(~ring.full)]

        # ---------------- sender state ----------------
        base = Signal(16)
        next_seq = Signal(16)
        send_ptr = Signal(16)
        sent_hw = Signal(16)

        # ---------------- receiver state ----------------
        expected = Signal(16)
        nak_sent = Signal()
        ack_pending = Signal()
        nak_pending = Signal()

        # ---------------- ingest: s_axis -> retransmit buffer (TxIngest) ----------------
        wslot = next_seq[:slot_bits] if p.window > 1 else Const(0, 1)
        # A slot is free once acknowledged, but a retransmission of it may still be on the
        # wire (an ack for an earlier copy overtook it): wait until the framer is done with it.
        m.d.comb += [ingest.allow.eq(((next_seq - base)[:16] < p.window)
                                     & ~(framer.reading & (framer.reading_slot == wslot))),
                     ingest.slot.eq(wslot)]
        count("tx_bad_len", ingest.bad_len)
        with m.If(ingest.done):
            m.d.sync += next_seq.eq(next_seq + 1)

        # ---------------- transmit scheduling: NAK > data > ACK ----------------
        req = framer.req
        data_avail = send_ptr != next_seq
        sslot = send_ptr[:slot_bits] if p.window > 1 else Const(0, 1)
        send_nak = nak_pending
        send_data = ~nak_pending & data_avail
        m.d.comb += [
            ingest.rd_slot.eq(sslot),
            req.valid.eq(nak_pending | data_avail | ack_pending),
            req.payload.kind.eq(Mux(send_nak, int(MetaOp.NAK), Mux(send_data, int(MetaOp.DATA), int(MetaOp.ACK)))),
            req.payload.seq.eq(Mux(send_data, send_ptr, 0)),
            req.payload.ack.eq(expected),
            req.payload.length.eq(Mux(send_data, ingest.rd_length, 0)),
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

        # retransmission timer (RetransmitTimer): resend from the oldest unacknowledged
        m.d.comb += [timer.idle.eq(base == next_seq), timer.progress.eq(progress)]
        with m.If(timer.fire):
            m.d.comb += sp2.eq(base)
        count("timeouts", timer.fire)
        m.d.sync += [send_ptr.eq(sp2), base.eq(base2), sent_hw.eq(hw1)]

        # sequence check of data frames
        d = (v.seq - expected)[:16]
        m.d.comb += ring.push_length.eq(v.length)
        with m.If(good & (v.kind == int(MetaOp.DATA))):
            with m.If(d == 0):
                with m.If(v.stored):
                    m.d.comb += ring.push.eq(1)
                    m.d.sync += [expected.eq(expected + 1), ack_pending.eq(1), nak_sent.eq(0)]
                with m.Else():
                    count("drop_overflow")
            with m.Elif(d < SEQ_MOD // 2):
                count("drop_seq")
                with m.If(~nak_sent):
                    m.d.sync += [nak_pending.eq(1), nak_sent.eq(1)]
            with m.Else():
                count("drop_dup")
                m.d.sync += ack_pending.eq(1)

        # ---------------- delivery: receive ring -> m_axis (RxRing) ----------------
        count("delivered", ring.delivered)
        return m
