"""A small valid Hugging Face-format checkpoint (config.json + model.safetensors) and the ways
to corrupt it, for the CLI tests (``test_cli_errors``, ``test_cli_fuzz``)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from mcf_fpga.golden.config import ModelConfig
from mcf_fpga.golden.model import random_weights, save_hf

# the smallest shape mcf accuracy loads (W4 group 128 divides hidden, intermediate and q_dim)
CKPT_CFG = ModelConfig("ckpt", vocab_size=256, hidden_size=128, intermediate_size=256, num_layers=2,
                       num_heads=2, num_kv_heads=1, head_dim=64, rope_theta=10000.0, max_position=256)


def write_checkpoint(path) -> Path:
    return save_hf(random_weights(CKPT_CFG, seed=3), path)


def copy_checkpoint(src, dst) -> Path:
    shutil.copytree(src, dst)
    return Path(dst)


def tensors(path) -> dict:
    from safetensors.torch import load_file
    return load_file(str(Path(path) / "model.safetensors"))


def save_tensors(path, t: dict, name="model.safetensors"):
    from safetensors.torch import save_file
    save_file({k: v.contiguous() for k, v in t.items()}, str(Path(path) / name))


def edit_config(path, **changes):
    p = Path(path) / "config.json"
    d = json.loads(p.read_text())
    for k, v in changes.items():
        if v is _DROP:
            d.pop(k, None)
        else:
            d[k] = v
    p.write_text(json.dumps(d))


_DROP = object()
DROP = _DROP


# name -> (corrupt(path), the text the error must name)
def _truncate(p):
    f = Path(p) / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])


def _garbage(p):
    (Path(p) / "model.safetensors").write_bytes(b"\x07" * 64 + b"not a safetensors file")


def _drop_tensor(p):
    t = tensors(p)
    del t["model.layers.1.mlp.up_proj.weight"]
    save_tensors(p, t)


def _extra_layer(p):
    t = tensors(p)
    for k in [k for k in t if k.startswith("model.layers.1.")]:
        t[k.replace("layers.1.", "layers.2.")] = t[k].clone()
    save_tensors(p, t)


def _adding(name):
    """A corruption that adds tensor ``name`` (32 ones) to the checkpoint."""
    def corrupt(p):
        t = tensors(p)
        t[name] = torch.ones(32)
        save_tensors(p, t)
    return corrupt


def _duplicate(p):
    t = tensors(p)
    save_tensors(p, {"model.norm.weight": t["model.norm.weight"]}, name="model-00002.safetensors")


def _nan(p):
    t = tensors(p)
    t["model.layers.0.self_attn.k_proj.weight"][3, 5] = float("nan")
    save_tensors(p, t)


def _inf(p):
    t = tensors(p)
    t["model.norm.weight"][0] = float("inf")
    save_tensors(p, t)


def _misshape(p):
    t = tensors(p)
    t["model.embed_tokens.weight"] = t["model.embed_tokens.weight"][:-1]
    save_tensors(p, t)


def _int_dtype(p):
    t = tensors(p)
    t["model.norm.weight"] = t["model.norm.weight"].to(torch.int32)
    save_tensors(p, t)


def _no_weights(p):
    (Path(p) / "model.safetensors").unlink()


CORRUPTIONS = {
    "truncated": (_truncate, "model.safetensors is not a readable safetensors file"),
    "garbage": (_garbage, "model.safetensors is not a readable safetensors file"),
    "missing tensor": (_drop_tensor, "model.layers.1.mlp.up_proj.weight"),
    "more layers than config": (_extra_layer, "model.layers.2."),
    "extra tensor": (_adding("model.layers.0.mlp.extra_proj.weight"), "mlp.extra_proj.weight"),
    "RoPE inv_freq unlike config": (_adding("model.layers.0.self_attn.rotary_emb.inv_freq"), "rotary_emb.inv_freq"),
    "duplicate tensor": (_duplicate, "model.norm.weight in model-00002.safetensors, model.safetensors"),
    "nan weight": (_nan, "'model.layers.0.self_attn.k_proj.weight' (model.safetensors) holds 1 non-finite"),
    "inf weight": (_inf, "'model.norm.weight' (model.safetensors) holds 1 non-finite"),
    "misshaped": (_misshape, "'model.embed_tokens.weight' has shape [255, 128], expected [256, 128]"),
    "integer dtype": (_int_dtype, "'model.norm.weight' has dtype I32"),
    "no safetensors": (_no_weights, "no *.safetensors files"),
    "zero heads": (lambda p: edit_config(p, num_attention_heads=0), "num_attention_heads=0"),
    "negative layers": (lambda p: edit_config(p, num_hidden_layers=-1), "num_hidden_layers=-1"),
    "fewer layers in config": (lambda p: edit_config(p, num_hidden_layers=1), "model.layers.1."),
    "missing vocab": (lambda p: edit_config(p, vocab_size=DROP), "missing field 'vocab_size'"),
    "bool hidden": (lambda p: edit_config(p, hidden_size=True), "hidden_size=True"),
    "string heads": (lambda p: edit_config(p, num_attention_heads="2"), "num_attention_heads='2'"),
    "kv heads do not divide": (lambda p: edit_config(p, num_key_value_heads=3, num_attention_heads=2),
                               "num_key_value_heads=3"),
    "nan theta": (lambda p: edit_config(p, rope_theta=float("nan")), "rope_theta=nan"),
    "huge eps": (lambda p: edit_config(p, rms_norm_eps=1e12), "rms_norm_eps=1000000000000.0, expected a number "
                                                              "in (0, 256)"),
    "config list": (lambda p: (Path(p) / "config.json").write_text("[]"), "expected a JSON object"),
    "config garbage": (lambda p: (Path(p) / "config.json").write_bytes(b"\xff\xfe{"), "config.json"),
    "no config": (lambda p: (Path(p) / "config.json").unlink(), "no config.json"),
    "llama architecture": (lambda p: edit_config(p, model_type="llama", architectures=["LlamaForCausalLM"]),
                           "model_type='llama', expected 'qwen2'"),
    "no model_type": (lambda p: edit_config(p, model_type=DROP), "missing field 'model_type'"),
    "classifier head": (lambda p: edit_config(p, architectures=["Qwen2ForSequenceClassification"]),
                        "architectures=['Qwen2ForSequenceClassification'], expected ['Qwen2ForCausalLM']"),
    "gelu activation": (lambda p: edit_config(p, hidden_act="gelu"), "hidden_act='gelu'"),
    "sliding window": (lambda p: edit_config(p, use_sliding_window=True), "use_sliding_window=True"),
}


# ---------------------------------------------------------------- written by transformers

#: A Qwen2 checkpoint small enough for the simulated node (``host.executors.rtl.SIM_ENGINE``:
#: head_dim 16, GEMM inputs and vector rows <= 128) with dimensions that are multiples of the
#: INT4 group of 128 a checkpoint is quantised with (``mcf accuracy``, ``mcf run --checkpoint``).
HF_TINY = dict(vocab_size=256, hidden_size=128, intermediate_size=128, num_hidden_layers=1,
               num_attention_heads=8, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
               rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False)


def write_transformers_checkpoint(path, seed: int = 5, **overrides):
    """``transformers.Qwen2ForCausalLM`` of ``HF_TINY`` (with ``overrides``), random weights from
    ``seed`` (initializer_range 0.2, so the greedy choices are not near-ties), saved by
    ``save_pretrained`` as safetensors; returns (the model in eval mode, the directory)."""
    import transformers
    torch.manual_seed(seed)
    cfg = transformers.Qwen2Config(**dict(HF_TINY, initializer_range=0.2, **overrides))
    model = transformers.Qwen2ForCausalLM(cfg).to(torch.float32).eval()
    model.save_pretrained(str(path), safe_serialization=True)
    return model, Path(path)
