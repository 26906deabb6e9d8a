"""AMBA AXI4 (IHI 0022, section A) full interface as five lib.stream channels.

Master view: ``aw``, ``w``, ``ar`` out; ``b``, ``r`` in. Only the fields this
project drives are present (no QoS/region/user); the exporter ties the rest off
at the board wrapper. ``len`` is beats-1 (AxLEN), ``size`` is log2(bytes/beat).
"""
import enum

from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["Burst", "AXI4Signature"]


class Burst(enum.IntEnum):
    """AxBURST encoding."""
    FIXED = 0
    INCR = 1
    WRAP = 2


class AXI4Signature(wiring.Signature):
    """AXI4 master signature.

    Parameters
    ----------
    addr_width : int
        Byte address width.
    data_width : int
        Bus width in bits: a power of two from 8 to 1024 (128 on Zynq HP ports).
    id_width : int
        AxID/xID width (>= 1).
    """

    def __init__(self, addr_width: int = 40, data_width: int = 128, id_width: int = 4):
        if data_width < 8 or data_width > 1024 or data_width & (data_width - 1):
            raise ValueError(f"AXI4 data_width must be a power of two in 8..1024, got {data_width}")
        if not 12 <= addr_width <= 64:
            raise ValueError(f"addr_width must be in 12..64, got {addr_width}")
        if not 1 <= id_width <= 16:
            raise ValueError(f"id_width must be in 1..16, got {id_width}")
        self.addr_width, self.data_width, self.id_width = addr_width, data_width, id_width
        ax = data.StructLayout({"id": id_width, "addr": addr_width, "len": 8, "size": 3,
                                "burst": 2, "cache": 4, "prot": 3})
        super().__init__({
            "aw": Out(stream.Signature(ax)),
            "w":  Out(stream.Signature(data.StructLayout({"data": data_width, "strb": data_width // 8,
                                                          "last": 1}))),
            "b":  In(stream.Signature(data.StructLayout({"id": id_width, "resp": 2}))),
            "ar": Out(stream.Signature(ax)),
            "r":  In(stream.Signature(data.StructLayout({"id": id_width, "data": data_width, "resp": 2,
                                                         "last": 1}))),
        })

    @property
    def bytes_per_beat(self) -> int:
        return self.data_width // 8

    def __eq__(self, other):
        return (type(other) is type(self) and (other.addr_width, other.data_width, other.id_width)
                == (self.addr_width, self.data_width, self.id_width))

    def __hash__(self):
        return hash((type(self), self.addr_width, self.data_width, self.id_width))

    def __repr__(self):
        return (f"AXI4Signature(addr_width={self.addr_width}, data_width={self.data_width}, "
                f"id_width={self.id_width})")
