"""Float reference: a Qwen2-family decoder in PyTorch.

GQA, RoPE (theta), RMSNorm, SwiGLU, q/k/v bias, tied embeddings, a KV cache,
prefill and incremental decode. Weights are random from a seed or loaded from a
local Hugging Face-format directory (config.json + *.safetensors). This is the
float path that golden's integer path (golden.int_model) is measured against,
and that is itself cross-checked against transformers' Qwen2ForCausalLM.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from .config import ModelConfig

__all__ = ["LayerWeights", "Weights", "random_weights", "linear_shape", "load_hf", "save_hf", "hf_tensor_shapes", "KVCache", "FloatModel",
           "rope_cos_sin", "apply_rope", "rms_norm"]


@dataclass
class LayerWeights:
    q_w: torch.Tensor
    q_b: torch.Tensor
    k_w: torch.Tensor
    k_b: torch.Tensor
    v_w: torch.Tensor
    v_b: torch.Tensor
    o_w: torch.Tensor
    gate_w: torch.Tensor
    up_w: torch.Tensor
    down_w: torch.Tensor
    ln1: torch.Tensor
    ln2: torch.Tensor


@dataclass
class Weights:
    config: ModelConfig
    embed: torch.Tensor                    # [V, H]
    layers: list[LayerWeights]
    norm: torch.Tensor                     # [H]
    lm_head: torch.Tensor | None = None    # [V, H]; None when tied to embed

    @property
    def head(self) -> torch.Tensor:
        return self.embed if self.lm_head is None else self.lm_head


def _shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    H, I = cfg.hidden_size, cfg.intermediate_size
    return {"q_w": (cfg.q_dim, H), "q_b": (cfg.q_dim,), "k_w": (cfg.kv_dim, H), "k_b": (cfg.kv_dim,),
            "v_w": (cfg.kv_dim, H), "v_b": (cfg.kv_dim,), "o_w": (H, cfg.q_dim),
            "gate_w": (I, H), "up_w": (I, H), "down_w": (H, I), "ln1": (H,), "ln2": (H,)}


def linear_shape(cfg: ModelConfig, name: str) -> tuple[int, int]:
    """(out_features, in_features) of linear ``name`` of a layer (q, k, v, o, gate, up, down) or
    of the LM head (``head``)."""
    if name == "head":
        return cfg.vocab_size, cfg.hidden_size
    shapes = _shapes(cfg)
    if f"{name}_w" not in shapes:
        raise ValueError(f"no linear named {name!r} (q, k, v, o, gate, up, down, head)")
    return shapes[f"{name}_w"]


def random_weights(cfg: ModelConfig, seed: int = 0, dtype=torch.float32) -> Weights:
    """Random weights from ``seed`` (Gaussian, standard deviations): linear layers 1/sqrt(fan_in),
    biases 0.1, norm gains 1 + 0.1, embeddings 0.1. Activations stay O(1) through the layers,
    and the embeddings are small enough that the tied head does not just copy the input token."""
    g = torch.Generator().manual_seed(seed)

    def randn(*shape, std=1.0):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * std).to(dtype)

    layers = []
    for _ in range(cfg.num_layers):
        t = {}
        for name, shape in _shapes(cfg).items():
            if name.startswith("ln"):
                t[name] = (1.0 + randn(*shape, std=0.1))
            elif name.endswith("_b"):
                t[name] = randn(*shape, std=0.1)
            else:
                t[name] = randn(*shape, std=shape[1] ** -0.5)
        layers.append(LayerWeights(**t))
    embed = randn(cfg.vocab_size, cfg.hidden_size, std=0.1)
    norm = 1.0 + randn(cfg.hidden_size, std=0.1)
    lm_head = None if cfg.tie_word_embeddings else randn(cfg.vocab_size, cfg.hidden_size,
                                                         std=cfg.hidden_size ** -0.5)
    return Weights(cfg, embed, layers, norm, lm_head)


_HF = {"q_w": "self_attn.q_proj.weight", "q_b": "self_attn.q_proj.bias",
       "k_w": "self_attn.k_proj.weight", "k_b": "self_attn.k_proj.bias",
       "v_w": "self_attn.v_proj.weight", "v_b": "self_attn.v_proj.bias",
       "o_w": "self_attn.o_proj.weight", "gate_w": "mlp.gate_proj.weight",
       "up_w": "mlp.up_proj.weight", "down_w": "mlp.down_proj.weight",
       "ln1": "input_layernorm.weight", "ln2": "post_attention_layernorm.weight"}


def hf_tensor_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor a Hugging Face Qwen2 checkpoint of ``cfg`` holds, name -> shape."""
    shapes = _shapes(cfg)
    out = {"model.embed_tokens.weight": (cfg.vocab_size, cfg.hidden_size)}
    for i in range(cfg.num_layers):
        for k, hf in _HF.items():
            out[f"model.layers.{i}.{hf}"] = shapes[k]
    out["model.norm.weight"] = (cfg.hidden_size,)
    if not cfg.tie_word_embeddings:
        out["lm_head.weight"] = (cfg.vocab_size, cfg.hidden_size)
    return out


def _redundant_tensors(cfg: ModelConfig) -> dict:
    """Tensors a checkpoint may carry beyond ``hf_tensor_shapes`` because they repeat what the
    config already says, name -> the value they must equal (None: ``model.embed_tokens.weight``):
    older transformers saved each layer's RoPE ``inv_freq`` buffer, and some tied models still
    ship ``lm_head.weight``. ``load_hf`` accepts them only when they agree."""
    inv = rope_inv_freq(cfg.head_dim, cfg.rope_theta)
    out = {f"model.layers.{i}.self_attn.rotary_emb.inv_freq": inv for i in range(cfg.num_layers)}
    if cfg.tie_word_embeddings:
        out["lm_head.weight"] = None
    return out


def _names(names, n: int = 4) -> str:
    names = sorted(names)
    return ", ".join(names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


_FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")


def load_hf(path, group_size: int = 128, dtype=torch.float32) -> Weights:
    """Load a Hugging Face-format Qwen2 checkpoint directory (config.json + *.safetensors).

    The checkpoint is validated before any tensor data is read: its tensor names must be
    exactly those the config implies (missing, extra and duplicated ones — a name in two
    files — are refused, listed; the redundant ones of ``_redundant_tensors`` are accepted
    only when they equal what the config implies), with the config's shapes and a floating-point dtype; then
    every tensor must be finite (a NaN or inf is refused with its name). A file that is not a
    readable safetensors file is named. Every refusal is a ValueError ``checkpoint PATH: ...``.
    """
    from safetensors import safe_open

    path = Path(path)
    cfg = ModelConfig.from_hf_dir(path, group_size=group_size)
    files = sorted(f for f in path.glob("*.safetensors") if f.is_file())
    if not files:
        raise ValueError(f"checkpoint {path}: no *.safetensors files")
    expected_count = 12 * cfg.num_layers + 2 + (0 if cfg.tie_word_embeddings else 1)
    where: dict[str, Path] = {}
    dups: dict[str, list] = {}
    header: dict[str, tuple] = {}
    for f in files:
        try:
            with safe_open(str(f), framework="pt") as h:
                for name in h.keys():
                    sl = h.get_slice(name)
                    if name in where:
                        dups.setdefault(name, [where[name].name]).append(f.name)
                    where[name] = f
                    header[name] = (tuple(sl.get_shape()), sl.get_dtype())
        except Exception as exc:        # SafetensorError (truncated, garbage), OSError
            raise ValueError(f"checkpoint {path}: {f.name} is not a readable safetensors file "
                             f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None
    if dups:
        raise ValueError(f"checkpoint {path}: {len(dups)} tensor(s) defined in more than one file: "
                         + "; ".join(f"{n} in {', '.join(fs)}" for n, fs in sorted(dups.items())[:4]))
    if expected_count > len(where) + 1000:      # do not even list a config that is far off
        raise ValueError(f"checkpoint {path}: config.json (num_hidden_layers={cfg.num_layers}) implies "
                         f"{expected_count} tensors, the checkpoint holds {len(where)}")
    shapes = hf_tensor_shapes(cfg)
    redundant = {n: want for n, want in _redundant_tensors(cfg).items() if n in where}
    missing, extra = set(shapes) - set(where), set(where) - set(shapes) - set(redundant)
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {len(missing)} tensor(s) config.json implies: {_names(missing)}")
        if extra:
            parts.append(f"{len(extra)} tensor(s) config.json does not describe "
                         f"(num_hidden_layers={cfg.num_layers}, tie_word_embeddings="
                         f"{str(cfg.tie_word_embeddings).lower()}): {_names(extra)}")
        raise ValueError(f"checkpoint {path}: " + "; ".join(parts))
    for name, shape in shapes.items():
        got, dt = header[name]
        if got != tuple(shape):
            raise ValueError(f"checkpoint {path}: tensor {name!r} has shape {list(got)}, "
                             f"expected {list(shape)}")
        if dt not in _FLOAT_DTYPES:
            raise ValueError(f"checkpoint {path}: tensor {name!r} has dtype {dt}, expected a "
                             f"floating-point type ({', '.join(_FLOAT_DTYPES)})")
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            with safe_open(str(f), framework="pt") as h:
                for name in h.keys():
                    tensors[name] = h.get_tensor(name)
        except Exception as exc:
            raise ValueError(f"checkpoint {path}: {f.name} cannot be read "
                             f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None

    def take(name):
        t = tensors[name].to(dtype)
        if not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            raise ValueError(f"checkpoint {path}: tensor {name!r} ({where[name].name}) holds {bad} "
                             f"non-finite value(s) (NaN or inf)")
        return t

    layers = [LayerWeights(**{k: take(f"model.layers.{i}.{hf}") for k, hf in _HF.items()})
              for i in range(cfg.num_layers)]
    embed = take("model.embed_tokens.weight")
    for name, want in redundant.items():        # agree with the config, or refuse
        got = tensors[name].to(torch.float64)
        ref = (embed if want is None else want).to(torch.float64)
        if got.shape != ref.shape or not torch.allclose(got, ref, rtol=1e-3, atol=0):
            what = ("differs from model.embed_tokens.weight although config.json has "
                    "tie_word_embeddings=true" if want is None else
                    f"disagrees with config.json (head_dim={cfg.head_dim}, rope_theta={cfg.rope_theta:g})")
            raise ValueError(f"checkpoint {path}: tensor {name!r} ({where[name].name}) {what}")
    norm = take("model.norm.weight")
    lm_head = None if cfg.tie_word_embeddings else take("lm_head.weight")
    return Weights(cfg, embed, layers, norm, lm_head)


def save_hf(weights: Weights, path) -> Path:
    """Write ``weights`` as a Hugging Face-format directory (config.json + model.safetensors)."""
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    cfg = weights.config
    out = {"model.embed_tokens.weight": weights.embed, "model.norm.weight": weights.norm}
    for i, lw in enumerate(weights.layers):
        for k, hf in _HF.items():
            out[f"model.layers.{i}.{hf}"] = getattr(lw, k)
    if weights.lm_head is not None:
        out["lm_head.weight"] = weights.lm_head
    save_file({k: v.contiguous() for k, v in out.items()}, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(cfg.to_hf_dict(), indent=2))
    return path


# ---------------------------------------------------------------- building blocks

def rms_norm(x: torch.Tensor, gamma: torch.Tensor, eps: float) -> torch.Tensor:
    var = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(var + eps) * gamma


def rope_inv_freq(head_dim: int, theta: float) -> torch.Tensor:
    """RoPE's per-pair frequencies, fp32 (HF 'default' rope; its checkpoints' ``inv_freq``)."""
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).to(torch.float32) / head_dim))


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float, dtype=torch.float32):
    """cos/sin of shape [len(positions), head_dim] (HF 'default' rope: halves duplicated)."""
    ang = positions.to(torch.float32)[:, None] * rope_inv_freq(head_dim, theta)[None, :]
    emb = torch.cat([ang, ang], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [..., T, d]; rotate_half convention (pairs i and i + d/2)."""
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rot * sin


@dataclass
class KVCache:
    """Per-layer K and V, each [num_kv_heads, T, head_dim]."""
    k: list[torch.Tensor] = field(default_factory=list)
    v: list[torch.Tensor] = field(default_factory=list)

    @property
    def length(self) -> int:
        return 0 if not self.k else self.k[0].shape[1]


class FloatModel:
    """Float Qwen2 decoder. ``forward(tokens, cache)`` runs prefill (many tokens) or a decode
    step (one token) at positions ``cache.length ...`` and returns logits [T, vocab]."""

    def __init__(self, weights: Weights, dtype=torch.float32):
        self.w = weights
        self.cfg = weights.config
        self.dtype = dtype

    def new_cache(self) -> KVCache:
        return KVCache()

    @torch.no_grad()
    def forward(self, tokens, cache: KVCache | None = None, return_hidden: bool = False):
        cfg, w, dt = self.cfg, self.w, self.dtype
        tokens = torch.as_tensor(tokens, dtype=torch.long)
        if tokens.ndim != 1:
            raise ValueError(f"tokens must be 1-D, got shape {list(tokens.shape)}")
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= cfg.vocab_size):
            raise ValueError(f"token ids must be in [0, {cfg.vocab_size}), got "
                             f"[{int(tokens.min())}, {int(tokens.max())}]")
        cache = cache if cache is not None else KVCache()
        start = cache.length
        T = tokens.numel()
        if start + T > cfg.max_position:
            raise ValueError(f"sequence length {start + T} exceeds max_position={cfg.max_position}")
        pos = torch.arange(start, start + T)
        cos, sin = rope_cos_sin(pos, cfg.head_dim, cfg.rope_theta, dt)
        h = w.embed.to(dt)[tokens]
        hidden = [h]
        for i, lw in enumerate(w.layers):
            x = rms_norm(h, lw.ln1.to(dt), cfg.rms_norm_eps)
            q = (x @ lw.q_w.to(dt).T + lw.q_b.to(dt)).view(T, cfg.num_heads, cfg.head_dim).transpose(0, 1)
            k = (x @ lw.k_w.to(dt).T + lw.k_b.to(dt)).view(T, cfg.num_kv_heads, cfg.head_dim).transpose(0, 1)
            v = (x @ lw.v_w.to(dt).T + lw.v_b.to(dt)).view(T, cfg.num_kv_heads, cfg.head_dim).transpose(0, 1)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            if len(cache.k) <= i:
                cache.k.append(k)
                cache.v.append(v)
            else:
                cache.k[i] = torch.cat([cache.k[i], k], dim=1)
                cache.v[i] = torch.cat([cache.v[i], v], dim=1)
            K, V = cache.k[i], cache.v[i]
            rep = cfg.gqa_ratio
            Kx, Vx = K.repeat_interleave(rep, 0), V.repeat_interleave(rep, 0)
            mask = torch.arange(start + T)[None, :] <= pos[:, None]       # [T, S] True = attend
            a = F.scaled_dot_product_attention(q, Kx, Vx, attn_mask=mask)
            a = a.transpose(0, 1).reshape(T, cfg.q_dim)
            h = h + a @ lw.o_w.to(dt).T
            x = rms_norm(h, lw.ln2.to(dt), cfg.rms_norm_eps)
            h = h + (F.silu(x @ lw.gate_w.to(dt).T) * (x @ lw.up_w.to(dt).T)) @ lw.down_w.to(dt).T
            hidden.append(h)
        hf = rms_norm(h, w.norm.to(dt), cfg.rms_norm_eps)
        logits = hf @ w.head.to(dt).T
        return (logits, hidden) if return_hidden else logits

    @torch.no_grad()
    def generate(self, prompt, max_new_tokens: int) -> list[int]:
        """Greedy decoding (argmax; ties → lowest id): prefill then cached decode steps."""
        cache = self.new_cache()
        logits = self.forward(prompt, cache)
        out = []
        for _ in range(max_new_tokens):
            tok = int(torch.argmax(logits[-1]))
            out.append(tok)
            logits = self.forward([tok], cache)
        return out
