"""The hardware's ``Meta`` layout, built from the field table of ``spec.meta``.

``meta_layout(params)`` is the ``lib.data.StructLayout`` of the header
(``Signal(meta_layout(p))`` gives a ``View``; the first field of
``spec.meta.FIELDS`` is at bit 0, ``kv_id`` is a nested ``{layer, block}``
struct). The enumerated fields get an Amaranth shape of the spec's enum and
width, so simulators and the generated Verilog name their values. The Python
side packs the same header its own way (``golden.header``); the two are
compared bit for bit in tests/hdl/test_meta.py.
"""
from __future__ import annotations

import types

from amaranth.lib import data, enum

from mcf_fpga.spec.meta import DEFAULT_PARAMS, FIELD_ENUMS, FIELDS, MetaParams

__all__ = ["meta_layout", "kv_id_layout"]


def _shape_enum(name: str, spec_enum, width: int):
    """An Amaranth ``IntEnum`` of ``width`` bits with the members of ``spec_enum``, called
    ``name`` (the name the Verilog's ``enum_base_type`` attributes carry)."""
    def body(ns):
        ns["__module__"] = __name__
        ns.update({m.name: m.value for m in spec_enum})
    return types.new_class(name, (enum.IntEnum,), {"shape": width}, body)


#: Shapes of the enumerated fields. Their names are the Verilog's (``Op`` is ``spec.meta.MetaOp``).
_SHAPES = {field: _shape_enum("Op" if field == "op" else FIELD_ENUMS[field].__name__,
                              FIELD_ENUMS[field], width)
           for field, width in FIELDS if field in FIELD_ENUMS}
# module attributes under their own names, so their members pickle (the ranks of a split
# simulation exchange the instructions a node was given, whose Meta fields are these enums)
globals().update({shape.__name__: shape for shape in _SHAPES.values()})


def kv_id_layout(params: MetaParams = DEFAULT_PARAMS) -> data.StructLayout:
    """``kv_id = {layer, block}``."""
    return data.StructLayout({"layer": params.layer_bits, "block": params.block_bits})


def meta_layout(params: MetaParams = DEFAULT_PARAMS) -> data.StructLayout:
    """The ``Meta`` layout for hardware: ``spec.meta.FIELDS`` in order, first field at bit 0."""
    fields = {}
    for name, width in params.field_widths:
        if name.startswith("kv_id."):
            fields["kv_id"] = kv_id_layout(params)
        else:
            fields[name] = _SHAPES.get(name, width)
    return data.StructLayout(fields)
