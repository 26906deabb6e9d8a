"""The program a schedule compiles to, and its byte accounting.

A ``Program`` is, per node, an ordered list of program ops (``ProgramOp`` subclasses). Every op
is executed by the node alone, from its own state and the messages it receives; every
message-carrying op has a
``spec.meta.MetaFields`` the node's packetizer/NIC would put on the wire. The same program
runs on every executor (``host.executors``): golden (one process), torch.distributed (one
rank per node) and, later, the simulated hardware cluster.

KV is addressed by *units*: ``program.units[u] = (t0, t1)`` is a token range aligned to the
golden merge block (``program.block``); ``kv_id = (layer, u)``. A node's KV pool
(``golden.kvpool.KVPool``, ``n_slots`` slots of ``slot_bytes``) holds owner units and replicas;
a *staged* unit is a block streamed through the on-chip propagation buffer (M_buf, MCF eq. 5)
for one use and never enters the pool.

The ops are one frozen dataclass per kind (``host.program_ops``, re-exported here: ``Embed``,
``Project``, ``Send``, ``Recv``, ``AllReduce``, ``DecodeProject``, ...); each class's docstring says
what the op does and which fields it has. Below, ops are named by their ``kind`` (``send`` is a
``Send``, ``dproject`` a ``DecodeProject``, ``dfinish`` a ``DecodeFinish``, ...).

**Tensor-parallel weight group** (``Program.wsplit``: ``host.tp.WeightSplit`` over ``w_group``, W > 1;
with one W node, ``wsplit`` is None and none of this appears). Ops of W node ``w_j`` carry
``part=(j, W)``: ``dproject`` computes the q of its query heads and the k/v of its KV heads;
``send``/``recv`` ``q`` and ``kvtok`` carry that slice (to the holders / the block owner);
after the merge the leader sends every other W node the merged partial rows of its query heads
(``send pm``), then ``dfinish`` runs in stages (``name``): ``attn`` (finalize the partial rows of
its heads -> ``send a``), ``o`` (quantise the gathered attention output A, W_O rows of its hidden
slice + residual -> ``send h1``), ``ffn`` (RMSNorm + W_gate/W_up rows of its intermediate slice +
SwiGLU -> ``send s``), ``down`` (quantise the gathered FFN vector, W_down rows of its hidden slice +
residual -> ``send h``); after each stage every W node multicasts its slice to the other W nodes
and ``recv``s theirs (an all-gather: every W node keeps the whole vector; RMSNorm and the
quantisations are replicated on identical inputs). ``dlogits`` computes its vocabulary slice and
its best (value, index), ``send best`` to the other W nodes, then ``dpick``. Every W node runs
``dembed`` (the token is known to all of them).

Every op carries ``req``, the request it belongs to (0 for single-request programs). A program
may hold several requests (``Program.requests``: (prompt_len, max_new_tokens) each); positions
and rows are per request, unit indices are global (``Program.unit_req[u]`` is u's request).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from mcf_fpga.spec.topology import RouteTables, Topology
from mcf_fpga.spec.meta import Collective, MetaFields, MetaOp, ReduceOp, Stage

from .config import ModelConfig, kv_unit_bytes
from .program_ops import *  # noqa: F401,F403 (the op classes are part of the program's interface)
from .program_ops import __all__ as _OPS_ALL
from .program_ops import (AllReduce, Append, DecodeAttend, DecodeEmbed, DecodeFinish, DecodeFree, DecodeLogits,
                          DecodePick, DecodeProject, ProgramOp, Publish, Recv, Send)
from .tp import DEFAULT_TILE, STAGES, TAGS, WeightSplit

__all__ = ["Program", "ProgramBuilder", "LOGITS_ROWS", "Traffic", "DecodeRequest", "add_decode", "add_decode_requests",
           "decode_leader", *_OPS_ALL]

LOGITS_ROWS = ("all", "last")   # Program.logits: the head on every prompt row, or on the last one only


@dataclass
class Traffic:
    """Bytes put on links: ``bytes`` = payload bytes x links crossed (the hop-weighted volume of
    MCF eqs. 17-22), ``payload`` = payload bytes injected, per phase."""
    prefill_bytes: int = 0
    prefill_payload: int = 0
    prefill_messages: int = 0
    decode_bytes: int = 0
    decode_messages: int = 0


@dataclass
class Program:
    schedule: str
    model: ModelConfig
    topo: Topology
    block: int
    kv_bits: int
    prompt_len: int
    max_new_tokens: int
    units: list                      # unit -> (t0, t1)
    owner: list                      # unit -> owner node at the end of prefill
    ops: list                        # per node: list[ProgramOp]
    routes: RouteTables
    leader: int                      # decode leader (computes the token's projections)
    decode_group: tuple              # nodes holding KV during decode
    slot_bytes: int
    n_slots: int
    stats: dict = field(default_factory=dict)
    requests: tuple = ()             # ((prompt_len, max_new_tokens), ...); () = one request
    unit_req: tuple = ()             # unit -> request; () = every unit is request 0's
    wsplit: WeightSplit | None = None   # tensor-parallel weight group of decode (None: the leader alone)
    logits: str = "all"              # prompt rows the head runs on: "all" or "last" (LOGITS_ROWS)

    def __post_init__(self):
        if self.logits not in LOGITS_ROWS:
            raise ValueError(f"Program.logits={self.logits!r}: expected one of {', '.join(LOGITS_ROWS)}")

    def head_rows(self, req: int, rows: tuple) -> tuple:
        """The rows ``(r0, r1)`` of a ``Logits`` op over ``rows`` whose logits are made: all of them
        (``logits="all"``), or only the request's last prompt row (``"last"``: the first token's
        row; other chunks run no head, ``(r1, r1)``). Logits are row-independent, so a subset is
        bit-exact to the same rows of the full head."""
        if self.logits == "all":
            return tuple(rows)
        last = self.reqs[req][0] - 1
        return (last, last + 1) if rows[0] <= last < rows[1] else (rows[1], rows[1])

    @property
    def w_group(self) -> tuple:
        """The decode W nodes in slice order (the leader first)."""
        return self.wsplit.nodes if self.wsplit is not None else (self.leader,)

    @property
    def reqs(self) -> tuple:
        """(prompt_len, max_new_tokens) of every request."""
        return self.requests or ((self.prompt_len, self.max_new_tokens),)

    def req_of(self, unit: int) -> int:
        return self.unit_req[unit] if self.unit_req else 0

    def prompts(self, prompt) -> list:
        """The prompt of every request: ``prompt`` is one token list for a single-request program,
        a list of token lists (one per request) otherwise. Refused with the request and lengths."""
        if len(self.reqs) == 1:
            prompt = [prompt]
        elif len(prompt) != len(self.reqs):
            raise ValueError(f"prompts: {len(prompt)} given, the program holds {len(self.reqs)} requests")
        for r, (p, (n, _)) in enumerate(zip(prompt, self.reqs)):
            if len(p) != n:
                who = "prompt" if len(self.reqs) == 1 else f"prompt of request {r}"
                raise ValueError(f"{who} has {len(p)} tokens, the program was compiled for {n}")
        return [list(p) for p in prompt]

    @property
    def nodes(self) -> int:
        return self.topo.n

    def traffic(self) -> Traffic:
        t = Traffic()
        for ops in self.ops:
            for op in ops:
                if isinstance(op, Send):
                    if op.meta is not None and op.meta.stage == Stage.DECODE:
                        t.decode_bytes += op.link_bytes
                        t.decode_messages += 1
                    else:
                        t.prefill_bytes += op.link_bytes
                        t.prefill_payload += op.nbytes
                        t.prefill_messages += 1
                elif isinstance(op, AllReduce):
                    t.decode_bytes += op.link_bytes
        return t

    def expected_layout(self) -> dict:
        """{node: sorted [(layer, unit)]} of owner units at the end of prefill."""
        out = {n: [] for n in range(self.nodes)}
        for u, o in enumerate(self.owner):
            for layer in range(self.model.num_layers):
                out[o].append((layer, u))
        return {n: sorted(v) for n, v in out.items()}

    def golden_blocks(self, unit: int) -> range:
        t0, t1 = self.units[unit]
        return range(t0 // self.block, -(-t1 // self.block))

    def decode_owner(self, pos: int) -> int:
        """Node that holds (and appends to) the golden block of token position ``pos``."""
        return decode_owner(self.units, self.owner, self.decode_group, self.block, pos)

    def count(self, kind) -> int:
        """Ops of ``kind`` (an op class, or its ``kind`` name) on all nodes."""
        if isinstance(kind, str):
            return sum(op.kind == kind for ops in self.ops for op in ops)
        return sum(isinstance(op, kind) for ops in self.ops for op in ops)


def decode_owner(units, owner, group, block: int, pos: int) -> int:
    """The golden block of ``pos`` stays on the node that owns it (a prompt unit's owner); a new
    block goes to ``group[block index mod len(group)]``. Whole golden blocks live on one node,
    so the decode partials (one per block) are the same set as IntModel's."""
    b = pos // block
    for u, (t0, t1) in enumerate(units):
        if t0 // block <= b < -(-t1 // block):
            return owner[u]
    return group[b % len(group)]


def local_meta(node: int, layer: int, unit: int, stage=Stage.PREFILL) -> MetaFields:
    """Meta of a directory-only command to this node's own KV pool (``replica_invalidate``
    delivered on the NIC's local port: a ``drain`` marks the replica draining)."""
    return MetaFields(op=MetaOp.REPLICA_INVALIDATE, stage=stage, src=node, dst=node, kv_id=(layer, unit),
                      route_id=0, collective=Collective.P2P, reduce_op=ReduceOp.NONE, length=0)


class ProgramBuilder:
    """Appends ops to node streams and allocates message ids and route ids."""

    def __init__(self, model: ModelConfig, topo: Topology, block: int, kv_bits: int, route_table_size: int):
        self.model, self.topo, self.block, self.kv_bits = model, topo, block, kv_bits
        self.ops = [[] for _ in range(topo.n)]
        self.routes = RouteTables(topo, route_table_size)
        # route d (d < N) leads every node to node d: the NIC routes point-to-point packets by
        # route_id too, and shortest-path next hops depend only on (node, d)
        for d in range(topo.n):
            for x in range(topo.n):
                self.routes.add(x, [d], route_id=d)
        self._route_ids: dict = {}
        self.route_table_size = route_table_size
        self.next_msg = 1
        self._hops = [[len(topo.path(a, b_)) - 1 for b_ in range(topo.n)] for a in range(topo.n)]
        self._ubytes: dict = {}
        self.route_fallbacks = 0     # multicasts sent as unicasts because the route table was full
        self.req = 0                 # request stamped on every op added (multi-request programs)
        self.wsplit = None           # decode's tensor-parallel weight split (add_decode_requests)

    def add(self, node: int, cls: type[ProgramOp], **kw) -> ProgramOp:
        """Append ``cls(**kw)`` to node's stream, stamped with the current request ``self.req``."""
        op = cls(**{"req": self.req, **kw})
        self.ops[node].append(op)
        return op

    def tree(self, src: int, dsts) -> tuple:
        """(links, depth) of the multicast tree from src to dsts (spec.topology: the union of
        the unicast paths, so each link carries the payload once)."""
        edges, depth = set(), 0
        for d in dsts:
            p = self.topo.path(src, d)
            depth = max(depth, len(p) - 1)
            edges.update(zip(p, p[1:]))
        return len(edges), depth

    def route(self, src: int, dsts):
        """route_id of the multicast route src -> dsts (allocated on first use), or None when the
        route table is full (the caller then sends unicasts on the destination routes)."""
        key = (src, tuple(sorted(dsts)))
        if key not in self._route_ids:
            if self.routes.next_id >= self.route_table_size:
                self.route_fallbacks += 1
                return None
            self._route_ids[key] = self.routes.add(src, key[1])
        return self._route_ids[key]

    def hops(self, a: int, b: int) -> int:
        return self._hops[a][b]

    def unit_bytes(self, t0: int, t1: int) -> int:
        n = t1 - t0
        if n not in self._ubytes:
            self._ubytes[n] = kv_unit_bytes(self.model, n, self.kv_bits)
        return self._ubytes[n]

    def transfer(self, src: int, dsts, *, what: str, stage=Stage.PREFILL, mop=MetaOp.KV_REPLICA,
                 layer: int = 0, unit: int = 0, nbytes: int = 0, install: str = "stage",
                 recv_at=None, part: tuple = ()) -> int:
        """One message from ``src`` to ``dsts``: ``send`` op(s) on src now and, unless
        ``recv_at`` is False, a ``recv`` op appended on every destination now. More than one
        destination is a multicast on a route; if the route table is full, one unicast ``send``
        per destination (same message id). Returns the message id."""
        dsts = tuple(sorted(set(dsts)))
        if src in dsts or not dsts:
            raise ValueError(f"transfer from {src} to {dsts}: bad destination set")
        msg = self.next_msg
        self.next_msg += 1
        rid = self.route(src, dsts) if len(dsts) > 1 else None
        kv_id = (max(layer, 0), max(unit, 0))
        length = min(nbytes, (1 << 16) - 1)
        if rid is None:
            for d in dsts:
                h = self.hops(src, d)
                meta = MetaFields(op=mop, stage=stage, src=src, dst=d, kv_id=kv_id, route_id=d,
                                  collective=Collective.P2P, reduce_op=ReduceOp.NONE, length=length)
                self.add(src, Send, what=what, layer=layer, unit=unit, dsts=(d,), msg=msg, meta=meta,
                         nbytes=nbytes, link_bytes=nbytes * h, depth=h, part=part)
        else:
            links, depth = self.tree(src, dsts)
            meta = MetaFields(op=mop, stage=stage, src=src, dst=rid, kv_id=kv_id, route_id=rid,
                              collective=Collective.MULTICAST, reduce_op=ReduceOp.NONE, length=length)
            self.add(src, Send, what=what, layer=layer, unit=unit, dsts=dsts, msg=msg, meta=meta,
                     nbytes=nbytes, link_bytes=nbytes * links, depth=depth, part=part)
        if recv_at is not False:
            for d in dsts:
                self.add(d, Recv, what=what, layer=layer, unit=unit, peer=src, msg=msg,
                         install=install, nbytes=nbytes, part=part)
        return msg

    def recv(self, node: int, src: int, msg: int, *, what: str, layer: int, unit: int, install: str,
             nbytes: int, part: tuple = ()):
        self.add(node, Recv, what=what, layer=layer, unit=unit, peer=src, msg=msg, install=install,
                 nbytes=nbytes, part=part)

    def allreduce(self, node: int, group: tuple, layer: int, name: str, msg: int, nbytes: int, root: int):
        """One member's part of an all-reduce (reduce to ``root`` through the NIC, result multicast
        back). Only the root's op carries the link bytes of the whole collective."""
        links = 0
        if node == root:
            others = [g for g in group if g != root]
            if others:
                edges, _ = self.tree(root, others)
                links = sum(self.hops(g, root) for g in others) + edges
        red = ReduceOp.MAX if name == "max" else ReduceOp.SUM
        meta = MetaFields(op=MetaOp.PARTIAL_STATE, stage=Stage.DECODE,                   # int64 lanes
                          src=node, dst=root, kv_id=(max(layer, 0), 0), route_id=0,
                          collective=Collective.ALL_REDUCE, reduce_op=red, length=min(nbytes, 65535))
        self.add(node, AllReduce, layer=layer, name=name, dsts=group, msg=msg, meta=meta,
                 nbytes=nbytes, link_bytes=nbytes * links, root=root)

    def new_msg(self) -> int:
        m = self.next_msg
        self.next_msg += 1
        return m


@dataclass(frozen=True)
class DecodeRequest:
    """One request of a decode phase: its prefill units (token ranges, request-local) and their
    owners, the nodes holding its KV at the start of decode (``group``), the node whose
    ``logits`` op produced its token 1 (``first``) and its lengths."""
    req: int
    units: list
    owner: list
    group: tuple
    first: int
    prompt_len: int
    max_new_tokens: int
    tail: int | None = None     # node receiving its new KV blocks (None: round-robin over group)


def add_decode(b: ProgramBuilder, prog_units: list, owner: list, leader: int, group: tuple, first: int,
               prompt_len: int, max_new_tokens: int, block: int, scale_ups: dict | None = None,
               w_group=None, w_tile: int = DEFAULT_TILE):
    """KV-stationary decode of one request (``add_decode_requests``); ``scale_ups`` is {decode
    step: node}. Returns the decode group of every step."""
    r = DecodeRequest(0, prog_units, owner, tuple(group), first, prompt_len, max_new_tokens)
    ups = {s: [(0, n)] for s, n in (scale_ups or {}).items()}
    return [g[0] for g in add_decode_requests(b, [r], leader, block, ups, w_group=w_group, w_tile=w_tile)]


def decode_leader(w_group, default: int) -> int:
    """The decode leader of a schedule: ``w_group[0]`` when a W group is given, else the schedule's
    own choice ``default``."""
    return tuple(w_group)[0] if w_group else default


def add_decode_requests(b: ProgramBuilder, reqs: list, leader: int, block: int, scale_ups: dict | None = None,
                        stalls: dict | None = None, pipeline: bool = False, w_only: bool = False,
                        w_group=None, w_tile: int = DEFAULT_TILE):
    """KV-stationary decode (MCF §4 end, §5) of the requests ``reqs`` (``DecodeRequest``), all led
    by the weight node ``leader``. Decode runs in rounds: in each round every live request
    generates its next token, in request order, except the requests in ``stalls[round]`` (a
    request whose tail has no room waits; it is never dropped). Per token and layer the leader
    computes q/k/v, multicasts q to the request's holders (``MetaOp.QUERY``), sends k/v to the owner
    of the token's golden block, every holder attends over its own blocks of the request and the
    partials are merged by the two-phase flat merge (all-reduce max, rescale, all-reduce sum;
    docs/numerics.md). A request whose token 1 came from another node gets it first.

    KernelFlume elastic decode: ``scale_ups`` {round: [(req, node), ...]}: before that round the
    node joins the request's holders as its **tail** (every new KV block of the request from then
    on is owned by it; blocks never straddle nodes). A request that has generated all its tokens
    while others continue **finishes** at the next round boundary: every holder frees its ranges
    (``dfree``) and it leaves the routing table, so a node that held only its ranges leaves too
    (scale-down). Every boundary with a change gets one ``publish`` op on every node carrying the
    whole new table (``groups``). ``pipeline``: the requests of a round are microbatches whose
    per-layer work interleaves (the leader's merge/W_O/FFN of one overlaps the holders' attention
    of the next); same ops, other order. ``w_only``: the leader holds no KV (a pure W node): it
    does not attend, is left out of the max all-reduce and adds nothing to the merge it receives
    (an empty partial on the golden executors, no packet on the NIC).

    ``w_group`` (default ``(leader,)``): the tensor-parallel weight group, ``w_group[0]`` must be
    the leader. With W > 1 nodes every linear layer is split by output rows over them
    (``host.tp.WeightSplit``, slices aligned to ``w_tile`` rows): each W node projects the q of
    its query heads (to the holders) and the k/v of its KV heads (to the block's owner); the merge
    goes to the leader as before, which sends each W node the merged rows of its query heads;
    every W node finalizes its heads, and the attention output, W_O, FFN and the head run on
    slices with an all-gather of the attention output, the residual stream and the FFN vector
    after each stage; the token is the best of the slices' maxima (``dpick``, every W node).
    Returns, per round, {req: holders}."""
    wg, split = _decode_weight_group(b, reqs, leader, w_group, w_tile)
    b.wsplit = split
    scale_ups = {s: list(v) for s, v in (scale_ups or {}).items()}
    live = {r.req: r for r in reqs}
    groups = {r.req: tuple(r.group) for r in reqs}
    _check_scale_ups(b, scale_ups, live)
    tails = {r.req: r.tail for r in reqs}
    block_owner = {q: {} for q in live}
    made = {q: 0 for q in live}           # decode tokens generated so far
    stalls = {s: set(v) for s, v in (stalls or {}).items()}
    for r in reqs:
        if any(w != r.first for w in wg):
            b.req = r.req
            b.transfer(r.first, [w for w in wg if w != r.first], what="token", stage=Stage.DECODE,
                       mop=MetaOp.DATA, nbytes=4)
    tokens = _TokenOps(b, leader, wg, split, w_only, made)
    history = []
    step = -1
    while True:
        step += 1
        if all(r.max_new_tokens - 1 <= made[q] for q, r in live.items()):
            break                         # the run is over: nothing to free or publish
        if step > sum(r.max_new_tokens for r in reqs) + len(stalls):
            live_left = sorted(q for q, r in live.items() if r.max_new_tokens - 1 > made[q])
            raise ValueError(f"decode does not end: requests {live_left} stall in every round")
        _round_boundary(b, step, live, groups, tails, made, scale_ups)
        history.append(dict(groups))
        ctx = []
        for q, r in sorted(live.items()):
            if q in stalls.get(step, ()):
                continue
            pos = r.prompt_len + made[q]
            bi = pos // block
            if bi not in block_owner[q]:
                fresh = tails[q] is not None and bi * block >= r.prompt_len
                block_owner[q][bi] = tails[q] if fresh else decode_owner(r.units, r.owner, groups[q], block, pos)
            ctx.append((q, groups[q], pos, block_owner[q][bi]))
        if pipeline:
            tokens.pipelined_round(ctx)
        else:
            tokens.round(ctx)
        for c in ctx:
            made[c[0]] += 1
    late = sorted((s_, q) for s_, v in scale_ups.items() for q, _n in v if s_ >= len(history))
    if late:
        raise ValueError(f"scale_ups {late}: (round, request) after the last decode round "
                         f"{len(history) - 1}; scale-ups must be at decode steps of a live request")
    b.req = 0
    return history


def _decode_weight_group(b: ProgramBuilder, reqs: list, leader: int, w_group, w_tile: int):
    """(W nodes, ``WeightSplit`` or None with one W node) of a decode led by ``leader``; refused
    unless the leader comes first and holds KV of every request (it is the merge root)."""
    wg = WeightSplit.check_nodes((leader,) if w_group is None else w_group, b.topo.n)
    if wg[0] != leader:
        raise ValueError(f"w_group={wg}: w_group[0] must be the decode leader {leader}")
    outside = [r.req for r in reqs if leader not in r.group]
    if outside:
        raise ValueError(f"w_group={wg}: the leader w_group[0]={leader} is the merge root and must be one of "
                         f"the decode holders; requests {outside} are held by other nodes")
    return wg, (WeightSplit(b.model, wg, w_tile, b.kv_bits) if len(wg) > 1 else None)


def _check_scale_ups(b: ProgramBuilder, scale_ups: dict, live: dict):
    """Every scale-up names a request of the program and a node of the topology."""
    for s_, ups in scale_ups.items():
        for q, n_ in ups:
            if q not in live:
                raise ValueError(f"scale_ups[{s_}]: request {q} is not a request of the program")
            if not 0 <= n_ < b.topo.n:
                raise ValueError(f"scale_ups[{s_}] = {n_}: not a node of the topology")


def _round_boundary(b: ProgramBuilder, step: int, live: dict, groups: dict, tails: dict, made: dict,
                    scale_ups: dict):
    """The token boundary before decode round ``step``: every request done frees its ranges on its
    holders (``DecodeFree``) and leaves ``live``/``groups``; the round's scale-ups join their
    request's holders as its tail; if anything changed, every node gets one ``Publish`` of the new
    table."""
    changed = False
    for q in [q for q, r in live.items() if r.max_new_tokens - 1 <= made[q]]:
        b.req = q
        for g in groups[q]:
            b.add(g, DecodeFree)
        del live[q], groups[q]
        changed = True
    for q, n_ in scale_ups.get(step, ()):
        if q not in live:
            raise ValueError(f"scale_ups[{step}]: request {q} has finished")
        if n_ in groups[q]:
            raise ValueError(f"scale_ups[{step}] = {n_}: already holds ranges of request {q}")
        groups[q], tails[q], changed = groups[q] + (n_,), n_, True
    if changed:
        state = tuple(sorted(groups.items()))
        union = tuple(sorted({g for grp in groups.values() for g in grp}))
        b.req = 0
        for n_ in range(b.topo.n):
            b.add(n_, Publish, step=step, dsts=union, groups=state)


class _TokenOps:
    """Writes the ops of one decode token of a request, per layer, into ``b``: ``project`` (the W
    side's q/k/v, q to the holders, k/v to the block owner, the holders attend) and ``merge`` (the
    two-phase flat merge to the leader, then W_O, FFN and the head); ``made`` is {req: tokens
    generated so far} (the decode step of the ops). A context is (req, holders, pos, block owner)."""

    def __init__(self, b: ProgramBuilder, leader: int, wg: tuple, split, w_only: bool, made: dict):
        self.b, self.leader, self.wg, self.split, self.w_only, self.made = b, leader, wg, split, w_only, made
        m = b.model
        self.layers = m.num_layers
        self.qbytes = m.num_heads * (m.head_dim + 1)
        self.kvtok = kv_unit_bytes(m, 1, b.kv_bits)
        # the two-phase merge as the NIC carries it (docs/numerics.md, mcf_fpga/host/executors/rtl.py): the max
        # all-reduce of every head's m (one int32 lane each), then the sum of every head's partial row
        # (m, l, o[d] as int64 words, all heads contiguous; executors cut it into max_payload packets)
        self.part_max = m.num_heads * 4         # the max all-reduce: one int32 lane per head (REDUCTION)
        self.part_sum = m.num_heads * (m.head_dim + 2) * 8

    def round(self, ctx: list):
        """Every request of the round, one after the other, layer by layer."""
        for c in ctx:
            for layer in range(self.layers):
                self.project(*c, layer)
                self.merge(*c, layer)

    def pipelined_round(self, ctx: list):
        """Microbatch pipelining (KernelFlume §5.2), the requests of the round as microbatches:
        every holder runs, per layer, every request's attention then every request's merge; the
        leader instead runs merge(k, l) then project(k, l+1), so its post-attention work of one
        microbatch overlaps the holders' attention of the next."""
        b = self.b
        start = [len(o) for o in b.ops]
        segs = []                            # (leader order key, {node: ops added})
        for layer in range(self.layers):
            for phase, fn in ((0, self.project), (1, self.merge)):
                for k, c in enumerate(ctx):
                    before = [len(o) for o in b.ops]
                    fn(*c, layer)
                    key = (0, k, 0) if (phase, layer) == (0, 0) else (
                        (2 * layer - 1, k, 1) if phase == 0 else (2 * layer + 1, k, 0))
                    segs.append((key, {n: b.ops[n][before[n]:] for n in range(b.topo.n)}))
        for w in self.wg:         # every W node runs the W side in the leader's order
            b.ops[w][start[w]:] = [op for _k, seg in sorted(segs, key=lambda x: x[0]) for op in seg[w]]

    def project(self, q, group, pos, own, layer):
        """W: q/k/v of the token, q to the holders, k/v to the tail; holders attend."""
        if self.split is not None:
            return self.project_tp(q, group, pos, own, layer)
        b, leader = self.b, self.leader
        b.req, others = q, tuple(g for g in group if g != leader)
        if layer == 0:
            b.add(leader, DecodeEmbed, step=self.made[q])
        b.add(leader, DecodeProject, layer=layer, step=self.made[q], rows=(pos, pos + 1))
        if others:
            b.transfer(leader, others, what="q", stage=Stage.DECODE, mop=MetaOp.QUERY, layer=layer,
                       nbytes=self.qbytes)
        if own != leader:
            b.transfer(leader, [own], what="kvtok", stage=Stage.DECODE, mop=MetaOp.DATA, layer=layer,
                       nbytes=self.kvtok)
        self.attend(group, pos, own, layer)

    def attend(self, group, pos, own, layer):
        """The block owner appends the token's K/V; every holder (not a KV-less leader) attends."""
        self.b.add(own, Append, layer=layer, rows=(pos, pos + 1))
        for g in group:
            if not (self.w_only and g == self.leader):
                self.b.add(g, DecodeAttend, layer=layer, rows=(pos, pos + 1))

    def project_tp(self, q, group, pos, own, layer):
        """Every W node: q of its heads to the holders, k/v of its KV heads to the block owner
        (every send before any receive, so no W node waits on another's projection)."""
        b, split, wg = self.b, self.split, self.wg
        b.req, W, recvs = q, len(wg), []
        for j, w in enumerate(wg):
            part = (j, W)
            if layer == 0:
                b.add(w, DecodeEmbed, step=self.made[q])
            b.add(w, DecodeProject, layer=layer, step=self.made[q], rows=(pos, pos + 1), part=part)
            others = tuple(g for g in group if g != w)
            if others:
                nb = split.nbytes("q", j)
                msg = b.transfer(w, others, what="q", stage=Stage.DECODE, mop=MetaOp.QUERY, layer=layer,
                                 nbytes=nb, part=part, recv_at=False)
                recvs += [(g, w, msg, "q", 0, nb, part) for g in others]
            g0, g1 = split.kv_heads(j)
            if g1 > g0 and own != w:
                nb = split.nbytes("kvtok", j)
                msg = b.transfer(w, [own], what="kvtok", stage=Stage.DECODE, mop=MetaOp.DATA, layer=layer,
                                 unit=TAGS["kvtok"], nbytes=nb, part=part, recv_at=False)
                recvs.append((own, w, msg, "kvtok", TAGS["kvtok"], nb, part))
        for g, w, msg, what, unit, nb, part in sorted(recvs, key=lambda x: (x[3] != "q", x[6])):
            b.recv(g, w, msg, what=what, layer=layer, unit=unit, install="stage", nbytes=nb, part=part)
        self.attend(group, pos, own, layer)

    def gather(self, what, layer):
        """All-gather of ``what`` over the W group: every W node multicasts its slice to the
        others, then receives theirs in slice order."""
        b, wg = self.b, self.wg
        W, recvs = len(wg), []
        for j, w in enumerate(wg):
            nb = self.split.nbytes(what, j)
            others = [x for x in wg if x != w]
            msg = b.transfer(w, others, what=what, stage=Stage.DECODE, mop=MetaOp.DATA, layer=layer,
                             unit=TAGS[what], nbytes=nb, part=(j, W), recv_at=False)
            recvs += [(x, w, msg, nb, (j, W)) for x in others]
        for x, w, msg, nb, part in recvs:
            b.recv(x, w, msg, what=what, layer=layer, unit=TAGS[what], install="stage", nbytes=nb, part=part)

    def merge(self, q, group, pos, own, layer):
        """Two-phase flat merge to the leader, then W_O + FFN (and the head after the last layer)."""
        b, leader, wg, split = self.b, self.leader, self.wg, self.split
        b.req = q
        for name, nb in (("max", self.part_max), ("sum", self.part_sum)):
            msg = b.new_msg()
            members = tuple(g for g in group if g != leader) if self.w_only and name == "max" else group
            for g in members:
                b.allreduce(g, members, layer, name, msg, nb, root=leader)
        last = layer == self.layers - 1
        if split is None:
            b.add(leader, DecodeFinish, layer=layer, rows=(pos, pos + 1))
            if last:
                b.add(leader, DecodeLogits, step=self.made[q])
            return
        W, rows = len(wg), (pos, pos + 1)
        for j in range(1, W):         # the merged partial rows of its query heads to every W node
            b.transfer(leader, [wg[j]], what="pm", stage=Stage.DECODE, mop=MetaOp.DATA, layer=layer,
                       unit=TAGS["pm"], nbytes=split.nbytes("pm", j), part=(j, W))
        for stage, what in STAGES:
            for j, w in enumerate(wg):
                b.add(w, DecodeFinish, layer=layer, rows=rows, name=stage, part=(j, W))
            self.gather(what, layer)
        if last:
            for j, w in enumerate(wg):
                b.add(w, DecodeLogits, step=self.made[q], part=(j, W))
            self.gather("best", layer)
            for w in wg:
                b.add(w, DecodePick, step=self.made[q])
