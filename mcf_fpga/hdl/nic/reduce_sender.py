"""ReduceSender: sends a completed reduction group's result packet on ``m``.

Contract
--------
* ``start`` (while idle, i.e. ``busy`` low) hands over a completed group: its context
  ``start_ctx``, key header ``start_meta``, srcs ``start_present`` and pool (``start_merge``).
  Timing from the ``start`` cycle: one cycle (the last accumulator write lands), then
  (merge pool only) ``fanin + 1`` cycles computing the scales, then ``header_beats`` beats of
  header (the key header with ``src = node_id``, ``route_id = 0``; ``user.mask = 1``), then
  the payload: a reduce-pool group's accumulator words, read through ``acc_rd_*`` (one-cycle
  read port), one per cycle; a merge-pool group's running max ``M`` (sign-extended), then every
  further word folded over the srcs' stored words in ascending src order (read through
  ``slot_rd_*``, a one-cycle read port addressed ``{word, src, context}``; ``fanin + 2``
  cycles per word), by :class:`SoftmaxFold`. ``length / 8`` words in all; ``last`` on the
  final one.
* ``done`` is high in the cycle the last beat is taken (``free_ctx`` then names the context
  to free); ``busy`` from the cycle after ``start`` to the cycle after ``done``.
  Back-pressure on ``m`` stalls the packet; nothing is lost.
"""
from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.nic import NicConfig
from mcf_fpga.hdl.bus import PacketSignature
from mcf_fpga.hdl.meta import meta_layout
from .ingress import route_user_layout
from .reduce_contexts import lowest_set
from .softmax_fold import SoftmaxFold

__all__ = ["ReduceSender"]


class ReduceSender(wiring.Component):
    """See module docstring. ``cfg``: the NIC's ``NicConfig``; ``acc_addr_width`` /
    ``slot_addr_width``: the address widths of the two read ports."""

    def __init__(self, cfg: NicConfig, acc_addr_width: int, slot_addr_width: int):
        self.cfg = cfg
        K = cfg.reduce_contexts + cfg.merge_contexts
        super().__init__({
            "start": In(1), "start_ctx": In(range(max(K, 2))), "start_meta": In(meta_layout(cfg.meta)),
            "start_present": In(cfg.max_nodes), "start_merge": In(1),
            "node_id": In(cfg.meta.node_bits),
            "acc_rd_en": Out(1), "acc_rd_addr": Out(acc_addr_width), "acc_rd_data": In(cfg.data_width),
            "slot_rd_en": Out(1), "slot_rd_addr": Out(slot_addr_width), "slot_rd_data": In(cfg.data_width),
            "m": Out(PacketSignature(cfg.data_width, route_user_layout(cfg).size)),
            "done": Out(1), "free_ctx": Out(range(max(K, 2))), "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, mp = self.cfg, self.cfg.meta
        H, dw, KR, NS = cfg.header_beats, cfg.data_width, cfg.reduce_contexts, cfg.max_nodes
        K = KR + cfg.merge_contexts
        wbits, sbits = (cfg.max_payload_beats - 1).bit_length(), (NS - 1).bit_length()
        rbits, mbits = (KR - 1).bit_length(), (cfg.merge_contexts - 1).bit_length()
        mlay, o = meta_layout(mp), self.m
        m.submodules.fold = fold = SoftmaxFold(NS, dw)

        # the group being sent
        fctx = Signal(range(max(K, 2)))
        f_meta = Signal(mlay)
        f_present = Signal(NS)
        f_merge = Signal()
        m.d.comb += self.free_ctx.eq(fctx)
        n_words = Signal(wbits + 1)
        m.d.comb += n_words.eq(f_meta.length >> 3)
        word = Signal(wbits + 1)
        out_word = Signal(dw)
        hidx = Signal(range(H + 1))
        # merge pool reads: srcs in ascending order, data one cycle later (rd_*)
        wm = Signal(NS)            # srcs still to read for the current word
        cur = lowest_set(m, wm, NS, "cur_src")
        wm_next = Signal(NS)
        m.d.comb += wm_next.eq(wm & ~(Const(1, NS) << cur)[:NS])
        ipos = Signal(range(NS + 1))  # fold step of the next read
        rd_v, rd_last = Signal(), Signal()
        rd_pos = Signal(range(NS + 1))
        m.d.sync += rd_v.eq(0)
        m.d.comb += self.slot_rd_addr.eq(Cat(word[:wbits], cur[:sbits], (fctx - KR)[:mbits]))
        issue = Signal()           # read word ``word`` of src ``cur`` now
        with m.If(issue):
            m.d.comb += self.slot_rd_en.eq(1)
            m.d.sync += [wm.eq(wm_next), ipos.eq(ipos + 1), rd_v.eq(1), rd_pos.eq(ipos),
                         rd_last.eq(wm_next == 0)]
        x = self.slot_rd_data
        acc = Signal(dw)
        run_m = Signal(32)
        mx = x[:32].as_signed()
        run_ms = run_m.as_signed()
        m.d.comb += [fold.x.eq(x), fold.acc.eq(acc), fold.run_m.eq(run_m), fold.pos.eq(rd_pos)]
        bigger, folded = fold.bigger, fold.folded

        res_meta = Signal(mlay)
        m.d.comb += [res_meta.eq(f_meta), res_meta.src.eq(self.node_id), res_meta.route_id.eq(0),
                     res_meta["_rsvd0"].eq(0)]
        header = Signal(H * dw)
        m.d.comb += header.eq(res_meta.as_value())
        res_user = Signal(route_user_layout(cfg))
        m.d.comb += [res_user.mask.eq(1), o.payload.user.eq(res_user)]

        with m.FSM() as fsm:
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [fctx.eq(self.start_ctx), f_meta.eq(self.start_meta),
                                 f_present.eq(self.start_present), f_merge.eq(self.start_merge)]
                    m.next = "CLOSE"
            with m.State("CLOSE"):
                # the last accumulator write lands in this cycle; the softmax scale pass starts
                m.d.sync += [word.eq(0), wm.eq(f_present), ipos.eq(0)]
                with m.If(f_merge):
                    m.next = "SCALES"
                with m.Else():
                    m.next = "HEADER"
            with m.State("SCALES"):
                # softmax: read word 0 (m) of every src in ascending order; running max and scales
                m.d.comb += issue.eq(wm != 0)
                with m.If(rd_v):
                    m.d.comb += fold.store.eq(rd_pos != 0)
                    m.d.sync += run_m.eq(Mux((rd_pos == 0) | bigger, mx, run_ms))
                    with m.If(rd_last):
                        m.next = "HEADER"
            with m.State("HEADER"):
                m.d.comb += [o.valid.eq(1), o.payload.data.eq(header.word_select(hidx, dw)),
                             o.payload.keep.eq(0xFF)]
                with m.If(o.ready):
                    with m.If(hidx == H - 1):
                        m.d.sync += hidx.eq(0)
                        with m.If(f_merge):
                            m.d.sync += [out_word.eq(run_ms.as_signed()), word.eq(1)]   # sign-extended M
                            m.next = "EMIT"
                        with m.Else():
                            m.d.comb += [self.acc_rd_en.eq(1), self.acc_rd_addr.eq(Cat(word[:wbits], fctx[:rbits]))]
                            m.next = "ACC_EMIT"
                    with m.Else():
                        m.d.sync += hidx.eq(hidx + 1)
            with m.State("ACC_EMIT"):
                # SUM / MAX: the accumulator, one word per cycle (the read port holds its data)
                last = Signal()
                m.d.comb += [last.eq(word + 1 >= n_words),
                             o.valid.eq(1), o.payload.data.eq(self.acc_rd_data), o.payload.last.eq(last),
                             o.payload.keep.eq(0xFF)]
                with m.If(o.ready):
                    m.d.sync += word.eq(word + 1)
                    m.d.comb += [self.acc_rd_en.eq(1), self.acc_rd_addr.eq(Cat((word + 1)[:wbits], fctx[:rbits]))]
                    with m.If(last):
                        m.d.comb += self.done.eq(1)
                        m.next = "IDLE"
            with m.State("FOLD"):
                m.d.comb += issue.eq(wm != 0)
                with m.If(rd_v):
                    m.d.sync += acc.eq(folded)
                    with m.If(rd_last):
                        m.d.sync += [out_word.eq(folded), word.eq(word + 1)]
                        m.next = "EMIT"
            with m.State("EMIT"):
                last = Signal()
                m.d.comb += [last.eq(word >= n_words),
                             o.valid.eq(1), o.payload.data.eq(out_word), o.payload.last.eq(last),
                             o.payload.keep.eq(0xFF)]
                with m.If(o.ready):
                    m.d.sync += [wm.eq(f_present), ipos.eq(0)]
                    with m.If(last):
                        m.d.comb += self.done.eq(1)
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "FOLD"
        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE"))
        return m
