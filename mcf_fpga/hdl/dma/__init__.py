"""DMA engines (AXI4 master): descriptor-driven reader and writer, the ping-pong loader and the
stream loader (DDR -> the engine's weight and scratchpad streams).

See docs/memory.md for descriptor formats and status codes (``spec.dma``).
"""
from .reader import DMAReader
from .writer import DMAWriter
from .pingpong import PingPongLoader
from mcf_fpga.hdl.dma.loader import StreamLoader

__all__ = ["DMAReader", "DMAWriter", "PingPongLoader", "StreamLoader"]
