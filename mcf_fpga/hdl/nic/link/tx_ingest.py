"""TxIngest: node-side packets into the link's retransmit buffer, one slot per packet.

Contract
--------
* ``s_axis`` (packets, ``keep`` contiguous on the last beat): ``s_axis.ready`` is
  ``allow`` (the parent's window/slot check). Each beat's data, masked by ``keep``, is
  written through ``wr_addr``/``wr_data``/``wr_en`` (a memory write port) at
  ``slot * tx_slot_beats + beat``; beats past the slot are not written.
* On the last beat a packet of 1..``max_packet`` bytes that fit its slot raises ``done``
  (combinationally, that cycle) and its byte count is kept per slot; any other
  length raises ``bad_len`` instead and the packet is dropped (nothing is numbered).
* ``rd_length`` is the byte count stored for ``rd_slot`` (registered, written the cycle
  after ``done``).
"""
from amaranth import Module, Signal, Cat, Array
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import PacketSignature
from .params import LinkParams

__all__ = ["TxIngest"]


class TxIngest(wiring.Component):
    """See module docstring. ``params``: the link's ``LinkParams``."""

    def __init__(self, params: LinkParams):
        self.params = params
        self.slot_bits = max(1, (params.window - 1).bit_length())
        self.addr_width = max(1, (params.window * params.tx_slot_beats - 1).bit_length())
        super().__init__({
            "s_axis": In(PacketSignature(params.data_width)),
            "allow": In(1),
            "slot": In(self.slot_bits),
            "wr_addr": Out(self.addr_width),
            "wr_data": Out(params.data_width),
            "wr_en": Out(1),
            "done": Out(1),
            "bad_len": Out(1),
            "rd_slot": In(self.slot_bits),
            "rd_length": Out(16),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.params
        B = p.beat_bytes
        log2b = B.bit_length() - 1
        s = self.s_axis
        lengths = Array(Signal(16, name=f"tx_len{k}") for k in range(p.window))
        in_beat = Signal(range(p.tx_slot_beats + 1))
        slot = self.slot if p.window > 1 else 0
        rd_slot = self.rd_slot if p.window > 1 else 0
        keep_mask = Cat(*[s.payload.keep[k].replicate(8) for k in range(B)])
        m.d.comb += [s.ready.eq(self.allow), self.rd_length.eq(lengths[rd_slot]),
                     self.wr_addr.eq(slot * p.tx_slot_beats + in_beat),
                     self.wr_data.eq(s.payload.data & keep_mask)]
        with m.If(s.valid & s.ready):
            m.d.comb += self.wr_en.eq(in_beat < p.tx_slot_beats)
            with m.If(s.payload.last):
                nbytes = Signal(range(p.tx_slot_beats * B + B + 1))
                m.d.comb += nbytes.eq((in_beat << log2b) + sum(s.payload.keep[k] for k in range(B)))
                m.d.sync += in_beat.eq(0)
                with m.If((nbytes == 0) | (nbytes > p.max_packet) | (in_beat >= p.tx_slot_beats)):
                    m.d.comb += self.bad_len.eq(1)
                with m.Else():
                    m.d.sync += lengths[slot].eq(nbytes)
                    m.d.comb += self.done.eq(1)
            with m.Elif(in_beat < p.tx_slot_beats):
                m.d.sync += in_beat.eq(in_beat + 1)
        return m
