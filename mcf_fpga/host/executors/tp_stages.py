"""Golden arithmetic of one W node's slice in tensor-parallel decode (``host.tp``).

Each function is a part of ``IntModel.project_qkv`` / ``post_attention`` / ``logits`` restricted to
the output rows of slice j (``QuantLinear.rows``); the whole-vector steps between them (RMSNorm,
quantisation of the attention output and of the FFN vector) run on the gathered vectors, so the
gathered results equal IntModel's bit for bit (tests/host/executors/test_executors.py).
"""
from __future__ import annotations

import torch

from mcf_fpga.golden import numerics as nx
from mcf_fpga.golden.int_model import IntModel

__all__ = ["project_part", "merged_rows", "attn_part", "o_part", "ffn_part", "down_part", "best_part", "pick"]


def _lin(lin: nx.QuantLinear, ab: tuple) -> nx.QuantLinear:
    return lin.rows(*ab)


def project_part(im: IntModel, layer: int, h: torch.Tensor, pos: int, split, j: int):
    """RMSNorm of the whole h, then q of slice j's query heads and k, v of its KV heads (RoPE,
    quantisation) as in ``IntModel.project_qkv``: ((q, eq) [nh, 1, d] / [nh, 1], k pair or None,
    v pair or None)."""
    cfg, L = im.cfg, im.qm.layers[layer]
    d = cfg.head_dim
    cos, sin = nx.rope_tables(range(pos, pos + 1), d, cfg.rope_theta)
    x, xe = nx.rmsnorm_quant(h, cfg.rms_norm_eps)

    def heads(y, n):
        return y.view(1, n, d).transpose(0, 1)

    h0, h1 = split.heads(j)
    q = nx.rope_fixed(heads(_lin(L.q, split.rows("q", j))(x, xe), h1 - h0), cos, sin)
    g0, g1 = split.kv_heads(j)
    if g1 == g0:
        return nx.quantize_pow2(q, nx.FA, 8), None, None
    k = nx.rope_fixed(heads(_lin(L.k, split.rows("k", j))(x, xe), g1 - g0), cos, sin)
    v = heads(_lin(L.v, split.rows("v", j))(x, xe), g1 - g0)
    kb = im.qm.kv_bits
    return nx.quantize_pow2(q, nx.FA, 8), nx.quantize_pow2(k, nx.FA, kb), nx.quantize_pow2(v, nx.FA, kb)


def merged_rows(merged: nx.Partial, split, j: int) -> nx.Partial:
    """The merged partial's rows of slice j's query heads (what the leader sends W node j)."""
    h0, h1 = split.heads(j)
    return nx.Partial(merged.m[h0:h1], merged.l[h0:h1], merged.o[h0:h1])


def attn_part(part: nx.Partial) -> torch.Tensor:
    """Stage ``attn``: the attention output of slice j's heads (finalize), [1, nh * d] fixed FA."""
    return nx.finalize(part).transpose(0, 1).reshape(1, -1)


def o_part(im: IntModel, layer: int, h: torch.Tensor, a: torch.Tensor, split, j: int) -> torch.Tensor:
    """Stage ``o``: quantise the whole attention output a [1, Q] (one exponent per token), then
    h1[slice] = sat(h[slice] + W_O[slice] A)."""
    lo, hi = split.hidden(j)
    aq, ae = nx.quantize_pow2(a, nx.FA, 8)
    return nx.sat(h[:, lo:hi] + _lin(im.qm.layers[layer].o, (lo, hi))(aq, ae))


def ffn_part(im: IntModel, layer: int, h1: torch.Tensor, split, j: int) -> torch.Tensor:
    """Stage ``ffn``: RMSNorm of the whole h1, then SwiGLU of W_gate / W_up rows of slice j."""
    L, ab = im.qm.layers[layer], split.inter(j)
    x2, x2e = nx.rmsnorm_quant(h1, im.cfg.rms_norm_eps)
    return nx.swiglu_fixed(_lin(L.gate, ab)(x2, x2e), _lin(L.up, ab)(x2, x2e))


def down_part(im: IntModel, layer: int, h1: torch.Tensor, s: torch.Tensor, split, j: int) -> torch.Tensor:
    """Stage ``down``: quantise the whole FFN vector s, h[slice] = sat(h1[slice] + W_down[slice] s)."""
    a, b = split.hidden(j)
    sq, se = nx.quantize_pow2(s, nx.FA, 8)
    return nx.sat(h1[:, a:b] + _lin(im.qm.layers[layer].down, (a, b))(sq, se))


def best_part(im: IntModel, h: torch.Tensor, split, j: int) -> tuple:
    """``dlogits`` of slice j: (largest logit of the vocabulary slice, its token id; the lowest on
    ties, as torch.argmax)."""
    a, b = split.vocab(j)
    xf, xfe = nx.rmsnorm_quant(h, im.cfg.rms_norm_eps)
    lg = _lin(im.qm.head, (a, b))(xf, xfe)[-1]
    i = int(torch.argmax(lg))
    return int(lg[i]), a + i


def pick(bests) -> int:
    """The token from every slice's (value, index): the largest value, the lowest index on ties
    (IntModel's argmax over the whole vocabulary)."""
    return min(bests, key=lambda vi: (-vi[0], vi[1]))[1]
