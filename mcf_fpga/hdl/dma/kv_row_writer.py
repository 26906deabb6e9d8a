"""KV row writer: the K/V streamer's write path, one ``kv_wr`` row at a time to a write DMA."""
from amaranth import Module, Signal, Cat
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.dma import DmaStatus
from mcf_fpga.hdl.bus import PacketSignature
from .common import descriptor_layout, status_layout
from .kvregion_addr import row_addr
from .kvstream_layouts import kv_wr_layout

__all__ = ["KVRowWriter"]


class KVRowWriter(wiring.Component):
    """Packs ``kv_wr`` rows into their region records and writes each through a DMA writer.

    * ``row`` ``{sel, slot, row, data, e}`` is taken when no row is held and ``halt`` is low.
      A row inside the region (slot < n_slots, row < slot_rows) is packed into its record
      (kv_bits 8: the d lanes then e; kv_bits 4: the low nibble of each lane then e) and held.
      A row outside it is consumed without traffic: ``refused`` is high in that cycle with
      ``refused_addr`` the address it would have written.
    * A held row goes out as one descriptor ``{row_addr(slot, sel, row), row_bytes}`` on ``desc``,
      then its ``row_beats`` bus beats, low bits first, on ``data`` (all bytes kept, ``last`` on
      the final one); the next row is taken the cycle after the last beat. ``desc`` / ``data``
      not ready hold the row (and ``row`` stays not ready).
    * ``status`` (the writer's) is always ready. ``idle``: no row held and every descriptor sent
      has had its status (the rows taken so far have landed).
    """

    def __init__(self, region, addr_width: int, len_width: int):
        self.region, self.addr_width = region, addr_width
        self.dw = region.bus_bytes * 8
        super().__init__({
            "row": In(stream.Signature(kv_wr_layout(region.d))),
            "halt": In(1),
            "refused": Out(1),
            "refused_addr": Out(addr_width),
            "desc": Out(stream.Signature(descriptor_layout(addr_width, len_width))),
            "data": Out(PacketSignature(self.dw)),
            "status": In(stream.Signature(status_layout(addr_width))),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        reg, dw, d = self.region, self.dw, self.region.d
        rb = reg.row_beats
        w_in = self.row.payload
        h_valid = Signal()
        h_addr = Signal(self.addr_width)
        h_rec = Signal(rb * dw)
        h_desc = Signal()                 # descriptor taken by the writer
        h_beat = Signal(range(rb + 1))
        wr_pend = Signal(16)              # rows whose descriptor went out and whose status is due
        if reg.kv_bits == 8:
            rec = Cat(w_in.data, w_in.e)
        else:
            rec = Cat(*[w_in.data[8 * i:8 * i + 4] for i in range(d)], w_in.e)
        w_ok = (w_in.slot < reg.n_slots) & (w_in.row < reg.slot_rows)
        w_addr = Signal(self.addr_width + 24)
        m.d.comb += w_addr.eq(row_addr(reg, w_in.slot, w_in.sel, w_in.row))
        m.d.comb += self.row.ready.eq(~h_valid & ~self.halt)
        w_take = self.row.valid & self.row.ready
        m.d.comb += [self.refused.eq(w_take & ~w_ok), self.refused_addr.eq(w_addr)]
        with m.If(w_take & w_ok):
            m.d.sync += [h_valid.eq(1), h_addr.eq(w_addr), h_rec.eq(rec), h_desc.eq(0), h_beat.eq(0)]
        m.d.comb += [self.desc.valid.eq(h_valid & ~h_desc), self.desc.payload.addr.eq(h_addr),
                     self.desc.payload.length.eq(reg.row_bytes)]
        d_fire = self.desc.valid & self.desc.ready
        with m.If(d_fire):
            m.d.sync += h_desc.eq(1)
        m.d.comb += [self.data.valid.eq(h_valid & h_desc), self.data.payload.data.eq(h_rec[:dw]),
                     self.data.payload.keep.eq(-1), self.data.payload.last.eq(h_beat == rb - 1)]
        with m.If(self.data.valid & self.data.ready):
            m.d.sync += [h_rec.eq(h_rec >> dw), h_beat.eq(h_beat + 1)]
            with m.If(h_beat == rb - 1):
                m.d.sync += h_valid.eq(0)
        m.d.comb += self.status.ready.eq(1)
        # wr_pend == 0 as a register of its own, set from the count's next value (exact): ``idle``
        # then gates the streamer's load intake without a 16-bit compare (timing)
        pend_next = Signal(16)
        no_pend = Signal(init=1)
        m.d.comb += pend_next.eq(wr_pend + d_fire - self.status.valid)
        m.d.sync += [wr_pend.eq(pend_next), no_pend.eq(pend_next == 0)]
        m.d.comb += self.idle.eq(~h_valid & no_pend)
        return m
