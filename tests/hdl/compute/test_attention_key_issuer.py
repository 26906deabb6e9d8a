"""KeyIssuer alone against a Python walk of the block table: with random block lengths, random
``go`` gaps and ``clear`` at random points, every issue is (block b, key j, row key z) in
order, with ``first`` / ``last`` / ``blk_last`` / ``two`` as the table says; step 2 issues keys
j, j+1 of one block per ``go`` (a block's odd last key alone)."""
import random

from hypothesis import given, settings, strategies as st

from mcf_fpga.hdl.compute.attention_key_issuer import KeyIssuer
from mcf_fpga.sim.kit import run_simulation


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2 ** 16), lens=st.lists(st.integers(1, 5), min_size=1, max_size=4),
       p_go=st.floats(0.3, 1), p_clear=st.floats(0, 0.1), step=st.sampled_from([1, 2]))
def test_keys_walk_the_block_table(seed, lens, p_go, p_clear, step):
    dut = KeyIssuer(aw=5, pos_bits=8, z_max=32, step=step)
    rng = random.Random(seed)
    table = [{"addr": rng.randrange(32), "len": n, "pos": rng.randrange(256), "void": rng.randint(0, 1)}
             for n in lens]

    async def tb(ctx):
        ctx.set(dut.nblk, len(lens))
        b = j = z = 0                                   # the model
        for _ in range(4 * sum(lens) + 10):
            ctx.set(dut.entry, table[b] if b < len(table) else {"addr": 0, "len": 1, "pos": 0, "void": 0})
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
