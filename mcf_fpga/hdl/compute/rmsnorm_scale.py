"""RMSNorm row scale: from a row's pre-shifted elements, the reciprocal RMS and the row exponent."""
from amaranth import Module, Signal, Mux, signed
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.numerics import FR, RSQRT_LUT, RSQRT_MANT_BITS
from .fixed import bitlen, abs_u
from .restoring_divider import RestoringDivider

__all__ = ["RmsNormScale"]


class RmsNormScale(wiring.Component):
    """The statistics half of golden ``rmsnorm_quant`` for one row of ``len`` elements.

    ``start`` (one cycle, when idle) begins a row; from the next cycle ``reading`` is high and the
    caller presents one element ``hp`` = rshift_round(h, sh) per cycle (no stalls), ``last`` with
    the row's final one. Then (48-cycle divider, then 3 cycles) ``done`` is high for one cycle with
    ``e`` = the row exponent (bits-1 + FR - bitlen(max|hp| * r), 0 when that product is 0); ``r``
    = RSQRT_LUT[ms >> 2k] >> k for ms = max(1, sum(hp**2) // len + (eps_q >> 2*sh)) holds from
    then until the next row's ``r``. ``len``, ``eps_q``, ``sh`` and ``bits`` stay constant
    meanwhile. A row takes ``len + 51`` cycles from ``start`` to ``done``."""

    def __init__(self):
        super().__init__({
            "start": In(1), "hp": In(signed(33)), "last": In(1),
            "len": In(16), "eps_q": In(32), "sh": In(5), "bits": In(4),
            "reading": Out(1), "done": Out(1), "r": Out(FR + 1), "e": Out(signed(8)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.rsq = rsq = Memory(shape=FR + 1, depth=2 ** RSQRT_MANT_BITS, init=list(RSQRT_LUT))
        rsq_rp = rsq.read_port(domain="comb")
        m.submodules.div = div = RestoringDivider(48, 16)
        hp = self.hp
        ss = Signal(48)          # sum hp**2
        mxh = Signal(17)         # max |hp|
        ms = Signal(48)          # mean square (+ eps), at least 1
        r = self.r
        m.d.comb += div.divisor.eq(self.len)
        with m.FSM(name="rms"):
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [ss.eq(0), mxh.eq(0)]
                    m.next = "SS"
            with m.State("SS"):
                m.d.comb += self.reading.eq(1)
                m.d.sync += ss.eq(ss + hp * hp)
                ah = abs_u(hp)
                with m.If(ah > mxh):
                    m.d.sync += mxh.eq(ah)
                with m.If(self.last):
                    m.d.comb += [div.load.eq(1), div.dividend.eq(ss + hp * hp)]
                    m.next = "DIV"
            with m.State("DIV"):          # ss // len
                m.d.comb += div.run.eq(1)
                with m.If(div.last):
                    m.next = "MS"
            with m.State("MS"):
                msv = div.quotient + (self.eps_q >> (self.sh << 1))
                m.d.sync += ms.eq(Mux(msv == 0, 1, msv))
                m.next = "RSQ"
            with m.State("RSQ"):
                blm = bitlen(ms)
                kk = Mux(blm > RSQRT_MANT_BITS - 1, (blm - (RSQRT_MANT_BITS - 1))[:6] >> 1, 0)[:5]
                m.d.comb += rsq_rp.addr.eq(ms >> (kk << 1))
                m.d.sync += r.eq(rsq_rp.data >> kk)
                m.next = "EXP"
            with m.State("EXP"):
                mu = Signal(FR + 18)
                m.d.comb += [mu.eq(mxh * r), self.done.eq(1),
                             self.e.eq(Mux(mu == 0, 0, (self.bits - 1) + FR - bitlen(mu)))]
                m.next = "IDLE"
        return m
