"""Session-trace replay through a performance model of four provisioning strategies.

KernelFlume §6.4/§6.5: replay an agentic session trace and report p99 TPOT, SLO attainment
(fraction of decode steps within the TPOT target) and $/Mtok (active node-hours x hourly
price / output tokens) for

* ``static-under``  fixed weight-bearing pool sized for the trace-average KV demand (§2.3)
* ``static-over``   fixed pool sized for the trace-maximum KV demand
* ``full-instance`` elastic scaling by whole weight-bearing instances with a cold start
                    (ServerlessLLM-like, §2.4 L1-L3)
* ``kernelflume``   one W node + weightless A nodes added by route updates (§4.2)

Trace format (JSONL, one turn per line)::

    {"session": "s12", "arrival": 3.5, "prompt_tokens": 81234, "output_tokens": 612}

``arrival`` in seconds (>= 0); ``prompt_tokens`` is the turn's whole input context (cached
history included; §2.1: 94.2 % cross-turn cache hits, so prefill time is not modelled);
``output_tokens`` >= 1. A turn starts at max(arrival, end of the session's previous turn).
Blank lines are ignored; anything else malformed raises ``TraceError`` naming the line.

Performance model (decode is memory-bandwidth bound, §2.2): a weight-bearing rank reads its
weights once per step (``t_w = weight_read / BW``); attention scans the KV bytes on a rank
(``C / BW``). DP x CP pools (static, full-instance) are given their strongest envelope: KV
spread evenly over all ranks (KV-resident CP, §6.4), TPOT = t_w + KV_per_rank/BW + overhead.
KernelFlume: TPOT = max(t_w, max_i C_i/BW) + overhead (exposed time of the two-stage
pipeline, §5.2), A nodes filled up to C_thresh (§4.2). When KV exceeds capacity, the newest
requests are preempted (their KV is dropped, vLLM-style recompute) and resume in FIFO
order; a resume re-prefills the context (``prefill_rate``) while the pool's decode pauses. A
stalled request's next token has TPOT = the gap and counts as gap/SLO decode steps (each SLO
interval without a token is a missed step). Admission waits for capacity; no request is dropped.
"""
from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Turn", "TraceError", "parse_trace", "load_trace", "dump_trace", "synthetic_trace",
           "trace_stats", "Hardware", "A6000_8B", "replay", "replay_all", "format_table",
           "plot_results", "STRATEGIES"]


class TraceError(ValueError):
    """A malformed trace line (the message starts with ``line N:``)."""


@dataclass(frozen=True)
class Turn:
    session: str
    arrival: float
    prompt_tokens: int
    output_tokens: int


_FIELDS = {"session": (str, int), "arrival": (int, float), "prompt_tokens": (int,),
           "output_tokens": (int,)}


def parse_trace(lines) -> list:
    """Turns from JSONL lines (an iterable of str); ``TraceError('line N: ...')`` on bad input."""
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError as e:
            raise TraceError(f"line {n}: not valid JSON ({e.msg})") from None
        if not isinstance(d, dict):
            raise TraceError(f"line {n}: expected a JSON object, got {type(d).__name__}")
        for f, types in _FIELDS.items():
            if f not in d:
                raise TraceError(f"line {n}: missing field {f!r}")
            v = d[f]
            if isinstance(v, bool) or not isinstance(v, types):
                raise TraceError(f"line {n}: {f}={v!r} has the wrong type "
                                 f"(expected {' or '.join(t.__name__ for t in types)})")
        if not math.isfinite(d["arrival"]) or d["arrival"] < 0:
            raise TraceError(f"line {n}: arrival={d['arrival']!r} must be a finite number >= 0")
        if d["prompt_tokens"] < 0:
            raise TraceError(f"line {n}: prompt_tokens={d['prompt_tokens']} must be >= 0")
        if d["output_tokens"] < 1:
            raise TraceError(f"line {n}: output_tokens={d['output_tokens']} must be >= 1")
        out.append(Turn(str(d["session"]), float(d["arrival"]), d["prompt_tokens"], d["output_tokens"]))
    return out


def load_trace(path) -> list:
    with open(path) as f:
        return parse_trace(f)


def dump_trace(turns, path):
    with open(path, "w") as f:
        for t in turns:
            f.write(json.dumps({"session": t.session, "arrival": round(t.arrival, 3),
                                "prompt_tokens": t.prompt_tokens, "output_tokens": t.output_tokens}) + "\n")


# -------------------------------------------------------------------- synthetic agentic trace

def synthetic_trace(n_sessions: int = 100, seed: int = 0, median_ctx: int = 80_000,
                    max_ctx: int = 273_000, p99_ctx: int = 270_000, burst_factor: float = 8.0,
                    mean_gap: float = 20.0, dynamics: str = "medium") -> list:
    """Sessions matching the agentic statistics of KernelFlume §2.1/§6.4 (Codex/SWE-bench Pro:
    median context ~80K tokens, tail to ~273K): each session's final context is log-normal
    with median ``median_ctx`` and 99th percentile ``p99_ctx`` (clipped to ``max_ctx``); 2-10
    turns grow the context to it; output tokens per turn are log-normal over two orders of
    magnitude (§2.1, 30..6000, median 400). Session arrivals are bursty: a two-state
    Markov-modulated Poisson process whose burst state has ``burst_factor`` x the rate.
    ``dynamics`` low / medium / high scales the log-normal spread by 0.5 / 1 / 1.5 (§6.4's
    Low, Medium, High slices of the session-length distribution); medium matches the trace."""
    spread = {"low": 0.5, "medium": 1.0, "high": 1.5}
    if dynamics not in spread:
        raise ValueError(f"dynamics={dynamics!r}, expected one of {sorted(spread)}")
    rng = random.Random(seed)
    sigma = spread[dynamics] * math.log(p99_ctx / median_ctx) / 2.3263      # z(0.99)
    turns, t, burst = [], 0.0, False
    for s in range(n_sessions):
        if rng.random() < (0.3 if not burst else 0.2):
            burst = not burst
        rate = (burst_factor if burst else 1.0) / mean_gap
        t += rng.expovariate(rate)
        ctx = int(min(max_ctx, max(8_000, median_ctx * math.exp(rng.gauss(0, sigma)))))
        n_turns = rng.randint(2, 10)
        first = max(1_000, int(ctx * rng.uniform(0.35, 0.75)))
        at = t
        for k in range(n_turns):
            out = int(min(6000, max(30, 400 * math.exp(rng.gauss(0, 1.0)))))
            prompt = min(first + (ctx - first) * k // max(1, n_turns - 1), max_ctx - out)
            turns.append(Turn(f"s{s}", round(at, 3), prompt, out))
            at += out * 0.06 + rng.uniform(2.0, 20.0)        # decode + tool time
    return turns


def trace_stats(turns) -> dict:
    """Session context (max prompt+output over its turns) median/p99/max and arrival burstiness
    (coefficient of variation of session inter-arrival times; Poisson = 1)."""
    ctx, first = {}, {}
    for t in turns:
        ctx[t.session] = max(ctx.get(t.session, 0), t.prompt_tokens + t.output_tokens)
        first[t.session] = min(first.get(t.session, math.inf), t.arrival)
    c = sorted(ctx.values())
    arr = sorted(first.values())
    gaps = [b - a for a, b in zip(arr, arr[1:])]
    mu = sum(gaps) / len(gaps) if gaps else 0.0
    sd = math.sqrt(sum((g - mu) ** 2 for g in gaps) / len(gaps)) if gaps else 0.0
    q = lambda p: c[min(len(c) - 1, int(p * len(c)))]
    return {"sessions": len(c), "turns": len(turns), "median_ctx": q(0.5), "p99_ctx": q(0.99),
            "max_ctx": c[-1], "arrival_cv": sd / mu if mu else 0.0,
            "output_tokens": sum(t.output_tokens for t in turns)}


# -------------------------------------------------------------------- hardware / model

@dataclass(frozen=True)
class Hardware:
    """One GPU/node type and the served model. Defaults: §6.1 testbed A (RTX A6000 48 GB,
    ~768 GB/s) serving Llama-3.1-8B FP16 (18 GB weights + runtime per replica, §2.4 L2;
    16 GB read per step; KV 2*8*128*32*2 B = 128 KiB/token), 80 ms TPOT SLO (§6.4).
    ``price``: $/node-hour (all strategies use the same node type, so cost ratios do not
    depend on it). ``cold_start``: full-instance start (§6.2: ServerlessLLM 1.1 s);
    ``a_build``: a weightless A node built from scratch (412 ms); ``publish``: 7.2 us."""
    hbm: float = 48e9
    bw: float = 768e9
    weight_resident: float = 18e9
    weight_read: float = 16e9
    kv_per_token: float = 131072
    beta_mem: float = 0.9
    beta_slo: float = 0.9
    slo: float = 0.080
    overhead: float = 0.004
    price: float = 0.79
    cold_start: float = 1.1
    a_build: float = 0.412
    publish: float = 7.2e-6
    batch: int = 8
    max_nodes: int = 16
    prefill_rate: float = 6000.0    # tokens/s per rank re-prefilled after a recompute preemption

    @property
    def t_w(self) -> float:
        return self.weight_read / self.bw

    @property
    def cap_weighted(self) -> int:
        """KV tokens on a weight-bearing rank."""
        return int(self.beta_mem * (self.hbm - self.weight_resident) / self.kv_per_token)

    @property
    def c_thresh_tokens(self) -> int:
        """§4.2 C_thresh of a weightless A node, in tokens."""
        from mcf_fpga.host.elastic.scaling import c_thresh
        c = c_thresh(self.beta_mem, self.hbm, self.beta_slo, self.slo - self.overhead, self.bw)
        return int(c / self.kv_per_token)


A6000_8B = Hardware()


# -------------------------------------------------------------------- systems

class _Pool:
    """Weight-bearing DP x CP pool (static or full-instance elastic)."""

    def __init__(self, hw: Hardware, n: int, elastic: bool, fixed_tpot: float | None = None):
        self.hw, self.n, self.elastic, self.fixed_tpot = hw, n, elastic, fixed_tpot
        self.kv: dict = {}            # resident request -> tokens
        self.paused: dict = {}        # preempted request -> tokens (off GPU)
        self.booting: list = []       # ready times of instances being started
        self.low_since = None
        self.stall_until = 0.0
        self._now = 0.0

    def cap(self, n=None):
        return (self.n if n is None else n) * self.hw.cap_weighted

    def resident(self):
        return sum(self.kv.values())

    def nodes(self):
        return self.n + len(self.booting)

    def admit(self, req, prompt, t):
        if self.paused or self.resident() + prompt > self.cap():
            self._want(t, math.ceil((self.resident() + prompt - self.cap()) / self.hw.cap_weighted))
            return False
        self.kv[req] = prompt
        return True

    def _want(self, t, count: int = 1):
        """Start instances (in parallel) until ``count`` are booting."""
        while self.elastic and len(self.booting) < count and self.nodes() < self.hw.max_nodes:
            self.booting.append(t + self.hw.cold_start)

    def tick(self, t, dt, margin):
        hw = self.hw
        for r in [x for x in self.booting if x <= t]:
            self.booting.remove(r)
            self.n += 1
        while self.kv and self.resident() + margin > self.cap():       # preempt newest
            req = next(reversed(self.kv))
            self.paused[req] = self.kv.pop(req)
            self._want(t)
        while self.paused:                                            # resume FIFO
            req = next(iter(self.paused))
            if self.resident() + self.paused[req] + margin > self.cap():
                self._want(t)
                break
            self.kv[req] = self.paused.pop(req)
            # recompute preemption (vLLM default): the resumed context is prefilled again
            # and the pool's decode pauses meanwhile
            self.stall_until = max(self.stall_until, t) + self.kv[req] / (hw.prefill_rate * self.n)
        if self.elastic and self.n > 1 and not self.paused and not self.booting:
            if self.resident() + margin < 0.7 * self.cap(self.n - 1):
                self.low_since = t if self.low_since is None else self.low_since
                if t - self.low_since >= 30.0:
                    self.n -= 1
                    self.low_since = None
            else:
                self.low_since = None

    def running(self, req):
        return req in self.kv and self._now >= self.stall_until

    def grow(self, req, k):
        self.kv[req] += k

    def extend(self, req, k, t):
        """A new turn's prompt grows the session's KV (overflow is preempted in ``tick``)."""
        if req in self.paused:
            self.paused[req] += k
        else:
            self.kv[req] += k
        return True

    def kv_tokens(self):
        return self.resident() + sum(self.paused.values())

    def finish(self, req):
        self.kv.pop(req, None)
        self.paused.pop(req, None)

    def tpot(self):
        if self.fixed_tpot is not None:
            return self.fixed_tpot
        hw = self.hw
        per_rank = self.resident() * hw.kv_per_token / self.n
        return hw.t_w + per_rank / hw.bw + hw.overhead


class _KernelFlume:
    """1 W node + A nodes. Each request's future tokens go to its tail A node; a full tail
    (C_thresh) moves to a prewarmed node; nodes are prewarmed from the aggregate fill horizon
    and released when every request holding ranges on them has finished (§4.2, §8)."""

    def __init__(self, hw: Hardware):
        self.hw = hw
        self.cth = hw.c_thresh_tokens
        self.nodes_kv: list = []      # per active A node: {req: tokens}
        self.tail: dict = {}          # req -> index into nodes_kv (object identity kept in list)
        self.ready = 0                # prewarmed spare nodes
        self.warming: list = []       # ready times
        self.short = False

    def nodes(self):
        return 1 + len(self.nodes_kv) + self.ready + len(self.warming)

    def _load(self, node):
        return sum(node.values())

    def _new_node(self, t):
        if self.ready:
            self.ready -= 1
            node = {}
            self.nodes_kv.append(node)
            return node
        self._want(t)
        return None

    def _room_node(self, t):
        """The least-loaded A node with room (balanced ranges, §4.2), else a prewarmed one."""
        room = [n for n in self.nodes_kv if self._load(n) < self.cth]
        if room:
            return min(room, key=self._load)
        return self._new_node(t)

    def _want(self, t, count: int = 1):
        """Build weightless A nodes (in parallel) until ``count`` are warming."""
        self.short = True            # someone waits for room: keep the spares
        while len(self.warming) < count and self.nodes() < self.hw.max_nodes:
            self.warming.append(t + self.hw.a_build)

    def admit(self, req, prompt, t):
        free = sum(max(0, self.cth - self._load(n)) for n in self.nodes_kv) + self.ready * self.cth
        if free < prompt:
            self._want(t, math.ceil((prompt - free) / self.cth))
            return False
        left = prompt
        while left > 0 or req not in self.tail:
            node = self._room_node(t)
            k = min(left, self.cth - self._load(node))
            node[req] = node.get(req, 0) + k
            left -= k
            self.tail[req] = node
        return True

    def tick(self, t, dt, margin):
        hw = self.hw
        for r in [x for x in self.warming if x <= t]:
            self.warming.remove(r)
            self.ready += 1
        # predictive prewarm: aggregate fill horizon of the open nodes vs the build time
        active = len(self.tail)
        room = sum(max(0, self.cth - self._load(n)) for n in self.nodes_kv) + self.ready * self.cth
        rate = active / max(1e-9, self.tpot())                         # tokens / s
        if active and room / rate < 2 * hw.a_build + dt:
            self._want(t)
        # release empty nodes (requests holding their ranges have finished), keep one spare
        for node in [n for n in self.nodes_kv if not n and all(v is not n for v in self.tail.values())]:
            self.nodes_kv = [n for n in self.nodes_kv if n is not node]
        # a spare that the fill horizon no longer needs goes back to the pool
        if not self.short and self.ready and \
                (room - self.ready * self.cth) / max(rate, 1e-9) > 4 * hw.a_build + dt:
            self.ready -= 1
        self.short = False

    def running(self, req):
        """May ``req`` decode this tick? A full tail moves to an A node with room (a prewarmed
        one is published: a route update); with none ready the request stalls and a build
        starts."""
        if self._load(self.tail[req]) < self.cth:
            return True
        new = self._room_node(self._now) if self.ready or any(
            self._load(n) < self.cth for n in self.nodes_kv) else None
        if new is None:
            self._want(self._now)
            return False
        self.tail[req] = new
        new.setdefault(req, 0)
        return True

    def grow(self, req, k):
        node = self.tail[req]
        node[req] = node.get(req, 0) + k

    def extend(self, req, k, t):
        """A new turn's prompt tokens: appended from the tail, spilling to the least-loaded
        A nodes with room; waits (False) while the nodes it needs are being built."""
        free = sum(max(0, self.cth - self._load(n)) for n in self.nodes_kv) + self.ready * self.cth
        if free < k:
            self._want(t, math.ceil((k - free) / self.cth))
            return False
        while k > 0:
            node = self.tail[req]
            if self._load(node) >= self.cth:
                node = self._room_node(t)
                self.tail[req] = node
            put = min(k, self.cth - self._load(node))
            node[req] = node.get(req, 0) + put
            k -= put
        return True

    def kv_tokens(self):
        return sum(sum(n.values()) for n in self.nodes_kv)

    def finish(self, req):
        for n in self.nodes_kv:
            n.pop(req, None)
        self.tail.pop(req, None)

    def tpot(self):
        hw = self.hw
        t_a = max([self._load(n) for n in self.nodes_kv], default=0) * hw.kv_per_token / hw.bw
        return max(hw.t_w, t_a) + hw.overhead


STRATEGIES = ("static-under", "static-over", "full-instance", "kernelflume")


@dataclass
class Result:
    strategy: str
    p99_tpot: float
    slo_attainment: float
    dollars_per_mtok: float
    node_hours: float
    output_tokens: int
    mean_nodes: float
    timeline: list = field(default_factory=list)     # (t, nodes, kv tokens)
    slo: float = 0.0

    def row(self):
        return {"strategy": self.strategy, "p99_tpot_ms": round(self.p99_tpot * 1e3, 1),
                "slo_%": round(100 * self.slo_attainment, 1),
                "$/Mtok": round(self.dollars_per_mtok, 3), "node_h": round(self.node_hours, 2),
                "mean_nodes": round(self.mean_nodes, 2)}


def _demand_profile(turns, hw: Hardware, dt: float):
    """KV demand (tokens) over time with unlimited capacity at a fixed TPOT of 0.8 x SLO
    (sizing of the static pools only)."""
    pool = _Pool(hw, 10 ** 6, False, fixed_tpot=0.8 * hw.slo)
    res = _simulate(turns, pool, hw, dt, record=True)
    return [kv for _, _, kv in res.timeline]


def _simulate(turns, system, hw: Hardware, dt: float, record: bool = False, name: str = "") -> Result:
    """Tick-based replay. A session is admitted (FIFO, at most ``hw.batch`` at once) at its
    first turn and keeps its KV across turns (cross-turn cache hits, §2.1) until its last turn
    ends; turn i+1 starts at max(arrival, end of turn i) by extending the session's KV to its
    prompt (``system.extend``; it waits if the system has no room yet)."""
    by_session: dict = {}
    for t in sorted(turns, key=lambda x: (x.arrival, x.session)):
        by_session.setdefault(t.session, []).append(t)
    order = sorted(by_session, key=lambda s: (by_session[s][0].arrival, s))
    arrived, queue, active = 0, [], {}
    samples: list = []
    tokens, node_s, t, ticks, done = 0, 0.0, 0.0, 0, 0
    timeline = []
    last_tokens, last_active, last_progress = -1, -1, 0.0
    while done < len(order):
        system._now = t
        while arrived < len(order) and by_session[order[arrived]][0].arrival <= t:
            queue.append(order[arrived])
            arrived += 1
        while queue and len(active) < hw.batch:            # FIFO admission, waits when full
            s = queue[0]
            first = by_session[s][0]
            if not system.admit(s, max(1, first.prompt_tokens), t):
                break
            queue.pop(0)
            # turn index, remaining outputs (0 = between turns), fraction, last token, stalled, kv
            active[s] = [0, first.output_tokens, 0.0, t, False, max(1, first.prompt_tokens)]
        for s, st in active.items():                       # next turns: extend the context
            turns_s = by_session[s]
            if st[1] == 0 and turns_s[st[0] + 1].arrival <= t:
                nt = turns_s[st[0] + 1]
                grow = max(0, nt.prompt_tokens - st[5])
                if system.extend(s, grow, t):
                    st[0] += 1
                    st[1] = nt.output_tokens
                    st[2], st[3], st[4] = 0.0, t, False
                    st[5] += grow
        decoding = [s for s, st in active.items() if st[1] > 0]
        system.tick(t, dt, margin=len(decoding) * dt / max(1e-3, system.tpot()))
        tp = system.tpot()
        for s in decoding:
            st = active[s]
            if not system.running(s):
                st[4] = True
                continue
            st[2] += dt / tp
            k = min(st[1], int(st[2]))
            if k <= 0:
                continue
            st[2] -= k
            if st[4]:                                      # first token after a stall/preemption
                gap = max(tp, t + tp - st[3])              # counts as gap/SLO missed steps
                samples.append((gap, max(1, int(gap / hw.slo))))
                k_rest, st[4] = k - 1, False
            else:
                k_rest = k
            if k_rest:
                samples.append((tp, k_rest))
            st[3] = t + dt
            system.grow(s, k)
            st[1] -= k
            st[5] += k
            tokens += k
            if st[1] == 0 and st[0] == len(by_session[s]) - 1:
                system.finish(s)
                done += 1
        for s in [s for s, st in active.items() if st[1] == 0 and st[0] == len(by_session[s]) - 1]:
            del active[s]
        node_s += system.nodes() * dt
        if record or ticks % 20 == 0:
            timeline.append((t, system.nodes(), system.kv_tokens()))
        if tokens != last_tokens or len(active) != last_active:
            last_tokens, last_active, last_progress = tokens, len(active), t
        elif t - last_progress > 600.0:
            raise RuntimeError(f"{name or type(system).__name__}: no progress for 600 s of simulated "
                               f"time at t={t:.0f} s ({len(active)} sessions active, "
                               f"{len(queue)} waiting, {system.nodes()} nodes)")
        t += dt
        ticks += 1
    samples.sort()
    n = sum(c for _, c in samples)
    acc, p99 = 0, samples[-1][0] if samples else 0.0
    for v, c in samples:
        acc += c
        if acc >= 0.99 * n:
            p99 = v
            break
    ok = sum(c for v, c in samples if v <= hw.slo + 1e-12)
    hours = node_s / 3600
    return Result(name, p99, ok / max(1, n), hours * hw.price / max(1e-12, tokens / 1e6), hours,
                  tokens, node_s / max(1e-9, t), timeline, hw.slo)


def replay(turns, strategy: str, hw: Hardware = A6000_8B, dt: float = 0.25, demand=None) -> Result:
    """Replay ``turns`` under one strategy (see ``STRATEGIES``)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r} unknown, expected one of {STRATEGIES}")
    if not turns:
        raise ValueError("empty trace")
    biggest = max(turns, key=lambda t: t.prompt_tokens + t.output_tokens)
    need = biggest_need = biggest.prompt_tokens + biggest.output_tokens
    limit = (hw.max_nodes - 1) * hw.c_thresh_tokens if strategy == "kernelflume" \
        else hw.max_nodes * hw.cap_weighted
    if need > limit:
        raise ValueError(f"session {biggest.session!r} needs {need} KV tokens, more than "
                         f"max_nodes={hw.max_nodes} nodes hold ({limit}) under {strategy}")
    if strategy == "kernelflume":
        return _simulate(turns, _KernelFlume(hw), hw, dt, name=strategy)
    if strategy == "full-instance":
        return _simulate(turns, _Pool(hw, 1, True), hw, dt, name=strategy)
    demand = demand if demand is not None else _demand_profile(turns, hw, dt)
    busy = [d for d in demand if d > 0]
    need = (sum(busy) / len(busy)) if strategy == "static-under" else max(demand)
    # at least enough ranks to hold the largest session (else it could never run)
    n = max(1, math.ceil(need / hw.cap_weighted), math.ceil(biggest_need / hw.cap_weighted))
    return _simulate(turns, _Pool(hw, n, False), hw, dt, name=strategy)


def replay_all(turns, hw: Hardware = A6000_8B, dt: float = 0.25) -> list:
    demand = _demand_profile(turns, hw, dt)
    return [replay(turns, s, hw, dt, demand) for s in STRATEGIES]


def format_table(results) -> str:
    rows = [r.row() for r in results]
    cols = list(rows[0])
    w = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    line = lambda r: "  ".join(str(r[c]).rjust(w[c]) if c != "strategy" else str(r[c]).ljust(w[c])
                              for c in cols)
    return "\n".join([line({c: c for c in cols})] + [line(r) for r in rows])


def plot_results(results, path):
    """Bar charts (p99 TPOT, SLO attainment, $/Mtok) and node count over time, as a PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 4, figsize=(17, 3.6))
    names = [r.strategy for r in results]
    for a, vals, title in ((ax[0], [r.p99_tpot * 1e3 for r in results], "p99 TPOT (ms)"),
                           (ax[1], [100 * r.slo_attainment for r in results], "SLO attainment (%)"),
                           (ax[2], [r.dollars_per_mtok for r in results], "$/Mtok")):
        a.bar(names, vals, color=["#999", "#666", "#c84", "#28a"][:len(vals)])
        a.set_title(title)
        a.tick_params(axis="x", rotation=25)
    ax[0].set_yscale("log")
    ax[0].axhline(results[0].slo * 1e3, color="r", lw=0.8)          # the TPOT SLO
    for r in results:
        if r.timeline:
            ax[3].plot([x[0] for x in r.timeline], [x[1] for x in r.timeline], label=r.strategy)
    ax[3].set_title("active nodes")
    ax[3].set_xlabel("s")
    ax[3].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
