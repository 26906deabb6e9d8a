"""GMII TX/RX MACs against the golden framing twin (mcf_fpga/golden/eth.py, zlib CRC)."""
import random

from hypothesis import given, settings, strategies as st
from amaranth.sim import Simulator

from mcf_fpga.golden.eth import encode_frame, decode_frame
from mcf_fpga.hdl.eth import EthernetTx, EthernetRx
from mcf_fpga.spec.ethernet import IFG_BYTES
from mcf_fpga.sim.kit import run_simulation

FAST = settings()        # example count from the Hypothesis profile (tests/conftest.py)
frames_st = st.lists(st.binary(min_size=1, max_size=72), min_size=1, max_size=4)


def _run_tx(frames, gaps, underrun_at=None):
    """Send frames (a frame is held valid without gaps, except an injected underrun),
    return the GMII bursts seen and the idle run lengths between them."""
    dut = EthernetTx()
    bursts, idles = [], []

    async def src(ctx):
        for n, (frame, gap) in enumerate(zip(frames, gaps)):
            for _ in range(gap):
                await ctx.tick()
            for k, byte in enumerate(frame):
                if underrun_at == (n, k):
                    ctx.set(dut.i.valid, 0)
                    await ctx.tick()
                ctx.set(dut.i.payload.data, byte)
                ctx.set(dut.i.payload.last, k == len(frame) - 1)
                ctx.set(dut.i.valid, 1)
                await ctx.tick().until(dut.i.ready)
            ctx.set(dut.i.valid, 0)

    async def mon(ctx):
        cur, err, idle = None, False, 0
        n_end = len(frames)
        while len(bursts) < n_end:
            _, _, d, en, er = await ctx.tick().sample(dut.txd, dut.tx_en, dut.tx_er)
            if en:
                if cur is None:
                    cur, err = bytearray(), False
                    if bursts:
                        idles.append(idle)
                cur.append(d)
                err |= bool(er)
            elif cur is not None:
                bursts.append((bytes(cur), err))
                cur, idle = None, 1
            else:
                idle += 1
        return

    run_simulation(dut, [src, mon], max_cycles=20_000)
    return dut, bursts, idles


@FAST
@given(frames_st, st.data())
def test_tx_matches_golden(frames, data):
    gaps = [data.draw(st.integers(0, 20)) for _ in frames]
    _, bursts, idles = _run_tx(frames, gaps)
    assert [b for b, _ in bursts] == [encode_frame(f) for f in frames]
    assert not any(e for _, e in bursts)
    assert all(i >= IFG_BYTES for i in idles), idles
    # back-to-back frames get exactly the minimum gap
    for gap, idle in zip(gaps[1:], idles):
        if gap == 0:
            assert idle == IFG_BYTES


def test_tx_underrun_sends_error_and_recovers():
    frames = [bytes(range(70)), bytes(range(100, 130)), b"\x01\x02\x03"]
    _, bursts, _ = _run_tx(frames, [0, 0, 0], underrun_at=(1, 10))
    assert bursts[0] == (encode_frame(frames[0]), False)
    wire, err = bursts[1]
    assert err and wire[8:18] == frames[1][:10]          # cut after 10 bytes, with TX_ER
    assert bursts[2] == (encode_frame(frames[2]), False)


def _corrupt(wire, kind, rng):
    wire = bytearray(wire)
    if kind == "flip":
        i = rng.randrange(8, len(wire))
        wire[i] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        del wire[rng.randrange(9, len(wire)):]
    elif kind == "nosfd":
        wire[7] = 0x55 if rng.random() < 0.5 else 0x12
    return bytes(wire)


@FAST
@given(st.lists(st.tuples(st.binary(min_size=1, max_size=72),
                          st.sampled_from(["ok", "ok", "flip", "truncate", "rxer", "nosfd"])),
                min_size=1, max_size=4),
       st.integers(0, 2**32 - 1))
def test_rx_matches_golden(items, seed):
    rng = random.Random(seed)
    dut = EthernetRx()
    expected = []
    lines = []
    for frame, kind in items:
        wire = _corrupt(encode_frame(frame), kind, rng)
        er_at = rng.randrange(8, len(wire)) if kind == "rxer" else None
        lines.append((wire, er_at))
        data, ok = decode_frame(wire)
        if data is not None:
            expected.append((data, ok and er_at is None))
    got = []

    async def drive(ctx):
        for wire, er_at in lines:
            for k, b in enumerate(wire):
                ctx.set(dut.rxd, b)
                ctx.set(dut.rx_dv, 1)
                ctx.set(dut.rx_er, k == er_at)
                await ctx.tick()
            ctx.set(dut.rx_dv, 0)
            ctx.set(dut.rx_er, 0)
            await ctx.tick().repeat(IFG_BYTES)
        await ctx.tick().repeat(4)

    async def sink(ctx):
        ctx.set(dut.o.ready, 1)
        cur = bytearray()
        while True:
            _, _, v, p = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            if v:
                cur.append(p.data)
                if p.last:
                    got.append((bytes(cur), not p.user))
                    cur = bytearray()

    run_simulation(dut, [drive], background=[sink], max_cycles=20_000)
    assert got == expected
    # counters: one per frame that had a (pre)amble start
    sim_frames = sum(ok for _, ok in expected)
    assert sim_frames == len([g for g in got if g[1]])


def test_rx_backpressure_marks_frame_bad_and_keeps_framing():
    """A stalled consumer: frames end with ``last`` (never merge), lost bytes mark them bad."""
    dut = EthernetRx()
    frames = [bytes(range(64)), bytes(range(64, 140))]
    got = []

    async def drive(ctx):
        for f in frames:
            for b in encode_frame(f):
                ctx.set(dut.rxd, b)
                ctx.set(dut.rx_dv, 1)
                await ctx.tick()
            ctx.set(dut.rx_dv, 0)
            await ctx.tick().repeat(IFG_BYTES)
        await ctx.tick().repeat(200)

    async def sink(ctx):
        rng = random.Random(3)
        cur = bytearray()
        while True:
            ctx.set(dut.o.ready, rng.random() < 0.3)
            _, _, v, r, p = await ctx.tick().sample(dut.o.valid, dut.o.ready, dut.o.payload)
            if v and r:
                cur.append(p.data)
                if p.last:
                    got.append((bytes(cur), p.user))
                    cur = bytearray()

    run_simulation(dut, [drive], background=[sink], max_cycles=20_000)
    assert len(got) == 2 and all(user == 1 for _, user in got)


def test_tx_rx_loopback_counters():
    """TX GMII wired to RX GMII: every frame comes back unpadded-equal and counted good."""
    from amaranth import Module
    tx, rx = EthernetTx(), EthernetRx()
    m = Module()
    m.submodules.tx, m.submodules.rx = tx, rx
    m.d.comb += [rx.rxd.eq(tx.txd), rx.rx_dv.eq(tx.tx_en), rx.rx_er.eq(tx.tx_er), rx.o.ready.eq(1)]
    frames = [bytes([i]) * (10 + 13 * i) for i in range(4)]
    got = []
    sim = Simulator(m)
    sim.add_clock(1e-8)

    async def src(ctx):
        for f in frames:
            for k, b in enumerate(f):
                ctx.set(tx.i.payload.data, b)
                ctx.set(tx.i.payload.last, k == len(f) - 1)
                ctx.set(tx.i.valid, 1)
                await ctx.tick().until(tx.i.ready)
            ctx.set(tx.i.valid, 0)
        await ctx.tick().repeat(100)
        assert ctx.get(tx.frames) == 4 and ctx.get(rx.frames) == 4 and ctx.get(rx.errors) == 0

    async def sink(ctx):
        cur = bytearray()
        while True:
            _, _, v, p = await ctx.tick().sample(rx.o.valid, rx.o.payload)
            if v:
                cur.append(p.data)
                if p.last:
                    got.append((bytes(cur), p.user))
                    cur = bytearray()

    sim.add_testbench(src)
    sim.add_testbench(sink, background=True)
    sim.run()
    assert got == [(f + bytes(max(0, 60 - len(f))), 0) for f in frames]
