"""Host-side program builder for :class:`hdl.compute.engine.ComputeEngine`.

:func:`decoder_layer_program` turns one quantised decoder layer (``golden.int_model.QuantLayer``)
and a prefill chunk of ``T`` tokens at positions ``start ..`` into: the instruction list, the
weight-tile beats the loader must stream into ``w_in`` (in program order) and the scratchpad
layout. The program computes exactly ``golden.int_model.IntModel.forward``'s layer body.

Host-side twins of the engine's data formats (pure Python, used by the executor and the tests):
:func:`partial_words` / :func:`words_partial` (a partial row as ``2d+4`` little-endian int32 words:
m, l, o[0..d-1] as int64 lo/hi pairs -- the NIC's SOFTMAX_MERGE payload), :func:`pack_words` /
:func:`unpack_words` (EMIT pack / SPW unpack: 8 or 4 bits per value, value j in bits
``bits*(j % (32/bits))`` of word ``j // (32/bits)``).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from amaranth.lib import data

from golden import numerics as nx
from .engine import INSTR, Op
from .gemm import pack_weight_tile
from .vector import VecOp

__all__ = ["instr", "Layout", "decoder_layer_program", "gemm_weight_beats", "partial_words",
           "words_partial", "pack_words", "unpack_words", "PACK_BITS"]

PACK_BITS = (4, 8)


def _s32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >> 31 else x


def partial_words(m: int, l: int, o) -> list[int]:
    """One partial row (m, l, o[d]) -> ``2d+4`` signed int32 words: each value as an int64
    (lo word, hi word), in the order m, l, o[0], ..., o[d-1] (ATT non-final / FOLD layout)."""
    out = []
    for i, v in enumerate([m, l, *o]):
        v = int(v)
        if not -(2 ** 63) <= v < 2 ** 63:
            raise ValueError(f"partial_words: value {i} = {v} does not fit int64")
        out += [_s32(v), _s32(v >> 32)]
    return out


def words_partial(words, d: int) -> tuple[int, int, list[int]]:
    """Inverse of :func:`partial_words`: ``2d+4`` int32 words -> (m, l, o[d]) as Python ints."""
    words = [int(w) for w in words]
    if len(words) != 2 * d + 4:
        raise ValueError(f"words_partial: got {len(words)} words, a partial of d={d} has {2 * d + 4}")
    v = [(words[2 * i] & 0xFFFFFFFF) + (words[2 * i + 1] << 32) for i in range(d + 2)]
    return v[0], v[1], v[2:]


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
    integer value of the Meta layout (``hdl.meta.pack_int``)."""
    unknown = fields.keys() - _ZERO.keys()
    if unknown:
        raise ValueError(f"instr: unknown field(s) {sorted(unknown)}")
    out = dict(_ZERO)
    out.update(fields)
    out["op"] = op
    out["meta"] = _meta_const(int(out["meta"]))
    return out


_ZERO = {name: 0 for name, _ in INSTR}


@functools.lru_cache(maxsize=4096)
def _meta_const(value: int):
    """The Meta field's constant of integer ``value`` (cached: a program sends the same Meta in
    many packets, and building a layout constant is slow)."""
    return data.Const(INSTR["meta"].shape, value)


def gemm_weight_beats(lin: nx.QuantLinear, pn: int, pk: int) -> list[dict]:
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


@dataclass
class Layout:
    """Scratchpad word addresses / exponent-memory rows of every tensor of the layer."""
    sp: dict
    em: dict
    sp_words: int
    em_rows: int


def _alloc(sizes: dict) -> tuple[dict, int]:
    addr, out = 0, {}
    for k, n in sizes.items():
        out[k] = addr
        addr += n
    return out, addr


def decoder_layer_program(cfg, layer, T: int, *, pn: int, pk: int, block: int, kv_bits: int = 8,
                          cap: int = 16, start: int = 0, decode: bool | None = None):
    """Program for one layer over T tokens at positions ``start ..`` whose earlier KV (positions
    < start) is already in the attention memory (KV of head g at rows g*cap + position).
    ``decode`` (default: T == 1 and start > 0, as golden.int_model) selects the flat merge, else the
    canonical ascending-block left fold. Returns (instrs, weight_beats, layout); load ``h`` at
    layout.sp['H0'] and the RoPE table of the T positions (cos | sin << 16, [T, d/2]) at
    layout.sp['CS'] before running; the result is at sp['H2']."""
    if decode is None:
        decode = T == 1 and start > 0
    D, I, H, Hk, d = cfg.hidden_size, cfg.intermediate_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    Q, KV, rep = H * d, Hk * d, cfg.gqa_ratio
    if start + T > cap:
        raise ValueError(f"start+T={start + T} exceeds the KV capacity per head cap={cap}")
    sp, nsp = _alloc({"H0": T * D, "CS": T * d // 2, "X": T * D, "Qb": T * Q, "Kb": T * KV, "Vb": T * KV,
                      "Qr": T * Q, "Kr": T * KV, "Qq": T * Q, "Kq": T * KV, "Vq": T * KV, "A": T * Q,
                      "Aq": T * Q, "O": T * D, "H1": T * D, "X2": T * D, "G": T * I, "U": T * I,
                      "S": T * I, "Sq": T * I, "Dn": T * D, "H2": T * D})
    em, nem = _alloc({"EX": T, "EQ": T * H, "EK": T * Hk, "EV": T * Hk, "EA": T, "EX2": T, "ES": T})
    eps_q = int(round(cfg.rms_norm_eps * 2 ** (2 * nx.FA)))
    P, beats = [], []

    def gemm(lin, a, ea, K, N, dst, reuse=False):
        P.append(instr(Op.GEMM, flags=int(reuse), a=a, ea=ea, n0=T, len=K, n1=N, dst=dst))
        beats.extend(gemm_weight_beats(lin, pn, pk))

    def vec(sub, a, dst, n0, ln, b=0, n1=0, ed=0, frac=nx.FA, bits=8):
        P.append(instr(Op.VEC, sub=sub, a=a, b=b, dst=dst, n0=n0, n1=n1, len=ln, ed=ed, frac=frac,
                       bits=bits, eps_q=eps_q))

    vec(VecOp.RMSNORM, sp["H0"], sp["X"], T, D, ed=em["EX"])
    gemm(layer.q, sp["X"], em["EX"], D, Q, sp["Qb"])
    gemm(layer.k, sp["X"], em["EX"], D, KV, sp["Kb"], reuse=True)
    gemm(layer.v, sp["X"], em["EX"], D, KV, sp["Vb"], reuse=True)
    vec(VecOp.ROPE, sp["Qb"], sp["Qr"], T, d, b=sp["CS"], n1=H)
    vec(VecOp.ROPE, sp["Kb"], sp["Kr"], T, d, b=sp["CS"], n1=Hk)
    vec(VecOp.QUANT, sp["Qr"], sp["Qq"], T * H, d, ed=em["EQ"])
    vec(VecOp.QUANT, sp["Kr"], sp["Kq"], T * Hk, d, ed=em["EK"], bits=kv_bits)
    vec(VecOp.QUANT, sp["Vb"], sp["Vq"], T * Hk, d, ed=em["EV"], bits=kv_bits)
    for sel, src, e in ((0, "Kq", "EK"), (1, "Vq", "EV")):
        P.append(instr(Op.KVW, flags=sel, a=sp[src], n0=T, n1=Hk, so=KV, len=d, ea=em[e], eo=Hk, ei=1,
                       kvb=start, kvs=cap))
    ntok = start + T
    nblk = math.ceil(ntok / block)
    for g in range(Hk):
        P.append(instr(Op.ATT, flags=0b101 | (0b010 if decode else 0), a=sp["Qq"] + g * rep * d, so=Q,
                       len=d, n0=T, n1=rep, ea=em["EQ"] + g * rep, eo=H, ei=1, pos0=start, kvb=g * cap,
                       nblk=nblk, bs=block, ntok=ntok, dst=sp["A"] + g * rep * d))
    vec(VecOp.QUANT, sp["A"], sp["Aq"], T, Q, ed=em["EA"])
    gemm(layer.o, sp["Aq"], em["EA"], Q, D, sp["O"])
    vec(VecOp.ADD, sp["H0"], sp["H1"], T, D, b=sp["O"])
    vec(VecOp.RMSNORM, sp["H1"], sp["X2"], T, D, ed=em["EX2"])
    gemm(layer.gate, sp["X2"], em["EX2"], D, I, sp["G"])
    gemm(layer.up, sp["X2"], em["EX2"], D, I, sp["U"], reuse=True)
    vec(VecOp.SWIGLU, sp["G"], sp["S"], T, I, b=sp["U"])
    vec(VecOp.QUANT, sp["S"], sp["Sq"], T, I, ed=em["ES"])
    gemm(layer.down, sp["Sq"], em["ES"], I, D, sp["Dn"])
    vec(VecOp.ADD, sp["H1"], sp["H2"], T, D, b=sp["Dn"])
    return P, beats, Layout(sp, em, nsp, nem)
