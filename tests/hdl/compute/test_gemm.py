"""GemmArray vs golden QuantLinear.__call__: bit-exact on random shapes/data, with random
valid gaps on the inputs and back-pressure on y_out (also with weight rings smaller than
2*kc_max, whose hazard rule costs no cycles at full rate); bad commands set error bits and hang
nothing."""
import gc

import pytest
import torch
from hypothesis import example, given, strategies as st, settings

from mcf_fpga.golden.numerics import QuantLinear
from mcf_fpga.hdl.compute.gemm import (GemmArray, GemmOp, pack_weight_tile, tile_beats, ERR_OPCODE, ERR_SHAPE,
                              ERR_NO_X, ERR_FRAMING)
from mcf_fpga.sim.kit import StreamSource, StreamSink, run_simulation

PN, PK, GROUP = 4, 16, 32
DUTS = {p: GemmArray(pn=PN, pk=PK, group=GROUP, kc_max=8, x_depth=64, t_max=8, pack2=p)
        for p in (True, False)}
# one column requantized per cycle: PN cycles per row > group/PK, so the array waits for it
DUTS["rq1"] = GemmArray(pn=PN, pk=PK, group=GROUP, kc_max=8, x_depth=64, t_max=8, rq_lanes=1)
# the requantizer pipelined in four stages (one lane, as KR260's)
DUTS["rq4"] = GemmArray(pn=PN, pk=PK, group=GROUP, kc_max=8, x_depth=64, t_max=8, rq_lanes=1, rq_stages=4)
# and the MAC pipeline's dot products in stages too (every GEMM pipelining option)
DUTS["pipe"] = GemmArray(pn=PN, pk=PK, group=GROUP, kc_max=8, x_depth=64, t_max=8, rq_lanes=1, rq_stages=4,
                         mac_pipelined=True, check_pipelined=True)
# and its adder tree two terms a stage (a deeper pipeline: products + 3 tree stages)
DUTS["tree2"] = GemmArray(pn=PN, pk=PK, group=GROUP, kc_max=8, x_depth=64, t_max=8, rq_lanes=1, rq_stages=4,
                          mac_pipelined=True, check_pipelined=True, mac_tree_arity=2)
# weight rings of kc_max + 1 rows and of kc_max rows (the tightest: the next tile's row l may only
# overwrite row l of the current one once the last token has read it); otherwise DUTS[True]
RINGS = {r: GemmArray(pn=PN, pk=PK, group=GROUP, kc_max=8, x_depth=64, t_max=8, w_rows=r) for r in (9, 8)}


def unpack_signed(v, n, w):
    """Split an integer into n signed w-bit lanes (lane 0 at bit 0)."""
    out = []
    for i in range(n):
        x = (v >> (w * i)) & ((1 << w) - 1)
        out.append(x - (1 << w) if x >> (w - 1) else x)
    return out


def x_beats(xq, xe, pk):
    T, K = xq.shape
    out = []
    for t in range(T):
        for c in range(K // pk):
            d = 0
            for k in range(pk):
                d |= (int(xq[t, c * pk + k]) & 0xFF) << (8 * k)
            out.append({"data": d, "e": int(xe[t])})
    return out


def run_gemm(dut, lin: QuantLinear, xq, xe, *, seed=0, valid_prob=1.0, ready_prob=1.0,
             extra_cmds=(), max_cycles=20000, stats=None, runs=None):
    """Run one LOAD_X + RUN job -> (y [T, N], the beats' ``last`` bits, ``error``). ``stats``
    (a dict) gets ``cycles`` (up to the last y beat) and ``w_held`` (cycles with a weight beat
    valid but not taken). ``runs``: the tiles of each of several RUNs after the LOAD_X (their
    weight beats one stream, offered from the start), instead of one RUN of all."""
    T, K = xq.shape
    N = lin.out_features
    pn, pk = dut.pn, dut.pk
    kc, tiles = K // pk, N // pn
    wbeats = []
    for i in range(tiles):
        rows = slice(i * pn, (i + 1) * pn)
        bias = None if lin.bias is None else lin.bias[rows].tolist()
        for d, last in pack_weight_tile(lin.q[rows].tolist(), lin.ws[rows].tolist(),
                                        lin.we[rows].tolist(), bias, pk, lin.group):
            wbeats.append({"data": d, "last": last})
    assert runs is None or sum(runs) == tiles
    cmds = list(extra_cmds) + [{"op": GemmOp.LOAD_X, "kc": kc, "t": T, "tiles": 0}] + \
        [{"op": GemmOp.RUN, "kc": 0, "t": 0, "tiles": r} for r in (runs or [tiles])]
    csrc = StreamSource(dut.cmd, seed=seed)
    xsrc = StreamSource(dut.x_in, seed=seed + 1, valid_prob=valid_prob)
    wsrc = StreamSource(dut.w_in, seed=seed + 2, valid_prob=valid_prob)
    snk = StreamSink(dut.y_out, seed=seed + 3, ready_prob=ready_prob)
    got = {}

    async def tb_cmd(ctx):
        await csrc.send(ctx, cmds)

    async def tb_x(ctx):
        await xsrc.send(ctx, x_beats(xq, xe, pk))

    async def tb_w(ctx):
        await wsrc.send(ctx, wbeats)

    async def tb_y(ctx):
        got["beats"] = await snk.collect(ctx, tiles * T)
        got["err"] = ctx.get(dut.error)
        got["done"] = True

    count = {"cycles": 0, "w_held": 0}

    async def tb_count(ctx):
        async for _, _, valid, ready in ctx.tick().sample(dut.w_in.valid, dut.w_in.ready):
            if "done" in got:
                return
            count["cycles"] += 1
            count["w_held"] += valid & ~ready & 1

    run_simulation(dut, [tb_cmd, tb_x, tb_w, tb_y], background=[tb_count], max_cycles=max_cycles, vcd=False)
    if stats is not None:
        stats.update(count)
    y = torch.zeros(T, N, dtype=torch.int64)
    lasts = []
    for i, b in enumerate(got["beats"]):
        tile, t = divmod(i, T)
        y[t, tile * pn:(tile + 1) * pn] = torch.tensor(unpack_signed(b["data"], pn, 32))
        lasts.append(b["last"])
    return y, lasts, got["err"]


def random_linear(rng: torch.Generator, N, K, group, we_lo=0, we_hi=16, bias=True):
    q = torch.randint(-7, 8, (N, K), generator=rng)
    ws = torch.randint(1, 256, (N, K // group), generator=rng)
    we = torch.randint(we_lo, we_hi + 1, (N,), generator=rng)
    b = torch.randint(-2 ** 31, 2 ** 31, (N,), generator=rng) if bias else None
    if b is not None:
        b = b // torch.randint(1, 2 ** 20, (N,), generator=rng)
    return QuantLinear(q, ws, we, b, group)


def check_golden(dut, seed, kc, T, tiles, vp, rp, xe_lo):
    """A random job on ``dut`` (inputs with valid probability vp, y_out ready with rp): bit-exact
    to golden, ``last`` on each tile's last token, no error."""
    if T * kc > dut.x_depth:
        T = dut.x_depth // kc
    rng = torch.Generator().manual_seed(seed)
    K, N = kc * PK, tiles * PN
    lin = random_linear(rng, N, K, GROUP, bias=bool(seed & 1))
    xq = torch.randint(-127, 128, (T, K), generator=rng)
    xe = torch.randint(xe_lo, xe_lo + 12, (T,), generator=rng)
    y, lasts, err = run_gemm(dut, lin, xq, xe, seed=seed, valid_prob=vp, ready_prob=rp)
    exp = lin(xq, xe)
    assert torch.equal(y, exp), f"mismatch:\n{y}\n{exp}"
    assert lasts == [int((i % T) == T - 1) for i in range(tiles * T)]
    assert err == 0


@given(seed=st.integers(0, 2 ** 31), kc=st.sampled_from([2, 4, 6, 8]), T=st.integers(1, 5),
       tiles=st.integers(1, 3), pack2=st.sampled_from([True, False, "rq1", "rq4", "pipe", "tree2"]), vp=st.sampled_from([1.0, 0.6]),
       rp=st.sampled_from([1.0, 0.5, 0.2]), xe_lo=st.integers(-6, 10))
@example(seed=0, kc=2, T=1, tiles=3, pack2="pipe", vp=1.0, rp=1.0, xe_lo=0)
@example(seed=0, kc=2, T=1, tiles=3, pack2="tree2", vp=1.0, rp=0.2, xe_lo=0)
@settings(max_examples=12)
def test_gemm_matches_golden(seed, kc, T, tiles, pack2, vp, rp, xe_lo):
    """The example: tiles of kc * t = 2 chunks, shorter than the pipelined MAC's depth, so the
    array comes back to a header bank while the tile two back is still in flight there (it issued
    that stale tile again, reading ring rows not yet written: the last tile came out 0)."""
    check_golden(DUTS[pack2], seed, kc, T, tiles, vp, rp, xe_lo)


@pytest.mark.parametrize("w_rows", sorted(RINGS))
@given(seed=st.integers(0, 2 ** 31), kc=st.sampled_from([6, 8]), T=st.integers(1, 5),
       tiles=st.integers(3, 4), vp=st.sampled_from([1.0, 1.0, 0.6]),
       rp=st.sampled_from([1.0, 0.5, 0.2]), xe_lo=st.integers(-6, 10))
@example(seed=5, kc=8, T=3, tiles=3, vp=1.0, rp=0.2, xe_lo=0)    # kc = kc_max, stalled output
@settings(max_examples=2)
def test_gemm_ring_matches_golden(w_rows, seed, kc, T, tiles, vp, rp, xe_lo):
    """Weight rings smaller than 2*kc_max: the next tile's rows with kc + l >= w_rows overwrite
    rows of the tile being issued; the hazard rule holds them until its last token has read them
    (without it these jobs read overwritten rows; checked by removing the rule). kc >= 6: in
    rings of 8 and 9 rows a smaller tile never reaches the one being issued (2*kc - 1 < 8)."""
    check_golden(RINGS[w_rows], seed, kc, T, tiles, vp, rp, xe_lo)


@given(seed=st.integers(0, 2 ** 31), cut=st.integers(1, 3), vp=st.sampled_from([1.0, 0.5]))
@settings(max_examples=8, deadline=None)
def test_gemm_runs_split_one_weight_stream(seed, cut, vp):
    """One LOAD_X, then a RUN of ``cut`` tiles and a RUN of the rest, the weight beats of both one
    stream offered from the start (as the engine's weight ports send them): each RUN takes its own
    tiles and no more, so the outputs are the whole linear's."""
    rng = torch.Generator().manual_seed(seed)
    dut = DUTS[True]
    lin = random_linear(rng, 4 * PN, 2 * PK, GROUP)
    xq = torch.randint(-127, 128, (2, 2 * PK), generator=rng)
    xe = torch.randint(0, 6, (2,), generator=rng)
    y, _, err = run_gemm(dut, lin, xq, xe, seed=seed, valid_prob=vp, runs=[cut, 4 - cut])
    assert torch.equal(y, lin(xq, xe))
    assert err == 0


@pytest.mark.parametrize("T", [1, 3])
def test_gemm_ring_cycles(T):
    """Full rate (a weight beat every cycle, y_out ready): the ring of kc_max + 1 rows takes
    exactly the cycles of the default 2*kc_max ring. A held row l of the next tile is released
    once the array has read row l - 1 on the last token's pass, so its last row is written no later
    than the array issues the current tile's last row, and the tile after it has to wait for the
    current tile to retire anyway. For T = 3 the rule does hold beats (the loader would overwrite
    rows the second and third token still read). The tightest ring (kc_max rows) writes the last
    row one cycle after the current tile's last read: at most one cycle per tile boundary (T = 3;
    at T = 1 the loader is the bottleneck and never reaches the issued tile's unread rows)."""
    kc, tiles = 8, 3
    rng = torch.Generator().manual_seed(11 + T)
    lin = random_linear(rng, tiles * PN, kc * PK, GROUP)
    xq = torch.randint(-127, 128, (T, kc * PK), generator=rng)
    xe = torch.randint(-4, 8, (T,), generator=rng)
    exp = lin(xq, xe)
    stats = {}
    for name, dut in (("base", DUTS[True]), ("ring", RINGS[9])) + ((("tight", RINGS[8]),) if T > 1 else ()):
        stats[name] = {}
        y, _, err = run_gemm(dut, lin, xq, xe, stats=stats[name])
        assert torch.equal(y, exp) and err == 0
    base, ring = stats["base"], stats["ring"]
    assert ring["cycles"] == base["cycles"]
    if T > 1:
        assert ring["w_held"] > base["w_held"]
        assert base["cycles"] <= stats["tight"]["cycles"] <= base["cycles"] + tiles - 1


@pytest.mark.filterwarnings("ignore:.*created but never used")
def test_gemm_w_rows_limits():
    """The weight ring must hold one whole tile and at most two (kc_max <= w_rows <= 2*kc_max)."""
    for bad in (7, 17):
        with pytest.raises(ValueError, match=rf"w_rows={bad} must be in \[kc_max=8, 2\*kc_max=16\]"):
            GemmArray(pn=PN, pk=PK, group=GROUP, kc_max=8, w_rows=bad)
    gc.collect()    # the refused instances warn "never used" when freed: here, under the filter
    assert DUTS[True].w_rows == 16


# pk = 12: a scale beat holds pk/2 = 6 groups' scales, so K up to 14 groups needs up to 3 of them
MANY_G = GemmArray(pn=2, pk=12, group=12, kc_max=14, x_depth=64, t_max=4)


@given(seed=st.integers(0, 2 ** 31), kc=st.integers(1, 14), T=st.integers(1, 4), tiles=st.integers(1, 3),
       vp=st.sampled_from([1.0, 0.5]), rp=st.sampled_from([1.0, 0.3]))
@settings(max_examples=10)
def test_gemm_many_groups_per_scale_beat(seed, kc, T, tiles, vp, rp):
    """Tiles with several scale beats, the last one partly filled (the loader holds a scale beat
    until each of its groups' scales is written), with valid gaps: bit-exact to golden."""
    dut = MANY_G
    rng = torch.Generator().manual_seed(seed)
    K, N = kc * dut.pk, tiles * dut.pn
    lin = random_linear(rng, N, K, dut.group, bias=bool(seed & 1))
    xq = torch.randint(-127, 128, (T, K), generator=rng)
    xe = torch.randint(-4, 8, (T,), generator=rng)
    y, _, err = run_gemm(dut, lin, xq, xe, seed=seed, valid_prob=vp, ready_prob=rp)
    assert torch.equal(y, lin(xq, xe))
    assert err == 0


def test_weight_tile_format():
    """pack_weight_tile: header, ceil(G / (pk/2)) scale beats, K/pk weight beats (tile_beats);
    every field where the format puts it, decoded here independently of the packer's loops."""
    rng = torch.Generator().manual_seed(5)
    pn, pk, group, K = 2, 12, 12, 12 * 14
    lin = random_linear(rng, pn, K, group)
    beats = pack_weight_tile(lin.q.tolist(), lin.ws.tolist(), lin.we.tolist(), lin.bias.tolist(), pk, group)
    G, spb = K // group, pk // 2
    assert len(beats) == tile_beats(K // pk, group // pk, pk) == 1 + 3 + K // pk
    assert [last for _, last in beats] == [0] * (len(beats) - 1) + [1]
    field = lambda v, lo, w: (v >> lo) & ((1 << w) - 1)  # noqa: E731
    for n in range(pn):
        assert field(beats[0][0], 40 * n, 32) == int(lin.bias[n]) & 0xFFFFFFFF
        assert field(beats[0][0], 40 * n + 32, 8) == int(lin.we[n]) & 0xFF
        for g in range(G):
            assert field(beats[1 + g // spb][0], 8 * (pn * (g % spb) + n), 8) == int(lin.ws[n, g])
        for k in range(K):
            assert field(beats[4 + k // pk][0], 4 * (n * pk + k % pk), 4) == int(lin.q[n, k]) & 0xF


def test_gemm_saturation_and_extremes():
    """All-max inputs: saturating requantize (left shifts) and the 48-bit accumulator's largest terms."""
    dut = DUTS[True]
    K, N, T = 8 * PK, PN, 2
    q = torch.full((N, K), 7)
    q[1] = -7
    lin = QuantLinear(q, torch.full((N, K // GROUP), 255), torch.tensor([0, 0, 40, 3]),
                      torch.tensor([2 ** 31 - 1, -2 ** 31, 5, -5]), GROUP)
    xq = torch.full((T, K), -127)
    xq[1] = 127
    xe = torch.tensor([-20, 30])
    y, _, err = run_gemm(dut, lin, xq, xe)
    assert torch.equal(y, lin(xq, xe))
    assert err == 0


#: x_depth 48 < kc_max * t_max: a LOAD_X of kc * t > x_depth is refusable (the check a cycle late or not)
BAD_X = {c: GemmArray(pn=PN, pk=PK, group=GROUP, kc_max=8, x_depth=48, t_max=8, check_pipelined=c) for c in (False, True)}


@pytest.mark.parametrize("checked", [False, True])
def test_gemm_bad_commands_flag_and_recover(checked):
    """Unknown opcode, shapes beyond limits and RUN-before-LOAD_X are refused (error bits set,
    nothing consumed); a following valid job still computes correctly (``check_pipelined``: a
    LOAD_X checked a cycle after it is taken)."""
    dut = BAD_X[checked]
    rng = torch.Generator().manual_seed(7)
    lin = random_linear(rng, PN, 2 * PK, GROUP)
    xq = torch.randint(-127, 128, (1, 2 * PK), generator=rng)
    xe = torch.tensor([3])
    bad = [{"op": 3, "kc": 2, "t": 1, "tiles": 1},
           {"op": GemmOp.LOAD_X, "kc": 9, "t": 1, "tiles": 0},      # kc > kc_max
           {"op": GemmOp.LOAD_X, "kc": 1, "t": 1, "tiles": 0},      # not a whole group
           {"op": GemmOp.LOAD_X, "kc": 8, "t": 9, "tiles": 0},      # t > t_max
           {"op": GemmOp.LOAD_X, "kc": 8, "t": 7, "tiles": 0},      # kc * t > x_depth
           {"op": GemmOp.RUN, "kc": 0, "t": 0, "tiles": 0}]         # zero tiles
    y, _, err = run_gemm(dut, lin, xq, xe, extra_cmds=bad)
    assert torch.equal(y, lin(xq, xe))
    assert err == ERR_OPCODE | ERR_SHAPE
    # each too-long LOAD_X alone is refused (kc * t = 56: the compare; 64: the bits above x_depth's)
    for kc, t in ((8, 7), (8, 8)):
        y, _, err = run_gemm(dut, lin, xq, xe, extra_cmds=[{"op": GemmOp.LOAD_X, "kc": kc, "t": t, "tiles": 0}])
        assert torch.equal(y, lin(xq, xe))
        assert err == ERR_SHAPE, (kc, t)


def test_gemm_framing_error_flagged():
    """A tile whose `last` is misplaced sets ERR_FRAMING; the array still finishes (no hang)."""
    dut = DUTS[False]
    pn, pk = dut.pn, dut.pk
    rng = torch.Generator().manual_seed(3)
    lin = random_linear(rng, PN, 2 * PK, GROUP)
    beats = [{"data": d, "last": 0} for d, _ in
             pack_weight_tile(lin.q.tolist(), lin.ws.tolist(), lin.we.tolist(), lin.bias.tolist(), pk, GROUP)]
    xq = torch.randint(-127, 128, (1, 2 * PK), generator=rng)
    out = {}
    csrc, xsrc, wsrc = StreamSource(dut.cmd), StreamSource(dut.x_in), StreamSource(dut.w_in)
    snk = StreamSink(dut.y_out)

    async def tb(ctx):
        await csrc.send(ctx, [{"op": 0, "kc": 2, "t": 1, "tiles": 0}, {"op": 1, "kc": 0, "t": 0, "tiles": 1}])

    async def tbx(ctx):
        await xsrc.send(ctx, x_beats(xq, torch.tensor([2]), pk))

    async def tbw(ctx):
        await wsrc.send(ctx, beats)

    async def tby(ctx):
        out["b"] = await snk.collect(ctx, 1)
        out["err"] = ctx.get(dut.error)
        out["busy"] = ctx.get(dut.busy)
    run_simulation(dut, [tb, tbx, tbw, tby], max_cycles=2000, vcd=False)
    assert out["err"] == ERR_FRAMING
    assert torch.equal(torch.tensor(unpack_signed(out["b"][0]["data"], pn, 32)), lin(xq, torch.tensor([2]))[0])
