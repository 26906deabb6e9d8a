"""AMBA-named tops for Verilog export and cocotb (``hdl/blocks.py``).

The memory-system blocks carry command/descriptor/status streams whose payloads are
structs of non-AXI-Stream fields. :class:`AmbaTop` wraps a component and turns each such
stream into a plain AXI-Stream word: ``<name>_tdata`` is the struct's bits in field
order (first field in the low bits), zero-padded to whole bytes. AXI4/AXI4-Lite members and
AXI-Stream packet members pass through under their new names. For example, the DMA's

* ``s_axis_desc_tdata``   = ``addr | length << addr_width``
* ``m_axis_status_tdata`` = ``code | addr << 4``
"""
from amaranth import Module
from amaranth.hdl import Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hdl.bus import PacketLayout
from .reader import DMAReader
from .writer import DMAWriter
from .pingpong import PingPongLoader

__all__ = ["AmbaTop", "DMAReaderTop", "DMAWriterTop", "PingPongLoaderTop"]

_AXIS = {"data", "keep", "last", "user"}


def _needs_flat(sig):
    if not isinstance(sig, stream.Signature):
        return False
    layout = sig.members["payload"].shape
    return not (isinstance(layout, data.StructLayout) and {n for n, _ in layout} <= _AXIS)


class AmbaTop(wiring.Component):
    """Wrap ``inner``, renaming members by ``names`` (``{inner_member: amba_name}``) and
    flattening non-AXI-Stream struct streams to byte-padded ``tdata`` words."""

    def __init__(self, inner, names: dict):
        self.inner, self.names = inner, dict(names)
        members = {}
        for name, member in inner.signature.members.items():
            sig = member.signature
            flipped = isinstance(sig, wiring.FlippedSignature)
            base = sig.flip() if flipped else sig
            flow = member.flow
            if flipped:      # an In(signature) member: the port's own flow is In
                flow = In
            if _needs_flat(base):
                width = Value.cast(getattr(inner, name).payload).shape().width
                base = stream.Signature(-(-width // 8) * 8)
            members[self.names.get(name, name)] = (In if flow == In else Out)(base)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.inner = inner = self.inner
        for name, member in inner.signature.members.items():
            src = getattr(inner, name)
            dst = getattr(self, self.names.get(name, name))
            is_in = isinstance(member.signature, wiring.FlippedSignature)
            if _needs_flat(member.signature.flip() if is_in else member.signature):
                pw = Value.cast(src.payload).shape().width
                if is_in:
                    m.d.comb += [src.valid.eq(dst.valid), dst.ready.eq(src.ready),
                                 src.payload.eq(dst.payload[:pw])]
                else:
                    m.d.comb += [dst.valid.eq(src.valid), src.ready.eq(dst.ready),
                                 dst.payload.eq(Value.cast(src.payload))]
            elif is_in:
                wiring.connect(m, wiring.flipped(dst), src)
            else:
                wiring.connect(m, src, wiring.flipped(dst))
        return m


def DMAReaderTop(**params):
    """:class:`~hdl.dma.reader.DMAReader` as ``s_axis_desc``, ``m_axis``, ``m_axis_status``, ``m_axi``."""
    return AmbaTop(DMAReader(**params), {"desc": "s_axis_desc", "data": "m_axis",
                                         "status": "m_axis_status"})


def DMAWriterTop(**params):
    """:class:`~hdl.dma.writer.DMAWriter` as ``s_axis_desc``, ``s_axis``, ``m_axis_status``, ``m_axi``."""
    return AmbaTop(DMAWriter(**params), {"desc": "s_axis_desc", "data": "s_axis",
                                         "status": "m_axis_status"})


def PingPongLoaderTop(depth=256, **params):
    """:class:`~hdl.dma.pingpong.PingPongLoader` as ``s_axis_desc``, ``m_axis`` (tuser = buffer),
    ``m_axis_status``, ``m_axi``."""
    return AmbaTop(PingPongLoader(depth, **params), {"desc": "s_axis_desc", "out": "m_axis",
                                                     "status": "m_axis_status"})
