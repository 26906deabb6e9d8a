"""TxFrameFIFO: frames cross clocks unchanged and leave without gaps inside a frame."""
import random

from hypothesis import given, settings, strategies as st
from amaranth import Module
from amaranth.sim import Simulator

from mcf_fpga.hdl.eth.tx_frame_fifo import TxFrameFIFO


def _run(frames, wprob, rprob, depth=32, period_w=10e-9, period_r=7e-9, seed=0):
    dut = TxFrameFIFO(8, depth, w_domain="sync", r_domain="tx")
    sim = Simulator(dut)
    sim.add_clock(period_w, domain="sync")
    sim.add_clock(period_r, domain="tx")
    got, gaps = [], []
    rng = random.Random(seed)

    async def writer(ctx):
        for f in frames:
            for k, b in enumerate(f):
                while rng.random() > wprob:
                    ctx.set(dut.i.valid, 0)
                    await ctx.tick("sync")
                ctx.set(dut.i.payload.data, b)
                ctx.set(dut.i.payload.keep, 1)
                ctx.set(dut.i.payload.last, k == len(f) - 1)
                ctx.set(dut.i.valid, 1)
                await ctx.tick("sync").until(dut.i.ready)
            ctx.set(dut.i.valid, 0)

    async def reader(ctx):
        cur, in_frame, chunk = bytearray(), False, 0
        rrng = random.Random(seed + 1)
        while len(got) < len(frames):
            # a MAC takes every beat once a frame has started; idles only between frames
            ready = 1 if in_frame else rrng.random() < rprob
            ctx.set(dut.o.ready, ready)
            _, _, v, p = await ctx.tick("tx").sample(dut.o.valid, dut.o.payload)
            if in_frame and not v and chunk < depth // 2:
                gaps.append(len(got))
            if v and ready:
                cur.append(p.data)
                in_frame, chunk = True, chunk + 1
                if p.last:
                    got.append(bytes(cur))
                    cur, in_frame, chunk = bytearray(), False, 0
                elif chunk == depth // 2:
                    chunk = 0            # chunk boundary of a long frame: a gap is allowed here

    sim.add_testbench(writer)
    sim.add_testbench(reader)

    async def watchdog(ctx):
        await ctx.delay(200_000 * period_w)
        raise AssertionError("hang")
    sim.add_testbench(watchdog, background=True)
    sim.run()
    return got, gaps


@settings()     # example count from the Hypothesis profile
@given(st.lists(st.binary(min_size=1, max_size=16), min_size=1, max_size=6),
       st.floats(0.2, 1.0), st.floats(0.2, 1.0), st.integers(0, 1000))
def test_frames_cross_unchanged_without_gaps(frames, wprob, rprob, seed):
    got, gaps = _run(frames, wprob, rprob, seed=seed)
    assert got == frames
    assert gaps == []


def test_frame_longer_than_half_the_fifo_still_arrives():
    frames = [bytes(range(40)), b"\x01\x02"]
    got, _ = _run(frames, 1.0, 1.0, depth=32)
    assert got == frames
