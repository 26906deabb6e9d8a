#!/usr/bin/env python3
"""Integer path vs float path, side by side, on the Qwen2.5-0.5B shape and a tiny shape.

Random weights (seeded), a random prompt; reports cosine similarity and max error of hidden
states and logits, top-1 agreement, and the split of the loss between INT4 weight quantisation
(float vs W4 fake-quant float) and the integer pipeline (integer vs W4 fake-quant float).
The last line prints the 0.5B-shape logits cosine similarity.

Usage: scripts/bench_numerics.py [--layers 2] [--prompt-len 128] [--seed 0]
"""
import argparse
import sys
import time


import torch  # noqa: E402

from mcf_fpga.golden.accuracy import compare  # noqa: E402
from mcf_fpga.golden.config import get_config  # noqa: E402
from mcf_fpga.golden.model import random_weights  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=2, help="decoder layers of the 0.5B shape (2-4)")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--new-tokens", type=int, default=4)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    rows = []
    for name, layers in (("tiny", None), ("qwen2.5-0.5b", args.layers)):
        cfg = get_config(name)
        if layers:
            cfg = cfg.replace(num_layers=layers)
        t0 = time.time()
        print(f"[bench_numerics] {name}: {cfg.num_layers} layers, hidden {cfg.hidden_size}, vocab "
              f"{cfg.vocab_size}, prompt {args.prompt_len} ...", file=sys.stderr, flush=True)
        w = random_weights(cfg, args.seed)
        prompt = torch.randint(0, cfg.vocab_size, (args.prompt_len,),
                               generator=torch.Generator().manual_seed(args.seed + 1))
        a = compare(w, prompt, max_new_tokens=args.new_tokens)
        rows.append((f"{name} ({cfg.num_layers}L)", a, time.time() - t0))
    print(f"{'shape':<22}{'logit cos':>10}{'min':>8}{'max|err|':>10}{'top-1':>8}"
          f"{'W4 cos':>9}{'int/W4':>9}{'gen agree':>10}{'s':>7}")
    for label, a, s in rows:
        print(f"{label:<22}{a.logits_cos_mean:>10.4f}{a.logits_cos_min:>8.4f}{a.logits_max_abs_err:>10.3f}"
              f"{a.top1_agreement * 100:>7.1f}%{a.w4_logits_cos_mean:>9.4f}{a.int_vs_w4_logits_cos:>9.4f}"
              f"{a.token_agreement * 100:>9.0f}%{s:>7.1f}")
        print(f"{'':<22}hidden-state cos per layer: " + " ".join(f"{c:.4f}" for c in a.hidden_cos))
    print(f"qwen2.5-0.5b shape ({args.layers} layers) logits cosine similarity int vs float: "
          f"{rows[-1][1].logits_cos_mean:.4f}")


if __name__ == "__main__":
    main()
