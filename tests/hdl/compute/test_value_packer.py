"""ValuePacker vs a Python model of EMIT's pack (spec.instr EmitFlags.packed): 32/bits source
words -> one word, value j at bits bits*j, ``last`` from the final value's word, under random
gaps and back-pressure."""
from hypothesis import given, settings, strategies as st

from mcf_fpga.hdl.compute.value_packer import ValuePacker
from mcf_fpga.sim.kit import StreamSink, StreamSource, run_simulation


@given(bits=st.sampled_from([4, 8]), n_words=st.integers(1, 4), seed=st.integers(0, 2 ** 16),
       vp=st.sampled_from([1.0, 0.5]), rp=st.sampled_from([1.0, 0.4]), data=st.data())
@settings(max_examples=25, deadline=None)
def test_packer_matches_model(bits, n_words, seed, vp, rp, data):
    per = 32 // bits
    vals = data.draw(st.lists(st.integers(0, 2 ** 32 - 1), min_size=per * n_words, max_size=per * n_words))
    lasts = [int(i == len(vals) - 1) for i in range(len(vals))]
    dut = ValuePacker()
    src = StreamSource(dut.word, seed=seed, valid_prob=vp)
    snk = StreamSink(dut.packed, seed=seed + 1, ready_prob=rp)
    out = {}

    async def send(ctx):
        ctx.set(dut.bits, bits)
        await src.send(ctx, [{"data": v, "last": la} for v, la in zip(vals, lasts)])

    async def rx(ctx):
        out["words"] = await snk.collect(ctx, n_words)
    run_simulation(dut, [send, rx], vcd=False, max_cycles=2000)
    mask = (1 << bits) - 1
    exp = [{"data": sum((vals[w * per + j] & mask) << bits * j for j in range(per)),
            "last": lasts[(w + 1) * per - 1]} for w in range(n_words)]
    assert out["words"] == exp
