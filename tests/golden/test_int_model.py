"""The integer model: chunking-invariant, bit-reproducible, and close to the float path."""
import torch
from hypothesis import given, settings, strategies as st

from mcf_fpga.golden.accuracy import compare
from mcf_fpga.golden.config import get_config
from mcf_fpga.golden.int_model import IntModel, quantize_model
from mcf_fpga.golden.model import random_weights

CFG = get_config("micro")
W = random_weights(CFG, seed=11)


@settings(max_examples=8)
@given(st.integers(1, 4), st.integers(0, 2 ** 31), st.sampled_from([8, 4]))
def test_chunked_prefill_is_bit_identical(chunk_blocks, seed, kv_bits):
    qm = quantize_model(W, kv_bits=kv_bits, block=8)
    m = IntModel(qm)
    prompt = torch.randint(0, CFG.vocab_size, (40,), generator=torch.Generator().manual_seed(seed))
    whole = m.forward(prompt, m.new_cache())
    cache = m.new_cache()
    chunk = 8 * chunk_blocks
    parts = [m.forward(prompt[i:i + chunk], cache, decode=False) for i in range(0, 40, chunk)]
    assert torch.equal(torch.cat(parts), whole)


def test_bit_reproducible_across_runs():
    p = torch.randint(0, CFG.vocab_size, (24,), generator=torch.Generator().manual_seed(1))
    a = IntModel(quantize_model(W)).generate(p, 6)
    b = IntModel(quantize_model(random_weights(CFG, seed=11))).generate(p, 6)
    assert a == b
    la = IntModel(quantize_model(W)).forward(p)
    lb = IntModel(quantize_model(W)).forward(p)
    assert torch.equal(la, lb) and la.dtype == torch.int64


def test_integer_pipeline_tracks_w4_float():
    """The integer pipeline's own error (vs the float model with the same INT4 weights) is small;
    the weight quantisation is the dominant loss (measured separately in the report)."""
    p = torch.randint(0, CFG.vocab_size, (32,), generator=torch.Generator().manual_seed(2))
    a = compare(W, p, max_new_tokens=0)
    assert a.int_vs_w4_logits_cos > 0.98, a
    assert a.logits_cos_mean > 0.85, a
    assert all(c > 0.9 for c in a.hidden_cos), a


def test_decode_uses_flat_merge_and_matches_prefill_closely():
    m = IntModel(quantize_model(W, block=8))
    p = torch.randint(0, CFG.vocab_size, (17,), generator=torch.Generator().manual_seed(4))
    full = m.forward(p)
    cache = m.new_cache()
    m.forward(p[:-1], cache)
    step = m.forward(p[-1:], cache)                       # decode step: flat merge
    assert (step[-1] - full[-1]).abs().max() <= (full[-1].abs().max() // 50 + 64)


def test_regroup_is_bit_identical():
    """A model quantised with group 128 runs on a GEMM with group 32 (``QuantModel.regroup``):
    logits and generated tokens equal bit for bit; the scales really are repeated per sub-group."""
    import pytest
    from mcf_fpga.golden.config import ModelConfig
    cfg = ModelConfig("g128", vocab_size=256, hidden_size=256, intermediate_size=256, num_layers=1,
                      num_heads=8, num_kv_heads=2, head_dim=32, rope_theta=10000.0, max_position=64)
    qm = quantize_model(random_weights(cfg, seed=4))
    rq = qm.regroup(32)
    assert rq.layers[0].q.group == 32 and rq.config.group_size == 32
    assert rq.layers[0].q.ws.shape[1] == 4 * qm.layers[0].q.ws.shape[1]
    assert torch.equal(rq.layers[0].down.ws[:, 4:8], qm.layers[0].down.ws[:, 1:2].expand(-1, 4))
    assert torch.equal(rq.head.dequant(), qm.head.dequant())
    prompt = torch.randint(0, 256, (20,), generator=torch.Generator().manual_seed(1))
    a, b = IntModel(qm), IntModel(rq)
    assert torch.equal(a.forward(prompt), b.forward(prompt))
    assert torch.equal(a.embed(prompt), b.embed(prompt))
    assert a.generate(prompt, 4) == b.generate(prompt, 4)
    assert qm.regroup(128) is qm
    with pytest.raises(ValueError, match="weight group 48 does not divide the model's group_size=128"):
        qm.regroup(48)
