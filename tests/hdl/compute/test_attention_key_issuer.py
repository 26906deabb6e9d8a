"""KeyIssuer alone against a Python walk of the block table: with random block lengths, random
``go`` gaps and ``clear`` at random points, every issue is (block b, key j, row key z) in
order, with ``first`` / ``last`` / ``blk_last`` / ``two`` as the table says; step 2 issues keys
j, j+1 of one block per ``go`` (a block's odd last key alone). The look-ahead issuer (flags from
registers, ``lookahead=True``) walks the same, after the ``clear`` that starts every row."""
import random

from hypothesis import example, given, settings, strategies as st

from mcf_fpga.hdl.compute.attention_key_issuer import KeyIssuer
from mcf_fpga.sim.kit import run_simulation


@settings(max_examples=20, deadline=None)
@example(seed=1, lens=[3], p_go=1.0, p_clear=0.0, step=1, lookahead=True)     # one block: blk_last at once
@example(seed=2, lens=[2, 5, 1], p_go=0.7, p_clear=0.05, step=2, lookahead=True)
@given(seed=st.integers(0, 2 ** 16), lens=st.lists(st.integers(1, 5), min_size=1, max_size=4),
       p_go=st.floats(0.3, 1), p_clear=st.floats(0, 0.1), step=st.sampled_from([1, 2]), lookahead=st.booleans())
def test_keys_walk_the_block_table(seed, lens, p_go, p_clear, step, lookahead):
    dut = KeyIssuer(aw=5, pos_bits=8, z_max=32, step=step, lookahead=lookahead)
    rng = random.Random(seed)
    table = [{"addr": rng.randrange(32), "len": n, "pos": rng.randrange(256), "void": rng.randint(0, 1)}
             for n in lens]

    async def tb(ctx):
        ctx.set(dut.nblk_m1 if lookahead else dut.nblk, len(lens) - 1 if lookahead else len(lens))
        junk = {"addr": 0, "len": rng.randrange(1, 6), "pos": 0, "void": 0}
        if lookahead:                                   # a row starts with a clear
            ctx.set(dut.len0, lens[0])
            ctx.set(dut.clear, 1)
            await ctx.tick()
            ctx.set(dut.clear, 0)
        b = j = z = 0                                   # the model
        for _ in range(4 * sum(lens) + 10):
            ctx.set(dut.entry, table[b] if b < len(table) else junk)
            if lookahead:
                assert ctx.get(dut.b_next) == b + 1
                ctx.set(dut.entry_next, table[b + 1] if b + 1 < len(table) else junk)
            go = b < len(lens) and rng.random() < p_go
            clear = rng.random() < p_clear
            ctx.set(dut.go, go)
            ctx.set(dut.clear, clear)
            got = tuple(ctx.get(s) for s in (dut.b, dut.j, dut.z, dut.first, dut.last, dut.blk_last, dut.two))
            n = min(step, lens[b] - j) if b < len(lens) else 0         # keys of this issue
            if b < len(lens):
                assert got == (b, j, z, int(j == 0), int(j + n == lens[b]), int(b == len(lens) - 1), int(n == 2))
            await ctx.tick()
            if clear:
                b = j = z = 0
            elif go:
                j, z = j + n, z + n
                if j == lens[b]:
                    b, j = b + 1, 0
            if b == len(lens) and rng.random() < 0.3:   # walked the job: start the next row
                ctx.set(dut.clear, 1)
                await ctx.tick()
                ctx.set(dut.clear, 0)
                b = j = z = 0

    run_simulation(dut, [tb])


def test_step_must_be_1_or_2():
    import pytest
    with pytest.raises(ValueError, match="step must be 1 or 2"):
        KeyIssuer(aw=5, pos_bits=8, z_max=32, step=3)
