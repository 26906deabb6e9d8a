"""The engine's instruction set: its opcodes, the instruction word's fields (widths, bit
positions) and the meaning of the ``flags`` bits per opcode.

What the engine (``hdl.compute.engine.INSTR``, an Amaranth layout built from :data:`FIELDS`),
the command stream (an ``ENGINE`` record's payload is these bits, low word first), golden's
command fetcher and the host compiler agree on. What each field means for each opcode is stated
with the opcodes (:class:`EngineOpcode`, docs/compute.md); the ``flags`` bits of each opcode are
named by its flags class (:data:`FLAGS_OF`: :class:`SpwFlags`, :class:`AttFlags`, ...), whose
``pack()`` is the field's value.
"""
import dataclasses
import enum
import functools
from dataclasses import dataclass, field

from mcf_fpga.spec.meta import DEFAULT_PARAMS

__all__ = ["EngineOpcode", "opcode_name", "FIELDS", "INSTR_BITS", "field_bits", "check_field", "instr_value",
           "instr_fields", "InstrFlags", "SpwFlags", "SprFlags", "GemmFlags", "KvwFlags", "AttFlags", "FoldFlags",
           "EmitFlags", "KvsFlags", "FLAGS_OF", "flags_value"]


class EngineOpcode(enum.IntEnum):
    """The engine instruction's ``op`` field. Addresses: ``SP`` scratchpad words, ``EM`` exponent
    memory rows; the movers walk ``for o < n0: for i < n1: for j``; the ``flags`` bits are named
    by :data:`FLAGS_OF` (docs/compute.md has the full table)."""
    NOP = 0
    SPW = 1      # n0 words from sp_in -> SP[dst + j]   (SpwFlags.em, bit0: to EM[dst + j] instead)
                 #   SpwFlags.packed (bit1, unpack): each sp_in word yields 32/bits (bits 8 or 4)
                 #   sign-extended values (low first); n0 = values written, a multiple of 32/bits
    SPR = 2      # n0 words SP[a + j] -> sp_out          (SprFlags.em, bit0: from EM[a + j])
    GEMM = 3     # y[T=n0, N=n1] = W x[T, K=len]: x SP[a + t*len + k], e EM[ea + t]; y SP[dst + t*n1 + n]
                 #   GemmFlags.reuse (bit0): reuse the previous GEMM's activations (same T, K; no LOAD_X)
    VEC = 4      # vector op `sub` over R rows of len: A SP[a + r*len], B SP[b + r*len], out
                 #   SP[dst + r*len], e EM[ed + r]; R = n0, except ROPE: R = n0*n1 rows
                 #   (n0 tokens x n1 heads) and B = cos|sin table row t: SP[b + t*len/2]
    KVW = 5      # n0*n1 rows (o, i) of len=d: SP[a + o*so + i*len], e EM[ea + o*eo + i*ei]
                 #   -> attention KV memory (KvwFlags.v, bit0: 0 K, 1 V) at kvb + i*kvs + o
                 #   KV in DDR: -> slot b (20 bits), row kvb + i*kvs + o of the KV region
    ATT = 6      # n0*n1 query rows (o=token, i=head): q SP[a + o*so + i*len], e EM[ea + o*eo + i*ei],
                 #   pos = pos0 + o; blocks b < nblk: KV kvb + b*bs, len min(bs, ntok - b*bs),
                 #   key positions kpos + b*bs .. (kpos + ntok <= 2**16);
                 #   AttFlags: bit0 causal, bit1 flat, bit2 final, bit3 ext_m (row r's external max M,
                 #   int32, at SP[b + r]: the unit rescales to max(M, own max) -- phase 2 of the
                 #   distributed flat merge). final: y -> SP[dst + o*so + i*len];
                 #   else the partial of row r = o*n1 + i -> SP[dst + r*W ..] as W words
                 #   (spec.partial.PartialRow: m, l, o[0..d-1] each as an int64 (lo word,
                 #   sign-extended hi word) -- the NIC's SOFTMAX_MERGE payload)
                 #   KV in DDR: kvb..kvb+ntok-1 are staging rows inside one window w (w*win_rows + r);
                 #   the job starts once full[w]; sub bit0: release w after the job's last output
                 #   sub bit1 acc (not with flat or ext_m): row r continues a fold: its partial at
                 #   SP[b + r*W] (reader B) is merged first, result = golden merge_partials(
                 #   [P_r, blocks..]); b may equal dst for the partial output (in place: row r is
                 #   read before it is written)
    EMIT = 7     # one Meta (instruction field `meta`, length := 4*n0*R bytes) on meta_out, then
                 #   the words SP[a + o*so + j] (rows o < R = n1, or 1 when n1 = 0; j < n0) on
                 #   emit_out (`last` on the final word): a KV block or partials for the packetizer /
                 #   NIC (rows: a gather, e.g. the m words of H partial rows: n0=2, n1=H, so=W).
                 #   EmitFlags.em (bit0): words from EM[...] (int8, sign-extended). EmitFlags.packed
                 #   (bit1, pack): 32/bits (bits 8 or 4) consecutive source words per emitted word
                 #   (value j at bits bits*(j % (32/bits)), low bits of each word), n0 a multiple of
                 #   32/bits, length := n0*R*bits/8 bytes
    FOLD = 8     # rows (o < n0, i < n1), r = o*n1 + i, len = d: partial j < nblk of row r at
                 #   SP[a + j*b + r*W] (W words as ATT writes them); result = golden
                 #   merge_partials(P_0 .. P_nblk-1) (ascending j); FoldFlags.final (bit2): finalize ->
                 #   SP[dst + o*so + i*len], else the folded partial -> SP[dst + r*W]
    KVL = 9      # KV in DDR only (else an unknown opcode): load rows kvb .. kvb+ntok-1 of slot b
                 #   (K and V) into staging window dst; retires once the streamer took the command
    KVS = 10     # KV in DDR only (else an unknown opcode): send records kvb .. kvb+ntok-1 of slot b
                 #   (a slot's 2*slot_rows records: K rows then V rows) straight from DDR as one KV
                 #   install packet: Meta `meta` (length := 8 + ntok*row_bytes) on meta_out, then on
                 #   emit_out the 8-byte install header {row0 = kvb, n = ntok, KvsFlags: last = bit0,
                 #   first = bit1, owner = bit2} as two words (low first) and the records'
                 #   bytes as little-endian words (`last` on the final word); mcf_fpga/spec/kvinstall.py.
                 #   Retires after its last word


def opcode_name(op: int) -> str:
    """The name of opcode ``op`` (``"ATT"``), or its number when no opcode has it."""
    return EngineOpcode(op).name if op in EngineOpcode._value2member_map_ else str(op)


#: The instruction's fields in bit order, the first at bit 0: ``(name, width)``. ``meta`` is a
#: Meta header at the default widths (``spec.meta``; the bits of ``golden.header.pack_int``).
FIELDS = (
    ("op", 4), ("sub", 4), ("flags", 4),
    ("a", 20), ("b", 20), ("dst", 20), ("ea", 12), ("ed", 12),
    ("n0", 16), ("n1", 16), ("len", 16), ("so", 20), ("eo", 12), ("ei", 12),
    ("frac", 6), ("bits", 4), ("eps_q", 32),
    ("kvb", 16), ("kvs", 16), ("pos0", 16), ("nblk", 16), ("bs", 16), ("ntok", 16), ("kpos", 16),
    ("meta", DEFAULT_PARAMS.header_bits),
)

#: (name, offset, width) of every field
_POSITIONS = tuple((name, sum(w for _, w in FIELDS[:i]), width) for i, (name, width) in enumerate(FIELDS))
_NAMES = frozenset(name for name, _ in FIELDS)

#: bits of an instruction
INSTR_BITS = sum(width for _, width in FIELDS)


def field_bits(name: str) -> tuple[int, int]:
    """``(offset, width)`` of instruction field ``name``."""
    for field, offset, width in _POSITIONS:
        if field == name:
            return offset, width
    raise KeyError(f"no instruction field {name!r}")


def check_field(name, value, bits, record=None):
    """ValueError naming ``record.name`` unless ``value`` is an int that fits ``bits`` unsigned bits."""
    if not isinstance(value, int) or not 0 <= value < (1 << bits):
        who = f"{record}.{name}" if record else name
        raise ValueError(f"{who}={value!r} does not fit its {bits}-bit field (0..{(1 << bits) - 1})")


def _field_int(v):
    # a field given as an Amaranth constant (``meta`` as a ``data.Const`` of the Meta layout)
    return int(v.as_value().value) if hasattr(v, "as_value") else v


def instr_value(instr: dict) -> int:
    """The instruction bits of a field dict (unset fields 0; ``meta`` an int or an Amaranth
    ``data.Const`` of the Meta layout): the same bits as ``INSTR.const(instr)`` of the engine,
    with plain shifts (building the Amaranth constant costs about a millisecond an instruction,
    which a stream of thousands feels). Raises ValueError naming a field that is unknown or does
    not fit."""
    out = 0
    for name, off, width in _POSITIONS:       # (every field unsigned: plain shifts)
        v = _field_int(instr.get(name, 0))
        check_field(name, v, width, "instr")
        out |= v << off
    unknown = set(instr) - _NAMES
    if unknown:
        raise ValueError(f"instr: unknown field(s) {sorted(unknown)}")
    return out


def instr_fields(value: int) -> dict:
    """The field dict (every field, ``meta`` as an int) of instruction bits ``value``."""
    return {name: (value >> off) & ((1 << width) - 1) for name, off, width in _POSITIONS}


# ---------------------------------------------------------------------- flags, per opcode

def _bit(n: int, doc: str):
    """A flag of the ``flags`` field at bit ``n`` (default off)."""
    return field(default=False, metadata={"bit": n, "doc": doc})


@dataclass(frozen=True)
class InstrFlags:
    """The ``flags`` field of one opcode's instruction: each dataclass field of a subclass is one
    named bit (its ``bit`` metadata); :meth:`pack` is the field's 4-bit value."""

    def pack(self) -> int:
        """The ``flags`` field: every set flag's bit."""
        return _pack(self)

    @classmethod
    def unpack(cls, value: int) -> "InstrFlags":
        """The flags of field value ``value`` (bits this opcode does not name are ignored)."""
        return cls(**{f.name: bool(value >> f.metadata["bit"] & 1) for f in dataclasses.fields(cls)})


@functools.lru_cache(maxsize=1024)
def _pack(flags: InstrFlags) -> int:
    """``flags.pack()`` (cached: a compiled program packs the same few flags millions of times)."""
    return sum(int(bool(getattr(flags, f.name))) << f.metadata["bit"] for f in dataclasses.fields(flags))


@dataclass(frozen=True)
class SpwFlags(InstrFlags):
    """SPW: write ``sp_in`` words to the scratchpad."""
    em: bool = _bit(0, "write the exponent memory EM[dst + j] instead of SP")
    packed: bool = _bit(1, "each sp_in word holds 32/bits packed values (bits 8 or 4), written sign-extended")


@dataclass(frozen=True)
class SprFlags(InstrFlags):
    """SPR: read words to ``sp_out``."""
    em: bool = _bit(0, "read the exponent memory EM[a + j] (sign-extended) instead of SP")


@dataclass(frozen=True)
class GemmFlags(InstrFlags):
    """GEMM."""
    reuse: bool = _bit(0, "reuse the previous GEMM's activations (same T, K; no LOAD_X)")


@dataclass(frozen=True)
class KvwFlags(InstrFlags):
    """KVW: write K or V rows."""
    v: bool = _bit(0, "the rows are V (else K)")


@dataclass(frozen=True)
class AttFlags(InstrFlags):
    """ATT: attention of query rows over KV blocks."""
    causal: bool = _bit(0, "mask keys after the query's position")
    flat: bool = _bit(1, "merge the blocks flat (one max over all blocks) instead of folding")
    final: bool = _bit(2, "write the finalized output y, else the partial rows (spec.partial)")
    ext_m: bool = _bit(3, "row r's external max M (int32) at SP[b + r]: rescale to max(M, own max)")


@dataclass(frozen=True)
class FoldFlags(InstrFlags):
    """FOLD: merge partial rows (its ``final`` is ATT's bit)."""
    final: bool = _bit(2, "finalize to y, else write the folded partial row")


@dataclass(frozen=True)
class EmitFlags(InstrFlags):
    """EMIT: send words as one packet."""
    em: bool = _bit(0, "words from the exponent memory (int8, sign-extended) instead of SP")
    packed: bool = _bit(1, "each emitted word packs 32/bits consecutive source words (bits 8 or 4)")


@dataclass(frozen=True)
class KvsFlags(InstrFlags):
    """KVS: send KV records from DDR as one install packet; the install header's flags
    (spec.kvinstall)."""
    last: bool = _bit(0, "the unit's last install packet")
    first: bool = _bit(1, "the unit's first install packet")
    owner: bool = _bit(2, "the receiver installs the unit as its owner (else a replica)")


#: the flags class of every opcode whose ``flags`` field means something
FLAGS_OF = {EngineOpcode.SPW: SpwFlags, EngineOpcode.SPR: SprFlags, EngineOpcode.GEMM: GemmFlags,
            EngineOpcode.KVW: KvwFlags, EngineOpcode.ATT: AttFlags, EngineOpcode.FOLD: FoldFlags,
            EngineOpcode.EMIT: EmitFlags, EngineOpcode.KVS: KvsFlags}


def flags_value(op: int, flags) -> int:
    """The ``flags`` field of an ``op`` instruction: ``flags`` as an int (raw bits), or the
    opcode's flags class (:data:`FLAGS_OF`) packed. ValueError when the class is another
    opcode's."""
    if not isinstance(flags, InstrFlags):
        return flags
    want = FLAGS_OF.get(op)
    if type(flags) is not want:
        raise ValueError(f"instr: {type(flags).__name__} given for op {opcode_name(op)} "
                         f"(expects {want.__name__ if want else 'no flags'})")
    return flags.pack()
