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

from mcf_fpga.host.commands.run import MAX_SEED, check_lengths, model_config
from mcf_fpga.host.errors import UsageError, int_in, nonneg_int, positive_int, read_text

NAME = "accuracy"
HELP = "compare the float model with the integer arithmetic the hardware performs"


def add_arguments(p):
    p.add_argument("--model", default="tiny",
                   help="model shape: tiny, micro, qwen2.5-0.5b, qwen2.5-1.5b (default: tiny)")
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


def _read_tokens(path, vocab_size: int) -> list[int]:
    """Token ids from ``path``: whitespace-separated integers or a JSON list of integers (not
    booleans, not floats), each in ``[0, vocab_size)``; a UsageError naming the file otherwise."""
    what = f"--prompt-tokens {path}"
    text = read_text(path, "--prompt-tokens").strip()
    if text[:1] in ("[", "{"):
        try:
            toks = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise UsageError(f"{what}: not valid JSON ({str(exc).splitlines()[0][:100]})") from None
        if not isinstance(toks, list):
            raise UsageError(f"{what}: expected a JSON list of integer token ids")
        bad = [t for t in toks if isinstance(t, bool) or not isinstance(t, int)]
        if bad:
            raise UsageError(f"{what}: token {json.dumps(bad[0])[:40]} is not an integer token id")
    else:
        toks = []
        for word in text.split():
            try:
                toks.append(int(word, 10))
            except ValueError:
                raise UsageError(f"{what}: {word[:40]!r} is not an integer token id") from None
    if not toks:
        raise UsageError(f"{what}: expected a non-empty list of integer token ids")
    bad = [t for t in toks if not 0 <= t < vocab_size]
    if bad:
        raise UsageError(f"{what}: token id {bad[0]} outside [0, {vocab_size})")
    return toks


def _check_memory(tokens: int):
    """The float prefill builds a causal mask of tokens x tokens bytes (and the attention scores
    on top): refuse a length whose mask alone exceeds this machine's memory, before allocating."""
    import os
    try:
        ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return
    need = tokens * tokens
    if need > ram:
        raise UsageError(f"--prompt-len + --max-new-tokens = {tokens} tokens: the float model's causal mask "
                         f"alone needs {need / 2 ** 30:.0f} GiB, this machine has {ram / 2 ** 30:.0f} GiB")


def run(args) -> int:
    import torch

    from mcf_fpga.golden.accuracy import compare
    from mcf_fpga.golden.config import ModelConfig
    from mcf_fpga.golden.model import load_hf, random_weights

    t0 = time.time()
    # the config first (a checkpoint's config.json only): every limit is checked before weights
    # are read or generated
    cfg = ModelConfig.from_hf_dir(args.checkpoint) if args.checkpoint else model_config(args.model)
    prompt = None
    if args.prompt_tokens:
        prompt = _read_tokens(args.prompt_tokens, cfg.vocab_size)
        args.prompt_len = len(prompt)
    cfg = check_lengths(cfg, args, f"checkpoint {args.checkpoint}" if args.checkpoint else None)
    _check_memory(args.prompt_len + args.max_new_tokens)
    if args.checkpoint:
        w = load_hf(args.checkpoint)
        if args.layers:
            w.layers = w.layers[:args.layers]
            w.config = w.config.replace(num_layers=len(w.layers))
    else:
        w = random_weights(cfg, args.seed)
    cfg = w.config
    if prompt is None:
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
