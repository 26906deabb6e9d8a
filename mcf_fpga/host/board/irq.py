"""Waiting for the node's interrupt through UIO (``generic-uio`` / ``uio_pdrv_genirq``).

The overlay's ``mcf`` UIO node carries pl_ps_irq0[0]. With UIO, writing the
32-bit value 1 to ``/dev/uioN`` (re-)enables the interrupt and a 4-byte read
blocks until it fires, returning the total interrupt count. The kernel masks
the line after each interrupt, so :meth:`UioIrq.wait` re-enables it first.
The node's own pending bit must be cleared through its registers (for the
stand-in: read IRQ at 0x0C) before re-enabling, or the level-high line fires again.
"""
import os
import select
import struct

__all__ = ["UioIrq"]


class UioIrq:
    def __init__(self, path=None, fd=None):
        if (path is None) == (fd is None):
            raise ValueError("give exactly one of path or fd")
        self.fd = os.open(path, os.O_RDWR) if fd is None else fd
        self._own = fd is None

    def enable(self):
        os.write(self.fd, struct.pack("=I", 1))

    def wait(self, timeout=None):
        """Enable, then wait up to ``timeout`` seconds; returns the interrupt count, or None on timeout."""
        if timeout is not None and timeout < 0:
            raise ValueError(f"timeout must be >= 0 seconds, got {timeout}")
        self.enable()
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return None
        data = os.read(self.fd, 4)
        if len(data) != 4:
            raise OSError(f"UIO read returned {len(data)} bytes, expected 4")
        return struct.unpack("=I", data)[0]

    def close(self):
        if self._own:
            os.close(self.fd)
