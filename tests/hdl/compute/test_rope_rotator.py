"""RopeRotator vs golden ``rope_fixed`` on random pairs and Q14 cos/sin tables (including the
saturating corners of int32 inputs)."""
from hypothesis import given, settings, strategies as st
import torch

from mcf_fpga.golden import numerics as nx
from mcf_fpga.hdl.compute.rope_rotator import RopeRotator
from amaranth.sim import Simulator

i32 = st.one_of(st.integers(-2 ** 31, 2 ** 31 - 1), st.sampled_from([-2 ** 31, 2 ** 31 - 1]))


@given(rows=st.lists(st.tuples(i32, i32, st.integers(0, 65535)), min_size=1, max_size=16))
@settings(max_examples=25, deadline=None)
def test_rope_matches_golden(rows):
    dut = RopeRotator()
    pos = [p for _, _, p in rows]
    cos, sin = nx.rope_tables(pos, 2, 10000.0)          # one pair: [n, 1] Q14 tables
    got = []

    async def tb(ctx):
        for (x0, x1, _), c, s in zip(rows, cos[:, 0].tolist(), sin[:, 0].tolist()):
            ctx.set(dut.x0, x0)
            ctx.set(dut.x1, x1)
            ctx.set(dut.cs, (c & 0xFFFF) | (s & 0xFFFF) << 16)
            got.append([ctx.get(dut.y0), ctx.get(dut.y1)])
    sim = Simulator(dut)          # combinational: no clock
    sim.add_testbench(tb)
    sim.run()
    x = torch.tensor([[x0, x1] for x0, x1, _ in rows])
    assert got == nx.rope_fixed(x, cos, sin).tolist()
