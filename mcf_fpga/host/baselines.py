"""Baselines as dataflow-equivalent schedules in the same program format (MCF §6.1).

* ``ring``: chunked-prefill Ring Attention. Each chunk of B tokens is split into N contiguous
  pieces (whole golden merge blocks), piece j computed and owned by node j. For every chunk and
  layer, each node's whole shard (its pieces of every chunk so far) circulates N-1 steps around
  the logical ring 0 -> 1 -> ... -> N-1 -> 0, so the history is streamed again for every chunk:
  (N-1) * M_chunk * C(C+1)/2 bytes (MCF eqs. 2, 21).
* ``zigzag``: the same ring, each chunk split into 2N pieces and node j owning pieces j and
  2N-1-j (balanced causal work, same traffic).
* ``pd``: prefill/decode disaggregation. The first P = N // 2 nodes run ``ring`` prefill; then
  every KV unit is handed off to the decode pool (the other N - P nodes, unit u to decode node
  u mod (N - P)), the prefill copies are freed, and decode runs KV-stationary on the decode pool.

All three end prefill with an owner-only layout (r = 1), so decode is the same KV-stationary
decode as MARS (``host.program.add_decode``).
"""
from __future__ import annotations

from mcf_fpga.spec.meta import MetaOp

from .config import ClusterConfig, HardwareConfig, ModelConfig
from .kvcapacity import node_pool
from .mars import check_chunk, check_fits, check_lengths
from .program import Program, ProgramBuilder, add_decode, decode_leader
from .program_ops import Attend, Embed, Finish, Free, Logits, Mark, Project, Unstage
from .tp import DEFAULT_TILE

__all__ = ["ring", "zigzag", "pd", "SCHEDULES"]


def _pieces(c0: int, c1: int, block: int, parts: int) -> list:
    """Split tokens [c0, c1) (c0 block-aligned) into ``parts`` contiguous runs of whole golden
    blocks, as even as possible; empty runs are (t, t)."""
    nb = -(-(c1 - c0) // block)
    out = []
    for j in range(parts):
        a, z = j * nb // parts, (j + 1) * nb // parts
        out.append((min(c0 + a * block, c1), min(c0 + z * block, c1)))
    return out


def _layout(prompt_len: int, B: int, block: int, N: int, zig: bool):
    """Units (token ranges) of ring/zigzag pieces, their ring positions, and per chunk the pieces
    each ring position computes: ``(units, pos, mine_by_chunk)``."""
    units, pos, mine_by_chunk = [], [], []
    for c in range(-(-prompt_len // B)):
        c0, c1 = c * B, min((c + 1) * B, prompt_len)
        mine = {j: [] for j in range(N)}
        for p, (t0, t1) in enumerate(_pieces(c0, c1, block, 2 * N if zig else N)):
            if t1 <= t0:
                continue
            j = p if p < N else 2 * N - 1 - p
            units.append((t0, t1))
            pos.append(j)
            mine[j].append((len(units) - 1, (t0, t1)))
        mine_by_chunk.append(mine)
    return units, pos, mine_by_chunk


def _check_owner_memory(model, cluster, prompt_len, max_new_tokens, kv_bits, block, units, owner):
    unit = max(t1 - t0 for t0, t1 in units)       # pool slots are fixed size: the largest unit
    per = {}
    for o in owner:
        per[o] = per.get(o, 0) + model.num_layers
    check_fits(model, cluster, prompt_len, max_new_tokens, kv_bits, max(per.values()), unit, block)


def _ring_prefill(b: ProgramBuilder, group: list, prompt_len: int, B: int, zig: bool, unit_base: int = 0):
    """Emit chunked ring (or zigzag) prefill on ``group`` (ring order = list order).
    Returns (units, owner). Unit ``i`` of the returned lists is unit ``unit_base + i`` in the ops
    (a program holding several requests numbers their units consecutively)."""
    N, L = len(group), b.model.num_layers
    units, pos, mine_by_chunk = _layout(prompt_len, B, b.block, N, zig)
    if unit_base:
        units = [None] * unit_base + units
        mine_by_chunk = [{j: [(u + unit_base, rows) for u, rows in m[j]] for j in m} for m in mine_by_chunk]
    owner = [group[j] for j in pos]
    C = len(mine_by_chunk)
    shard = {j: [] for j in range(N)}          # units held by ring position j (all chunks so far)
    for c in range(C):
        mine = mine_by_chunk[c]
        for j in range(N):
            for u, rows in mine[j]:
                b.add(group[j], Embed, rows=rows)
            shard[j] += [u for u, _ in mine[j]]
        for layer in range(L):
            for j in range(N):
                n = group[j]
                for u, rows in mine[j]:
                    b.add(n, Project, layer=layer, rows=rows, unit=u)
                for u, rows in mine[j]:
                    b.add(n, Attend, layer=layer, rows=rows, units=tuple(shard[j]))
            # N-1 ring steps: at step s node j forwards the shard of ring position j-s+1
            msgs = {}
            for s in range(1, N):
                for j in range(N):
                    src_pos = (j - s + 1) % N
                    for u in shard[src_pos]:
                        msgs[(s, j, u)] = b.transfer(group[j], [group[(j + 1) % N]], what="kv",
                                                     mop=MetaOp.KV_REPLICA, layer=layer, unit=u,
                                                     nbytes=b.unit_bytes(*units[u]), recv_at=False)
                    if s > 1:
                        for u in shard[(j - s + 1) % N]:
                            b.add(group[j], Unstage, layer=layer, unit=u)
                for j in range(N):
                    src_pos = (j - s) % N
                    prev = (j - 1) % N
                    for u in shard[src_pos]:
                        b.recv(group[j], group[prev], msgs[(s, prev, u)], what="kv", layer=layer, unit=u,
                               install="stage", nbytes=b.unit_bytes(*units[u]))
                    for u, rows in mine[j]:
                        if shard[src_pos]:
                            b.add(group[j], Attend, layer=layer, rows=rows, units=tuple(shard[src_pos]))
            if N > 1:
                for j in range(N):
                    for u in shard[(j - (N - 1)) % N]:
                        b.add(group[j], Unstage, layer=layer, unit=u)
            for j in range(N):
                for u, rows in mine[j]:
                    b.add(group[j], Finish, layer=layer, rows=rows)
        for j in range(N):
            for u, rows in mine[j]:
                b.add(group[j], Logits, rows=rows)
    return units[unit_base:], owner


def _setup(model, cluster, hw, prompt_len, max_new_tokens, chunk, block, kv_bits, group_size, zig):
    check_lengths(model, prompt_len, max_new_tokens)
    check_chunk(model, hw, chunk, block, kv_bits)
    units, pos, _ = _layout(prompt_len, chunk, block, group_size, zig)
    _check_owner_memory(model, cluster, prompt_len, max_new_tokens, kv_bits, block, units, pos)
    return cluster.make_topology()


def _finish(name, b, model, topo, block, kv_bits, prompt_len, max_new_tokens, units, owner, cluster,
            leader, group, first, w_group=None, w_tile=DEFAULT_TILE):
    """Mark prefill done, add decode (led by ``leader``, or ``w_group[0]`` with a W group) and make
    the Program."""
    pool = node_pool(model, cluster, max(t1 - t0 for t0, t1 in units), kv_bits)
    for n in range(topo.n):
        b.add(n, Mark, name="prefill_done")
    leader = decode_leader(w_group, leader)
    add_decode(b, units, owner, leader, tuple(group), first, prompt_len, max_new_tokens, block,
               w_group=w_group, w_tile=w_tile)
    return Program(name, model, topo, block, kv_bits, prompt_len, max_new_tokens, units, owner, b.ops,
                   b.routes, leader, tuple(group), pool.slot_bytes, pool.n_slots,
                   stats={"routes": b.routes.next_id, "route_fallbacks": b.route_fallbacks}, wsplit=b.wsplit)


def _last_row_owner(units, owner, prompt_len):
    return next(owner[u] for u, (t0, t1) in enumerate(units) if t0 <= prompt_len - 1 < t1)


def ring(model: ModelConfig, cluster: ClusterConfig, hw: HardwareConfig, prompt_len: int,
         max_new_tokens: int = 0, *, chunk: int, kv_bits: int = 8, block: int = 16, _zig=False,
         w_group=None, w_tile: int = DEFAULT_TILE) -> Program:
    """Chunked-prefill Ring Attention on all nodes, then KV-stationary decode (``w_group``: a
    tensor-parallel weight group, ``host.program.add_decode_requests``)."""
    topo = _setup(model, cluster, hw, prompt_len, max_new_tokens, chunk, block, kv_bits, cluster.nodes, _zig)
    b = ProgramBuilder(model, topo, block, kv_bits, cluster.route_table_size)
    group = list(range(cluster.nodes))
    units, owner = _ring_prefill(b, group, prompt_len, chunk, _zig)
    leader = _last_row_owner(units, owner, prompt_len)
    return _finish("zigzag" if _zig else "ring", b, model, topo, block, kv_bits, prompt_len, max_new_tokens,
                   units, owner, cluster, leader, group, leader, w_group, w_tile)


def zigzag(model, cluster, hw, prompt_len, max_new_tokens=0, *, chunk, kv_bits=8, block=16, w_group=None,
           w_tile=DEFAULT_TILE) -> Program:
    """Zigzag Ring Attention: 2N pieces per chunk, node j owns pieces j and 2N-1-j."""
    return ring(model, cluster, hw, prompt_len, max_new_tokens, chunk=chunk, kv_bits=kv_bits, block=block,
                _zig=True, w_group=w_group, w_tile=w_tile)


def pd(model, cluster, hw, prompt_len, max_new_tokens=0, *, chunk, kv_bits=8, block=16, w_group=None,
       w_tile=DEFAULT_TILE) -> Program:
    """Prefill/decode disaggregation: ring prefill on nodes 0..P-1 (P = N // 2), KV hand-off to
    the decode pool P..N-1, KV-stationary decode there."""
    N = cluster.nodes
    P = N // 2
    pre, dec = list(range(P)), list(range(P, N))
    topo = _setup(model, cluster, hw, prompt_len, max_new_tokens, chunk, block, kv_bits, P, False)
    b = ProgramBuilder(model, topo, block, kv_bits, cluster.route_table_size)
    units, pre_owner = _ring_prefill(b, pre, prompt_len, chunk, False)
    owner = [dec[u % len(dec)] for u in range(len(units))]
    _check_owner_memory(model, cluster, prompt_len, max_new_tokens, kv_bits, block, units, owner)
    for layer in range(model.num_layers):
        for u, (t0, t1) in enumerate(units):
            b.transfer(pre_owner[u], [owner[u]], what="kv", mop=MetaOp.DATA, layer=layer, unit=u,
                       nbytes=b.unit_bytes(t0, t1), install="owner")
            b.add(pre_owner[u], Free, layer=layer, unit=u)
    first = _last_row_owner(units, pre_owner, prompt_len)
    return _finish("pd", b, model, topo, block, kv_bits, prompt_len, max_new_tokens, units, owner, cluster,
                   dec[0], dec, first, w_group, w_tile)


SCHEDULES = {"ring": ring, "zigzag": zigzag, "pd": pd}
