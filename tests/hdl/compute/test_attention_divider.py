"""FinalizeDividers alone against golden ``finalize`` (sat32(round_div(o << (P_BITS + FA - FO),
l)), 0 for l = 0): random lanes, accumulators and sums (signs, zero, saturation both ways,
exact and half-way quotients), ``QB`` steps after ``start`` with random idle cycles between
(``registered``: read a cycle after the last step, and again while the dividers hold)."""
import random

import torch
from hypothesis import given, settings, strategies as st

from mcf_fpga.golden.numerics import Partial, finalize
from mcf_fpga.spec.numerics import ACC_BITS
from mcf_fpga.hdl.compute.attention_divider import FinalizeDividers, QB
from mcf_fpga.sim.kit import run_simulation

LIM = 1 << (ACC_BITS - 1)


def golden(o, l):
    p = Partial(torch.zeros(1, dtype=torch.long), torch.tensor([l]), torch.tensor([o]))
    return [int(v) for v in finalize(p)[0]]


async def divide(ctx, dut, o, l, rng, p_idle=0.0):
    """``start`` with lanes ``o`` and sum ``l`` (``o`` then overwritten: read only at start), then
    ``QB`` steps, each cycle idle with probability ``p_idle``; ``step`` low at the end."""
    ctx.set(dut.l, l)
    ctx.set(dut.o, o)
    ctx.set(dut.start, 1)
    await ctx.tick()
    ctx.set(dut.start, 0)
    ctx.set(dut.o, [rng.randint(-LIM, LIM - 1) for _ in o])
    steps = 0
    while steps < QB:
        step = rng.random() >= p_idle
        ctx.set(dut.step, step)
        await ctx.tick()
        steps += step
    ctx.set(dut.step, 0)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2 ** 16), lanes=st.sampled_from([1, 2, 4]), n=st.integers(1, 4),
       p_idle=st.floats(0, 0.5), registered=st.booleans())
def test_quotients_match_golden_finalize(seed, lanes, n, p_idle, registered):
    dut = FinalizeDividers(lanes, registered=registered)
    rng = random.Random(seed)
    cases = []
    for _ in range(n):
        l = rng.choice([0, 1, 2, 3, rng.randint(1, 2 ** 16), rng.randint(1, LIM - 1), 1 << 15])
        o = [rng.choice([0, rng.randint(-LIM, LIM - 1), max(-LIM, min(LIM - 1, rng.randint(-4 * l - 4, 4 * l + 4))), -LIM, LIM - 1,
                         rng.randint(-2 ** 20, 2 ** 20)]) for _ in range(lanes)]
        cases.append((o, l, golden(o, l)))

    async def tb(ctx):
        for o, l, want in cases:
            await divide(ctx, dut, o, l, rng, p_idle)
            for _ in range(1 + registered * rng.randint(1, 2)):
                if registered:
                    await ctx.tick()
                assert [int(v) for v in ctx.get(dut.y)] == want, (o, l)

    run_simulation(dut, [tb])


def test_the_largest_quotients_saturate_without_a_flag():
    """The worst remainder growth: |o| at its limits over l = 1..3 and the largest l; the steps
    alone saturate the quotient (golden finalize), one-stage and registered."""
    cases = [([LIM - 1, -LIM, LIM // 2 + 1, -(LIM // 3)], l) for l in (1, 2, 3, 2 ** 20, (1 << ACC_BITS) - 1)]
    for registered in (False, True):
        dut = FinalizeDividers(4, registered=registered)

        async def tb(ctx):
            for o, l in cases:
                await divide(ctx, dut, o, l, random.Random(0))
                if registered:
                    await ctx.tick()
                assert [int(v) for v in ctx.get(dut.y)] == [golden(v, l)[0] for v in o], (o, l)

        run_simulation(dut, [tb])
