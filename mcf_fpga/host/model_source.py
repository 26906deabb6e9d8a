"""Where a command's model and prompt come from: ``--model NAME`` (random weights from ``--seed``)
or ``--checkpoint DIR`` (a Hugging Face Qwen2 directory, ``golden.model.load_hf``), and
``--prompt-tokens FILE`` or a random prompt from ``--seed``.

``mcf run`` and ``mcf accuracy`` read both the same way: the config first (``--model``'s, or the
checkpoint's config.json only), then the prompt file, then every length against the config,
all before a weight is read or generated; errors are ``UsageError``/``ValueError`` lines naming
the option, file or field and the limit.
"""
from __future__ import annotations

import json

from mcf_fpga.host.errors import UsageError, read_text

__all__ = ["MAX_SEED", "model_config", "check_lengths", "read_tokens", "check_float_memory", "weights_and_prompt",
           "model_source", "load_weights", "prompt_of"]

MAX_SEED = 2 ** 63 - 2      # torch.Generator.manual_seed takes < 2**63 (and the prompt uses seed + 1)


def model_config(name):
    """``--model``'s config, or a UsageError naming the option and the known models."""
    from mcf_fpga.golden.config import CONFIGS
    if name not in CONFIGS:
        raise UsageError(f"--model={name!r} unknown, expected one of {', '.join(sorted(CONFIGS))}")
    return CONFIGS[name]


def check_lengths(cfg, args, source: str | None = None):
    """``--layers``, ``--prompt-len``/``--max-new-tokens`` (and ``--chunk``/``--block`` when the
    command has them) against the model ``cfg``, before anything is allocated; returns the config
    cut to ``--layers``. ``source`` names where the model comes from in messages (default
    ``model <name>``)."""
    source = source or f"model {cfg.name}"
    if args.layers is not None:
        if not 1 <= args.layers <= cfg.num_layers:
            raise UsageError(f"--layers={args.layers} must be in 1..{cfg.num_layers} ({source} "
                             f"has {cfg.num_layers} layers)")
        cfg = cfg.replace(num_layers=args.layers)
    total = args.prompt_len + args.max_new_tokens
    if total > cfg.max_position:
        prompt = (f"--prompt-tokens ({args.prompt_len} tokens)" if getattr(args, "prompt_tokens", None)
                  else f"--prompt-len={args.prompt_len}")
        raise UsageError(f"{prompt} + --max-new-tokens={args.max_new_tokens} = {total} "
                         f"exceeds {source}'s max_position={cfg.max_position}")
    for opt in ("chunk", "block"):
        v = getattr(args, opt, None)
        if v is not None and v > cfg.max_position:
            raise UsageError(f"--{opt}={v} exceeds {source}'s max_position={cfg.max_position}")
    return cfg


def read_tokens(path, vocab_size: int) -> list[int]:
    """Token ids from ``path``: whitespace-separated integers or a JSON list of integers (not
    booleans, not floats), each in ``[0, vocab_size)``; a UsageError naming the file otherwise
    (for an id outside the vocabulary: its position, its value and the vocabulary size)."""
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
    for i, t in enumerate(toks):
        if not 0 <= t < vocab_size:
            raise UsageError(f"{what}: token id {t} at position {i} outside [0, {vocab_size}) "
                             f"(vocab_size={vocab_size})")
    return toks


def check_float_memory(tokens: int):
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


def model_source(args, default_model: str):
    """``(cfg, prompt, source)`` of ``args`` without reading or generating a weight: ``cfg`` is the
    checkpoint's config.json (``--checkpoint``) or ``--model``'s (``default_model`` when it is
    None), cut to ``--layers``; ``prompt`` the ids of ``--prompt-tokens`` (which then sets
    ``args.prompt_len``) or None; ``source`` names the model in messages (``checkpoint DIR`` or
    ``model NAME``). Every length is checked (``check_lengths``)."""
    from mcf_fpga.golden.config import ModelConfig
    if args.checkpoint:
        cfg, source = ModelConfig.from_hf_dir(args.checkpoint), f"checkpoint {args.checkpoint}"
    else:
        cfg = model_config(args.model if args.model is not None else default_model)
        source = f"model {cfg.name}"
    prompt = None
    if args.prompt_tokens:
        prompt = read_tokens(args.prompt_tokens, cfg.vocab_size)
        args.prompt_len = len(prompt)
    return check_lengths(cfg, args, source), prompt, source


def load_weights(args, cfg):
    """The float weights of ``model_source``'s ``cfg``: the checkpoint's (every tensor checked by
    ``golden.model.load_hf``), its first ``--layers`` layers; or random ones from ``--seed``."""
    from mcf_fpga.golden.model import load_hf, random_weights
    if not args.checkpoint:
        return random_weights(cfg, args.seed)
    w = load_hf(args.checkpoint)
    if args.layers:
        w.layers = w.layers[:args.layers]
        w.config = w.config.replace(num_layers=len(w.layers))
    return w


def weights_and_prompt(args, cfg, prompt, *, float_prefill: bool = False):
    """``(weights, cfg, prompt)``: ``load_weights``' weights, their config, and ``prompt_of``'s
    prompt; ``float_prefill``: the float model will prefill, so its memory is checked first."""
    if float_prefill:
        check_float_memory(args.prompt_len + args.max_new_tokens)
    w = load_weights(args, cfg)
    return w, w.config, prompt_of(args, w.config, prompt)


def prompt_of(args, cfg, prompt):
    """``prompt`` (``--prompt-tokens``'), or ``--prompt-len`` random ids in ``[0, vocab)`` drawn
    from ``--seed`` + 1."""
    import torch
    if prompt is not None:
        return prompt
    g = torch.Generator().manual_seed(args.seed + 1)
    return torch.randint(0, cfg.vocab_size, (args.prompt_len,), generator=g).tolist()
