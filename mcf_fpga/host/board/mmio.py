"""Register windows: 32-bit reads/writes into the node's AXI-Lite window.

Backends, tried in this order by :func:`open_window`:

1. ``pynq.MMIO(base, size)`` when ``pynq`` is importable (Kria-PYNQ);
2. the UIO device the overlay creates (``linux,uio-name = "mcf"``), mmap of
   ``/dev/uioN`` (map 0 starts at the window base);
3. ``/dev/mem`` mmap at the physical base (needs root).

:class:`MmapWindow` works on any file that can be mmapped — a test uses a
temporary file as a fake register file. Offsets are byte offsets, 4-aligned,
inside the window; anything else raises ValueError and touches nothing.
"""
import mmap
import os
import struct

__all__ = ["MmapWindow", "PynqWindow", "open_window", "find_uio"]


def _check(offset, size):
    if not isinstance(offset, int) or offset < 0 or offset % 4 or offset + 4 > size:
        raise ValueError(f"register offset {offset!r} must be a multiple of 4 in 0..{size - 4:#x}")


def _check_value(value):
    if not isinstance(value, int) or not 0 <= value < 2 ** 32:
        raise ValueError(f"register value {value!r} must be in 0..0xffffffff")


class MmapWindow:
    """``size`` bytes of ``path`` from byte ``offset`` (page-aligned), as 32-bit registers."""

    def __init__(self, path, size, offset=0):
        if size <= 0 or size % 4:
            raise ValueError(f"window size must be a positive multiple of 4, got {size}")
        if offset % mmap.ALLOCATIONGRANULARITY:
            raise ValueError(f"mmap offset {offset:#x} must be page-aligned")
        self.path, self.size = path, size
        self._fd = os.open(path, os.O_RDWR | os.O_SYNC)
        try:
            self._mm = mmap.mmap(self._fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE,
                                 offset=offset)
        except Exception:
            os.close(self._fd)
            raise
        self._mv = memoryview(self._mm).cast("I")     # 32-bit accesses, not byte copies

    def read(self, offset):
        _check(offset, self.size)
        return self._mv[offset // 4]

    def write(self, offset, value):
        _check(offset, self.size)
        _check_value(value)
        self._mv[offset // 4] = value

    def close(self):
        if self._mm is not None:
            self._mv.release()
            self._mm.close()
            os.close(self._fd)
            self._mm = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class PynqWindow:
    """The same interface over ``pynq.MMIO``."""

    def __init__(self, base, size, pynq_module=None):
        if pynq_module is None:
            import pynq as pynq_module
        self.size = size
        self._mmio = pynq_module.MMIO(base, size)

    def read(self, offset):
        _check(offset, self.size)
        return int(self._mmio.read(offset)) & 0xFFFF_FFFF

    def write(self, offset, value):
        _check(offset, self.size)
        _check_value(value)
        self._mmio.write(offset, value)

    def close(self):
        pass


def find_uio(name="mcf", sysfs="/sys/class/uio"):
    """``/dev/uioN`` whose ``name`` is ``name``, or None."""
    if not os.path.isdir(sysfs):
        return None
    for entry in sorted(os.listdir(sysfs)):
        try:
            with open(os.path.join(sysfs, entry, "name")) as f:
                if f.read().strip() == name:
                    return os.path.join("/dev", entry)
        except OSError:
            continue
    return None


def open_window(base, size, *, uio_name="mcf", prefer=("pynq", "uio", "devmem")):
    """Open the register window with the first backend of ``prefer`` that works."""
    errors = []
    for kind in prefer:
        try:
            if kind == "pynq":
                import pynq
                return PynqWindow(base, size, pynq)
            if kind == "uio":
                dev = find_uio(uio_name)
                if dev is None:
                    raise OSError(f"no UIO device named {uio_name!r} (is the overlay loaded?)")
                return MmapWindow(dev, size, 0)
            if kind == "devmem":
                return MmapWindow("/dev/mem", size, base)
            raise ValueError(f"unknown backend {kind!r}")
        except (ImportError, OSError) as exc:
            errors.append(f"{kind}: {exc}")
    raise OSError("no register backend available (" + "; ".join(errors) + ")")
