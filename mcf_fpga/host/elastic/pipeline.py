"""Microbatch kernel pipelining and query-first dispatch: the model and a discrete-event schedule.

Model (KernelFlume §5.2): with T_p the W-side projection, T_f the W-side post-attention work
(merge, W_O, FFN) and T_A(N_A) the A-side attention stage (compute + communication),

    G_pipe = (T_p + T_A + T_f) / max(T_p + T_f, T_A)          (upper bound 2x at T_A = T_p+T_f)

and the exposed per-layer time is max(T_p + T_f, T_A) (§4.2 uses it for the SLO budget).

Schedule (``schedule``): per microbatch k and layer l the tasks are

    W : pq(k,l)   Q projection           after post(k,l-1)
    W : pkv(k,l)  K/V projection         after pq(k,l)
    A_j: att(k,l,j) attention on node j   non-tail: Q arrives (pq end + q_lat) [query-first]
                                          tail: also K_new/V_new (pkv end + kv_lat)
                                          without query-first Q leaves after pkv
    W : post(k,l) merge + W_O + FFN      after every att(k,l,j) end + ret_lat

W and each A node execute one task at a time, non-preemptively; a list scheduler starts, at
each decision, the task with the earliest possible start (ties: projections before
post-attention work so A nodes are fed first (§5.2: W runs post(mu_{k-1}) while A attends
mu_k), then lower layer, lower microbatch, task order). ``serial=True`` runs microbatches one after another with no
overlap (the serial reference of §5.2). Costs are integer cycles. ``rtl_stage_times`` measures
T_p+T_f and T_A on an RTL run instead (scripts/bench_elastic.py compares both). Timing changes only, never results: the schedule orders the same
tasks with the same dependencies.
"""
from __future__ import annotations

from dataclasses import dataclass

from mcf_fpga.host.program_ops import DecodeAttend, DecodeFinish, Recv

__all__ = ["g_pipe", "OpCosts", "Schedule", "schedule", "measured_g_pipe", "PAPER_A6000_COSTS",
           "rtl_stage_times"]


def g_pipe(t_p: float, t_a: float, t_f: float) -> float:
    """§5.2: G_pipe = (T_p + T_A + T_f) / max(T_p + T_f, T_A)."""
    if min(t_p, t_a, t_f) < 0 or max(t_p + t_f, t_a) <= 0:
        raise ValueError(f"costs must be >= 0 with a non-zero stage, got T_p={t_p} T_A={t_a} T_f={t_f}")
    return (t_p + t_a + t_f) / max(t_p + t_f, t_a)


@dataclass(frozen=True)
class OpCosts:
    """Per (microbatch, layer) task costs in cycles. ``attn[j]`` is A node j's attention over
    its ranges for one microbatch; node ``tail`` also appends K_new/V_new (included in its
    cost). ``q_lat``/``kv_lat``/``ret_lat``: W->A Q, W->A K/V and A->W partial latencies."""
    proj_q: int
    proj_kv: int
    post: int
    attn: tuple
    tail: int = 0
    q_lat: int = 0
    kv_lat: int = 0
    ret_lat: int = 0
    layers: int = 1
    microbatches: int = 2

    def __post_init__(self):
        for f in ("proj_q", "proj_kv", "post", "q_lat", "kv_lat", "ret_lat"):
            if getattr(self, f) < 0:
                raise ValueError(f"OpCosts.{f}={getattr(self, f)} must be >= 0")
        if not self.attn or min(self.attn) < 0:
            raise ValueError(f"OpCosts.attn={self.attn} must be non-empty, each >= 0")
        if not 0 <= self.tail < len(self.attn):
            raise ValueError(f"OpCosts.tail={self.tail} must be in 0..{len(self.attn) - 1}")
        if self.layers < 1 or self.microbatches < 1:
            raise ValueError("OpCosts.layers and .microbatches must be >= 1")

    @property
    def t_p(self) -> int:
        return self.proj_q + self.proj_kv

    @property
    def t_f(self) -> int:
        return self.post

    @property
    def t_a(self) -> int:
        """A-side stage of one microbatch (§5.2 T_A(N_A): attention + communication), as seen
        from the end of the W-side projection in the synchronous (no query-first) order."""
        return max(self.q_lat, self.kv_lat) + max(self.attn) + self.ret_lat

    def predicted(self) -> float:
        return g_pipe(self.t_p, self.t_a, self.t_f)


@dataclass
class Schedule:
    tasks: dict            # (kind, k, l, j) -> (resource, start, end)
    makespan: int


def schedule(c: OpCosts, query_first: bool = True, serial: bool = False) -> Schedule:
    """List-schedule all tasks (see module docstring); returns start/end of every task."""
    nA = len(c.attn)
    tasks, deps = {}, {}
    order = {"pq": 0, "pkv": 1, "att": 2, "post": 3}
    for k in range(c.microbatches):
        for l in range(c.layers):
            prev = [(("post", k, l - 1, 0), 0)] if l else []
            if serial and l == 0 and k:
                prev = [(("post", k - 1, c.layers - 1, 0), 0)]
            tasks[("pq", k, l, 0)] = ("W", c.proj_q)
            deps[("pq", k, l, 0)] = prev
            tasks[("pkv", k, l, 0)] = ("W", c.proj_kv)
            deps[("pkv", k, l, 0)] = [(("pq", k, l, 0), 0)]
            for j in range(nA):
                qsrc = ("pq", k, l, 0) if query_first else ("pkv", k, l, 0)
                d = [(qsrc, c.q_lat)]
                if j == c.tail:
                    d.append((("pkv", k, l, 0), c.kv_lat))
                tasks[("att", k, l, j)] = (f"A{j}", c.attn[j])
                deps[("att", k, l, j)] = d
            tasks[("post", k, l, 0)] = ("W", c.post)
            deps[("post", k, l, 0)] = [(("att", k, l, j), c.ret_lat) for j in range(nA)]
    done: dict = {}
    free: dict = {}
    pending = set(tasks)
    while pending:
        best = None
        for t in pending:
            if any(d not in done for d, _ in deps[t]):
                continue
            res, cost = tasks[t]
            ready = max([done[d][2] + lat for d, lat in deps[t]], default=0)
            est = max(ready, free.get(res, 0))
            key = (est, t[0] == "post", t[2], t[1], order[t[0]], t[3])
            if best is None or key < best[0]:
                best = (key, t, res, est, cost)
        _, t, res, est, cost = best
        done[t] = (res, est, est + cost)
        free[res] = est + cost
        pending.discard(t)
    return Schedule(done, max(e for _, _, e in done.values()))


def measured_g_pipe(c: OpCosts, query_first: bool = True) -> float:
    """Pipelined-to-serial throughput ratio from the schedule: the serial reference runs the
    same microbatches one after another without query-first dispatch."""
    return schedule(c, query_first=False, serial=True).makespan / schedule(c, query_first).makespan


# Per-op costs for the benchmark (cycles at 1 GHz = ns). The paper does not publish per-op
# times; these follow a roofline of its A6000 testbed (§6.1: 768 GB/s, Llama-3.1-8B FP16,
# 32 layers) for one microbatch: W_Q 4096x4096 (33.5 MB) 43.7 us, W_K+W_V 2x4096x1024
# (16.8 MB) 21.8 us, W_O 43.7 us + FFN 3x4096x14336 (352 MB) 458.8 us + merge ~2 us; two A
# nodes sized by C_thresh so the A stage is ~0.9 of the W stage (beta_slo = 0.9); UCX-like
# latencies Q 10 us, K/V 8 us, partials 12 us.
PAPER_A6000_COSTS = OpCosts(proj_q=43_700, proj_kv=21_800, post=504_500, attn=(480_000, 490_000),
                            tail=1, q_lat=10_000, kv_lat=8_000, ret_lat=12_000, layers=32,
                            microbatches=2)


def rtl_stage_times(program, serial) -> tuple:
    """(T_W, T_A) in cycles per layer, measured from an RTL run (``run_rtl``) of ``program``
    without pipelining, in which every non-leader decode node holds ranges of every request.

    T_A, per layer and token: from the first packet of its query reaching an A node (as the
    A node's host collects it) to the last merged-partial packet reaching the leader (the
    attention stage as W sees it: both ATT passes, both reductions, the network); averaged.
    T_W = decode_cycles / (decode tokens x layers) - T_A: the W-side work per layer
    (projections, merge finish, W_O, FFN, and the head's share). Chunk-granular (the host
    collects packets every ``chunk`` cycles)."""
    lead = program.leader
    a_nodes = [n for n, ops in enumerate(program.ops) if n != lead and any(isinstance(o, DecodeAttend) for o in ops)]
    merges = sum(isinstance(op, DecodeFinish) for op in program.ops[lead])
    if not a_nodes or not merges:
        raise ValueError("rtl_stage_times needs a decode with holders besides the leader")
    firsts = []
    for n in a_nodes:
        sends = sum(isinstance(op, Recv) and op.what == "q" for op in program.ops[n])
        qs = [c for c, k, _ in serial.rx_log[n] if k == "q"]
        if sends != merges or len(qs) % sends:
            raise ValueError(f"node {n} receives {sends} queries for {merges} merges: every A node must "
                             f"hold ranges of every request")
        per = len(qs) // sends
        firsts.append(qs[::per])
    sums = [c for c, k, _ in serial.rx_log[lead] if k == "sum"]
    per = len(sums) // merges
    t_a = [sums[(k + 1) * per - 1] - min(f[k] for f in firsts) for k in range(merges)]
    T_A = sum(t_a) / merges
    tokens = sum(k - 1 for _n, k in program.reqs)
    T_layer = serial.decode_cycles / (tokens * program.model.num_layers)
    return T_layer - T_A, T_A
