"""PartialRowAssembler vs spec.partial.PartialRow: random partial rows (m, l, o) as their 2d+4
scratchpad words (the host's ``program.partial_words``) come out as {m, l, o[d]} beats, under
random gaps and back-pressure."""
from hypothesis import given, settings, strategies as st

from mcf_fpga.hdl.compute.partial_row_assembler import PartialRowAssembler
from mcf_fpga.hdl.compute.program import partial_words
from mcf_fpga.sim.kit import StreamSink, StreamSource, run_simulation
from mcf_fpga.spec.numerics import ACC_BITS

D = 4
acc = st.integers(-2 ** (ACC_BITS - 1), 2 ** (ACC_BITS - 1) - 1)
rows_st = st.lists(st.tuples(st.integers(-2 ** 31, 2 ** 31 - 1), st.integers(0, 2 ** ACC_BITS - 1),
                             st.lists(acc, min_size=D, max_size=D)), min_size=1, max_size=3)


def signed(v, bits):
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


@given(rows=rows_st, seed=st.integers(0, 2 ** 16), vp=st.sampled_from([1.0, 0.5]),
       rp=st.sampled_from([1.0, 0.3]))
@settings(max_examples=20, deadline=None)
def test_assembler_matches_partial_rows(rows, seed, vp, rp):
    dut = PartialRowAssembler(D)
    words = [w for m_, l_, o_ in rows for w in partial_words(m_, l_, o_)]
    src = StreamSource(dut.word, seed=seed, valid_prob=vp)
    snk = StreamSink(dut.row, seed=seed + 1, ready_prob=rp)
    out = {}

    async def send(ctx):
        await src.send(ctx, [{"data": w} for w in words])

    async def rx(ctx):
        out["rows"] = await snk.collect(ctx, len(rows))
    run_simulation(dut, [send, rx], vcd=False, max_cycles=3000)
    got = [(signed(r["m"], 32), r["l"], [signed(r["o"] >> ACC_BITS * i & (2 ** ACC_BITS - 1), ACC_BITS)
                                         for i in range(D)]) for r in out["rows"]]
    assert got == [(m_, l_, o_) for m_, l_, o_ in rows]
