"""Stream loader: the node reads its input data (weight tiles, scratchpad words) from DDR.

Shared definitions (the block itself, ``StreamLoader``, follows in this module):

* a load descriptor, :func:`load_layout`: ``{dest, addr, count}`` -- ``count`` units for output
  ``dest`` (:class:`Dest`) read from byte address ``addr`` (a multiple of the bus width in bytes);
* the memory image of a load, :func:`unit_stride_bytes`: unit ``i`` of a load occupies bytes
  ``[addr + i*stride, addr + i*stride + ceil(bits/8))`` little-endian, the rest of its stride is
  padding; a load reads ``load_bytes(...)`` bytes (whole bus beats).
"""
import enum

from amaranth.lib import data

__all__ = ["Dest", "load_layout", "unit_stride_bytes", "load_bytes", "COUNT_BITS", "SP_BITS"]

#: width of a descriptor's unit count
COUNT_BITS = 32
#: a scratchpad word (the engine's ``sp_in``)
SP_BITS = 32


class Dest(enum.IntEnum):
    """Where a load's units go (2 bits in the descriptor; 2 and 3 are refused)."""
    W = 0       #: the engine's weight input ``w_in``: one unit = one GEMM weight beat, ``last`` on the final unit
    SP = 1      #: the engine's scratchpad input ``sp_in``: one unit = one 32-bit word


def load_layout(addr_width: int) -> data.StructLayout:
    return data.StructLayout({"dest": 2, "addr": addr_width, "count": COUNT_BITS})


def unit_stride_bytes(bits: int, data_width: int) -> int:
    """Bytes one unit of ``bits`` occupies in a load's image on a ``data_width``-bit bus: the
    smallest power of two bytes >= the unit when it fits a beat (so units never straddle beats),
    else whole beats."""
    if bits <= 0 or bits % 8:
        raise ValueError(f"unit bits must be a positive multiple of 8, got {bits}")
    beat = data_width // 8
    nbytes = bits // 8
    if nbytes <= beat:
        s = 1
        while s < nbytes:
            s *= 2
        return s
    return -(-nbytes // beat) * beat


def load_bytes(count: int, bits: int, data_width: int) -> int:
    """Bytes a load of ``count`` units reads: whole beats."""
    beat = data_width // 8
    return -(-count * unit_stride_bytes(bits, data_width) // beat) * beat
