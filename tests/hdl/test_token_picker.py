"""Token picker (mcf_fpga/hdl/token_picker.py) against golden.token_picker, bit for bit.

One testbench drives the events in order -- an arm is accepted (or found the queue full) before
the next word is offered, a word passes before the next event -- with random valid gaps on
``s_axis`` and ``arm`` and random back-pressure on ``m_axis``. The golden twin runs in lockstep:
every arm's acceptance must agree (an arm that finds the queue full stays offered while the words
run and is taken right after the word that makes room), ``picks``/``tokens``/``values`` after
every frame, and at the end every output and the passed words. Random slot counts and queue
depths; frames of 1..40 words with ties, extremes and random values; both modes (ARGMAX, and
PAIRS over (value, id) pairs with tied and extreme values); valid, SHORT, MISSED (passed, same
frame as a pick ahead, out of order), BAD_ARM (slot, n = 0, PAIRS with an odd n) and mid-frame
arms (PAIRS: also between a pair's two words); clears.
"""
import random
from collections import deque

import pytest
from amaranth import Shape
from hypothesis import event, given, settings, strategies as st

from mcf_fpga.golden import token_picker as golden
from mcf_fpga.golden.token_picker import signed32
from mcf_fpga.spec.token_picker import PickError, PickMode
from mcf_fpga.hdl.token_picker import TokenPicker, arm_layout
from mcf_fpga.sim.kit import plain, run_simulation

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")

M32 = 2 ** 32 - 1
VALUES = st.one_of(st.sampled_from([-2 ** 31, 2 ** 31 - 1, -1, 0, 1]), st.integers(-3, 3),
                   st.integers(-2 ** 31, 2 ** 31 - 1))


# ---------------------------------------------------------------- driving the hardware
def run_hw(events, *, slots=4, arm_depth=4, seed=0, word_prob=1.0, arm_prob=1.0, ready_prob=1.0):
    """Drive ``events`` (golden.run's format) through a TokenPicker with the golden twin in
    lockstep; assert they agree; returns ``(golden.Result, hw outputs dict)``."""
    dut = TokenPicker(slots, arm_depth)
    g = golden.TokenPicker(slots, arm_depth)
    rng = random.Random(seed)
    sink_rng = random.Random(seed + 1)
    passed, out = [], {}
    waited = []

    async def sink(ctx):
        while True:
            ctx.set(dut.m_axis.ready, sink_rng.random() < ready_prob)
            _, _, v, r, p = await ctx.tick().sample(dut.m_axis.valid, dut.m_axis.ready, dut.m_axis.payload)
            if v and r:
                passed.append((plain(p)["data"], plain(p)["last"]))

    def outputs(ctx):
        return {"tokens": [ctx.get(dut.tokens[i]) for i in range(slots)],
                "values": [ctx.get(dut.values[i]) for i in range(slots)],
                "picks": ctx.get(dut.picks), "errors": ctx.get(dut.errors),
                "error_cause": ctx.get(dut.error_cause)}

    def set_arm(ctx, a):
        for k, v in zip(("frame", "skip", "n", "slot", "mode"), (*a, 0)[:5]):
            ctx.set(dut.arm.payload[k], v)
        ctx.set(dut.arm.valid, 1)

    async def drive(ctx):
        waiting = deque()

        async def offer(a):
            """Offer arm ``a`` for one cycle (s_axis idle): accepted? Golden must agree."""
            set_arm(ctx, a)
            _, _, rdy = await ctx.tick().sample(dut.arm.ready)
            acc = g.arm(*a)
            assert bool(rdy) == acc, f"arm {a}: hardware ready={rdy}, golden accepted={acc}"
            return acc

        async def admit():
            while waiting and await offer(waiting[0]):
                waiting.popleft()
            if not waiting:
                ctx.set(dut.arm.valid, 0)
            else:
                set_arm(ctx, waiting[0])           # stays offered while the words run

        for i, ev in enumerate(events):
            if ev[0] == "arm":
                if waiting:
                    waiting.append(ev[1:])
                    waited.append(i)
                    continue
                while rng.random() >= arm_prob:
                    await ctx.tick()
                if not await offer(ev[1:]):
                    waiting.append(ev[1:])
                    waited.append(i)
                await admit()
            elif ev[0] == "word":
                while rng.random() >= word_prob:
                    await ctx.tick()
                ctx.set(dut.s_axis.payload.data, ev[1])
                ctx.set(dut.s_axis.payload.last, ev[2])
                ctx.set(dut.s_axis.valid, 1)
                while True:
                    _, _, r = await ctx.tick().sample(dut.s_axis.ready)
                    if r:
                        break
                ctx.set(dut.s_axis.valid, 0)
                g.word(ev[1], ev[2])
                if ev[2]:           # picks resolve at a frame's end, in order: compare
                    o = outputs(ctx)
                    assert (o["picks"], o["tokens"], o["values"]) == (g.picks, g.tokens, g.values), \
                        f"after event {i}: hardware {o}, golden picks={g.picks} tokens={g.tokens} values={g.values}"
                if waiting:
                    await admit()
            elif ev[0] == "clear":
                ctx.set(dut.clear, 1)
                await ctx.tick()
                ctx.set(dut.clear, 0)
                g.clear()
                await admit()
        await ctx.tick().repeat(3)
        out.update(outputs(ctx))

    n = len(events)
    bound = 200 + 40 * n / min(word_prob, arm_prob, ready_prob)
    run_simulation(dut, [drive], background=[sink], vcd=False, max_cycles=int(bound))
    want = golden.run(events, slots, arm_depth)
    # the lockstep twin and golden.run (its event-list form) agree; the hardware agrees with both
    assert (g.tokens, g.values, g.picks, g.errors, int(g.error_cause)) == \
        (want.tokens, want.values, want.picks, want.errors, want.error_cause)
    assert waited == want.waited
    assert out == {"tokens": want.tokens, "values": want.values, "picks": want.picks,
                   "errors": want.errors, "error_cause": want.error_cause}
    assert passed == want.words == [(e[1], e[2]) for e in events if e[0] == "word"]
    return want, out


# ---------------------------------------------------------------- property test
@st.composite
def scenarios(draw):
    slots = draw(st.sampled_from([1, 2, 3, 4, 16]))
    events, fc = [], 0                            # fc: the frame number since the last clear
    for _ in range(draw(st.integers(1, 7))):
        length = draw(st.integers(1, 40))
        vals = draw(st.lists(VALUES, min_size=length, max_size=length))
        tied = draw(st.booleans())       # a pair frame with tied values: words of parity 0 from a
        if tied:                         # small set, the others distinct ids
            vals = [draw(st.sampled_from([-2 ** 31, -1, 2, 2 ** 31 - 1])) if i % 2 == 0 else 0x1000 + i
                    for i in range(length)]

        def arm(kind):
            slot = draw(st.integers(0, slots - 1))
            mode = draw(st.sampled_from([PickMode.ARGMAX, PickMode.PAIRS]))
            pairs = mode == PickMode.PAIRS
            if kind == "valid":
                f = draw(st.sampled_from([fc] * 8 + [fc + 1, fc + 2]))
                if pairs and length >= 2:
                    skip = draw(st.integers(0, length - 2))
                    if tied and draw(st.integers(0, 3)):      # mostly pairs of (tied value, id)
                        skip -= skip % 2
                    return ("arm", f, skip, 2 * draw(st.integers(1, (length - skip) // 2)), slot, mode)
                skip = draw(st.integers(0, length - 1))
                return ("arm", f, skip, draw(st.integers(1, length - skip)), slot)
            if kind == "short":
                skip = draw(st.integers(0, length))
                n = length - skip + draw(st.sampled_from([1, 2, M32 - length]))
                return ("arm", fc, skip, n + (n % 2 if pairs and n < M32 else 0), slot, mode)
            if kind == "missed":
                return ("arm", draw(st.integers(0, max(0, fc - 1))) if fc else M32, 0, 2, slot, mode)
            if kind == "bad":
                odd = draw(st.sampled_from([1, 3, length - length % 2 + 1, M32]))
                bad = [(0, slot, mode)] + [(odd, slot, PickMode.PAIRS)] * 2 \
                    + ([(2, slots, mode), (1, 15, PickMode.ARGMAX)] if slots < 16 else [])
                return ("arm", fc, 0, *draw(st.sampled_from(bad)))
            return ("arm", draw(st.sampled_from([fc, fc, fc, M32])), draw(st.sampled_from([0, M32])),
                    draw(st.sampled_from([1, M32] if not pairs else [2, M32 - 1])), slot, mode)   # extremes
        kinds = st.sampled_from(["valid"] * 10 + ["short", "missed", "bad", "bad", "extreme"])
        for _ in range(draw(st.integers(0, 3))):
            events.append(arm(draw(kinds)))
        mid = draw(st.integers(0, 4 * length))            # sometimes arm mid-frame
        for i, v in enumerate(vals):
            if i == mid:
                events.append(arm("valid"))
            events.append(("word", v & M32, int(i == length - 1)))
        fc += 1
        if draw(st.integers(0, 11)) == 0:
            events.append(("clear",))
            fc = 0
    return slots, events


@settings(deadline=None)
@given(sc=scenarios(), arm_depth=st.sampled_from([1, 2, 4]), seed=st.integers(0, 2 ** 16),
       word_prob=st.sampled_from([1.0, 0.6]), arm_prob=st.sampled_from([1.0, 0.5]),
       ready_prob=st.sampled_from([1.0, 0.5, 0.2]))
def test_picker_against_golden(sc, arm_depth, seed, word_prob, arm_prob, ready_prob):
    slots, events = sc
    want, _ = run_hw(events, slots=slots, arm_depth=arm_depth, seed=seed, word_prob=word_prob,
                     arm_prob=arm_prob, ready_prob=ready_prob)
    event(f"picks: {min(want.picks, 3)}{'+' if want.picks >= 3 else ''}")  # --hypothesis-show-statistics
    event(f"error_cause {PickError(want.error_cause).name}")
    event(f"an arm waited: {bool(want.waited)}")
    event(f"PAIRS arms: {any(e[0] == 'arm' and e[5:] == (PickMode.PAIRS,) for e in events)}")


# ---------------------------------------------------------------- unit tests
def frame(vals):
    return [("word", v & M32, int(i == len(vals) - 1)) for i, v in enumerate(vals)]


def test_ties_pick_the_first():
    want, _ = run_hw([("arm", 0, 0, 6, 1)] + frame([3, 7, 1, 7, 7, 2]), ready_prob=0.5)
    assert (want.tokens[1], want.values[1], want.picks, want.errors) == (1, 7, 1, 0)


def test_negative_values_are_signed():
    vals = [-5, -2 ** 31, -1, -3, -7]
    want, _ = run_hw([("arm", 0, 0, 5, 0)] + frame(vals))
    assert want.tokens[0] == 2 and signed32(want.values[0]) == -1
    want, _ = run_hw([("arm", 0, 0, 3, 0)] + frame([-1, 2 ** 31 - 1, -2 ** 31]))
    assert (want.tokens[0], want.values[0]) == (1, 2 ** 31 - 1)   # 0x7fffffff beats 0xffffffff


def test_skip_window_only():
    vals = [100, 1, 5, 3, 5, 200, 0]
    want, _ = run_hw([("arm", 0, 1, 4, 2)] + frame(vals))        # words 1..4: 1 5 3 5
    assert (want.tokens[2], want.values[2]) == (1, 5)            # index within the window
    want, _ = run_hw([("arm", 0, 5, 2, 0), ("arm", 1, 6, 1, 1)] + frame(vals) + frame(vals))
    assert (want.tokens[:2], want.values[:2]) == ([0, 0], [200, 0])
    assert want.picks == 2


def test_outcomes_and_first_cause_detected():
    # a SHORT pick queued (frame of 3 < skip+n = 4), then BAD_ARM and MISSED (frame 0 is taken)
    # refused at once: BAD_ARM is the first failure detected
    ev = ([("arm", 0, 1, 3, 0), ("arm", 0, 0, 0, 0), ("arm", 0, 0, 1, 1), ("arm", 1, 0, 2, 3)]
          + frame([1, 2, 3]) + frame([4, 9]))
    want, _ = run_hw(ev)
    assert (want.picks, want.errors, want.error_cause) == (1, 3, PickError.BAD_ARM)
    assert (want.tokens[3], want.values[3]) == (1, 9)
    want, _ = run_hw([("arm", 0, 1, 3, 0)] + frame([1, 2, 3]) + [("arm", 1, 0, 1, 9)] + frame([1]))
    assert (want.picks, want.errors, want.error_cause) == (0, 2, PickError.SHORT)
    want, _ = run_hw(frame([1]) + [("arm", 0, 0, 1, 0)] + frame([1]))
    assert (want.errors, want.error_cause) == (1, PickError.MISSED)
    # out of order: frame 2 queued first, so frame 1 is MISSED even before it comes
    want, _ = run_hw([("arm", 2, 0, 1, 0), ("arm", 1, 0, 1, 1)] + frame([5]) + frame([6]) + frame([7]))
    assert (want.picks, want.tokens[:2], want.values[:2], want.errors, want.error_cause) == \
        (1, [0, 0], [7, 0], 1, PickError.MISSED)


def test_mid_frame_arm_sees_the_rest():
    # armed after word 2: sees words 3.. only (j still counts from the frame start)
    ev = frame([9, 9, 9, 1, 4, 2])[:3] + [("arm", 0, 0, 6, 0)] + frame([9, 9, 9, 1, 4, 2])[3:]
    want, _ = run_hw(ev)
    assert (want.tokens[0], want.values[0], want.picks) == (4, 4, 1)
    # armed after its whole window passed: MISSED at the frame's end
    ev = frame([1, 2, 3])[:2] + [("arm", 0, 0, 2, 0)] + frame([1, 2, 3])[2:]
    want, _ = run_hw(ev)
    assert (want.picks, want.errors, want.error_cause) == (0, 1, PickError.MISSED)


def test_clear():
    ev = ([("arm", 0, 0, 2, 0), ("arm", 5, 0, 1, 1), ("arm", 0, 0, 0, 0)] + frame([3, 8])
          + [("clear",), ("arm", 0, 0, 2, 1)] + frame([6, 5]))
    want, out = run_hw(ev, ready_prob=0.5)
    # the pick for frame 5 and the error were cleared; frame numbers restart at 0
    assert out == {"tokens": [0, 0, 0, 0], "values": [0, 6, 0, 0], "picks": 1, "errors": 0,
                   "error_cause": 0}


@pytest.mark.parametrize("arm_depth", [1, 3])
def test_full_queue_holds_arm_ready_low(arm_depth):
    """arm_depth picks for future frames fill the queue; the next arms (and a refused one behind
    them) wait -- arm.ready low -- and each enters right after the frame that makes room."""
    arms = [("arm", f, 0, 2, f % 4) for f in range(arm_depth + 2)] + [("arm", 0, 0, 0, 0)]
    ev = arms + sum((frame([f, 10 - f]) for f in range(arm_depth + 2)), [])
    want, out = run_hw(ev, arm_depth=arm_depth, arm_prob=0.5, ready_prob=0.5)
    assert want.waited == list(range(arm_depth, arm_depth + 3))
    assert (want.picks, want.errors, want.error_cause) == (arm_depth + 2, 1, PickError.BAD_ARM)


def test_full_queue_never_ready_without_a_frame():
    dut = TokenPicker(2, 2)

    async def tb(ctx):
        for f in range(2):
            ctx.set(dut.arm.payload.frame, f + 1)
            ctx.set(dut.arm.payload.n, 1)
            ctx.set(dut.arm.valid, 1)
            _, _, r = await ctx.tick().sample(dut.arm.ready)
            assert r
        ctx.set(dut.arm.payload.frame, 9)
        for _ in range(20):                        # full: held off, nothing lost or counted
            _, _, r = await ctx.tick().sample(dut.arm.ready)
            assert not r
        assert (ctx.get(dut.errors), ctx.get(dut.picks)) == (0, 0)
    run_simulation(dut, [tb], vcd=False, max_cycles=200)


def pairs(*pv):
    """A PAIRS frame's words from (value, id) tuples."""
    return [w for v, i in pv for w in (v, i)]


def test_pairs_take_the_id_of_the_first_max_value():
    # values 5, 9, -3, 9 (tie: the first 9), ids 1000, 7, 2**32 - 1, 8; a decoy before the window
    vals = [2 ** 31 - 1] + pairs((5, 1000), (9, 7), (-3, M32), (9, 8))
    want, _ = run_hw([("arm", 0, 1, 8, 2, PickMode.PAIRS)] + frame(vals), ready_prob=0.5)
    assert (want.tokens[2], want.values[2], want.picks, want.errors) == (7, 9, 1, 0)
    # signed values; the id is any 32-bit word (here larger than every value)
    want, _ = run_hw([("arm", 0, 0, 6, 0, PickMode.PAIRS)] + frame(pairs((-5, 1), (-1, M32), (-2 ** 31, 3))))
    assert (want.tokens[0], want.values[0]) == (M32, M32)          # value -1, id 0xffffffff
    # the same words as ARGMAX: the index of the largest word, not an id
    want, _ = run_hw([("arm", 0, 0, 6, 0)] + frame(pairs((-5, 1), (-1, M32), (-2 ** 31, 3))))
    assert (want.tokens[0], want.values[0]) == (5, 3)


def test_pairs_odd_n_is_bad_arm_and_short_frames_are_short():
    want, _ = run_hw([("arm", 0, 0, 3, 0, PickMode.PAIRS), ("arm", 0, 0, 4, 1, PickMode.PAIRS)]
                     + frame(pairs((1, 10), (2, 20), (3, 30))))
    assert (want.picks, want.tokens[1], want.errors, want.error_cause) == (1, 20, 1, PickError.BAD_ARM)
    want, _ = run_hw([("arm", 0, 1, 6, 0, PickMode.PAIRS)] + frame(pairs((1, 10), (2, 20), (3, 30))))
    assert (want.picks, want.errors, want.error_cause) == (0, 1, PickError.SHORT)


def test_pairs_mid_frame_arm_counts_whole_pairs_only():
    # armed between pair 1's value (9) and its id: pair 1 is not seen, pair 2 (4, 44) wins
    f = frame(pairs((1, 11), (9, 99), (4, 44)))
    want, _ = run_hw(f[:3] + [("arm", 0, 0, 6, 0, PickMode.PAIRS)] + f[3:])
    assert (want.tokens[0], want.values[0], want.picks) == (44, 4, 1)
    # armed before the last pair's id only: no whole pair -> MISSED
    want, _ = run_hw(f[:5] + [("arm", 0, 0, 6, 0, PickMode.PAIRS)] + f[5:])
    assert (want.picks, want.errors, want.error_cause) == (0, 1, PickError.MISSED)


def test_golden_arm_fields_are_checked():
    g = golden.TokenPicker(16)
    with pytest.raises(ValueError, match="slot must fit 4 bits"):
        g.arm(0, 0, 1, 16)
    with pytest.raises(ValueError, match="n must fit 32 bits"):
        g.arm(0, 0, 2 ** 32, 0)
    with pytest.raises(ValueError, match="mode must fit 1 bits"):
        g.arm(0, 0, 2, 0, 2)


def test_golden_hand_example():
    r = golden.run([("arm", 0, 0, 3, 0)] + frame([2, -1, 2]) + [("arm", 0, 0, 1, 0)])
    assert (r.tokens[0], r.values[0], r.picks, r.errors, r.error_cause) == (0, 2, 1, 1, PickError.MISSED)


@pytest.mark.parametrize("kw,msg", [({"slots": 0}, "slots must be an int in 1..16"),
                                    ({"slots": 17}, "slots must be an int in 1..16"),
                                    ({"arm_depth": 0}, "arm_depth must be an int in 1..64"),
                                    ({"arm_depth": 65}, "arm_depth must be an int in 1..64"),
                                    ({"slots": 2.0}, "slots")])
def test_parameter_checks(kw, msg):
    with pytest.raises(ValueError, match=msg):
        TokenPicker(**kw)
    with pytest.raises(ValueError, match=msg):
        golden.TokenPicker(**kw)


def test_arm_layout():
    assert [(n, Shape.cast(f.shape).width) for n, f in arm_layout()] == [("frame", 32), ("skip", 32),
                                                              ("n", 32), ("slot", 4), ("mode", 1)]
    assert (PickMode.ARGMAX, PickMode.PAIRS) == (0, 1) and golden.PickMode is PickMode


def test_registered_block_builds():
    from mcf_fpga.hdl import blocks
    from mcf_fpga.hdl.verilog import amba_ports, to_verilog
    comp, rename = blocks.build("token_picker", slots=2, arm_depth=2)
    assert {p.prefix for p in amba_ports(comp, rename)} >= {"s_axis", "m_axis", "s_axis_arm",
                                                             "tokens", "values", "picks", "clear"}
    assert "module token_picker(" in to_verilog(comp, "token_picker", rename=rename)
