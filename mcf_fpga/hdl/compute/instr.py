"""The engine's instruction word as an Amaranth layout, and the engine's error bits."""
from amaranth.lib import data

from mcf_fpga.spec.instr import FIELDS as INSTR_FIELDS
from mcf_fpga.spec.meta import DEFAULT_PARAMS
from mcf_fpga.hdl.meta import meta_layout

__all__ = ["INSTR", "ERR_OPCODE", "ERR_SHAPE", "ERR_UNIT", "ERR_KV"]

#: the engine's ``error`` bits (STATUS bits 8..15): unknown opcode, shape/address beyond the
#: limits, a unit's own error, a KV streamer error
ERR_OPCODE, ERR_SHAPE, ERR_UNIT, ERR_KV = 1, 2, 4, 8

#: The instruction word (``spec.instr.FIELDS``; ``meta`` as the Meta layout)
INSTR = data.StructLayout({name: meta_layout(DEFAULT_PARAMS) if name == "meta" else width
                           for name, width in INSTR_FIELDS})
