"""Where one node's tensors live while the RTL executor runs a program on it.

Three address spaces of a node (``hdl.node.Node``):

* the engine scratchpad ``SP`` (int32 words), the exponent memory ``EM`` (int8 rows) — both
  managed by :class:`Arena`, a first-fit allocator with free-list merging;
* the attention unit's KV memory (token rows): the KV pool's slot ``s`` owns rows
  ``[s * slot_rows, (s + 1) * slot_rows)`` — the slot number the hardware directory answers is
  the address, the host never invents one; staged units (the propagation buffer, MCF eq. 5) and
  decode blocks get rows above the pool from another :class:`Arena`.

A failed allocation raises ``ValueError`` naming the memory, the request and the capacity, so a
program that does not fit the configured node is refused with the limit it hit.
"""
from __future__ import annotations

__all__ = ["Arena"]


class Arena:
    """First-fit allocator over ``[base, base + size)``; ``alloc(n)`` -> address, ``free(addr)``."""

    def __init__(self, name: str, size: int, base: int = 0, align: int = 1):
        if size <= 0:
            raise ValueError(f"Arena {name}: size={size} must be > 0")
        self.name, self.size, self.base, self.align = name, size, base, align
        self.free_list = [(base, size)]          # sorted (addr, length)
        self.used = {}                           # addr -> length
        self.peak = 0

    def alloc(self, n: int, what: str = "") -> int:
        if n <= 0:
            raise ValueError(f"Arena {self.name}: allocation of {n} for {what} must be > 0")
        n = -(-n // self.align) * self.align
        for i, (a, ln) in enumerate(self.free_list):
            if ln >= n:
                if ln == n:
                    del self.free_list[i]
                else:
                    self.free_list[i] = (a + n, ln - n)
                self.used[a] = n
                self.peak = max(self.peak, self.in_use)
                return a
        raise ValueError(f"node memory {self.name}: no room for {n} ({what}); capacity {self.size}, "
                         f"in use {self.in_use}, largest free {max((l for _, l in self.free_list), default=0)}")

    def free(self, addr: int):
        n = self.used.pop(addr)
        fl = self.free_list
        fl.append((addr, n))
        fl.sort()
        merged = []
        for a, ln in fl:
            if merged and merged[-1][0] + merged[-1][1] == a:
                merged[-1] = (merged[-1][0], merged[-1][1] + ln)
            else:
                merged.append((a, ln))
        self.free_list = merged

    @property
    def in_use(self) -> int:
        return sum(self.used.values())
