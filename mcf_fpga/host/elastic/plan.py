"""The scaling policy drives the cluster program (KernelFlume §4.2 on ``elastic_program``).

``elastic_plan(prompt_lens, max_new_tokens, params, nodes, chunk=, block=)`` replays the
decode token by token through ``ElasticController`` (the policy) with only the lengths:

1. ``N_A = ceil(C_total / C_thresh)`` (C_total = prompt tokens x bytes_per_token) nodes
   prefill; request r's ring prefill runs on ``groups[r]``: nodes 0..N_A-1 in a rotated order
   (request r starts at node r mod N_A), so the ranges are balanced by the ring and the
   requests' tails — the owner of each one's last prompt block — spread over the nodes instead
   of all landing on one. The owner layout is the policy's initial table (``owner_layout``).
   With ``prefill="mars"`` (``mars``: ``MarsParams``) the prefill is MARS on the same node
   orders (chunk c on ``groups[r][placement(C, N_A)[c]]``) and its owner layout is the table.
2. Each round, ``begin()`` names the requests that may decode (a request whose tail has no
   room under the hard capacity stalls: it waits, it is not dropped) and ``end()`` runs the
   policy at the token boundary: prewarm from the fill horizon tau_fill, publish a scale-up
   when the prewarmed node is ready, release nodes whose requests all finished, record
   ``capacity_exhausted`` when the pool is empty.
3. Every tail change after round s becomes ``scale_ups[s + 1]``; every stall a ``stalls``
   entry. ``policy_program`` compiles them with ``elastic_program``, whose own scale-downs
   (a request finishing frees its ranges) are the policy's (checked).

The leader (weight side) is the owner of request 0's last prompt row, one of the N_A nodes:
on this cluster the W node also holds KV ranges.
"""
from __future__ import annotations

from dataclasses import dataclass

from mcf_fpga.host.baselines import _layout
from mcf_fpga.host.mars import MarsParams

from .program import elastic_program, mars_params
from .scaling import ElasticController, ScalingParams, n_a_after_prefill, owner_layout

__all__ = ["ElasticPlan", "elastic_plan", "policy_program"]


@dataclass
class ElasticPlan:
    n_a: int                 # A nodes after prefill, ceil(C_total / C_thresh)
    c_thresh: float
    groups: list             # per request, its prefill nodes in ring order
    scale_ups: dict          # {round: [(req, node), ...]}
    stalls: dict             # {round: {req, ...}}
    scale_downs: dict        # {round: [node, ...]} (the policy's releases)
    events: list             # the controller's events (prewarm, capacity_exhausted, ...)


def _owners(prompt_len: int, group: list, chunk: int, block: int, mars: MarsParams | None = None) -> list:
    """Owner node of every KV block after ring prefill of one request on ``group`` (with ``mars``:
    after MARS prefill, chunk c on ``group[placement(C, len(group))[c]]``)."""
    if mars is not None:
        o = mars.owners(-(-prompt_len // chunk), len(group))
        return [group[o[b * block // chunk]] for b in range(-(-prompt_len // block))]
    units, pos, _ = _layout(prompt_len, chunk, block, len(group), False)
    out = []
    for b in range(-(-prompt_len // block)):
        u = next(i for i, (t0, t1) in enumerate(units) if t0 <= b * block < t1)
        out.append(group[pos[u]])
    return out


def elastic_plan(prompt_lens, max_new_tokens, params: ScalingParams, nodes: int, *, chunk: int,
                 block: int = 16, prefill: str = "ring", mars: MarsParams | None = None) -> ElasticPlan:
    lens, news = tuple(prompt_lens), tuple(max_new_tokens)
    mars = mars_params(prefill, mars, chunk)
    if len(lens) != len(news) or not lens:
        raise ValueError(f"prompt_lens ({len(lens)}) and max_new_tokens ({len(news)}) need one entry per request")
    for r, k in enumerate(news):
        if k < 2:
            raise ValueError(f"max_new_tokens[{r}]={k}: an elastic request decodes at least one step (>= 2)")
    c_th = params.c_thresh
    n_a = n_a_after_prefill(sum(lens) * params.bytes_per_token, c_th)
    if n_a >= nodes:
        raise ValueError(f"capacity exhausted: N_A = ceil(C_total / C_thresh) = {n_a} A nodes after prefill, "
                         f"the cluster has {nodes} nodes (one must stay free for decode scale-ups); "
                         f"requests are admitted before decode on this cluster, so none can wait")
    groups = [[(r + j) % n_a for j in range(n_a)] for r in range(len(lens))]
    ctl = ElasticController(params, list(range(nodes)))
    ctl.table.align = block
    ctl.admit_layout(dict(enumerate(lens)),
                     owner_layout({r: _owners(n, groups[r], chunk, block, mars) for r, n in enumerate(lens)}, block))
    made = {r: 0 for r in range(len(lens))}
    live = set(made)
    scale_ups, stalls = {}, {}
    rnd = 0
    while live:
        view, run = ctl.begin()
        if live - set(run):
            stalls[rnd] = live - set(run)
        for q in run:
            ctl.appended(q)
            made[q] += 1
            if made[q] == news[q] - 1:
                ctl.finished(q)
                live.discard(q)
        before = {q: ctl.table.shadow_ranges(q)[-1].node for q in live}
        ctl.end(view)
        for q in sorted(live):
            tail = ctl.table.shadow_ranges(q)[-1].node
            if tail != before[q]:
                scale_ups.setdefault(rnd + 1, []).append((q, tail))
        rnd += 1
    downs = {}
    for e in ctl.events:
        if e.kind == "scale_down":
            downs.setdefault(e.step, []).append(e.node)
    return ElasticPlan(n_a, c_th, groups, scale_ups, stalls, downs, list(ctl.events))


def policy_program(model, cluster, hw, prompt_lens, max_new_tokens, params: ScalingParams, *, chunk: int,
                   kv_bits: int = 8, block: int = 16, prefill: str = "ring", mars: MarsParams | None = None):
    """(program, plan): the elastic program whose prefill nodes, scale-ups and stalls come from
    the scaling policy (``elastic_plan``; ``prefill``/``mars`` as in ``elastic_program``: the
    policy's initial table is that prefill's owner layout). Refused if the program's scale-downs
    differ from the policy's releases (they are the same rule, applied independently)."""
    plan = elastic_plan(prompt_lens, max_new_tokens, params, cluster.nodes, chunk=chunk, block=block,
                        prefill=prefill, mars=mars)
    prog = elastic_program(model, cluster, hw, tuple(prompt_lens), tuple(max_new_tokens),
                           prefill_nodes=plan.groups, scale_ups=plan.scale_ups, stalls=plan.stalls,
                           chunk=chunk, kv_bits=kv_bits, block=block, prefill=prefill, mars=mars)
    last = len(prog.stats["decode_groups"])
    policy = {s: sorted(v) for s, v in plan.scale_downs.items() if s < last}
    if prog.stats["scale_downs"] != policy:
        raise RuntimeError(f"program scale-downs {prog.stats['scale_downs']} differ from the policy's {policy}")
    return prog, plan
