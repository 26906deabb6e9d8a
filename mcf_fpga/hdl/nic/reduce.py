"""Reduction engine: all-reduce (sum / max in 32- or 64-bit lanes) and online-softmax partial merge.

Input ``s``: validated packets with ``reduce_op != NONE`` delivered to this node
(``user.fanin`` = group size from the route entry). Contributions are grouped by
``(dst, kv_id)`` (the host gives every reduction in flight its own pair). The first
contribution of a group fixes its key (op, reduce_op, stage, collective, kv_id, length, fanin);
a later contribution with a different key, or from a src that already contributed, is
consumed, not stored, and pulses ``err`` (``ErrorCause.REDUCE``).

Two pools of contexts (``golden.nic`` module docstring, "Reduction contexts"):

* **reduce pool**, ``cfg.reduce_contexts`` SUM / MAX groups. SUM and MAX are associative and
  commutative, so a group keeps ONE payload: its accumulator (``max_payload_beats`` words per
  context, one-cycle-read memory). The first contribution is stored as it is; every later one
  is combined word by word as it arrives (read-modify-write, one word per cycle): per lane
  wrapping add / signed max, in **64-bit lanes when the group's op is PARTIAL_STATE** and in
  32-bit lanes otherwise (``golden.nic.lane_bits``).
* **merge pool**, ``cfg.merge_contexts`` SOFTMAX_MERGE groups. The merge is a left fold in
  ascending src order, so a group stores every contribution (per (context, src) slots,
  ``max_nodes * max_payload_beats`` words per context).

A contribution that would open a group in a full pool waits (``s.ready`` low on its last header
beat) until a context of that pool is free; nothing is dropped. A context is free again when its
result has been sent, or when its group times out.

**Timeout** (``timeout`` = the REDUCE_TIMEOUT register, T cycles; 0 = never): a group's timer
starts in the cycle c1 in which its first contribution's last beat is accepted (T is sampled
then). If the last beat of the contribution that completes the group is accepted in cycle
c1 + d, the group completes for d < T; otherwise, in cycle c1 + T, the group times out: its
context is freed (usable from cycle c1 + T + 1), its partial result discarded, and ``expired``
pulses the context's bit (``ErrorCause.TIMEOUT``). A contribution still being received into
the group then is consumed and discarded with it; one whose header comes later opens a new
group. So a contribution waiting for a context waits at most T cycles (every open group of a
full pool is timed while the engine waits), plus the time the result being sent takes.

When ``fanin`` contributions are in, the engine emits one result packet on ``m`` (header: the
group's key fields, ``src = node_id``, ``dst`` = group, ``route_id = 0``), equal to
``golden.nic.reduce_payloads`` over the contributions in ascending src order:

* ``SUM`` / ``MAX``: the accumulator, one word per cycle;
* ``SOFTMAX_MERGE`` (payload ``m, l, o[0..d-1]`` as int64 words): first the running max
  and the scale pair of every fold step ``i``: ``M_i = max(M_{i-1}, m_i)``,
  ``alpha_i = exp2_fixed(M_{i-1} - M_i)``, ``beta_i = exp2_fixed(m_i - M_i)`` (one of them is
  ``EXP2_LUT[0] = 2**15``, so one LUT read per step; the LUT is ``spec.numerics.EXP2_LUT``);
  then every word ``w`` (l, o...) is the left fold
  ``acc = rshift_round(acc * alpha_i, 15) + rshift_round(w_i * beta_i, 15)``.

Timing: while a result is computed and sent, input is stalled. After the last beat of the
fanin-th contribution: one cycle, then (SOFTMAX only) ``fanin + 1`` cycles for the scales, then
``header_beats`` cycles of header, then one cycle per word for SUM / MAX (the accumulator is
complete when the last contribution has been accumulated), or ``fanin + 2`` cycles per word
after the m word for SOFTMAX_MERGE (one stored word read per cycle).
"""
from amaranth import Cat, Module, Mux, Signal, Value
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import PacketSignature
from mcf_fpga.spec.meta import MetaOp, ReduceOp
from mcf_fpga.hdl.meta import meta_layout

from mcf_fpga.spec.nic import NicConfig
from .ingress import route_user_layout
from .reduce_accumulator import ReduceAccumulator, combine_words
from .reduce_contexts import ReduceContexts
from .reduce_sender import ReduceSender

__all__ = ["ReductionEngine", "combine_words"]


class ReductionEngine(wiring.Component):
    """See module docstring. Context ``k < cfg.reduce_contexts`` is in the reduce pool, the
    following ``cfg.merge_contexts`` contexts are the merge pool."""

    def __init__(self, cfg: NicConfig):
        self.cfg = cfg
        self.uw = route_user_layout(cfg).size
        super().__init__({
            "s": In(PacketSignature(cfg.data_width, self.uw)),
            "m": Out(PacketSignature(cfg.data_width, self.uw)),
            "node_id": In(cfg.meta.node_bits),
            "timeout": In(32),
            "err": Out(1),
            "expired": Out(cfg.reduce_contexts + cfg.merge_contexts),   # context k timed out
        })

    def elaborate(self, platform):
        m = Module()
        cfg, mp = self.cfg, self.cfg.meta
        H, dw = cfg.header_beats, cfg.data_width
        KR, KM, NS = cfg.reduce_contexts, cfg.merge_contexts, cfg.max_nodes
        K = KR + KM
        W = cfg.max_payload_beats
        wbits, sbits = (W - 1).bit_length(), (NS - 1).bit_length()
        rbits, mbits = (KR - 1).bit_length(), (KM - 1).bit_length()
        mlay = meta_layout(mp)
        s = self.s
        s_user = data.View(route_user_layout(cfg), s.payload.user)

        # ---- storage. reduce pool: one accumulator word per (context, word index)
        # (ReduceAccumulator); merge pool: one word per (context, src, word index). One-cycle
        # reads (block RAM).
        m.submodules.accumulator = acc = ReduceAccumulator(KR, wbits, dw)
        slot_mem = memory.Memory(shape=dw, depth=KM << (wbits + sbits), init=[])
        m.submodules.slots = slot_mem
        slot_wp, slot_rp = slot_mem.write_port(), slot_mem.read_port()

        # ---- open groups: keys, members, timers (ReduceContexts); the result sender
        m.submodules.contexts = cx = ReduceContexts(cfg)
        m.submodules.sender = snd = ReduceSender(cfg, len(acc.rd_addr), len(slot_rp.addr))
        wiring.connect(m, snd.m, wiring.flipped(self.m))
        acc_ren, acc_raddr = Signal(), Signal(len(acc.rd_addr))     # the receive side's reads
        m.d.comb += [self.expired.eq(cx.expire), cx.timeout.eq(self.timeout), cx.fanin.eq(s_user.fanin),
                     cx.free.eq(snd.done), cx.free_ctx.eq(snd.free_ctx), snd.node_id.eq(self.node_id),
                     acc.rd_en.eq(acc_ren | snd.acc_rd_en), acc.rd_addr.eq(acc_raddr | snd.acc_rd_addr),
                     snd.acc_rd_data.eq(acc.rd_data),
                     slot_rp.en.eq(snd.slot_rd_en), slot_rp.addr.eq(snd.slot_rd_addr),
                     snd.slot_rd_data.eq(slot_rp.data)]

        # ---- receive: header, context lookup
        hdr = [Signal(dw, name=f"hdr{i}") for i in range(H - 1)]
        hidx = Signal(range(H + 1))
        hm = data.View(mlay, Cat(*hdr, s.payload.data)[:mp.header_bits])
        m.d.comb += cx.hdr.eq(hm)
        src_idx = hm.src[:sbits]

        # the contribution being received (registered at its last header beat)
        ctx_r = Signal(range(max(K, 2)))
        src_r = Signal(sbits)
        discard = Signal()
        first = Signal()           # it opens its group: stored as it is
        r_merge = Signal()         # its group is in the merge pool
        r_sum, r_wide = Signal(), Signal()
        r_meta = Signal(mlay)      # its header = the group's key fields (when not discarded)
        r_present = Signal(NS)     # the group's srcs including this one
        widx = Signal(wbits + 1)
        rctx = ctx_r[:rbits]
        mctx = (ctx_r - KR)[:mbits]
        m.d.comb += [cx.join_ctx.eq(ctx_r), cx.join_members.eq(r_present), cx.join_first.eq(first),
                     snd.start_ctx.eq(ctx_r), snd.start_meta.eq(r_meta), snd.start_present.eq(r_present),
                     snd.start_merge.eq(r_merge)]

        # merge pool: payload words straight into the (context, src) slots
        m.d.comb += [slot_wp.addr.eq(Cat(widx[:wbits], src_r, mctx)), slot_wp.data.eq(s.payload.data)]

        with m.FSM():
            with m.State("RX_HDR"):
                m.d.comb += s.ready.eq(Mux(hidx == H - 1, cx.hit | cx.can_open, 1))
                with m.If(s.valid & s.ready):
                    for i in range(H - 1):
                        with m.If(hidx == i):
                            m.d.sync += hdr[i].eq(s.payload.data)
                    with m.If(hidx == H - 1):
                        m.d.sync += [hidx.eq(0), ctx_r.eq(cx.ctx), src_r.eq(src_idx), widx.eq(0),
                                     discard.eq(cx.conflict), first.eq(~cx.hit),
                                     r_merge.eq(cx.ctx >= KR),
                                     r_sum.eq(Value.cast(hm.reduce_op) == ReduceOp.SUM),
                                     r_wide.eq(Value.cast(hm.op) == MetaOp.PARTIAL_STATE),
                                     r_meta.eq(hm), r_present.eq(cx.members)]
                        m.d.comb += [self.err.eq(cx.conflict), cx.open.eq(~cx.hit)]
                        m.next = "RX_DATA"
                    with m.Else():
                        m.d.sync += hidx.eq(hidx + 1)
            with m.State("RX_DATA"):
                m.d.comb += s.ready.eq(1)
                with m.If(s.valid):
                    store = ~discard & (widx < W)
                    # reduce pool: read-modify-write, the read in the beat's cycle, the write one later
                    m.d.comb += [slot_wp.en.eq(store & r_merge), acc_ren.eq(1),
                                 acc_raddr.eq(Cat(widx[:wbits], rctx)),
                                 acc.upd.eq(1), acc.upd_store.eq(store & ~r_merge), acc.upd_first.eq(first),
                                 acc.upd_sum.eq(r_sum), acc.upd_wide.eq(r_wide),
                                 acc.upd_addr.eq(Cat(widx[:wbits], rctx)), acc.upd_data.eq(s.payload.data)]
                    m.d.sync += widx.eq(widx + 1)
                    gone = cx.expire.bit_select(ctx_r, 1)     # the group times out under it
                    with m.If(s.payload.last):
                        m.next = "RX_HDR"
                        with m.If(~discard & ~gone):
                            m.d.comb += cx.join.eq(1)
                            with m.If(cx.complete):
                                m.d.comb += snd.start.eq(1)
                                m.next = "SEND"
                    with m.Elif(gone):
                        m.d.sync += discard.eq(1)
            with m.State("SEND"):
                # the result is computed and sent (ReduceSender); input is stalled
                with m.If(snd.done):
                    m.next = "RX_HDR"
        return m
