"""SoftmaxFold (hdl/nic/softmax_fold.py) against golden.nic.reduce_payloads(SOFTMAX_MERGE): the
testbench sequences it as the reduction engine does (the scale pass over every src's m word,
keeping the running max, then one left fold per further word) over random partials,
including empty ones (M_EMPTY) and far-apart maxima; the result words equal golden's."""
import random

from hypothesis import given, settings, strategies as st

from mcf_fpga.golden.nic import encode_partial, reduce_payloads
from mcf_fpga.spec.meta import MetaOp, ReduceOp
from mcf_fpga.spec.numerics import M_EMPTY
from mcf_fpga.hdl.nic.softmax_fold import SoftmaxFold
from mcf_fpga.sim.kit import run_simulation

MASK = (1 << 64) - 1


def partial(rng):
    if rng.random() < 0.15:
        return encode_partial(M_EMPTY, 0, [0] * 3)
    m = rng.choice([0, 5, -2 ** 16, 2 ** 16 - 1, rng.randrange(-2 ** 20, 2 ** 20)])
    return encode_partial(m, rng.randrange(0, 2 ** 36),
                          [rng.choice([-2 ** 36, 2 ** 36 - 1, rng.randrange(-99, 99)]) for _ in range(3)])


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 16), seed=st.integers(0, 2**32 - 1))
def test_fold_matches_golden_merge(n, seed):
    rng = random.Random(seed)
    parts = [partial(rng) for _ in range(n)]
    words = [[int.from_bytes(p[i:i + 8], "little") for i in range(0, len(p), 8)] for p in parts]
    dut = SoftmaxFold(16)
    out = []

    async def tb(ctx):
        run_m = 0
        for pos in range(n):                      # scales: word 0 (m) of every src
            x = words[pos][0]
            for sig, v in ((dut.x, x), (dut.pos, pos), (dut.run_m, run_m), (dut.store, pos != 0)):
                ctx.set(sig, v)
            mx = (x & 0xFFFFFFFF) - ((x & 0x80000000) << 1)
            rm = run_m - ((run_m & 0x80000000) << 1)
            assert ctx.get(dut.bigger) == (mx > rm)
            if pos == 0 or mx > rm:
                run_m = mx & 0xFFFFFFFF
            await ctx.tick()
        ctx.set(dut.store, 0)
        out.append((run_m - ((run_m & 0x80000000) << 1)) & MASK)   # M, sign-extended
        for w in range(1, len(words[0])):
            acc = 0
            for pos in range(n):
                for sig, v in ((dut.x, words[pos][w]), (dut.pos, pos), (dut.acc, acc)):
                    ctx.set(sig, v)
                acc = ctx.get(dut.folded)
                await ctx.tick()
            out.append(acc)

    run_simulation(dut, [tb])
    want = reduce_payloads(ReduceOp.SOFTMAX_MERGE, parts, op=MetaOp.PARTIAL_STATE)
    assert b"".join(w.to_bytes(8, "little") for w in out) == want
