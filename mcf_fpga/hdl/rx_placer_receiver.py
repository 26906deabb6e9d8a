"""RxReceiver: the RX placer's input side: every beat of ``s_axis`` into a buffer, one verdict
per packet into an info queue.

Contract
--------
* ``s_axis``: the placer's input (module docstring of :mod:`hdl.rx_placer`). Once a header's last
  beat is in, ``start`` pulses with its ``key`` (``(rx_kind, src, layer, block)``) for the key
  scan (:class:`~hdl.rx_placer_scan.RxKeyScan`: ``scanning``, ``resolve``, ``hit``, ``found``).
  Meanwhile the packet's beats keep arriving into the buffer; the next packet waits for the
  verdict, and no beat is taken in the verdict cycle.
* ``beats`` (``beat_layout``): every beat of a passed packet; of a matched one its header and up
  to ``max_words`` payload words (the rest is not stored).
* ``info`` (``info_layout``): per packet, in arrival order, its verdict: ``PASS`` (no match or a
  runt shorter than a header), ``DROP`` (matched but malformed: size != header + ``length``,
  ``length`` 0 or above ``max_payload``, a partial ``keep`` before the last beat or a wrong one
  on it; ``malformed`` pulses) or ``WRITE``, with the entry, ``length`` and stored beat count.
  Pushed when the verdict or (for a matched packet) its last beat comes, whichever is later.
* ``room``: the info queue can take a verdict (the scan's ``accept``).
* Back-pressure: a full buffer or info queue holds ``s_axis``. ``busy``: a packet is arriving
  or a verdict is queued.
"""
from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.meta import MetaOp, MetaParams, ReduceOp, Stage
from mcf_fpga.spec.rx_placer import RxKind
from mcf_fpga.hdl.bus import PacketSignature
from mcf_fpga.hdl.meta import meta_layout

__all__ = ["RxReceiver", "PASS", "DROP", "WRITE", "beat_layout", "info_layout", "key_width"]

PASS, DROP, WRITE = 0, 1, 2                  #: a packet's verdict in the info queue


def beat_layout():
    """A buffered ``s_axis`` beat."""
    return data.StructLayout({"data": 64, "keep": 8, "last": 1})


def info_layout(meta: MetaParams, entries: int, depth: int):
    """A packet's verdict, entry, length and stored beats (``depth``: the buffer's)."""
    return data.StructLayout({"verdict": 2, "e": range(max(entries, 2)), "length": meta.length_bits,
                              "count": range(depth + 1)})


def key_width(meta: MetaParams):
    """Bits of a key: rx_kind (3), src, layer, block."""
    return 3 + meta.node_bits + meta.layer_bits + meta.block_bits


class RxReceiver(wiring.Component):
    """See module docstring. ``entries``; ``max_payload``: the largest length stored (bytes, a
    multiple of 8); ``meta``."""

    def __init__(self, *, entries: int, max_payload: int, meta: MetaParams):
        self.entries, self.max_payload, self.meta = entries, max_payload, meta
        self.hw, self.max_words = meta.header_bytes // 8, max_payload // 8
        self.depth = 2 * (self.hw + self.max_words)
        self.info_lay = info_layout(meta, entries, self.depth)
        super().__init__({
            "s_axis": In(PacketSignature(64)),
            "beats": Out(stream.Signature(beat_layout())),
            "info": Out(stream.Signature(self.info_lay)),
            "start": Out(1),
            "key": Out(key_width(meta)),
            "scanning": In(1),
            "resolve": In(1),
            "hit": In(1),
            "found": In(range(max(entries, 2))),
            "room": Out(1),
            "malformed": Out(1),
            "busy": Out(1),
        })

    def _key(self, m, hdr):
        kind = Signal(3)
        with m.If(hdr.stage == Stage.PREFILL):
            m.d.comb += kind.eq(RxKind.KV)
        with m.Elif(hdr.reduce_op == ReduceOp.MAX):
            m.d.comb += kind.eq(RxKind.MAX)
        with m.Elif((hdr.reduce_op == ReduceOp.SUM) | (hdr.reduce_op == ReduceOp.SOFTMAX_MERGE)):
            m.d.comb += kind.eq(RxKind.SUM)
        with m.Elif(hdr.op == MetaOp.QUERY):
            m.d.comb += kind.eq(RxKind.Q)
        with m.Elif(hdr.op == MetaOp.DATA):
            m.d.comb += kind.eq(RxKind.DATA)
        with m.Else():
            m.d.comb += kind.eq(RxKind.OTHER)
        return Cat(kind, hdr.src, hdr.kv_id.layer, hdr.kv_id.block)

    def elaborate(self, platform):
        m = Module()
        mp, hw, max_words, fifo_depth, info_lay = self.meta, self.hw, self.max_words, self.depth, self.info_lay
        beat_lay = beat_layout()
        m.submodules.beats = beats = fifo.SyncFIFOBuffered(width=beat_lay.size, depth=fifo_depth)
        m.submodules.info = info = fifo.SyncFIFOBuffered(width=info_lay.size, depth=4)
        m.d.comb += [self.beats.payload.eq(beats.r_data), self.beats.valid.eq(beats.r_rdy),
                     beats.r_en.eq(self.beats.ready), self.info.payload.eq(info.r_data),
                     self.info.valid.eq(info.r_rdy), info.r_en.eq(self.info.ready), self.room.eq(info.w_rdy)]
        s = self.s_axis
        beat = s.payload
        fire = s.valid & s.ready
        top = hw + max_words + 1
        widx = Signal(range(top + 1))             # beat index in the packet (saturating)
        in_pkt = Signal()
        matched = Signal()                        # the verdict was a match, the packet still arriving
        irregular = Signal()                      # a beat before the last with keep != 0xFF
        meta_bits = Signal(64 * max(1, hw - 1))
        hdr_bits = Cat(meta_bits[:64 * (hw - 1)], beat.data)
        hdr = data.View(meta_layout(mp), hdr_bits[:meta_layout(mp).size])
        slen = Signal(mp.length_bits)             # the length of the packet being matched
        resolve, scanning, hit, found = self.resolve, self.scanning, self.hit, self.found

        cur = Signal(info_lay)                    # the matched packet's entry and length
        exp_words = Signal(range(max_words + 1))  # payload words to store (0 if length is bad)
        last_keep = Signal(8)
        stored = Signal(range(fifo_depth + 1))    # the packet's beats in the buffer
        ended = Signal()                          # its last beat came before the verdict
        end_widx = Signal(range(top + 1))
        end_keep = Signal(8)
        len_ok = (slen != 0) & (slen <= self.max_payload)
        exp_c = Signal(range(max_words + 1))
        lk_c = Signal(8)
        m.d.comb += [exp_c.eq(Mux(len_ok, (slen + 7) >> 3, 0)),
                     lk_c.eq((Const(1, 9) << ((slen - 1)[:3] + 1)) - 1)]
        at_hend = widx == hw - 1
        full_hdr = Signal()                       # this beat completes a header: scan it
        m.d.comb += full_hdr.eq(at_hend & ~(beat.last & (beat.keep != 0xFF)))
        m.d.comb += [self.start.eq(fire & full_hdr), self.key.eq(self._key(m, hdr))]
        runt = Signal()                           # a frame shorter than a header: pass it
        m.d.comb += runt.eq((widx < hw) & beat.last & ~full_hdr)
        push_beat = Signal()
        m.d.comb += push_beat.eq(~matched | (widx < hw + exp_words))
        push_end = Signal()                       # the matched packet's last beat
        m.d.comb += push_end.eq(matched & beat.last)
        good = Signal()                           # (a packet of the header alone is malformed)
        m.d.comb += good.eq(matched & (widx == hw + exp_words - 1) & (exp_words != 0) & ~irregular
                            & (beat.keep == last_keep))
        good_end = Signal()                       # the same for a packet that ended before its verdict
        m.d.comb += good_end.eq((end_widx == hw + exp_c - 1) & (exp_c != 0) & ~irregular & (end_keep == lk_c))
        ipush = data.View(info_lay, info.w_data)
        hold = resolve | (~in_pkt & scanning)     # a new packet waits for the previous one's verdict
        m.d.comb += [s.ready.eq(~hold & (~push_beat | beats.w_rdy) & (~(runt | push_end) | info.w_rdy)),
                     beats.w_data.eq(beat), beats.w_en.eq(fire & push_beat)]
        with m.If(fire):
            m.d.sync += in_pkt.eq(~beat.last)
            for i in range(hw - 1):
                with m.If(widx == i):
                    m.d.sync += meta_bits[64 * i:64 * (i + 1)].eq(beat.data)
            with m.If(push_beat):
                m.d.sync += stored.eq(stored + 1)
            with m.If(~beat.last & (beat.keep != 0xFF)):
                m.d.sync += irregular.eq(1)
            with m.If(full_hdr):
                m.d.sync += slen.eq(hdr.length)
            with m.If(runt):
                m.d.comb += [info.w_en.eq(1), ipush.verdict.eq(PASS)]
            with m.If(push_end):
                m.d.comb += [info.w_en.eq(1), ipush.e.eq(cur.e), ipush.length.eq(cur.length),
                             ipush.count.eq(stored + push_beat), ipush.verdict.eq(Mux(good, WRITE, DROP)),
                             self.malformed.eq(~good)]
            with m.If(beat.last):
                m.d.sync += widx.eq(0)
                with m.If(full_hdr | scanning):   # the verdict will need how the packet ended
                    m.d.sync += [ended.eq(1), end_widx.eq(widx), end_keep.eq(beat.keep)]
                with m.Else():
                    m.d.sync += [matched.eq(0), irregular.eq(0), stored.eq(0)]
            with m.Elif(widx != top):
                m.d.sync += widx.eq(widx + 1)
        with m.If(resolve):                       # (no beat is taken this cycle)
            with m.If(hit & ended):
                m.d.comb += [info.w_en.eq(1), ipush.e.eq(found), ipush.length.eq(slen), ipush.count.eq(stored),
                             ipush.verdict.eq(Mux(good_end, WRITE, DROP)), self.malformed.eq(~good_end)]
            with m.Elif(hit):
                m.d.sync += [matched.eq(1), cur.e.eq(found), cur.length.eq(slen), exp_words.eq(exp_c),
                             last_keep.eq(lk_c)]
            with m.Else():
                m.d.comb += [info.w_en.eq(1), ipush.verdict.eq(PASS)]
            with m.If(ended):
                m.d.sync += [ended.eq(0), irregular.eq(0), stored.eq(0)]
        m.d.comb += self.busy.eq(in_pkt | (info.level != 0))
        return m
