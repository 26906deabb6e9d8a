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
from amaranth import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.numerics import EXP2_LUT, FZ, P_BITS
from mcf_fpga.hdl.bus import PacketSignature
from mcf_fpga.spec.meta import MetaOp, ReduceOp
from mcf_fpga.hdl.meta import meta_layout

from mcf_fpga.spec.nic import NicConfig
from .ingress import route_user_layout

__all__ = ["ReductionEngine", "combine_words"]


def _lowest(m, mask, width, name):
    """Index of the lowest set bit of ``mask`` (0 when empty)."""
    idx = Signal(range(max(width, 2)), name=name)
    for b in reversed(range(width)):
        with m.If(mask[b]):
            m.d.comb += idx.eq(b)
    return idx


def combine_words(acc, x, is_sum, wide):
    """One 64-bit word of a SUM / MAX: per lane wrapping add (``is_sum``) or signed max, in one
    64-bit lane (``wide``: PARTIAL_STATE) or two 32-bit lanes (golden.nic.reduce_payloads)."""
    sum64 = (acc + x)[:64]
    max64 = Mux(acc.as_signed() > x.as_signed(), acc, x)
    lanes = []
    for ln in range(2):
        a_l, x_l = acc[32 * ln:32 * ln + 32], x[32 * ln:32 * ln + 32]
        lanes.append(Mux(is_sum, (a_l + x_l)[:32], Mux(a_l.as_signed() > x_l.as_signed(), a_l, x_l)))
    return Mux(wide, Mux(is_sum, sum64, max64), Cat(*lanes))


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
        ulay = route_user_layout(cfg)
        mlay = meta_layout(mp)
        s, o = self.s, self.m
        s_user = data.View(ulay, s.payload.user)

        # ---- storage. reduce pool: one accumulator word per (context, word index);
        # merge pool: one word per (context, src, word index). One-cycle reads (block RAM).
        acc_mem = memory.Memory(shape=dw, depth=KR << wbits, init=[])
        slot_mem = memory.Memory(shape=dw, depth=KM << (wbits + sbits), init=[])
        m.submodules.acc, m.submodules.slots = acc_mem, slot_mem
        acc_wp, acc_rp = acc_mem.write_port(), acc_mem.read_port()
        slot_wp, slot_rp = slot_mem.write_port(), slot_mem.read_port()
        acc_ren, slot_ren = Signal(), Signal()
        m.d.comb += [acc_rp.en.eq(acc_ren), slot_rp.en.eq(slot_ren)]
        lut = memory.Memory(shape=16, depth=len(EXP2_LUT), init=list(EXP2_LUT))
        m.submodules.exp2_lut = lut
        lut_rp = lut.read_port(domain="comb")
        scale_a = memory.Memory(shape=16, depth=NS, init=[])
        scale_b = memory.Memory(shape=16, depth=NS, init=[])
        m.submodules.scale_a, m.submodules.scale_b = scale_a, scale_b
        sa_w, sb_w = scale_a.write_port(), scale_b.write_port()
        sa_r, sb_r = scale_a.read_port(domain="comb"), scale_b.read_port(domain="comb")

        # ---- context state
        c_valid = Signal(K)
        c_dst = [Signal(mp.node_bits, name=f"c_dst{k}") for k in range(K)]
        c_key = [Signal(mlay, name=f"c_key{k}") for k in range(K)]
        c_fanin = [Signal(8, name=f"c_fanin{k}") for k in range(K)]
        c_present = [Signal(NS, name=f"c_present{k}") for k in range(K)]
        c_count = [Signal(range(NS + 2), name=f"c_count{k}") for k in range(K)]

        # ---- timeouts (module docstring): c_tmr counts down from T - 1 while c_armed
        c_armed = Signal(K)
        c_tmr = [Signal(32, name=f"c_tmr{k}") for k in range(K)]
        expire = Signal(K)         # context k times out in this cycle
        m.d.comb += [expire.eq(Cat(*(c_armed[k] & (c_tmr[k] == 0) for k in range(K)))),
                     self.expired.eq(expire)]
        for k in range(K):
            with m.If(c_armed[k] & (c_tmr[k] != 0)):
                m.d.sync += c_tmr[k].eq(c_tmr[k] - 1)
            with m.If(expire[k]):
                m.d.sync += [c_valid[k].eq(0), c_armed[k].eq(0)]
        live = Signal(K)           # open groups a contribution may still join
        m.d.comb += live.eq(c_valid & ~expire)

        # ---- receive: header, context lookup
        hdr = [Signal(dw, name=f"hdr{i}") for i in range(H - 1)]
        hidx = Signal(range(H + 1))
        hm = data.View(mlay, Cat(*hdr, s.payload.data)[:mp.header_bits])
        hit = Signal(K)
        m.d.comb += hit.eq(Cat(*(live[k] & (c_dst[k] == hm.dst)
                                   & (c_key[k].kv_id.as_value() == hm.kv_id.as_value()) for k in range(K))))
        to_merge = Value.cast(hm.reduce_op) == ReduceOp.SOFTMAX_MERGE
        free_r, free_m = Signal(KR), Signal(KM)
        m.d.comb += [free_r.eq(~c_valid[:KR]), free_m.eq(~c_valid[KR:])]
        free_any = Mux(to_merge, free_m.any(), free_r.any())
        hit_idx = _lowest(m, hit, K, "hit_idx")
        free_r_idx = _lowest(m, free_r, KR, "free_r_idx")
        free_m_idx = _lowest(m, free_m, KM, "free_m_idx")
        ctx_sel = Signal(range(max(K, 2)))
        m.d.comb += ctx_sel.eq(Mux(hit.any(), hit_idx, Mux(to_merge, KR + free_m_idx, free_r_idx)))
        key_of = lambda v: Cat(v.op, v.reduce_op, v.stage, v.collective, v.kv_id, v.length)
        sel_key = Signal(mlay)
        sel_fanin = Signal(8)
        sel_present = Signal(NS)
        for k in range(K):
            with m.If(ctx_sel == k):
                m.d.comb += [sel_key.eq(c_key[k]), sel_fanin.eq(c_fanin[k]), sel_present.eq(c_present[k])]
        src_idx = hm.src[:sbits]
        src_bit = Signal(NS)
        m.d.comb += src_bit.eq((Const(1, NS) << src_idx)[:NS])
        conflict = hit.any() & ((key_of(sel_key) != key_of(hm)) | (sel_fanin != s_user.fanin)
                                | sel_present.bit_select(src_idx, 1))

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

        # merge pool: payload words straight into the (context, src) slots
        m.d.comb += [slot_wp.addr.eq(Cat(widx[:wbits], src_r, mctx)), slot_wp.data.eq(s.payload.data)]
        # reduce pool: read-modify-write, the read in the beat's cycle, the write one cycle later
        p_v, p_first, p_sum, p_wide = Signal(), Signal(), Signal(), Signal()
        p_addr = Signal(len(acc_wp.addr))
        p_data = Signal(dw)
        m.d.sync += p_v.eq(0)
        m.d.comb += [acc_wp.addr.eq(p_addr), acc_wp.en.eq(p_v),
                     acc_wp.data.eq(Mux(p_first, p_data, combine_words(acc_rp.data, p_data, p_sum, p_wide)))]

        # ---- result state (the group being sent)
        fctx = Signal(range(max(K, 2)))
        f_meta = Signal(mlay)
        f_present = Signal(NS)
        f_merge = Signal()
        n_words = Signal(wbits + 1)
        m.d.comb += n_words.eq(f_meta.length >> 3)
        word = Signal(wbits + 1)
        out_word = Signal(dw)
        # merge pool reads: srcs in ascending order, data one cycle later (rd_*)
        wm = Signal(NS)            # srcs still to read for the current word
        cur = _lowest(m, wm, NS, "cur_src")
        wm_next = Signal(NS)
        m.d.comb += wm_next.eq(wm & ~(Const(1, NS) << cur)[:NS])
        ipos = Signal(range(NS + 1))  # fold step of the next read
        rd_v, rd_last = Signal(), Signal()
        rd_pos = Signal(range(NS + 1))
        m.d.sync += rd_v.eq(0)
        f_mctx = (fctx - KR)[:mbits]
        m.d.comb += slot_rp.addr.eq(Cat(word[:wbits], cur[:sbits], f_mctx))
        issue = Signal()           # read word ``word`` of src ``cur`` now

        with m.If(issue):
            m.d.comb += slot_ren.eq(1)
            m.d.sync += [wm.eq(wm_next), ipos.eq(ipos + 1), rd_v.eq(1), rd_pos.eq(ipos),
                         rd_last.eq(wm_next == 0)]
        x = slot_rp.data
        acc = Signal(dw)
        run_m = Signal(32)
        mx = x[:32].as_signed()
        run_ms = run_m.as_signed()

        # scale computation for fold step ``rd_pos`` (softmax phase 1)
        bigger = mx > run_ms
        diff = Signal(33)
        m.d.comb += diff.eq(Mux(bigger, mx - run_ms, run_ms - mx))   # |m_i - M_{i-1}| >= 0
        n_sh = diff >> FZ
        m.d.comb += lut_rp.addr.eq(diff[:FZ])
        e = Signal(16)
        m.d.comb += e.eq(Mux(n_sh >= 16, 0, lut_rp.data >> n_sh[:4]))
        one = 1 << P_BITS
        m.d.comb += [sa_w.addr.eq(rd_pos), sb_w.addr.eq(rd_pos),
                     sa_w.data.eq(Mux(bigger, e, one)), sb_w.data.eq(Mux(bigger, one, e)),
                     sa_r.addr.eq(rd_pos), sb_r.addr.eq(rd_pos)]

        # per-step softmax combine
        acc_s, x_s = acc.as_signed(), x.as_signed()
        t_a = Signal(dw)
        t_b = Signal(dw)
        m.d.comb += [t_a.eq(((acc_s * sa_r.data + (1 << (P_BITS - 1))) >> P_BITS)[:dw]),
                     t_b.eq(((x_s * sb_r.data + (1 << (P_BITS - 1))) >> P_BITS)[:dw])]
        folded = Signal(dw)
        m.d.comb += folded.eq(Mux(rd_pos == 0, x, t_a + t_b))

        res_meta = Signal(mlay)
        m.d.comb += [res_meta.eq(f_meta), res_meta.src.eq(self.node_id), res_meta.route_id.eq(0),
                     res_meta["_rsvd0"].eq(0)]
        header = Signal(H * dw)
        m.d.comb += header.eq(res_meta.as_value())
        res_user = Signal(ulay)
        m.d.comb += [res_user.mask.eq(1), o.payload.user.eq(res_user)]

        def free_ctx():
            for k in range(K):
                with m.If(fctx == k):
                    m.d.sync += c_valid[k].eq(0)

        with m.FSM():
            with m.State("RX_HDR"):
                m.d.comb += s.ready.eq(Mux(hidx == H - 1, hit.any() | free_any, 1))
                with m.If(s.valid & s.ready):
                    for i in range(H - 1):
                        with m.If(hidx == i):
                            m.d.sync += hdr[i].eq(s.payload.data)
                    with m.If(hidx == H - 1):
                        m.d.sync += [hidx.eq(0), ctx_r.eq(ctx_sel), src_r.eq(src_idx), widx.eq(0),
                                     discard.eq(conflict), first.eq(~hit.any()),
                                     r_merge.eq(ctx_sel >= KR),
                                     r_sum.eq(Value.cast(hm.reduce_op) == ReduceOp.SUM),
                                     r_wide.eq(Value.cast(hm.op) == MetaOp.PARTIAL_STATE),
                                     r_meta.eq(hm),
                                     r_present.eq(Mux(hit.any(), sel_present, 0) | src_bit)]
                        m.d.comb += self.err.eq(conflict)
                        with m.If(~hit.any()):
                            for k in range(K):
                                with m.If(ctx_sel == k):
                                    m.d.sync += [c_valid[k].eq(1), c_dst[k].eq(hm.dst), c_key[k].eq(hm),
                                                 c_fanin[k].eq(s_user.fanin), c_present[k].eq(0),
                                                 c_count[k].eq(0)]
                        m.next = "RX_DATA"
                    with m.Else():
                        m.d.sync += hidx.eq(hidx + 1)
            with m.State("RX_DATA"):
                m.d.comb += s.ready.eq(1)
                with m.If(s.valid):
                    store = ~discard & (widx < W)
                    m.d.comb += [slot_wp.en.eq(store & r_merge),
                                 acc_ren.eq(1), acc_rp.addr.eq(Cat(widx[:wbits], rctx))]
                    m.d.sync += [p_v.eq(store & ~r_merge), p_first.eq(first), p_sum.eq(r_sum),
                                 p_wide.eq(r_wide), p_addr.eq(Cat(widx[:wbits], rctx)),
                                 p_data.eq(s.payload.data), widx.eq(widx + 1)]
                    gone = expire.bit_select(ctx_r, 1)     # the group times out under it
                    with m.If(s.payload.last):
                        m.next = "RX_HDR"
                        with m.If(~discard & ~gone):
                            for k in range(K):
                                with m.If(ctx_r == k):
                                    m.d.sync += [c_present[k].eq(r_present), c_count[k].eq(c_count[k] + 1)]
                                    with m.If(c_count[k] + 1 == c_fanin[k]):
                                        m.d.sync += [fctx.eq(k), f_meta.eq(r_meta), f_present.eq(r_present),
                                                     f_merge.eq(r_merge), c_armed[k].eq(0)]
                                        m.next = "CLOSE"
                                    with m.Elif(first):     # the group's timer starts
                                        m.d.sync += [c_tmr[k].eq(self.timeout - 1),
                                                     c_armed[k].eq(self.timeout != 0)]
                    with m.Elif(gone):
                        m.d.sync += discard.eq(1)
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
                    m.d.comb += [sa_w.en.eq(rd_pos != 0), sb_w.en.eq(rd_pos != 0)]
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
                            m.d.comb += [acc_ren.eq(1), acc_rp.addr.eq(Cat(word[:wbits], fctx[:rbits]))]
                            m.next = "ACC_EMIT"
                    with m.Else():
                        m.d.sync += hidx.eq(hidx + 1)
            with m.State("ACC_EMIT"):
                # SUM / MAX: the accumulator, one word per cycle (the read port holds its data)
                last = Signal()
                m.d.comb += [last.eq(word + 1 >= n_words),
                             o.valid.eq(1), o.payload.data.eq(acc_rp.data), o.payload.last.eq(last),
                             o.payload.keep.eq(0xFF)]
                with m.If(o.ready):
                    m.d.sync += word.eq(word + 1)
                    m.d.comb += [acc_ren.eq(1), acc_rp.addr.eq(Cat((word + 1)[:wbits], fctx[:rbits]))]
                    with m.If(last):
                        free_ctx()
                        m.next = "RX_HDR"
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
                        free_ctx()
                        m.next = "RX_HDR"
                    with m.Else():
                        m.next = "FOLD"
        return m
