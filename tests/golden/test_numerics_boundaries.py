"""golden.numerics at the edges the random tests leave out: RMSNorm's eps term
(documented: ms = sum(hp^2) // D + (EPS_Q >> 2 sh), EPS_Q = round(eps 2^(2 FA))) where it
matters -- rows that are all zero, one LSB, tiny, or large enough to be pre-shifted, with eps
from 1e-6 to 1 -- against float RMSNorm of the same fixed-point input."""
import torch
from hypothesis import given, strategies as st

from mcf_fpga.golden import numerics as nx


@given(st.integers(0, 2 ** 31), st.sampled_from([1, 2, 16, 64]), st.sampled_from([1e-3, 0.05, 1.0, 4.0]),
       st.sampled_from([2.0 ** -nx.FA, 1e-3, 0.01, 1.0, 50.0, 3000.0]))
def test_rmsnorm_eps_dominated_and_extreme_rows(seed, D, eps, scale):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, D, generator=g, dtype=torch.float64) * scale
    x[0] = 0                                              # an all-zero row: only eps remains
    h = nx.to_fixed(x)
    q, e = nx.rmsnorm_quant(h, eps)
    xf = h.double() / 2 ** nx.FA                          # the fixed-point input, exactly
    ref = xf / torch.sqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    got = nx.dequantize_pow2(q, e)
    step = torch.pow(2.0, -e.double())[:, None]
    assert bool((q[0] == 0).all())
    assert bool(((got - ref).abs() <= step * 0.5 + ref.abs() * 3e-3 + 2e-3).all()), (got - ref).abs().max()


@given(st.integers(0, 2 ** 31), st.sampled_from([16, 64]))
def test_rmsnorm_small_eps_matches_float_on_moderate_rows(seed, D):
    """eps = 1e-6 on rows of RMS ~ 0.01 .. 1: the eps term is ~1 % of ms at the low end."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, D, generator=g, dtype=torch.float64) * torch.tensor([[0.01], [0.03], [0.3], [1.0]])
    h = nx.to_fixed(x)
    q, e = nx.rmsnorm_quant(h, 1e-6)
    xf = h.double() / 2 ** nx.FA
    ref = xf / torch.sqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
    got = nx.dequantize_pow2(q, e)
    step = torch.pow(2.0, -e.double())[:, None]
    assert bool(((got - ref).abs() <= step * 0.5 + ref.abs() * 3e-3 + 2e-3).all())
