"""The float model equals transformers' Qwen2ForCausalLM (same weights, fp32) within 1e-4,
for prefill and 8 cached decode steps; checkpoints round-trip; bad checkpoints are refused."""
import json

import pytest
import torch

from golden.config import get_config
from golden.model import FloatModel, load_hf, random_weights, save_hf

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
