"""On-board host side (runs on the KR260's Linux): register access, DMA buffers, driver."""
from .mmio import MmapWindow, PynqWindow, open_window, find_uio
from .buffers import Buffer, UdmabufAllocator, PynqAllocator, open_allocator
from .driver import BoardDriver
from .irq import UioIrq

__all__ = ["MmapWindow", "PynqWindow", "open_window", "find_uio", "Buffer", "UdmabufAllocator",
           "PynqAllocator", "open_allocator", "BoardDriver", "UioIrq"]
