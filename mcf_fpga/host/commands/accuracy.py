"""``mcf accuracy``: the float-vs-integer golden comparison.

A small Qwen2-shaped model (random weights from --seed, or --checkpoint DIR) runs one
prompt through the float path and the integer path the hardware implements,
and prints how closely they agree (cosine similarity of logits and hidden
states, top-1 agreement, greedy generations of both).
"""
from __future__ import annotations

import json
import sys
import time

from mcf_fpga.host.errors import int_in, nonneg_int, positive_int
from mcf_fpga.host.model_source import MAX_SEED, model_source, weights_and_prompt

NAME = "accuracy"
HELP = "compare the float model with the integer arithmetic the hardware performs"


def add_arguments(p):
    p.add_argument("--model",
                   help="model shape: tiny, micro, qwen2.5-0.5b, qwen2.5-1.5b (default: tiny; with "
                        "--checkpoint the checkpoint's config.json gives it)")
    p.add_argument("--checkpoint", metavar="DIR",
                   help="Hugging Face-format directory (config.json + *.safetensors) instead of random "
                        "weights; its tensors must be exactly those its config.json implies")
    p.add_argument("--layers", type=positive_int,
                   help="use only the first N decoder layers (1..the model's num_layers)")
    p.add_argument("--seed", type=int_in(0, MAX_SEED), default=0,
                   help="seed for random weights and prompt (default 0)")
    p.add_argument("--prompt-len", type=positive_int, default=128,
                   help="prompt length in tokens (default 128); prompt + new tokens at most the "
                        "model's max_position")
    p.add_argument("--prompt-tokens", metavar="FILE",
                   help="token ids in [0, vocab), whitespace-separated or a JSON list of integers, "
                        "instead of a random prompt")
    p.add_argument("--max-new-tokens", type=nonneg_int, default=8,
                   help="tokens to generate greedily, >= 0 (default 8)")
    p.add_argument("--kv-bits", type=int, default=8, choices=(4, 8), help="KV-cache integer width")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def run(args) -> int:
    from mcf_fpga.golden.accuracy import compare

    t0 = time.time()
    # the config first (a checkpoint's config.json only): every limit is checked before weights
    # are read or generated
    cfg, prompt, _source = model_source(args, default_model="tiny")
    w, cfg, prompt = weights_and_prompt(args, cfg, prompt, float_prefill=True)
    if not args.json:
        print(f"[mcf accuracy] model {cfg.name}: {cfg.num_layers} layers, hidden {cfg.hidden_size}, "
              f"heads {cfg.num_heads}/{cfg.num_kv_heads} (q/kv), head_dim {cfg.head_dim}; "
              f"prompt {len(prompt)} tokens; W4 g{cfg.group_size}, A8, KV{args.kv_bits}", file=sys.stderr)
    a = compare(w, prompt, args.max_new_tokens, kv_bits=args.kv_bits)
    out = a.as_dict()
    out.update(prompt=prompt, tokens=a.int_tokens, backend="golden", seconds=round(time.time() - t0, 2))
    if args.json:
        print(json.dumps(out))
        return 0
    print("golden demo: float path vs integer path (the arithmetic the hardware performs)")
    print(f"  logits cosine similarity   mean {a.logits_cos_mean:.4f}  min {a.logits_cos_min:.4f}")
    print(f"  logits max |error|         {a.logits_max_abs_err:.4f}")
    print(f"  hidden-state cosine/layer  " + " ".join(f"{c:.4f}" for c in a.hidden_cos))
    print(f"  top-1 agreement (prompt)   {a.top1_agreement * 100:.1f}%")
    print(f"  of which: float vs W4 fake-quant cos {a.w4_logits_cos_mean:.4f}; "
          f"integer vs W4 fake-quant cos {a.int_vs_w4_logits_cos:.4f}")
    print(f"  float generates   {a.float_tokens}")
    print(f"  integer generates {a.int_tokens}")
    print(f"  generated-token agreement {a.token_agreement * 100:.1f}%   ({out['seconds']} s)")
    return 0
