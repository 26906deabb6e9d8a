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

NAME = "accuracy"
HELP = "compare the float model with the integer arithmetic the hardware performs"


def add_arguments(p):
    p.add_argument("--model", default="tiny",
                   help="model shape: tiny, micro, qwen2.5-0.5b, qwen2.5-1.5b (default: tiny)")
    p.add_argument("--checkpoint", metavar="DIR",
                   help="Hugging Face-format directory (config.json + *.safetensors) instead of random weights")
    p.add_argument("--layers", type=int, help="use only the first N decoder layers")
    p.add_argument("--seed", type=int, default=0, help="seed for random weights and prompt (default 0)")
    p.add_argument("--prompt-len", type=int, default=128, help="prompt length in tokens (default 128)")
    p.add_argument("--prompt-tokens", metavar="FILE",
                   help="token ids, whitespace- or JSON-separated, instead of a random prompt")
    p.add_argument("--max-new-tokens", type=int, default=8, help="tokens to generate greedily (default 8)")
    p.add_argument("--kv-bits", type=int, default=8, choices=(4, 8), help="KV-cache integer width")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def _read_tokens(path) -> list[int]:
    text = open(path).read().strip()
    try:
        toks = json.loads(text) if text.startswith("[") else [int(t) for t in text.split()]
    except ValueError as exc:
        raise ValueError(f"--prompt-tokens {path}: not a list of integers ({exc})") from None
    if not toks or not all(isinstance(t, int) for t in toks):
        raise ValueError(f"--prompt-tokens {path}: expected a non-empty list of integer token ids")
    return toks


def run(args) -> int:
    import torch

    from golden.accuracy import compare
    from golden.config import get_config
    from golden.model import load_hf, random_weights

    if args.prompt_len <= 0:
        raise ValueError(f"--prompt-len={args.prompt_len} must be > 0")
    if args.max_new_tokens < 0:
        raise ValueError(f"--max-new-tokens={args.max_new_tokens} must be >= 0")
    t0 = time.time()
    if args.checkpoint:
        w = load_hf(args.checkpoint)
    else:
        cfg = get_config(args.model)
        if args.layers:
            cfg = cfg.replace(num_layers=args.layers)
        w = random_weights(cfg, args.seed)
    if args.layers and args.checkpoint:
        w.layers = w.layers[:args.layers]
        w.config = w.config.replace(num_layers=len(w.layers))
    cfg = w.config
    if args.prompt_tokens:
        prompt = _read_tokens(args.prompt_tokens)
        bad = [t for t in prompt if not 0 <= t < cfg.vocab_size]
        if bad:
            raise ValueError(f"--prompt-tokens: token id {bad[0]} outside [0, {cfg.vocab_size})")
    else:
        g = torch.Generator().manual_seed(args.seed + 1)
        prompt = torch.randint(0, cfg.vocab_size, (args.prompt_len,), generator=g).tolist()
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
