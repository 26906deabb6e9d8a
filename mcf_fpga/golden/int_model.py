"""Integer reference: the Qwen2 decoder exactly as the hardware computes it.

Built only from golden.numerics primitives. RMSNorm gammas are folded into the
following linear layers before quantisation (ln1 → q/k/v, ln2 → gate/up, final
norm → lm_head), so the hardware's RMSNorm has no multiply by gamma. With tied
embeddings the table is quantised twice: once for the lookup, once (with the
final-norm gamma folded) as the head.

Per layer (h: residual stream, int32 fixed point FA):
  x, xe = rmsnorm_quant(h)                               INT8 + row exponent
  q, k, v = Wq x, Wk x, Wv x (+bias)                     fixed FA
  q, k = rope_fixed(q), rope_fixed(k)                    Q14 tables
  qq, eq = quantize_pow2(q, per head, 8 bits)            KV: kv_bits (8 or 4) per (token, kv head)
  a = attention (prefill: left fold over KV blocks ascending; decode: flat merge) → fixed FA
  h = sat32(h + Wo quant(a));  x2 = rmsnorm_quant(h)
  h = sat32(h + Wd quant(swiglu(Wg x2, Wu x2)))
Logits = Whead rmsnorm_quant(h) in fixed FA; the next token is the argmax (lowest id on ties).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

import torch

from . import numerics as nx
from .attention import IntBackend, tile_partials, blocks_of, finish_rows, expand_kv
from .config import ModelConfig
from .model import Weights

__all__ = ["QuantLayer", "QuantModel", "quantize_model", "IntKVCache", "IntModel"]

I64 = torch.int64


@dataclass
class QuantLayer:
    q: nx.QuantLinear
    k: nx.QuantLinear
    v: nx.QuantLinear
    o: nx.QuantLinear
    gate: nx.QuantLinear
    up: nx.QuantLinear
    down: nx.QuantLinear


@dataclass
class QuantModel:
    config: ModelConfig
    embed: nx.QuantLinear          # lookup table [V, H]
    layers: list[QuantLayer]
    head: nx.QuantLinear           # [V, H], final-norm gamma folded
    kv_bits: int = 8
    block: int = 16                # KV block size (tokens): the unit of the canonical merge order

    def regroup(self, group: int) -> "QuantModel":
        """The same model with weight scale groups of ``group`` inputs (a divisor of
        ``config.group_size``; ``QuantLinear.regroup``): every output is unchanged bit for bit.
        The hardware's GEMM group (``hdl`` engine ``group``) may be finer than the group the
        model was quantised with (``mcf run --checkpoint`` quantises as ``mcf accuracy`` does)."""
        if group == self.config.group_size:
            return self
        if group <= 0 or self.config.group_size % group:
            raise ValueError(f"weight group {group} does not divide the model's group_size="
                             f"{self.config.group_size}")
        def rg(layer):
            return QuantLayer(**{f.name: getattr(layer, f.name).regroup(group) for f in fields(QuantLayer)})
        return QuantModel(self.config.replace(group_size=group), embed=self.embed.regroup(group),
                          layers=[rg(lw) for lw in self.layers], head=self.head.regroup(group),
                          kv_bits=self.kv_bits, block=self.block)


def quantize_model(w: Weights, kv_bits: int = 8, block: int = 16) -> QuantModel:
    cfg = w.config
    if kv_bits not in (4, 8):
        raise ValueError(f"kv_bits={kv_bits}, expected 4 or 8")
    if block <= 0:
        raise ValueError(f"block={block} must be > 0")
    g = cfg.group_size

    def ql(weight, bias=None, gamma=None):
        weight = weight.to(torch.float64)
        if gamma is not None:
            weight = weight * gamma.to(torch.float64)[None, :]
        return nx.quantize_linear(weight, None if bias is None else bias.to(torch.float64), g)

    layers = [QuantLayer(q=ql(lw.q_w, lw.q_b, lw.ln1), k=ql(lw.k_w, lw.k_b, lw.ln1),
                         v=ql(lw.v_w, lw.v_b, lw.ln1), o=ql(lw.o_w),
                         gate=ql(lw.gate_w, None, lw.ln2), up=ql(lw.up_w, None, lw.ln2),
                         down=ql(lw.down_w)) for lw in w.layers]
    embed = nx.quantize_linear(w.embed.to(torch.float64), None, g, bits=8)   # lookup table: INT8
    return QuantModel(cfg, embed=embed, layers=layers, head=ql(w.head, None, w.norm),
                      kv_bits=kv_bits, block=block)


@dataclass
class IntKVCache:
    """Per layer (values [Hkv, T, d], exponents [Hkv, T]) for K and for V."""
    k: list[tuple] = field(default_factory=list)
    v: list[tuple] = field(default_factory=list)

    @property
    def length(self) -> int:
        return 0 if not self.k else self.k[0][0].shape[1]

    def append(self, i: int, k: tuple, v: tuple):
        if len(self.k) <= i:
            self.k.append(k)
            self.v.append(v)
        else:
            self.k[i] = (torch.cat([self.k[i][0], k[0]], 1), torch.cat([self.k[i][1], k[1]], 1))
            self.v[i] = (torch.cat([self.v[i][0], v[0]], 1), torch.cat([self.v[i][1], v[1]], 1))


def _heads(x: torch.Tensor, n: int, d: int) -> torch.Tensor:
    """[T, n*d] → [n, T, d]"""
    return x.view(x.shape[0], n, d).transpose(0, 1)


class IntModel:
    """Integer decoder. ``forward(tokens, cache)`` returns int logits [T, V] (fixed point FA).

    A call with several tokens is a prefill chunk (canonical left fold per query row); a call
    with one token on a non-empty cache is a decode step (flat merge, layout-independent).
    """

    def __init__(self, qm: QuantModel):
        self.qm = qm
        self.cfg = qm.config
        self._be = IntBackend()

    def new_cache(self) -> IntKVCache:
        return IntKVCache()

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        e = self.qm.embed
        g = e.group
        scale = e.ws[tokens].repeat_interleave(g, dim=1)
        return nx.sat(nx.rshift_round(e.q[tokens] * scale, e.we[tokens][:, None] - nx.FA))

    def attention(self, i: int, q: tuple, cache: IntKVCache, start: int, decode: bool) -> torch.Tensor:
        """q: (values [Hq, T, d], exps [Hq, T]) at positions start..; returns fixed FA [Hq, T, d]."""
        cfg = self.cfg
        K, V = cache.k[i], cache.v[i]
        rep = cfg.gqa_ratio
        K, V = expand_kv(K, rep), expand_kv(V, rep)
        T = q[0].shape[1]
        end = start + T
        blocks = blocks_of(K, V, 0, end, self.qm.block)
        parts = tile_partials(self._be, q, start, blocks, self.qm.block)
        if decode:
            return nx.finalize(nx.flat_merge([parts[b] for b in sorted(parts)]))
        return finish_rows(self._be, parts)

    def project_qkv(self, i: int, h: torch.Tensor, start: int):
        """Layer i up to attention for rows at positions start..: RMSNorm, q/k/v projections,
        RoPE, requantisation. Row-independent. Returns (q, k, v) as (values, exponents) pairs
        [heads, T, d] / [heads, T] (q INT8, k/v kv_bits)."""
        cfg, L = self.cfg, self.qm.layers[i]
        T = h.shape[0]
        cos, sin = nx.rope_tables(range(start, start + T), cfg.head_dim, cfg.rope_theta)
        H, Hk, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        x, xe = nx.rmsnorm_quant(h, cfg.rms_norm_eps)
        q = nx.rope_fixed(_heads(L.q(x, xe), H, d), cos, sin)
        k = nx.rope_fixed(_heads(L.k(x, xe), Hk, d), cos, sin)
        v = _heads(L.v(x, xe), Hk, d)
        return (nx.quantize_pow2(q, nx.FA, 8), nx.quantize_pow2(k, nx.FA, self.qm.kv_bits),
                nx.quantize_pow2(v, nx.FA, self.qm.kv_bits))

    def post_attention(self, i: int, h: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """Layer i after attention (a: [H, T, d] fixed FA): O projection, residual, RMSNorm,
        SwiGLU FFN, residual. Row-independent. Returns the new residual stream h."""
        cfg, L = self.cfg, self.qm.layers[i]
        T = h.shape[0]
        a = a.transpose(0, 1).reshape(T, cfg.num_heads * cfg.head_dim)
        aq, ae = nx.quantize_pow2(a, nx.FA, 8)
        h = nx.sat(h + L.o(aq, ae))
        x2, x2e = nx.rmsnorm_quant(h, cfg.rms_norm_eps)
        act = nx.swiglu_fixed(L.gate(x2, x2e), L.up(x2, x2e))
        a2, a2e = nx.quantize_pow2(act, nx.FA, 8)
        return nx.sat(h + L.down(a2, a2e))

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """Final RMSNorm (gain folded into the head) and the head GEMM: int logits, fixed FA."""
        xf, xfe = nx.rmsnorm_quant(h, self.cfg.rms_norm_eps)
        return self.qm.head(xf, xfe)

    @torch.no_grad()
    def forward(self, tokens, cache: IntKVCache | None = None, return_hidden: bool = False,
                decode: bool | None = None):
        cfg, qm = self.cfg, self.qm
        tokens = torch.as_tensor(tokens, dtype=torch.long)
        if tokens.ndim != 1 or tokens.numel() == 0:
            raise ValueError(f"tokens must be a non-empty 1-D sequence, got shape {list(tokens.shape)}")
        if tokens.min() < 0 or tokens.max() >= cfg.vocab_size:
            raise ValueError(f"token ids must be in [0, {cfg.vocab_size})")
        cache = cache if cache is not None else IntKVCache()
        start, T = cache.length, tokens.numel()
        if start + T > cfg.max_position:
            raise ValueError(f"sequence length {start + T} exceeds max_position={cfg.max_position}")
        if decode is None:
            decode = T == 1 and start > 0
        h = self.embed(tokens)
        hidden = [h]
        for i in range(len(qm.layers)):
            qq, kq, vq = self.project_qkv(i, h, start)
            cache.append(i, kq, vq)
            a = self.attention(i, qq, cache, start, decode)                 # [H, T, d]
            h = self.post_attention(i, h, a)
            hidden.append(h)
        logits = self.logits(h)
        return (logits, hidden) if return_hidden else logits

    @torch.no_grad()
    def generate(self, prompt, max_new_tokens: int, chunk: int | None = None) -> list[int]:
        """Greedy: prefill (in chunks of ``chunk`` tokens if given), then decode steps."""
        cache = self.new_cache()
        prompt = list(prompt)
        step = chunk or len(prompt)
        for c0 in range(0, len(prompt), step):
            logits = self.forward(prompt[c0:c0 + step], cache, decode=False)
        out = []
        for _ in range(max_new_tokens):
            tok = int(torch.argmax(logits[-1]))
            out.append(tok)
            logits = self.forward([tok], cache, decode=True)
        return out
