"""KVRowWriter alone: every row inside the region goes out as one descriptor at golden's address
(``KVRegion.row_addr``) and the bytes of golden's record (``KVStore.write_row``), in order, under
random valid gaps and descriptor/data back-pressure; a row outside the region is refused with its
address and no traffic; ``idle`` once every status is back."""
import random

from hypothesis import given, settings, strategies as st

from mcf_fpga.golden.kvstore import KVStore
from mcf_fpga.spec.kvregion import KVRegion, staging_word
from mcf_fpga.hdl.dma.kv_row_writer import KVRowWriter
from mcf_fpga.sim.kit import StreamSource, StreamSink, run_simulation

BASE = 0x4000


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2 ** 16), kv_bits=st.sampled_from([8, 4]), d=st.sampled_from([8, 16]),
       bus=st.sampled_from([8, 16]), n=st.integers(1, 10), vp=st.floats(0.3, 1), rp=st.floats(0.3, 1))
def test_rows_become_golden_records(seed, kv_bits, d, bus, n, vp, rp):
    region = KVRegion(BASE, 3, 5, d, kv_bits, bus)
    dut = KVRowWriter(region, addr_width=32, len_width=16)
    rng = random.Random(seed)
    lo, hi = -(1 << (kv_bits - 1)), (1 << (kv_bits - 1)) - 1
    beats, want_desc, want_data, want_refused = [], [], [], []
    for _ in range(n):
        sel, slot, row = rng.randint(0, 1), rng.randrange(4), rng.randrange(6)
        vals, e = [rng.randint(lo, hi) for _ in range(d)], rng.randint(-128, 127)
        beats.append({"sel": sel, "slot": slot, "row": row, "e": e,
                      "data": staging_word(vals, 0) & ((1 << (8 * d)) - 1)})
        addr = BASE + slot * region.slot_bytes + (sel * region.slot_rows + row) * region.row_bytes
        if slot >= region.n_slots or row >= region.slot_rows:
            want_refused.append(addr)
            continue
        store = KVStore(region)
        store.write_row(slot, sel, row, vals, e)
        assert region.row_addr(slot, sel, row) == addr
        want_desc.append({"addr": addr, "length": region.row_bytes})
        rec = int.from_bytes(store.image[addr - BASE:addr - BASE + region.row_bytes], "little")
        rb = region.row_beats
        for b in range(rb):
            want_data.append({"data": (rec >> (8 * bus * b)) & ((1 << (8 * bus)) - 1),
                              "keep": (1 << bus) - 1, "last": int(b == rb - 1)})
    src = StreamSource(dut.row, seed=seed, valid_prob=vp)
    dsink = StreamSink(dut.desc, seed=seed + 1, ready_prob=rp)
    bsink = StreamSink(dut.data, seed=seed + 2, ready_prob=rp)
    refused, sent = [], []

    async def tb(ctx):
        await src.send(ctx, beats)
        sent.append(True)

    async def rxd(ctx):
        assert await dsink.collect(ctx, len(want_desc)) == want_desc
        sent.append(True)

    async def rx(ctx):
        assert await bsink.collect(ctx, len(want_data)) == want_data
        while len(sent) < 2:
            await ctx.tick()
        for _ in range(len(want_desc)):             # the writer's statuses, one per row
            assert ctx.get(dut.idle) == 0
            ctx.set(dut.status.valid, 1)
            await ctx.tick()
        ctx.set(dut.status.valid, 0)
        await ctx.tick()
        assert ctx.get(dut.idle) == 1

    async def watch(ctx):
        async for _, _, r, a in ctx.tick().sample(dut.refused, dut.refused_addr):
            if r:
                refused.append(a)

    run_simulation(dut, [tb, rxd, rx], background=[watch])
    assert refused == want_refused


def test_halt_holds_rows():
    region = KVRegion(BASE, 2, 4, 8, 8, 16)
    dut = KVRowWriter(region, addr_width=32, len_width=16)

    async def tb(ctx):
        ctx.set(dut.halt, 1)
        ctx.set(dut.row.valid, 1)
        for _ in range(5):
            assert ctx.get(dut.row.ready) == 0
            await ctx.tick()
        assert ctx.get(dut.desc.valid) == 0
        ctx.set(dut.halt, 0)
        assert ctx.get(dut.row.ready) == 1
        await ctx.tick()
        ctx.set(dut.row.valid, 0)
        assert ctx.get(dut.desc.valid) == 1 and ctx.get(dut.row.ready) == 0

    run_simulation(dut, [tb])
