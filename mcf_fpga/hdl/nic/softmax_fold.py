"""SoftmaxFold: one step of the online-softmax partial merge (scales and the folded word).

Contract (all combinational except the scale memory, which is written on the clock edge)
--------
* Step ``pos`` of the left fold in ascending src order sees ``x``, the src's stored word.
  Scale phase (word 0, ``m``): with ``run_m`` the running max ``M_{pos-1}`` (32-bit
  signed), ``bigger`` says ``m_pos > M_{pos-1}``; ``store`` writes the pair
  ``alpha = exp2_fixed(M_{pos-1} - M_pos)``, ``beta = exp2_fixed(m_pos - M_pos)`` for step
  ``pos`` (one of them is ``2**P_BITS``; one read of the ``spec.numerics.EXP2_LUT`` table).
* Fold phase (the other words): ``folded`` is ``x`` for step 0, else
  ``rshift_round(acc * alpha_pos, P_BITS) + rshift_round(x * beta_pos, P_BITS)`` (64-bit
  wrapping) with ``acc`` the fold so far.
"""
from amaranth import Module, Mux, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.numerics import EXP2_LUT, FZ, P_BITS

__all__ = ["SoftmaxFold"]


class SoftmaxFold(wiring.Component):
    """See module docstring. ``steps``: fold steps (the NIC's ``max_nodes``)."""

    def __init__(self, steps: int, data_width: int = 64):
        self.steps, self.data_width = steps, data_width
        super().__init__({
            "x": In(data_width), "acc": In(data_width), "run_m": In(32), "pos": In(range(steps + 1)),
            "store": In(1), "bigger": Out(1), "folded": Out(data_width),
        })

    def elaborate(self, platform):
        m = Module()
        dw, NS = self.data_width, self.steps
        lut = memory.Memory(shape=16, depth=len(EXP2_LUT), init=list(EXP2_LUT))
        m.submodules.exp2_lut = lut
        lut_rp = lut.read_port(domain="comb")
        scale_a = memory.Memory(shape=16, depth=NS, init=[])
        scale_b = memory.Memory(shape=16, depth=NS, init=[])
        m.submodules.scale_a, m.submodules.scale_b = scale_a, scale_b
        sa_w, sb_w = scale_a.write_port(), scale_b.write_port()
        sa_r, sb_r = scale_a.read_port(domain="comb"), scale_b.read_port(domain="comb")
        x, pos = self.x, self.pos
        mx = x[:32].as_signed()
        run_ms = self.run_m.as_signed()

        # scales for fold step ``pos`` (phase 1)
        bigger = mx > run_ms
        diff = Signal(33)
        m.d.comb += diff.eq(Mux(bigger, mx - run_ms, run_ms - mx))   # |m_i - M_{i-1}| >= 0
        n_sh = diff >> FZ
        m.d.comb += lut_rp.addr.eq(diff[:FZ])
        e = Signal(16)
        m.d.comb += e.eq(Mux(n_sh >= 16, 0, lut_rp.data >> n_sh[:4]))
        one = 1 << P_BITS
        m.d.comb += [self.bigger.eq(bigger), sa_w.en.eq(self.store), sb_w.en.eq(self.store),
                     sa_w.addr.eq(pos), sb_w.addr.eq(pos),
                     sa_w.data.eq(Mux(bigger, e, one)), sb_w.data.eq(Mux(bigger, one, e)),
                     sa_r.addr.eq(pos), sb_r.addr.eq(pos)]

        # per-step combine (phase 2)
        acc_s, x_s = self.acc.as_signed(), x.as_signed()
        t_a = Signal(dw)
        t_b = Signal(dw)
        m.d.comb += [t_a.eq(((acc_s * sa_r.data + (1 << (P_BITS - 1))) >> P_BITS)[:dw]),
                     t_b.eq(((x_s * sb_r.data + (1 << (P_BITS - 1))) >> P_BITS)[:dw]),
                     self.folded.eq(Mux(pos == 0, x, t_a + t_b))]
        return m
