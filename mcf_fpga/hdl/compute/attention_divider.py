"""Attention finalize dividers: ``L`` restoring dividers side by side, o / l of online softmax."""
from amaranth import Module, Signal, Cat, Const, Mux, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.numerics import FA, FO, P_BITS, ACC_BITS
from .fixed import sat

__all__ = ["FinalizeDividers", "QB"]

QB = 34                                    # quotient bits computed (>= 2**33 saturates)


class FinalizeDividers(wiring.Component):
    """``y[j] = sat32(round_div(o[j] << (P_BITS + FA - FO), l))`` (golden ``finalize``; 0 if l = 0).

    ``start`` loads lane j from ``o[j]`` and ``l`` (|numerator| and its sign); each ``step``
    computes one quotient bit (a quotient of 2**34 or more needs no flag: its first remainder is
    at least 2l, so is every next one, every quotient bit is 1 and ``y`` saturates; the
    numerator's spare bit keeps the shifted remainder within its NB + 1 bits); after
    ``QB`` steps ``y`` holds the results (combinationally from the registers and ``l``, which
    must not change from ``start`` to the read). ``start`` wins over ``step``.

    ``registered``: ``y`` a cycle later (the cycle after the ``QB``-th step, ``step`` low, and on
    while the dividers hold): the quotient, its sign, the remainder's being nonzero and ``l == 0``
    are registered first, and ``y`` is the rounding and saturation of those (the remainder's test,
    the rounding's adder and the saturation in one cycle were the whole engine's slowest path).
    """

    def __init__(self, lanes: int, registered: bool = False):
        self.lanes, self.registered = lanes, registered
        super().__init__({
            "o": In(data.ArrayLayout(signed(ACC_BITS), lanes)),
            "l": In(unsigned(ACC_BITS)),
            "start": In(1),
            "step": In(1),
            "y": Out(data.ArrayLayout(signed(32), lanes)),
        })

    def elaborate(self, platform):
        m = Module()
        NB = ACC_BITS + (P_BITS + FA - FO) + 2     # |numerator| < 2**NB
        l_run = self.l
        div2 = Cat(Const(0, 1), l_run)             # 2 * l
        l_zero = l_run == 0
        if self.registered:
            l_zero_q = Signal(name="dv_l_zero")
            m.d.sync += l_zero_q.eq(l_zero)
            l_zero = l_zero_q
        for j in range(self.lanes):
            dv_num = Signal(QB, name=f"dv_num{j}")
            dv_rem = Signal(NB + 1, name=f"dv_rem{j}")
            dv_neg = Signal(name=f"dv_neg{j}")
            numer = Signal(signed(NB + 1), name=f"dv_numer{j}")
            m.d.comb += numer.eq(((self.o[j] << (P_BITS + FA - FO)) << 1) + l_run)
            anum = Signal(NB, name=f"dv_anum{j}")
            m.d.comb += anum.eq(Mux(numer < 0, -numer, numer))
            rem_sh = Cat(dv_num[QB - 1], dv_rem)[:NB + 1]
            ge = rem_sh >= div2
            q_final = Signal(signed(QB + 2), name=f"dv_q{j}")
            num, rem_nz, neg = dv_num, dv_rem != 0, dv_neg
            if self.registered:
                num, neg = (Signal.like(x, name=x.name + "_q") for x in (dv_num, dv_neg))
                rem_nz = Signal(name=f"dv_nz{j}")
                m.d.sync += [num.eq(dv_num), neg.eq(dv_neg), rem_nz.eq(dv_rem != 0)]
            m.d.comb += q_final.eq(Mux(neg, -(num + rem_nz), num))
            with m.If(self.start):
                m.d.sync += [dv_neg.eq(numer < 0), dv_num.eq(anum[:QB]), dv_rem.eq(anum >> QB)]
            with m.Elif(self.step):
                m.d.sync += [dv_rem.eq(Mux(ge, rem_sh - div2, rem_sh)), dv_num.eq(Cat(ge, dv_num[:QB - 1]))]
            m.d.comb += self.y[j].eq(Mux(l_zero, 0, sat(q_final, 32)))
        return m
