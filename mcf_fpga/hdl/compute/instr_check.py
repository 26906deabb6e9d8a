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

__all__ = ["InstrCheck", "max_addr", "window_refused"]


def window_refused(claimed, win, win_claim, win_free):
    """The part of an instruction's check that depends on the KV streamer's window state
    (``claimed``: the windows loading or loaded): ATT on an unclaimed window, KVL on a claimed one."""
    c = claimed.bit_select(win, 1)
    return (win_claim & ~c) | (win_free & c)


def max_addr(base, so, si, no, ni, nj, mul=lambda a, b: a * b):
    """Largest word address a mover's pattern ``SP[base + o*so + i*si + j]`` touches (``mul``: how
    the two products are made, e.g. registered)."""
    return base + mul(no - 1, so) + mul(ni - 1, si) + nj - 1


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

    ``pipelined`` (for the clock): every product of two instruction fields is registered, and ATT's
    window and its end; the one product of three (a ROPE's rows x len, n0 * n1 * len) is registered
    again, so the outputs hold for ``ins`` once it has been the same for ``latency`` = 2 cycles (0
    combinational); what is left between registers is the sums, compares and the OR of the opcode's
    checks (the partial rows' words, n0 * n1 * (2d + 4), as shifts of the registered n0 * n1 added)."""

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
        products = {}

        def held(e, name):
            """``e``; pipelined: a register of it (one per distinct expression, loaded every cycle:
            the statements are added after the opcode's cases, below)."""
            if not self.pipelined:
                return e
            key = repr(e)
            if key not in products:
                products[key] = (Signal(Value.cast(e).shape(), name=f"{name}{len(products)}"), e)
            return products[key][0]

        def mul(a, b):
            """a * b; pipelined: a register of it."""
            return held(a * b, "prod")
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
        emit_span = Signal(37)               # last word read + 1, relative to a
        m.d.comb += emit_span.eq(mul(self.emit_rows - 1, ins.so) + ins.n0)
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
            # product in a row were the whole engine's slowest path into the check's result)
            att_w, win_end = held(att_w_c, "att_w"), held(win_end_c, "win_end")
            m.d.comb += self.att_w.eq(att_w)
            att_win_bad = ins.kvb + ins.ntok > win_end
        else:                                # ... or rows of the on-chip KV memory
            kv_rows = au.kv_depth
        with m.Switch(ins.op):
            with m.Case(EngineOpcode.NOP):
                pass
            with m.Case(EngineOpcode.SPW):
                m.d.comb += bad.eq((ins.n0 == 0) | (ins.dst + ins.n0 > Mux(ins.flags[0], em_hi, sp_hi))
                                   | (ins.flags[1] & bad_pack))
            with m.Case(EngineOpcode.SPR):
                m.d.comb += bad.eq((ins.n0 == 0) | (ins.a + ins.n0 > Mux(ins.flags[0], em_hi, sp_hi)))
            with m.Case(EngineOpcode.EMIT):
                m.d.comb += bad.eq((ins.n0 == 0) | (ins.a + emit_span > Mux(ins.flags[0], em_hi, sp_hi))
                                   | (emit_len >= 2 ** DEFAULT_PARAMS.length_bits)
                                   | (ins.flags[1] & bad_pack))
            with m.Case(EngineOpcode.GEMM):
                kc = K // pk
                m.d.comb += bad.eq((K == 0) | (K % g.group != 0) | (kc > g.kc_max) | (ins.n0 == 0)
                                   | (ins.n0 > g.t_max) | (mul(ins.n0, kc) > g.x_depth) | (ins.n1 == 0)
                                   | (ins.n1 % pn != 0)
                                   | (ins.a + mul(ins.n0, K) > sp_hi) | (ins.dst + n0n1 > sp_hi)
                                   | (ins.ea + ins.n0 > em_hi))
            with m.Case(EngineOpcode.VEC):
                rope = ins.sub == VecOp.ROPE
                binop = (ins.sub == VecOp.ADD) | (ins.sub == VecOp.SWIGLU)
                vrows = Mux(rope, rows_att, ins.n0)
                # rows x len: n0 * n1 * len for ROPE (a product of the registered n0 * n1), else n0 * len
                vlen = Mux(rope, mul(n0n1, K), mul(ins.n0, K))
                blen = Mux(rope, mul(ins.n0, K >> 1), mul(ins.n0, K))
                m.d.comb += bad.eq((ins.sub > VecOp.ROPE) | (K == 0) | (K > self.vec_d_max) | (ins.n0 == 0)
                                   | (ins.bits < 2) | (ins.bits > 8) | (ins.frac > 30)
                                   | (rope & (K[0] | (ins.n1 == 0)))
                                   | (vrows > 0xFFFF)
                                   | (ins.a + vlen > sp_hi) | (ins.dst + vlen > sp_hi)
                                   | ((binop | rope) & (ins.b + blen > sp_hi))
                                   | (ins.ed + vrows > em_hi))
            with m.Case(EngineOpcode.KVW):
                kvw_bad = ((K != d) | (rows_att == 0)
                           | (max_addr(ins.a, ins.so, K, ins.n0, ins.n1, K, mul) >= sp_hi)
                           | (ins.ea + mul(ins.n0 - 1, ins.eo) + mul(ins.n1 - 1, ins.ei) >= em_hi)
                           | (ins.kvb + mul(ins.n1 - 1, ins.kvs) + ins.n0 > kv_rows))
                m.d.comb += bad.eq(kvw_bad | kv_slot_bad if ddr else kvw_bad)
            with m.Case(EngineOpcode.ATT):
                att_bad = ((K != d) | (rows_att == 0) | (rows_att > au.nq_max) | (ins.nblk == 0)
                           | (ins.nblk > au.nb_max) | (ins.bs == 0) | (ins.bs > au.blk_max)
                           | (ins.ntok > mul(ins.nblk, ins.bs)) | (ins.ntok == 0)
                           | (ins.ntok <= mul(ins.nblk - 1, ins.bs)) | (ins.ntok > au.z_max)
                           | (ins.kvb + ins.ntok > au.kv_depth)
                           | (ins.kpos + ins.ntok > 2 ** au.pos_bits)
                           | (max_addr(ins.a, ins.so, K, ins.n0, ins.n1, K, mul) >= sp_hi)
                           | (ins.flags[2] & (max_addr(ins.dst, ins.so, K, ins.n0, ins.n1, K, mul) >= sp_hi))
                           | (~ins.flags[2] & (ins.dst + rows_pw > sp_hi))
                           | (ins.flags[3] & (ins.b + rows_att > sp_hi))
                           # sub bit1 acc: partial rows at SP[b + r*W]; not with flat or ext_m (reader B)
                           | (ins.sub[1] & (ins.flags[1] | ins.flags[3] | (ins.b + rows_pw > sp_hi)))
                           | (ins.ea + mul(ins.n0 - 1, ins.eo) + mul(ins.n1 - 1, ins.ei) >= em_hi))
                m.d.comb += bad.eq(att_win_bad | att_bad if ddr else att_bad)
                if ddr:
                    m.d.comb += [self.win.eq(att_w), self.win_claim.eq(1)]
            with m.Case(EngineOpcode.FOLD):
                m.d.comb += bad.eq((K != d) | (rows_att == 0) | (rows_att > au.nq_max) | (ins.nblk == 0)
                                   | (ins.a + mul(ins.nblk - 1, ins.b) + rows_pw > sp_hi)
                                   | (ins.flags[2] & (max_addr(ins.dst, ins.so, K, ins.n0, ins.n1, K, mul) >= sp_hi))
                                   | (~ins.flags[2] & (ins.dst + rows_pw > sp_hi)))
            if ddr:
                with m.Case(EngineOpcode.KVS):
                    m.d.comb += bad.eq((ins.ntok == 0) | (ins.b >= region.n_slots)
                                       | (ins.kvb + ins.ntok > 2 * region.slot_rows)
                                       | (self.kvs_len >= 2 ** DEFAULT_PARAMS.length_bits))
                with m.Case(EngineOpcode.KVL):
                    m.d.comb += bad.eq((ins.ntok == 0) | (ins.ntok > win_rows) | (ins.dst >= n_win)
                                       | (ins.b >= region.n_slots) | (ins.kvb + ins.ntok > region.slot_rows))
                    m.d.comb += [self.win.eq(ins.dst[:max(1, (n_win - 1).bit_length())]), self.win_free.eq(1)]
            with m.Default():
                m.d.comb += self.bad_op.eq(1)
        if ddr:
            m.d.comb += self.bad.eq(bad | window_refused(self.claimed, self.win, self.win_claim, self.win_free))
        m.d.sync += [r.eq(e) for r, e in products.values()]
        return m
