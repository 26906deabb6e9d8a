"""KVRowAssembler alone: read-DMA beats of golden records (``KVStore``) become the staging words
of golden's rows (``staging_word`` of ``KVStore.read_row``) at ``win * win_rows + row`` of the K
memory then the V memory, and a raw entry's beats come out unchanged on ``raw_out``, in ``fill``
order, under random valid gaps and ``raw_out`` back-pressure."""
import random

from hypothesis import given, settings, strategies as st

from mcf_fpga.golden.kvstore import KVStore
from mcf_fpga.spec.kvregion import KVRegion, staging_word
from mcf_fpga.hdl.dma.kv_row_assembler import KVRowAssembler
from mcf_fpga.sim.kit import StreamSource, StreamSink, run_simulation

WIN_ROWS, N_WIN = 4, 4


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2 ** 16), kv_bits=st.sampled_from([8, 4]), d=st.sampled_from([8, 16, 32]),
       bus=st.sampled_from([8, 16]), n_fills=st.integers(1, 5), vp=st.floats(0.3, 1), rp=st.floats(0.3, 1))
def test_beats_become_golden_words(seed, kv_bits, d, bus, n_fills, vp, rp):
    region = KVRegion(0, 2, WIN_ROWS, d, kv_bits, bus)
    dut = KVRowAssembler(region, WIN_ROWS, win_width=2, addr_width=4)
    rng = random.Random(seed)
    store = KVStore(region)
    lo, hi = -(1 << (kv_bits - 1)), (1 << (kv_bits - 1)) - 1
    for s in range(2):
        for sel in (0, 1):
            for r in range(WIN_ROWS):
                store.write_row(s, sel, r, [rng.randint(lo, hi) for _ in range(d)], rng.randint(-128, 127))
    fills, beats, want_k, want_v, want_raw = [], [], [], [], []
    bmask = (1 << (8 * bus)) - 1

    def to_beats(blob):
        x = int.from_bytes(blob, "little")
        nb = len(blob) // bus
        return [{"data": (x >> (8 * bus * i)) & bmask, "keep": (1 << bus) - 1, "last": int(i == nb - 1)}
                for i in range(nb)]

    for _ in range(n_fills):
        slot = rng.randrange(2)
        if rng.random() < 0.3:                              # raw run of records
            rec0 = rng.randrange(2 * WIN_ROWS)
            n = rng.randint(1, 2 * WIN_ROWS - rec0)
            run = to_beats(store.read_records(slot, rec0, n))
            fills.append({"win": 0, "last": 0, "raw": 1})
            beats += run
            want_raw += [{"data": b["data"], "last": b["last"]} for b in run]
            continue
        win, row, n = rng.randrange(N_WIN), rng.randrange(WIN_ROWS), 0
        n = rng.randint(1, WIN_ROWS - row)
        fills.append({"win": win, "last": n - 1, "raw": 0})
        for sel, want in ((0, want_k), (1, want_v)):
            for i in range(n):                              # the reader's beats: no per-row last
                beats += [dict(b, last=0) for b in to_beats(store.read_records(slot, sel * WIN_ROWS + row + i, 1))]
                want.append((win * WIN_ROWS + i, staging_word(*store.read_row(slot, sel, row + i))))
    fsrc = StreamSource(dut.fill, seed=seed, valid_prob=vp)
    bsrc = StreamSource(dut.beats, seed=seed + 1, valid_prob=vp)
    sink = StreamSink(dut.raw_out, seed=seed + 2, ready_prob=rp)
    got_k, got_v = [], []

    async def tf(ctx):
        await fsrc.send(ctx, fills)

    async def tb(ctx):
        await bsrc.send(ctx, beats)

    async def rx(ctx):
        assert await sink.collect(ctx, len(want_raw)) == want_raw

    async def watch(ctx):
        async for _, _, ke, ka, kd, ve, va, vd in ctx.tick().sample(
                dut.k_wr.en, dut.k_wr.addr, dut.k_wr.data, dut.v_wr.en, dut.v_wr.addr, dut.v_wr.data):
            if ke:
                got_k.append((ka, kd))
            if ve:
                got_v.append((va, vd))

    run_simulation(dut, [tf, tb, rx], background=[watch])
    assert got_k == want_k and got_v == want_v
