"""An elastic-decode program (KernelFlume on the cluster): prefill on a subset of the nodes,
then KV-stationary decode whose routing table changes by route updates at token boundaries.

``elastic_program(model, cluster, hw, prompt_len, max_new_tokens, prefill_nodes=P,
scale_ups={step: node})``: ring prefill (``host.baselines``) on nodes 0..P-1 of the cluster's
topology (or, with ``prefill_nodes`` a list, request r on the ring order ``prefill_nodes[r]``
of one node set) leaves an owner-only layout; those nodes hold the initial ranges (the node holding
the last prompt row of request 0 leads: it runs the weight side of every request —
projections, merge, W_O, FFN). ``prompt_len`` / ``max_new_tokens`` may be sequences: one
request each, prefilled one after the other, then decoded in rounds (one token of every live
request per round, ``host.program.add_decode_requests``). ``w_node``: a node outside the prefill
nodes leads decode and holds no KV (a pure W node; it joins every merge with an empty partial).
``pipeline``: the requests of a round are microbatches, interleaved per layer (§5.2).

``prefill="mars"`` (``mars``: ``host.mars.MarsParams``, chunk size B = ``chunk``): each request's
prefill is MARS (``host.mars.compile_prefill``: chunk placement, replicas, prefetches, drains) on
the prefill nodes instead of the ring — ``prefill_nodes=P``: nodes 0..P-1, a list: request r's
placement order — and its owner-only layout at ``prefill_done`` (chunk c of the request owned by
its placement node, every replica drained, eq. 29) is the A nodes' initial ranges; the owner of
the last chunk is the request's first tail. Hop distances are the whole cluster topology's
(messages between prefill nodes may cross A-pool nodes, which forward them, as with ring
prefill). A later request's MARS admission counts the slots the earlier requests' owner chunks
hold. The chunk size is not chosen by eq. 8 here (that needs the prefill nodes as a topology of
their own): ``MarsParams.chunk`` must be None or equal ``chunk``.

A request's tail (the node its new KV blocks go to) is first the owner of its last prompt block
(the node holding its highest range). Before decode round ``s`` in ``scale_ups`` the
weightless node joins a request as its new tail:
it receives the request's new K/V from then on and takes part in its two-phase merge. A value
is a node (request 0), a ``(req, node)`` pair or a list of pairs. A request that has all its
tokens while another continues finishes at the next round boundary: its holders free its
ranges and it leaves the table; a node left holding no range leaves the table (scale-down) and
may join again later. Every change is one ``publish`` op on every node; on the RTL cluster it
rewrites the decode collectives' route entries in every NIC's shadow bank and flips the banks
at the token boundary (``host.executors.rtl``). ``stalls`` {round: requests} skip rounds (a
request whose tail is full waits). The same program runs on the golden, torch.distributed and
RTL executors. ``host.elastic.plan`` derives N_A, the scale-ups and the stalls from the
scaling policy.
"""
from __future__ import annotations

from mcf_fpga.host.baselines import _last_row_owner, _ring_prefill, _setup
from mcf_fpga.host.kvcapacity import node_pool
from mcf_fpga.host.mars import MarsParams, check_chunk, check_lengths, compile_prefill
from mcf_fpga.host.program import DecodeRequest, Program, ProgramBuilder, add_decode_requests
from mcf_fpga.host.program_ops import Mark
from mcf_fpga.host.tp import DEFAULT_TILE

__all__ = ["elastic_program", "scale_up_pairs", "mars_params", "PREFILLS"]

PREFILLS = ("ring", "mars")


def _seq(x, n: int, name: str) -> tuple:
    t = tuple(x) if isinstance(x, (list, tuple)) else (x,) * n
    if len(t) != n:
        raise ValueError(f"{name} has {len(t)} entries, expected one per request ({n})")
    return t


def scale_up_pairs(scale_ups: dict) -> dict:
    """{step: node | (req, node) | [(req, node), ...]} -> {step: [(req, node), ...]}."""
    out = {}
    for s, v in scale_ups.items():
        if isinstance(v, int):
            out[s] = [(0, v)]
        elif isinstance(v, tuple) and len(v) == 2 and all(isinstance(x, int) for x in v):
            out[s] = [v]
        else:
            out[s] = [tuple(p) for p in v]
    return out


def mars_params(prefill: str, mars: MarsParams | None, chunk: int) -> MarsParams | None:
    """The MarsParams of a ``prefill="mars"`` program (default ``MarsParams()``), None for ring
    prefill; refuses an unknown ``prefill``, MarsParams without MARS prefill and a
    ``MarsParams.chunk`` other than ``chunk``."""
    if prefill not in PREFILLS:
        raise ValueError(f"prefill={prefill!r}, expected one of {PREFILLS}")
    if mars is not None and prefill != "mars":
        raise ValueError(f"mars={mars!r} is given but prefill={prefill!r} (MarsParams need prefill='mars')")
    if prefill == "ring":
        return None
    mars = mars or MarsParams()
    if mars.chunk not in (None, chunk):
        raise ValueError(f"MarsParams.chunk={mars.chunk} differs from chunk={chunk} (the MARS chunk size B "
                         f"is elastic_program's chunk)")
    return mars


def elastic_program(model, cluster, hw, prompt_len, max_new_tokens, *, prefill_nodes,
                    scale_ups: dict, chunk: int, kv_bits: int = 8, block: int = 16,
                    stalls: dict | None = None, w_node: int | None = None, pipeline: bool = False,
                    prefill: str = "ring", mars: MarsParams | None = None, w_group=None,
                    w_tile: int = DEFAULT_TILE) -> Program:
    N = cluster.nodes
    mars = mars_params(prefill, mars, chunk)
    lens = _seq(prompt_len, len(prompt_len) if isinstance(prompt_len, (list, tuple)) else 1, "prompt_len")
    news = _seq(max_new_tokens, len(lens), "max_new_tokens")
    ups = scale_up_pairs(scale_ups)
    if isinstance(prefill_nodes, int):
        P = prefill_nodes
        if not 1 <= P < N:
            raise ValueError(f"prefill_nodes={P} must be in 1..{N - 1} (the others are the A-node pool)")
        rings = [list(range(P))] * len(lens)
        bad = [n for v in ups.values() for _q, n in v if not P <= n < N or n == w_node]
        if bad:
            raise ValueError(f"scale_ups nodes {bad} must come from the A-node pool {P}..{N - 1}"
                             + (f" without the W node {w_node}" if w_node is not None else ""))
    else:
        rings = [list(g) for g in _seq(prefill_nodes, len(lens), "prefill_nodes")]
        if any(not g or len(set(g)) != len(g) or not all(0 <= n < N for n in g) for g in rings) \
                or len({frozenset(g) for g in rings}) != 1 or len(rings[0]) >= N:
            raise ValueError(f"prefill_nodes={prefill_nodes}: per request a ring order of the same "
                             f"1..{N - 1} distinct nodes of 0..{N - 1}")
        bad = [n for v in ups.values() for _q, n in v if not 0 <= n < N or n == w_node]
        if bad:
            raise ValueError(f"scale_ups nodes {bad} are not weightless nodes of the cluster (0..{N - 1})")
    if w_node is not None and (not 0 <= w_node < N or w_node in rings[0]):
        raise ValueError(f"w_node={w_node}: must be a node of 0..{N - 1} outside the prefill nodes {rings[0]}")
    for s, v in ups.items():
        for q, _n in v:
            if not 0 <= q < len(lens):
                raise ValueError(f"scale_ups[{s}]: request {q} is not one of the {len(lens)} requests")
            if s < 0:
                raise ValueError(f"scale_ups steps must be decode steps (rounds >= 0), got {s}")
    topo = cluster.make_topology()
    for n_, k_ in zip(lens, news):
        if prefill == "ring":
            _setup(model, cluster, hw, n_, k_, chunk, block, kv_bits, len(rings[0]), False)
        else:                         # compile_prefill checks the owner-only memory (eq. 10)
            check_lengths(model, n_, k_)
            check_chunk(model, hw, chunk, block, kv_bits)
    b = ProgramBuilder(model, topo, block, kv_bits, cluster.route_table_size)
    group = sorted(rings[0] + ([w_node] if w_node is not None else []))
    all_units, all_owner, unit_req, reqs, plans, held = [], [], [], [], [], {}
    for r, (n_, k_) in enumerate(zip(lens, news)):
        b.req = r
        if prefill == "ring":
            units, owner = _ring_prefill(b, rings[r], n_, chunk, False, unit_base=len(all_units))
        else:
            units, owner, mp = compile_prefill(b, cluster, n_, k_, chunk, mars, nodes=rings[r],
                                               unit_base=len(all_units), held_slots=held)
            plans.append(mp)
            for o in owner:
                held[o] = held.get(o, 0) + model.num_layers
        all_units += units
        all_owner += owner
        unit_req += [r] * len(units)
        last = _last_row_owner(units, owner, n_)
        reqs.append(DecodeRequest(r, units, owner, tuple(group), last, n_, k_, tail=last))
    b.req = 0
    leader = reqs[0].first if w_node is None else w_node
    if w_group is not None and w_node is not None and tuple(w_group)[:1] != (w_node,):
        raise ValueError(f"w_group={tuple(w_group)}: w_group[0] must be the W node w_node={w_node}")
    leader = tuple(w_group)[0] if w_group else leader
    for n in range(N):
        b.add(n, Mark, name="prefill_done")
    history = add_decode_requests(b, reqs, leader, block, ups, stalls, pipeline, w_only=w_node is not None,
                                  w_group=w_group, w_tile=w_tile)
    downs, prev = {}, set(group)
    for s, gs in enumerate(history):
        cur = {g for grp in gs.values() for g in grp}
        if prev - cur:
            downs[s] = sorted(prev - cur)
        prev = cur
    pool = node_pool(model, cluster, max(t1 - t0 for t0, t1 in all_units), kv_bits)
    return Program("elastic", model, topo, block, kv_bits, lens[0], news[0], all_units, all_owner, b.ops,
                   b.routes, leader, tuple(group), pool.slot_bytes, pool.n_slots,
                   stats={"routes": b.routes.next_id, "route_fallbacks": b.route_fallbacks,
                          "decode_groups": history, "scale_ups": ups, "scale_downs": downs,
                          "w_only": w_node is not None, "pipeline": pipeline, "prefill": prefill,
                          **({"mars_plans": plans} if prefill == "mars" else {})},
                   requests=tuple(zip(lens, news)) if len(lens) > 1 else (),
                   unit_req=tuple(unit_req) if len(lens) > 1 else (), wsplit=b.wsplit)
