"""AXI-Stream packet stream (AMBA 4 AXI4-Stream, IHI 0051A), as a lib.stream.

A packet is a run of beats ending with ``last``. ``keep`` has one bit per data
byte (TKEEP); only the last beat of a packet may have a partial ``keep``, and
it is contiguous from byte 0 (this project never sends null bytes mid-packet).
``user`` carries sideband bits (TUSER); width 0 removes it.
"""
from amaranth.lib import data, stream

__all__ = ["PacketLayout", "PacketSignature"]


def PacketLayout(data_width: int, user_width: int = 0) -> data.StructLayout:
    """Payload layout of one AXI-Stream beat: ``data``, ``keep``, ``last`` [, ``user``]."""
    if data_width <= 0 or data_width % 8:
        raise ValueError(f"data_width must be a positive multiple of 8, got {data_width}")
    if user_width < 0:
        raise ValueError(f"user_width must be >= 0, got {user_width}")
    fields = {"data": data_width, "keep": data_width // 8, "last": 1}
    if user_width:
        fields["user"] = user_width
    return data.StructLayout(fields)


def PacketSignature(data_width: int, user_width: int = 0) -> stream.Signature:
    """Stream signature of an AXI-Stream packet interface (source side)."""
    return stream.Signature(PacketLayout(data_width, user_width))
