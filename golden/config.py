"""Model shapes: a Qwen2-family decoder configuration with validation.

``ModelConfig`` is the one place model dimensions live; golden/, hdl/ and host/
read them from here. Named configs: ``qwen2.5-0.5b``, ``qwen2.5-1.5b`` (the real
checkpoints' shapes) and the small test shapes ``tiny`` and ``micro``.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ModelConfig", "CONFIGS", "get_config"]


@dataclass(frozen=True)
class ModelConfig:
    name: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    max_position: int = 32768
    tie_word_embeddings: bool = True
    group_size: int = 128          # INT4 weight quantisation group (along the input dim)

    def __post_init__(self):
        def need(cond, field, value, expected):
            if not cond:
                raise ValueError(f"ModelConfig {self.name!r}: {field}={value!r}, expected {expected}")
        for f in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                  "num_kv_heads", "head_dim", "max_position", "group_size"):
            need(isinstance(getattr(self, f), int) and getattr(self, f) > 0, f, getattr(self, f),
                 "a positive integer")
        need(self.num_heads % self.num_kv_heads == 0, "num_heads", self.num_heads,
             f"a multiple of num_kv_heads={self.num_kv_heads}")
        need(self.head_dim % 2 == 0, "head_dim", self.head_dim, "an even number (RoPE rotates pairs)")
        need(self.rope_theta > 0, "rope_theta", self.rope_theta, "> 0")
        need(self.rms_norm_eps > 0, "rms_norm_eps", self.rms_norm_eps, "> 0")
        for f in ("hidden_size", "intermediate_size"):
            need(getattr(self, f) % self.group_size == 0, "group_size", self.group_size,
                 f"a divisor of {f}={getattr(self, f)}")
        need((self.num_heads * self.head_dim) % self.group_size == 0, "group_size", self.group_size,
             f"a divisor of num_heads*head_dim={self.num_heads * self.head_dim}")

    @property
    def gqa_ratio(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def replace(self, **changes) -> "ModelConfig":
        return dataclasses.replace(self, **changes)

    def kv_bytes_per_token(self, kv_bits: int = 8) -> int:
        """KV-cache bytes per token per layer (K and V), excluding exponents."""
        return 2 * self.kv_dim * kv_bits // 8

    # ---- Hugging Face config.json ----
    @classmethod
    def from_hf_dict(cls, d: dict, name: str = "checkpoint", group_size: int = 128) -> "ModelConfig":
        def get(key, *alts, default=None):
            for k in (key, *alts):
                if k in d:
                    return d[k]
            if default is None:
                raise ValueError(f"config.json: missing field {key!r}")
            return default
        heads = get("num_attention_heads")
        hidden = get("hidden_size")
        rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
        theta = d.get("rope_theta", rope.get("rope_theta", 10000.0))
        if rope.get("rope_type", rope.get("type", "default")) not in ("default", None):
            raise ValueError(f"config.json: rope_type={rope.get('rope_type')!r} not supported, "
                             f"expected 'default'")
        return cls(name=name, vocab_size=get("vocab_size"), hidden_size=hidden,
                   intermediate_size=get("intermediate_size"), num_layers=get("num_hidden_layers"),
                   num_heads=heads, num_kv_heads=get("num_key_value_heads", default=heads),
                   head_dim=d.get("head_dim") or hidden // heads, rope_theta=float(theta),
                   rms_norm_eps=float(get("rms_norm_eps", default=1e-6)),
                   max_position=get("max_position_embeddings", default=32768),
                   tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
                   group_size=group_size)

    def to_hf_dict(self) -> dict:
        return {
            "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
            "vocab_size": self.vocab_size, "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size, "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads, "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim, "hidden_act": "silu", "rope_theta": self.rope_theta,
            "rms_norm_eps": self.rms_norm_eps, "max_position_embeddings": self.max_position,
            "tie_word_embeddings": self.tie_word_embeddings, "use_sliding_window": False,
            "torch_dtype": "float32",
        }

    @classmethod
    def from_hf_dir(cls, path, group_size: int = 128) -> "ModelConfig":
        p = Path(path) / "config.json"
        if not p.is_file():
            raise ValueError(f"checkpoint {path}: no config.json")
        return cls.from_hf_dict(json.loads(p.read_text()), name=Path(path).name, group_size=group_size)


CONFIGS = {
    # Real checkpoint shapes (Qwen2.5 model cards / config.json).
    "qwen2.5-0.5b": ModelConfig("qwen2.5-0.5b", vocab_size=151936, hidden_size=896,
                                intermediate_size=4864, num_layers=24, num_heads=14, num_kv_heads=2,
                                head_dim=64),
    "qwen2.5-1.5b": ModelConfig("qwen2.5-1.5b", vocab_size=151936, hidden_size=1536,
                                intermediate_size=8960, num_layers=28, num_heads=12, num_kv_heads=2,
                                head_dim=128),
    # Small shapes for tests and the demo (same structure: GQA, biases, tied embeddings).
    "tiny": ModelConfig("tiny", vocab_size=1024, hidden_size=256, intermediate_size=512,
                        num_layers=2, num_heads=4, num_kv_heads=2, head_dim=64,
                        rope_theta=10000.0, max_position=4096),
    "micro": ModelConfig("micro", vocab_size=256, hidden_size=64, intermediate_size=128,
                         num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                         rope_theta=10000.0, max_position=1024, group_size=32),
}


def get_config(name: str) -> ModelConfig:
    try:
        return CONFIGS[name]
    except KeyError:
        raise ValueError(f"model={name!r} unknown, expected one of {sorted(CONFIGS)}") from None
