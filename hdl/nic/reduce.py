"""Reduction engine: all-reduce (int32 sum / max) and online-softmax partial merge.

Input ``s``: validated packets with ``reduce_op != NONE`` delivered to this node
(``user.fanin`` = group size from the route entry). Contributions are grouped by
``(dst, kv_id)`` (the host gives every reduction in flight its own pair);
up to ``cfg.reduce_contexts`` groups may be open at once (a contribution for a new group
waits while all contexts are busy). The first contribution of a group fixes its key
(op, reduce_op, stage, collective, kv_id, length, fanin); a later contribution with a
different key, or from a src that already contributed, is consumed, not stored, and pulses
``err`` (``ErrorCause.REDUCE``). Payloads are stored per (group, src).

When ``fanin`` contributions are present the engine emits one result packet on ``m``
(header: the group's key fields, ``src = node_id``, ``dst`` = group, ``route_id = 0``),
computed over the contributions in **ascending src order** exactly as
``golden.nic.reduce_payloads`` / ``golden.numerics.merge_partials``:

* ``SUM`` / ``MAX``: per 32-bit lane, wrapping add / signed max;
* ``SOFTMAX_MERGE`` (payload ``m, l, o[0..d-1]`` as int64 words): first the running max
  and the scale pair of every fold step ``i``: ``M_i = max(M_{i-1}, m_i)``,
  ``alpha_i = exp2_fixed(M_{i-1} - M_i)``, ``beta_i = exp2_fixed(m_i - M_i)`` (one of them is
  ``EXP2_LUT[0] = 2**15``, so one LUT read per step; the LUT is ``golden.numerics.EXP2_LUT``);
  then every word ``w`` (l, o...) is the left fold
  ``acc = rshift_round(acc * alpha_i, 15) + rshift_round(w_i * beta_i, 15)``.

Timing: while a result is computed and sent, input is stalled. A result takes about
``fanin`` cycles for the scales, ``header_beats`` cycles, then ``fanin + 1`` cycles per
payload word (one stored word read per cycle).
"""
from amaranth import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from golden.numerics import EXP2_LUT, FZ, P_BITS
from hdl.bus import PacketSignature
from hdl.meta import ReduceOp, meta_layout

from .config import NicConfig
from .ingress import route_user_layout

__all__ = ["ReductionEngine"]


def _lowest(m, mask, width, name):
    """Index of the lowest set bit of ``mask`` (0 when empty)."""
    idx = Signal(range(max(width, 2)), name=name)
    for b in reversed(range(width)):
        with m.If(mask[b]):
            m.d.comb += idx.eq(b)
    return idx


class ReductionEngine(wiring.Component):
    def __init__(self, cfg: NicConfig):
        self.cfg = cfg
        self.uw = route_user_layout(cfg).size
        super().__init__({
            "s": In(PacketSignature(cfg.data_width, self.uw)),
            "m": Out(PacketSignature(cfg.data_width, self.uw)),
            "node_id": In(cfg.meta.node_bits),
            "err": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, mp = self.cfg, self.cfg.meta
        H, dw = cfg.header_beats, cfg.data_width
        K, NS = cfg.reduce_contexts, cfg.max_nodes
        W = cfg.max_payload_beats
        wbits, sbits, cbits = (W - 1).bit_length(), (NS - 1).bit_length(), max((K - 1).bit_length(), 1)
        ulay = route_user_layout(cfg)
        mlay = meta_layout(mp)
        s, o = self.s, self.m
        s_user = data.View(ulay, s.payload.user)

        # storage: one word per (context, src, word index)
        mem = memory.Memory(shape=dw, depth=1 << (wbits + sbits + cbits), init=[])
        m.submodules.slots = mem
        wp = mem.write_port()
        rp = mem.read_port(domain="comb")
        lut = memory.Memory(shape=16, depth=len(EXP2_LUT), init=[int(v) for v in EXP2_LUT])
        m.submodules.exp2_lut = lut
        lut_rp = lut.read_port(domain="comb")
        scale_a = memory.Memory(shape=16, depth=NS, init=[])
        scale_b = memory.Memory(shape=16, depth=NS, init=[])
        m.submodules.scale_a, m.submodules.scale_b = scale_a, scale_b
        sa_w, sb_w = scale_a.write_port(), scale_b.write_port()
        sa_r, sb_r = scale_a.read_port(domain="comb"), scale_b.read_port(domain="comb")

        # context state
        c_valid = Signal(K)
        c_dst = [Signal(mp.node_bits, name=f"c_dst{k}") for k in range(K)]
        c_key = [Signal(mlay, name=f"c_key{k}") for k in range(K)]
        c_fanin = [Signal(8, name=f"c_fanin{k}") for k in range(K)]
        c_present = [Signal(NS, name=f"c_present{k}") for k in range(K)]
        c_count = [Signal(range(NS + 2), name=f"c_count{k}") for k in range(K)]

        # ---- receive
        hdr = [Signal(dw, name=f"hdr{i}") for i in range(H - 1)]
        hidx = Signal(range(H + 1))
        hm = data.View(mlay, Cat(*hdr, s.payload.data)[:mp.header_bits])
        hit = Signal(K)
        m.d.comb += hit.eq(Cat(*(c_valid[k] & (c_dst[k] == hm.dst)
                                   & (c_key[k].kv_id.as_value() == hm.kv_id.as_value()) for k in range(K))))
        free = Signal(K)
        m.d.comb += free.eq(~c_valid)
        hit_idx = _lowest(m, hit, K, "hit_idx")
        free_idx = _lowest(m, free, K, "free_idx")
        ctx_sel = Signal(range(max(K, 2)))
        m.d.comb += ctx_sel.eq(Mux(hit.any(), hit_idx, free_idx))
        key_of = lambda v: Cat(v.op, v.reduce_op, v.stage, v.collective, v.kv_id, v.length)
        sel_key = Signal(mlay)
        sel_fanin = Signal(8)
        sel_present = Signal(NS)
        for k in range(K):
            with m.If(ctx_sel == k):
                m.d.comb += [sel_key.eq(c_key[k]), sel_fanin.eq(c_fanin[k]), sel_present.eq(c_present[k])]
        src_idx = hm.src[:sbits] if sbits else Const(0, 1)
        conflict = hit.any() & ((key_of(sel_key) != key_of(hm)) | (sel_fanin != s_user.fanin)
                                | sel_present.bit_select(src_idx, 1))

        ctx_r = Signal(range(max(K, 2)))
        src_r = Signal(max(sbits, 1))
        discard = Signal()
        widx = Signal(wbits + 1)
        m.d.comb += [wp.addr.eq(Cat(widx[:wbits], src_r[:sbits], ctx_r[:cbits])),
                     wp.data.eq(s.payload.data)]

        # ---- fold / emit state
        fctx = Signal(range(max(K, 2)))
        f_key = Signal(mlay)
        f_fanin = Signal(8)
        f_present = Signal(NS)
        f_dst = Signal(mp.node_bits)
        for k in range(K):
            with m.If(fctx == k):
                m.d.comb += [f_key.eq(c_key[k]), f_fanin.eq(c_fanin[k]), f_present.eq(c_present[k]),
                             f_dst.eq(c_dst[k])]
        rop = Value.cast(f_key.reduce_op)
        softmax = rop == ReduceOp.SOFTMAX_MERGE
        n_words = Signal(wbits + 1)
        m.d.comb += n_words.eq(f_key.length >> 3)
        wm = Signal(NS)            # srcs still to visit for the current word
        cur = _lowest(m, wm, NS, "cur_src")
        pos = Signal(range(NS + 1))  # fold step index
        word = Signal(wbits + 1)
        m.d.comb += rp.addr.eq(Cat(word[:wbits], cur[:sbits], fctx[:cbits]))
        x = rp.data
        acc = Signal(dw)
        out_word = Signal(dw)
        run_m = Signal(32)
        mx = x[:32].as_signed()
        run_ms = run_m.as_signed()

        # scale computation for fold step ``pos`` (softmax phase 1)
        bigger = mx > run_ms
        diff = Signal(33)
        m.d.comb += diff.eq(Mux(bigger, mx - run_ms, run_ms - mx))   # |m_i - M_{i-1}| >= 0
        n_sh = diff >> FZ
        m.d.comb += lut_rp.addr.eq(diff[:FZ])
        e = Signal(16)
        m.d.comb += e.eq(Mux(n_sh >= 16, 0, lut_rp.data >> n_sh[:4]))
        one = 1 << P_BITS
        m.d.comb += [sa_w.addr.eq(pos), sb_w.addr.eq(pos),
                     sa_w.data.eq(Mux(bigger, e, one)), sb_w.data.eq(Mux(bigger, one, e)),
                     sa_r.addr.eq(pos), sb_r.addr.eq(pos)]

        # per-step combine
        acc_s, x_s = acc.as_signed(), x.as_signed()
        t_a = Signal(dw)
        t_b = Signal(dw)
        m.d.comb += [t_a.eq(((acc_s * sa_r.data + (1 << (P_BITS - 1))) >> P_BITS)[:dw]),
                     t_b.eq(((x_s * sb_r.data + (1 << (P_BITS - 1))) >> P_BITS)[:dw])]
        lanes = []
        for ln in range(dw // 32):
            a_l, x_l = acc[32 * ln:32 * ln + 32], x[32 * ln:32 * ln + 32]
            lanes.append(Mux(rop == ReduceOp.SUM, (a_l + x_l)[:32],
                             Mux(a_l.as_signed() > x_l.as_signed(), a_l, x_l)))
        combined = Signal(dw)
        m.d.comb += combined.eq(Mux(softmax, t_a + t_b, Cat(*lanes)))

        res_meta = Signal(mlay)
        m.d.comb += [res_meta.eq(f_key), res_meta.src.eq(self.node_id), res_meta.dst.eq(f_dst),
                     res_meta.route_id.eq(0), res_meta["_rsvd0"].eq(0)]
        header = Signal(H * dw)
        m.d.comb += header.eq(res_meta.as_value())
        res_user = Signal(ulay)
        m.d.comb += [res_user.mask.eq(1), o.payload.user.eq(res_user)]

        with m.FSM():
            with m.State("RX_HDR"):
                m.d.comb += s.ready.eq(Mux(hidx == H - 1, hit.any() | free.any(), 1))
                with m.If(s.valid & s.ready):
                    for i in range(H - 1):
                        with m.If(hidx == i):
                            m.d.sync += hdr[i].eq(s.payload.data)
                    with m.If(hidx == H - 1):
                        m.d.sync += [hidx.eq(0), ctx_r.eq(ctx_sel), src_r.eq(src_idx), widx.eq(0),
                                     discard.eq(conflict)]
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
                    m.d.comb += wp.en.eq(~discard & (widx < W))
                    m.d.sync += widx.eq(widx + 1)
                    with m.If(s.payload.last):
                        m.next = "RX_HDR"
                        with m.If(~discard):
                            for k in range(K):
                                with m.If(ctx_r == k):
                                    m.d.sync += [c_present[k].eq(c_present[k] | (Const(1, NS) << src_r)[:NS]),
                                                 c_count[k].eq(c_count[k] + 1)]
                                    with m.If(c_count[k] + 1 == c_fanin[k]):
                                        m.d.sync += [fctx.eq(k), pos.eq(0), word.eq(0),
                                                     wm.eq(c_present[k] | (Const(1, NS) << src_r)[:NS])]
                                        m.next = "SCALES"
            with m.State("SCALES"):
                # softmax only: walk the srcs in ascending order over word 0 (m)
                with m.If(~softmax):
                    m.next = "HEADER"
                with m.Else():
                    m.d.comb += [sa_w.en.eq(pos != 0), sb_w.en.eq(pos != 0)]
                    m.d.sync += [run_m.eq(Mux((pos == 0) | bigger, mx, run_ms)), pos.eq(pos + 1),
                                 wm.eq(wm & ~(Const(1, NS) << cur)[:NS])]
                    with m.If((wm & ~(Const(1, NS) << cur)[:NS]) == 0):
                        m.next = "HEADER"
            with m.State("HEADER"):
                m.d.comb += [o.valid.eq(1), o.payload.data.eq(header.word_select(hidx, dw)),
                             o.payload.keep.eq(0xFF)]
                with m.If(o.ready):
                    with m.If(hidx == H - 1):
                        m.d.sync += [hidx.eq(0), pos.eq(0), wm.eq(f_present),
                                     word.eq(Mux(softmax, 1, 0))]
                        with m.If(softmax):
                            m.d.sync += out_word.eq(run_ms.as_signed())  # sign-extended M
                            m.next = "EMIT"
                        with m.Else():
                            m.next = "FOLD"
                    with m.Else():
                        m.d.sync += hidx.eq(hidx + 1)
            with m.State("FOLD"):
                nxt = Mux(pos == 0, x, combined)
                m.d.sync += [acc.eq(nxt), pos.eq(pos + 1), wm.eq(wm & ~(Const(1, NS) << cur)[:NS])]
                with m.If((wm & ~(Const(1, NS) << cur)[:NS]) == 0):
                    m.d.sync += [out_word.eq(nxt), word.eq(word + 1)]
                    m.next = "EMIT"
            with m.State("EMIT"):
                last = Signal()
                m.d.comb += [last.eq(word >= n_words),
                             o.valid.eq(1), o.payload.data.eq(out_word), o.payload.last.eq(last),
                             o.payload.keep.eq(0xFF)]
                with m.If(o.ready):
                    m.d.sync += [pos.eq(0), wm.eq(f_present)]
                    with m.If(last):
                        for k in range(K):
                            with m.If(fctx == k):
                                m.d.sync += c_valid[k].eq(0)
                        m.next = "RX_HDR"
                    with m.Else():
                        m.next = "FOLD"
        return m
