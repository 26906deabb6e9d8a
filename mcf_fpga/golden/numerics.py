"""The integer arithmetic the hardware performs, defined once.

Every function here is exact integer arithmetic on torch int64 tensors
(vectorised, deterministic); floats appear only in the *quantisers* that turn
float weights/inputs into integers, in table construction (host-side, then the
tables are data), and in accuracy reports. docs/numerics.md describes every
format. The constants and tables are ``spec.numerics``' (the single source for hardware and
tests); the tables here are the same values as tensors.

Formats (value = integer * 2**-frac_bits unless stated):
  * activations between blocks: INT8 with a per-row power-of-two exponent
    ``e`` (value = q * 2**-e), "requantize" = :func:`quantize_pow2`;
  * linear outputs, residual stream: int32 fixed point, ``FA`` fraction bits;
  * weights: INT4 in [-7, 7], one uint8 scale mantissa per group of
    ``group_size`` inputs and one exponent per output row
    (w = q * ws[g] * 2**-we), see :class:`QuantLinear`;
  * KV cache: INT8 or INT4 per (token, kv-head) with a power-of-two exponent;
  * attention logits in the log2 domain: int32 with ``FZ`` fraction bits;
    probabilities Q15; partial state (m, l, o): m like logits, l = sum of Q15
    probabilities (48-bit), o with ``FO`` fraction bits (48-bit).
Rounding everywhere is *round half up* (add half, arithmetic shift right):
:func:`rshift_round`; division :func:`round_div` likewise.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

import mcf_fpga.spec.numerics as _spec
from mcf_fpga.spec.numerics import (ACC_BITS, FA, FO, FR, FZ, M_EMPTY, P_BITS, ROPE_BITS, RSQRT_MANT_BITS, SC, SIG_STEP_BITS,
                           score_multiplier)

__all__ = [
    "FA", "FZ", "FO", "P_BITS", "SC", "EXP2_LUT", "SIGMOID_LUT", "RSQRT_LUT", "M_EMPTY",
    "ACC_BITS", "rshift_round", "round_div", "bitlen", "sat", "check_width",
    "exp2_fixed", "quantize_pow2", "dequantize_pow2", "QuantLinear", "quantize_linear",
    "rmsnorm_quant", "rope_tables", "rope_fixed", "silu_fixed", "swiglu_fixed",
    "score_multiplier", "Partial", "block_partial", "softmax_merge", "merge_partials",
    "flat_merge", "rescale_to", "finalize", "to_fixed", "from_fixed",
]

I64 = torch.int64

# ---------------------------------------------------------------- tables (spec.numerics' values, as tensors)
EXP2_LUT = torch.tensor(_spec.EXP2_LUT, dtype=I64)
SIGMOID_LUT = torch.tensor(_spec.SIGMOID_LUT, dtype=I64)
RSQRT_LUT = torch.tensor(_spec.RSQRT_LUT, dtype=I64)


# ---------------------------------------------------------------- primitives

def _t(x) -> torch.Tensor:
    return x if isinstance(x, torch.Tensor) else torch.as_tensor(x, dtype=I64)


def rshift_round(x, s) -> torch.Tensor:
    """x * 2**-s rounded half up, for integer tensors; s may be negative (left shift) and a tensor.

    rshift_round(x, s) = floor((x + 2**(s-1)) / 2**s) for s > 0; x for s == 0; x * 2**-s for s < 0.
    """
    x, s = _t(x).to(I64), _t(s).to(I64)
    pos = s.clamp(min=1, max=62)
    right = (x + (torch.ones_like(pos) << (pos - 1))) >> pos
    left = x << (-s).clamp(min=0, max=62)
    return torch.where(s > 0, right, torch.where(s < 0, left, x))


def round_div(a, b) -> torch.Tensor:
    """round(a / b) half up, for integer a and positive integer b (b == 0 gives 0)."""
    a, b = _t(a).to(I64), _t(b).to(I64)
    bb = torch.where(b > 0, b, torch.ones_like(b))
    q = torch.div(2 * a + bb, 2 * bb, rounding_mode="floor")
    return torch.where(b > 0, q, torch.zeros_like(q))


def bitlen(x) -> torch.Tensor:
    """Number of bits of |x| (0 for 0): the hardware's leading-zero count complement. |x| < 2**53."""
    x = _t(x).to(I64).abs()
    if x.numel() and int(x.max()) >= 2 ** 53:
        raise ValueError("bitlen: |x| must be < 2**53")
    _, e = torch.frexp(x.to(torch.float64))
    return torch.where(x == 0, torch.zeros_like(x), e.to(I64))


def sat(x, bits: int = 32) -> torch.Tensor:
    """Saturate to a signed ``bits``-bit range."""
    return _t(x).clamp(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


def check_width(x: torch.Tensor, bits: int, what: str) -> torch.Tensor:
    """Raise OverflowError if an accumulator leaves its documented signed width."""
    if x.numel():
        lo, hi = int(x.min()), int(x.max())
        if lo < -(2 ** (bits - 1)) or hi >= 2 ** (bits - 1):
            raise OverflowError(f"{what} exceeds its {bits}-bit accumulator: range [{lo}, {hi}]")
    return x


def to_fixed(x: torch.Tensor, frac_bits: int = FA, bits: int = 32) -> torch.Tensor:
    """Quantise a float tensor to saturated fixed point (round half up)."""
    return sat(torch.floor(x.to(torch.float64) * 2.0 ** frac_bits + 0.5).to(I64), bits)


def from_fixed(x: torch.Tensor, frac_bits: int = FA) -> torch.Tensor:
    return x.to(torch.float64) * 2.0 ** -frac_bits


def exp2_fixed(x) -> torch.Tensor:
    """2**x for x <= 0 given with FZ fraction bits, as Q15 (0 .. 32768).

    n = (-x) >> FZ, f = (-x) mod 2**FZ, result = EXP2_LUT[f] >> n (floor). Exact LUT values are
    within 0.5 LSB of 2**15 * 2**(-f/2**FZ); the input grid (2**-FZ) bounds the relative error of
    the represented exponent by 2**-FZ * ln 2 = 0.068%.
    """
    x = _t(x).to(I64)
    if x.numel() and int(x.max()) > 0:
        raise ValueError("exp2_fixed: input must be <= 0")
    nx = -x
    n = (nx >> FZ).clamp(max=62)
    f = nx & (2 ** FZ - 1)
    return EXP2_LUT[f] >> n


# ---------------------------------------------------------------- activations

def quantize_pow2(v: torch.Tensor, frac_bits: int, bits: int = 8, dim=-1):
    """Requantize fixed-point ``v`` to ``bits``-bit integers with one power-of-two exponent per
    slice along ``dim`` (reduced dims keep their size 1 in ``e`` only if keepdim is needed by
    the caller; here ``e`` has ``dim`` removed).

    e = (bits-1) + frac_bits - bitlen(max|v|) (0 for an all-zero slice), so max|v|*2**(e-frac)
    lies in [2**(bits-2), 2**(bits-1)); q = clamp(rshift_round(v, frac_bits - e), -qmax, qmax)
    with qmax = 2**(bits-1) - 1. Value represented: q * 2**-e.
    """
    v = _t(v).to(I64)
    qmax = 2 ** (bits - 1) - 1
    mx = v.abs().amax(dim=dim, keepdim=True)
    e = (bits - 1) + frac_bits - bitlen(mx)
    e = torch.where(mx == 0, torch.zeros_like(e), e)
    q = rshift_round(v, frac_bits - e).clamp(-qmax, qmax)
    return q, e.squeeze(dim)


def dequantize_pow2(q: torch.Tensor, e: torch.Tensor, dim=-1) -> torch.Tensor:
    return q.to(torch.float64) * torch.pow(2.0, -e.to(torch.float64)).unsqueeze(dim)


# ---------------------------------------------------------------- weights / GEMM

@dataclass
class QuantLinear:
    """INT4 group-wise linear layer y = W x + b.

    q  [N, K] int in [-7, 7]; ws [N, K/group] uint8 scale mantissas in [1, 255];
    we [N] row exponents; bias [N] fixed point (FA) or None.
    Dequantised weight: q[n, k] * ws[n, k // group] * 2**-we[n].
    """
    q: torch.Tensor
    ws: torch.Tensor
    we: torch.Tensor
    bias: torch.Tensor | None
    group: int

    @property
    def out_features(self) -> int:
        return self.q.shape[0]

    @property
    def in_features(self) -> int:
        return self.q.shape[1]

    def rows(self, a: int, b: int) -> "QuantLinear":
        """Output rows ``a..b-1`` as a linear layer of their own: the row exponents, group scales
        and bias slice with the rows (groups run along the input, so no group is cut). Its output
        equals columns ``a..b-1`` of this layer's output bit for bit (rows are independent)."""
        if not 0 <= a < b <= self.out_features:
            raise ValueError(f"QuantLinear.rows({a}, {b}): expected 0 <= a < b <= out_features={self.out_features}")
        return QuantLinear(self.q[a:b], self.ws[a:b], self.we[a:b],
                           None if self.bias is None else self.bias[a:b], self.group)

    def regroup(self, group: int) -> "QuantLinear":
        """The same layer with scale groups of ``group`` inputs, a divisor of ``self.group``: each
        scale mantissa repeats over the ``self.group // group`` sub-groups it covers. The
        dequantised weight, :meth:`accumulate` and the output are unchanged bit for bit (the
        accumulator is an exact integer sum), so a GEMM array with a finer group runs a model
        quantised with a coarser one. ValueError if ``group`` does not divide ``self.group``."""
        if group <= 0 or self.group % group:
            raise ValueError(f"QuantLinear.regroup({group}): expected a divisor of group={self.group}")
        return QuantLinear(self.q, self.ws.repeat_interleave(self.group // group, dim=1), self.we,
                           self.bias, group)

    def dequant(self) -> torch.Tensor:
        s = self.ws.repeat_interleave(self.group, dim=1).to(torch.float64)
        return self.q.to(torch.float64) * s * torch.pow(2.0, -self.we.to(torch.float64))[:, None]

    def accumulate(self, x_q: torch.Tensor) -> torch.Tensor:
        """acc[t, n] = sum_g ws[n, g] * sum_{k in g} q[n, k] * x_q[t, k]  (48-bit, exact).

        Computed in float64, which is exact here (|terms| < 2**18, K < 2**16 → |acc| < 2**34);
        group order is irrelevant because integer addition is associative.
        """
        w = (self.q * self.ws.repeat_interleave(self.group, dim=1)).to(torch.float64)
        acc = (x_q.to(torch.float64) @ w.T)
        acc = acc.to(I64)
        return check_width(acc, ACC_BITS, "GEMM accumulator")

    def __call__(self, x_q: torch.Tensor, x_e: torch.Tensor, out_frac: int = FA) -> torch.Tensor:
        """x_q [T, K] int8 with exponents x_e [T] → y [T, N] fixed point (out_frac), int32 saturated.

        y = sat32(rshift_round(acc, we[n] + x_e[t] - out_frac) + bias[n]).
        """
        if x_q.shape[-1] != self.in_features:
            raise ValueError(f"QuantLinear: input has {x_q.shape[-1]} features, expected {self.in_features}")
        acc = self.accumulate(x_q)
        y = rshift_round(acc, self.we[None, :] + x_e[:, None] - out_frac)
        if self.bias is not None:
            y = y + self.bias[None, :]
        return sat(y)


def quantize_linear(w: torch.Tensor, bias: torch.Tensor | None = None, group: int = 128,
                    bits: int = 4) -> QuantLinear:
    """Quantise float weight [N, K] (and bias [N]) to :class:`QuantLinear`."""
    N, K = w.shape
    if group <= 0 or K % group:
        raise ValueError(f"group_size={group} must divide the input size K={K}")
    qmax = 2 ** (bits - 1) - 1
    w64 = w.to(torch.float64)
    wg = w64.view(N, K // group, group)
    s = wg.abs().amax(-1) / qmax                                  # float scale per group
    s = torch.where(s > 0, s, torch.full_like(s, 2.0 ** -40))
    smax = s.amax(-1)                                             # [N]
    we = torch.floor(torch.log2(255.0 / smax)).to(I64)            # smax * 2**we in (127.5, 255]
    ws = torch.floor(s * torch.pow(2.0, we.to(torch.float64))[:, None] + 0.5).clamp(1, 255).to(I64)
    step = ws.to(torch.float64) * torch.pow(2.0, -we.to(torch.float64))[:, None]
    q = torch.floor(wg / step[..., None] + 0.5).clamp(-qmax, qmax).to(I64).view(N, K)
    b = None if bias is None else to_fixed(bias, FA)
    return QuantLinear(q, ws, we, b, group)


# ---------------------------------------------------------------- vector ops

def rmsnorm_quant(h: torch.Tensor, eps: float, bits: int = 8):
    """Integer RMSNorm (without gamma: gamma is folded into the next linear layer's weights)
    followed by requantization to ``bits`` with a per-row exponent.

    h [T, D] fixed point FA.  Steps per row:
      sh  = max(0, bitlen(max|h|) - 15);  hp = rshift_round(h, sh)            (|hp| <= 2**15)
      ms  = (sum hp**2) // D + (EPS_Q >> 2*sh)   with EPS_Q = round(eps * 2**(2*FA))
      k   = max(0, ceil((bitlen(ms) - 12) / 2));  r = RSQRT_LUT[ms >> 2k] >> k  (~2**FR/sqrt(ms))
      u   = hp * r  (FR fraction bits, RMS 1) → quantize_pow2(u, FR, bits)
    Returns (x_q [T, D], x_e [T]).
    """
    h = _t(h).to(I64)
    D = h.shape[-1]
    mx = h.abs().amax(-1, keepdim=True)
    sh = (bitlen(mx) - 15).clamp(min=0)
    hp = rshift_round(h, sh)
    ss = (hp * hp).sum(-1, keepdim=True)
    eps_q = int(round(eps * 2 ** (2 * FA)))
    ms = torch.div(ss, D, rounding_mode="floor") + (torch.full_like(sh, eps_q) >> (2 * sh))
    ms = ms.clamp(min=1)
    k = ((bitlen(ms) - RSQRT_MANT_BITS + 1) // 2).clamp(min=0)
    r = RSQRT_LUT[ms >> (2 * k)] >> k
    u = hp * r
    return quantize_pow2(u, FR, bits)


def rope_tables(positions, head_dim: int, theta: float):
    """Q14 cos/sin tables [len(positions), head_dim // 2], computed once on the host in float64."""
    pos = torch.as_tensor(positions, dtype=torch.float64)
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    ang = pos[:, None] * inv[None, :]
    scale = 2.0 ** ROPE_BITS
    return (torch.floor(torch.cos(ang) * scale + 0.5).to(I64),
            torch.floor(torch.sin(ang) * scale + 0.5).to(I64))


def rope_fixed(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate fixed-point x [..., T, d] by Q14 tables [T, d/2] (pairs i, i + d/2), saturated to
    int32 (a rotation can grow an int32 input by up to sqrt(2))."""
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    ra = sat(rshift_round(a * cos - b * sin, ROPE_BITS))
    rb = sat(rshift_round(b * cos + a * sin, ROPE_BITS))
    return torch.cat([ra, rb], dim=-1)


def silu_fixed(g: torch.Tensor, frac_bits: int = FA) -> torch.Tensor:
    """silu(g) = g * sigmoid(g): sigmoid from SIGMOID_LUT at step 2**-6 over [-8, 8), clamped."""
    g = _t(g).to(I64)
    idx = (rshift_round(g, frac_bits - SIG_STEP_BITS) + 512).clamp(0, 1023)
    return rshift_round(g * SIGMOID_LUT[idx], 15)


def swiglu_fixed(g: torch.Tensor, u: torch.Tensor, frac_bits: int = FA) -> torch.Tensor:
    """silu(g) * u in fixed point (frac_bits), int32 saturated."""
    return sat(rshift_round(silu_fixed(g, frac_bits) * _t(u).to(I64), frac_bits))


# ---------------------------------------------------------------- attention

@dataclass
class Partial:
    """Online-softmax partial state for a set of keys, per query row.

    m [...]: max logit (log2 domain, FZ fraction bits), M_EMPTY when no key;
    l [...]: sum of exp2(z - m) in Q15;  o [..., d]: sum of exp2(z - m) * v with FO fraction bits.
    The represented attention output is o * 2**-FO / (l * 2**-15).
    """
    m: torch.Tensor
    l: torch.Tensor
    o: torch.Tensor

    @staticmethod
    def empty(shape, d: int) -> "Partial":
        return Partial(torch.full(tuple(shape), M_EMPTY, dtype=I64), torch.zeros(tuple(shape), dtype=I64),
                       torch.zeros((*shape, d), dtype=I64))

    def __getitem__(self, idx) -> "Partial":
        return Partial(self.m[idx], self.l[idx], self.o[idx])

    def equal(self, other: "Partial") -> bool:
        return (torch.equal(self.m, other.m) and torch.equal(self.l, other.l)
                and torch.equal(self.o, other.o))


def block_partial(q: torch.Tensor, eq: torch.Tensor, k: torch.Tensor, ek: torch.Tensor,
                  v: torch.Tensor, ev: torch.Tensor, mask: torch.Tensor | None = None) -> Partial:
    """Partial state of queries over one KV block.

    q [..., Lq, d] int8, eq [..., Lq]; k, v [..., B, d] int8/int4, ek, ev [..., B];
    mask [Lq, B] bool (True = attend) or None.  Leading dims (heads) broadcast.
      s = q·k (int32);  z = sat30(rshift_round(s * C, eq + ek + SC - FZ))
      m = max over attended keys;  p = exp2_fixed(z - m) (0 where masked)
      l = sum p;  o[d] = sum_t rshift_round(p[t] * v[t, d], 15 + ev[t] - FO)
    """
    d = q.shape[-1]
    C = score_multiplier(d)
    s = torch.matmul(q.to(torch.float64), k.to(torch.float64).transpose(-1, -2)).to(I64)   # exact
    z = rshift_round(s * C, eq[..., :, None] + ek[..., None, :] + (SC - FZ))
    z = z.clamp(M_EMPTY + 1, -M_EMPTY - 1)
    if mask is None:
        mask = torch.ones(z.shape[-2:], dtype=torch.bool)
    zm = torch.where(mask, z, torch.full_like(z, M_EMPTY))
    m = zm.amax(-1)
    any_key = mask.any(-1)
    m = torch.where(any_key, m, torch.full_like(m, M_EMPTY))
    p = torch.where(mask, exp2_fixed((zm - m[..., None]).clamp(max=0)), torch.zeros_like(z))
    l = p.sum(-1)
    # per-term rounding: shift depends on the key's V exponent
    sh = (P_BITS - FO) + ev[..., None, :, None]                 # [..., 1, B, 1]
    o = rshift_round(p[..., :, :, None] * v[..., None, :, :].to(I64), sh).sum(-2)
    return Partial(m, check_width(l, ACC_BITS, "l"), check_width(o, ACC_BITS, "o"))


def softmax_merge(a: Partial, b: Partial) -> Partial:
    """Pairwise online-softmax merge (the NIC's softmax_merge and the streaming fold).

    M = max(ma, mb); alpha = exp2_fixed(ma - M); beta = exp2_fixed(mb - M)  (one of them 2**15);
    l = rshift_round(la * alpha, 15) + rshift_round(lb * beta, 15); o likewise per element.
    The empty partial is an exact identity. Not associative in finite precision: see merge_partials.
    """
    M = torch.maximum(a.m, b.m)
    al, be = exp2_fixed(a.m - M), exp2_fixed(b.m - M)
    l = rshift_round(a.l * al, P_BITS) + rshift_round(b.l * be, P_BITS)
    o = rshift_round(a.o * al[..., None], P_BITS) + rshift_round(b.o * be[..., None], P_BITS)
    return Partial(M, check_width(l, ACC_BITS, "l"), check_width(o, ACC_BITS, "o"))


def merge_partials(parts) -> Partial:
    """Streaming merge of N partials: a left fold in the given order,
    ((p0 ⊕ p1) ⊕ p2) ⊕ ... — the documented order is ascending source rank (NIC) or ascending
    KV block index (prefill attention). Different orders can differ in the last bits."""
    parts = list(parts)
    if not parts:
        raise ValueError("merge_partials: need at least one partial")
    acc = parts[0]
    for p in parts[1:]:
        acc = softmax_merge(acc, p)
    return acc


def flat_merge(parts) -> Partial:
    """Order-free merge: every partial is rescaled once to the global max and the integers summed.

    M = max_i m_i;  l = sum_i rshift_round(l_i * exp2_fixed(m_i - M), 15);  o likewise.
    Integer addition is associative, so any grouping/order gives identical bits once M is known.
    Distributed form (two phases): all-reduce max of m → M; each node rescales its own partials to
    M and sums; all-reduce sum of (l, o). Used for decode so every KV layout gives identical bits.
    """
    parts = list(parts)
    if not parts:
        raise ValueError("flat_merge: need at least one partial")
    M = parts[0].m
    for p in parts[1:]:
        M = torch.maximum(M, p.m)
    l = torch.zeros_like(parts[0].l)
    o = torch.zeros_like(parts[0].o)
    for p in parts:
        sc = exp2_fixed(p.m - M)
        l = l + rshift_round(p.l * sc, P_BITS)
        o = o + rshift_round(p.o * sc[..., None], P_BITS)
    return Partial(M, check_width(l, ACC_BITS, "l"), check_width(o, ACC_BITS, "o"))


def rescale_to(p: Partial, M: torch.Tensor) -> Partial:
    """One node's phase-2 step of the distributed flat merge: its partial rescaled to global max M."""
    sc = exp2_fixed(p.m - M)
    return Partial(M, rshift_round(p.l * sc, P_BITS), rshift_round(p.o * sc[..., None], P_BITS))


def finalize(p: Partial, out_frac: int = FA) -> torch.Tensor:
    """Attention output o / l in fixed point (out_frac), int32 saturated; 0 for an empty partial."""
    num = p.o << (P_BITS + out_frac - FO)
    return sat(round_div(num, p.l[..., None]))
