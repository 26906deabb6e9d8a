"""Physically contiguous buffers the node's AXI masters can read and write.

* :class:`PynqAllocator`: ``pynq.allocate(shape, dtype)`` (Kria-PYNQ, CMA).
* :class:`UdmabufAllocator`: a u-dma-buf device (``/dev/udmabufN`` with
  ``/sys/class/u-dma-buf/udmabufN/{phys_addr,size,sync_for_cpu,sync_for_device}``),
  carved into buffers by a bump allocator. Paths are parameters, so a test can
  use a temporary file and a fake sysfs directory.

Both hand out :class:`Buffer`: a numpy array view plus ``physical_address`` and
``flush()``/``invalidate()`` for non-coherent access.
"""
import mmap
import os

import numpy as np

__all__ = ["reserve", "Buffer", "UdmabufAllocator", "PynqAllocator", "open_allocator"]



def reserve(arena, shape, dtype, where: str):
    """Bump allocation in ``arena`` (``used``, ``align``, ``size`` bytes): the next aligned span
    for an array of ``shape``/``dtype``; returns (start offset, bytes, dtype). A span that does
    not fit is refused (``where`` names the memory) and nothing is reserved."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    if nbytes <= 0:
        raise ValueError(f"buffer shape {shape} holds no bytes")
    start = -(-arena.used // arena.align) * arena.align
    if start + nbytes > arena.size:
        raise ValueError(f"buffer of {nbytes} bytes does not fit: {arena.size - start} bytes left in {where}")
    arena.used = start + nbytes
    return start, nbytes, dtype

class Buffer:
    def __init__(self, array, physical_address, flush=None, invalidate=None):
        self.array = array
        self.physical_address = physical_address
        self._flush, self._invalidate = flush, invalidate

    @property
    def nbytes(self):
        return self.array.nbytes

    def flush(self):
        """Make CPU writes visible to the PL."""
        if self._flush:
            self._flush()

    def invalidate(self):
        """Make PL writes visible to the CPU."""
        if self._invalidate:
            self._invalidate()


class PynqAllocator:
    def __init__(self, pynq_module=None):
        if pynq_module is None:
            import pynq as pynq_module
        self._pynq = pynq_module

    def allocate(self, shape, dtype):
        buf = self._pynq.allocate(shape=shape, dtype=dtype)
        return Buffer(buf, int(buf.physical_address), buf.flush, buf.invalidate)


class UdmabufAllocator:
    """Bump allocator over one u-dma-buf region (``align`` bytes alignment)."""

    def __init__(self, name="udmabuf0", dev_dir="/dev", sysfs="/sys/class/u-dma-buf", align=4096):
        self._sys = os.path.join(sysfs, name)
        try:
            with open(os.path.join(self._sys, "phys_addr")) as f:
                self.phys = int(f.read().strip(), 0)
            with open(os.path.join(self._sys, "size")) as f:
                self.size = int(f.read().strip(), 0)
        except (OSError, ValueError) as exc:
            raise OSError(f"u-dma-buf {name!r} not usable: {exc}") from None
        self._fd = os.open(os.path.join(dev_dir, name), os.O_RDWR)
        self._mm = mmap.mmap(self._fd, self.size)
        self.align, self.used = align, 0

    def _sync(self, what, offset, nbytes):
        path = os.path.join(self._sys, what)
        if os.path.exists(path):
            # u-dma-buf: sync_offset/sync_size select the range, writing 1 syncs it
            for k, v in (("sync_offset", offset), ("sync_size", nbytes)):
                p = os.path.join(self._sys, k)
                if os.path.exists(p):
                    with open(p, "w") as f:
                        f.write(str(v))
            with open(path, "w") as f:
                f.write("1")

    def allocate(self, shape, dtype):
        start, nbytes, dtype = reserve(self, shape, dtype, f"the {self.size}-byte u-dma-buf")
        arr = np.frombuffer(self._mm, dtype=dtype, count=nbytes // dtype.itemsize, offset=start).reshape(shape)
        return Buffer(arr, self.phys + start,
                      flush=lambda: self._sync("sync_for_device", start, nbytes),
                      invalidate=lambda: self._sync("sync_for_cpu", start, nbytes))


def open_allocator(prefer=("pynq", "udmabuf")):
    errors = []
    for kind in prefer:
        try:
            return PynqAllocator() if kind == "pynq" else UdmabufAllocator()
        except (ImportError, OSError) as exc:
            errors.append(f"{kind}: {exc}")
    raise OSError("no DMA buffer backend available (" + "; ".join(errors) + ")")
