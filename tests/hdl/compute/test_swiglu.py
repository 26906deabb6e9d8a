"""SwiGluLane vs golden ``swiglu_fixed`` on random (gate, up) pairs and fraction widths."""
from hypothesis import given, settings, strategies as st
import torch

from mcf_fpga.golden import numerics as nx
from mcf_fpga.hdl.compute.swiglu import SwiGluLane
from amaranth.sim import Simulator

i32 = st.one_of(st.integers(-2 ** 31, 2 ** 31 - 1), st.integers(-2 ** 16, 2 ** 16))


@given(pairs=st.lists(st.tuples(i32, i32), min_size=1, max_size=16), frac=st.integers(0, 20))
@settings(max_examples=25, deadline=None)
def test_swiglu_matches_golden(pairs, frac):
    dut = SwiGluLane()
    got = []

    async def tb(ctx):
        ctx.set(dut.frac, frac)
        for g, u in pairs:
            # the vector unit's shared shifter: the gate at the sigmoid table's step
            g_idx = int(nx.rshift_round(torch.tensor(g), frac - nx.SIG_STEP_BITS))
            ctx.set(dut.gate, g)
            ctx.set(dut.up, u)
            ctx.set(dut.g_idx, g_idx)
            got.append(ctx.get(dut.y))
    sim = Simulator(dut)          # combinational: no clock
    sim.add_testbench(tb)
    sim.run()
    g, u = torch.tensor([p[0] for p in pairs]), torch.tensor([p[1] for p in pairs])
    assert got == nx.swiglu_fixed(g, u, frac).tolist()
