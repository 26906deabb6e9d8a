"""KVInstallWriter: the KV installer's write FSM (look up, one DMA descriptor, record beats).

Contract
--------
* ``packets`` / ``records``: the receiver's queues (:mod:`hdl.kvinstall_receiver`). A packet
  that is not ``good`` has its ``words`` drained from ``records``. A good packet is taken
  only while ``commit_pending`` is low; its kv_id above the directory's width is refused as
  the pool would (``drop_full`` if ``first``, else ``drop_state``). Otherwise one
  ``dir_cmd`` (``BEGIN_INSTALL`` if ``first``, else ``LOOKUP``) and its ``dir_resp``: an
  entry that is ``INSTALLING`` (status OK, or EXISTS) is written, a ``first`` packet answered
  FULL / OUT_OF_RANGE counts ``drop_full``, any other answer ``drop_state``; refused packets
  are drained.
* A written packet: one ``desc`` ``{base + slot * slot_bytes + row0 * row_bytes,
  n * row_bytes}`` (offered only while ``pend_rdy``; ``pend_en`` pushes ``pend_data`` =
  ``{kv_id, last, owner}`` with it, and ``unit_last`` is high then if the packet ends its
  unit), then its record words on ``data``, ``bus_bytes / 8`` words per beat, ``last`` on
  the final beat.
* Back-pressure on any stream stalls the FSM; nothing is lost. ``busy``: not idle.
"""
from amaranth import Cat, Const, Module, Mux, Shape, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.kvpool import Opcode, State, Status
from mcf_fpga.spec.kvregion import KVRegion
from mcf_fpga.hdl.bus import PacketSignature
from mcf_fpga.hdl.dma.common import descriptor_layout
from mcf_fpga.hdl.kvpool import cmd_layout, resp_layout

__all__ = ["KVInstallWriter", "pending_layout"]


def pending_layout(kv_bits: int) -> data.StructLayout:
    """A written packet awaiting its DMA status: its unit's kv_id, ``last`` and ``owner``."""
    return data.StructLayout({"kv_id": kv_bits, "last": 1, "owner": 1})


class KVInstallWriter(wiring.Component):
    """See module docstring. ``info_layout``: the receiver's packet layout; ``kv_id_width``,
    ``max_readers``: the pool's; ``addr_width``, ``len_width``: the DMA's descriptor."""

    def __init__(self, region: KVRegion, info_layout: data.StructLayout, *, kv_id_width: int,
                 max_readers: int, addr_width: int, len_width: int):
        self.region, self.info_layout = region, info_layout
        self.kv_id_width, self.addr_width = kv_id_width, addr_width
        self.kv_bits = Shape.cast(info_layout["kv_id"].shape).width
        super().__init__({
            "packets": In(stream.Signature(info_layout)),
            "records": In(stream.Signature(64)),
            "commit_pending": In(1),
            "dir_cmd": Out(stream.Signature(cmd_layout(kv_id_width))),
            "dir_resp": In(stream.Signature(resp_layout(region.n_slots, max_readers))),
            "desc": Out(stream.Signature(descriptor_layout(addr_width, len_width))),
            "data": Out(PacketSignature(region.bus_bytes * 8)),
            "pend_data": Out(pending_layout(self.kv_bits)),
            "pend_en": Out(1),
            "pend_rdy": In(1),
            "unit_last": Out(1),
            "drop_state": Out(1),
            "drop_full": Out(1),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        reg, kvw = self.region, self.kv_bits
        k = reg.bus_bytes // 8                    # words per bus beat
        ihead, rec, dresp = self.packets.payload, self.records, self.dir_resp.payload
        pk = Signal(self.info_layout)               # the packet being written (from the queue)
        cnt = Signal.like(ihead.words)
        addr = Signal(self.addr_width)
        kv_high = (pk.kv_id >> self.kv_id_width) != 0 if kvw > self.kv_id_width else Const(0)
        acc = Signal(64 * max(1, k - 1))
        j = Signal(range(k + 1))
        m.d.comb += [self.dir_cmd.payload.opcode.eq(Mux(pk.first, Opcode.BEGIN_INSTALL, Opcode.LOOKUP)),
                     self.dir_cmd.payload.kv_id.eq(pk.kv_id)]
        with m.FSM(name="wr") as fsm:
            with m.State("IDLE"):
                with m.If(self.packets.valid & (~ihead.good | ~self.commit_pending)):
                    m.d.comb += self.packets.ready.eq(1)
                    m.d.sync += [pk.eq(ihead), cnt.eq(ihead.words)]
                    with m.If(ihead.good):
                        m.next = "CHECK"
                    with m.Else():
                        m.next = "DRAIN"
            with m.State("CHECK"):
                with m.If(kv_high):              # as the pool would answer: OUT_OF_RANGE / UNKNOWN
                    m.d.comb += [self.drop_full.eq(pk.first), self.drop_state.eq(~pk.first)]
                    m.next = "DRAIN"
                with m.Else():
                    m.next = "LOOKUP"
            with m.State("LOOKUP"):
                m.d.comb += self.dir_cmd.valid.eq(1)
                with m.If(self.dir_cmd.ready):
                    m.next = "LWAIT"
            with m.State("LWAIT"):
                m.d.comb += self.dir_resp.ready.eq(1)
                with m.If(self.dir_resp.valid):
                    # OK: the entry (LOOKUP) or a new one (BEGIN_INSTALL); EXISTS: BEGIN_INSTALL's entry
                    with m.If(((dresp.status == Status.OK) | (dresp.status == Status.EXISTS))
                              & (dresp.state == State.INSTALLING)):
                        m.d.sync += addr.eq(reg.base + dresp.slot * reg.slot_bytes + pk.row0 * reg.row_bytes)
                        m.next = "DESC"
                    with m.Elif(pk.first & ((dresp.status == Status.FULL) | (dresp.status == Status.OUT_OF_RANGE))):
                        m.d.comb += self.drop_full.eq(1)
                        m.next = "DRAIN"
                    with m.Else():
                        m.d.comb += self.drop_state.eq(1)
                        m.next = "DRAIN"
            with m.State("DRAIN"):
                m.d.comb += rec.ready.eq(1)
                with m.If(rec.valid):
                    m.d.sync += cnt.eq(cnt - 1)
                    with m.If(cnt == 1):
                        m.next = "IDLE"
            with m.State("DESC"):
                desc_fire = self.desc.valid & self.desc.ready
                m.d.comb += [self.desc.valid.eq(self.pend_rdy), self.desc.payload.addr.eq(addr),
                             self.desc.payload.length.eq(pk.n * reg.row_bytes),
                             self.pend_data.eq(Cat(pk.kv_id, pk.last, pk.owner)), self.pend_en.eq(desc_fire)]
                with m.If(desc_fire):
                    m.d.sync += j.eq(0)
                    m.d.comb += self.unit_last.eq(pk.last)
                    m.next = "DATA"
            with m.State("DATA"):
                wlast = j == k - 1
                m.d.comb += [self.data.payload.data.eq(Cat(acc, rec.payload) if k > 1 else rec.payload),
                             self.data.payload.keep.eq(-1), self.data.payload.last.eq(cnt == 1)]
                with m.If(wlast):
                    m.d.comb += [self.data.valid.eq(rec.valid), rec.ready.eq(self.data.ready)]
                with m.Else():
                    m.d.comb += rec.ready.eq(1)
                with m.If(rec.valid & rec.ready):
                    m.d.sync += cnt.eq(cnt - 1)
                    if k > 1:
                        m.d.sync += [acc.eq(Cat(acc[64:], rec.payload)), j.eq(Mux(wlast, 0, j + 1))]
                    with m.If(cnt == 1):
                        m.next = "IDLE"
        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE"))
        return m
