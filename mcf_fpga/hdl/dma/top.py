"""AMBA-named tops for Verilog export and cocotb (``mcf_fpga/hdl/blocks.py``).

The memory-system blocks carry command/descriptor/status streams whose payloads are
structs of non-AXI-Stream fields. :class:`AmbaTop` wraps a component and turns each such
stream into a plain AXI-Stream word: ``<name>_tdata`` is the struct's bits in field
order (first field in the low bits), zero-padded to whole bytes. AXI4/AXI4-Lite members and
AXI-Stream packet members pass through under their new names. For example, the DMA's

* ``s_axis_desc_tdata``   = ``addr | length << addr_width``
* ``m_axis_status_tdata`` = ``code | addr << 4``
"""
from mcf_fpga.hdl.bus.amba_top import AmbaTop
from .reader import DMAReader
from .writer import DMAWriter
from .pingpong import PingPongLoader

__all__ = ["AmbaTop", "DMAReaderTop", "DMAWriterTop", "PingPongLoaderTop"]


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
