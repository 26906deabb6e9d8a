"""Stream-loader descriptors: where a load's units go and how many bytes a load reads.

What the hardware loader (:class:`hdl.dma.loader.StreamLoader`), its golden model
(``golden.loader``) and the command streams agree on:

* a load is ``{dest, addr, count}``: ``count`` units for output ``dest`` (:class:`Dest`) read from
  byte address ``addr`` (a multiple of the bus width in bytes);
* the memory image of a load, :func:`unit_stride_bytes`: unit ``i`` of a load occupies bytes
  ``[addr + i*stride, addr + i*stride + ceil(bits/8))`` little-endian, the rest of its stride is
  padding; a load reads ``load_bytes(...)`` bytes (whole bus beats);
* :func:`check_load` is its legality check, in the hardware's order.
"""
import enum

from mcf_fpga.spec.dma import DmaParams, DmaStatus, check_descriptor

__all__ = ["Dest", "DEST_BITS", "COUNT_BITS", "SP_BITS", "unit_stride_bytes", "load_bytes", "unit_bits", "check_load"]

#: width of a descriptor's ``dest`` (a :class:`Dest`; values 2 and 3 are refused)
DEST_BITS = 2
#: width of a descriptor's unit count
COUNT_BITS = 32
#: a scratchpad word (the engine's ``sp_in``)
SP_BITS = 32


class Dest(enum.IntEnum):
    """Where a load's units go (2 bits in the descriptor; 2 and 3 are refused)."""
    W = 0       #: the engine's weight input ``w_in``: one unit = one GEMM weight beat, ``last`` on the final unit
    SP = 1      #: the engine's scratchpad input ``sp_in``: one unit = one 32-bit word


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


def unit_bits(dest: int, w_bits: int) -> int:
    """Width of one unit of ``dest``: ``w_bits`` for :attr:`Dest.W`, :data:`SP_BITS` for SP."""
    return SP_BITS if dest == Dest.SP else w_bits


def check_load(p: DmaParams, dest: int, addr: int, count: int, w_bits: int) -> DmaStatus:
    """Python reference of the loader's descriptor check, in the hardware's order: ``dest`` >= 2
    (``BAD_DEST``), ``count == 0`` (``ZERO_LENGTH``), ``addr`` not a multiple of the bus width
    (``MISALIGNED``), ``load_bytes`` >= 2**len_width (``TOO_LONG``), then the DMA reader's own
    check of ``{addr, load_bytes}`` (:func:`spec.dma.check_descriptor`: window, max_length)."""
    if dest not in (Dest.W, Dest.SP):
        return DmaStatus.BAD_DEST
    if count == 0:
        return DmaStatus.ZERO_LENGTH
    if addr % p.bytes_per_beat:
        return DmaStatus.MISALIGNED
    n = load_bytes(count, unit_bits(dest, w_bits), p.data_width)
    if n >= 2 ** p.len_width:
        return DmaStatus.TOO_LONG
    return check_descriptor(p, addr, n)
