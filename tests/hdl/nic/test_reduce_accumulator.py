"""ReduceAccumulator (hdl/nic/reduce_accumulator.py) against golden.nic.reduce_payloads: after a
random sequence of word updates (first / SUM / MAX, 32- or 64-bit lanes, random words and
addresses, random idle cycles), every stored word equals the golden reduction of what was
written to it, and the read port returns it."""
import random

from hypothesis import given, settings, strategies as st

from mcf_fpga.golden.nic import reduce_payloads
from mcf_fpga.spec.meta import MetaOp, ReduceOp
from mcf_fpga.hdl.nic.reduce_accumulator import ReduceAccumulator
from mcf_fpga.sim.kit import run_simulation


def word(x):
    return x.to_bytes(8, "little")


@settings(max_examples=15, deadline=None)
@given(contexts=st.integers(1, 3), wbits=st.integers(1, 3), seed=st.integers(0, 2**32 - 1))
def test_updates_match_golden_reduction(contexts, wbits, seed):
    dut = ReduceAccumulator(contexts, wbits)
    rng = random.Random(seed)
    depth = contexts << wbits
    mem = {}                           # golden contents of the written words

    async def tb(ctx):
        prev = None
        for _ in range(150):
            if rng.random() < 0.7:
                addr = rng.choice([a for a in range(depth) if a != prev] or [0])
                first = addr not in mem or rng.random() < 0.1
                is_sum, wide = rng.randrange(2), rng.randrange(2)
                x = rng.choice([rng.getrandbits(64), 0, 1 << 63, (1 << 64) - 1, 0x7FFFFFFF_80000000])
                store = rng.random() < 0.9
                for sig, v in ((dut.upd, 1), (dut.upd_store, store), (dut.upd_first, first), (dut.upd_sum, is_sum),
                               (dut.upd_wide, wide), (dut.upd_addr, addr), (dut.upd_data, x),
                               (dut.rd_en, 1), (dut.rd_addr, addr)):
                    ctx.set(sig, v)
                if store:
                    op = MetaOp.PARTIAL_STATE if wide else MetaOp.REDUCTION
                    rop = ReduceOp.SUM if is_sum else ReduceOp.MAX
                    mem[addr] = x if first else int.from_bytes(
                        reduce_payloads(rop, [word(mem[addr]), word(x)], op=op), "little")
                prev = addr
            else:
                ctx.set(dut.upd, 0)
                ctx.set(dut.rd_en, 0)
                prev = None
            await ctx.tick()
        ctx.set(dut.upd, 0)
        await ctx.tick()               # the last write lands
        for addr, want in mem.items():
            ctx.set(dut.rd_en, 1)
            ctx.set(dut.rd_addr, addr)
            await ctx.tick()
            ctx.set(dut.rd_en, 0)
            assert ctx.get(dut.rd_data) == want, addr
            await ctx.tick()
            assert ctx.get(dut.rd_data) == want       # held while rd_en is low

    run_simulation(dut, [tb])
    assert mem
