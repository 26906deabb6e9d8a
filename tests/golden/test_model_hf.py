"""The float model equals transformers' Qwen2ForCausalLM (same weights, fp32) within 1e-4,
for prefill and 8 cached decode steps; checkpoints round-trip; bad checkpoints are refused."""
import json

import pytest
import torch

from mcf_fpga.golden.config import get_config
from mcf_fpga.golden.model import FloatModel, load_hf, random_weights, save_hf

import transformers  # test extra: a hard dependency of the suite


@pytest.fixture(scope="module", params=["micro", "tiny"])
def checkpoint(request, tmp_path_factory):
    cfg = get_config(request.param)
    w = random_weights(cfg, seed=7)
    path = save_hf(w, tmp_path_factory.mktemp(request.param))
    return w, path


def test_checkpoint_round_trip(checkpoint):
    w, path = checkpoint
    w2 = load_hf(path, group_size=w.config.group_size)
    assert w2.config.hidden_size == w.config.hidden_size
    assert torch.equal(w2.embed, w.embed)
    for a, b in zip(w.layers, w2.layers):
        assert torch.equal(a.k_b, b.k_b) and torch.equal(a.down_w, b.down_w)


def test_matches_transformers_prefill_and_decode(checkpoint):
    w, path = checkpoint
    ours = FloatModel(load_hf(path, group_size=w.config.group_size))
    hf = transformers.Qwen2ForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    hf.eval()
    prompt = torch.randint(0, w.config.vocab_size, (37,), generator=torch.Generator().manual_seed(3))
    cache = ours.new_cache()
    with torch.no_grad():
        mine = ours.forward(prompt, cache)
        out = hf(input_ids=prompt[None], use_cache=True)
        assert (mine - out.logits[0]).abs().max().item() < 1e-4
        past = out.past_key_values
        tok = int(mine[-1].argmax())
        for step in range(8):
            mine = ours.forward([tok], cache)
            out = hf(input_ids=torch.tensor([[tok]]), past_key_values=past, use_cache=True)
            past = out.past_key_values
            err = (mine - out.logits[0]).abs().max().item()
            assert err < 1e-4, f"decode step {step}: max |logit error| {err}"
            tok = int(mine[-1].argmax())


def test_missing_tensor_is_named(checkpoint, tmp_path):
    from safetensors.torch import load_file, save_file
    w, path = checkpoint
    tensors = load_file(str(path / "model.safetensors"))
    del tensors["model.layers.1.self_attn.k_proj.bias"]
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text((path / "config.json").read_text())
    with pytest.raises(ValueError, match=r"model\.layers\.1\.self_attn\.k_proj\.bias"):
        load_hf(tmp_path, group_size=w.config.group_size)


def test_misshaped_tensor_is_named(checkpoint, tmp_path):
    from safetensors.torch import load_file, save_file
    w, path = checkpoint
    tensors = load_file(str(path / "model.safetensors"))
    tensors["model.norm.weight"] = tensors["model.norm.weight"][:-1].contiguous()
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text((path / "config.json").read_text())
    with pytest.raises(ValueError, match=r"model\.norm\.weight.*expected \[%d\]" % w.config.hidden_size):
        load_hf(tmp_path, group_size=w.config.group_size)


def test_bad_config_json(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 64}))
    with pytest.raises(ValueError, match="config.json: missing field"):
        load_hf(tmp_path)


def _add_tensors(path, extra: dict):
    from safetensors.torch import load_file, save_file
    f = path / "model.safetensors"
    t = load_file(str(f))
    t.update(extra)
    save_file({k: v.contiguous() for k, v in t.items()}, str(f))


def _inv_freq(cfg):  # stated independently of golden.model.rope_inv_freq
    return 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float32) / cfg.head_dim))


def test_redundant_tensors_that_agree_load(tmp_path):
    """Old transformers' RoPE inv_freq buffers and a tied model's lm_head.weight are accepted when
    they equal what config.json implies, and change nothing."""
    cfg = get_config("micro")
    assert cfg.tie_word_embeddings
    w = random_weights(cfg, seed=5)
    path = save_hf(w, tmp_path / "ck")
    _add_tensors(path, {"lm_head.weight": w.embed.clone(),
                        **{f"model.layers.{i}.self_attn.rotary_emb.inv_freq": _inv_freq(cfg)
                           for i in range(cfg.num_layers)}})
    w2 = load_hf(path, group_size=cfg.group_size)
    assert torch.equal(w2.embed, w.embed) and w2.lm_head is None


@pytest.mark.parametrize("name", ["lm_head.weight", "model.layers.0.self_attn.rotary_emb.inv_freq"])
def test_redundant_tensors_that_disagree_are_refused(tmp_path, name):
    cfg = get_config("micro")
    w = random_weights(cfg, seed=5)
    path = save_hf(w, tmp_path / "ck")
    bad = w.embed + 0.5 if name == "lm_head.weight" else _inv_freq(cfg) * 2
    _add_tensors(path, {name: bad})
    with pytest.raises(ValueError, match=name.replace(".", r"\.")):
        load_hf(path, group_size=cfg.group_size)
