"""Host-side helpers for :class:`hdl.compute.engine.ComputeEngine` programs: :func:`instr` (one
instruction as a field dict for the ``cmd`` stream) and :func:`gemm_weight_beats` (the weight-tile
beats of a quantised linear layer for ``w_in``). Programs themselves come from the one compiler,
``host.compiler``.

Host-side twins of the engine's data formats (pure Python, used by the executor and the tests):
:func:`partial_words` / :func:`words_partial` (a partial row, :class:`spec.partial.PartialRow`:
``2d+4`` little-endian int32 words, m, l, o[0..d-1] as int64 lo/hi pairs -- the NIC's
SOFTMAX_MERGE payload), :func:`pack_words` /
:func:`unpack_words` (EMIT pack / SPW unpack: 8 or 4 bits per value, value j in bits
``bits*(j % (32/bits))`` of word ``j // (32/bits)``).
"""
from __future__ import annotations

import functools

from amaranth.lib import data

from mcf_fpga.spec.instr import flags_value
from mcf_fpga.spec.partial import PartialRow

from .engine import INSTR
from .gemm import pack_weight_tile

__all__ = ["instr", "gemm_weight_beats", "partial_words",
           "words_partial", "pack_words", "unpack_words", "PACK_BITS"]

PACK_BITS = (4, 8)


def _s32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >> 31 else x


def partial_words(m: int, l: int, o) -> list[int]:
    """One partial row (m, l, o[d]) -> its ``PartialRow(d).words`` signed int32 words: each value
    as an int64 (lo word, hi word), in the order m, l, o[0], ..., o[d-1] (ATT non-final / FOLD
    layout, :class:`spec.partial.PartialRow`)."""
    out = []
    for i, v in enumerate([m, l, *o]):
        v = int(v)
        if not -(2 ** 63) <= v < 2 ** 63:
            raise ValueError(f"partial_words: value {i} = {v} does not fit int64")
        out += [_s32(v), _s32(v >> 32)]
    return out


def words_partial(words, d: int) -> tuple[int, int, list[int]]:
    """Inverse of :func:`partial_words`: ``PartialRow(d).words`` int32 words -> (m, l, o[d]) as
    Python ints."""
    words = [int(w) for w in words]
    row = PartialRow(d)
    if len(words) != row.words:
        raise ValueError(f"words_partial: got {len(words)} words, a partial of d={d} has {row.words}")
    value = lambda k: (words[k] & 0xFFFFFFFF) + (words[k + 1] << 32)
    return value(row.M), value(row.L), [value(row.o_word(i)) for i in range(d)]


def pack_words(values, bits: int) -> list[int]:
    """EMIT pack twin: signed ``bits``-bit values (bits 4 or 8) -> 32-bit words (unsigned ints);
    value j sits at bits ``bits*(j % (32//bits))`` of word ``j // (32//bits)`` (low first)."""
    if bits not in PACK_BITS:
        raise ValueError(f"pack_words: bits={bits} must be one of {PACK_BITS}")
    per = 32 // bits
    values = [int(v) for v in values]
    if len(values) % per:
        raise ValueError(f"pack_words: {len(values)} values is not a multiple of 32/bits={per}")
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    words = []
    for w in range(len(values) // per):
        x = 0
        for k in range(per):
            v = values[w * per + k]
            if not lo <= v <= hi:
                raise ValueError(f"pack_words: value {w * per + k} = {v} outside [{lo}, {hi}] for bits={bits}")
            x |= (v & ((1 << bits) - 1)) << (bits * k)
        words.append(x)
    return words


def unpack_words(words, bits: int, n: int) -> list[int]:
    """SPW unpack twin: the first ``n`` sign-extended ``bits``-bit values of 32-bit ``words``
    (n a multiple of 32/bits)."""
    if bits not in PACK_BITS:
        raise ValueError(f"unpack_words: bits={bits} must be one of {PACK_BITS}")
    per = 32 // bits
    if n % per:
        raise ValueError(f"unpack_words: n={n} is not a multiple of 32/bits={per}")
    words = [int(w) & 0xFFFFFFFF for w in words]
    if len(words) * per < n:
        raise ValueError(f"unpack_words: {len(words)} words hold {len(words) * per} values, need n={n}")
    out = []
    for j in range(n):
        v = (words[j // per] >> (bits * (j % per))) & ((1 << bits) - 1)
        out.append(v - (1 << bits) if v >> (bits - 1) else v)
    return out


def instr(op, **fields) -> dict:
    """One instruction as a field dict for the ``cmd`` stream (unset fields are 0); ``meta`` is the
    integer value of the Meta layout (``golden.header.pack_int``); ``flags`` the opcode's named
    flags (``spec.instr.FLAGS_OF``: ``flags=AttFlags(causal=True)``; raw bits as an int are
    taken as they are). ValueError for an unknown field or another opcode's flags class."""
    unknown = fields.keys() - _ZERO.keys()
    if unknown:
        raise ValueError(f"instr: unknown field(s) {sorted(unknown)}")
    out = dict(_ZERO)
    out.update(fields)
    out["op"] = op
    out["flags"] = flags_value(op, out["flags"])
    out["meta"] = _meta_const(int(out["meta"]))
    return out


_ZERO = {name: 0 for name, _ in INSTR}


@functools.lru_cache(maxsize=4096)
def _meta_const(value: int):
    """The Meta field's constant of integer ``value`` (cached: a program sends the same Meta in
    many packets, and building a layout constant is slow)."""
    return data.Const(INSTR["meta"].shape, value)


def gemm_weight_beats(lin, pn: int, pk: int) -> list[dict]:
    """The ``w_in`` beats of a quantised linear layer ``lin`` (a ``golden.numerics.QuantLinear``:
    ``q``, ``ws``, ``we``, ``bias``, ``group``) for a ``pn`` x ``pk`` GEMM array."""
    if lin.out_features % pn:
        raise ValueError(f"out_features={lin.out_features} must be a multiple of pn={pn}")
    beats = []
    for i in range(lin.out_features // pn):
        r = slice(i * pn, (i + 1) * pn)
        bias = None if lin.bias is None else lin.bias[r].tolist()
        for dd, last in pack_weight_tile(lin.q[r].tolist(), lin.ws[r].tolist(), lin.we[r].tolist(),
                                         bias, pk, lin.group):
            beats.append({"data": dd, "last": last})
    return beats
