"""AttentionScorer (phase S) alone against golden: keys issued from a walk of a random block table
(odd and even lengths, void blocks, causal masks, random ``go`` gaps), one or two keys per cycle,
K words one cycle after the issue (a lane past a block's end gets a top-scoring word, which must
not count): every key's z and on bit land at (z memory, index) = ((z + k)
% kpc, (z + k) // kpc) with golden's z (block_partial's scores), every block maximum equals golden
block_partial's m, and row_max is the maximum of them. The pipelined scorer (``pipelined=True``, a
small ``tree_arity`` so that the tree has several stages) is held to the same, with its writes
``latency`` cycles after the issue and ``busy`` low once row_max is final."""
import random

import torch
from hypothesis import given, settings, strategies as st

from mcf_fpga.golden import numerics as nx
from mcf_fpga.hdl.compute.attention_scorer import AttentionScorer
from mcf_fpga.sim.kit import run_simulation

D = 8


def golden_z(q, eq, K, ek):
    """golden block_partial's clamped z of query q against the rows of K."""
    s = (K.to(torch.int64) @ q.to(torch.int64))
    z = nx.rshift_round(s * nx.score_multiplier(D), eq + ek + (nx.SC - nx.FZ))
    return z.clamp(nx.M_EMPTY + 1, -nx.M_EMPTY - 1)


def word(row, e):
    w = 0
    for i, x in enumerate(row):
        w |= (int(x) & 0xFF) << (8 * i)
    return w | ((int(e) & 0xFF) << (8 * D))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2 ** 16), lens=st.lists(st.integers(1, 6), min_size=1, max_size=4),
       kpc=st.sampled_from([1, 2]), causal=st.booleans(), p_go=st.floats(0.4, 1),
       pipe=st.sampled_from([None, 2, 3, 8]))
def test_scores_and_block_maxima_match_golden(seed, lens, kpc, causal, p_go, pipe):
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    n = sum(lens)
    K = torch.randint(-127, 128, (n, D), generator=g)
    ek = torch.randint(-4, 14, (n,), generator=g)
    q = torch.randint(-127, 128, (D,), generator=g)
    eq, qpos = rng.randint(-4, 15), rng.randint(0, n + 1)
    blocks, a = [], 0                               # (addr, len, pos, void)
    for ln in lens:
        blocks.append((a, ln, a, int(rng.random() < 0.2)))
        a += ln
    dut = (AttentionScorer(D, kpc, aw=6, pos_bits=8, z_max=32) if pipe is None else
           AttentionScorer(D, kpc, aw=6, pos_bits=8, z_max=32, pipelined=True, tree_arity=pipe))
    top = word([127 if x >= 0 else -127 for x in q.tolist()], -8)   # must never count
    zmem, mbs, out = {}, {}, {}
    issued, writes = [], []

    def collect(ctx, cyc):                          # this cycle's z writes and block maximum
        for bank in range(kpc):
            if ctx.get(dut.zw[bank].en):
                writes.append(cyc)
                v = ctx.get(dut.zw[bank].data)
                zv = v & 0xFFFFFFFF
                zmem[(bank, ctx.get(dut.zw[bank].idx))] = (zv - (1 << 32) if zv >> 31 else zv, v >> 32)
        if ctx.get(dut.mb_en):
            mbs[ctx.get(dut.mb_b)] = ctx.get(dut.mb_data)

    async def tb(ctx):
        ctx.set(dut.q, word(q.tolist(), 0) & ((1 << 8 * D) - 1))
        ctx.set(dut.eq, eq)
        ctx.set(dut.qpos, qpos)
        ctx.set(dut.causal, causal)
        ctx.set(dut.row_clear, 1)
        await ctx.tick()
        ctx.set(dut.row_clear, 0)
        b = j = z = 0
        kd_at = {}                                  # cycle -> the K words the scorer reads then
        cyc = 0
        while True:
            go = b < len(blocks) and rng.random() < p_go
            if go:
                addr, ln, pos, void = blocks[b]
                nk = min(kpc, ln - j)
                ctx.set(dut.entry, {"addr": addr, "len": ln, "pos": pos, "void": void})
                ctx.set(dut.b, b)
                ctx.set(dut.j, j)
                ctx.set(dut.z, z)
                ctx.set(dut.first, j == 0)
                ctx.set(dut.last, j + nk == ln)
                ctx.set(dut.two, nk == 2)
            ctx.set(dut.go, go)
            pend = (blocks[b][0] + j, nk) if go else None
            await ctx.tick()
            cyc += 1
            if pend is not None:                    # the K words of the keys just issued
                issued.append(cyc - 1)
                for k in range(kpc):                # a lane past the block: the row's top score
                    r = pend[0] + k
                    ctx.set(dut.kd[k], word(K[r].tolist(), ek[r]) if k < pend[1] else top)
            else:                                   # no read: whatever the port last held, or junk
                for k in range(kpc):
                    ctx.set(dut.kd[k], rng.getrandbits(8 * D + 8))
            collect(ctx, cyc)
            if go:
                j, z = j + nk, z + nk
                if j == ln:
                    b, j = b + 1, 0
            elif b == len(blocks) and pend is None:
                break
        while pipe is not None and ctx.get(dut.busy):      # drain: the writes still in flight
            await ctx.tick()
            cyc += 1
            collect(ctx, cyc)
        if pipe is None:
            await ctx.tick()
        out["row_max"] = ctx.get(dut.row_max)       # pipelined: final as soon as busy is low

    run_simulation(dut, [tb], vcd=False)
    zg = golden_z(q, torch.tensor(eq), K, ek)
    maxima = []
    for bi, (addr, ln, pos, void) in enumerate(blocks):
        mask = torch.zeros(1, ln, dtype=torch.bool) if void else \
            ((torch.arange(ln) + pos <= qpos) if causal else torch.ones(ln, dtype=torch.bool))[None, :]
        V = torch.zeros(ln, D, dtype=torch.int64)
        m = int(nx.block_partial(q[None, :], torch.tensor([eq]), K[addr:addr + ln], ek[addr:addr + ln],
                                 V, torch.zeros(ln, dtype=torch.int64), mask).m[0])
        assert mbs[bi] == m, f"block {bi}"
        maxima.append(m)
        for t in range(ln):
            zi = addr + t                           # the blocks are contiguous from 0: key index = addr
            got = zmem[(zi % kpc, zi // kpc)]
            assert got == (int(zg[zi]), int(bool(mask[0, t]))), f"key {zi}"
    assert len(zmem) == n and len(mbs) == len(blocks)
    assert out["row_max"] == max(maxima)
    # every issue is written `latency` cycles later (one cycle per write bank in use)
    assert sorted(set(writes)) == [c + dut.latency for c in issued]
