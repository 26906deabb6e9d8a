"""MARS: memory-aware replication and scheduling of chunked prefill (MCF §4), compiled to a
``host.program.Program``.

Equations -> code (MCF paper numbering):

* (1) ``m_token``: KV bytes per token over all layers, 2 L H_kv d b (+ one exponent byte per
  (token, KV head) for K and V, the hardware format of docs/numerics.md).
* (3)-(4) ``M_chunk = B * M_token``, ``M_hist(c) = c * M_chunk``.
* (5)/(28) ``B * M_token <= M_buf`` (``HardwareConfig.kv_buffer_bytes``): checked in
  ``check_chunk`` (a chunk beyond the buffer is refused).
* (6) ``t_attn``, (7) ``t_prop`` (H_prop = edges of the multicast tree, D_crit = its depth),
  (8) ``choose_chunk``: the smallest B (a multiple of the golden block) with
  ``T_attn(B, 1) >= gamma * T_prop(B, r_1)`` that fits the buffer.
* (9)-(10)/(27) per-node KV memory <= S_node: enforced *per node* (stronger than the average of
  eq. 9) by admission in ``plan``; the executors' KV pools (golden.kvpool) have budget S_node.
  With a KV region (``ClusterConfig.from_region``) admission counts the region's slots (a unit
  of one layer = one slot, ``host.kvcapacity``) and S_node = n_slots x slot_bytes.
* (11) ``r_mem``, (12), (13) reuse ``R_c = C - c``, (15) ``r_reuse``, (16) ``r``:
  ``replica_factors``.
* (14) break-even: a replica is made only on a node that will read it (h_save > 0); its
  lifetime ends at that node's last read before the memory bound r_mem(s) (applied to all
  history, eq. 11) drops the block's active factor below the replica's rank. With
  ``MarsParams.eq14`` the break-even is the paper's, on the topology's hop counts: the replica is
  made only when the hops its reads would otherwise cost (each read fetched from the nearest copy
  already planned) exceed the links the copy adds to the block's multicast tree,
  sum_reads h_save > h_copy (the reuse window is the node's reads, at most C - c).
* (17)-(22) communication volumes: ``Program.traffic()`` counts payload bytes x links crossed
  (route-tree edges for multicast, hop count for unicast); ``predicted_volume`` evaluates
  eqs. 18-21 for comparison.
* (23)-(25) TTFT: ``host.perfmodel`` (calibrated on the RTL). (26) the objective is what eq. 8 and eq. 16
  approximate; ``host.mars_search`` solves it by search over chunk size, placement, replica cap
  and the eq. 14 rule, each candidate timed by the performance model.
* (29) r(C) = 1: the last block has reuse 0 so r_reuse(C) = 1; every replica is drained by its
  holder's last read, so at ``prefill_done`` each node holds exactly its owner units
  (``plan`` asserts it on the plan, the executors check it on the pools).

Progressive Replica Convergence: a replica is *valid* from arrival, becomes *draining* at the
start of its last reading chunk (``drain`` after that chunk's ``acquire``: still readable by
the in-flight chunk, excluded from later scheduling) and is freed by the chunk's ``release``.

Placement: chunk c is computed on node ``o[c]`` (its owner: the final shard), ``c mod N`` by default
(``MarsParams.placement``: also a snake order, LPT and a fold of heavy with light chunks, which
balance the causal attention work; ``partial_first`` computes a partial round first, so the node
of the last chunk is not one with an extra chunk;
consecutive chunks on one node advance layer by layer together). Replica
targets are the future consumers of the block nearest to the owner on the topology (ties: the
sooner consumer). A chunk's historical blocks that are not local are prefetched from the
nearest holder (owner or a valid replica), sent when the holder reaches the same layer of its
own previous chunk (ahead of use), streamed through the propagation buffer (``stage``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from mcf_fpga.spec.meta import MetaOp

from .config import ClusterConfig, HardwareConfig, ModelConfig, kv_unit_bytes
from .kvcapacity import node_pool, region_slot_tokens
from .program import Program, ProgramBuilder, add_decode, decode_leader, local_meta
from .program_ops import Acquire, Attend, Drain, Embed, Finish, Logits, Mark, Project, Release, Unstage
from .tp import DEFAULT_TILE

__all__ = ["MarsParams", "PLACEMENTS", "placement", "m_token", "t_attn", "t_prop", "choose_chunk", "check_chunk", "replica_factors",
           "check_fits", "check_lengths", "plan", "compile_prefill", "MarsPlan", "predicted_volume"]


PLACEMENTS = ("round_robin", "snake", "rotated", "lpt", "fold")


@dataclass(frozen=True)
class MarsParams:
    """``alpha``: reuse aggressiveness (eq. 15); ``gamma``: overlap safety factor (eq. 8);
    ``chunk``: fixed chunk size B in tokens (None: eq. 8); ``min_chunks_per_node``: cap on the
    eq. 8 chunk so every node computes at least this many chunks (``choose_chunk``);
    ``placement``: which node computes (and owns) each chunk (:func:`placement`, with
    ``partial_first``); ``replica_cap``: r(c) <= cap for every chunk (None: eq. 16 alone; 1: no
    replicas, every history block streamed from its nearest copy); ``eq14``: make a replica only
    when the paper's break-even (eq. 14) holds on the real hop distances (module docstring);
    ``prefill_nodes``: prefill (and own the KV) on nodes 0..k-1 only (the
    others idle: on slow links a smaller group can be faster)."""
    alpha: float = 0.5
    gamma: float = 1.0
    chunk: int | None = None
    min_chunks_per_node: int = 2
    placement: str = "round_robin"
    partial_first: bool = False
    prefill_nodes: int | None = None
    replica_cap: int | None = None
    eq14: bool = False

    def __post_init__(self):
        if not self.alpha >= 0:
            raise ValueError(f"MarsParams.alpha={self.alpha!r}, expected >= 0")
        if not self.gamma > 0:
            raise ValueError(f"MarsParams.gamma={self.gamma!r}, expected > 0")
        if not isinstance(self.min_chunks_per_node, int) or self.min_chunks_per_node < 1:
            raise ValueError(f"MarsParams.min_chunks_per_node={self.min_chunks_per_node!r}, expected >= 1")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"MarsParams.placement={self.placement!r}, expected one of {PLACEMENTS}")
        if self.chunk is not None and (not isinstance(self.chunk, int) or self.chunk <= 0):
            raise ValueError(f"MarsParams.chunk={self.chunk!r}, expected a positive integer")
        for name in ("replica_cap", "prefill_nodes"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"MarsParams.{name}={v!r}, expected None or an integer >= 1")

    def owners(self, C: int, N: int) -> list:
        """Owner node of each of C chunks on N nodes (:func:`placement`)."""
        return placement(C, N, self.placement, partial_first=self.partial_first)


def placement(C: int, N: int, kind: str = "round_robin", *, partial_first: bool = False) -> list:
    """Owner node of each of the C chunks (a node computes its chunks in ascending order).

    * ``round_robin``: chunk c on node c mod N;
    * ``snake``: rounds of N chunks alternate direction (0..N-1, N-1..0, ...);
    * ``rotated``: round r starts at node r * ceil(N / R) (R = number of rounds);
    * ``lpt``: heaviest chunk first (a chunk's causal attention grows with c) onto the least
      loaded node that still has room for ceil(C / N) chunks;
    * ``fold``: chunks paired heaviest with lightest over the whole prompt (c with C-1-c), pairs
      dealt to the nodes in turn (a full node passes its turn on: at most ceil(C / N) each).

    ``partial_first``: when N does not divide C, the C mod N first chunks form a partial round
    on the nodes least loaded by the rest (``kind`` places the other chunks, in whole rounds), so
    the last chunk's node is never one with an extra chunk."""
    r = C % N
    if partial_first and r and C > N:
        tail = placement(C - r, N, kind)
        load = [sum(c + 1 for c in range(C - r) if tail[c] == n) for n in range(N)]
        head = sorted((n for n in range(N) if n != tail[-1]), key=lambda n: (load[n], n))[:r]
        return sorted(head) + tail
    rounds = -(-C // N)
    if kind == "round_robin":
        return [c % N for c in range(C)]
    if kind == "snake":
        return [c % N if (c // N) % 2 == 0 else N - 1 - c % N for c in range(C)]
    if kind == "rotated":
        s = -(-N // rounds)
        return [(c + (c // N) * s) % N for c in range(C)]
    if kind == "lpt":
        load, cnt, o = [0] * N, [0] * N, [0] * C
        for c in reversed(range(C)):
            n = min((n for n in range(N) if cnt[n] < rounds), key=lambda n: (load[n], n))
            o[c], load[n], cnt[n] = n, load[n] + c + 1, cnt[n] + 1
        return o
    if kind == "fold":
        seq = [x for m in range(C // 2) for x in (m, C - 1 - m)] + ([C // 2] if C % 2 else [])
        cnt, o, n = [0] * N, [0] * C, 0
        for j, c in enumerate(seq):
            if j and j % 2 == 0:
                n = (n + 1) % N
            while cnt[n] >= rounds:
                n = (n + 1) % N
            o[c], cnt[n] = n, cnt[n] + 1
        return o
    raise ValueError(f"MarsParams.placement={kind!r}, expected one of {PLACEMENTS}")


def m_token(model: ModelConfig, kv_bits: int = 8) -> int:
    """Eq. (1): KV-cache bytes per token over all L layers."""
    return model.num_layers * kv_unit_bytes(model, 1, kv_bits)


def t_attn(model: ModelConfig, hw: HardwareConfig, nodes: int, B: int, c: int) -> float:
    """Eq. (6): attention cycles of chunk c (1-indexed), 4 L H_q d B (cB) / (N P_node), with
    P_node = 2 * macs_per_cycle operations per cycle."""
    return 4 * model.num_layers * model.num_heads * model.head_dim * B * (c * B) / (
        nodes * 2 * hw.macs_per_cycle)


def _tree(topo, src: int, dsts) -> tuple:
    edges, depth = set(), 0
    for d in dsts:
        p = topo.path(src, d)
        depth = max(depth, len(p) - 1)
        edges.update(zip(p, p[1:]))
    return len(edges), depth


def nearest(topo, src: int, k: int) -> list:
    """The k nodes nearest to ``src`` in hops (ties: lower id)."""
    others = sorted((len(topo.path(src, n)) - 1, n) for n in range(topo.n) if n != src)
    return [n for _, n in others[:k]]


def t_prop(model: ModelConfig, hw: HardwareConfig, topo, B: int, r: int, kv_bits: int = 8) -> float:
    """Eq. (7): M_chunk H_prop(r) / BW_eff + D_crit(r) tau_link, worst case over source nodes;
    H_prop = links of the multicast tree to the r-1 nearest nodes, D_crit = its depth."""
    if r <= 1:
        return 0.0
    worst = 0.0
    for s in range(topo.n):
        h, dcrit = _tree(topo, s, nearest(topo, s, r - 1))
        worst = max(worst, B * m_token(model, kv_bits) * h / hw.link_bytes_per_cycle
                    + dcrit * hw.link_latency_cycles)
    return worst


def replica_factors(C: int, N: int, S_node: int, M_chunk: int, alpha: float, cap: int | None = None) -> list:
    """Eqs. (11), (15), (16) for chunks c = 1..C: list of ``(r_mem, r_reuse, r)``; ``cap``
    bounds r (``MarsParams.replica_cap``)."""
    top = N if cap is None else min(N, cap)
    out = []
    for c in range(1, C + 1):
        r_mem = (N * S_node) // (c * M_chunk)                                     # (11)
        r_reuse = max(1, min(N, 1 + math.floor(alpha * (C - c))))                 # (13), (15)
        out.append((r_mem, r_reuse, max(1, min(top, r_mem, r_reuse))))           # (16); (12)
    return out


def check_chunk(model, hw, B: int, block: int, kv_bits: int = 8):
    """Eq. (5): refuse a chunk whose KV does not fit the propagation buffer, or that is not a
    whole number of golden merge blocks."""
    if B % block:
        raise ValueError(f"chunk size B={B} must be a multiple of the KV merge block={block} tokens")
    need = B * m_token(model, kv_bits)
    if need > hw.kv_buffer_bytes:
        raise ValueError(f"chunk size B={B} needs B*M_token={need} bytes of propagation buffer, exceeds "
                         f"HardwareConfig.kv_buffer_bytes={hw.kv_buffer_bytes} (eq. 5)")


def choose_chunk(model, cluster: ClusterConfig, hw, prompt_len: int, block: int, kv_bits: int = 8,
                 params: MarsParams = MarsParams()) -> dict:
    """Eq. (8): ``B_eq8`` = the smallest B (multiple of ``block``) with
    T_attn(B, 1) >= gamma T_prop(B, r_1) and B M_token <= M_buf (eq. 5); when no B hides
    propagation, the largest B that fits the buffer (``hidden=False``).

    The chunk used, ``B``, is ``B_eq8`` capped so every node computes at least
    ``params.min_chunks_per_node`` chunks (``capped=True``): chunks run one per node and
    pipeline across nodes, so a chunk larger than S / (k N) leaves nodes idle. Eq. (6) divides by N
    assuming exactly that parallelism; the cap keeps the assumption true (a documented addition
    to eq. 8, see docs/mars.md)."""
    topo = cluster.make_topology()
    mt = m_token(model, kv_bits)
    b_buf = (hw.kv_buffer_bytes // mt) // block * block
    if b_buf < block:
        raise ValueError(f"one KV merge block ({block} tokens, {block * mt} bytes) exceeds "
                         f"HardwareConfig.kv_buffer_bytes={hw.kv_buffer_bytes} (eq. 5)")
    b_max = min(b_buf, -(-prompt_len // block) * block)
    if cluster.kv_region is not None:       # a chunk's unit of one layer must fit one slot
        per = region_slot_tokens(model, cluster.kv_region, kv_bits)
        if per < block:
            raise ValueError(f"a slot of the KV region holds {per} tokens (ClusterConfig.kv_region.slot_rows="
                             f"{cluster.kv_region.slot_rows}), less than one KV merge block of {block}")
        b_max = min(b_max, per // block * block)
    out = None
    for B in range(block, b_max + 1, block):
        C = -(-prompt_len // B)
        pool = node_pool(model, cluster, B, kv_bits)
        r1 = replica_factors(C, cluster.nodes, pool.s_node, model.num_layers * pool.slot_bytes,
                             params.alpha, params.replica_cap)[0][2]
        ta, tp = t_attn(model, hw, cluster.nodes, B, 1), t_prop(model, hw, topo, B, r1, kv_bits)
        if ta >= params.gamma * tp:
            out = {"B_eq8": B, "hidden": True, "t_attn": ta, "t_prop": tp, "r1": r1}
            break
    if out is None:
        out = {"B_eq8": b_max, "hidden": False}
    cap = max(block, (prompt_len // (params.min_chunks_per_node * cluster.nodes)) // block * block)
    out["B"] = min(out["B_eq8"], cap)
    out["capped"] = out["B"] < out["B_eq8"]
    return out


def check_fits(model, cluster: ClusterConfig, prompt_len: int, max_new_tokens: int, kv_bits: int,
               owner_slots: int, unit_tokens: int, block: int, what: str = "prompt"):
    """Refuse a prompt whose owner-only (fully sharded) KV does not fit a node: ``owner_slots``
    is the largest per-node count of owner units (all layers) of the prompt, each at most
    ``unit_tokens`` tokens; decode adds its golden blocks round robin (one unit per layer each).

    Bytes (no ``cluster.kv_region``): owner units cost ``kv_unit_bytes(unit_tokens)``, decode
    blocks ``kv_unit_bytes(block)``, against ``kv_bytes_per_node``. Region: every unit costs one
    slot, against the region's ``n_slots`` (the error names the region)."""
    dec_blocks = max(0, -(-(prompt_len + max_new_tokens - 1) // block) - -(-prompt_len // block))
    dec_slots = -(-dec_blocks // cluster.nodes) * model.num_layers
    pool = node_pool(model, cluster, max(unit_tokens, block), kv_bits)
    if pool.region is not None:
        need = owner_slots + dec_slots
        if need > pool.n_slots:
            raise ValueError(f"{what} of {prompt_len} tokens (+{max_new_tokens} new) needs {need:,} slots per node "
                             f"({owner_slots:,} owner + {dec_slots:,} decode) even fully sharded over "
                             f"{cluster.nodes} nodes; {pool.limit}")
        return
    need = owner_slots * kv_unit_bytes(model, unit_tokens, kv_bits) + dec_slots * kv_unit_bytes(
        model, block, kv_bits)
    if need > cluster.kv_bytes_per_node:
        raise ValueError(f"{what} of {prompt_len} tokens (+{max_new_tokens} new) needs {need} bytes of KV on "
                         f"a node even fully sharded over {cluster.nodes} nodes, exceeds "
                         f"ClusterConfig.kv_bytes_per_node={cluster.kv_bytes_per_node}")


@dataclass
class MarsPlan:
    B: int
    C: int
    factors: list                 # per chunk (r_mem, r_reuse, r)
    holders: list                 # per block: [(node, k_first, k_last)] replica windows (chunk indices)
    fetches: list                 # (layer-independent) (block i, reader node, chunk k, source node)
    step_mem: list                # per step: per-node KV bytes (owner + live replicas), eq. 9-10;
    #                               C + 1 entries, the last one after prefill (owner-only)
    step_replica: list            # per step: mean active replica factor over generated blocks
    #                               (Fig. 4b); C + 1 entries, the last one after prefill (= 1, eq. 29)
    owner_mem: list               # per step: per-node owner-only bytes (Fig. 4a baseline)
    chunk_choice: dict = field(default_factory=dict)


def check_lengths(model: ModelConfig, prompt_len, max_new_tokens: int):
    """Refuse a prompt length that is not a positive integer or a request longer than the model's
    positions."""
    if not isinstance(prompt_len, int) or prompt_len <= 0:
        raise ValueError(f"prompt_len={prompt_len!r}, expected a positive integer")
    if prompt_len + max_new_tokens > model.max_position:
        raise ValueError(f"prompt_len + max_new_tokens = {prompt_len + max_new_tokens} exceeds "
                         f"ModelConfig.max_position={model.max_position}")


def plan(model: ModelConfig, cluster: ClusterConfig, hw: HardwareConfig, prompt_len: int,
         max_new_tokens: int = 0, *, kv_bits: int = 8, block: int = 16,
         params: MarsParams = MarsParams(), w_group=None, w_tile: int = DEFAULT_TILE) -> Program:
    """Plan MARS prefill (+ KV-stationary decode) and compile it to a Program.

    Decode is led by the node that computed the last chunk, or by ``w_group[0]`` when a
    tensor-parallel weight group ``w_group`` is given (``host.program.add_decode_requests``).

    Refuses, before any work, a chunk beyond the buffer (eq. 5) and a prompt that cannot fit even
    fully sharded (eq. 10 with r = 1); a cluster with more nodes than route-table entries is
    refused by ``ClusterConfig``. Multicast routes are allocated in the order first needed; once
    the table is full, further replica sets are sent as unicasts
    (``stats["route_fallbacks"]``)."""
    check_lengths(model, prompt_len, max_new_tokens)
    topo = cluster.make_topology()
    N = cluster.nodes
    if params.chunk is not None:
        check_chunk(model, hw, params.chunk, block, kv_bits)
        choice = {"B": params.chunk, "hidden": None}
    else:
        choice = choose_chunk(model, cluster, hw, prompt_len, block, kv_bits, params)
    b = ProgramBuilder(model, topo, block, kv_bits, cluster.route_table_size)
    pre = None if params.prefill_nodes is None else list(range(min(N, params.prefill_nodes)))
    units, o, mp = compile_prefill(b, cluster, prompt_len, max_new_tokens, choice["B"], params, nodes=pre)
    mp.chunk_choice = choice
    for n in range(N):
        b.add(n, Mark, name="prefill_done")
    leader = decode_leader(w_group, o[-1])
    add_decode(b, units, o, leader, tuple(range(N)), o[-1], prompt_len, max_new_tokens, block,
               w_group=w_group, w_tile=w_tile)
    pool = node_pool(model, cluster, mp.B, kv_bits)
    return Program("mars", model, topo, block, kv_bits, prompt_len, max_new_tokens, units, o, b.ops,
                   b.routes, leader, tuple(range(N)), pool.slot_bytes, pool.n_slots,
                   stats={"plan": mp, "routes": b.routes.next_id, "route_fallbacks": b.route_fallbacks},
                   wsplit=b.wsplit)


def compile_prefill(b: ProgramBuilder, cluster: ClusterConfig, prompt_len: int, max_new_tokens: int, B: int,
                    params: MarsParams = MarsParams(), *, nodes=None, unit_base: int = 0,
                    held_slots: dict | None = None) -> tuple:
    """Plan MARS chunked prefill of one prompt with chunk size ``B`` and emit its ops into ``b``
    (no ``prefill_done`` mark, no decode: the caller adds those). Returns ``(units, owner, plan)``:
    chunk c is unit ``unit_base + c`` in the ops, ``units[c]`` its token range and ``owner[c]``
    its node after prefill (every replica is drained by then: owner-only, eq. 29), ``plan`` the
    ``MarsPlan``.

    ``nodes``: the prefill nodes (default every node of ``b.topo``), in placement order: chunk c
    is computed on ``nodes[placement(C, len(nodes))[c]]``. Hop distances (replica targets,
    prefetch sources) are those of ``b.topo`` between these nodes, so the plan is sound on any
    subset of the topology (a message between two of them may cross other nodes, which forward
    it). ``plan.holders`` / ``plan.fetches`` name nodes of ``b.topo``; ``step_mem`` / ``owner_mem``
    list the prefill nodes in ``nodes`` order. ``held_slots`` {node: KV-pool slots of B-token
    units already held} (earlier requests' owner units): the memory admission counts them, and a
    prompt whose owner units do not fit next to them is refused."""
    model, topo, block, kv_bits = b.model, b.topo, b.block, b.kv_bits
    nodes = list(range(topo.n)) if nodes is None else list(nodes)
    if not nodes or len(set(nodes)) != len(nodes) or not all(0 <= n < topo.n for n in nodes):
        raise ValueError(f"MARS prefill nodes={nodes}: expected distinct nodes of 0..{topo.n - 1}")
    held = [(held_slots or {}).get(x, 0) for x in nodes]
    N, L = len(nodes), model.num_layers
    C = -(-prompt_len // B)
    o = params.owners(C, N)
    check_fits(model, cluster, prompt_len, max_new_tokens, kv_bits, -(-C // N) * L, B, block)
    pool = node_pool(model, cluster, B, kv_bits)
    slot, n_slots = pool.slot_bytes, pool.n_slots
    M_chunk = L * slot
    factors = replica_factors(C, N, pool.s_node, M_chunk, params.alpha, params.replica_cap)
    chunks_of = {n: [c for c in range(C) if o[c] == n] for n in range(N)}
    full = [n for n in range(N) if held[n] + L * len(chunks_of[n]) > n_slots]
    if full:
        n = full[0]
        raise ValueError(f"MARS prefill of {prompt_len} tokens: node {nodes[n]} would hold "
                         f"{held[n] + L * len(chunks_of[n])} KV slots of {slot} bytes (with {held[n]} of earlier "
                         f"requests), exceeds " + (pool.limit if pool.region is not None else
                                                   f"{pool.limit} ({n_slots} slots)"))
    hops = [[b.hops(nodes[a], nodes[c]) for c in range(N)] for a in range(N)]
    runs, run_start = _runs(o)
    # occupancy[n][s]: slots on node n during global step s (owner units so far + live replicas)
    occ = [[held[n] + L * sum(1 for k in chunks_of[n] if run_start[k] <= s) for s in range(C)] for n in range(N)]
    paths = ([[topo.path(nodes[a], nodes[c]) for c in range(N)] for a in range(N)] if params.eq14 else None)
    holders = _place_replicas(o, factors, chunks_of, hops, occ, L, n_slots, paths)
    rep_at = {(h, i, k) for i in range(C) for h, kf, kl in holders[i] for k in chunks_of[h] if kf <= k <= kl}
    prev = _prev_chunks(o, N)
    fetches = _plan_fetches(o, holders, hops, rep_at, prev)
    step_mem, step_rep, owner_mem = _plan_memory(o, holders, occ, held, L, slot, pool.s_node, nodes)
    units = [(c * B, min((c + 1) * B, prompt_len)) for c in range(C)]
    _emit_prefill(b, nodes, o, runs, units, holders, fetches, rep_at, prev, L, unit_base)
    mp = MarsPlan(B=B, C=C, factors=factors, step_mem=step_mem, step_replica=step_rep, owner_mem=owner_mem,
                  holders=[[(nodes[h], kf, kl) for h, kf, kl in hs] for hs in holders],
                  fetches=[(i, nodes[n], k, nodes[src]) for i, n, k, src in fetches])
    return units, [nodes[x] for x in o], mp


def _runs(o: list) -> tuple:
    """(runs, run_start): a run is consecutive chunks on one node (the turn of a snake placement):
    its chunks advance layer by layer together, so the next chunk's layer l waits only for the
    previous chunk's layer l (as between nodes), not for the whole previous chunk. Its owner units
    all exist from the run's first step on; ``run_start[k]`` is the first chunk of k's run."""
    runs, run_start = [], []
    for k in range(len(o)):
        if runs and o[runs[-1][-1]] == o[k]:
            runs[-1].append(k)
        else:
            runs.append([k])
        run_start.append(runs[-1][0])
    return runs, run_start


def _break_even(c: int, o: list, n: int, reads: list, got: list, paths: list, tree: set) -> bool:
    """Eq. (14) on hop counts: the reads of block c by node n (each otherwise fetched from the
    nearest copy planned so far, owner or replica live at that read) cost more hops than the
    links the replica adds to the block's multicast tree ``tree`` (edges from the owner)."""
    h_copy = len(set(zip(paths[o[c]][n], paths[o[c]][n][1:])) - tree)
    h_save = 0
    for k in reads:
        h_save += min([len(paths[o[c]][n]) - 1] + [len(paths[h][n]) - 1 for h, kf, kl in got if kf <= k <= kl])
    return h_save > h_copy


def _place_replicas(o: list, factors: list, chunks_of: dict, hops: list, occ: list, L: int, n_slots: int,
                    paths: list | None = None) -> list:
    """Replica placement with per-node memory admission (eqs. 10, 11, 14-16): per chunk c, its
    holders [(node, first reader chunk, last reader chunk)], nearest first. ``occ`` (slots per node
    and step) is updated with every replica placed. ``paths`` (node paths between the prefill
    nodes): apply the eq. (14) break-even on them (:func:`_break_even`)."""
    holders = []
    for c in range(len(o)):
        r_c = factors[c][2]
        tree = set()
        cand = sorted((n for n in range(len(hops)) if n != o[c] and any(k > c for k in chunks_of[n])),
                      key=lambda n: (hops[o[c]][n], min(k for k in chunks_of[n] if k > c), n))
        got = []
        for n in cand:
            j = len(got)
            if j + 1 >= r_c:
                break
            # active for chunk k while j < min(r_c, r_mem(k)) - 1 (eq. 11 over all history)
            reads = [k for k in chunks_of[n] if k > c and j < min(r_c, factors[k][0]) - 1]
            if not reads:
                continue
            # admission: node n stays within S_node at every step of the window [c, k_last]
            k_first, k_last, mx, ptr = reads[0], None, 0, c
            for k in reads:
                while ptr <= k:
                    mx = max(mx, occ[n][ptr])
                    ptr += 1
                if mx + L > n_slots:
                    break
                k_last = k
            if k_last is None:
                continue
            if paths is not None:
                if not _break_even(c, o, n, [k for k in reads if k <= k_last], got, paths, tree):
                    continue
                tree |= set(zip(paths[o[c]][n], paths[o[c]][n][1:]))
            for s in range(c, k_last + 1):
                occ[n][s] += L
            got.append((n, k_first, k_last))
        holders.append(got)
    return holders


def _prev_chunks(o: list, N: int) -> list:
    """``prev[n][k]``: the last chunk before k computed on node n (None if there is none)."""
    C = len(o)
    prev = [[None] * (C + 1) for _ in range(N)]
    for n in range(N):
        last = None
        for k in range(C + 1):
            prev[n][k] = last
            if k < C and o[k] == n:
                last = k
    return prev


def _plan_fetches(o: list, holders: list, hops: list, rep_at: set, prev: list) -> list:
    """The historical blocks each chunk reads that are neither its node's own nor a live replica
    there: [(block i, reader node, reader chunk k, source node)], fetched from the nearest of the
    owner and the holders whose previous chunk still holds the replica."""
    fetches = []
    for k in range(len(o)):
        n = o[k]
        for i in range(k):
            if o[i] == n or (n, i, k) in rep_at:
                continue
            srcs = [(hops[o[i]][n], 0, o[i])]
            for h, kf, kl in holders[i]:
                kp = prev[h][k]
                if h != n and kp is not None and kf <= kp <= kl:
                    srcs.append((hops[h][n], 1, h))
            src = min(srcs)[2]
            fetches.append((i, n, k, src))
    return fetches


def _plan_memory(o: list, holders: list, occ: list, held: list, L: int, slot: int, s_node: int,
                 nodes: list) -> tuple:
    """Per-step memory and replica factor (Fig. 4) of the plan: (step_mem, step_replica,
    owner_mem), each with the point after prefill (owner-only) appended to the first two. Checks
    eq. (10) (S_node at every step) and eq. (29) (no replica outlives the prefill)."""
    C, N = len(o), len(occ)
    step_mem, step_rep, owner_mem = [], [], []
    active = [0] * (C + 1)                       # live replicas per step (difference array)
    for i in range(C):
        for h, kf, kl in holders[i]:
            active[i] += 1
            active[kl + 1] -= 1
    owned, live = [0] * N, 0
    for s in range(C):
        owned[o[s]] += 1
        live += active[s]
        step_mem.append([occ[n][s] * slot for n in range(N)])
        owner_mem.append([(held[n] + L * owned[n]) * slot for n in range(N)])
        step_rep.append((s + 1 + live) / (s + 1))
    for s in range(C):
        for n in range(N):
            if step_mem[s][n] > s_node:
                raise AssertionError(f"MARS plan exceeds S_node on node {nodes[n]} at step {s}")  # eq. (10)
    # after the last chunk's release: replicas live past step C-1 would violate eq. (29)
    final_rep = [1 + sum(1 for h, kf, kl in holders[i] if kl > C - 1) for i in range(C)]
    assert all(r == 1 for r in final_rep), "eq. (29): r(C) = 1 violated"
    step_mem.append(owner_mem[-1])          # the point after prefill: owner-only
    step_rep.append(sum(final_rep) / C)
    return step_mem, step_rep, owner_mem


def _emit_prefill(b: ProgramBuilder, nodes: list, o: list, runs: list, units: list, holders: list, fetches: list,
                  rep_at: set, prev: list, L: int, unit_base: int):
    """The ops of the plan, into ``b``. Node streams are emitted run by run (layer-major inside a
    run); the message ids must exist before the receiver's recv is emitted, so emit in global
    chunk order (each node's ops stay in its own order)."""
    C = len(o)
    sends_at = {}   # (node, chunk k', layer-independent) -> [(block i, dst, reader chunk k)]
    for i, n, k, src in fetches:
        sends_at.setdefault((src, prev[src][k]), []).append((i, n, k))
    recv_msgs = {}  # (layer, block i, node) -> msg (replica) ; (layer, i, k, "f") -> msg (fetch)
    arrivals = {k: [] for k in range(C)}          # replicas installed before chunk k reads them
    drains = {k: [] for k in range(C)}            # replicas whose last reader is chunk k
    for i in range(C):
        for h, kf, kl in holders[i]:
            arrivals[kf].append(i)
            drains[kl].append(i)
    fetch_k = {k: [] for k in range(C)}
    for i, n, k, src in fetches:
        fetch_k[k].append((i, src))
    for run in runs:
        n, x = o[run[0]], nodes[o[run[0]]]
        for k in run:
            b.add(x, Embed, rows=units[k])
        for layer in range(L):
            for k in run:
                local = [i for i in range(k + 1) if o[i] == o[k] or (o[k], i, k) in rep_at]
                rows = units[k]
                b.add(x, Project, layer=layer, rows=rows, unit=unit_base + k)
                nb = b.unit_bytes(*units[k])
                if holders[k]:
                    msg = b.transfer(x, [nodes[h] for h, _, _ in holders[k]], what="kv", mop=MetaOp.KV_REPLICA,
                                     layer=layer, unit=unit_base + k, nbytes=nb, install="replica", recv_at=False)
                    for h, _, _ in holders[k]:
                        recv_msgs[(layer, k, h)] = msg
                # replicas whose window on n starts with this chunk arrive now
                for i in arrivals[k]:
                    b.recv(x, nodes[o[i]], recv_msgs[(layer, i, n)], what="kv", layer=layer, unit=unit_base + i,
                           install="replica", nbytes=b.unit_bytes(*units[i]))
                # prefetches this node serves for later chunks, sent ahead of use
                for i, dst, kk in sends_at.get((n, k), []):
                    msg = b.transfer(x, [nodes[dst]], what="kv", mop=MetaOp.KV_REPLICA, layer=layer, unit=unit_base + i,
                                     nbytes=b.unit_bytes(*units[i]), recv_at=False)
                    recv_msgs[(layer, i, kk, "f")] = msg
                b.add(x, Acquire, layer=layer, units=tuple(unit_base + i for i in local))
                for i in drains[k]:
                    b.add(x, Drain, layer=layer, unit=unit_base + i, meta=local_meta(x, layer, unit_base + i))
                fetched = [i for i, _ in fetch_k[k]]
                for i, src in fetch_k[k]:
                    b.recv(x, nodes[src], recv_msgs[(layer, i, k, "f")], what="kv", layer=layer, unit=unit_base + i,
                           install="stage", nbytes=b.unit_bytes(*units[i]))
                b.add(x, Attend, layer=layer, rows=rows, units=tuple(range(unit_base, unit_base + k + 1)))
                b.add(x, Release, layer=layer, units=tuple(unit_base + i for i in local))
                for i in fetched:
                    b.add(x, Unstage, layer=layer, unit=unit_base + i)
                b.add(x, Finish, layer=layer, rows=rows)
        for k in run:
            b.add(x, Logits, rows=units[k])


def predicted_volume(model, cluster, prompt_len: int, B: int, kv_bits: int = 8, alpha: float = 0.5) -> dict:
    """Eqs. (18)-(22) with all distances h = 1 (bytes): ``mars_eq20`` is eq. 20 as written (every
    node without a replica reads every block each chunk, eq. 19); ``mars_one_reader`` counts one
    reader per chunk (this dataflow: only the chunk's node reads the history); ``ring`` eq. 21;
    ``full`` eq. 22."""
    C = -(-prompt_len // B)
    N = cluster.nodes
    Mc = B * m_token(model, kv_bits)
    pool = node_pool(model, cluster, B, kv_bits)
    rs = [r for _, _, r in replica_factors(C, N, pool.s_node, model.num_layers * pool.slot_bytes, alpha)]
    rep = sum(Mc * (r - 1) for r in rs)                                                  # (18)
    access = sum(sum(Mc * (N - rs[i]) for i in range(c)) for c in range(1, C + 1))      # (19)
    return {"mars_eq20": rep + access, "mars_one_reader": rep + access / N,             # (20)
            "ring": Mc * (N - 1) * C * (C + 1) // 2,                                      # (21)
            "full": Mc * (N - 1) * C}                                                     # (22)
