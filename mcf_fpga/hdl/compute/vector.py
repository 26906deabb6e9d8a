"""Vector unit: golden's integer element-wise and row operations, one element per cycle.

Command (``cmd`` stream, taken when idle): ``op, len, rows, frac, bits, eps_q``; the unit then
processes ``rows`` rows of ``len`` elements from ``a_in`` (int32) and, for binary ops, ``b_in``.
``o_out`` carries one result per element (``data`` signed 40 bits, ``e`` the row exponent for
the quantizing ops, ``last`` on each row's final element). Back-pressure on ``o_out`` stalls the
unit; inputs are only taken when the result can be stored.

=========  ===========================================================  ====================
op         result (mcf_fpga/golden/numerics.py)                                  inputs per row
=========  ===========================================================  ====================
ADD    0   sat32(a + b)  (residual add)                                 a: len, b: len
SWIGLU 1   swiglu_fixed(a=gate, b=up, frac)                             a: len, b: len
QUANT  2   quantize_pow2(a, frac, bits) -> (q, e)                       a: len
RMSNORM 3  rmsnorm_quant(a, eps, bits), eps_q = round(eps * 2**(2FA))   a: len
ROPE   4   rope_fixed(a, cos, sin) over one head row (pairs i, i+len/2), sat32 a: len, b: len/2
           b = cos (Q14, bits 0..15) | sin (Q14, bits 16..31)
=========  ===========================================================  ====================

Row operations buffer the row (``d_max`` int32 words) and make further passes over it:
QUANT 2 passes (max, emit), RMSNORM 3 passes (max; shifted sum of squares; emit) plus a
sequential divider (ss // len, 48 cycles) and the RSQRT ROM, ROPE 2 half-row passes.

Errors (sticky ``error`` bits, cleared by ``error_clr``; a refused command consumes nothing):
ERR_OPCODE unknown op; ERR_SHAPE len == 0, len > d_max, rows == 0, odd len for ROPE,
bits outside [2, 8] or frac > 30.
"""
from amaranth import Module, Signal, Const, Mux, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.numerics import FR, SIGMOID_LUT, RSQRT_LUT, SIG_STEP_BITS, ROPE_BITS, P_BITS, \
    RSQRT_MANT_BITS
from .fixed import rshift_round, bitlen, sat, abs_u

__all__ = ["VectorUnit", "VecOp", "ERR_OPCODE", "ERR_SHAPE"]

ERR_OPCODE, ERR_SHAPE = 1, 2


class VecOp:
    ADD = 0
    SWIGLU = 1
    QUANT = 2
    RMSNORM = 3
    ROPE = 4


class VectorUnit(wiring.Component):
    """See the module docstring. ``d_max``: longest row (elements)."""

    def __init__(self, d_max=256):
        self.d_max = d_max
        self.cmd_layout = data.StructLayout({"op": 3, "len": 16, "rows": 16, "frac": 6, "bits": 4,
                                             "eps_q": 32})
        super().__init__({
            "cmd": In(stream.Signature(self.cmd_layout)),
            "a_in": In(stream.Signature(data.StructLayout({"data": signed(32)}))),
            "b_in": In(stream.Signature(data.StructLayout({"data": signed(32)}))),
            "o_out": Out(stream.Signature(data.StructLayout({"data": signed(40), "e": signed(8),
                                                             "last": 1}))),
            "error": Out(2),
            "error_clr": In(1),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        d_max = self.d_max
        m.submodules.buf = buf = Memory(shape=signed(32), depth=d_max, init=[])
        m.submodules.csbuf = csbuf = Memory(shape=unsigned(32), depth=max(1, d_max // 2), init=[])
        m.submodules.sig = sig = Memory(shape=unsigned(16), depth=1024, init=list(SIGMOID_LUT))
        m.submodules.rsq = rsq = Memory(shape=unsigned(FR + 1), depth=2 ** RSQRT_MANT_BITS,
                                        init=list(RSQRT_LUT))
        buf_wp, buf_rp, buf_rp2 = buf.write_port(), buf.read_port(), buf.read_port()
        cs_wp, cs_rp = csbuf.write_port(), csbuf.read_port()
        sig_rp = sig.read_port(domain="comb")
        rsq_rp = rsq.read_port(domain="comb")

        op = Signal(3)
        ln = Signal(16)
        rows = Signal(16)
        frac = Signal(6)
        bits = Signal(4)
        eps_q = Signal(32)
        half = Signal(15)
        m.d.comb += half.eq(ln >> 1)
        row = Signal(16)
        err = Signal(2)
        m.d.comb += self.error.eq(err)
        with m.If(self.error_clr):
            m.d.sync += err.eq(0)

        # output register
        o = self.o_out
        o_free = Signal()
        m.d.comb += o_free.eq(~o.valid | o.ready)
        with m.If(o.ready):
            m.d.sync += o.valid.eq(0)

        def emit(value, e, last):
            return [o.valid.eq(1), o.payload.data.eq(value), o.payload.e.eq(e), o.payload.last.eq(last)]

        a, b = self.a_in, self.b_in
        ad, bd = a.payload.data, b.payload.data
        i = Signal(16)           # element index within the row
        second = Signal()        # ROPE: emitting the second half of the row
        last_el = i == ln - 1

        # ---------------- element-wise datapaths
        add_res = sat(ad + bd, 32)
        # ---------------- row statistics
        mx = Signal(33)          # max |a|
        sh = Signal(5)           # RMSNorm pre-shift
        ss = Signal(48)          # sum hp**2
        mxh = Signal(17)         # max |hp|
        r = Signal(FR + 1)       # rsqrt
        e = Signal(signed(8))    # row exponent
        qmax = Signal(8)
        m.d.comb += qmax.eq((Const(1, 9) << (bits - 1)[:4]) - 1)
        # one 32-bit rounding shifter serves the sigmoid index (ELEM) and the RMSNorm pre-shift hp
        # (SS / EMIT): the states never overlap
        in_elem = Signal()
        sh32 = Signal(signed(40))
        m.d.comb += sh32.eq(rshift_round(Mux(in_elem, ad, buf_rp.data),
                                         Mux(in_elem, frac.as_signed() - SIG_STEP_BITS, sh),
                                         max_left=SIG_STEP_BITS))
        sidx = Signal(signed(40))
        m.d.comb += sidx.eq(sh32 + 512)
        m.d.comb += sig_rp.addr.eq(Mux(sidx < 0, 0, Mux(sidx > 1023, 1023, sidx[:10])))
        silu = Signal(signed(40))
        m.d.comb += silu.eq(rshift_round(ad * sig_rp.data, P_BITS))
        sw = Signal(signed(40))
        m.d.comb += sw.eq(sat(rshift_round(silu * bd, frac), 32))

        hp = Signal(signed(33))
        m.d.comb += hp.eq(sh32)

        def qclamp(v):
            return Mux(v > qmax, qmax, Mux(v < -qmax, -qmax, v))

        # divider ss // ln
        dv_rem = Signal(49)
        dv_quo = Signal(48)
        dv_cnt = Signal(6)
        ms = Signal(48)
        k = Signal(5)

        m.d.comb += [buf_wp.addr.eq(i), buf_wp.data.eq(ad)]
        ptr = Signal(16)
        adv = Signal()
        m.d.comb += [buf_rp.addr.eq(Mux(adv, ptr + 1, ptr)), buf_rp2.addr.eq(Mux(adv, ptr + 1, ptr) + half),
                     cs_rp.addr.eq(Mux(adv, ptr + 1, ptr))]

        c = self.cmd.payload
        bad_shape = ((c.len == 0) | (c.len > d_max) | (c.rows == 0) | (c.bits < 2) | (c.bits > 8)
                     | (c.frac > 30) | ((c.op == VecOp.ROPE) & c.len[0]))

        with m.FSM(name="vec") as fsm:
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(self.cmd.valid):
                    with m.If(c.op > VecOp.ROPE):
                        m.d.sync += err.eq(err | ERR_OPCODE)
                    with m.Elif(bad_shape):
                        m.d.sync += err.eq(err | ERR_SHAPE)
                    with m.Else():
                        m.d.sync += [op.eq(c.op), ln.eq(c.len), rows.eq(c.rows), frac.eq(c.frac),
                                     bits.eq(c.bits), eps_q.eq(c.eps_q), row.eq(0), i.eq(0), mx.eq(0)]
                        with m.If((c.op == VecOp.ADD) | (c.op == VecOp.SWIGLU)):
                            m.next = "ELEM"
                        with m.Else():
                            m.next = "LOAD"

            with m.State("ELEM"):
                m.d.comb += in_elem.eq(1)
                go = a.valid & b.valid & o_free
                m.d.comb += [a.ready.eq(go), b.ready.eq(go)]
                with m.If(go):
                    m.d.sync += emit(Mux(op == VecOp.ADD, add_res, sw), 0, last_el)
                    m.d.sync += i.eq(i + 1)
                    with m.If(last_el):
                        m.d.sync += [i.eq(0), row.eq(row + 1)]
                        with m.If(row == rows - 1):
                            m.next = "IDLE"

            with m.State("LOAD"):
                m.d.comb += [a.ready.eq(1), buf_wp.en.eq(a.valid)]
                with m.If(a.valid):
                    am = abs_u(ad.as_signed())
                    m.d.sync += [i.eq(i + 1), mx.eq(Mux(am > mx, am, mx))]
                    with m.If(last_el):
                        m.d.sync += [i.eq(0), ptr.eq(0), ss.eq(0), mxh.eq(0)]
                        m.next = "STAT"

            with m.State("STAT"):
                # mx final: derive the quantize exponent / RMSNorm pre-shift
                bl = bitlen(mx)
                with m.If(op == VecOp.QUANT):
                    m.d.sync += e.eq(Mux(mx == 0, 0, (bits - 1) + frac - bl))
                    m.next = "PREP"
                with m.Elif(op == VecOp.RMSNORM):
                    m.d.sync += sh.eq(Mux(bl > 15, (bl - 15)[:5], 0))
                    m.next = "PREP_SS"
                with m.Else():
                    m.next = "PREP"

            with m.State("PREP_SS"):      # buf_rp.addr == 0 now (ptr == 0, adv == 0)
                m.next = "SS"
            with m.State("SS"):
                m.d.comb += adv.eq(1)
                m.d.sync += [ptr.eq(ptr + 1), ss.eq(ss + hp * hp)]
                ah = abs_u(hp)
                with m.If(ah > mxh):
                    m.d.sync += mxh.eq(ah)
                with m.If(ptr == ln - 1):
                    m.d.sync += [dv_rem.eq(0), dv_quo.eq(ss + hp * hp), dv_cnt.eq(0), ptr.eq(0)]
                    m.next = "DIV"
            with m.State("DIV"):          # restoring division dv_quo (dividend) // ln
                rem2 = Signal(49)
                m.d.comb += rem2.eq(Cat_bits(dv_rem, dv_quo[47]))
                ge = rem2 >= ln
                m.d.sync += [dv_rem.eq(Mux(ge, rem2 - ln, rem2)), dv_quo.eq((dv_quo << 1)[:48] | ge),
                             dv_cnt.eq(dv_cnt + 1)]
                with m.If(dv_cnt == 47):
                    m.next = "MS"
            with m.State("MS"):
                msv = dv_quo + (eps_q >> (sh << 1))
                m.d.sync += ms.eq(Mux(msv == 0, 1, msv))
                m.next = "RSQ"
            with m.State("RSQ"):
                blm = bitlen(ms)
                kk = Mux(blm > RSQRT_MANT_BITS - 1, (blm - (RSQRT_MANT_BITS - 1))[:6] >> 1, 0)[:5]
                m.d.comb += rsq_rp.addr.eq(ms >> (kk << 1))
                m.d.sync += [k.eq(kk), r.eq(rsq_rp.data >> kk)]
                m.next = "EXP"
            with m.State("EXP"):
                mu = Signal(FR + 18)
                m.d.comb += mu.eq(mxh * r)
                m.d.sync += e.eq(Mux(mu == 0, 0, (bits - 1) + FR - bitlen(mu)))
                m.next = "PREP"

            with m.State("PREP"):         # buf read port now addresses element 0
                m.d.sync += ptr.eq(0)
                m.next = "EMIT"
            with m.State("EMIT"):
                v = buf_rp.data
                u = Signal(signed(50))
                m.d.comb += u.eq(hp * r)
                # QUANT and RMSNORM share one rounding shifter and clamp (one op per job)
                is_rms = op == VecOp.RMSNORM
                q_qr = qclamp(rshift_round(Mux(is_rms, u, v), Mux(is_rms, FR, frac.as_signed()) - e, max_left=8))
                cos_n = bd[:16].as_signed()
                sin_n = bd[16:32].as_signed()
                xa, xb = buf_rp.data, buf_rp2.data
                ra = sat(rshift_round(xa * cos_n - xb * sin_n, ROPE_BITS))
                cs = cs_rp.data
                is_rope = op == VecOp.ROPE
                # ROPE: first half uses (a[i], a[i+half]) with b beat i (stored for the second
                # half); second half: ptr restarts at 0 and yields rb[i] = b*cos + a*sin.
                need_b = is_rope & ~second
                go = o_free & (~need_b | b.valid)
                m.d.comb += [adv.eq(go), b.ready.eq(go & need_b),
                             cs_wp.addr.eq(ptr), cs_wp.data.eq(bd), cs_wp.en.eq(go & need_b)]
                rb_val = sat(rshift_round(xb * cs[:16].as_signed() + xa * cs[16:32].as_signed(), ROPE_BITS))
                val = Mux(is_rope, Mux(second, rb_val, ra), q_qr)
                endp = Mux(is_rope, ptr == half - 1, ptr == ln - 1)
                with m.If(go):
                    m.d.sync += emit(val, Mux(is_rope, 0, e), endp & (~is_rope | second))
                    m.d.sync += ptr.eq(ptr + 1)
                    with m.If(endp):
                        with m.If(need_b):
                            m.d.sync += [second.eq(1), ptr.eq(0)]
                            m.next = "PREP"
                        with m.Else():
                            m.d.sync += [second.eq(0), row.eq(row + 1), i.eq(0), mx.eq(0)]
                            with m.If(row == rows - 1):
                                m.next = "IDLE"
                            with m.Else():
                                m.next = "LOAD"
        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE"))
        return m


def Cat_bits(lo, top_bit):
    """(lo << 1) | top_bit, one bit wider: the restoring divider's shift-in step."""
    from amaranth import Cat
    return Cat(top_bit, lo)
