"""RxRing: the link's ring of received-packet slots and its reader towards ``m_axis``.

Contract
--------
* The parent stores an in-order frame's packet in the receive buffer at ``wr_base`` (the
  next free slot times ``rx_slot_beats``) and then raises ``push`` for one cycle with its
  byte count on ``push_length``; the slot becomes readable the next cycle. ``full`` is
  high while all ``rx_slots`` slots hold undelivered packets (``push`` must stay low).
* ``m_axis`` delivers the oldest slot's packet: ``ceil(length / beat_bytes)`` beats read
  through ``rd_addr``/``rd_data`` (a synchronous read port: ``rd_addr`` already names
  the beat of the next cycle), ``keep`` partial on the last beat only. Any back-pressure
  is tolerated; ``delivered`` is high on the cycle a packet's last beat is taken.
"""
from amaranth import Module, Signal, Const, Mux, Array
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import PacketSignature
from .params import LinkParams

__all__ = ["RxRing"]


class RxRing(wiring.Component):
    """See module docstring. ``params``: the link's ``LinkParams``."""

    def __init__(self, params: LinkParams):
        self.params = params
        self.addr_width = max(1, (params.rx_slots * params.rx_slot_beats - 1).bit_length())
        super().__init__({
            "push": In(1),
            "push_length": In(16),
            "full": Out(1),
            "wr_base": Out(self.addr_width),
            "rd_addr": Out(self.addr_width),
            "rd_data": In(params.data_width),
            "m_axis": Out(PacketSignature(params.data_width)),
            "delivered": Out(1),
        })

    def _slot(self, ptr):
        p = self.params
        return ptr[:max(1, (p.rx_slots - 1).bit_length())] if p.rx_slots > 1 else Const(0, 1)

    def elaborate(self, platform):
        m = Module()
        p = self.params
        B = p.beat_bytes
        log2b = B.bit_length() - 1
        rslot_bits = max(1, (p.rx_slots - 1).bit_length())
        wr = Signal(rslot_bits + 1)
        rd = Signal(rslot_bits + 1)
        lengths = Array(Signal(16, name=f"rx_len{k}") for k in range(p.rx_slots))
        m.d.comb += [self.full.eq((wr - rd)[:rslot_bits + 1] == p.rx_slots),
                     self.wr_base.eq(self._slot(wr) * p.rx_slot_beats)]
        with m.If(self.push):
            m.d.sync += [lengths[self._slot(wr)].eq(self.push_length), wr.eq(wr + 1)]

        mo = self.m_axis
        out_beat = Signal(range(p.rx_slot_beats + 1))
        rlen = lengths[self._slot(rd)]
        n_beats = (rlen + B - 1) >> log2b
        o_last = out_beat == n_beats - 1
        rem = rlen[:log2b] if log2b else Const(0, 1)
        m.d.comb += [mo.valid.eq(rd != wr), mo.payload.data.eq(self.rd_data),
                     mo.payload.last.eq(o_last)]
        if log2b:
            m.d.comb += mo.payload.keep.eq(Mux(o_last & (rem != 0),
                                               (Const(1, B + 1) << rem) - 1, (1 << B) - 1))
        else:
            m.d.comb += mo.payload.keep.eq(1)
        rd_next = Signal.like(rd)
        ob_next = Signal.like(out_beat)
        m.d.comb += [rd_next.eq(rd), ob_next.eq(out_beat)]
        with m.If(mo.valid & mo.ready):
            with m.If(o_last):
                m.d.comb += [rd_next.eq(rd + 1), ob_next.eq(0), self.delivered.eq(1)]
            with m.Else():
                m.d.comb += ob_next.eq(out_beat + 1)
        m.d.sync += [rd.eq(rd_next), out_beat.eq(ob_next)]
        m.d.comb += self.rd_addr.eq(self._slot(rd_next) * p.rx_slot_beats + ob_next)
        return m
