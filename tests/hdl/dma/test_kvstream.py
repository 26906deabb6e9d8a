"""K/V streamer against AXI4Memory and the golden KV region (mcf_fpga/golden/kvstore.py).

Rows delivered through the staging windows equal golden bit for bit under random block tables,
DDR latency (>= 100 cycles in one property), AXI ready stalls and a slow consumer; written rows
land at golden's addresses and nothing else in memory changes; loads wait for earlier writes;
block b+1 fills while block b is read; bad commands and SLVERR/DECERR set the error register with
the address, halt the streamer and never hang.
"""
import random

import pytest
from hypothesis import given, settings, strategies as st

from mcf_fpga.spec.kvregion import KVRegion, staging_word
from mcf_fpga.golden.kvstore import KVStore
from mcf_fpga.hdl.bus import Resp
from mcf_fpga.spec.dma import DmaStatus
from mcf_fpga.hdl.dma.kvstream import KVStreamer
from mcf_fpga.sim import AXI4Memory
from mcf_fpga.sim.kit import StreamSource, run_simulation, axi_handshakes

BASE = 0x10000          # region base; memory starts MARGIN bytes below it and ends MARGIN above
MARGIN = 256


def make(region, *, win_rows, n_win=2, latency=20, seed=0, max_burst=4, mem_size=None,
         error_ranges=(), stalls=True, read_ports=1):
    dut = KVStreamer(region, win_rows=win_rows, n_win=n_win, addr_width=32, max_burst=max_burst,
                     max_outstanding=4, read_ports=read_ports)
    size = mem_size if mem_size is not None else region.size + 2 * MARGIN
    mem = AXI4Memory(size, data_width=region.bus_bytes * 8, base=BASE - MARGIN, latency=latency,
                     max_outstanding=4, error_ranges=error_ranges,
                     ready_seed=seed if stalls else None)
    rng = random.Random(seed)
    store = KVStore(region)
    lo, hi = -(1 << (region.kv_bits - 1)), (1 << (region.kv_bits - 1)) - 1
    for s in range(region.n_slots):
        for sel in (0, 1):
            for r in range(region.slot_rows):
                store.write_row(s, sel, r, [rng.randint(lo, hi) for _ in range(region.d)], rng.randint(-128, 127))
    image = bytearray(rng.randbytes(size))          # margins: random bytes that must not change
    n = min(len(store.image), size - MARGIN)
    image[MARGIN:MARGIN + n] = store.image[:n]
    mem.load(BASE - MARGIN, bytes(image))
    return dut, mem, store, image


def random_rows(region, rng, n):
    lo, hi = -(1 << (region.kv_bits - 1)), (1 << (region.kv_bits - 1)) - 1
    out = []
    for _ in range(n):
        out.append((rng.randint(0, 1), rng.randrange(region.n_slots), rng.randrange(region.slot_rows),
                    [rng.randint(lo, hi) for _ in range(region.d)], rng.randint(-128, 127)))
    return out


def wr_beat(sel, slot, row, vals, e):
    return {"sel": sel, "slot": slot, "row": row, "data": staging_word(vals, 0) & ((1 << (8 * len(vals))) - 1),
            "e": e}


async def read_window(ctx, dut, w, rows, rng, stall):
    """Read rows ``rows`` of window ``w`` through k_rd/v_rd (with ``read_ports=2`` also a random
    row of ``rows`` through k_rd1/v_rd1 in the same cycle); returns [(row, (k word, v word))]."""
    got = []
    for r in rows:
        while rng.random() < stall:
            await ctx.tick()
        pairs = [(dut.k_rd, dut.v_rd, r)]
        if dut.read_ports == 2:
            pairs.append((dut.k_rd1, dut.v_rd1, rng.choice(rows)))
        for kp, vp, rr in pairs:
            ctx.set(kp.addr, w * dut.win_rows + rr)
            ctx.set(vp.addr, w * dut.win_rows + rr)
        await ctx.tick()
        got += [(rr, (ctx.get(kp.data), ctx.get(vp.data))) for kp, vp, rr in pairs]
    return got


async def release(ctx, dut, w):
    ctx.set(dut.release.payload.win, w)
    ctx.set(dut.release.valid, 1)
    await ctx.tick()
    ctx.set(dut.release.valid, 0)


async def wait_full_or_error(ctx, dut, w):
    while not ((ctx.get(dut.full) >> w) & 1 or ctx.get(dut.error)):
        await ctx.tick()


def run(dut, mem, store, *, blocks, writes=(), seed=0, stall=0.3, trace=None, max_cycles=60_000):
    """Writes (all taken first), then loads of ``blocks`` [(slot, row, n)] into windows b % n_win,
    each consumed by reading its rows in a random order (with repeats) and released."""
    rng = random.Random(seed + 1)
    got = {"blocks": []}
    done = {"writes": False}
    for sel, slot, row, vals, e in writes:            # the golden view after the writes
        store.write_row(slot, sel, row, vals, e)

    async def tb_writes(ctx):
        await StreamSource(dut.kv_wr, seed=seed + 2, valid_prob=0.7).send(ctx, [wr_beat(*w) for w in writes])
        done["writes"] = True

    async def tb_loads(ctx):
        while not done["writes"]:
            await ctx.tick()
        await StreamSource(dut.load, seed=seed + 3, valid_prob=0.8).send(
            ctx, [{"slot": s, "row": r, "n": n, "win": b % dut.n_win} for b, (s, r, n) in enumerate(blocks)])

    async def tb_consume(ctx):
        for b, (_s, _r, n) in enumerate(blocks):
            w = b % dut.n_win
            await wait_full_or_error(ctx, dut, w)
            assert not ctx.get(dut.error), f"error {ctx.get(dut.error)} at {ctx.get(dut.error_addr):#x}"
            order = list(range(n)) + [rng.randrange(n) for _ in range(n // 2)]
            rng.shuffle(order)
            order += list(range(n))          # and every row once more just before the release
            if trace is not None:
                trace["reading"] = w
            words = await read_window(ctx, dut, w, order, rng, stall)
            if trace is not None:
                trace["reading"] = None
            got["blocks"].append(words)
            await release(ctx, dut, w)
        while ctx.get(dut.busy):
            await ctx.tick()

    handshakes = axi_handshakes(dut.m_axi, got)           # cycles of AR and B handshakes
    bg = [mem.testbench(dut.m_axi), handshakes]
    if trace is not None:
        fill = dut._reader.data

        async def recorder(ctx):
            async for _, _, fv, fr in ctx.tick().sample(fill.valid, fill.ready):
                trace["cycles"].append((bool(fv and fr), trace["reading"]))
        bg.append(recorder)
    run_simulation(dut, [tb_writes, tb_loads, tb_consume], background=bg, vcd=False, max_cycles=max_cycles)
    return got


def expected_words(store, slot, row, n):
    ks = store.read_rows(slot, 0, row, n)
    vs = store.read_rows(slot, 1, row, n)
    return {i: (staging_word(*ks[i]), staging_word(*vs[i])) for i in range(n)}


def check_run(region, mem, store, image, blocks, writes, got):
    # rows delivered: golden bit for bit
    for b, (s, r, n) in enumerate(blocks):
        exp = expected_words(store, s, r, n)
        for i, words in got["blocks"][b]:
            assert words == exp[i], f"block {b} (slot {s}, rows {r}..{r + n - 1}): row {i}"
    # memory: the golden image with the writes, margins untouched (nothing else written)
    after = bytearray(image)
    after[MARGIN:MARGIN + region.size] = store.image
    assert mem.dump(BASE - MARGIN, len(after)) == bytes(after)
    # bus traffic: exactly the loads' rows and the written rows, every burst inside them
    bpb = region.bus_bytes
    r_beats = sum(ln + 1 for _, k, _, ln, _ in mem.log if k == "R")
    assert r_beats == sum(2 * n * region.row_beats for _, _, n in blocks)
    w_rows = [region.row_addr(slot, sel, row) for sel, slot, row, _, _ in writes]
    w_log = [(a, ln + 1) for _, k, a, ln, _ in mem.log if k == "W"]
    assert sum(n for _, n in w_log) == len(writes) * region.row_beats
    for a, n in w_log:
        assert any(ra <= a and a + n * bpb <= ra + region.row_bytes for ra in w_rows), f"stray write at {a:#x}"
    assert all(resp == Resp.OKAY for *_, resp in mem.log)


@st.composite
def scenario(draw, latency=st.integers(1, 60)):
    d = draw(st.sampled_from([8, 16]))
    kv_bits = draw(st.sampled_from([8, 4]))
    bus = draw(st.sampled_from([8, 16]))
    region = KVRegion(BASE, draw(st.integers(2, 4)), draw(st.integers(4, 12)), d, kv_bits, bus)
    win_rows = draw(st.integers(2, 8))
    blocks = []
    for _ in range(draw(st.integers(1, 5))):
        row = draw(st.integers(0, region.slot_rows - 1))
        n = draw(st.integers(1, min(win_rows, region.slot_rows - row)))
        blocks.append((draw(st.integers(0, region.n_slots - 1)), row, n))
    return dict(region=region, win_rows=win_rows, n_win=draw(st.sampled_from([2, 2, 4])),
                blocks=blocks, n_writes=draw(st.integers(0, 6)), latency=draw(latency),
                seed=draw(st.integers(0, 2 ** 16)), stall=draw(st.sampled_from([0.0, 0.3, 0.7])),
                max_burst=draw(st.sampled_from([1, 2, 4, 16])), read_ports=draw(st.sampled_from([1, 2])))


def _property(sc):
    region = sc["region"]
    dut, mem, store, image = make(region, win_rows=sc["win_rows"], n_win=sc["n_win"], latency=sc["latency"],
                                  seed=sc["seed"], max_burst=sc["max_burst"], read_ports=sc["read_ports"])
    writes = random_rows(region, random.Random(sc["seed"] + 9), sc["n_writes"])
    got = run(dut, mem, store, blocks=sc["blocks"], writes=writes, seed=sc["seed"], stall=sc["stall"])
    check_run(region, mem, store, image, sc["blocks"], writes, got)


@settings(max_examples=12)
@given(sc=scenario())
def test_streamer_matches_golden(sc):
    """Random regions (d, INT8/INT4, bus width), block tables, latency, AXI stalls, consumer
    back-pressure and written rows, one or two read ports: rows equal golden, memory equals
    golden, traffic exact."""
    _property(sc)


@settings(max_examples=4)
@given(sc=scenario(latency=st.integers(100, 140)))
def test_streamer_long_latency(sc):
    """The same property with a DDR latency of 100..140 cycles."""
    _property(sc)


def test_next_block_loads_while_block_is_read():
    """Ping-pong: fill beats of block b+1 are written while the consumer reads block b's window."""
    region = KVRegion(BASE, 4, 16, 16, 8, 8)
    dut, mem, store, image = make(region, win_rows=16, latency=100, seed=5, max_burst=16, stalls=False)
    blocks = [(i % 4, 0, 16) for i in range(5)]
    trace = {"reading": None, "cycles": []}
    got = run(dut, mem, store, blocks=blocks, seed=5, stall=0.85, trace=trace)
    check_run(region, mem, store, image, blocks, [], got)
    fills = [reading for f, reading in trace["cycles"] if f]
    per_block = 2 * 16 * region.row_beats
    assert len(fills) == per_block * len(blocks)
    for b in range(1, len(blocks)):             # block b fills while block b-1's window is read
        during = sum(1 for reading in fills[b * per_block:(b + 1) * per_block] if reading == (b - 1) % 2)
        print(f"block {b}: {during} of {per_block} fill beats while block {b - 1} was read")
        assert during >= per_block // 4, f"block {b}: only {during} fill beats overlapped block {b - 1}'s reads"


def test_load_waits_for_earlier_writes():
    """A load taken right after a write of one of its rows returns the new row (write -> read
    fence), at 100-cycle latency where a load that did not wait would read the old bytes."""
    region = KVRegion(BASE, 2, 4, 8, 8, 16)
    dut, mem, store, image = make(region, win_rows=4, latency=100, seed=11, stalls=False)
    writes = [(0, 1, 2, list(range(-4, 4)), 5), (1, 1, 2, list(range(7, -1, -1)), -3)]
    got = run(dut, mem, store, blocks=[(1, 0, 4)], writes=writes, seed=11, stall=0.0)
    check_run(region, mem, store, image, [(1, 0, 4)], writes, got)
    assert len(got["b"]) == 2 and min(got["ar"]) > max(got["b"]), "a load's reads went out before the writes landed"


# ---------------------------------------------------------------- bad input and bus errors
def _error_case(region, *, cmds, mem_kw=(), win_rows=4, expect, after=None, seed=3):
    """Send ``cmds`` [("load"| "wr", beat)], wait until the error register is set and the streamer
    is idle; then check the code/address, that intake is halted, and that error_clr resumes."""
    dut, mem, store, image = make(region, win_rows=win_rows, latency=100, seed=seed, **dict(mem_kw))
    res = {}

    async def tb(ctx):
        for kind, beat in cmds:
            s = dut.load if kind == "load" else dut.kv_wr
            await StreamSource(s, seed=seed).send(ctx, [beat])
        n = 0
        while not ctx.get(dut.error) or ctx.get(dut.busy):
            await ctx.tick()
            n += 1
        res["code"], res["addr"], res["full"] = ctx.get(dut.error), ctx.get(dut.error_addr), ctx.get(dut.full)
        ctx.set(dut.load.valid, 1)                  # halted: a good load is not taken
        ctx.set(dut.load.payload.n, 1)
        for _ in range(5):
            await ctx.tick()
            assert not ctx.get(dut.load.ready) and not ctx.get(dut.kv_wr.ready)
        ctx.set(dut.load.valid, 0)
        ctx.set(dut.error_clr, 1)
        await ctx.tick()
        ctx.set(dut.error_clr, 0)
        await ctx.tick()
        res["cleared"] = ctx.get(dut.error)
        if after is not None:                        # and a good load works again
            await StreamSource(dut.load, seed=seed).send(ctx, [after])
            await wait_full_or_error(ctx, dut, after["win"])
            res["after"] = ctx.get(dut.error)

    run_simulation(dut, [tb], background=[mem.testbench(dut.m_axi)], vcd=False, max_cycles=20_000)
    assert (res["code"], res["addr"]) == expect
    assert res["full"] == 0 and res["cleared"] == 0
    if after is not None:
        assert res["after"] == 0
    return mem, store, image


REG = KVRegion(BASE, 3, 8, 8, 8, 16)


@pytest.mark.parametrize("beat,code,addr", [
    ({"slot": 3, "row": 0, "n": 1, "win": 0}, DmaStatus.OUT_OF_WINDOW, BASE + 3 * REG.slot_bytes),
    ({"slot": 1, "row": 6, "n": 3, "win": 1}, DmaStatus.OUT_OF_WINDOW, REG.row_addr(1, 0, 6)),
    ({"slot": 0, "row": 0, "n": 0, "win": 0}, DmaStatus.ZERO_LENGTH, BASE),
    ({"slot": 0, "row": 0, "n": 5, "win": 0}, DmaStatus.TOO_LONG, BASE),
])
def test_bad_load_is_refused_without_traffic(beat, code, addr):
    mem, *_ = _error_case(REG, cmds=[("load", beat)], expect=(code, addr),
                          after={"slot": 2, "row": 4, "n": 4, "win": 1})
    assert [k for _, k, *_ in mem.log] == ["R", "R"]          # only the good load after error_clr


@pytest.mark.parametrize("slot,row", [(3, 0), (0, 8)])
def test_bad_write_is_refused_without_traffic(slot, row):
    beat = wr_beat(0, slot, row, [1] * 8, 0)
    mem, *_ = _error_case(REG, cmds=[("wr", beat)],
                          expect=(DmaStatus.OUT_OF_WINDOW, BASE + slot * REG.slot_bytes + row * REG.row_bytes))
    assert mem.log == []


@pytest.mark.parametrize("resp,sel", [(Resp.SLVERR, 0), (Resp.SLVERR, 1), (Resp.DECERR, 1)])
def test_read_error_sets_address_and_halts(resp, sel):
    bad = REG.row_addr(1, sel, 3)               # K or V row 3 of slot 1
    if resp == Resp.SLVERR:
        kw = {"error_ranges": [(bad, bad + 1, Resp.SLVERR)]}
    else:                                       # memory ends at that row: the rest is DECERR
        kw = {"mem_size": bad - (BASE - MARGIN)}
    code = DmaStatus.SLVERR if resp == Resp.SLVERR else DmaStatus.DECERR
    _error_case(REG, cmds=[("load", {"slot": 1, "row": 2, "n": 4, "win": 0})], mem_kw=kw, expect=(code, bad),
                after={"slot": 0, "row": 0, "n": 4, "win": 0})


def test_write_error_sets_address_and_leaves_memory():
    bad = REG.row_addr(2, 0, 5)
    mem, store, image = _error_case(REG, cmds=[("wr", wr_beat(0, 2, 5, [3] * 8, 1))],
                                    mem_kw={"error_ranges": [(bad, bad + 1, Resp.SLVERR)]},
                                    expect=(DmaStatus.SLVERR, bad))
    assert mem.dump(BASE - MARGIN, len(image)) == bytes(image)


def test_region_parameters_are_checked():
    with pytest.raises(ValueError, match="n_win"):
        KVStreamer(REG, n_win=3)
    with pytest.raises(ValueError, match="read_ports must be 1 or 2"):
        KVStreamer(REG, read_ports=3)
    with pytest.raises(ValueError, match="addr"):
        KVStreamer(KVRegion(2 ** 32 - 16, 1, 1, 8), addr_width=32)
    with pytest.raises(ValueError, match="kv_bits"):
        KVRegion(0, 1, 1, 8, kv_bits=2)
    with pytest.raises(ValueError, match="slot=4"):
        REG.row_addr(4, 0, 0)


def test_region_sixteen_times_the_staging_buffer():
    """A region holding 16x the staging buffer's rows (8 slots x 32 rows vs 2 windows x 8 rows)
    streamed whole, block after block, at 100-cycle latency with AXI stalls: every row equals
    golden (the issue's long-context case at the streamer level)."""
    region = KVRegion(BASE, 8, 32, 8, 4, 8)
    dut, mem, store, image = make(region, win_rows=8, latency=100, seed=21, max_burst=16)
    assert region.n_slots * region.slot_rows >= 16 * dut.n_win * dut.win_rows
    blocks = [(s, r, 8) for s in range(8) for r in range(0, 32, 8)]
    got = run(dut, mem, store, blocks=blocks, seed=21, stall=0.2, max_cycles=200_000)
    check_run(region, mem, store, image, blocks, [], got)
