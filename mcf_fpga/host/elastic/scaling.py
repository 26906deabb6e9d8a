"""Elastic scaling policy for A nodes (KernelFlume §4.2, Algorithm 6).

Formulas (all KV sizes ``C`` are bytes on one A node summed over all layers, so
``t_a_max`` is the per-token attention budget, i.e. L x the per-layer budget
T_layer^bud of §4.2):

* per-node budget       C_thresh = min(beta_mem * C_kv_cap, beta_slo * T_A^max * BW)
* after prefill         N_A = ceil(C_total / C_thresh), ranges balanced by KV bytes; the
                        node owning a request's highest range is its tail
* fill horizon          tau_fill(i) = (C_thresh - b_i) / (n_i * bytes_per_token)   [steps]
* prewarm               when tau_fill(i) * T_step < T_prewarm, prepare a fresh A node
* publish               once the prewarmed node is ready and b_i >= gamma * C_thresh, route
                        the future tokens of every request whose tail is i to the new node
                        (existing KV stays in place) at the next token boundary
* scale-down            an A node is released once the requests holding its ranges finish
                        (§8 "releases a retiring A node once the requests holding its ranges
                        complete")
* node pool             a scale-up or admission that needs a node when none is free records
                        ``capacity_exhausted``; the request waits (admission queue, or its
                        decode stalls while its tail is at hard capacity). Nothing is dropped.

``bytes_per_token``: the paper's 2 * H_kv * d_h * L * 2 B (FP16). MCF stores INT8 (or INT4)
KV plus one exponent byte per (token, KV head): ``kv_bytes_per_token``.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from .routing import Range, RoutingTable

__all__ = ["c_thresh", "t_a_max", "kv_bytes_per_token", "n_a_after_prefill", "balanced_layout",
           "owner_layout", "fill_horizon", "ScalingParams", "ElasticController", "Event"]


def c_thresh(beta_mem: float, c_kv_cap: float, beta_slo: float, t_a_max: float, bw: float) -> float:
    """§4.2: C_thresh = min(beta_mem * C_kv_cap, beta_slo * T_A^max * BW_HBM)."""
    for name, v in (("beta_mem", beta_mem), ("beta_slo", beta_slo)):
        if not 0 < v <= 1:
            raise ValueError(f"{name}={v} must be in (0, 1]")
    for name, v in (("c_kv_cap", c_kv_cap), ("t_a_max", t_a_max), ("bw", bw)):
        if not v > 0:
            raise ValueError(f"{name}={v} must be > 0")
    return min(beta_mem * c_kv_cap, beta_slo * t_a_max * bw)


def t_a_max(t_slo: float, t_overhead: float, t_w: float = 0.0) -> float:
    """§4.2: the TPOT target minus per-token overheads outside the two-stage model. The exposed
    time is max(T_p+T_f, T_A), so T_A^max is the remaining budget (it must also cover the
    W-side stage ``t_w``, else the SLO is infeasible whatever N_A is)."""
    bud = t_slo - t_overhead
    if bud <= 0 or t_w > bud:
        raise ValueError(f"t_slo={t_slo} leaves no attention budget after overhead={t_overhead}"
                         f" and W stage={t_w}")
    return bud


def kv_bytes_per_token(cfg, kv_bits: int = 8, exponent_bytes: int = 1) -> int:
    """KV bytes one token adds on its A node, all layers: 2 (K,V) * L * H_kv * (d_h*bits/8 +
    exponent bytes). With kv_bits=16, exponent_bytes=0 this is the paper's FP16 figure."""
    return 2 * cfg.num_layers * cfg.num_kv_heads * (cfg.head_dim * kv_bits // 8 + exponent_bytes)


def n_a_after_prefill(c_total: float, c_th: float) -> int:
    """§4.2 "Post-prefill initialization": N_A = ceil(C_total / C_thresh) (at least 1)."""
    if c_th <= 0:
        raise ValueError(f"C_thresh={c_th} must be > 0")
    return max(1, math.ceil(c_total / c_th))


def _coalesce(blocks_nodes, align: int):
    """[(node per aligned block)] -> [Range] with the last range open."""
    out = []
    for b, node in enumerate(blocks_nodes):
        if out and out[-1][2] == node:
            continue
        if out:
            out[-1][1] = b * align
        out.append([b * align, None, node])
    return [Range(s, e, n) for s, e, n in out]


def balanced_layout(lengths: dict, nodes, align: int) -> dict:
    """Ranges for every request so each node gets ~equal KV bytes (±1 block): the requests'
    aligned blocks are laid end to end (sorted request ids) and cut into len(nodes) contiguous
    runs. Returns {req: [Range, ...]}."""
    nodes = list(nodes)
    if not nodes:
        raise ValueError("balanced_layout needs at least one node")
    total = sum(lengths.values())
    out, before = {}, 0
    for req in sorted(lengths):
        L = lengths[req]
        if L <= 0:
            raise ValueError(f"request {req!r}: length {L} must be > 0")
        per_block = []
        for b in range(-(-L // align)):
            per_block.append(nodes[min(len(nodes) - 1, (before + b * align) * len(nodes) // total)])
        before += L
        out[req] = _coalesce(per_block, align)
    return out


def owner_layout(owners: dict, align: int) -> dict:
    """MARS hand-over: {req: [owner node of block 0, 1, ...]} (the owner-only layout at the
    end of prefill) -> {req: [Range, ...]}; consecutive blocks of one owner form one range."""
    return {req: _coalesce(list(o), align) for req, o in owners.items()}


def fill_horizon(c_th: float, b_i: float, n_i: int, bytes_per_token: float) -> float:
    """§4.2: tau_fill = (C_thresh - b_i) / (n_i * bytes_per_token), in decode steps."""
    if n_i <= 0:
        return math.inf
    return (c_th - b_i) / (n_i * bytes_per_token)


@dataclass(frozen=True)
class ScalingParams:
    """Inputs of the policy. Sizes in bytes, times in seconds."""
    c_kv_cap: float                 # usable KV capacity of one A node (hard limit)
    bw: float                       # effective HBM/DDR bandwidth of one A node
    t_a_max: float                  # per-token attention budget (see module docstring)
    bytes_per_token: float
    beta_mem: float = 0.9
    beta_slo: float = 0.9
    t_step: float = 0.05            # predicted decode-step time
    t_prewarm: float = 0.412        # §6.2: from-scratch A node build 412 ms
    gamma: float = 0.9              # activation watermark (fraction of C_thresh)

    @property
    def c_thresh(self) -> float:
        return c_thresh(self.beta_mem, self.c_kv_cap, self.beta_slo, self.t_a_max, self.bw)

    @property
    def prewarm_steps(self) -> int:
        return max(1, math.ceil(self.t_prewarm / self.t_step))


@dataclass(frozen=True)
class Event:
    step: int
    kind: str          # scale_up | scale_down | prewarm | capacity_exhausted | admit | wait | stall | finish
    node: int | None = None
    detail: str = ""


class ElasticController:
    """Token-level policy engine over a ``RoutingTable`` and a pool of A nodes.

    Per step: ``begin()`` -> (StepView, runnable requests); the caller decodes one token per
    runnable request and reports it with ``appended(req)`` (one KV token stored) and
    ``finished(req)``; ``end(view)`` ends the step and runs the policy at the token boundary.
    """

    def __init__(self, params: ScalingParams, pool, table: RoutingTable | None = None):
        self.p = params
        self.table = table or RoutingTable()
        self.free = deque(pool)
        self.prewarming: dict = {}        # node -> (tail node it will relieve, ready step)
        self.lengths: dict = {}
        self.done: set = set()
        self.waiting: deque = deque()     # (req, prompt_len) admission queue
        self.events: list = []
        self.step_no = 0
        self._exhausted = False
        self.c_th = params.c_thresh
        self.cap_tokens = int(params.c_kv_cap // params.bytes_per_token)

    # ------------------------------------------------------------ helpers
    def _ev(self, kind, node=None, detail=""):
        self.events.append(Event(self.step_no, kind, node, detail))

    def count(self, kind) -> int:
        return sum(e.kind == kind for e in self.events)

    def active_requests(self):
        return [r for r in self.table.shadow_requests() if r not in self.done]

    def _shadow_tokens_on(self, node) -> int:
        n = 0
        for req in self.table.shadow_requests():
            L = self.lengths[req]
            for r in self.table.shadow_ranges(req):
                if r.node == node:
                    n += max(0, (L if r.end is None else min(r.end, L)) - r.start)
        return n

    def _allocated(self, snap, node) -> int:
        """Tokens of KV memory allocated on ``node`` (whole blocks)."""
        a, n = self.table.align, 0
        for req, rs in snap.ranges.items():
            L = self.lengths.get(req, 0)
            for r in rs:
                if r.node == node:
                    hi = L if r.end is None else min(r.end, L)
                    n += -(-max(0, hi - r.start) // a) * a
        return n

    def _take_node(self, why: str):
        if not self.free:
            if not self._exhausted:
                self._ev("capacity_exhausted", None, why)
            self._exhausted = True
            return None
        self._exhausted = False
        return self.free.popleft()

    # ------------------------------------------------------------ admission
    def admit_layout(self, lengths: dict, layout: dict):
        """Post-prefill hand-over: ``layout`` {req: [Range]} (balanced or MARS owners)."""
        nodes = sorted({r.node for rs in layout.values() for r in rs})
        missing = [n for n in nodes if n not in self.free]
        if missing:
            raise ValueError(f"layout uses A nodes {missing} that are not free in the pool")
        for n in nodes:
            self.free.remove(n)
            self.table.stage_activate(n)
        for req, rs in layout.items():
            self.table.stage_request(req, rs)
            self.lengths[req] = lengths[req]
            self._ev("admit", None, f"{req}")
        self.table.publish()

    def admit(self, req, prompt_len: int) -> bool:
        """A new request (its prefill KV of ``prompt_len`` tokens): placed on fresh nodes from
        the pool (ceil(bytes / C_thresh) of them, balanced). If the pool cannot supply them the
        request waits in the admission queue (``wait`` event); it is never dropped."""
        if prompt_len <= 0:
            raise ValueError(f"request {req!r}: prompt_len={prompt_len} must be > 0")
        if not self.waiting and self._try_admit(req, prompt_len):
            return True
        self.waiting.append((req, prompt_len))
        self._ev("wait", None, f"{req}")
        return False

    def _try_admit(self, req, prompt_len) -> bool:
        need = n_a_after_prefill(prompt_len * self.p.bytes_per_token, self.c_th)
        if len(self.free) < need:
            if not self._exhausted:
                self._ev("capacity_exhausted", None, f"admission of {req} needs {need} nodes")
            self._exhausted = True
            return False
        nodes = [self.free.popleft() for _ in range(need)]
        for n in nodes:
            self.table.stage_activate(n)
        self.table.stage_request(req, balanced_layout({req: prompt_len}, nodes, self.table.align)[req])
        self.lengths[req] = prompt_len
        self._ev("admit", None, f"{req}")
        self.table.publish()
        return True

    # ------------------------------------------------------------ steps
    def begin(self):
        """Start a decode step: its StepView and the requests that may decode a token (those
        whose tail node has room for one more token under the hard capacity ``c_kv_cap``)."""
        view = self.table.begin_step()
        snap = view.snapshot
        run, per_node = [], {}
        for req in sorted(snap.ranges):
            if req in self.done:
                continue
            t = snap.owner(req, self.lengths[req])
            per_node.setdefault(t, []).append(req)
        a = self.table.align
        for node, reqs in per_node.items():
            # KV memory is allocated per aligned block: a token inside a started block always
            # fits; a token opening a block needs a block's room under the hard capacity
            have = self._allocated(snap, node)
            for r in reqs:
                if self.lengths[r] % a == 0:
                    if have + a > self.cap_tokens:
                        self._ev("stall", node, f"{r}")
                        continue
                    have += a
                run.append(r)
        if per_node and not run and not self.prewarming and not self.free:
            self.table.end_step(view)
            raise RuntimeError(f"capacity exhausted: all {sum(map(len, per_node.values()))} live "
                               f"requests are stalled at the hard capacity and the A-node pool is "
                               f"empty (no request can finish to free a node)")
        return view, sorted(run)

    def appended(self, req):
        self.lengths[req] += 1

    def finished(self, req):
        self.done.add(req)
        self._ev("finish", None, f"{req}")

    def end(self, view):
        self.table.end_step(view)
        self.step_no += 1
        self.boundary()

    def boundary(self):
        """The policy at a token boundary; at most one publish per boundary."""
        changed = False
        # scale-down: drop finished requests, release A nodes that hold nothing
        for req in [r for r in self.table.shadow_requests() if r in self.done]:
            self.table.stage_remove_request(req)
            changed = True
        if changed:
            held = {r.node for q in self.table.shadow_requests() for r in self.table.shadow_ranges(q)}
            for n in sorted(self.table.shadow_active() - held):
                self.table.stage_retire(n)
                self.free.append(n)
                self._ev("scale_down", n)
        # predictive scale-up per tail node
        tails: dict = {}
        for req in self.active_requests():
            # the node receiving this request's future tokens (its open range)
            tails.setdefault(self.table.shadow_ranges(req)[-1].node, []).append(req)
        relieving = {v[0]: n for n, v in self.prewarming.items()}
        for i, reqs in sorted(tails.items()):
            b_i = self._shadow_tokens_on(i) * self.p.bytes_per_token
            tau = fill_horizon(self.c_th, b_i, len(reqs), self.p.bytes_per_token)
            if i not in relieving and tau * self.p.t_step < self.p.t_prewarm:
                n = self._take_node(f"scale-up of tail node {i}")
                if n is not None:
                    self.prewarming[n] = (i, self.step_no + self.p.prewarm_steps)
                    relieving[i] = n
                    self._ev("prewarm", n, f"for tail {i}, tau_fill={tau:.1f} steps")
            n = relieving.get(i)
            if (n is not None and self.prewarming[n][1] <= self.step_no
                    and b_i >= self.p.gamma * self.c_th):
                del self.prewarming[n]
                self.table.stage_activate(n)
                for req in reqs:
                    self.table.stage_extend(req, n, self.lengths[req])
                self._ev("scale_up", n, f"relieves {i}")
                changed = True
        # prewarmed nodes whose tail disappeared go back to the pool
        for n, (i, _) in list(self.prewarming.items()):
            if i not in tails:
                del self.prewarming[n]
                self.free.append(n)
        if changed:
            self.table.publish()
        # admission queue (FIFO: a waiting request is never overtaken)
        while self.waiting and self._try_admit(*self.waiting[0]):
            self.waiting.popleft()
