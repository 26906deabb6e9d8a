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

__all__ = ["ModelConfig", "CONFIGS", "get_config", "RMS_NORM_EPS_MAX", "HF_MODEL_TYPE", "HF_ARCHITECTURE"]

#: The integer RMSNorm adds eps as EPS_Q = round(eps * 2**(2*FA)) (golden.numerics, FA = 12), and
#: the engine's instruction carries it in a 32-bit field (``eps_q``, mcf_fpga/hdl/compute/engine.py INSTR):
#: eps must stay below 2**32 / 2**24.
RMS_NORM_EPS_MAX = 2.0 ** (32 - 2 * 12)

#: The Hugging Face architecture a checkpoint's config.json must name (``model_type`` and, when
#: given, every entry of ``architectures``): the Qwen2 causal decoder mcf_fpga/golden/model.py implements.
HF_MODEL_TYPE = "qwen2"
HF_ARCHITECTURE = "Qwen2ForCausalLM"


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
            v = getattr(self, f)
            need(isinstance(v, int) and not isinstance(v, bool) and v > 0, f, v,
                 "a positive integer")
        need(self.num_heads % self.num_kv_heads == 0, "num_heads", self.num_heads,
             f"a multiple of num_kv_heads={self.num_kv_heads}")
        need(self.head_dim % 2 == 0, "head_dim", self.head_dim, "an even number (RoPE rotates pairs)")
        need(0 < self.rope_theta < float("inf"), "rope_theta", self.rope_theta, "a finite number > 0")
        need(0 < self.rms_norm_eps < RMS_NORM_EPS_MAX, "rms_norm_eps", self.rms_norm_eps,
             f"a number in (0, {RMS_NORM_EPS_MAX:g}) (the engine's 32-bit eps_q field)")
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
    # config.json field -> ModelConfig field (errors name the config.json field)
    HF_FIELDS = {"vocab_size": "vocab_size", "hidden_size": "hidden_size",
                 "intermediate_size": "intermediate_size", "num_hidden_layers": "num_layers",
                 "num_attention_heads": "num_heads", "num_key_value_heads": "num_kv_heads",
                 "head_dim": "head_dim", "max_position_embeddings": "max_position",
                 "rope_theta": "rope_theta", "rms_norm_eps": "rms_norm_eps"}

    @classmethod
    def from_hf_dict(cls, d: dict, name: str = "checkpoint", group_size: int = 128) -> "ModelConfig":
        """The config of a Hugging Face ``config.json`` dict. Raises ValueError ``config.json: ...``
        naming the field when one is missing, of the wrong type, not positive or inconsistent, and
        when the architecture is not Qwen2 (``model_type`` not ``HF_MODEL_TYPE``, or an
        ``architectures`` entry not ``HF_ARCHITECTURE``) or uses what golden does not implement
        (``hidden_act`` other than silu, ``use_sliding_window``)."""
        if not isinstance(d, dict):
            raise ValueError(f"config.json: expected a JSON object, got {type(d).__name__}")

        def fail(key, value, expected):
            shown = repr(value)
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            raise ValueError(f"config.json: {key}={shown}, expected {expected}")

        # the architecture first: a checkpoint of another family is refused by what it is, not by
        # the first field that happens to differ
        if "model_type" not in d:
            raise ValueError(f"config.json: missing field 'model_type', expected {HF_MODEL_TYPE!r}")
        if d["model_type"] != HF_MODEL_TYPE:
            fail("model_type", d["model_type"], f"{HF_MODEL_TYPE!r} (a Qwen2-family decoder; other "
                 f"architectures are not supported)")
        arch = d.get("architectures")
        if arch is not None and (not isinstance(arch, list) or not arch
                                 or any(a != HF_ARCHITECTURE for a in arch)):
            fail("architectures", arch, f"[{HF_ARCHITECTURE!r}] (a causal LM; other heads are not supported)")
        if d.get("hidden_act", "silu") != "silu":
            fail("hidden_act", d["hidden_act"], "'silu' (the SwiGLU MLP golden and the hardware compute)")
        if d.get("use_sliding_window", False) not in (False, None):
            fail("use_sliding_window", d["use_sliding_window"], "false (sliding-window attention is not "
                 "supported)")

        def get_int(key, default=None):
            if key not in d or (d[key] is None and default is not None):
                if default is None:
                    raise ValueError(f"config.json: missing field {key!r}")
                return default
            v = d[key]
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                fail(key, v, "a positive integer")
            return v

        def get_num(key, value):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                    0 < value < float("inf")):
                fail(key, value, "a positive finite number")
            return float(value)

        vocab = get_int("vocab_size")
        hidden = get_int("hidden_size")
        inter = get_int("intermediate_size")
        layers = get_int("num_hidden_layers")
        heads = get_int("num_attention_heads")
        kv_heads = get_int("num_key_value_heads", default=heads)
        if "head_dim" in d and d["head_dim"] is not None:
            head_dim = get_int("head_dim")
        else:
            if hidden % heads:
                fail("hidden_size", hidden, f"a multiple of num_attention_heads={heads} (no head_dim given)")
            head_dim = hidden // heads
        if heads % kv_heads:
            fail("num_attention_heads", heads, f"a multiple of num_key_value_heads={kv_heads}")
        max_pos = get_int("max_position_embeddings", default=32768)
        rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
        if not isinstance(rope, dict):
            fail("rope_scaling", rope, "an object")
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type not in ("default", None):
            raise ValueError(f"config.json: rope_type={rope_type!r} not supported, expected 'default'")
        theta = get_num("rope_theta", d.get("rope_theta", rope.get("rope_theta", 10000.0)))
        eps = get_num("rms_norm_eps", d.get("rms_norm_eps", 1e-6))
        tie = d.get("tie_word_embeddings", False)
        if not isinstance(tie, bool):
            fail("tie_word_embeddings", tie, "true or false")
        try:
            return cls(name=name, vocab_size=vocab, hidden_size=hidden, intermediate_size=inter,
                       num_layers=layers, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
                       rope_theta=theta, rms_norm_eps=eps, max_position=max_pos,
                       tie_word_embeddings=tie, group_size=group_size)
        except ValueError as exc:       # a consistency rule of ModelConfig: name the json field
            msg = str(exc).split(": ", 1)[-1]
            if msg.startswith("group_size="):
                msg = "the INT4 weight group " + msg
            for hf, ours in cls.HF_FIELDS.items():
                if msg.startswith(f"{ours}="):
                    msg = hf + msg[len(ours):]
                    break
            raise ValueError(f"config.json: {msg}") from None

    def to_hf_dict(self) -> dict:
        return {
            "architectures": [HF_ARCHITECTURE], "model_type": HF_MODEL_TYPE,
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
        """The config of checkpoint directory ``path`` (its config.json); ValueError
        ``checkpoint PATH: ...`` naming the file and the field otherwise."""
        p = Path(path) / "config.json"
        if not Path(path).is_dir():
            raise ValueError(f"checkpoint {path}: not a directory")
        if not p.is_file():
            raise ValueError(f"checkpoint {path}: no config.json")
        try:
            if p.stat().st_size > (16 << 20):
                raise ValueError(f"config.json: {p.stat().st_size} bytes, not a model config")
            d = json.loads(p.read_bytes().decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ValueError(f"checkpoint {path}: config.json is not UTF-8 ({exc.reason})") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"checkpoint {path}: config.json is not valid JSON ({exc})") from None
        except RecursionError:
            raise ValueError(f"checkpoint {path}: config.json nests too deeply") from None
        except OSError as exc:
            raise ValueError(f"checkpoint {path}: cannot read config.json ({exc.strerror or exc})") from None
        except ValueError as exc:
            raise ValueError(f"checkpoint {path}: {exc}") from None
        try:
            return cls.from_hf_dict(d, name=Path(path).name or "checkpoint", group_size=group_size)
        except ValueError as exc:
            raise ValueError(f"checkpoint {path}: {exc}") from None

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
