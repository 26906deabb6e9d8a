"""KVInstallReceiver: the KV installer's store-and-forward front end (parse, check, buffer).

Contract
--------
* ``s_axis`` (64-bit ``PacketSignature``, Meta header first, then the install header, then
  the records): every packet is consumed whole. The install header (word ``header_bytes/8``)
  is checked against the Meta header (op ``KV_REPLICA``, ``length`` at most ``max_payload``
  and equal to 8 + n * row_bytes, n >= 1, row0 + n within two slots, reserved bits zero);
  the packet then must end exactly after its n records with a full last beat.
* ``records``: the record words (64-bit) of every packet, good or not, up to n * row_bytes/8
  of them (nothing of a packet refused at its install header), in arrival order, from a
  buffer of two largest packets.
* ``packets``: one :func:`packet_info_layout` entry per packet that left words in
  ``records``, pushed on its last beat: ``good`` with the header's fields and ``words``
  = n * row_bytes/8, or not ``good`` with ``words`` = the words to drain. ``malformed`` is
  high for one cycle on the last beat of every packet that is not good.
* Back-pressure: ``s_axis`` stalls only while a record must wait for room in ``records``'
  buffer or a last beat for room in the four-entry ``packets`` queue.
* ``busy``: inside a packet, or ``packets`` holds entries.
"""
from amaranth import Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.kvinstall import HEADER_BYTES as INSTALL_HEADER_BYTES
from mcf_fpga.spec.kvregion import KVRegion
from mcf_fpga.spec.meta import MetaOp, MetaParams
from mcf_fpga.hdl.bus import PacketSignature
from mcf_fpga.hdl.kvinstall_header import install_header_layout
from mcf_fpga.hdl.meta import meta_layout

__all__ = ["KVInstallReceiver", "packet_info_layout"]


def packet_info_layout(meta: MetaParams, max_words: int) -> data.StructLayout:
    """One received packet: verdict, the install header's fields, its record words."""
    return data.StructLayout({"good": 1, "kv_id": meta.layer_bits + meta.block_bits, "row0": 16, "n": 16,
                              "last": 1, "first": 1, "owner": 1, "words": range(max_words + 1)})


class KVInstallReceiver(wiring.Component):
    """See module docstring. ``region``: the node's ``KVRegion``; ``meta``: the Meta widths;
    ``max_payload``: largest payload accepted; ``max_words``: record words of the largest."""

    def __init__(self, region: KVRegion, meta: MetaParams, max_payload: int, max_words: int):
        self.region, self.meta = region, meta
        self.max_payload, self.max_words = max_payload, max_words
        self.info_layout = packet_info_layout(meta, max_words)
        super().__init__({
            "s_axis": In(PacketSignature(64)),
            "records": Out(stream.Signature(64)),
            "packets": Out(stream.Signature(self.info_layout)),
            "malformed": Out(1),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        reg, mp, max_words, info_lay = self.region, self.meta, self.max_words, self.info_layout
        hw = mp.header_bytes // 8                 # Meta words; the install header is word hw
        rw = reg.row_bytes // 8                   # 64-bit words per record
        m.submodules.dbuf = dbuf = fifo.SyncFIFOBuffered(width=64, depth=2 * max_words)
        m.submodules.info = info = fifo.SyncFIFOBuffered(width=info_lay.size, depth=4)
        m.d.comb += [self.records.valid.eq(dbuf.r_rdy), self.records.payload.eq(dbuf.r_data),
                     dbuf.r_en.eq(self.records.ready),
                     self.packets.valid.eq(info.r_rdy), self.packets.payload.eq(info.r_data),
                     info.r_en.eq(self.packets.ready)]
        s = self.s_axis
        beat = s.payload
        fire = s.valid & s.ready
        widx = Signal(range(hw + max_words + 3))  # word index in the packet (saturating)
        in_pkt = Signal()                           # some beat of the packet was taken
        meta_bits = Signal(64 * hw)
        meta = data.View(meta_layout(mp), meta_bits[:meta_layout(mp).size])
        bad, long_ = Signal(), Signal()
        pushed = Signal(range(max_words + 1))
        cur = Signal(info_lay)                      # the packet's fields (from its install header)
        m.d.comb += self.busy.eq(in_pkt | (info.level != 0))

        # the install header's verdict, valid on word hw
        h = install_header_layout()(beat.data[:64])
        v_row0, v_n, v_last, v_rsvd = h.row0, h.n, h.last, h["_rsvd"]
        v_bad = Signal()
        m.d.comb += v_bad.eq((meta.op != MetaOp.KV_REPLICA) | (meta.length > self.max_payload) | (v_rsvd != 0)
                             | (v_n == 0) | (v_row0 + v_n > 2 * reg.slot_rows)
                             | (meta.length != INSTALL_HEADER_BYTES + v_n * reg.row_bytes))
        at_hdr = widx == hw
        is_rec = widx > hw
        bad_now = Mux(at_hdr, v_bad, bad)
        expect = Signal(range(max_words + 1))
        m.d.comb += expect.eq(cur.n * rw)
        do_push = Signal()
        m.d.comb += do_push.eq(is_rec & ~bad & (pushed < expect))
        extra = is_rec & ~bad & (pushed >= expect)
        pushed_after = Signal.like(pushed)
        m.d.comb += pushed_after.eq(pushed + do_push)
        good_end = Signal()
        m.d.comb += good_end.eq(is_rec & ~bad & (pushed_after == expect) & ~long_ & ~extra & (beat.keep == 0xFF))
        m.d.comb += s.ready.eq((~do_push | dbuf.w_rdy) & (~beat.last | info.w_rdy))
        m.d.comb += [dbuf.w_data.eq(beat.data), dbuf.w_en.eq(fire & do_push)]
        ipush = data.View(info_lay, info.w_data)
        with m.If(fire):
            m.d.sync += in_pkt.eq(~beat.last)
            for i in range(hw):
                with m.If(widx == i):
                    m.d.sync += meta_bits[64 * i:64 * (i + 1)].eq(beat.data)
            with m.If(at_hdr):
                m.d.sync += [bad.eq(v_bad), cur.kv_id.eq(meta.kv_id.as_value()), cur.row0.eq(v_row0),
                             cur.n.eq(v_n), cur.last.eq(v_last), cur.first.eq(h.first), cur.owner.eq(h.owner)]
            with m.If(do_push):
                m.d.sync += pushed.eq(pushed + 1)
            with m.If(extra):
                m.d.sync += long_.eq(1)
            with m.If(beat.last):
                m.d.sync += [widx.eq(0), pushed.eq(0), long_.eq(0), bad.eq(0)]
                with m.If(good_end):
                    m.d.comb += [info.w_en.eq(1), ipush.eq(cur), ipush.good.eq(1), ipush.words.eq(expect)]
                with m.Else():
                    m.d.comb += self.malformed.eq(1)
                    with m.If((pushed_after != 0) & ~bad_now):
                        m.d.comb += [info.w_en.eq(1), ipush.good.eq(0), ipush.words.eq(pushed_after)]
            with m.Elif(widx != hw + max_words + 2):
                m.d.sync += widx.eq(widx + 1)
        return m
