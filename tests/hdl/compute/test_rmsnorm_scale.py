"""RmsNormScale vs golden ``rmsnorm_quant``: for random rows h, fed the pre-shifted elements hp
(as golden shifts them; the pipelined unit the raw elements h, which it rounds itself), its exponent ``e`` equals golden's row exponent, its ``r`` the RSQRT
step of golden's formula (``r`` scales golden's quantized output: quantize_pow2(hp * r) is it),
and it takes len + 51 cycles from ``start`` to ``done`` (``pipelined``: len + 51 + PIPE_EXTRA; with
``pairs``, two elements a reading cycle: len/2 + 52 + PIPE_EXTRA, one a cycle len + 52 + PIPE_EXTRA)."""
from hypothesis import given, settings, strategies as st
import torch

from mcf_fpga.golden import numerics as nx
from mcf_fpga.hdl.compute.rmsnorm_scale import PIPE_EXTRA, RmsNormScale
from mcf_fpga.sim.kit import run_simulation


def golden_row(h, eps_q, bits):
    """(sh, hp, r, e, q) of one row, from golden's definitions."""
    h = torch.tensor([h], dtype=torch.int64)
    sh = int((nx.bitlen(h.abs().amax()) - 15).clamp(min=0))
    hp = nx.rshift_round(h, sh)
    q, e = nx.rmsnorm_quant(h, eps_q / 2 ** (2 * nx.FA), bits)
    ms = max(1, int((hp * hp).sum()) // h.shape[1] + (eps_q >> (2 * sh)))
    k = max(0, (ms.bit_length() - nx.RSQRT_MANT_BITS + 1) // 2)
    r = nx.RSQRT_LUT[ms >> (2 * k)] >> k
    assert torch.equal(nx.quantize_pow2(hp * r, nx.FR, bits)[0], q)      # r is golden's scale
    return sh, hp[0].tolist(), r, int(e[0]), q


row = st.integers(0, 31).flatmap(lambda mag: st.lists(st.integers(-2 ** mag, 2 ** mag - 1),
                                                      min_size=1, max_size=12))


@given(rows=st.lists(st.tuples(row, st.one_of(st.just(0), st.integers(0, 2 ** 32 - 1)), st.sampled_from([2, 4, 8])),
                     min_size=1, max_size=3), gap=st.integers(0, 3), pipelined=st.booleans())
@settings(max_examples=30, deadline=None)
def test_rms_scale_matches_golden(rows, gap, pipelined):
    run_rows(RmsNormScale(pipelined=pipelined), rows, gap)


@given(rows=st.lists(st.tuples(row, st.one_of(st.just(0), st.integers(0, 2 ** 32 - 1)), st.sampled_from([2, 4, 8]),
                               st.booleans()), min_size=1, max_size=3), gap=st.integers(0, 3))
@settings(max_examples=30, deadline=None)
def test_rms_scale_pairs_match_golden(rows, gap):
    """``pairs``: rows with ``pair`` (even lengths: two elements a reading cycle, the second 0 past
    an odd row's end is never offered) and without, back to back: the same r and e as golden."""
    rows = [(h + [0] * (len(h) % 2) if pair else h, eps_q, bits, pair) for h, eps_q, bits, pair in rows]
    run_rows(RmsNormScale(pipelined=True, pairs=True), rows, gap)


def run_rows(dut, rows, gap):
    """Feeds ``rows`` ((h, eps_q, bits[, pair])) to ``dut`` one after another (``gap`` idle cycles
    between); asserts (r, e, cycles from start to done) equal golden's and the contract's."""
    got, exp = [], []
    extra = (PIPE_EXTRA if dut.pipelined else 0) + (1 if dut.pairs else 0)

    async def tb(ctx):
        for h, eps_q, bits, *pair in rows:
            pair = bool(pair and pair[0])
            sh, hp, r, e, _ = golden_row(h, eps_q, bits)
            step = 2 if pair else 1
            exp.append((r, e, len(h) // step + 51 + extra))
            for name, v in (("len", len(h)), ("eps_q", eps_q), ("sh", sh), ("bits", bits)):
                ctx.set(getattr(dut, name), v)
            if dut.pairs:
                ctx.set(dut.pair, pair)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            cycles, k = 1, 0
            while not ctx.get(dut.done):
                assert ctx.get(dut.reading) == (k < len(hp))
                if k < len(hp):
                    if dut.pipelined:        # the raw element: the unit rounds it by ``sh`` itself
                        ctx.set(dut.x, h[k])
                    else:
                        ctx.set(dut.hp, hp[k])
                    if pair:
                        ctx.set(dut.x1, h[k + 1])
                    elif dut.pairs:          # not summed without ``pair``
                        ctx.set(dut.x1, -12345)
                    ctx.set(dut.last, k + step >= len(hp))
                    k += step
                await ctx.tick()
                cycles += 1
            e_got = ctx.get(dut.e)
            await ctx.tick()
            got.append((ctx.get(dut.r), e_got, cycles))
            for _ in range(gap):
                await ctx.tick()
    run_simulation(dut, [tb], vcd=False, max_cycles=5000)
    assert got == exp
