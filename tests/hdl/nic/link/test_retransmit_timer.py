"""RetransmitTimer (hdl/nic/link/retransmit_timer.py) against a counter model: ``fire``
exactly on the ``timeout``-th consecutive cycle with ``idle`` and ``progress`` low, then a
fresh count; random ``idle``/``progress`` patterns and timeouts."""
import random

from hypothesis import given, settings, strategies as st

from mcf_fpga.hdl.nic.link.retransmit_timer import RetransmitTimer
from mcf_fpga.sim.kit import run_simulation


@settings(max_examples=20, deadline=None)
@given(timeout=st.integers(1, 9), quiet_p=st.sampled_from([0.7, 0.95, 1.0]), seed=st.integers(0, 2**32 - 1))
def test_timer_fires_after_timeout_quiet_cycles(timeout, quiet_p, seed):
    dut = RetransmitTimer(timeout)
    rng = random.Random(seed)
    fired = []

    async def tb(ctx):
        run = 0                      # consecutive quiet cycles since the last fire or clear
        for _ in range(200):
            idle, progress = rng.random() > quiet_p, rng.random() > quiet_p
            ctx.set(dut.idle, idle)
            ctx.set(dut.progress, progress)
            quiet = not (idle or progress)
            run = run + 1 if quiet else 0
            expect = run == timeout
            assert ctx.get(dut.fire) == expect
            if expect:
                run = 0
            fired.append(expect)
            await ctx.tick()

    run_simulation(dut, [tb])
    if quiet_p == 1.0:
        assert sum(fired) == 200 // timeout
