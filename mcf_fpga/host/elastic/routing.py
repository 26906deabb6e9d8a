"""The elastic routing table: token ranges -> A node, published atomically at token boundaries.

KernelFlume §4.1 ("Routing table"): the table maps each request's logical token ranges to
the A node that stores their KV; for a request it names the A nodes holding its history
(they receive Q) and its *tail* node (the only one that receives K_new/V_new). §3.2 and
§4.2: scale events are applied between decode steps; "an in-flight token uses one
consistent routing snapshot".

Contract
--------
* A ``RouteSnapshot`` is immutable and versioned. Per request its ranges are contiguous,
  start at token 0, are ``align``-aligned (the KV block of the canonical merge order,
  docs/numerics.md, so a block never straddles two A nodes) and the last one is open
  (``end is None``): every token position maps to exactly one A node (``owner``). The tail
  for the token at position ``pos`` is ``owner(req, pos)``.
* Edits go to a *shadow* copy (``stage_*``); ``publish()`` freezes the shadow into the next
  version. If a decode step is in flight the new version is installed when the last
  in-flight step ends (the token boundary), never during a step: a step's ``StepView``
  holds exactly one snapshot and checks that every lookup it serves came from it.
  This matches the NIC's two route-table banks (host writes the shadow bank, the flip
  happens at a packet boundary that is also a token boundary).
* ``nic_tables`` encodes a snapshot as per-node ``{route_id: RouteEntry}`` using
  ``spec.topology`` (three routes per request slot: Q multicast W -> holders,
  K/V unicast W -> tail, partial return holders -> W with fan-in = number of holders).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["Range", "RouteSnapshot", "RoutingTable", "StepView", "RoutingError", "nic_tables",
           "ROUTES_PER_REQUEST"]


class RoutingError(ValueError):
    """A routing-table edit or lookup that would break an invariant (state left unchanged)."""


@dataclass(frozen=True)
class Range:
    """Tokens [start, end) of one request live on A node ``node``; ``end=None``: open tail."""
    start: int
    end: int | None
    node: int

    def covers(self, pos: int) -> bool:
        return self.start <= pos and (self.end is None or pos < self.end)


def _check_ranges(req, ranges, align: int):
    if not ranges:
        raise RoutingError(f"request {req!r}: no ranges")
    if ranges[0].start != 0:
        raise RoutingError(f"request {req!r}: first range starts at {ranges[0].start}, expected 0")
    for a, b in zip(ranges, ranges[1:]):
        if a.end is None or a.end != b.start:
            raise RoutingError(f"request {req!r}: ranges {a} and {b} are not contiguous")
    for r in ranges:
        if r.start % align:
            raise RoutingError(f"request {req!r}: range start {r.start} not a multiple of align={align}")
        if r.end is not None and r.end <= r.start:
            raise RoutingError(f"request {req!r}: empty range {r}")
    if ranges[-1].end is not None:
        raise RoutingError(f"request {req!r}: last range must be open (end=None)")


@dataclass(frozen=True)
class RouteSnapshot:
    """One published version of the routing table (immutable)."""
    version: int
    align: int
    ranges: MappingProxyType          # req -> tuple[Range, ...]
    slots: MappingProxyType           # req -> request slot (stable across versions; route ids)
    active: frozenset                 # A nodes in the routed set

    def check(self):
        """Every token of every request maps to exactly one active A node; slots distinct."""
        for req, rs in self.ranges.items():
            _check_ranges(req, rs, self.align)
            for r in rs:
                if r.node not in self.active:
                    raise RoutingError(f"request {req!r}: range {r} on inactive A node {r.node}")
        if len(set(self.slots.values())) != len(self.slots) or set(self.slots) != set(self.ranges):
            raise RoutingError("request slots are not a bijection onto the requests")

    def requests(self):
        return sorted(self.ranges)

    def owner(self, req, pos: int) -> int:
        """A node storing token ``pos`` of ``req`` (binary search over the range starts)."""
        if pos < 0:
            raise RoutingError(f"position {pos} < 0")
        rs = self._get(req)
        i = bisect.bisect_right([r.start for r in rs], pos) - 1
        return rs[i].node

    tail = owner          # the node that receives K_new/V_new for the token at ``pos``

    def holders(self, req) -> list:
        """A nodes holding any range of ``req`` (they all receive Q and return a partial)."""
        return sorted({r.node for r in self._get(req)})

    def shards(self, req, length: int, block: int) -> dict:
        """{node: [block ids]} of the blocks covering tokens [0, length), by owner."""
        if block % self.align and self.align % block:
            raise RoutingError(f"block={block} incompatible with align={self.align}")
        out = {n: [] for n in self.holders(req)}
        for b in range(-(-length // block)):
            out[self.owner(req, b * block)].append(b)
        return out

    def tokens_on(self, node: int, lengths: dict) -> int:
        """Tokens stored on ``node`` given each request's current length."""
        n = 0
        for req, rs in self.ranges.items():
            L = lengths.get(req, 0)
            for r in rs:
                if r.node == node:
                    hi = L if r.end is None else min(r.end, L)
                    n += max(0, hi - r.start)
        return n

    def _get(self, req):
        try:
            return self.ranges[req]
        except KeyError:
            raise RoutingError(f"request {req!r} not in routing snapshot v{self.version}") from None


class StepView:
    """The routing view of one decode step: exactly one snapshot, checked on every lookup."""

    def __init__(self, table: "RoutingTable", snap: RouteSnapshot):
        self._table, self.snapshot, self.version = table, snap, snap.version
        self.lookups = 0
        self.open = True

    def _snap(self) -> RouteSnapshot:
        if not self.open:
            raise RoutingError(f"step on v{self.version} already ended")
        if self.snapshot.version != self.version:       # the invariant: one snapshot per step
            raise RoutingError(f"step began on v{self.version} but sees v{self.snapshot.version}")
        self.lookups += 1
        return self.snapshot

    def owner(self, req, pos):
        return self._snap().owner(req, pos)

    def tail(self, req, pos):
        return self._snap().owner(req, pos)

    def holders(self, req):
        return self._snap().holders(req)

    def shards(self, req, length, block):
        return self._snap().shards(req, length, block)


class RoutingTable:
    """Published snapshot + shadow copy. ``align``: range granularity in tokens."""

    def __init__(self, align: int = 16):
        if align <= 0:
            raise RoutingError(f"align={align} must be > 0")
        self.align = align
        self._published = RouteSnapshot(0, align, MappingProxyType({}), MappingProxyType({}), frozenset())
        self._shadow_ranges: dict = {}
        self._shadow_slots: dict = {}
        self._shadow_active: set = set()
        self._pending: RouteSnapshot | None = None
        self._in_flight: set = set()
        self.history: list = [self._published]        # every installed snapshot, in order

    # ---------------------------------------------------------------- reads
    @property
    def published(self) -> RouteSnapshot:
        return self._published

    @property
    def pending(self) -> RouteSnapshot | None:
        return self._pending

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def shadow_ranges(self, req) -> tuple:
        return tuple(self._shadow_ranges[req])

    def shadow_requests(self):
        return sorted(self._shadow_ranges)

    def shadow_active(self) -> frozenset:
        return frozenset(self._shadow_active)

    # ---------------------------------------------------------------- staging (shadow only)
    def stage_activate(self, node: int):
        """Add a prewarmed A node to the routed set (it owns no range yet)."""
        self._shadow_active.add(node)

    def stage_retire(self, node: int):
        """Remove an A node; refused while any request still has a range on it."""
        for req, rs in self._shadow_ranges.items():
            if any(r.node == node for r in rs):
                raise RoutingError(f"A node {node} still holds a range of request {req!r}")
        self._shadow_active.discard(node)

    def stage_request(self, req, ranges):
        """Route a new request: ``ranges`` as ``[(start, end|None, node), ...]``."""
        if req in self._shadow_ranges:
            raise RoutingError(f"request {req!r} already routed")
        rs = [r if isinstance(r, Range) else Range(*r) for r in ranges]
        _check_ranges(req, rs, self.align)
        for r in rs:
            if r.node not in self._shadow_active:
                raise RoutingError(f"request {req!r}: A node {r.node} is not active")
        used = set(self._shadow_slots.values())
        self._shadow_ranges[req] = tuple(rs)
        self._shadow_slots[req] = next(s for s in range(len(used) + 1) if s not in used)

    def stage_extend(self, req, node: int, at: int) -> int:
        """Future tokens of ``req`` from the first aligned position >= ``at`` go to ``node``.
        Returns that cut position. Existing KV stays where it is (§4.2 "Predictive scale-up")."""
        if node not in self._shadow_active:
            raise RoutingError(f"A node {node} is not active")
        rs = self._shadow_ranges.get(req)
        if rs is None:
            raise RoutingError(f"request {req!r} not routed")
        cut = -(-at // self.align) * self.align
        last = rs[-1]
        if cut < last.start:
            raise RoutingError(f"request {req!r}: cut {cut} before the open range start {last.start}")
        if last.node == node:
            return last.start if cut == last.start else cut
        if cut == last.start:
            new = rs[:-1] + (Range(cut, None, node),)
        else:
            new = rs[:-1] + (Range(last.start, cut, last.node), Range(cut, None, node))
        _check_ranges(req, new, self.align)
        self._shadow_ranges[req] = tuple(new)
        return cut

    def stage_remove_request(self, req):
        """A finished request: its ranges are dropped (the A nodes free its KV)."""
        if req not in self._shadow_ranges:
            raise RoutingError(f"request {req!r} not routed")
        del self._shadow_ranges[req]
        del self._shadow_slots[req]

    # ---------------------------------------------------------------- publish / steps
    def publish(self) -> RouteSnapshot:
        """Freeze the shadow into the next version. Installed at once at a token boundary
        (no step in flight), otherwise when the last in-flight step ends. A second publish
        before that replaces the pending one (the later shadow includes the earlier edits)."""
        base = self._pending.version if self._pending else self._published.version
        # shadow ranges are immutable tuples: the snapshot shares them, copying only the maps
        snap = RouteSnapshot(base + 1, self.align, MappingProxyType(dict(self._shadow_ranges)),
                             MappingProxyType(dict(self._shadow_slots)),
                             frozenset(self._shadow_active))
        # no check here: every stage_* edit was validated when staged (off the critical path)
        if self._in_flight:
            self._pending = snap
        else:
            self._install(snap)
        return snap

    def _install(self, snap: RouteSnapshot):
        if self._in_flight:                 # the invariant: never switch under a running step
            raise RoutingError(f"v{snap.version} installed while {len(self._in_flight)} steps "
                               f"are in flight")
        self._published = snap            # one reference assignment: the atomic switch
        self._pending = None
        self.history.append(snap)

    def begin_step(self) -> StepView:
        view = StepView(self, self._published)
        self._in_flight.add(view)
        return view

    def end_step(self, view: StepView):
        if view not in self._in_flight:
            raise RoutingError(f"step on v{view.version} is not in flight")
        self._in_flight.discard(view)
        view.open = False
        if not self._in_flight and self._pending is not None:
            self._install(self._pending)


# -------------------------------------------------------------------- NIC encoding

ROUTES_PER_REQUEST = 3   #: route ids per request slot: Q multicast, K/V unicast, partial return


def nic_tables(snap: RouteSnapshot, topo, w_node: int, lengths: dict | None = None,
               n_routes: int = 64) -> list:
    """Per node ``{route_id: spec.topology.RouteEntry}`` for the routes of ``snap``.

    Request slot ``s`` uses route ids ``3s`` (Q: W -> every holder, multicast tree),
    ``3s+1`` (K_new/V_new: W -> the tail at position ``lengths[req]``; default: the open
    range's node) and ``3s+2`` (partials: every holder -> W; dimension-ordered/shortest-way
    unicast makes the union of paths to one destination a tree, so one entry per node
    serves all sources; ``fanin`` at W = number of holders). A holder that is the W node
    itself is not allowed (A nodes are weightless)."""
    from mcf_fpga.spec.topology import RouteEntry, route_masks

    lengths = lengths or {}
    tables = [dict() for _ in range(topo.n)]
    for req, slot in sorted(snap.slots.items(), key=lambda kv: kv[1]):
        base = ROUTES_PER_REQUEST * slot
        if base + ROUTES_PER_REQUEST > n_routes:
            raise RoutingError(f"request slot {slot}: route ids {base}..{base + 2} exceed "
                               f"n_routes={n_routes} (at most {n_routes // ROUTES_PER_REQUEST} requests)")
        holders = snap.holders(req)
        if w_node in holders:
            raise RoutingError(f"request {req!r}: W node {w_node} cannot hold KV ranges")
        pos = lengths.get(req)
        tail = snap.ranges[req][-1].node if pos is None else snap.owner(req, pos)
        for node, mask in route_masks(topo, w_node, holders).items():
            tables[node][base] = RouteEntry(mask, 0)
        for node, mask in route_masks(topo, w_node, [tail]).items():
            tables[node][base + 1] = RouteEntry(mask, 0)
        merged: dict = {}
        for h in holders:
            for node, mask in route_masks(topo, h, [w_node]).items():
                merged[node] = merged.get(node, 0) | mask
        for node, mask in merged.items():
            tables[node][base + 2] = RouteEntry(mask, len(holders) if node == w_node else 0)
    return tables
