"""LanePacker vs a Python model: random words in, beats of n byte lanes out (the low byte of each
word, the last word's exponent), under random input gaps and output back-pressure; with ``pair``,
two words a beat (an even n)."""
from hypothesis import given, settings, strategies as st

from mcf_fpga.hdl.compute.lane_packer import LanePacker
from mcf_fpga.sim.kit import StreamSink, StreamSource, run_simulation

LANES = 6


@given(n=st.integers(1, LANES), beats=st.integers(1, 5), seed=st.integers(0, 2 ** 16),
       vp=st.sampled_from([1.0, 0.5]), rp=st.sampled_from([1.0, 0.4]), data=st.data(),
       pairs=st.sampled_from([0, 1, 2]))
@settings(max_examples=25, deadline=None)
def test_packer_matches_model(n, beats, seed, vp, rp, data, pairs):
    """pairs 0: the one-word packer; 1: the two-word packer without ``pair``; 2: with it."""
    if pairs == 2:
        n = 2 * max(1, n // 2)
    words = data.draw(st.lists(st.tuples(st.integers(0, 255), st.integers(-128, 127)),
                               min_size=n * beats, max_size=n * beats))
    dut = LanePacker(LANES, pairs=bool(pairs))
    src = StreamSource(dut.word, seed=seed, valid_prob=vp)
    snk = StreamSink(dut.beat, seed=seed + 1, ready_prob=rp)
    out = {}

    async def send(ctx):
        ctx.set(dut.n, n)
        if pairs == 2:           # word k of a pair beat: data = word 2k, data1 = 2k + 1, e the second's
            ctx.set(dut.pair, 1)
            await src.send(ctx, [{"data": words[k][0], "data1": words[k + 1][0], "e": words[k + 1][1]}
                                 for k in range(0, len(words), 2)])
            return
        await src.send(ctx, [{"data": w, "e": e} for w, e in words])

    async def rx(ctx):
        out["beats"] = await snk.collect(ctx, beats)
        out["count"] = ctx.get(dut.count)
    run_simulation(dut, [send, rx], vcd=False, max_cycles=2000)
    mask = (1 << 8 * n) - 1
    exp = [(sum(w << 8 * i for i, (w, _) in enumerate(words[k * n:(k + 1) * n])), words[(k + 1) * n - 1][1])
           for k in range(beats)]
    got = [(b["data"] & mask, b["e"] - 256 * (b["e"] >= 128)) for b in out["beats"]]
    assert got == exp
    assert out["count"] == 0


def test_clear_restarts_the_beat():
    """``clear`` drops a half-filled beat: the next n words make the next beat."""
    dut = LanePacker(4)
    got = []

    async def tb(ctx):
        ctx.set(dut.n, 2)
        ctx.set(dut.word.valid, 1)
        ctx.set(dut.word.payload.data, 0x11)
        await ctx.tick()
        ctx.set(dut.word.valid, 0)
        ctx.set(dut.clear, 1)
        await ctx.tick()
        ctx.set(dut.clear, 0)
        assert ctx.get(dut.count) == 0
        for w in (0x22, 0x33):
            ctx.set(dut.word.valid, 1)
            ctx.set(dut.word.payload.data, w)
            await ctx.tick()
        ctx.set(dut.word.valid, 0)
        got.append((ctx.get(dut.beat.valid), ctx.get(dut.beat.payload.data) & 0xFFFF))
    run_simulation(dut, [tb], vcd=False)
    assert got == [(1, 0x3322)]
