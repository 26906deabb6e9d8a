"""SwiGLU lane: golden ``swiglu_fixed`` of one (gate, up) pair, combinational."""
from amaranth import Module, Signal, Mux, signed
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.numerics import SIGMOID_LUT, P_BITS
from .fixed import rshift_round, sat

__all__ = ["SwiGluLane"]


class SwiGluLane(wiring.Component):
    """``y`` = sat32(rshift_round(silu(gate) * up, frac)), silu(g) = rshift_round(g *
    SIGMOID_LUT[clamp(g_idx + 512, 0, 1023)], 15), in the same cycle (no registers).

    ``g_idx`` is the gate at the sigmoid table's step, rshift_round(gate, frac - SIG_STEP_BITS):
    the vector unit computes it in a rounding shifter it shares with RMSNorm, so it comes in."""

    def __init__(self):
        super().__init__({"gate": In(signed(32)), "up": In(signed(32)), "frac": In(6),
                          "g_idx": In(signed(40)), "y": Out(signed(40))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.sig = sig = Memory(shape=16, depth=1024, init=list(SIGMOID_LUT))
        sig_rp = sig.read_port(domain="comb")
        sidx = Signal(signed(40))
        silu = Signal(signed(40))
        m.d.comb += [sidx.eq(self.g_idx + 512),
                     sig_rp.addr.eq(Mux(sidx < 0, 0, Mux(sidx > 1023, 1023, sidx[:10]))),
                     silu.eq(rshift_round(self.gate * sig_rp.data, P_BITS)),
                     self.y.eq(sat(rshift_round(silu * self.up, self.frac), 32))]
        return m
