"""BankedScratchpad vs a list of words: random single and pair writes (any alignment, the wrap at
the top included) and reads on both ports, every read equal to the list's words ``addr`` and
``addr + 1`` as they were before the cycle's write."""
import random

import pytest
from hypothesis import given, settings, strategies as st

from mcf_fpga.hdl.compute.banked_scratchpad import BankedScratchpad
from mcf_fpga.sim.kit import run_simulation

DEPTH = 16


def s32(v):
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >> 31 else v


@given(seed=st.integers(0, 2 ** 31), cycles=st.integers(20, 120), wp=st.sampled_from([0.3, 0.8]))
@settings(max_examples=20, deadline=None)
def test_banked_scratchpad_matches_a_word_list(seed, cycles, wp):
    rng = random.Random(seed)
    dut = BankedScratchpad(DEPTH)
    ref = [0] * DEPTH
    bad = []

    async def tb(ctx):
        pend = None                       # (port name, addr, expected words) read last cycle
        for _ in range(cycles):
            reads = {p: rng.randrange(DEPTH) for p in ("ra", "rb")}
            for p, a in reads.items():
                ctx.set(getattr(dut, p).addr, a)
            exp = {p: (ref[a], ref[(a + 1) % DEPTH]) for p, a in reads.items()}
            wen = rng.random() < wp
            wa, pair = rng.randrange(DEPTH), rng.random() < 0.5
            d0, d1 = rng.randrange(-2 ** 31, 2 ** 31), rng.randrange(-2 ** 31, 2 ** 31)
            ctx.set(dut.w.en, wen)
            ctx.set(dut.w.pair, pair)
            ctx.set(dut.w.addr, wa)
            ctx.set(dut.w.data, d0)
            ctx.set(dut.w.data1, d1)
            await ctx.tick()
            for p, (e0, e1) in exp.items():
                got = (s32(ctx.get(getattr(dut, p).data)), s32(ctx.get(getattr(dut, p).data1)))
                if got != (e0, e1):
                    bad.append((p, reads[p], got, (e0, e1)))
            if wen:
                ref[wa] = d0
                if pair:
                    ref[(wa + 1) % DEPTH] = d1
    run_simulation(dut, [tb], vcd=False, max_cycles=cycles + 10)
    assert not bad, bad[:5]


def test_banked_scratchpad_refuses_odd_depth():
    for depth in (0, 1, 7):
        with pytest.raises(ValueError, match=f"depth={depth} must be even"):
            BankedScratchpad(depth)
