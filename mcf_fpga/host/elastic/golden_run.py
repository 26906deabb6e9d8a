"""Elastic decode on golden: prefill on ``golden.IntModel``, then decode token by token with
the KV held by A nodes that the scaling policy adds and removes through the routing table.

Flow (KernelFlume §3.2 and §4.2):

1. Prefill every prompt with ``IntModel.forward(prompt, decode=False)`` (one chunk).
2. Hand-over: the owner-only layout at the end of prefill (``owners``: per request the owner
   node of each KV block, as MARS leaves it) becomes the A nodes' initial ranges; without
   ``owners`` the policy's balanced layout over N_A = ceil(C_total / C_thresh) nodes is used.
   The prefill KV of each block moves to its owner ``ANode``.
3. Each decode step takes one routing snapshot (``ElasticController.begin``). Per layer the W
   side (``ElasticIntModel``) sends K_new/V_new only to the tail (``ANode.append`` refuses a
   token it does not own in that snapshot), then gathers each holder's blocks and runs
   ``golden.attention.kv_stationary_decode`` with the snapshot's shards (node i attends over
   its blocks; flat merge, bit-identical for any sharding, docs/numerics.md).
4. At each token boundary the policy may publish scale-ups/scale-downs.

The tokens equal ``IntModel.generate(prompt, n)`` bit for bit (tests/host/elastic/test_elastic_golden.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from mcf_fpga.golden.attention import IntBackend, kv_stationary_decode
from mcf_fpga.golden.int_model import IntKVCache, IntModel

from .routing import RoutingError, RoutingTable, StepView
from .scaling import (ElasticController, ScalingParams, balanced_layout, n_a_after_prefill,
                      owner_layout)

__all__ = ["ANode", "RoutedCache", "ElasticIntModel", "ElasticRun", "run_elastic_decode",
           "owners_from_program"]


def owners_from_program(prog, node_map: dict | None = None) -> list:
    """The owner-only layout a MARS prefill leaves (``host.program.Program``: ``units`` are
    token ranges, ``owner[u]`` their owner node at the end of prefill) as the owner of each KV
    block, mapped through ``node_map`` (prefill node -> A node id; default identity)."""
    node_map = node_map or {}
    blk = prog.block
    out = []
    for b in range(-(-prog.prompt_len // blk)):
        u = next(i for i, (t0, t1) in enumerate(prog.units) if t0 <= b * blk < t1)
        t0, t1 = prog.units[u]
        if t0 % blk or (t1 % blk and t1 != prog.prompt_len):
            raise ValueError(f"unit {u} = [{t0}, {t1}) is not aligned to block={blk}")
        out.append(node_map.get(prog.owner[u], prog.owner[u]))
    return out


class ANode:
    """A weightless attention node: stores the K/V tokens of the ranges routed to it."""

    def __init__(self, node_id: int):
        self.id = node_id
        self.kv: dict = {}             # (req, layer) -> {pos: (kv, ke, vv, ve)}
        self.versions: list = []       # snapshot version of every append (checked monotonic)

    def store(self, req, layer, pos, k, v):
        self.kv.setdefault((req, layer), {})[pos] = (k[0], k[1], v[0], v[1])

    def append(self, view: StepView, req, layer, pos, k, v):
        """K_new/V_new of token ``pos`` (values [Hkv, 1, d], exps [Hkv, 1]): accepted only if this node is its tail in the step's
        snapshot (new KV goes only to the tail)."""
        if view.tail(req, pos) != self.id:
            raise RoutingError(f"A node {self.id}: token {pos} of {req!r} routed to the wrong node")
        if self.versions and view.version < self.versions[-1]:
            raise RoutingError(f"A node {self.id}: append from v{view.version} after v{self.versions[-1]}")
        self.versions.append(view.version)
        self.store(req, layer, pos, (k[0][:, 0], k[1][:, 0]), (v[0][:, 0], v[1][:, 0]))

    def tokens(self, req, layer, positions):
        d = self.kv.get((req, layer), {})
        missing = [p for p in positions if p not in d]
        if missing:
            raise RoutingError(f"A node {self.id}: does not hold tokens {missing[:4]} of {req!r}")
        return [d[p] for p in positions]

    def free(self, req):
        for key in [k for k in self.kv if k[0] == req]:
            del self.kv[key]

    def n_tokens(self) -> int:
        return sum(len(v) for (r, l), v in self.kv.items() if l == 0)


class RoutedCache:
    """Duck-types ``IntKVCache`` for one decode forward of one request: ``length`` is the
    request's stored length, ``append`` routes K_new/V_new to the tail A node."""

    def __init__(self, req, view: StepView, anodes: dict, length: int):
        self.req, self.view, self.anodes, self._len = req, view, anodes, length

    @property
    def length(self) -> int:
        return self._len

    def append(self, i, k, v):
        pos = self._len
        self.anodes[self.view.tail(self.req, pos)].append(self.view, self.req, i, pos, k, v)


class ElasticIntModel(IntModel):
    """IntModel whose decode attention reads the A nodes through the step's snapshot."""

    def attention(self, i, q, cache, start, decode):
        if not isinstance(cache, RoutedCache):
            return super().attention(i, q, cache, start, decode)
        T, blk = start + 1, self.qm.block
        shards = cache.view.shards(cache.req, T, blk)
        nodes = sorted(shards)
        got = {}
        for n in nodes:
            pos = [p for b in shards[n] for p in range(b * blk, min((b + 1) * blk, T))]
            for p, t in zip(pos, self.anodes_tokens(cache, n, i, pos)):
                got[p] = t
        if sorted(got) != list(range(T)):
            raise RoutingError(f"request {cache.req!r}: holders returned positions != 0..{T - 1}")
        K = (torch.stack([got[p][0] for p in range(T)], 1), torch.stack([got[p][1] for p in range(T)], 1))
        V = (torch.stack([got[p][2] for p in range(T)], 1), torch.stack([got[p][3] for p in range(T)], 1))
        return kv_stationary_decode(IntBackend(), q, K, V, blk, [shards[n] for n in nodes])

    @staticmethod
    def anodes_tokens(cache, node, layer, positions):
        return cache.anodes[node].tokens(cache.req, layer, positions)


@dataclass
class ElasticRun:
    tokens: dict
    controller: ElasticController
    anodes: dict
    step_versions: list = field(default_factory=list)
    step_holders: list = field(default_factory=list)     # per step {req: holders}


@torch.no_grad()
def run_elastic_decode(qm, prompts: dict, max_new: dict, params: ScalingParams, pool,
                       owners: dict | None = None, max_steps: int = 100000,
                       mid_step=None) -> ElasticRun:
    """Prefill + elastic decode of several requests; ``max_new[req]`` tokens each (>= 1).
    ``mid_step(controller, view, req)``, if given, runs inside every step after each request's
    forward (tests use it to stage and publish route changes at random times)."""
    model = ElasticIntModel(qm)
    blk = qm.block
    ctl = ElasticController(params, pool, RoutingTable(blk))
    anodes = {n: ANode(n) for n in pool}
    logits, caches = {}, {}
    for req, prompt in prompts.items():
        if max_new.get(req, 0) < 1:
            raise ValueError(f"request {req!r}: max_new={max_new.get(req)} must be >= 1")
        caches[req] = IntKVCache()
        logits[req] = model.forward(list(prompt), caches[req], decode=False)
    lengths = {r: len(p) for r, p in prompts.items()}
    if owners is not None:
        for req, o in owners.items():
            if len(o) != -(-lengths[req] // blk):
                raise ValueError(f"owners[{req!r}] has {len(o)} blocks, expected {-(-lengths[req] // blk)}")
        layout = owner_layout(owners, blk)
    else:
        n_a = n_a_after_prefill(sum(lengths.values()) * params.bytes_per_token, ctl.c_th)
        if n_a > len(ctl.free):
            raise ValueError(f"prefill needs N_A={n_a} A nodes, pool has {len(ctl.free)}")
        layout = balanced_layout(lengths, list(ctl.free)[:n_a], blk)
    ctl.admit_layout(lengths, layout)
    snap = ctl.table.published
    for req, cache in caches.items():               # hand-over: prefill KV to the owners
        for i in range(qm.config.num_layers):
            (kv, ke), (vv, ve) = cache.k[i], cache.v[i]
            for p in range(lengths[req]):
                anodes[snap.owner(req, p)].store(req, i, p, (kv[:, p], ke[:, p]), (vv[:, p], ve[:, p]))
    del caches
    out = {r: [] for r in prompts}
    run = ElasticRun(out, ctl, anodes)
    for _ in range(max_steps):
        if len(ctl.done) == len(prompts):
            break
        view, runnable = ctl.begin()
        run.step_versions.append(view.version)
        run.step_holders.append({r: view.snapshot.holders(r) for r in runnable})
        for req in runnable:
            tok = int(torch.argmax(logits[req][-1]))
            out[req].append(tok)
            if len(out[req]) == max_new[req]:
                ctl.finished(req)
                continue
            logits[req] = model.forward([tok], RoutedCache(req, view, anodes, ctl.lengths[req]),
                                        decode=True)
            ctl.appended(req)
            if mid_step is not None:
                mid_step(ctl, view, req)
        ctl.end(view)
        for req in prompts:
            if req in ctl.done:
                for a in anodes.values():
                    a.free(req)
    else:
        raise RuntimeError(f"elastic decode did not finish in {max_steps} steps")
    return run
