"""Accuracy of the integer path against the float path (figures for the demo and benchmarks).

Three models run the same prompt: the float model (fp32), the float model with the
INT4 weights dequantised ("W4 fake-quant": isolates the weight-quantisation loss) and
the integer model. Cosine similarity and max error of hidden states and logits,
top-1 agreement, and greedy generations are reported.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, asdict

import torch

from . import numerics as nx
from .int_model import IntModel, QuantModel, quantize_model
from .model import FloatModel, Weights

__all__ = ["fake_quant_weights", "Agreement", "compare"]


def fake_quant_weights(w: Weights, qm: QuantModel) -> Weights:
    """Float weights whose linear layers are the INT4 weights dequantised (norm gains unfolded)."""
    out = copy.deepcopy(w)
    for lw, L in zip(out.layers, qm.layers):
        lw.o_w = L.o.dequant().to(lw.o_w.dtype)
        lw.down_w = L.down.dequant().to(lw.down_w.dtype)
        for name, ql, gamma in (("q_w", L.q, lw.ln1), ("k_w", L.k, lw.ln1), ("v_w", L.v, lw.ln1),
                                ("gate_w", L.gate, lw.ln2), ("up_w", L.up, lw.ln2)):
            setattr(lw, name, (ql.dequant() / gamma.to(torch.float64)[None, :]).to(lw.q_w.dtype))
    return out


def _cos(a, b) -> torch.Tensor:
    return torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=-1)


@dataclass
class Agreement:
    model: str
    prompt_len: int
    logits_cos_mean: float
    logits_cos_min: float
    logits_max_abs_err: float
    hidden_cos: list            # per layer output, mean over tokens
    top1_agreement: float       # fraction of prompt positions where argmax agrees
    w4_logits_cos_mean: float   # float vs W4 fake-quant float: the weight-quantisation share
    int_vs_w4_logits_cos: float # integer vs W4 fake-quant float: the integer pipeline's own share
    float_tokens: list
    int_tokens: list
    token_agreement: float

    def as_dict(self) -> dict:
        return asdict(self)


@torch.no_grad()
def compare(w: Weights, prompt, max_new_tokens: int = 8, kv_bits: int = 8, block: int = 16,
            qm: QuantModel | None = None) -> Agreement:
    qm = qm or quantize_model(w, kv_bits=kv_bits, block=block)
    fm, im = FloatModel(w), IntModel(qm)
    fq = FloatModel(fake_quant_weights(w, qm))
    prompt = torch.as_tensor(prompt, dtype=torch.long)
    lf, hf = fm.forward(prompt, return_hidden=True)
    lq = fq.forward(prompt)
    li, hi = im.forward(prompt, return_hidden=True)
    lif = nx.from_fixed(li)
    cos = _cos(lf, lif)
    ft = fm.generate(prompt, max_new_tokens) if max_new_tokens else []
    it = im.generate(prompt, max_new_tokens) if max_new_tokens else []
    agree = sum(a == b for a, b in zip(ft, it)) / max(1, len(ft))
    return Agreement(
        model=w.config.name, prompt_len=int(prompt.numel()),
        logits_cos_mean=float(cos.mean()), logits_cos_min=float(cos.min()),
        logits_max_abs_err=float((lf.double() - lif).abs().max()),
        hidden_cos=[float(_cos(a, nx.from_fixed(b)).mean()) for a, b in zip(hf[1:], hi[1:])],
        top1_agreement=float((lf.argmax(-1) == li.argmax(-1)).double().mean()),
        w4_logits_cos_mean=float(_cos(lf, lq).mean()),
        int_vs_w4_logits_cos=float(_cos(lq, lif).mean()),
        float_tokens=ft, int_tokens=it, token_agreement=agree)
