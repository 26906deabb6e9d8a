"""A faster RTLIL emitter for memories' initial contents: the same text as Amaranth's.

Amaranth 0.5's RTLIL backend (``amaranth.back.rtlil.ModuleEmitter.emit_memory``) writes a memory's
``$meminit_v2`` cell by building one constant net per bit of its contents and then joining them
into one constant: for the simulated node's 131,072-word scratchpad that is 4.2 million nets and
about half of ``to_verilog``'s time. :func:`fast_memory_init` replaces that method, for the
duration of a ``with`` block and under a lock, by one that writes the same constant straight from
the rows (each row masked to the memory's width, the last row first, most significant bit first:
exactly the bits Amaranth's nets spell). The RTLIL, and so the Verilog, is byte for byte the same
(tests/hdl/test_fast_meminit.py compares them); an Amaranth whose emitter lacks the method, or a
memory without bits, gets Amaranth's own.
"""
from __future__ import annotations

import contextlib
import threading

__all__ = ["fast_memory_init"]

_LOCK = threading.RLock()


def _init_constant(width: int, rows) -> str:
    """RTLIL constant of ``rows`` (ints, row 0 first) in a memory ``width`` bits wide."""
    mask = (1 << width) - 1
    return f"{width * len(rows)}'" + "".join(format(row & mask, f"0{width}b") for row in reversed(rows))


@contextlib.contextmanager
def fast_memory_init():
    """Within the block, Amaranth's RTLIL backend writes memories' initial contents with
    :func:`_init_constant` (the module docstring)."""
    from amaranth.back import rtlil
    from amaranth.hdl import _nir
    emitter = getattr(rtlil, "ModuleEmitter", None)
    amaranths = getattr(emitter, "emit_memory", None)
    if amaranths is None:
        yield
        return

    def emit_memory(self, cell_idx, cell):
        rows = list(cell.init)
        if not cell.width or not rows:
            return amaranths(self, cell_idx, cell)
        self.builder.cell("$meminit_v2", ports={
            "ADDR": self.sigspec(),
            "DATA": _init_constant(cell.width, rows),
            "EN": self.sigspec(_nir.Value.ones(cell.width)),
        }, parameters={
            "MEMID": self.memories[cell_idx].memid,
            "ABITS": 0,
            "WIDTH": cell.width,
            "WORDS": cell.depth,
            "PRIORITY": 0,
        }, src_loc=cell.src_loc)
    with _LOCK:
        emitter.emit_memory = emit_memory
        try:
            yield
        finally:
            emitter.emit_memory = amaranths
