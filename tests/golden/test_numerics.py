"""Properties of golden.numerics, each against an independent computation
(Python integers / fractions / float math), never against the code under test."""
import math
from fractions import Fraction

import pytest
import torch
from hypothesis import given, strategies as st

from mcf_fpga.golden import numerics as nx

ints = st.integers(-(2 ** 40), 2 ** 40)


def _round_half_up(fr: Fraction) -> int:
    return math.floor(fr + Fraction(1, 2))


@given(st.lists(ints, min_size=1, max_size=20), st.integers(-10, 40))
def test_rshift_round_is_round_half_up(xs, s):
    got = nx.rshift_round(torch.tensor(xs), s).tolist()
    want = [_round_half_up(Fraction(x) / Fraction(2) ** s) for x in xs]
    assert got == want


@given(st.lists(st.tuples(ints, st.integers(1, 2 ** 30)), min_size=1, max_size=20))
def test_round_div(pairs):
    a = torch.tensor([p[0] for p in pairs])
    b = torch.tensor([p[1] for p in pairs])
    assert nx.round_div(a, b).tolist() == [_round_half_up(Fraction(x, y)) for x, y in pairs]


@given(st.lists(st.integers(0, 2 ** 52), min_size=1, max_size=20))
def test_bitlen(xs):
    assert nx.bitlen(torch.tensor(xs)).tolist() == [x.bit_length() for x in xs]


@given(st.lists(st.integers(-40 * 2 ** nx.FZ, 0), min_size=1, max_size=50))
def test_exp2_fixed_error_bound(xs):
    got = nx.exp2_fixed(torch.tensor(xs)).tolist()
    for x, g in zip(xs, got):
        exact = 2 ** 15 * 2.0 ** (x / 2 ** nx.FZ)
        assert abs(g - exact) <= 1.0, (x, g, exact)       # LUT rounding (0.5) + floor of the shift


def test_exp2_rejects_positive():
    with pytest.raises(ValueError, match="<= 0"):
        nx.exp2_fixed(torch.tensor([1]))


@given(st.lists(st.integers(-(2 ** 31), 2 ** 31 - 1), min_size=1, max_size=64),
       st.sampled_from([4, 8]), st.integers(0, 20))
def test_quantize_pow2(vals, bits, frac):
    v = torch.tensor([vals])
    q, e = nx.quantize_pow2(v, frac, bits)
    qmax = 2 ** (bits - 1) - 1
    assert int(q.abs().max()) <= qmax
    mx = max(abs(x) for x in vals)
    if mx:
        e0 = int(e[0])
        scaled = Fraction(mx) * Fraction(2) ** (e0 - frac)       # max |v| in units of the step
        assert Fraction(2 ** (bits - 2)) <= scaled < 2 ** (bits - 1)
        step = Fraction(2) ** (frac - e0)
        for x, qq in zip(vals, q[0].tolist()):                   # error <= half a step (or clamp)
            if abs(qq) < qmax:
                assert abs(Fraction(x) - qq * step) <= step / 2
    else:
        assert int(e[0]) == 0 and not q.any()


@given(st.integers(1, 6), st.sampled_from([8, 16, 32]), st.integers(1, 4), st.integers(0, 2 ** 31))
def test_quantlinear_accumulate_matches_group_loop(groups, group, T, seed):
    g = torch.Generator().manual_seed(seed)
    K, N = groups * group, 5
    w = torch.randn(N, K, generator=g, dtype=torch.float64)
    ql = nx.quantize_linear(w, None, group)
    x = torch.randint(-127, 128, (T, K), generator=g)
    acc = ql.accumulate(x)
    for t in range(T):
        for n in range(N):
            want = 0
            for gi in range(groups):
                part = sum(int(ql.q[n, k]) * int(x[t, k]) for k in range(gi * group, (gi + 1) * group))
                want += int(ql.ws[n, gi]) * part
            assert int(acc[t, n]) == want
    # dequantised weights are within half a quantisation step of the float weights
    step = ql.ws.repeat_interleave(group, 1) * torch.pow(2.0, -ql.we.double())[:, None]
    assert bool(((ql.dequant() - w).abs() <= step / 2 + 1e-12).all())
    assert int(ql.q.abs().max()) <= 7 and int(ql.ws.min()) >= 1 and int(ql.ws.max()) <= 255


@given(st.integers(0, 2 ** 31), st.integers(0, 11), st.integers(1, 12))
def test_quantlinear_row_slice_is_those_output_columns(seed, a, n):
    """QuantLinear.rows(a, b) (tensor-parallel decode's weight slice) computes exactly columns
    a..b-1 of the full layer's output, bias included."""
    g = torch.Generator().manual_seed(seed)
    b = min(12, a + n)
    if b <= a:
        return
    ql = nx.quantize_linear(torch.randn(12, 64, generator=g, dtype=torch.float64),
                            torch.randn(12, generator=g, dtype=torch.float64), 32)
    x = torch.randint(-127, 128, (3, 64), generator=g)
    xe = torch.randint(0, 12, (3,), generator=g)
    assert torch.equal(ql.rows(a, b)(x, xe), ql(x, xe)[:, a:b])
    with pytest.raises(ValueError, match=r"rows\(5, 5\)"):
        ql.rows(5, 5)
    with pytest.raises(ValueError, match="out_features=12"):
        ql.rows(0, 13)


def test_quantize_linear_rejects_bad_group():
    with pytest.raises(ValueError, match="group_size=48 must divide"):
        nx.quantize_linear(torch.zeros(4, 64), None, 48)


@given(st.integers(0, 2 ** 31), st.sampled_from([16, 64, 256]))
def test_rmsnorm_quant_close_to_float(seed, D):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, D, generator=g, dtype=torch.float64) * float(torch.rand(1, generator=g) * 50 + 0.01)
    q, e = nx.rmsnorm_quant(nx.to_fixed(x), 1e-6)
    ref = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    got = nx.dequantize_pow2(q, e)
    step = torch.pow(2.0, -e.double())[:, None]
    # int8 rounding (half a step) plus rsqrt LUT / fixed-point input error (< 0.3 % of the value)
    assert bool(((got - ref).abs() <= step * 0.5 + ref.abs() * 3e-3 + 2e-3).all())


@given(st.lists(st.integers(-30 * 2 ** nx.FA, 30 * 2 ** nx.FA), min_size=1, max_size=50))
def test_silu_close_to_float(vals):
    g = torch.tensor(vals)
    got = nx.from_fixed(nx.silu_fixed(g))
    x = g.double() / 2 ** nx.FA
    ref = x * torch.sigmoid(x)
    # sigmoid LUT step 2**-6 (error <= 2**-9 in sigmoid after rounding the index), clamp beyond +-8
    bound = x.abs() * (2.0 ** -9 + 1e-4) + torch.where(x.abs() > 8, x.abs() * 4e-4, 0) + 2 ** -nx.FA
    assert bool(((got - ref).abs() <= bound).all())


def test_rope_fixed_matches_float_rotation():
    torch.manual_seed(0)
    d, T = 16, 9
    x = torch.randn(2, T, d, dtype=torch.float64)
    cos, sin = nx.rope_tables(range(100, 100 + T), d, 10000.0)
    got = nx.from_fixed(nx.rope_fixed(nx.to_fixed(x), cos, sin))
    inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = torch.arange(100, 100 + T, dtype=torch.float64)[:, None] * inv
    c, s = torch.cos(ang), torch.sin(ang)
    a, b = x[..., :d // 2], x[..., d // 2:]
    ref = torch.cat([a * c - b * s, b * c + a * s], -1)
    assert (got - ref).abs().max().item() < 2e-3


def _rand_partials(seed, n, shape=(3,), d=4):
    g = torch.Generator().manual_seed(seed)
    parts = []
    for _ in range(n):
        m = torch.randint(-20 * 2 ** nx.FZ, 20 * 2 ** nx.FZ, shape, generator=g)
        l = torch.randint(2 ** 15, 2 ** 25, shape, generator=g)
        o = torch.randint(-(2 ** 30), 2 ** 30, (*shape, d), generator=g)
        parts.append(nx.Partial(m, l, o))
    return parts


@given(st.integers(0, 2 ** 31), st.integers(1, 8), st.randoms(use_true_random=False))
def test_flat_merge_is_order_free(seed, n, rnd):
    parts = _rand_partials(seed, n)
    shuffled = parts[:]
    rnd.shuffle(shuffled)
    assert nx.flat_merge(parts).equal(nx.flat_merge(shuffled))
    # the distributed two-phase form: global max, per-node rescale and sum, then sum
    M = nx.flat_merge(parts).m
    cut = rnd.randint(0, n)
    nodes = [parts[:cut], parts[cut:]]
    l = sum((sum((nx.rescale_to(p, M).l for p in ps), torch.zeros_like(M)) for ps in nodes), torch.zeros_like(M))
    assert torch.equal(l, nx.flat_merge(parts).l)


@given(st.integers(0, 2 ** 31))
def test_softmax_merge_identity_and_exact_when_equal_max(seed):
    a, b = _rand_partials(seed, 2)
    e = nx.Partial.empty(a.m.shape, a.o.shape[-1])
    assert nx.softmax_merge(a, e).equal(a) and nx.softmax_merge(e, a).equal(a)
    b2 = nx.Partial(a.m.clone(), b.l, b.o)          # same max: merge is an exact integer sum
    merged = nx.softmax_merge(a, b2)
    assert torch.equal(merged.l, a.l + b.l) and torch.equal(merged.o, a.o + b.o)


@given(st.integers(0, 2 ** 31), st.integers(2, 6))
def test_merge_close_to_real_arithmetic(seed, n):
    parts = _rand_partials(seed, n)
    got = nx.merge_partials(parts)
    M = max(float(p.m.max()) for p in parts)
    # real-valued reference of sum_i l_i * 2**(m_i - m) relative to the merged m
    ref_l = sum(p.l.double() * torch.pow(2.0, (p.m.double() - got.m.double()) / 2 ** nx.FZ) for p in parts)
    # each rescale factor exp2_fixed is within 1 LSB (2**-15, absolute) of the exact power and each
    # product is rounded once per merge, so |error| <= sum_i l_i * 2**-15 * (merges) + merges
    bound = sum(p.l.double() for p in parts) * 2.0 ** -15 * n + n
    assert bool(((got.l.double() - ref_l).abs() <= bound).all())


def test_partial_finalize_matches_division():
    p = nx.Partial(torch.tensor([0]), torch.tensor([3 * 2 ** 15]), torch.tensor([[3 * 2 ** nx.FO, -(2 ** nx.FO)]]))
    assert nx.finalize(p).tolist() == [[2 ** nx.FA, _round_half_up(Fraction(-(2 ** nx.FA), 3))]]
    assert nx.finalize(nx.Partial.empty((1,), 2)).tolist() == [[0, 0]]
