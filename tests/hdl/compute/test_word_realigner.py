"""WordRealigner vs a Python model (the word stream as a queue): random beats of one or two words
come out in order, one or two a word-beat as the consumer asks, under random gaps, back-pressure
and ``en``; aligned pair beats pass at one a cycle; a lone word is held without ``word.ready``."""
import random

from hypothesis import given, settings, strategies as st

from mcf_fpga.hdl.compute.word_realigner import WordRealigner
from mcf_fpga.sim.kit import StreamSource, plain, run_simulation


def _model(beats, plan):
    """The words of ``beats`` (``(words, ...)``) in order, cut by ``plan`` (sizes 1 or 2)."""
    words = [x for b in beats for x in b]
    out, i = [], 0
    for k in plan:
        out.append(tuple(words[i:i + k]))
        i += k
    return out


def _plan(rng, n):
    """Word-beat sizes (1 or 2) summing to ``n``."""
    plan = []
    while n:
        k = 2 if n >= 2 and rng.random() < 0.6 else 1
        plan.append(k)
        n -= k
    return plan


@given(beats=st.lists(st.lists(st.integers(0, 2 ** 32 - 1), min_size=1, max_size=2), min_size=1, max_size=10),
       seed=st.integers(0, 2 ** 16), vp=st.sampled_from([1.0, 0.5]), rp=st.sampled_from([1.0, 0.4]),
       ep=st.sampled_from([1.0, 0.7]))
@settings(max_examples=40, deadline=None)
def test_realigner_matches_model(beats, seed, vp, rp, ep):
    rng = random.Random(seed)
    plan = _plan(rng, sum(map(len, beats)))
    dut = WordRealigner()
    src = StreamSource(dut.beat, seed=seed, valid_prob=vp)
    got = []

    async def send(ctx):
        await src.send(ctx, [{"data": b[0], "data1": b[-1] if len(b) == 2 else rng.getrandbits(32),
                              "two": len(b) == 2} for b in beats])

    async def en(ctx):
        while True:
            ctx.set(dut.en, rng.random() < ep)
            await ctx.tick()

    async def rx(ctx):
        w = dut.word
        for k in plan:
            ctx.set(dut.pair, k == 2)
            while True:
                ctx.set(w.ready, rng.random() < rp)
                _, _, v, r, p = await ctx.tick().sample(w.valid, w.ready, w.payload)
                if v and r:
                    p = plain(p)
                    got.append((p["data"], p["data1"])[:k])
                    break
        ctx.set(w.ready, 0)
    # ``word`` is offered only while ``en``, its size by ``pair``: no free-standing stream contract
    run_simulation(dut, [send, rx], background=[en], vcd=False, max_cycles=3000, check_streams=False)
    assert got == _model(beats, plan)


def test_pair_beats_pass_one_a_cycle_and_a_lone_word_is_held():
    """Pair mode on beats of two: a word-beat every cycle (both sides willing). A lone word (a beat
    of one) is taken into the hold with ``word.ready`` low, and leaves first, with the next beat's
    first word."""
    dut = WordRealigner()
    res = {}

    async def tb(ctx):
        ctx.set(dut.en, 1)
        ctx.set(dut.pair, 1)
        ctx.set(dut.word.ready, 1)
        b = dut.beat
        out = []
        for k in range(4):                       # 4 beats of two: 4 word-beats in 4 cycles
            ctx.set(b.payload, {"data": 2 * k, "data1": 2 * k + 1, "two": 1})
            ctx.set(b.valid, 1)
            assert ctx.get(b.ready) and ctx.get(dut.word.valid)
            out.append(plain(ctx.get(dut.word.payload)))
            await ctx.tick()
        ctx.set(dut.word.ready, 0)               # a lone word: held although word.ready is low
        ctx.set(b.payload, {"data": 100, "data1": 0, "two": 0})
        res["lone_taken"] = ctx.get(b.ready) and not ctx.get(dut.word.valid)
        await ctx.tick()
        ctx.set(b.payload, {"data": 101, "data1": 102, "two": 1})
        res["held_waits"] = ctx.get(dut.word.valid) and not ctx.get(b.ready)
        ctx.set(dut.word.ready, 1)
        out.append(plain(ctx.get(dut.word.payload)))    # 100 (held) with 101; 102 is held next
        await ctx.tick()
        ctx.set(b.valid, 0)
        ctx.set(dut.pair, 0)
        out.append(plain(ctx.get(dut.word.payload)))    # 102, alone
        res["tail_valid"] = ctx.get(dut.word.valid)
        await ctx.tick()
        res["empty"] = not ctx.get(dut.word.valid)
        res["out"] = out
    run_simulation(dut, [tb], vcd=False, check_streams=False)
    assert [(o["data"], o["data1"]) for o in res["out"][:4]] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert res["lone_taken"] and res["held_waits"] and res["tail_valid"] and res["empty"]
    assert (res["out"][4]["data"], res["out"][4]["data1"]) == (100, 101)
    assert res["out"][5]["data"] == 102


def test_no_beat_taken_while_disabled():
    dut = WordRealigner()
    seen = []

    async def tb(ctx):
        ctx.set(dut.beat.valid, 1)
        ctx.set(dut.word.ready, 1)
        for en, pair in ((0, 0), (0, 1), (1, 0)):
            ctx.set(dut.en, en)
            ctx.set(dut.pair, pair)
            seen.append(ctx.get(dut.beat.ready))
            await ctx.tick()
    run_simulation(dut, [tb], vcd=False)
    assert seen == [0, 0, 1]
