"""AttentionRowSerializer vs the host twins: a partial row (m, l, o) comes out as
``program.partial_words`` (spec.partial.PartialRow), a final row as y[i] = o[i][:32], under random
gaps and back-pressure."""
from hypothesis import given, settings, strategies as st

from mcf_fpga.hdl.compute.attention_row_serializer import AttentionRowSerializer
from mcf_fpga.hdl.compute.program import partial_words
from mcf_fpga.sim.kit import StreamSink, StreamSource, run_simulation
from mcf_fpga.spec.numerics import ACC_BITS

D = 4
acc = st.integers(-2 ** (ACC_BITS - 1), 2 ** (ACC_BITS - 1) - 1)
rows_st = st.lists(st.tuples(st.integers(-2 ** 31, 2 ** 31 - 1), st.integers(0, 2 ** ACC_BITS - 1),
                             st.lists(acc, min_size=D, max_size=D)), min_size=1, max_size=3)


def s32(v):
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >> 31 else v


@given(rows=rows_st, final=st.booleans(), seed=st.integers(0, 2 ** 16), vp=st.sampled_from([1.0, 0.5]),
       rp=st.sampled_from([1.0, 0.4]))
@settings(max_examples=20, deadline=None)
def test_serializer_matches_partial_words(rows, final, seed, vp, rp):
    dut = AttentionRowSerializer(D)
    src = StreamSource(dut.row, seed=seed, valid_prob=vp)
    snk = StreamSink(dut.word, seed=seed + 1, ready_prob=rp)
    exp = [w for m_, l_, o_ in rows for w in ([s32(x) for x in o_] if final else partial_words(m_, l_, o_))]
    out = {}

    async def send(ctx):
        ctx.set(dut.final, final)
        await src.send(ctx, [{"m": m_, "l": l_, "o": list(o_), "last": 0} for m_, l_, o_ in rows])

    async def rx(ctx):
        out["words"] = await snk.collect(ctx, len(exp))
    run_simulation(dut, [send, rx], vcd=False, max_cycles=3000)
    assert [s32(w["data"]) for w in out["words"]] == exp
