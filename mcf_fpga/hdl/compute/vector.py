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

from mcf_fpga.spec.numerics import FR, SIG_STEP_BITS
from .fixed import rshift_round, bitlen, sat, abs_u
from .rmsnorm_scale import RmsNormScale
from .rope_rotator import RopeRotator
from .swiglu import SwiGluLane

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
        m.submodules.swiglu = swiglu = SwiGluLane()
        m.submodules.rms = rms = RmsNormScale()
        m.submodules.rope = rope = RopeRotator()
        buf_wp, buf_rp, buf_rp2 = buf.write_port(), buf.read_port(), buf.read_port()
        cs_wp, cs_rp = csbuf.write_port(), csbuf.read_port()

        cfg = Signal(self.cmd_layout)     # the command being executed
        op, ln, rows, frac, bits = cfg.op, cfg.len, cfg.rows, cfg.frac, cfg.bits
        half = Signal(15)
        m.d.comb += half.eq(ln >> 1)
        row = Signal(16)
        err = Signal(2)
        m.d.comb += self.error.eq(err)
        with m.If(self.error_clr):
            m.d.sync += err.eq(0)

        o = self.o_out           # output register: loaded by _emit, emptied by ready
        o_free = ~o.valid | o.ready
        with m.If(o.ready):
            m.d.sync += o.valid.eq(0)

        a, b = self.a_in, self.b_in
        ad, bd = a.payload.data, b.payload.data
        i = Signal(16)           # element index within the row
        second = Signal()        # ROPE: emitting the second half of the row
        last_el = i == ln - 1

        # ---------------- row statistics
        mx = Signal(33)          # max |a|
        sh = Signal(5)           # RMSNorm pre-shift
        e = Signal(signed(8))    # row exponent
        # one 32-bit rounding shifter serves the sigmoid index (ELEM) and the RMSNorm pre-shift hp
        # (SS / EMIT): the states never overlap
        in_elem = Signal()
        sh32 = Signal(signed(40))
        m.d.comb += sh32.eq(rshift_round(Mux(in_elem, ad, buf_rp.data),
                                         Mux(in_elem, frac.as_signed() - SIG_STEP_BITS, sh),
                                         max_left=SIG_STEP_BITS))
        hp = Signal(signed(33))
        m.d.comb += [hp.eq(sh32), swiglu.gate.eq(ad), swiglu.up.eq(bd), swiglu.frac.eq(frac), swiglu.g_idx.eq(sh32)]

        ptr, adv = Signal(16), Signal()         # buffer read pointer; it advances this cycle
        m.d.comb += [rms.hp.eq(hp), rms.last.eq(ptr == ln - 1), rms.len.eq(ln), rms.eps_q.eq(cfg.eps_q),
                     rms.sh.eq(sh), rms.bits.eq(bits)]
        m.d.comb += [buf_wp.addr.eq(i), buf_wp.data.eq(ad), buf_rp.addr.eq(Mux(adv, ptr + 1, ptr)), buf_rp2.addr.eq(Mux(adv, ptr + 1, ptr) + half),
                     cs_rp.addr.eq(Mux(adv, ptr + 1, ptr))]

        c = self.cmd.payload

        with m.FSM(name="vec") as fsm:
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(self.cmd.valid):
                    with m.If(c.op > VecOp.ROPE):
                        m.d.sync += err.eq(err | ERR_OPCODE)
                    with m.Elif(_bad_shape(c, d_max)):
                        m.d.sync += err.eq(err | ERR_SHAPE)
                    with m.Else():
                        m.d.sync += [cfg.eq(c), row.eq(0), i.eq(0), mx.eq(0)]
                        with m.If((c.op == VecOp.ADD) | (c.op == VecOp.SWIGLU)):
                            m.next = "ELEM"
                        with m.Else():
                            m.next = "LOAD"

            with m.State("ELEM"):
                m.d.comb += in_elem.eq(1)
                go = a.valid & b.valid & o_free
                m.d.comb += [a.ready.eq(go), b.ready.eq(go)]
                with m.If(go):
                    m.d.sync += _emit(o, Mux(op == VecOp.ADD, sat(ad + bd, 32), swiglu.y), 0, last_el)
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
                        m.d.sync += [i.eq(0), ptr.eq(0)]
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
                m.d.comb += rms.start.eq(1)
                m.next = "RMS"
            with m.State("RMS"):          # the scale: hp streamed from the buffer, then r and e
                with m.If(rms.reading):
                    m.d.comb += adv.eq(1)
                    m.d.sync += ptr.eq(Mux(rms.last, 0, ptr + 1))
                with m.If(rms.done):
                    m.d.sync += e.eq(rms.e)
                    m.next = "PREP"

            with m.State("PREP"):         # buf read port now addresses element 0
                m.d.sync += ptr.eq(0)
                m.next = "EMIT"
            with m.State("EMIT"):
                v = buf_rp.data
                u = Signal(signed(50))
                m.d.comb += u.eq(hp * rms.r)
                # QUANT and RMSNORM share one rounding shifter and clamp (one op per job)
                is_rms = op == VecOp.RMSNORM
                q_qr = _qclamp(m, rshift_round(Mux(is_rms, u, v), Mux(is_rms, FR, frac.as_signed()) - e, max_left=8),
                               bits)
                is_rope = op == VecOp.ROPE
                # ROPE: first half uses (a[i], a[i+half]) with b beat i (stored for the second
                # half); second half: ptr restarts at 0 and yields rb[i] = b*cos + a*sin.
                need_b = is_rope & ~second
                go = o_free & (~need_b | b.valid)
                m.d.comb += [adv.eq(go), b.ready.eq(go & need_b),
                             cs_wp.addr.eq(ptr), cs_wp.data.eq(bd), cs_wp.en.eq(go & need_b),
                             rope.x0.eq(buf_rp.data), rope.x1.eq(buf_rp2.data),
                             rope.cs.eq(Mux(second, cs_rp.data, bd))]
                val = Mux(is_rope, Mux(second, rope.y1, rope.y0), q_qr)
                endp = Mux(is_rope, ptr == half - 1, ptr == ln - 1)
                with m.If(go):
                    m.d.sync += _emit(o, val, Mux(is_rope, 0, e), endp & (~is_rope | second))
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


def _emit(o, value, e, last):
    """Statements loading the output register ``o`` with one result."""
    return [o.valid.eq(1), o.payload.data.eq(value), o.payload.e.eq(e), o.payload.last.eq(last)]


def _bad_shape(c, d_max):
    """The command ``c`` has a shape the unit refuses (ERR_SHAPE)."""
    return ((c.len == 0) | (c.len > d_max) | (c.rows == 0) | (c.bits < 2) | (c.bits > 8)
            | (c.frac > 30) | ((c.op == VecOp.ROPE) & c.len[0]))


def _qclamp(m, v, bits):
    """``v`` clamped to +-qmax, qmax = 2**(bits-1) - 1 (the quantizers' symmetric range)."""
    qmax = Signal(8)
    m.d.comb += qmax.eq((Const(1, 9) << (bits - 1)[:4]) - 1)
    return Mux(v > qmax, qmax, Mux(v < -qmax, -qmax, v))
