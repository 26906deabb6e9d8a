"""Causal attention computed every way the system computes it.

One algorithm per function, each checked against the single-device result:
``monolithic``, ``chunked_prefill``, ``ring``, ``zigzag_ring``, ``replicated``
(MARS: any node may hold any block) and ``kv_stationary_decode`` (KV split
over N shards, partials merged). Each runs on the float backend (compared with
``torch.nn.functional.scaled_dot_product_attention``) or the integer backend
(golden.numerics; every layout gives bit-identical results).

The canonical order (docs/numerics.md): the KV sequence is cut into blocks of
``block`` tokens at absolute positions; the partial of a query row over a block
depends only on that row and that block, so *where* a block partial is computed
never matters. Prefill merges a row's block partials as a left fold in
ascending block order (a node holding partials that arrived early keeps them
until their turn). Decode merges with the order-free flat merge (two phases:
all-reduce max, then rescale and all-reduce sum).

Tensors: q [Hq, L, d]; k, v [Hkv, T, d]. Integer inputs are pairs
``(values, exponents)`` with exponents [H, T]. Outputs: [Hq, L, d] (float, or
int fixed point with FA fraction bits).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from . import numerics as nx

__all__ = ["FloatBackend", "IntBackend", "sdpa_reference", "monolithic", "chunked_prefill", "ring",
           "zigzag_ring", "replicated", "kv_stationary_decode", "Traffic", "expand_kv", "check_layout",
           "tile_partials", "blocks_of", "finish_rows"]


# ---------------------------------------------------------------- token-dim helpers

def _tok(x, a: int, b: int):
    """Slice tokens [a, b) of a tensor [..., T, d] or an integer pair (values, exps)."""
    if isinstance(x, tuple):
        return (x[0][..., a:b, :], x[1][..., a:b])
    return x[..., a:b, :]


def _len(x) -> int:
    return (x[0] if isinstance(x, tuple) else x).shape[-2]


def _bytes(x) -> int:
    if isinstance(x, tuple):
        return x[0].numel() + x[1].numel()          # int8 values + one exponent byte each
    return x.numel() * x.element_size()


def expand_kv(x, rep: int):
    """GQA: repeat each KV head ``rep`` times to line up with the query heads."""
    if rep == 1:
        return x
    if isinstance(x, tuple):
        return (x[0].repeat_interleave(rep, 0), x[1].repeat_interleave(rep, 0))
    return x.repeat_interleave(rep, 0)


def _cat_rows(parts, dim=-2):
    if isinstance(parts[0], tuple):
        return (torch.cat([p[0] for p in parts], dim), torch.cat([p[1] for p in parts], dim + 1))
    return torch.cat(parts, dim)


# ---------------------------------------------------------------- backends

@dataclass
class FPartial:
    m: torch.Tensor
    l: torch.Tensor
    o: torch.Tensor


class FloatBackend:
    """Float online softmax in the natural-log domain. Partials are kept in float64 so that the
    layout (merge order) changes the result by far less than fp32 resolution; ``finalize``
    returns the inputs' dtype."""
    name = "float"

    def block_partial(self, q, k, v, mask) -> FPartial:
        self.dtype = q.dtype
        q, k, v = q.double(), k.double(), v.double()
        s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        s = s.masked_fill(~mask, float("-inf"))
        m = s.amax(-1)
        safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        p = torch.exp(s - safe[..., None])
        return FPartial(m, p.sum(-1), p @ v)

    def merge(self, a: FPartial, b: FPartial) -> FPartial:
        M = torch.maximum(a.m, b.m)
        safe = torch.where(torch.isfinite(M), M, torch.zeros_like(M))
        al, be = torch.exp(a.m - safe), torch.exp(b.m - safe)
        return FPartial(M, a.l * al + b.l * be, a.o * al[..., None] + b.o * be[..., None])

    def flat_merge(self, parts) -> FPartial:
        acc = parts[0]
        for p in parts[1:]:
            acc = self.merge(acc, p)
        return acc

    def finalize(self, p: FPartial):
        return (p.o / p.l[..., None]).to(getattr(self, "dtype", p.o.dtype))


class IntBackend:
    """golden.numerics integer attention; q/k/v are (values, exponents) pairs."""
    name = "int"

    def block_partial(self, q, k, v, mask) -> nx.Partial:
        return nx.block_partial(q[0], q[1], k[0], k[1], v[0], v[1], mask)

    def merge(self, a, b):
        return nx.softmax_merge(a, b)

    def flat_merge(self, parts):
        return nx.flat_merge(parts)

    def finalize(self, p):
        return nx.finalize(p)


def _fold(be, parts):
    acc = parts[0]
    for p in parts[1:]:
        acc = be.merge(acc, p)
    return acc


def sdpa_reference(q, k, v, q_start: int = 0):
    """torch SDPA with a causal mask; queries at absolute positions q_start .. q_start+L-1."""
    rep = q.shape[0] // k.shape[0]
    L, T = q.shape[-2], k.shape[-2]
    mask = torch.arange(T)[None, :] <= (q_start + torch.arange(L))[:, None]
    return F.scaled_dot_product_attention(q, expand_kv(k, rep), expand_kv(v, rep), attn_mask=mask)


# ---------------------------------------------------------------- the core: one query tile

def _check(L: int, block: int, what: str, size: int):
    if block <= 0:
        raise ValueError(f"block={block} must be > 0")
    if size <= 0:
        raise ValueError(f"{what}={size} must be > 0")
    if size % block:
        raise ValueError(f"{what}={size} must be a multiple of block={block}")


def tile_partials(be, q_tile, q_start: int, kv_blocks: dict[int, tuple], block: int):
    """Block partials of the query rows [q_start, q_start+Lq) over the given blocks
    {block id: (k_block, v_block)}; blocks entirely in the future are skipped (exact identity)."""
    Lq = _len(q_tile)
    qpos = q_start + torch.arange(Lq)
    out = {}
    for b, (kb, vb) in kv_blocks.items():
        kpos = b * block + torch.arange(_len(kb))
        mask = kpos[None, :] <= qpos[:, None]
        if not bool(mask.any()):
            continue
        out[b] = be.block_partial(q_tile, kb, vb, mask)
    return out


def blocks_of(k, v, start: int, end: int, block: int):
    return {b: (_tok(k, b * block, min((b + 1) * block, end)), _tok(v, b * block, min((b + 1) * block, end)))
            for b in range(start // block, -(-end // block))}


def finish_rows(be, parts: dict):
    """Canonical prefill merge: left fold in ascending block order."""
    return be.finalize(_fold(be, [parts[b] for b in sorted(parts)]))


# ---------------------------------------------------------------- layouts

@dataclass
class Traffic:
    """Bytes moved between nodes by a layout (KV payload only), and messages sent."""
    bytes: int = 0
    messages: int = 0
    per_node_recv: dict = field(default_factory=dict)

    def send(self, dst: int, payload):
        n = _bytes(payload[0]) + _bytes(payload[1]) if isinstance(payload, list) else _bytes(payload)
        self.bytes += n
        self.messages += 1
        self.per_node_recv[dst] = self.per_node_recv.get(dst, 0) + n


def monolithic(be, q, k, v, block: int):
    """All queries on one device, all blocks in ascending order."""
    L = _len(k)
    _check(L, block, "sequence length", L)
    rep = _hq(q) // _hq(k)
    k, v = expand_kv(k, rep), expand_kv(v, rep)
    parts = tile_partials(be, q, 0, blocks_of(k, v, 0, L, block), block)
    return finish_rows(be, parts)


def _hq(x):
    return (x[0] if isinstance(x, tuple) else x).shape[0]


def chunked_prefill(be, q, k, v, block: int, chunk: int):
    """Chunk c's queries attend blocks 0 .. end of chunk c (the KV produced so far)."""
    L = _len(k)
    _check(L, block, "sequence length", L)
    _check(chunk, block, "chunk", chunk)
    rep = _hq(q) // _hq(k)
    k, v = expand_kv(k, rep), expand_kv(v, rep)
    outs = []
    for c0 in range(0, L, chunk):
        c1 = min(c0 + chunk, L)
        parts = tile_partials(be, _tok(q, c0, c1), c0, blocks_of(k, v, 0, c1, block), block)
        outs.append(finish_rows(be, parts))
    return torch.cat(outs, dim=-2)


def ring(be, q, k, v, block: int, nodes: int, traffic: Traffic | None = None):
    """Ring attention: node i holds shard i of Q, K, V; KV shards circulate for nodes-1 steps.
    Node i receives shards i-1, i-2, ... (descending) and keeps their block partials until the
    canonical ascending fold at the end."""
    L = _len(k)
    if nodes <= 0:
        raise ValueError(f"nodes={nodes} must be > 0")
    _check(L, block * nodes, "sequence length", L)
    S = L // nodes
    rep = _hq(q) // _hq(k)
    k, v = expand_kv(k, rep), expand_kv(v, rep)
    held = [(_tok(k, i * S, (i + 1) * S), _tok(v, i * S, (i + 1) * S), i) for i in range(nodes)]
    parts = [dict() for _ in range(nodes)]
    for step in range(nodes):
        for i in range(nodes):
            kk, vv, src = held[i]
            blocks = {src * S // block + j: (_tok(kk, j * block, (j + 1) * block),
                                             _tok(vv, j * block, (j + 1) * block))
                      for j in range(S // block)}
            parts[i].update(tile_partials(be, _tok(q, i * S, (i + 1) * S), i * S, blocks, block))
        if step < nodes - 1:   # pass KV to the next node on the ring
            held = [held[(i - 1) % nodes] for i in range(nodes)]
            if traffic is not None:
                for i in range(nodes):
                    traffic.send(i, [held[i][0], held[i][1]])
    return torch.cat([finish_rows(be, parts[i]) for i in range(nodes)], dim=-2)


def zigzag_ring(be, q, k, v, block: int, nodes: int, traffic: Traffic | None = None):
    """Zigzag ring attention: 2N chunks, node i holds chunks i and 2N-1-i (balanced causal work);
    the KV pairs circulate on the ring."""
    L = _len(k)
    if nodes <= 0:
        raise ValueError(f"nodes={nodes} must be > 0")
    _check(L, block * 2 * nodes, "sequence length", L)
    C = L // (2 * nodes)
    rep = _hq(q) // _hq(k)
    k, v = expand_kv(k, rep), expand_kv(v, rep)
    mine = [(i, 2 * nodes - 1 - i) for i in range(nodes)]
    held = [mine[i] for i in range(nodes)]
    parts = [{c: {} for c in mine[i]} for i in range(nodes)]
    for step in range(nodes):
        for i in range(nodes):
            blocks = {}
            for c in held[i]:
                blocks.update(blocks_of(k, v, c * C, (c + 1) * C, block))
            for c in mine[i]:
                parts[i][c].update(tile_partials(be, _tok(q, c * C, (c + 1) * C), c * C, blocks, block))
        if step < nodes - 1:
            held = [held[(i - 1) % nodes] for i in range(nodes)]
            if traffic is not None:
                for i in range(nodes):
                    for c in held[i]:
                        traffic.send(i, [_tok(k, c * C, (c + 1) * C), _tok(v, c * C, (c + 1) * C)])
    out = [None] * (2 * nodes)
    for i in range(nodes):
        for c in mine[i]:
            out[c] = finish_rows(be, parts[i][c])
    return torch.cat(out, dim=-2)


def replicated(be, q, k, v, block: int, chunk: int, compute_node, holders, traffic: Traffic | None = None):
    """MARS-style layout: chunk c is computed on ``compute_node[c]``; block b is held by the node
    set ``holders[b]`` (owner plus any replicas). A node reads blocks it holds locally; any other
    block is fetched from the lowest-numbered holder (counted in ``traffic``)."""
    L = _len(k)
    _check(L, block, "sequence length", L)
    _check(chunk, block, "chunk", chunk)
    nchunks = -(-L // chunk)
    if len(compute_node) != nchunks:
        raise ValueError(f"compute_node has {len(compute_node)} entries, expected {nchunks} chunks")
    nblocks = -(-L // block)
    for b in range(nblocks):
        if not holders.get(b):
            raise ValueError(f"block {b} has no holder")
    rep = _hq(q) // _hq(k)
    k, v = expand_kv(k, rep), expand_kv(v, rep)
    outs = []
    for c in range(nchunks):
        c0, c1 = c * chunk, min((c + 1) * chunk, L)
        node = compute_node[c]
        blocks = blocks_of(k, v, 0, c1, block)
        if traffic is not None:
            for b, kvb in blocks.items():
                if node not in holders[b]:
                    traffic.send(node, list(kvb))
        outs.append(finish_rows(be, tile_partials(be, _tok(q, c0, c1), c0, blocks, block)))
    return torch.cat(outs, dim=-2)


def kv_stationary_decode(be, q, k, v, block: int, shards, traffic: Traffic | None = None):
    """Decode: the query row at position T-1 (q [Hq, 1, d]) goes to every node; node i attends
    over its blocks ``shards[i]`` and returns partials; the merge is the order-free flat merge
    (distributed as all-reduce max, local rescale, all-reduce sum)."""
    T = _len(k)
    nblocks = -(-T // block)
    seen = sorted(b for s in shards for b in s)
    if seen != list(range(nblocks)):
        raise ValueError(f"shards must cover blocks 0..{nblocks - 1} exactly once, got {seen}")
    rep = _hq(q) // _hq(k)
    k, v = expand_kv(k, rep), expand_kv(v, rep)
    blocks = blocks_of(k, v, 0, T, block)
    node_parts = []
    for i, shard in enumerate(shards):
        local = tile_partials(be, q, T - 1, {b: blocks[b] for b in shard}, block)
        node_parts.append([local[b] for b in sorted(local)])
        if traffic is not None:
            traffic.send(i, q)
    all_parts = [p for parts in node_parts for p in parts]
    return be.finalize(be.flat_merge(all_parts))


def check_layout(name: str):
    """Return the layout function by name (for CLI/tests)."""
    table = {"monolithic": monolithic, "chunked": chunked_prefill, "ring": ring, "zigzag": zigzag_ring,
             "replicated": replicated, "decode": kv_stationary_decode}
    if name not in table:
        raise ValueError(f"layout={name!r} unknown, expected one of {sorted(table)}")
    return table[name]
