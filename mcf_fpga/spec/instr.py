"""The engine's instruction word: its fields, their widths and their bit positions.

What the engine (``hdl.compute.engine.INSTR``, an Amaranth layout built from :data:`FIELDS`),
the command stream (an ``ENGINE`` record's payload is these bits, low word first), golden's
command fetcher and the host compiler agree on. What each field means for each opcode is stated
with the engine's opcodes (``hdl.compute.engine.Op``, docs/compute.md).
"""
from mcf_fpga.spec.meta import DEFAULT_PARAMS

__all__ = ["FIELDS", "INSTR_BITS", "field_bits", "check_field", "instr_value", "instr_fields"]

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
