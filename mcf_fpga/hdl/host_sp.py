"""The node's ``s_axis_sp`` beat: the host's scratchpad words for ``SPW`` (docs/node.md).

An engine without ``spw_pairs`` takes one 32-bit word a beat (``tdata``). With ``spw_pairs`` a beat
carries one word or two, so an SPW of even count to an even address writes two words a cycle from
the host's words as from the stream loader's: ``tdata`` is 64 bits, word 0 in bits 31..0 (always
present), word 1 in bits 63..32, present when ``tkeep`` bit 4 is set (AXI-Stream byte qualifiers:
``0x0f`` one word, ``0xff`` two; the other ``tkeep`` bits are not looked at). A frame of 4n bytes
through a byte-granular AXI-Stream source (the Verilator harness, the board's ``NodeDMA``) arrives
as n // 2 two-word beats and, for odd n, a last one-word beat.
"""
from amaranth.lib import data

from mcf_fpga.spec.loader import SP_BITS

__all__ = ["host_sp_layout", "host_sp_words"]


def host_sp_layout(pairs: bool) -> data.StructLayout:
    """``s_axis_sp``'s payload: ``{data: 32}``, or with ``pairs`` ``{data: 64, keep: 8}``."""
    if pairs:
        return data.StructLayout({"data": 2 * SP_BITS, "keep": 2 * SP_BITS // 8})
    return data.StructLayout({"data": SP_BITS})


def host_sp_words(src, dst) -> list:
    """Statements driving the engine's ``sp_in`` payload ``dst`` (``hdl.dma.loader.sp_layout``)
    from an ``s_axis_sp`` payload ``src`` of the same pairing."""
    if "two" not in dst.shape().members:
        return [dst.data.eq(src.data)]
    return [dst.data.eq(src.data[:SP_BITS]), dst.data1.eq(src.data[SP_BITS:]), dst.two.eq(src.keep[SP_BITS // 8])]
