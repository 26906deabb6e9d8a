"""A 48-bit accumulator on one DSP48E2: its adder and P register, the multiplier unused."""
from amaranth import Const, Module, ResetSignal, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..dsp48e2 import X_AB, Z_P, dsp48e2, opmode

__all__ = ["DSPAccumulator"]


class DSPAccumulator(wiring.Component):
    """Each cycle ``x`` (signed 48), ``ci`` (one bit) and ``load`` are registered (the DSP's A:B,
    CARRYIN and OPMODE registers); on the next cycle, if ``en``: ``p`` <= x + ci + (0 if load else
    p), mod 2**48. ``p`` is the P register. No back-pressure: ``en`` is the caller's valid of the
    registered inputs; the domain's reset clears every register.

    Yosys maps no adder to a DSP (only a multiplier's post-adder), so a LUT accumulator of a
    3-operand add costs ~2 LUT per bit; the primitive costs none (``hdl.dsp48e2``: an ``Instance``
    on the XCK26 target, its model elsewhere)."""

    def __init__(self):
        super().__init__({"x": In(signed(48)), "ci": In(1), "load": In(1), "en": In(1), "p": Out(signed(48))})

    def elaborate(self, platform):
        m = Module()
        rst = ResetSignal()
        op = opmode(x=X_AB, z=Const(Z_P, 3) & ~self.load.replicate(3))     # X = A:B, Z = P or 0
        params = {"AREG": 1, "BREG": 1, "ACASCREG": 1, "BCASCREG": 1, "CARRYINREG": 1, "OPMODEREG": 1,
                  "CREG": 0, "MREG": 0, "PREG": 1, "USE_MULT": "NONE"}
        inputs = {"A": self.x[18:48], "B": self.x[:18], "CARRYIN": self.ci, "OPMODE": op, "CEP": self.en,
                  **{r: rst for r in ("RSTA", "RSTB", "RSTALLCARRYIN", "RSTCTRL", "RSTP")}}
        p = Signal(48)
        m.submodules.dsp = dsp48e2(platform, params, inputs, p)
        m.d.comb += self.p.eq(p)
        return m
