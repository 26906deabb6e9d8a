"""The tensor-parallel weight group of decode: which slice of every linear layer a W node streams,
and the wire format of the slices the group exchanges.

A decode program with ``w_group = (w_0, ..., w_{W-1})`` (W > 1; ``host.program.add_decode_requests``)
splits every linear layer by OUTPUT rows (``QuantLinear.rows``): node ``w_j`` computes slice j.
A row slice of a GEMM computes exactly those output columns of the full GEMM (row exponents,
group scales and bias slice with the rows; groups run along the input), so the results are
IntModel's bit for bit.

* W_Q: the query heads ``heads(j)`` (``num_heads / W`` whole heads: RoPE pairs and the per-head
  quantisation stay on one node); W_K / W_V: the KV heads ``kv_heads(j)`` =
  ``floor(j Hk / W) .. floor((j+1) Hk / W)`` (whole heads; with W > Hk some nodes have none:
  Qwen2.5-1.5B on 4 nodes computes KV head 0 on w_1 and KV head 1 on w_3);
* W_O / W_down: the hidden slice ``hidden(j)``; W_gate / W_up: the intermediate slice
  ``inter(j)``; the head: the vocabulary slice ``vocab(j)``. These are split on multiples of
  ``tile`` rows (the GEMM tile ``pn``: a slice is whole weight tiles, its stream the same tiles as
  the full layer's) as evenly as the tile count allows.

Refused (``ValueError`` naming ``w_group``/``w_tile`` and the limit): duplicate or unknown nodes,
``num_heads`` not a multiple of W, a dimension that is not whole tiles or has fewer tiles than W.

Wire format (``wire(what, j)``: ``(field, offset, count, bits)`` per EMIT set, in order; bits 8 or
``kv_bits``: packed values; 32: one int32 word per value). Exponents travel one per word so a
slice lands at its own offset without touching its neighbours' (a packed set is padded to whole
words). ``nbytes`` is the payload size.
"""
from __future__ import annotations

from dataclasses import dataclass

from mcf_fpga.spec.partial import PartialRow

from .config import ModelConfig

__all__ = ["WeightSplit", "TAGS", "STAGES", "DEFAULT_TILE", "group_of_all"]

#: kv_id.block of the DATA messages of a TP decode (the inbox key next to the source and layer);
#: 0 is the token's K/V (as with one W node)
TAGS = {"kvtok": 0, "a": 1, "h1": 2, "s": 3, "h": 4, "best": 5, "pm": 6}

#: the ``DecodeFinish`` stages of a W group (``DecodeFinish.name``) and the vector each one gathers after it
STAGES = (("attn", "a"), ("o", "h1"), ("ffn", "s"), ("down", "h"))

#: default slice alignment: the KR260 GEMM tile (pn = 16; the simulated node's pn = 4 divides it)
DEFAULT_TILE = 16


def group_of_all(leader: int, n_nodes: int) -> tuple:
    """The W group of every node, led by ``leader`` (the merge root comes first)."""
    return (leader,) + tuple(n for n in range(n_nodes) if n != leader)


@dataclass(frozen=True)
class WeightSplit:
    """The split of a model's linear layers over the W nodes ``nodes`` (slice j on ``nodes[j]``;
    ``nodes[0]`` leads: merge root, attention output)."""
    model: ModelConfig
    nodes: tuple
    tile: int = DEFAULT_TILE
    kv_bits: int = 8

    def __post_init__(self):
        m, W = self.model, len(self.nodes)
        if W < 2:
            raise ValueError(f"w_group={self.nodes}: a weight split needs at least 2 nodes")
        if not isinstance(self.tile, int) or self.tile <= 0:
            raise ValueError(f"w_tile={self.tile!r}, expected a positive integer (GEMM rows per tile)")
        if m.num_heads % W:
            raise ValueError(f"w_group has {W} nodes: num_heads={m.num_heads} is not a multiple of {W} "
                             f"(every W node computes whole query heads)")
        for name, n in (("hidden_size", m.hidden_size), ("intermediate_size", m.intermediate_size),
                        ("vocab_size", m.vocab_size)):
            if n % self.tile or n // self.tile < W:
                raise ValueError(f"w_group has {W} nodes, w_tile={self.tile}: {name}={n} must be whole tiles "
                                 f"of {self.tile} rows, at least {W} of them (one slice per W node)")

    @staticmethod
    def check_nodes(w_group, n_nodes: int) -> tuple:
        """``w_group`` as a tuple of distinct nodes of 0..n_nodes-1, or ValueError."""
        wg = tuple(w_group)
        if not wg:
            raise ValueError("w_group=(): expected at least one node")
        bad = [n for n in wg if not isinstance(n, int) or not 0 <= n < n_nodes]
        if bad:
            raise ValueError(f"w_group={wg}: nodes {bad} are not nodes of the topology (0..{n_nodes - 1})")
        if len(set(wg)) != len(wg):
            raise ValueError(f"w_group={wg}: duplicate nodes {sorted({n for n in wg if wg.count(n) > 1})}")
        return wg

    @property
    def W(self) -> int:
        return len(self.nodes)

    def index(self, node: int) -> int:
        return self.nodes.index(node)

    def _split(self, n: int, j: int) -> tuple:
        t = n // self.tile
        return (j * t // self.W * self.tile, (j + 1) * t // self.W * self.tile)

    def heads(self, j: int) -> tuple:
        per = self.model.num_heads // self.W
        return (j * per, (j + 1) * per)

    def kv_heads(self, j: int) -> tuple:
        hk = self.model.num_kv_heads
        return (j * hk // self.W, (j + 1) * hk // self.W)

    def hidden(self, j: int) -> tuple:
        return self._split(self.model.hidden_size, j)

    def inter(self, j: int) -> tuple:
        return self._split(self.model.intermediate_size, j)

    def vocab(self, j: int) -> tuple:
        return self._split(self.model.vocab_size, j)

    def rows(self, lin: str, j: int) -> tuple:
        """Output rows of linear layer ``lin`` ('q' 'k' 'v' 'o' 'gate' 'up' 'down' 'head') on slice j
        ((a, a) when it has none)."""
        d = self.model.head_dim
        if lin == "q":
            h0, h1 = self.heads(j)
            return (h0 * d, h1 * d)
        if lin in ("k", "v"):
            g0, g1 = self.kv_heads(j)
            return (g0 * d, g1 * d)
        if lin in ("o", "down"):
            return self.hidden(j)
        if lin in ("gate", "up"):
            return self.inter(j)
        if lin == "head":
            return self.vocab(j)
        raise ValueError(f"unknown linear layer {lin!r}")

    def wire(self, what: str, j: int = 0) -> tuple:
        """EMIT sets of message ``what`` from slice j: ((field, offset, count, bits), ...)."""
        d, kb = self.model.head_dim, self.kv_bits
        if what == "q":
            h0, h1 = self.heads(j)
            return (("q", h0 * d, (h1 - h0) * d, 8), ("eq", h0, h1 - h0, 32))
        if what == "kvtok":
            g0, g1 = self.kv_heads(j)
            n = g1 - g0
            return (("kt", g0 * d, n * d, kb), ("ekt", g0, n, 32), ("vt", g0 * d, n * d, kb), ("evt", g0, n, 32))
        if what == "pm":
            h0, h1 = self.heads(j)
            w = PartialRow(d).words
            return (("pm", h0 * w, (h1 - h0) * w, 32),)
        if what == "a":
            h0, h1 = self.heads(j)
            return (("a", h0 * d, (h1 - h0) * d, 32),)
        if what in ("h1", "h"):
            a, b = self.hidden(j)
            return ((what, a, b - a, 32),)
        if what == "s":
            a, b = self.inter(j)
            return (("s", a, b - a, 32),)
        if what == "best":
            return (("best", 0, 2, 32),)
        raise ValueError(f"unknown TP message {what!r}")

    def nbytes(self, what: str, j: int = 0) -> int:
        return sum(n * bits // 8 for _f, _o, n, bits in self.wire(what, j))

    def weight_rows(self, j: int) -> dict:
        """{linear: (a, b)} of every linear layer slice j streams per layer, and the head."""
        return {lin: self.rows(lin, j) for lin in ("q", "k", "v", "o", "gate", "up", "down", "head")}
