"""Reference model of the AXI4 write arbiter (:class:`hdl.bus.axi_write_arbiter.AXI4WriteArbiter`):
what the slave and each master see, given what each master sent and the order of the grants.

Timing enters the arbiter's behaviour only through the grant order; everything else follows from
it. A *grant order* is the sequence of masters whose bursts reach the slave's AW channel.

* :func:`check_grants`: restricted to master ``i``, the grant order lists ``i`` once per burst
  ``i`` sent, and nothing else (each master's bursts go out in its own order; none is lost,
  duplicated or invented).
* :func:`slave_bursts`: the slave's AW sequence is the granted bursts in grant order with their
  fields unchanged and ID 0; its W beats are each burst's beats in the same order, WLAST on each
  burst's last beat only (bursts whole and unmixed).
* :func:`master_responses`: the slave answers in AW order (ID 0); response ``k`` goes to the
  master of the ``k``-th granted burst with that burst's own AWID and the slave's RESP.
* :func:`check_round_robin`: a master that holds AWVALID when another is granted is granted
  before that other master is granted again (round robin: the first waiting master after the
  last granted one in cyclic order).
* :func:`memory_after`: what an ``sim.AXI4Memory`` holds after every burst (WSTRB per byte;
  a burst that touches an error range writes nothing).
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WBurst", "check_grants", "slave_bursts", "master_responses", "check_round_robin", "memory_after"]


@dataclass(frozen=True)
class WBurst:
    """One write burst as a master sends it: AW fields and its ``len + 1`` W beats
    ``((data, strb), ...)``."""
    id: int
    addr: int
    len: int
    size: int
    beats: tuple

    def __post_init__(self):
        if len(self.beats) != self.len + 1:
            raise ValueError(f"burst at {self.addr:#x}: {len(self.beats)} beats for AWLEN {self.len}")


def check_grants(bursts: list[list[WBurst]], grants: list[int]):
    """Raise AssertionError unless ``grants`` is an interleaving of every master's bursts:
    master ``i`` appears exactly ``len(bursts[i])`` times, no other index appears."""
    for i, bs in enumerate(bursts):
        got = sum(g == i for g in grants)
        if got != len(bs):
            raise AssertionError(f"master {i} sent {len(bs)} bursts, {got} were granted")
    bad = [g for g in grants if not 0 <= g < len(bursts)]
    if bad:
        raise AssertionError(f"grants to unknown masters {bad}")


def _in_order(bursts, grants):
    nxt = [0] * len(bursts)
    for g in grants:
        yield g, bursts[g][nxt[g]]
        nxt[g] += 1


def slave_bursts(bursts: list[list[WBurst]], grants: list[int]):
    """``(aw, w)``: the slave's AW sequence ``[(id, addr, len, size)]`` (id 0) and W beats
    ``[(data, strb, last)]`` for ``grants``."""
    check_grants(bursts, grants)
    aw, w = [], []
    for _g, b in _in_order(bursts, grants):
        aw.append((0, b.addr, b.len, b.size))
        w += [(d, s, int(k == b.len)) for k, (d, s) in enumerate(b.beats)]
    return aw, w


def master_responses(bursts: list[list[WBurst]], grants: list[int], resps: list[int]):
    """Per master, the B responses ``[(id, resp)]`` it must get, given the slave's responses
    ``resps`` in AW order (one per granted burst so far: ``resps`` may be a prefix)."""
    check_grants(bursts, grants)
    out = [[] for _ in bursts]
    for (g, b), r in zip(_in_order(bursts, grants), resps):
        out[g].append((b.id, r))
    return out


def check_round_robin(n: int, events: list[tuple[int, frozenset]]):
    """``events``: per grant in order, ``(master, masters holding AWVALID at its AW handshake
    other than it)``. A waiting master ``o`` at grant ``k`` (to ``g``) means grant ``k + 1`` goes
    to a master in cyclic order after ``g`` and no later than ``o``."""
    for k in range(len(events) - 1):
        g, waiting = events[k]
        if not waiting:
            continue
        first = min(waiting, key=lambda o: (o - g) % n)
        nxt = events[k + 1][0]
        if not 0 < (nxt - g) % n <= (first - g) % n:
            raise AssertionError(f"grant {k + 1} went to master {nxt}; after master {g}, master {first} "
                                 f"was waiting (round robin)")


def memory_after(image: bytes, base: int, bus_bytes: int, bursts: list[list[WBurst]], error_ranges=()):
    """``image`` (bytes at ``base``) after every burst (INCR, ``bus_bytes`` per beat, WSTRB per
    byte); a burst touching ``[start, end)`` of ``error_ranges`` (``(start, end, resp)``) writes
    nothing. Bursts of different masters must not overlap (the order between them is free)."""
    mem = bytearray(image)
    for bs in bursts:
        for b in bs:
            lo, hi = b.addr, b.addr + (b.len + 1) * bus_bytes
            if any(s < hi and lo < e for s, e, _r in error_ranges):
                continue
            for k, (d, strb) in enumerate(b.beats):
                for j in range(bus_bytes):
                    if strb >> j & 1:
                        mem[b.addr + k * bus_bytes + j - base] = d >> (8 * j) & 0xFF
    return bytes(mem)
