"""ValueUnpacker vs a Python model of SPW's unpack (spec.instr SpwFlags.packed): each word yields
its 32/bits values sign-extended, low first, and is consumed with the last, under random gaps
and back-pressure."""
from hypothesis import given, settings, strategies as st

from mcf_fpga.hdl.compute.value_unpacker import ValueUnpacker
from mcf_fpga.sim.kit import StreamSink, StreamSource, run_simulation


@given(bits=st.sampled_from([4, 8]), words=st.lists(st.integers(0, 2 ** 32 - 1), min_size=1, max_size=4),
       seed=st.integers(0, 2 ** 16), vp=st.sampled_from([1.0, 0.5]), rp=st.sampled_from([1.0, 0.4]))
@settings(max_examples=25, deadline=None)
def test_unpacker_matches_model(bits, words, seed, vp, rp):
    per = 32 // bits
    dut = ValueUnpacker()
    src = StreamSource(dut.packed, seed=seed, valid_prob=vp)
    snk = StreamSink(dut.value, seed=seed + 1, ready_prob=rp)
    out = {}

    async def send(ctx):
        ctx.set(dut.bits, bits)
        await src.send(ctx, [{"data": w} for w in words])
        out["sent"] = True                   # every word consumed

    async def rx(ctx):
        out["vals"] = await snk.collect(ctx, per * len(words))
    run_simulation(dut, [send, rx], vcd=False, max_cycles=2000)

    def sx(v):
        return v - (1 << bits) if v >> (bits - 1) else v
    exp = [sx(w >> bits * j & ((1 << bits) - 1)) for w in words for j in range(per)]
    assert [v["data"] for v in out["vals"]] == exp          # a signed field: read as signed
    assert out["sent"]
