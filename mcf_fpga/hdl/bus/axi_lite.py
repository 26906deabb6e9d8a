"""AMBA AXI4-Lite (IHI 0022, section B1) as five lib.stream channels.

The signature is the *master* view: ``aw``, ``w``, ``ar`` are outputs,
``b`` and ``r`` inputs. Use ``.flip()`` for a slave (``s_axi``).
"""
import enum

from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["Resp", "AXI4LiteSignature"]


class Resp(enum.IntEnum):
    """BRESP/RRESP encoding (AXI4: OKAY, EXOKAY, SLVERR, DECERR)."""
    OKAY = 0
    EXOKAY = 1
    SLVERR = 2
    DECERR = 3


class AXI4LiteSignature(wiring.Signature):
    """AXI4-Lite master signature.

    Parameters
    ----------
    addr_width : int
        Byte address width (AWADDR/ARADDR).
    data_width : int
        32 or 64 (AXI4-Lite allows only these).
    """

    def __init__(self, addr_width: int = 32, data_width: int = 32):
        if data_width not in (32, 64):
            raise ValueError(f"AXI4-Lite data_width must be 32 or 64, got {data_width}")
        if not 1 <= addr_width <= 64:
            raise ValueError(f"addr_width must be in 1..64, got {addr_width}")
        self.addr_width = addr_width
        self.data_width = data_width
        addr = data.StructLayout({"addr": addr_width, "prot": 3})
        super().__init__({
            "aw": Out(stream.Signature(addr)),
            "w":  Out(stream.Signature(data.StructLayout({"data": data_width, "strb": data_width // 8}))),
            "b":  In(stream.Signature(data.StructLayout({"resp": 2}))),
            "ar": Out(stream.Signature(addr)),
            "r":  In(stream.Signature(data.StructLayout({"data": data_width, "resp": 2}))),
        })

    def __eq__(self, other):
        return (type(other) is type(self) and other.addr_width == self.addr_width
                and other.data_width == self.data_width)

    def __hash__(self):
        return hash((type(self), self.addr_width, self.data_width))

    def __repr__(self):
        return f"AXI4LiteSignature(addr_width={self.addr_width}, data_width={self.data_width})"
