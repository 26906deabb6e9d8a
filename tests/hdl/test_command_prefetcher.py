"""Command prefetcher (mcf_fpga/hdl/command_prefetcher.py) against the memory it reads.

An AXI4Memory holds random words (random latency, R-beat rate limit, AR ready stalls, optionally
an SLVERR/DECERR range); the consumer pops with a random probability and ``enable`` drops at
random. The words popped are the memory's words ``[base, base + 8*length)`` in order, each with
its beat's response; RREADY is low while a beat is offered only in the DMA reader's status
bubble (a burst's last beat in the cycle after the previous burst's last beat); bursts stay inside the beats
that hold the stream; after the last word, or part-way (a drain), ``drain`` empties everything and
``idle`` rises with no read left in flight.
"""
import random

from hypothesis import given, settings, strategies as st

from mcf_fpga.hdl.bus import Resp
from mcf_fpga.hdl.command_prefetcher import CommandPrefetcher
from mcf_fpga.sim import AXI4Memory
from mcf_fpga.sim.kit import run_simulation
from mcf_fpga.spec.dma import DmaParams

BASE, SIZE = 0x2000, 0x800


def run(width, *, base, length, fifo_words, max_burst, seed, pop_p, enable_p, latency, rate, ar_stall,
        errors=(), stop_after=None):
    """Returns (words popped as (word, resp), the memory image, the read log, RREADY violations,
    [cycles from drain to idle] or [] if idle never rose)."""
    rng = random.Random(seed)
    dma = DmaParams(addr_width=32, data_width=width, max_burst=max_burst, max_outstanding=4, id_width=4,
                    window_base=BASE, window_size=SIZE)
    dut = CommandPrefetcher(dma, fifo_words)
    mem = AXI4Memory(SIZE, data_width=width, base=BASE, latency=latency, bytes_per_cycle=rate,
                     ready_seed=seed if ar_stall else None, error_ranges=errors)
    image = bytes(rng.getrandbits(8) for _ in range(SIZE))
    mem.load(BASE, image)
    got, bad_rready, drained = [], [0], []
    want = length if stop_after is None else stop_after

    async def bench(ctx):
        ctx.set(dut.base, base)
        ctx.set(dut.length, length)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        for _ in range(20_000):
            if len(got) == want:
                break
            ctx.set(dut.enable, rng.random() < enable_p)
            take = rng.random() < pop_p
            avail = ctx.get(dut.avail)
            ctx.set(dut.pop, take and avail)
            if take and avail:
                got.append((ctx.get(dut.word), ctx.get(dut.resp)))
            _, _, rv, rr, sv = await ctx.tick().sample(dut.m_axi.r.valid, dut.m_axi.r.ready,
                                                       dut._reader.status.valid)
            if rv and not rr and not sv:       # as the edge sees them; sv: the reader's status bubble
                bad_rready[0] += 1
        ctx.set(dut.pop, 0)
        ctx.set(dut.enable, 0)
        ctx.set(dut.drain, 1)
        for n in range(2_000):
            if ctx.get(dut.idle):
                drained.append(n)
                break
            await ctx.tick()
        for _ in range(3 * latency):              # nothing more is requested after idle
            await ctx.tick()

    run_simulation(dut, [bench], background=[mem.testbench(dut.m_axi)], max_cycles=60_000)
    return got, image, mem.log, bad_rready[0], drained


def expected(image, base, n, width, errors):
    bpb = width // 8
    out = []
    for i in range(n):
        a = base + 8 * i
        beat = a & ~(bpb - 1)
        resp = Resp.OKAY
        for lo, hi, r in errors:
            if lo < beat + bpb and beat < hi:
                resp = r
        word = 0 if resp != Resp.OKAY else int.from_bytes(image[a - BASE:a - BASE + 8], "little")
        out.append((word, int(resp)))
    return out


@settings(max_examples=30, deadline=None)
@given(st.sampled_from([64, 128, 256]), st.integers(0, 2 ** 32 - 1), st.data())
def test_words_in_order(width, seed, data):
    draw = data.draw
    rng = random.Random(seed)
    bpb, wpb = width // 8, width // 64
    max_burst = draw(st.sampled_from([1, 2, 4]))
    fifo_words = wpb * max_burst * draw(st.sampled_from([1, 2, 3]))
    length = draw(st.integers(1, 40))
    base = BASE + 8 * draw(st.integers(0, (SIZE // 8) - length))
    errors = ()
    if draw(st.booleans()):
        b = (base & ~(bpb - 1)) + bpb * rng.randrange(max(1, (8 * length) // bpb))
        errors = [(b, b + bpb, draw(st.sampled_from([Resp.SLVERR, Resp.DECERR])))]
    stop = draw(st.one_of(st.none(), st.integers(0, length)))
    got, image, log, bad_rready, drained = run(
        width, base=base, length=length, fifo_words=fifo_words, max_burst=max_burst, seed=seed,
        pop_p=draw(st.sampled_from([1.0, 0.5, 0.1])), enable_p=draw(st.sampled_from([1.0, 0.7])),
        latency=draw(st.integers(1, 20)), rate=draw(st.sampled_from([None, 3])), ar_stall=draw(st.booleans()),
        errors=errors, stop_after=stop)
    n = length if stop is None else stop
    assert got == expected(image, base, n, width, errors)
    assert bad_rready == 0
    assert drained, "idle never rose after drain"
    lo, hi = base & ~(bpb - 1), (base + 8 * length + bpb - 1) & ~(bpb - 1)
    for _cycle, kind, addr, ln, _resp in log:
        assert kind == "R" and lo <= addr and addr + (ln + 1) * bpb <= hi, (hex(addr), ln, hex(lo), hex(hi))
    if stop is None:                       # every beat of the stream was read exactly once
        assert sum(ln + 1 for *_, ln, _ in log) == (hi - lo) // bpb


def test_nothing_requested_while_disabled():
    got, image, log, _, drained = run(128, base=BASE, length=8, fifo_words=8, max_burst=2, seed=1, pop_p=1.0,
                                      enable_p=0.0, latency=3, rate=None, ar_stall=False, stop_after=0)
    assert got == [] and log == [] and drained == [0]
