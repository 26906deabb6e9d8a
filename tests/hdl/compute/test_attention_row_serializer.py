"""AttentionRowSerializer vs the host twins: a partial row (m, l, o) comes out as
``program.partial_words`` (spec.partial.PartialRow), a final row as y[i] = o[i][:32], under random
gaps and back-pressure."""
import pytest
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
       rp=st.sampled_from([1.0, 0.4]), pairs=st.sampled_from([None, 0, 1]))
@settings(max_examples=30, deadline=None)
def test_serializer_matches_partial_words(rows, final, seed, vp, rp, pairs):
    """``pairs``: None, the one-word serializer; 0 / 1, the ``pairs=True`` one with ``pair`` low
    (one word a beat) or high (words 2k, 2k + 1 a beat, half the beats)."""
    dut = AttentionRowSerializer(D, pairs=pairs is not None)
    src = StreamSource(dut.row, seed=seed, valid_prob=vp)
    snk = StreamSink(dut.word, seed=seed + 1, ready_prob=rp)
    exp = [w for m_, l_, o_ in rows for w in ([s32(x) for x in o_] if final else partial_words(m_, l_, o_))]
    out = {}

    n_beats = len(exp) // 2 if pairs else len(exp)

    async def send(ctx):
        ctx.set(dut.final, final)
        if pairs is not None:
            ctx.set(dut.pair, pairs)
        await src.send(ctx, [{"m": m_, "l": l_, "o": list(o_), "last": 0} for m_, l_, o_ in rows])

    async def rx(ctx):
        out["words"] = await snk.collect(ctx, n_beats)
    run_simulation(dut, [send, rx], vcd=False, max_cycles=3000)
    got = [s32(x) for w in out["words"] for x in ((w["data"], w["data1"]) if pairs else (w["data"],))]
    assert got == exp


def test_pairs_needs_an_even_d():
    with pytest.raises(ValueError, match="d=3 must be even"):
        AttentionRowSerializer(3, pairs=True)
