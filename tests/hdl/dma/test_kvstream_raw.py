"""The K/V streamer's raw read path (``raw`` -> ``raw_out``): records straight from DDR for KV sends.

Golden first: every raw run's bytes equal golden ``KVStore.read_records`` at the point in the
command order where the raw read was taken (writes taken before it included: write -> read
fence), under random regions (d, INT8/INT4, bus width), latency (>= 100 in one property), AXI ready
stalls, ``raw_out`` back-pressure and loads interleaved on the same DMAReader (their windows still
equal golden). Bad raw commands are refused with no bus transaction and no ``raw_out`` beat;
SLVERR/DECERR during a run: every beat still delivered, error code and first failing beat's
address, halt, ``error_clr`` resumes.
"""
import random

import pytest
from hypothesis import given, settings, strategies as st

from mcf_fpga.spec.kvregion import KVRegion
from mcf_fpga.hdl.bus import Resp
from mcf_fpga.spec.dma import DmaStatus
from mcf_fpga.sim.kit import StreamSource, run_simulation, axi_handshakes

from .test_kvstream import BASE, MARGIN, make, random_rows, wr_beat, read_window, release, \
    wait_full_or_error, expected_words


def beats_bytes(beats, bus_bytes):
    return b"".join(b["data"].to_bytes(bus_bytes, "little") for b in beats)


def run_cmds(dut, mem, store, cmds, *, seed, out_prob=1.0, stall=0.2, max_cycles=80_000):
    """Issue ``cmds`` in order: ("wr", row) on kv_wr, ("load", slot, row, n) on load (window =
    load count % n_win), ("raw", slot, rec0, n) on raw, each sent once the previous one was taken.
    Golden ``store`` is updated by the writes in that order; returns the raw runs received (beats)
    with their expected bytes, and the loads' windows as read with their expected words."""
    rng = random.Random(seed + 5)
    res = {"raw": [], "loads": [], "exp_raw": [], "exp_load": []}
    loads, raws = [], []
    for c in cmds:                                  # golden view at each read's place in the order
        if c[0] == "wr":
            sel, slot, row, vals, e = c[1]
            store.write_row(slot, sel, row, vals, e)
        elif c[0] == "raw":
            raws.append(c[1:])
            res["exp_raw"].append(store.read_records(*c[1:]))
        else:
            loads.append(c[1:])
            res["exp_load"].append(expected_words(store, *c[1:]))

    async def commander(ctx):
        nl = 0
        for c in cmds:
            if c[0] == "wr":
                # no read -> write fence in the streamer (only write -> read): like the engine,
                # send a write only once earlier reads are done
                while ctx.get(dut.raw_busy) or ctx.get(dut.loading):
                    await ctx.tick()
                await StreamSource(dut.kv_wr, seed=rng.randrange(1 << 16), valid_prob=0.7).send(ctx, [wr_beat(*c[1])])
            elif c[0] == "raw":
                s, r0, n = c[1:]
                await StreamSource(dut.raw, seed=rng.randrange(1 << 16), valid_prob=0.7).send(
                    ctx, [{"slot": s, "rec0": r0, "n": n}])
            else:
                s, r, n = c[1:]
                await StreamSource(dut.load, seed=rng.randrange(1 << 16), valid_prob=0.7).send(
                    ctx, [{"slot": s, "row": r, "n": n, "win": nl % dut.n_win}])
                nl += 1
        res["sent"] = True

    async def raw_rx(ctx):
        orng = random.Random(seed + 6)
        for _ in raws:
            beats = []
            while True:
                ctx.set(dut.raw_out.ready, orng.random() < out_prob)
                _, _, v, r, p = await ctx.tick().sample(dut.raw_out.valid, dut.raw_out.ready, dut.raw_out.payload)
                if v and r:
                    beats.append({"data": p.data, "last": p.last})
                    if p.last:
                        break
            res["raw"].append(beats)
        ctx.set(dut.raw_out.ready, 0)

    async def consume(ctx):
        crng = random.Random(seed + 7)
        for b, (_s, _r, n) in enumerate(loads):
            w = b % dut.n_win
            await wait_full_or_error(ctx, dut, w)
            assert not ctx.get(dut.error)
            order = list(range(n))
            crng.shuffle(order)
            res["loads"].append(await read_window(ctx, dut, w, order, crng, stall))   # [(row, (k, v))]
            await release(ctx, dut, w)

    async def idle(ctx):
        while not res.get("sent"):
            await ctx.tick()
        for _ in range(3):
            await ctx.tick()
        while ctx.get(dut.busy) or ctx.get(dut.raw_busy):
            await ctx.tick()

    handshakes = axi_handshakes(dut.m_axi, res)           # cycles of AR and B handshakes
    run_simulation(dut, [commander, raw_rx, consume, idle], background=[mem.testbench(dut.m_axi), handshakes],
                   vcd=False, max_cycles=max_cycles)
    return res, loads, raws


@st.composite
def raw_scenario(draw, latency=st.integers(1, 60)):
    d = draw(st.sampled_from([8, 16]))
    kv_bits = draw(st.sampled_from([8, 4]))
    bus = draw(st.sampled_from([8, 16]))
    region = KVRegion(BASE, draw(st.integers(2, 3)), draw(st.integers(2, 10)), d, kv_bits, bus)
    win_rows = draw(st.integers(2, 6))
    nrec = 2 * region.slot_rows
    rng = random.Random(draw(st.integers(0, 2 ** 16)))
    cmds = []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["raw", "raw", "wr", "load"]))
        slot = draw(st.integers(0, region.n_slots - 1))
        if kind == "raw":                        # any contiguous run: K, V, or across K/V
            rec0 = draw(st.integers(0, nrec - 1))
            cmds.append(("raw", slot, rec0, draw(st.integers(1, nrec - rec0))))
        elif kind == "wr":
            cmds.append(("wr", random_rows(region, rng, 1)[0]))
        else:
            row = draw(st.integers(0, region.slot_rows - 1))
            cmds.append(("load", slot, row, draw(st.integers(1, min(win_rows, region.slot_rows - row)))))
    return dict(region=region, win_rows=win_rows, cmds=cmds, latency=draw(latency),
                seed=draw(st.integers(0, 2 ** 16)), out_prob=draw(st.sampled_from([1.0, 0.5, 0.2])),
                max_burst=draw(st.sampled_from([1, 4, 16])))


def _raw_property(sc):
    region = sc["region"]
    dut, mem, store, image = make(region, win_rows=sc["win_rows"], latency=sc["latency"], seed=sc["seed"],
                                  max_burst=sc["max_burst"])
    res, loads, raws = run_cmds(dut, mem, store, sc["cmds"], seed=sc["seed"], out_prob=sc["out_prob"])
    for k, ((s, r0, n), beats, exp) in enumerate(zip(raws, res["raw"], res["exp_raw"])):
        assert len(beats) == n * region.row_beats and [b["last"] for b in beats][-1] == 1
        assert not any(b["last"] for b in beats[:-1])
        assert beats_bytes(beats, region.bus_bytes) == exp, f"raw {k}: slot {s} records {r0}..{r0 + n - 1}"
    for b, (got, exp) in enumerate(zip(res["loads"], res["exp_load"])):
        for i, words in got:
            assert words == exp[i], f"load {b} row {i}"
    after = bytearray(image)
    after[MARGIN:MARGIN + region.size] = store.image
    assert mem.dump(BASE - MARGIN, len(after)) == bytes(after)
    r_beats = sum(ln + 1 for _, k, _, ln, _ in mem.log if k == "R")
    assert r_beats == (sum(2 * n for _, _, n in loads) + sum(n for *_, n in raws)) * region.row_beats
    # the raw runs' bursts: exactly their records, in order, behind the loads' (one reader)
    assert all(resp == Resp.OKAY for *_, resp in mem.log)


@settings(max_examples=20)
@given(sc=raw_scenario())
def test_raw_reads_match_golden(sc):
    """Raw runs (K, V or across, any length) interleaved with writes and loads: bytes = golden."""
    _raw_property(sc)


@settings(max_examples=5)
@given(sc=raw_scenario(latency=st.integers(100, 140)))
def test_raw_reads_long_latency(sc):
    """The same property at 100..140 cycles of DDR latency."""
    _raw_property(sc)


def test_raw_read_waits_for_earlier_writes():
    """A raw read right behind writes of its records returns the new bytes (100-cycle latency,
    where a read that did not wait would return the old ones); its AR follows both B responses."""
    region = KVRegion(BASE, 2, 4, 8, 8, 16)
    dut, mem, store, image = make(region, latency=100, win_rows=4, seed=11, stalls=False)
    w = [(0, 1, 2, list(range(-4, 4)), 5), (1, 1, 2, list(range(7, -1, -1)), -3)]
    cmds = [("wr", w[0]), ("wr", w[1]), ("raw", 1, 2, 5)]           # K rows 2, 3 and V rows 0..2
    res, _, _ = run_cmds(dut, mem, store, cmds, seed=11)
    assert beats_bytes(res["raw"][0], 16) == res["exp_raw"][0]
    assert len(res["b"]) == 2 and min(res["ar"]) > max(res["b"]), "the raw read went out before the writes landed"


REG = KVRegion(BASE, 3, 8, 8, 8, 16)


@pytest.mark.parametrize("beat,code,addr", [
    ({"slot": 3, "rec0": 0, "n": 1}, DmaStatus.OUT_OF_WINDOW, BASE + 3 * REG.slot_bytes),
    ({"slot": 1, "rec0": 14, "n": 3}, DmaStatus.OUT_OF_WINDOW, REG.record_addr(1, 14)),
    ({"slot": 0, "rec0": 2, "n": 0}, DmaStatus.ZERO_LENGTH, REG.record_addr(0, 2)),
    # offered from the first cycle, its payload equal to the registered check's reset values:
    # taken in its second cycle, from the check of its own payload, and refused
    ({"slot": 0, "rec0": 0, "n": 0}, DmaStatus.ZERO_LENGTH, BASE),
])
def test_bad_raw_is_refused_without_traffic(beat, code, addr):
    dut, mem, store, image = make(REG, win_rows=4, latency=50, seed=3)
    res = {}

    async def tb(ctx):
        await StreamSource(dut.raw).send(ctx, [beat])
        while not ctx.get(dut.error):
            assert not ctx.get(dut.raw_out.valid)
            await ctx.tick()
        res["err"] = (ctx.get(dut.error), ctx.get(dut.error_addr))
        ctx.set(dut.raw.valid, 1)                   # halted: nothing is taken
        ctx.set(dut.raw.payload.n, 1)
        for _ in range(5):
            await ctx.tick()
            assert not ctx.get(dut.raw.ready) and not ctx.get(dut.raw_out.valid)
        ctx.set(dut.raw.valid, 0)
    run_simulation(dut, [tb], background=[mem.testbench(dut.m_axi)], vcd=False, max_cycles=2_000)
    assert res["err"] == (code, addr)
    assert mem.log == []


@pytest.mark.parametrize("resp", [Resp.SLVERR, Resp.DECERR])
def test_raw_read_error_delivers_every_beat_and_halts(resp):
    """SLVERR on one beat / DECERR from one record on (the memory ends there): the run's beats all
    arrive, ``last`` on the final one; error = the code and the first failing beat's address, in
    ``error`` when ``raw_busy`` falls; the streamer halts; ``error_clr`` resumes and a good raw read works again."""
    bad = REG.record_addr(1, 9)                     # V row 1 of slot 1: the run's 4th beat (1 beat a row)
    if resp == Resp.SLVERR:
        kw = dict(error_ranges=[(bad, bad + 1, Resp.SLVERR)])
    else:
        kw = dict(mem_size=bad - (BASE - MARGIN))
    dut, mem, store, image = make(REG, win_rows=4, latency=100, seed=4, **kw)
    res = {}

    async def tb(ctx):
        await StreamSource(dut.raw).send(ctx, [{"slot": 1, "rec0": 6, "n": 5}])
        beats = []
        rng = random.Random(1)
        while not beats or not beats[-1]:
            ctx.set(dut.raw_out.ready, rng.random() < 0.5)
            _, _, v, r, p = await ctx.tick().sample(dut.raw_out.valid, dut.raw_out.ready, dut.raw_out.payload)
            if v and r:
                beats.append(p.last)
        ctx.set(dut.raw_out.ready, 0)
        res["beats"] = beats
        while ctx.get(dut.raw_busy):                 # a raw read's consumer (the engine's KVS) waits
            await ctx.tick()                         # for raw_busy alone: its error is in by then
        res["err_raw_idle"] = (ctx.get(dut.error), ctx.get(dut.error_addr))
        while ctx.get(dut.busy) or ctx.get(dut.raw_busy):
            await ctx.tick()
        res["err"] = (ctx.get(dut.error), ctx.get(dut.error_addr))
        assert not ctx.get(dut.raw.ready) and not ctx.get(dut.load.ready)
        ctx.set(dut.error_clr, 1)
        await ctx.tick()
        ctx.set(dut.error_clr, 0)
        await StreamSource(dut.raw).send(ctx, [{"slot": 0, "rec0": 0, "n": 2}])
        ctx.set(dut.raw_out.ready, 1)
        got = []
        while not got or not got[-1]:
            _, _, v, p = await ctx.tick().sample(dut.raw_out.valid, dut.raw_out.payload)
            if v:
                got.append(p.last)
        while ctx.get(dut.raw_busy):
            await ctx.tick()
        res["after"] = (len(got), ctx.get(dut.error))
    run_simulation(dut, [tb], background=[mem.testbench(dut.m_axi)], vcd=False, max_cycles=5_000)
    assert res["beats"] == [0] * 4 + [1]
    code = DmaStatus.SLVERR if resp == Resp.SLVERR else DmaStatus.DECERR
    assert res["err"] == res["err_raw_idle"] == (code, bad)
    assert res["after"] == (2, 0)
