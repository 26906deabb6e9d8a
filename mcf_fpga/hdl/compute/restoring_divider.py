"""Restoring divider: ``width``-bit unsigned dividend // ``divisor``, one quotient bit per cycle."""
from amaranth import Module, Signal, Cat, Mux
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["RestoringDivider"]


class RestoringDivider(wiring.Component):
    """``load`` (one cycle) latches ``dividend`` and clears the remainder; each cycle with ``run``
    then shifts in one dividend bit (MSB first). ``last`` is high on the ``width``-th ``run`` step
    since ``load``; on the cycle after it ``quotient`` = dividend // divisor and ``remainder`` =
    dividend % divisor (``divisor`` held constant meanwhile, non-zero). ``load`` wins over ``run``.
    No back-pressure: the caller counts on exactly ``width`` steps."""

    def __init__(self, width=48, divisor_width=16):
        self.width = width
        super().__init__({
            "load": In(1), "dividend": In(width), "divisor": In(divisor_width), "run": In(1),
            "quotient": Out(width), "remainder": Out(width + 1), "last": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        w = self.width
        rem = Signal(w + 1)
        quo = Signal(w)
        cnt = Signal(range(w))
        rem2 = Signal(w + 1)              # (rem << 1) | next dividend bit
        m.d.comb += [rem2.eq(Cat(quo[w - 1], rem)), self.quotient.eq(quo), self.remainder.eq(rem),
                     self.last.eq(cnt == w - 1)]
        ge = rem2 >= self.divisor
        with m.If(self.load):
            m.d.sync += [rem.eq(0), quo.eq(self.dividend), cnt.eq(0)]
        with m.Elif(self.run):
            m.d.sync += [rem.eq(Mux(ge, rem2 - self.divisor, rem2)), quo.eq((quo << 1)[:w] | ge),
                         cnt.eq(cnt + 1)]
        return m
