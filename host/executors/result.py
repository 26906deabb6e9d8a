"""What an executor returns: outputs, tokens, KV layout and per-node memory."""
from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["ExecResult", "collect"]


@dataclass
class ExecResult:
    logits: torch.Tensor      # [prompt_len, vocab] int logits of every prompt row
    tokens: list              # generated tokens (token 1 from prefill, then decode steps)
    layout: dict              # {node: sorted [(layer, unit)]} in the pool at prefill_done
    layout_states: dict       # {node: {(layer, unit): state}} at prefill_done
    layout_end: dict          # {node: {(layer, unit): state}} after decode
    peak_slots: list          # per node, peak pool slots used
    events: list              # per node lifecycle events
    leftovers: list           # per node: staged blocks or held references left (must be empty)


def collect(program, results) -> ExecResult:
    """Assemble per-node ``NodeRuntime.result()`` dicts (ordered by node)."""
    results = sorted(results, key=lambda r: r["node"])
    rows = {}
    for r in results:
        for k, v in r["logits"].items():
            rows[tuple(k)] = v
    logits = None
    if rows:
        logits = torch.cat([torch.tensor(rows[k], dtype=torch.int64) for k in sorted(rows)])
    leader = results[program.leader]
    tokens = leader["tokens"]
    if program.max_new_tokens >= 1 and not tokens:
        raise RuntimeError("executor: the decode leader produced no tokens")
    lay = {r["node"]: sorted(k for k in (r["layout_prefill"] or {})) for r in results}
    return ExecResult(logits=logits, tokens=list(tokens)[:program.max_new_tokens], layout=lay,
                      layout_states={r["node"]: r["layout_prefill"] for r in results},
                      layout_end={r["node"]: r["layout_end"] for r in results},
                      peak_slots=[r["peak_slots"] for r in results], events=[r["events"] for r in results],
                      leftovers=[(r["staged_left"], r["held_left"]) for r in results])
