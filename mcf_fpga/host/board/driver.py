"""Board driver: the executor-facing interface to one KR260 node.

``BoardDriver(window, allocator)`` offers what an executor needs:

* ``read_reg(offset)`` / ``write_reg(offset, value)`` — 32-bit AXI-Lite registers;
* ``load(name, array)`` — copy an array into a named DMA buffer (allocated on
  first use, same shape and dtype after), flush it, return its physical address;
* ``dump(name)`` — invalidate and return a copy of a named buffer;
* ``identify()`` — check the ID register (magic "MCF") and return the version
  and the node id / node count.

``BoardDriver.open()`` picks the backends on the board (pynq, else UIO or
/dev/mem; pynq.allocate, else u-dma-buf). Register offsets of the stand-in
top are in boards.standin.REGISTERS.
"""
import numpy as np

from .mmio import open_window
from .buffers import open_allocator

__all__ = ["BoardDriver", "ID_MAGIC", "REG_ID", "REG_NODE"]

ID_MAGIC = 0x4D4346          # "MCF" in ID[31:8]
REG_ID, REG_NODE = 0x00, 0x20
AXIL_BASE, AXIL_SIZE = 0xA000_0000, 0x10000


class BoardDriver:
    def __init__(self, window, allocator=None):
        self.window = window
        self.allocator = allocator
        self.buffers = {}

    @classmethod
    def open(cls, base=AXIL_BASE, size=AXIL_SIZE, with_buffers=True):
        return cls(open_window(base, size), open_allocator() if with_buffers else None)

    def read_reg(self, offset):
        return self.window.read(offset)

    def write_reg(self, offset, value):
        self.window.write(offset, value)

    def identify(self):
        ident = self.read_reg(REG_ID)
        if ident >> 8 != ID_MAGIC:
            raise OSError(f"no MCF design at the register window: ID reads {ident:#010x}, "
                          f"expected {ID_MAGIC:#08x}xx")
        node = self.read_reg(REG_NODE)
        return {"version": ident & 0xFF, "node_id": node & 0xFF, "nodes": (node >> 8) & 0xFF}

    def load(self, name, array):
        array = np.ascontiguousarray(array)
        buf = self.buffers.get(name)
        if buf is None:
            if self.allocator is None:
                raise ValueError("this driver has no buffer allocator")
            buf = self.buffers[name] = self.allocator.allocate(array.shape, array.dtype)
        elif buf.array.shape != array.shape or buf.array.dtype != array.dtype:
            raise ValueError(f"buffer {name!r} is {buf.array.shape} {buf.array.dtype}, "
                             f"got {array.shape} {array.dtype}")
        buf.array[...] = array
        buf.flush()
        return buf.physical_address

    def dump(self, name):
        if name not in self.buffers:
            raise ValueError(f"no buffer named {name!r} (loaded: {sorted(self.buffers)})")
        buf = self.buffers[name]
        buf.invalidate()
        return np.array(buf.array, copy=True)

    def address(self, name):
        return self.buffers[name].physical_address

    def close(self):
        self.window.close()
