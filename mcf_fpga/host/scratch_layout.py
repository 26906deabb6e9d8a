"""The compiler's fixed scratch: named regions at the bottom of a node's scratchpad and exponent
memory, sized for ``T`` rows at once (``host.compiler.NodeCompiler``).

The engine runs its queue in order, one instruction at a time, so the scratch of the projections,
of the attention tail + FFN and of the LM head are three groups that share one region: each group
is stacked from word 0, and the scratch ends at the largest group's end (:attr:`ScratchLayout.top`;
the compiler's dynamic arena starts there). Sizes are in scratchpad words (int32) and exponent
rows.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

__all__ = ["Region", "ScratchLayout", "ExponentLayout"]


@dataclass(frozen=True)
class Region:
    """``size`` words (or rows) from ``base``."""
    base: int
    size: int

    @property
    def end(self) -> int:
        """The first word after the region."""
        return self.base + self.size


def _stack(fields: tuple) -> dict:
    """``{name: Region}`` of ``(name, size)`` fields stacked from 0 in order."""
    out, base = {}, 0
    for name, size in fields:
        out[name] = Region(base, size)
        base += size
    return out


@dataclass(frozen=True)
class ScratchLayout:
    """The scratchpad's fixed regions for ``T`` rows (a decoder layer's tile, or the head's)."""
    # ---- the projections: RMSNorm, W_Q/W_K/W_V, RoPE
    rope: Region        #: the RoPE table rows (cos | sin, d/2 words per row)
    x: Region           #: RMSNorm(h), the projections' input
    q: Region           #: x W_Q (T x H*d)
    k: Region           #: x W_K (T x Hk*d)
    v: Region           #: x W_V (T x Hk*d)
    q_rope: Region      #: RoPE(q)
    k_rope: Region      #: RoPE(k)
    # ---- the attention tail and the FFN
    attn: Region        #: the attention output (T x H*d)
    attn_q: Region      #: it quantised, W_O's input
    o_proj: Region      #: attn W_O (T x D)
    h1: Region          #: h + o_proj
    x2: Region          #: RMSNorm(h1), W_gate / W_up's input
    gate: Region        #: x2 W_gate (T x I); SwiGLU in place
    up: Region          #: x2 W_up; then the quantised SwiGLU output, W_down's input
    down: Region        #: W_down's output (T x D), added to h1
    # ---- the LM head
    x_final: Region     #: RMSNorm(h), the head's input
    logits: Region      #: T x V

    @classmethod
    def for_rows(cls, T: int, *, hidden: int, intermediate: int, q_width: int, kv_width: int,
                 head_dim: int, vocab: int) -> "ScratchLayout":
        """The layout for ``T`` rows of a model of these widths (``q_width`` = H*d, ``kv_width``
        = Hk*d): the three groups (module docstring) each stacked from word 0."""
        D, I, Q, KV = hidden, intermediate, q_width, kv_width
        groups = ((("rope", T * head_dim // 2), ("x", T * D), ("q", T * Q), ("k", T * KV), ("v", T * KV),
                   ("q_rope", T * Q), ("k_rope", T * KV)),
                  (("attn", T * Q), ("attn_q", T * Q), ("o_proj", T * D), ("h1", T * D), ("x2", T * D),
                   ("gate", T * I), ("up", T * I), ("down", T * D)),
                  (("x_final", T * D), ("logits", T * vocab)))
        return cls(**{name: r for group in groups for name, r in _stack(group).items()})

    @property
    def top(self) -> int:
        """Words of the scratch (the end of its largest group)."""
        return max(getattr(self, f.name).end for f in dataclasses.fields(self))


@dataclass(frozen=True)
class ExponentLayout:
    """The exponent memory's fixed regions: the row exponents of the quantised GEMM inputs, ``T``
    rows each, stacked from row 0."""
    x: Region           #: of ScratchLayout.x / x_final (the projections', the head's input)
    attn: Region        #: of ScratchLayout.attn_q (W_O's input)
    x2: Region          #: of ScratchLayout.x2 (W_gate / W_up's input)
    swiglu: Region      #: of the quantised SwiGLU output (W_down's input)

    @classmethod
    def for_rows(cls, T: int) -> "ExponentLayout":
        return cls(**_stack(tuple((f.name, T) for f in dataclasses.fields(cls))))

    @property
    def top(self) -> int:
        """Rows of the fixed regions."""
        return max(getattr(self, f.name).end for f in dataclasses.fields(self))
