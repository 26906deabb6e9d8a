"""KeyIssuer alone against a Python walk of the block table: with random block lengths, random
``go`` gaps and ``clear`` at random points, every issued key is (block b, key j, row key z) in
order, with ``first`` / ``last`` / ``blk_last`` as the table says."""
import random

from hypothesis import given, settings, strategies as st

from mcf_fpga.hdl.compute.attention_key_issuer import KeyIssuer
from mcf_fpga.sim.kit import run_simulation


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2 ** 16), lens=st.lists(st.integers(1, 5), min_size=1, max_size=4),
       p_go=st.floats(0.3, 1), p_clear=st.floats(0, 0.1))
def test_keys_walk_the_block_table(seed, lens, p_go, p_clear):
    dut = KeyIssuer(aw=5, pos_bits=8, z_max=32)
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
            got = tuple(ctx.get(s) for s in (dut.b, dut.j, dut.z, dut.first, dut.last, dut.blk_last))
            if b < len(lens):
                assert got == (b, j, z, int(j == 0), int(j == lens[b] - 1), int(b == len(lens) - 1))
            await ctx.tick()
            if clear:
                b = j = z = 0
            elif go:
                j, z = j + 1, z + 1
                if j == lens[b]:
                    b, j = b + 1, 0
            if b == len(lens) and rng.random() < 0.3:   # walked the job: start the next row
                ctx.set(dut.clear, 1)
                await ctx.tick()
                ctx.set(dut.clear, 0)
                b = j = z = 0

    run_simulation(dut, [tb])
