"""BeatSplitter vs a Python model: random 128-bit beats come out as their 32-bit words, low word
first, ``last`` on the final word of a ``last`` beat, under random gaps and back-pressure."""
from hypothesis import given, settings, strategies as st

from mcf_fpga.hdl.compute.beat_splitter import BeatSplitter
from mcf_fpga.sim.kit import StreamSink, StreamSource, run_simulation


@given(beats=st.lists(st.tuples(st.integers(0, 2 ** 128 - 1), st.booleans()), min_size=1, max_size=6),
       seed=st.integers(0, 2 ** 16), vp=st.sampled_from([1.0, 0.5]), rp=st.sampled_from([1.0, 0.4]))
@settings(max_examples=25, deadline=None)
def test_splitter_matches_model(beats, seed, vp, rp):
    dut = BeatSplitter(128)
    src = StreamSource(dut.beat, seed=seed, valid_prob=vp)
    snk = StreamSink(dut.word, seed=seed + 1, ready_prob=rp)
    out = {}

    async def send(ctx):
        ctx.set(dut.en, 1)
        await src.send(ctx, [{"data": d, "last": int(last)} for d, last in beats])

    async def rx(ctx):
        out["words"] = await snk.collect(ctx, 4 * len(beats))
    run_simulation(dut, [send, rx], vcd=False, max_cycles=2000)
    exp = [{"data": d >> 32 * k & 0xFFFFFFFF, "last": int(last and k == 3)} for d, last in beats for k in range(4)]
    assert out["words"] == exp


def test_no_beat_taken_while_disabled():
    dut = BeatSplitter(64)
    seen = []

    async def tb(ctx):
        ctx.set(dut.beat.valid, 1)
        for en in (0, 0, 1):
            ctx.set(dut.en, en)
            seen.append(ctx.get(dut.beat.ready))
            await ctx.tick()
    run_simulation(dut, [tb], vcd=False)
    assert seen == [0, 0, 1]


@given(width=st.sampled_from([64, 128]), n=st.integers(1, 5), seed=st.integers(0, 2 ** 16))
@settings(max_examples=15, deadline=None)
def test_ready_is_registered_and_no_bubble(width, n, seed):
    """``beat.ready`` is the same whatever ``word.ready`` is in the cycle (no combinational path
    from the word side to the beat side), and with both sides always willing the words leave one a
    cycle: n beats in n * width/32 cycles after the first is taken."""
    import random
    rng = random.Random(seed)
    n_w = width // 32
    dut = BeatSplitter(width)
    beats = [rng.getrandbits(width) for _ in range(n)]
    res = {"words": [], "cycles": None}

    async def tb(ctx):
        ctx.set(dut.en, 1)
        i, cyc, first = 0, 0, None
        while len(res["words"]) < n * n_w and cyc < 10 * n * n_w:
            ctx.set(dut.beat.valid, i < n)
            ctx.set(dut.beat.payload, {"data": beats[i] if i < n else 0, "last": 0})
            seen = set()
            for wr in (0, 1, rng.getrandbits(1)):
                ctx.set(dut.word.ready, wr)
                seen.add(ctx.get(dut.beat.ready))
            assert len(seen) == 1, "beat.ready follows word.ready"
            ctx.set(dut.word.ready, 1)
            if ctx.get(dut.word.valid):
                res["words"].append(ctx.get(dut.word.payload.data))
            if i < n and ctx.get(dut.beat.ready):
                first = cyc if first is None else first
                i += 1
            await ctx.tick()
            cyc += 1
        res["cycles"] = cyc - first
    run_simulation(dut, [tb], vcd=False, max_cycles=1000)
    assert res["words"] == [b >> 32 * k & 0xFFFFFFFF for b in beats for k in range(n_w)]
    assert res["cycles"] == n * n_w + 1
