"""RoPE rotator: golden ``rope_fixed`` of one element pair, combinational."""
from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth import signed

from mcf_fpga.spec.numerics import ROPE_BITS
from .fixed import rshift_round, sat

__all__ = ["RopeRotator"]


class RopeRotator(wiring.Component):
    """Rotates the pair (``x0``, ``x1``) = (a[i], a[i + len/2]) by ``cs`` = cos (Q14, bits 0..15)
    | sin (Q14, bits 16..31): ``y0`` = sat32(rshift_round(x0*cos - x1*sin, 14)), ``y1`` =
    sat32(rshift_round(x1*cos + x0*sin, 14)), in the same cycle (no registers)."""

    def __init__(self):
        super().__init__({"x0": In(signed(32)), "x1": In(signed(32)), "cs": In(32),
                          "y0": Out(signed(32)), "y1": Out(signed(32))})

    def elaborate(self, platform):
        m = Module()
        cos, sin = self.cs[:16].as_signed(), self.cs[16:32].as_signed()
        m.d.comb += [self.y0.eq(sat(rshift_round(self.x0 * cos - self.x1 * sin, ROPE_BITS))),
                     self.y1.eq(sat(rshift_round(self.x1 * cos + self.x0 * sin, ROPE_BITS)))]
        return m
