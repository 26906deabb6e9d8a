"""Golden packing of the ``Meta`` wire header, from the field table of ``spec.meta``.

The reference's own implementation of the format: plain integer shifts over
``MetaParams.field_widths`` (``spec.meta.FIELDS`` in bit order, the first
field at bit 0). The hardware gets the same bits from an Amaranth
``StructLayout`` (``hdl.meta.meta_layout``); tests/hdl/test_meta.py checks
that the two agree bit for bit, so a packing bug on either side shows.

The wire header is that integer, zero padded to ``params.header_bytes`` and
sent little-endian (wire byte ``i`` holds bits ``8*i .. 8*i+7``).
"""
from __future__ import annotations

from mcf_fpga.spec.meta import DEFAULT_PARAMS, MetaFields, MetaParams

__all__ = ["field_bits", "pack_int", "unpack_int", "pack_header", "unpack_header"]


def field_bits(name: str, params: MetaParams = DEFAULT_PARAMS) -> tuple[int, int]:
    """``(offset, width)`` of header field ``name`` (a name of ``spec.meta.FIELDS``)."""
    offset = 0
    for field, width in params.field_widths:
        if field == name:
            return offset, width
        offset += width
    raise KeyError(f"no header field {name!r}")


def pack_int(meta: MetaFields, params: MetaParams = DEFAULT_PARAMS) -> int:
    """``Meta`` -> the integer value of the header (bit 0 = first field); any 4-bit ``op``."""
    values = meta.validate(params).field_values()
    value, offset = 0, 0
    for name, width in params.field_widths:
        value |= values[name] << offset
        offset += width
    return value


def unpack_int(value: int, params: MetaParams = DEFAULT_PARAMS) -> MetaFields:
    """Integer value of the header -> ``MetaFields`` (reserved bits ignored; an unknown ``op``
    kept as an int)."""
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"header value must be a non-negative integer, got {value!r}")
    fields = {}
    for name, width in params.field_widths:
        fields[name] = value & ((1 << width) - 1)
        value >>= width
    return MetaFields.from_field_values(fields)


def pack_header(meta: MetaFields, params: MetaParams = DEFAULT_PARAMS) -> bytes:
    """``Meta`` -> the ``params.header_bytes`` wire header (little-endian, zero padded)."""
    return pack_int(meta, params).to_bytes(params.header_bytes, "little")


def unpack_header(header: bytes, params: MetaParams = DEFAULT_PARAMS) -> MetaFields:
    """Wire header (exactly ``params.header_bytes`` bytes) -> ``MetaFields``."""
    if len(header) != params.header_bytes:
        raise ValueError(f"wire header must be exactly {params.header_bytes} bytes, got {len(header)}")
    return unpack_int(int.from_bytes(header, "little") & ((1 << params.header_bits) - 1), params)
