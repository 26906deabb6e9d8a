"""RxReceiver (hdl/rx_placer_receiver.py) against golden.rx_placer's per-frame rules: random
frames (well formed, short, long, length 0 or above max_payload, runts) with keys from a small
pool, a table model answering each ``start`` after a random delay (as the key scan would), random
valid gaps on ``s_axis`` and ready gaps on ``beats`` / ``info``. Checked: ``key`` equals
``packet_key`` of the header; per frame, in order, the verdict is PASS (runt or no match, then
the frame's beats unchanged), WRITE for a well-formed match (entry, length, header and payload
beats) or DROP otherwise (a prefix of the frame's beats, at least the header; ``malformed``
pulses once)."""
import random

from hypothesis import given, settings, strategies as st

from mcf_fpga.golden.header import unpack_header
from mcf_fpga.golden.rx_placer import RxPlacer as GoldenPlacer
from mcf_fpga.spec.meta import DEFAULT_PARAMS as MP
from mcf_fpga.spec.rx_placer import packet_key
from mcf_fpga.hdl.rx_placer_receiver import DROP, PASS, WRITE, RxReceiver
from mcf_fpga.sim.kit import StreamSource, packets_to_beats, run_simulation
from tests.hdl.test_rx_placer import HB, scenario
from tests.hdl.test_rx_placer_scan import pack

MAX_PAYLOAD = 64


def expected(gold, f):
    """(verdict, entry, length) golden's rules give frame ``f``."""
    if len(f) < HB:
        return PASS, None, None
    meta = unpack_header(f[:HB], MP)
    e = gold.match(packet_key(meta))
    if e is None:
        return PASS, None, None
    ok = len(f) == HB + meta.length and 0 < meta.length <= MAX_PAYLOAD
    return (WRITE if ok else DROP), e, meta.length


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), entries=st.integers(1, 4), p=st.sampled_from([1.0, 0.6]),
       q=st.sampled_from([1.0, 0.5]), delay=st.sampled_from([0, 2, 6]))
def test_receiver_verdicts_match_golden(seed, entries, p, q, delay):
    rng = random.Random(seed)
    program, frames = scenario(rng, entries, 16)
    gold = GoldenPlacer(entries, MAX_PAYLOAD, align=16)
    for step in program:
        gold.ctrl(*step)
    dut = RxReceiver(entries=entries, max_payload=MAX_PAYLOAD, meta=MP)
    keys, infos, beats, malformed = [], [], [], [0]

    async def source(ctx):
        await StreamSource(dut.s_axis, seed=seed, valid_prob=p).send(ctx, packets_to_beats(frames, 64))

    async def scan(ctx):                          # the key scan: a verdict `delay` cycles or so later
        scanning, wait, verdict = False, 0, None
        while True:
            ctx.set(dut.resolve, 0)
            if scanning and wait == 0 and ctx.get(dut.room):
                ctx.set(dut.resolve, 1)
                ctx.set(dut.hit, verdict is not None)
                ctx.set(dut.found, verdict or 0)
            _, _, start, resolved, key, bad = await ctx.tick().sample(dut.start, dut.resolve, dut.key, dut.malformed)
            assert not (start and resolved)
            malformed[0] += bad
            if resolved:
                scanning = False
            elif scanning and wait:
                wait -= 1
            if start:
                keys.append(key)
                verdict = gold.match(unpack_key(key))
                scanning, wait = True, rng.randrange(delay + 1)
            ctx.set(dut.scanning, scanning)

    async def sink(ctx):
        while len(infos) < len(frames):
            ctx.set(dut.info.ready, rng.random() < q)
            ctx.set(dut.beats.ready, rng.random() < q)
            if ctx.get(dut.info.valid) and ctx.get(dut.info.ready):
                infos.append({k: ctx.get(getattr(dut.info.payload, k)) for k in ("verdict", "e", "length", "count")})
            if ctx.get(dut.beats.valid) and ctx.get(dut.beats.ready):
                beats.append({k: ctx.get(getattr(dut.beats.payload, k)) for k in ("data", "keep", "last")})
            await ctx.tick()
        ctx.set(dut.info.ready, 0)
        ctx.set(dut.beats.ready, 1)
        for _ in range(200):
            if ctx.get(dut.beats.valid):
                beats.append({k: ctx.get(getattr(dut.beats.payload, k)) for k in ("data", "keep", "last")})
            await ctx.tick()

    run_simulation(dut, [source, sink], background=[scan], vcd=False)
    assert keys == [pack(packet_key(unpack_header(f[:HB], MP))) for f in frames if len(f) >= HB]
    pos = 0
    for f, info in zip(frames, infos, strict=True):
        verdict, e, length = expected(gold, f)
        fb = packets_to_beats([f], 64)
        assert info["verdict"] == verdict, (f, info)
        if verdict == PASS:
            n = len(fb)
            assert beats[pos:pos + n] == fb
        else:
            assert (info["e"], info["length"]) == (e, length)
            n = info["count"]
            assert n >= HB // 8 and beats[pos:pos + n] == fb[:n]
            if verdict == WRITE:
                assert n == len(fb)
        pos += n
    assert pos == len(beats)
    assert malformed[0] == sum(i["verdict"] == DROP for i in infos)


def unpack_key(key):
    lo = 3 + MP.node_bits
    return (key & 7, (key >> 3) & ((1 << MP.node_bits) - 1), (key >> lo) & ((1 << MP.layer_bits) - 1),
            key >> (lo + MP.layer_bits))
