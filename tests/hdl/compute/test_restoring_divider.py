"""RestoringDivider vs Python's divmod: random 48-bit dividends and 16-bit divisors, with random
stalls (``run`` low) between the steps; ``last`` marks exactly the 48th step."""
import random

from hypothesis import given, settings, strategies as st

from mcf_fpga.hdl.compute.restoring_divider import RestoringDivider
from mcf_fpga.sim.kit import run_simulation


@given(cases=st.lists(st.tuples(st.integers(0, 2 ** 48 - 1), st.integers(1, 2 ** 16 - 1)),
                      min_size=1, max_size=4),
       run_prob=st.sampled_from([1.0, 0.6]), seed=st.integers(0, 2 ** 16))
@settings(max_examples=20, deadline=None)
def test_divider_matches_divmod(cases, run_prob, seed):
    dut = RestoringDivider(48, 16)
    rng = random.Random(seed)
    got = []

    async def tb(ctx):
        for dividend, divisor in cases:
            ctx.set(dut.divisor, divisor)
            ctx.set(dut.dividend, dividend)
            ctx.set(dut.load, 1)
            await ctx.tick()
            ctx.set(dut.load, 0)
            steps = 0
            while True:
                run = int(rng.random() < run_prob)
                ctx.set(dut.run, run)
                last = ctx.get(dut.last)
                await ctx.tick()
                steps += run
                if run and last:
                    break
            ctx.set(dut.run, 0)
            got.append((steps, ctx.get(dut.quotient), ctx.get(dut.remainder)))
    run_simulation(dut, [tb], vcd=False, max_cycles=2000)
    assert got == [(48, *divmod(a, b)) for a, b in cases]
