"""What an executor returns: outputs, tokens, KV layout and per-node memory."""
from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["ExecResult", "collect"]


@dataclass
class ExecResult:
    logits: torch.Tensor      # [rows, vocab] int logits of the rows the head ran on (Program.head_rows:
                              # every prompt row, or with Program.logits="last" the last one)
    tokens: list              # generated tokens (token 1 from prefill, then decode steps)
    layout: dict              # {node: sorted [(layer, unit)]} in the pool at prefill_done
    layout_states: dict       # {node: {(layer, unit): state}} at prefill_done
    layout_end: dict          # {node: {(layer, unit): state}} after decode
    peak_slots: list          # per node, peak pool slots used
    events: list              # per node lifecycle events
    leftovers: list           # per node: staged blocks or held references left (must be empty)
    req_tokens: list = None   # per request: its generated tokens (``tokens`` = request 0's)
    req_logits: list = None   # per request: its head rows' logits (``logits`` = request 0's)
    step_versions: list = None   # per node: {(req, pos, layer): routing version its decode ops ran under}
    req_picked: list = None   # per request: (logit, token) of every tensor-parallel decode step (leader)


def collect(program, results) -> ExecResult:
    """Assemble per-node ``NodeRuntime.result()`` dicts (ordered by node)."""
    results = sorted(results, key=lambda r: r["node"])
    nreq = len(program.reqs)
    rows = [{} for _ in range(nreq)]
    for r in results:
        for (req, k), v in r["logits"].items():
            rows[req][tuple(k)] = v
    req_logits = [torch.cat([torch.tensor(rw[k], dtype=torch.int64) for k in sorted(rw)]) if rw else None
                  for rw in rows]
    leader = results[program.leader]
    req_tokens = [list(leader["tokens"].get(q, []))[:n] for q, (_p, n) in enumerate(program.reqs)]
    if program.max_new_tokens >= 1 and not req_tokens[0]:
        raise RuntimeError("executor: the decode leader produced no tokens")
    lay = {r["node"]: sorted(k for k in (r["layout_prefill"] or {})) for r in results}
    return ExecResult(logits=req_logits[0], tokens=req_tokens[0], layout=lay,
                      layout_states={r["node"]: r["layout_prefill"] for r in results},
                      layout_end={r["node"]: r["layout_end"] for r in results},
                      peak_slots=[r["peak_slots"] for r in results], events=[r["events"] for r in results],
                      leftovers=[(r["staged_left"], r["held_left"]) for r in results],
                      req_tokens=req_tokens, req_logits=req_logits,
                      step_versions=[r["step_versions"] for r in results],
                      req_picked=[list(leader.get("picked", {}).get(q, [])) for q in range(nreq)])
