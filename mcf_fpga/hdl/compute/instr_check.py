"""Instruction check: is an engine instruction one the engine refuses, and its derived shapes."""
from amaranth import Module, Signal, Mux
from amaranth.hdl import Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.instr import EngineOpcode
from mcf_fpga.spec.kvinstall import HEADER_BYTES
from mcf_fpga.spec.meta import DEFAULT_PARAMS
from mcf_fpga.spec.partial import PartialRow
from .instr import INSTR
from .vector import VecOp

__all__ = ["InstrCheck", "window_refused"]


def window_refused(claimed, win, win_claim, win_free):
    """The part of an instruction's check that depends on the KV streamer's window state
    (``claimed``: the windows loading or loaded): ATT on an unclaimed window, KVL on a claimed one."""
    c = claimed.bit_select(win, 1)
    return (win_claim & ~c) | (win_free & c)


class _Stages:
    """The check's registers when ``pipelined`` (else each helper returns its expression): one per
    distinct expression, loaded every cycle (the caller adds ``products``' statements)."""

    def __init__(self, pipelined):
        self.pipelined, self.products = pipelined, {}

    def held(self, e, name):
        """``e``; pipelined: a register of it."""
        if not self.pipelined:
            return e
        key = repr(e)
        if key not in self.products:
            self.products[key] = (Signal(Value.cast(e).shape(), name=f"{name}{len(self.products)}"), e)
        return self.products[key][0]

    def mul(self, a, b):
        """a * b; pipelined: a register of it."""
        return self.held(a * b, "prod")

    def over(self, base, span, hi, strict=True, late=False):
        """base + span > hi (``strict``) or >= hi. Pipelined: span > hi - base, the difference
        registered with the products and the compare registered a cycle later (``late``: span is
        itself a second-cycle register, so the compare stays combinational)."""
        if not self.pipelined:
            return base + span > hi if strict else base + span >= hi
        room = self.held(hi - base, "room")
        c = span > room if strict else span >= room
        return c if late else self.held(c, "ovr")

    def mx_over(self, base, so, si, no, ni, nj, hi):
        """The largest word address a mover's pattern ``SP[base + o*so + i*si + j]`` touches >= hi,
        as :meth:`over` (the field and constant terms with the base). Pipelined: ``(no - 1) * so``
        as ``no * so - so`` (and ``si`` likewise), the ``- so - si`` on the room's side, so the
        products' DSPs take the fields with no subtractor in front (the whole engine's path
        cfifo -> check.prod)."""
        if not self.pipelined:
            return base + nj - 1 + (no - 1) * so + (ni - 1) * si >= hi
        room = self.held((so + si) - ((base + nj) - (hi + 1)), "room")     # hi - (base + nj - 1) + so + si
        return self.held(self.mul(no, so) + self.mul(ni, si) >= room, "ovr")


class InstrCheck(wiring.Component):
    """Combinational (``pipelined``: see below): for the instruction ``ins``, ``bad_op`` (an unknown opcode: KVL/KVS too
    without ``region``) and ``bad`` (a shape or address beyond the engine's limits, see the
    engine's module docstring and spec.instr), plus the shapes the sequencer uses:
    ``rows_att`` = n0*n1, ``emit_rows`` (n1, 0 = 1), ``emit_len`` (EMIT's Meta length in bytes);
    with ``region`` also ``kvs_len`` (KVS's Meta length) and ``att_w`` (ATT's staging window,
    kvb // win_rows). ``claimed`` (with ``region``): the windows loading or loaded.

    With ``region``, ``bad`` is ``bad_shape`` (every check that depends on ``ins`` alone) or the
    window check :func:`window_refused` of ``win`` (ATT: ``att_w``; KVL: its ``dst``),
    ``win_claim`` (ATT: the window must be claimed) and ``win_free`` (KVL: it must not be) against
    ``claimed``: the engine registers ``bad_shape`` and the window terms from the instruction at
    the command FIFO's head, looks at ``claimed`` a cycle later, when it decodes, and applies
    that (registered) in the op's first state.

    Limits: ``sp_depth``/``em_depth`` words/rows, the ``gemm`` array's (pn, pk, group, kc_max,
    t_max, x_depth), the vector unit's ``vec_d_max``, the attention unit ``att``'s (d, nq_max,
    nb_max, blk_max, z_max, kv_depth, pos_bits), and K/V in DDR: ``region``
    (:class:`spec.kvregion.KVRegion`) with ``n_win`` windows of ``win_rows`` rows.

    ``pipelined`` (for the clock): the outputs hold for ``ins`` once it has been the same for
    ``latency`` = 2 cycles (0 combinational). The first cycle registers every product of two
    instruction fields, every term of the fields alone, ATT's window and its end, and each bound's
    room (``hi - base``); the second registers each bound (``span > room``) and the one product of
    three (a ROPE's rows x len, n0 * n1 * len, whose two bounds are compared after it); what is left
    between registers is those two compares and the OR of the opcode's terms."""

    def __init__(self, *, sp_depth, em_depth, gemm, vec_d_max, att, region=None, win_rows=None, n_win=None,
                 pipelined=False):
        self.sp_depth, self.em_depth, self.gemm, self.vec_d_max, self.att = sp_depth, em_depth, gemm, vec_d_max, att
        self.region, self.win_rows, self.n_win = region, win_rows, n_win
        self.pipelined = pipelined
        self.latency = 2 if pipelined else 0
        members = {"ins": In(INSTR), "bad": Out(1), "bad_op": Out(1), "rows_att": Out(32),
                   "emit_rows": Out(16), "emit_len": Out(34)}
        if region is not None:
            members.update(claimed=In(n_win), kvs_len=Out(40), att_w=Out(range(n_win)), bad_shape=Out(1),
                           win=Out(range(n_win)), win_claim=Out(1), win_free=Out(1))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        ins, g, au = self.ins, self.gemm, self.att
        ddr = self.region is not None
        bad = self.bad_shape if ddr else self.bad
        K, sp_hi, em_hi, pn, pk, d = ins.len, self.sp_depth, self.em_depth, g.pn, g.pk, au.d
        PW = PartialRow(d).words
        rows_att, emit_len = self.rows_att, self.emit_len
        st = _Stages(self.pipelined)
        held, mul, over, mx_over = st.held, st.mul, st.over, st.mx_over
        n0n1 = mul(ins.n0, ins.n1)
        m.d.comb += rows_att.eq(n0n1)
        # the partial rows' words, rows x (2d + 4); pipelined: as the sum of the registered product's
        # shifts by the constant's bits (2 for a power-of-two d: a carry chain, not a DSP behind it)
        rows_pw = Signal(48)
        m.d.comb += rows_pw.eq(sum(n0n1 << i for i in range(PW.bit_length()) if PW >> i & 1)
                               if self.pipelined else n0n1 * PW)
        # EMIT pack / SPW unpack: bits 8 (4 values per word) or 4 (8 values), n0 a multiple of 32/bits
        bad_pack = Signal()
        m.d.comb += bad_pack.eq(Mux(ins.bits == 8, ins.n0[:2] != 0, Mux(ins.bits == 4, ins.n0[:3] != 0, 1)))
        # EMIT rows: n1 rows (0 = 1) of n0 words at stride so; the words and the span they read
        m.d.comb += self.emit_rows.eq(Mux(ins.n1 == 0, 1, ins.n1))
        emit_words = Signal(32)
        m.d.comb += emit_words.eq(Mux(ins.n1 == 0, ins.n0, rows_att))
        m.d.comb += emit_len.eq(Mux(ins.flags[1], Mux(ins.bits == 4, emit_words >> 1, emit_words),
                                    emit_words << 2))
        if ddr:                              # KVW destination: slot b of the region
            region, win_rows, n_win = self.region, self.win_rows, self.n_win
            m.d.comb += self.kvs_len.eq(HEADER_BYTES + ins.ntok * region.row_bytes)
            kv_rows, kv_slot_bad = region.slot_rows, ins.b >= region.n_slots
            att_w_c = Signal.like(self.att_w, name="att_w_c")    # ATT's window: kvb // win_rows
            for w in range(1, n_win):
                with m.If(ins.kvb >= w * win_rows):
                    m.d.comb += att_w_c.eq(w)
            win_end_c = Signal(range(n_win * win_rows + 1), name="win_end_c")
            m.d.comb += win_end_c.eq((att_w_c + 1) * win_rows)
            # pipelined: the window and its end registered too (compares, an encoder and a constant
            # product in a row were the whole engine's slowest path into the check's result), and
            # the compare of the keys' end with it a cycle later
            att_w, win_end = held(att_w_c, "att_w"), held(win_end_c, "win_end")
            m.d.comb += self.att_w.eq(att_w)
            att_win_bad = held(held(ins.kvb + ins.ntok, "kv_end") > win_end, "ovr")
        else:                                # ... or rows of the on-chip KV memory
            kv_rows = au.kv_depth
        # Pipelined, every term is a register or a compare of registers: a term of the fields alone
        # is registered in the first cycle (``held``), a bound on a product in the second
        # (``over``); what is left between registers is the OR of the opcode's terms.
        sp_or_em = Mux(ins.flags[0], em_hi, sp_hi)
        with m.Switch(ins.op):
            with m.Case(EngineOpcode.NOP):
                pass
            with m.Case(EngineOpcode.SPW):
                m.d.comb += bad.eq(held((ins.n0 == 0) | (ins.dst + ins.n0 > sp_or_em) | (ins.flags[1] & bad_pack),
                                        "spw_bad"))
            with m.Case(EngineOpcode.SPR):
                m.d.comb += bad.eq(held((ins.n0 == 0) | (ins.a + ins.n0 > sp_or_em), "spr_bad"))
            with m.Case(EngineOpcode.EMIT):
                # the span read, relative to a: (rows - 1) * so + n0 = n1 * so - so + n0 (rows = n1,
                # or 1 for n1 = 0: n1 * so = 0, no - so): the product's DSP takes the fields (the
                # whole engine's path into it, 6.0 ns on 73f70fa through a subtractor, 5.85 through a select)
                m.d.comb += bad.eq(held((ins.n0 == 0) | (ins.flags[1] & bad_pack), "emit_bad")
                                   | over(ins.a + ins.n0 - Mux(ins.n1 == 0, 0, ins.so), mul(ins.n1, ins.so), sp_or_em)
                                   | held(emit_len >= 2 ** DEFAULT_PARAMS.length_bits, "emit_long"))
            with m.Case(EngineOpcode.GEMM):
                kc = K // pk
                m.d.comb += bad.eq(held((K == 0) | (K % g.group != 0) | (kc > g.kc_max) | (ins.n0 == 0)
                                        | (ins.n0 > g.t_max) | (ins.n1 == 0) | (ins.n1 % pn != 0)
                                        | (ins.ea + ins.n0 > em_hi), "gemm_bad")
                                   | held(mul(ins.n0, kc) > g.x_depth, "gemm_x")
                                   | over(ins.a, mul(ins.n0, K), sp_hi) | over(ins.dst, n0n1, sp_hi))
            with m.Case(EngineOpcode.VEC):
                rope = held(ins.sub == VecOp.ROPE, "rope")
                binop = held((ins.sub == VecOp.ADD) | (ins.sub == VecOp.SWIGLU), "binop")
                vrows = Mux(rope, rows_att, ins.n0)
                # rows x len: n0 * n1 * len for ROPE (a product of the registered n0 * n1), else n0 * len
                nk, nnk = mul(ins.n0, K), mul(n0n1, K)
                blen = Mux(rope, mul(ins.n0, K >> 1), nk)
                m.d.comb += bad.eq(held((ins.sub > VecOp.ROPE) | (K == 0) | (K > self.vec_d_max) | (ins.n0 == 0)
                                        | (ins.bits < 2) | (ins.bits > 8) | (ins.frac > 30)
                                        | ((ins.sub == VecOp.ROPE) & (K[0] | (ins.n1 == 0))), "vec_bad")
                                   | held(vrows > 0xFFFF, "vec_rows")
                                   | Mux(rope, over(ins.a, nnk, sp_hi, late=True) | over(ins.dst, nnk, sp_hi, late=True),
                                         over(ins.a, nk, sp_hi) | over(ins.dst, nk, sp_hi))
                                   | ((binop | rope) & over(ins.b, blen, sp_hi))
                                   | over(ins.ed, vrows, em_hi))
            with m.Case(EngineOpcode.KVW):
                kvw_bad = (held((K != d) | kv_slot_bad if ddr else K != d, "kvw_bad") | held(rows_att == 0, "no_rows")
                           | mx_over(ins.a, ins.so, K, ins.n0, ins.n1, K, sp_hi)
                           | mx_over(ins.ea, ins.eo, ins.ei, ins.n0, ins.n1, 1, em_hi)
                           | over(ins.kvb + ins.n0 - ins.kvs, mul(ins.n1, ins.kvs), kv_rows))
                m.d.comb += bad.eq(kvw_bad)
            with m.Case(EngineOpcode.ATT):
                att_bad = (held((K != d) | (ins.nblk == 0) | (ins.nblk > au.nb_max) | (ins.bs == 0)
                                | (ins.bs > au.blk_max) | (ins.ntok == 0) | (ins.ntok > au.z_max)
                                | (ins.kvb + ins.ntok > au.kv_depth) | (ins.kpos + ins.ntok > 2 ** au.pos_bits)
                                # sub bit1 acc: partial rows at SP[b + r*W]; not with flat or ext_m (reader B)
                                | (ins.sub[1] & (ins.flags[1] | ins.flags[3])), "att_bad")
                           | held((rows_att == 0) | (rows_att > au.nq_max) | (ins.ntok > mul(ins.nblk, ins.bs))
                                  | (held(ins.ntok + ins.bs, "ntok_bs") <= mul(ins.nblk, ins.bs)), "att_rows")
                           | mx_over(ins.a, ins.so, K, ins.n0, ins.n1, K, sp_hi)
                           | (ins.flags[2] & mx_over(ins.dst, ins.so, K, ins.n0, ins.n1, K, sp_hi))
                           | (~ins.flags[2] & over(ins.dst, rows_pw, sp_hi))
                           | (ins.flags[3] & over(ins.b, rows_att, sp_hi))
                           | (ins.sub[1] & over(ins.b, rows_pw, sp_hi))
                           | mx_over(ins.ea, ins.eo, ins.ei, ins.n0, ins.n1, 1, em_hi))
                m.d.comb += bad.eq(att_win_bad | att_bad if ddr else att_bad)
                if ddr:
                    m.d.comb += [self.win.eq(att_w), self.win_claim.eq(1)]
            with m.Case(EngineOpcode.FOLD):
                m.d.comb += bad.eq(held(K != d, "fold_k") | held(ins.nblk == 0, "fold_nblk")
                                   | held((rows_att == 0) | (rows_att > au.nq_max), "fold_rows")
                                   | over(ins.a - ins.b, mul(ins.nblk, ins.b) + rows_pw, sp_hi)
                                   | (ins.flags[2] & mx_over(ins.dst, ins.so, K, ins.n0, ins.n1, K, sp_hi))
                                   | (~ins.flags[2] & over(ins.dst, rows_pw, sp_hi)))
            if ddr:
                with m.Case(EngineOpcode.KVS):
                    m.d.comb += bad.eq(held((ins.ntok == 0) | (ins.b >= region.n_slots)
                                            | (ins.kvb + ins.ntok > 2 * region.slot_rows)
                                            | (self.kvs_len >= 2 ** DEFAULT_PARAMS.length_bits), "kvs_bad"))
                with m.Case(EngineOpcode.KVL):
                    m.d.comb += bad.eq(held((ins.ntok == 0) | (ins.ntok > win_rows) | (ins.dst >= n_win)
                                            | (ins.b >= region.n_slots) | (ins.kvb + ins.ntok > region.slot_rows),
                                            "kvl_bad"))
                    m.d.comb += [self.win.eq(ins.dst[:max(1, (n_win - 1).bit_length())]), self.win_free.eq(1)]
            with m.Default():
                m.d.comb += self.bad_op.eq(1)
        if ddr:
            m.d.comb += self.bad.eq(bad | window_refused(self.claimed, self.win, self.win_claim, self.win_free))
        m.d.sync += [r.eq(e) for r, e in st.products.values()]
        return m
