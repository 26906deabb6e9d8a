"""GemmWeightLoader alone: tiles packed by ``pack_weight_tile`` (the tile format) land as the
format says: tile i's weight beat c in ring row (i*kc + c) mod w_rows, group g's scales in word
g + bank*gmax, the header in bank ``i % 2``'s we/bias; ``full`` (driven here as the array would:
set on ``tile_loaded``, cleared some cycles later) holds the loader; a misplaced ``last`` pulses
``framing``. Random valid gaps on ``w_in`` and random tile shapes."""
import random

from hypothesis import given, settings, strategies as st

from mcf_fpga.hdl.compute.gemm import pack_weight_tile
from mcf_fpga.hdl.compute.gemm_weight_loader import GemmWeightLoader
from mcf_fpga.sim.kit import StreamSource, run_simulation


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2 ** 16), shape=st.sampled_from([(4, 16, 1), (4, 16, 2), (2, 10, 2), (2, 16, 3)]),
       groups=st.integers(1, 3), tiles=st.integers(1, 4), vp=st.floats(0.3, 1), bad_last=st.booleans())
def test_tiles_land_where_the_format_says(seed, shape, groups, tiles, vp, bad_last):
    pn, pk, cpg = shape
    kc_max = 3 * cpg
    kc = groups * cpg
    group = cpg * pk
    dut = GemmWeightLoader(pn, pk, cpg, kc_max, w_rows=2 * kc_max)
    rng = random.Random(seed)
    beats, want = [], []
    for _ in range(tiles):
        q = [[rng.randint(-7, 7) for _ in range(kc * pk)] for _ in range(pn)]
        ws = [[rng.randint(1, 255) for _ in range(groups)] for _ in range(pn)]
        we = [rng.randint(-128, 127) for _ in range(pn)]
        bias = [rng.randint(-2 ** 31, 2 ** 31 - 1) for _ in range(pn)]
        tile = pack_weight_tile(q, ws, we, bias, pk, group)
        beats += [{"data": d, "last": last} for d, last in tile]
        want.append((tile, ws, we, bias))
    n_bad = 0
    if bad_last:                                 # one beat with a wrong ``last``
        i = rng.randrange(len(beats))
        beats[i]["last"] ^= 1
        n_bad = 1
    ring, scales, loaded, framing = {}, {}, [], []
    src = StreamSource(dut.w_in, seed=seed, valid_prob=vp)

    async def tb(ctx):
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        ctx.set(dut.running, 1)
        ctx.set(dut.tiles, tiles)
        ctx.set(dut.kc, kc)
        ctx.set(dut.kc_m1, kc - 1)
        await src.send(ctx, beats)
        while len(loaded) < tiles:
            await ctx.tick()

    async def array(ctx):                         # full bits: set when loaded, retired later
        full, retire = 0, []
        async for _, _, tl, b, we_, wa, wd, se, sa, sd, fr, hw, hb in ctx.tick().sample(
                dut.tile_loaded, dut.wr_buf, dut.w_wr.en, dut.w_wr.addr, dut.w_wr.data,
                dut.ws_wr.en, dut.ws_wr.addr, dut.ws_wr.data, dut.framing, dut.we, dut.bias):
            if we_:
                ring.setdefault(wa, []).append(wd)
            if se:
                scales.setdefault(sa, []).append(sd)
            framing.append(fr)
            if tl:
                full |= 1 << b
                retire.append((rng.randint(1, 10), b))
                loaded.append(b)
            retire = [(t - 1, bb) for t, bb in retire]
            for t, bb in retire:
                if t == 0:
                    full &= ~(1 << bb)
            retire = [(t, bb) for t, bb in retire if t > 0]
            ctx.set(dut.full, full)

    async def headers(ctx):                       # bank b's header right after each tile_loaded
        i = 0
        async for _, _, tl, b in ctx.tick().sample(dut.tile_loaded, dut.wr_buf):
            if tl and not bad_last:
                _, _, we, bias = want[i]
                assert [int(v) for v in ctx.get(dut.we)[b]] == we
                assert [int(v) for v in ctx.get(dut.bias)[b]] == bias
                i += 1

    run_simulation(dut, [tb], background=[array, headers])
    assert sum(framing) >= n_bad and (bad_last or sum(framing) == 0)
    if bad_last:
        return
    assert loaded == [i % 2 for i in range(tiles)]
    gmax = kc_max // cpg
    for i, (tile, ws, _, _) in enumerate(want):
        wbeats = [d for d, _ in tile[-kc:]]
        for c, d in enumerate(wbeats):
            assert ring[(i * kc + c) % (2 * kc_max)][(i * kc + c) // (2 * kc_max)] == d   # n-th write
        for g in range(groups):
            word = sum(ws[n][g] << (8 * n) for n in range(pn))
            assert scales[g + (i % 2) * gmax][i // 2] == word
