"""AXI4 write arbiter (mcf_fpga/hdl/bus/axi_write_arbiter.py) against golden.axi_write_arbiter.

Random bursts from every master (lengths 1..8 beats, random data, WSTRB and AWID, W beats
offered before or after their AW), random valid gaps on every master's AW and W, random BREADY
gaps, a slave memory (sim.AXI4Memory) with random AW/W stalls, a random outstanding limit
and error ranges (so responses differ per burst). A monitor records the slave's AW, W and B
handshakes and which masters held AWVALID at each AW handshake. Then: the grant order is an
interleaving of the masters' bursts; the slave saw exactly golden's AW sequence (ID 0) and W
beats (every burst whole, unmixed, WLAST on its last beat only); each master got exactly its
bursts' responses, in order, with its own AWID; grants were round robin; the memory equals
golden's.
"""
import random

import pytest
from hypothesis import given, strategies as st

from mcf_fpga.golden.axi_write_arbiter import (WBurst, check_grants, check_round_robin, master_responses, memory_after,
                                      slave_bursts)
from mcf_fpga.hdl.bus import Burst, Resp
from mcf_fpga.hdl.bus.axi_write_arbiter import AXI4WriteArbiter
from mcf_fpga.sim import AXI4Memory
from mcf_fpga.sim.kit import run_simulation

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")

BASE, SPAN = 0x1000_0000, 128            # master i's burst k at BASE + (16 * i + k) * SPAN
DW = 64
BB = DW // 8


def make_bursts(rng, n, nmax):
    out = []
    for i in range(n):
        bs = []
        for k in range(rng.randint(0, nmax)):
            ln = rng.choice([0, 0, 1, 3, 7, rng.randrange(8)])
            beats = tuple((rng.getrandbits(DW), rng.choice([0xFF, 0xFF, rng.getrandbits(BB)])) for _ in range(ln + 1))
            bs.append(WBurst(id=rng.randrange(16), addr=BASE + (16 * i + k) * SPAN, len=ln, size=3, beats=beats))
        out.append(bs)
    return out


async def idle(ctx, rng, prob):
    """Cycles with VALID low before a beat: each one with probability ``1 - prob``."""
    while rng.random() >= prob:
        await ctx.tick()


def run(bursts, *, seed, valid_prob=1.0, bready_prob=1.0, w_early=False, stalls=True, max_outstanding=4,
        mem_outstanding=4, error_ranges=()):
    """Drive ``bursts`` (per master) through the arbiter; return what the monitor saw."""
    n = len(bursts)
    rng = random.Random(seed)
    dut = AXI4WriteArbiter(n, addr_width=32, data_width=DW, id_width=4, max_outstanding=max_outstanding)
    size = 16 * n * SPAN
    mem = AXI4Memory(size, data_width=DW, base=BASE, max_outstanding=mem_outstanding, error_ranges=error_ranges,
                     ready_seed=seed if stalls else None)
    image = rng.randbytes(size)
    mem.load(BASE, image)
    ports = [getattr(dut, f"s_axi{i}") for i in range(n)]
    seen = {"aw": [], "w": [], "b": [], "rr": [], "got": [[] for _ in range(n)]}
    done = [0] * n

    def aw_proc(i):
        r = random.Random(seed * 31 + i)

        async def proc(ctx):
            p = ports[i].aw
            for b in bursts[i]:
                ctx.set(p.valid, 0)
                await idle(ctx, r, valid_prob)
                ctx.set(p.payload.id, b.id)
                ctx.set(p.payload.addr, b.addr)
                ctx.set(p.payload.len, b.len)
                ctx.set(p.payload.size, b.size)
                ctx.set(p.payload.burst, Burst.INCR)
                ctx.set(p.valid, 1)
                await ctx.tick().until(p.ready)
            ctx.set(p.valid, 0)
        return proc

    def w_proc(i):
        r = random.Random(seed * 37 + i)

        async def proc(ctx):
            p = ports[i].w
            if not w_early:                       # W after the master's own AW handshakes begin
                while not ctx.get(ports[i].aw.valid) and bursts[i]:
                    await ctx.tick()
            for b in bursts[i]:
                for k, (d, s) in enumerate(b.beats):
                    ctx.set(p.valid, 0)
                    await idle(ctx, r, valid_prob)
                    ctx.set(p.payload.data, d)
                    ctx.set(p.payload.strb, s)
                    ctx.set(p.payload.last, int(k == b.len))
                    ctx.set(p.valid, 1)
                    await ctx.tick().until(p.ready)
            ctx.set(p.valid, 0)
        return proc

    def b_proc(i):
        r = random.Random(seed * 41 + i)

        async def proc(ctx):
            p = ports[i].b
            while len(seen["got"][i]) < len(bursts[i]):
                ready = int(r.random() < bready_prob)
                ctx.set(p.ready, ready)
                _, _, v, bid, resp = await ctx.tick().sample(p.valid, p.payload.id, p.payload.resp)
                if v and ready:
                    seen["got"][i].append((bid, resp))
            ctx.set(p.ready, 0)
            done[i] = 1
        return proc

    async def monitor(ctx):
        mb = dut.m_axi
        aw, w, b = mb.aw, mb.w, mb.b
        async for _c, _r, awv, awr, aid, aaddr, alen, asize, wv, wr, wd, ws, wl, bv, br, bresp, *avs in ctx.tick().sample(
                aw.valid, aw.ready, aw.payload.id, aw.payload.addr, aw.payload.len, aw.payload.size,
                w.valid, w.ready, w.payload.data, w.payload.strb, w.payload.last,
                b.valid, b.ready, b.payload.resp, *(p.aw.valid for p in ports)):
            if awv and awr:
                g = (aaddr - BASE) // SPAN // 16
                seen["aw"].append((aid, aaddr, alen, asize))
                seen["rr"].append((g, frozenset(j for j in range(n) if avs[j] and j != g)))
            if wv and wr:
                seen["w"].append((wd, ws, wl))
            if bv and br:
                seen["b"].append(bresp)

    async def wait_done(ctx):
        while not all(done):
            await ctx.tick()

    tbs = [aw_proc(i) for i in range(n)] + [w_proc(i) for i in range(n)] + [b_proc(i) for i in range(n)] + [wait_done]
    run_simulation(dut, tbs, background=[mem.testbench(dut.m_axi), monitor], vcd=False, max_cycles=40_000)
    seen["mem"] = mem.dump(BASE, size)
    seen["image"] = image
    return seen


def check(bursts, seen, error_ranges=()):
    n = len(bursts)
    grants = [(a - BASE) // SPAN // 16 for _i, a, _l, _s in seen["aw"]]
    check_grants(bursts, grants)
    aw, w = slave_bursts(bursts, grants)
    assert seen["aw"] == aw, "slave AW sequence differs from golden's (fields, ID 0, order)"
    assert seen["w"] == w, "slave W beats differ from golden's (bursts whole and unmixed, WLAST)"
    assert seen["got"] == master_responses(bursts, grants, seen["b"]), "B responses misrouted"
    check_round_robin(n, seen["rr"])
    assert seen["mem"] == memory_after(seen["image"], BASE, BB, bursts, error_ranges)


@given(st.integers(0, 2 ** 32 - 1), st.sampled_from([2, 2, 3]), st.sampled_from([1.0, 0.5]),
       st.sampled_from([1.0, 0.6, 0.25]), st.booleans(), st.booleans(), st.sampled_from([1, 2, 4]),
       st.sampled_from([1, 4]), st.booleans())
def test_bursts_whole_in_order_and_answered(seed, n, valid_prob, bready_prob, w_early, stalls, max_out, mem_out,
                                            errors):
    rng = random.Random(seed)
    bursts = make_bursts(rng, n, 6)
    ranges = []
    if errors:
        for _ in range(2):
            s = BASE + rng.randrange(16 * n * SPAN // 8) * 8
            ranges.append((s, s + 8, rng.choice([Resp.SLVERR, Resp.DECERR])))
    seen = run(bursts, seed=seed, valid_prob=valid_prob, bready_prob=bready_prob, w_early=w_early, stalls=stalls,
               max_outstanding=max_out, mem_outstanding=mem_out, error_ranges=ranges)
    check(bursts, seen, ranges)


def test_both_masters_busy_alternate():
    """Both masters always valid: the grants alternate 1, 0, 1, 0, ... (the reset 'last' is
    master n-1, so master 0 first); W beats offered before their AW wait their turn."""
    rng = random.Random(7)
    bursts = make_bursts(rng, 2, 0)
    for i in range(2):
        bursts[i] = [WBurst(id=i + 4, addr=BASE + (16 * i + k) * SPAN, len=3, size=3,
                            beats=tuple((rng.getrandbits(DW), 0xFF) for _ in range(4))) for k in range(5)]
    seen = run(bursts, seed=1, w_early=True, stalls=False)
    check(bursts, seen)
    assert [g for g, _w in seen["rr"]] == [0, 1] * 5
    assert seen["got"] == [[(4, 0)] * 5, [(5, 0)] * 5]


def test_one_master_alone_streams():
    """Master 1 alone (master 0 sends nothing): every burst passes, IDs restored."""
    rng = random.Random(3)
    bursts = [[], make_bursts(rng, 1, 6)[0]]
    bursts[1] = [WBurst(b.id, b.addr + 16 * SPAN, b.len, b.size, b.beats) for b in bursts[1]]
    seen = run(bursts, seed=2, valid_prob=0.5, bready_prob=0.5)
    check(bursts, seen)


def test_parameter_checks():
    for kw, field in ((dict(n=1), "n"), (dict(n=9), "n"), (dict(max_outstanding=0), "max_outstanding")):
        with pytest.raises(ValueError, match=field):
            AXI4WriteArbiter(**kw)


def test_golden_checks_catch_bad_orders():
    b = [[WBurst(0, BASE, 0, 3, ((1, 0xFF),)), WBurst(1, BASE + SPAN, 0, 3, ((2, 0xFF),))],
         [WBurst(2, BASE + 16 * SPAN, 0, 3, ((3, 0xFF),))]]
    with pytest.raises(AssertionError, match="master 0 sent 2 bursts, 1 were granted"):
        check_grants(b, [0, 1])
    with pytest.raises(AssertionError, match="round robin"):
        check_round_robin(2, [(0, frozenset({1})), (0, frozenset()), (1, frozenset())])
    aw, w = slave_bursts(b, [1, 0, 0])
    assert [a[1] for a in aw] == [BASE + 16 * SPAN, BASE, BASE + SPAN] and [x[0] for x in w] == [3, 1, 2]
    assert master_responses(b, [1, 0, 0], [2, 0, 3]) == [[(0, 0), (1, 3)], [(2, 2)]]
