"""GemmMacPipeline alone against golden ``QuantLinear.accumulate``: the 48-bit accumulator of
each row (one token against one weight tile, ``kc`` chunks of ``pk`` inputs, groups of ``cpg``
chunks) with and without ``pack2``, chunks issued with random bubbles and the global enable
dropped at random (read data held as a memory read port with ``en`` holds it); the pipelined
dot products (``pipelined=True``: products and adder-tree stages, 8, 4 or 2 terms a stage) the same,
``extra_stages`` later."""
import random

import pytest

import torch
from hypothesis import given, settings, strategies as st

from mcf_fpga.golden.numerics import QuantLinear
from mcf_fpga.hdl.compute.gemm_mac import GemmMacPipeline
from mcf_fpga.sim.kit import run_simulation


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2 ** 16), pack2=st.booleans(), shape=st.sampled_from([(4, 16, 1), (4, 16, 2), (2, 10, 3), (6, 12, 1), (2, 72, 1)]),
       groups=st.integers(1, 3), n_rows=st.integers(1, 4), p_en=st.floats(0.4, 1), p_bubble=st.floats(0, 0.5),
       pipelined=st.sampled_from([False, 8, 4, 2]))
def test_rows_match_golden_accumulate(seed, pack2, shape, groups, n_rows, p_en, p_bubble, pipelined):
    pn, pk, cpg = shape
    kc = groups * cpg
    dut = GemmMacPipeline(pn, pk, pack2, pipelined=bool(pipelined), group=cpg * pk, tree_arity=pipelined or 8)
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    chunks, want = [], []                       # chunks: (flags, w, x, ws, xe)
    for r in range(n_rows):
        K = kc * pk
        lin = QuantLinear(torch.randint(-7, 8, (pn, K), generator=gen),
                          torch.randint(1, 256, (pn, groups), generator=gen),
                          torch.zeros(pn, dtype=torch.long), None, cpg * pk)
        if r == 0:                              # extremes: every product at its largest
            lin.q[:] = rng.choice([7, -7])
            lin.ws[:] = 255
        x = torch.randint(-128, 128, (1, K), generator=gen)
        if r == 0:
            x[:] = -128
        xe, tl, buf = rng.randint(-128, 127), rng.randint(0, 1), rng.randint(0, 1)
        want.append({"acc": lin.accumulate(x)[0].tolist(), "xe": xe, "tl": tl, "buf": buf})
        for c in range(kc):
            g = c // cpg
            w = sum((int(lin.q[n, c * pk + k]) & 0xF) << (4 * (n * pk + k)) for n in range(pn) for k in range(pk))
            xv = sum((int(x[0, c * pk + k]) & 0xFF) << (8 * k) for k in range(pk))
            ws = sum(int(lin.ws[n, g]) << (8 * n) for n in range(pn))
            flags = {"v": 1, "gf": int(c % cpg == 0), "gl": int(c % cpg == cpg - 1), "fg": int(g == 0),
                     "rl": int(c == kc - 1), "tl": tl if c == kc - 1 else 0, "buf": buf}
            chunks.append((flags, w, xv, ws, xe))
    got = []

    async def tb(ctx):
        pending = list(chunks)
        data = (0, 0, 0, 0)
        idle = 0
        while len(got) < len(want):
            en = rng.random() < p_en
            ctx.set(dut.en, en)
            ch = None
            if pending and rng.random() >= p_bubble:
                ch = pending[0]
            ctx.set(dut.chunk, ch[0] if ch else {"v": 0, "gf": 1, "gl": 1, "fg": 1, "rl": 1, "tl": 1, "buf": 1})
            w, xv, ws, xe = data if en or not pipelined else (rng.getrandbits(pn * pk * 4), rng.getrandbits(pk * 8),
                                                              rng.getrandbits(pn * 8), 0)
            ctx.set(dut.w, w)
            ctx.set(dut.x, xv)
            ctx.set(dut.ws, ws)
            ctx.set(dut.xe, xe)
            row = ctx.get(dut.row)
            if en and row.v:
                got.append({"acc": [int(a) for a in row.acc], "xe": int(row.xe), "tl": int(row.tl),
                            "buf": int(row.buf)})
            await ctx.tick()
            if en:                              # the read port captures the issued chunk's data
                data = ch[1:] if ch else (rng.getrandbits(pn * pk * 4), rng.getrandbits(pk * 8), rng.getrandbits(pn * 8), 0)
                if ch:
                    pending.pop(0)
            idle += 1
            assert idle < 20 * len(chunks) + 200, "rows missing"
        assert got == want

    run_simulation(dut, [tb])


def test_group_partial_must_fit_the_dsp_multiplier():
    """gp = a group's sum of int4 x int8 products: |gp| <= 1024 * group must fit the DSP48E2
    multiplier's signed 27-bit A (group <= 65535), else a clear error naming the limit."""
    assert GemmMacPipeline(4, 16, True, group=65535).gp_bits == 27
    assert GemmMacPipeline(4, 16, True, group=128).gp_bits == 19       # KR260: |gp| <= 2**17
    with pytest.raises(ValueError, match=r"group=65536 .*group <= 65535"):
        GemmMacPipeline(4, 16, True, group=65536)
