"""GemmRequantizer alone against golden: y[n] = sat32(rshift_round(acc[n], we[n] + xe - FA)
+ bias[n]) (``golden.numerics``, the tail of ``QuantLinear.__call__``), rows in order with
``last`` = tl, for every lane count and both pipelines (1 and 4 stages), random accumulators (48-bit extremes under right shifts), random valid gaps
on ``row`` and back-pressure on ``y``; ``tile_done`` once per row with tl."""
import random

from hypothesis import example, given, settings, strategies as st

from mcf_fpga.golden.numerics import rshift_round, sat
from mcf_fpga.spec.numerics import FA, ACC_BITS
from mcf_fpga.hdl.compute.gemm_requant import GemmRequantizer
from mcf_fpga.sim.kit import StreamSource, StreamSink, run_simulation


def unpack(x, n, w=32):
    """n signed w-bit lanes of the integer x, lane 0 at bit 0."""
    v = [(x >> (w * i)) & ((1 << w) - 1) for i in range(n)]
    return [a - (1 << w) if a >> (w - 1) else a for a in v]


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2 ** 16), shape=st.sampled_from([(4, 1), (4, 2), (4, 4), (6, 3), (2, 1)]),
       fifo_depth=st.integers(1, 4), n=st.integers(1, 8), vp=st.floats(0.3, 1), rp=st.floats(0.2, 1),
       stages=st.sampled_from([1, 4]))
# the pipeline held by a full FIFO while the next row waits (one group per row: a row at every stage)
@example(seed=0, shape=(4, 4), fifo_depth=1, n=8, vp=1.0, rp=0.2, stages=4)
def test_rows_match_golden(seed, shape, fifo_depth, n, vp, rp, stages):
    pn, lanes = shape
    dut = GemmRequantizer(pn, lanes, fifo_depth, stages=stages)
    rng = random.Random(seed)
    lim = 1 << (ACC_BITS - 1)
    rows, want = [], []
    for _ in range(n):
        xe = rng.randint(-20, 20)
        # shifts from -20 (a left shift: |acc| < 2**40 keeps golden's int64 exact) to 60
        we = [rng.randint(FA - xe - 20, FA - xe + 60) for _ in range(pn)]
        acc = [rng.choice([rng.randint(-2 ** 40, 2 ** 40), rng.randint(-2 ** 20, 2 ** 20)]
                          if we[i] + xe - FA < 0 else [rng.randint(-lim, lim - 1), -lim, lim - 1])
               for i in range(pn)]
        bias = [rng.randint(-2 ** 31, 2 ** 31 - 1) for _ in range(pn)]
        tl = rng.randint(0, 1)
        rows.append({"acc": acc, "we": we, "bias": bias, "xe": xe, "tl": tl})
        y = [int(sat(rshift_round(acc[i], we[i] + xe - FA) + bias[i], 32)) for i in range(pn)]
        want.append({"data": y, "last": tl})
    src = StreamSource(dut.row, seed=seed, valid_prob=vp)
    sink = StreamSink(dut.y, seed=seed + 1, ready_prob=rp)
    done = []

    async def tb(ctx):
        await src.send(ctx, rows)

    async def rx(ctx):
        got = await sink.collect(ctx, n)
        got = [{"data": unpack(g["data"], pn), "last": g["last"]} for g in got]
        assert got == want, (got, want)

    async def watch(ctx):
        async for _, _, t in ctx.tick().sample(dut.tile_done):
            done.append(t)

    run_simulation(dut, [tb, rx], background=[watch], max_cycles=20_000)   # a lost row: fail fast
    assert sum(done) == sum(r["tl"] for r in rows)
