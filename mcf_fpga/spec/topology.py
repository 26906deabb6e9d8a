"""Cluster topologies and the route tables the NIC executes (shared by the NIC hardware, golden,
the host and tests).

A node's NIC has port 0 = the local node (compute / KV pool) and network ports
1..``n_net``. The numbering is fixed here and nowhere else:

* ``Ring(n)``: port 1 = next node ``(i + 1) % n``, port 2 = previous ``(i - 1) % n``.
  Unicast takes the shorter way round; a tie goes forward (port 1).
* ``Mesh(rows, cols)``: node ``id = y * cols + x``; port 1 = east (x+1), 2 = west (x-1),
  3 = north (y-1), 4 = south (y+1); ports on the border are unconnected.
  Unicast is dimension-ordered (X first, then Y).

A *route* is a source and a set of destinations. Its tree is the union of the
unicast paths from the source; because every path from one source follows the
same rule, the union is a tree (each node is entered from exactly one
neighbour), so a multicast packet visits each node once. ``route_masks``
gives, per node on the tree, the output-port mask the route-table entry holds
(bit 0 = deliver locally). The host gives every route a ``route_id`` (a cluster-
wide index into every node's table) and writes ``RouteEntry.encode()`` values
over AXI-Lite (``docs/nic.md``).

Source check: every frame of a route travels a unicast path from the route's source (the
frame's ``src``), and the unicast path from ``s`` through a node ``n`` always enters ``n`` from
the node before ``n`` on ``path(s, n)`` (both rules are minimal and the same at every hop: a
prefix of a path is a path). ``src_masks(topo, n)`` gives per port of ``n`` the sources whose
traffic enters there, whatever the route; the NIC drops anything else (``SRC_ALLOW_p``,
``ErrorCause.SPOOF``).
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LOCAL", "Topology", "Ring", "Mesh", "RouteEntry", "route_masks", "src_masks",
           "RouteTables", "make_topology"]

LOCAL = 0  #: port number of the local node


@dataclass(frozen=True)
class RouteEntry:
    """One route-table entry at one node: output-port ``mask`` (bit p = port p) and the number
    of contributions ``fanin`` a reduction group expects here (0 = not a reduction root)."""
    mask: int = 0
    fanin: int = 0

    def encode(self) -> int:
        """32-bit register value: ``mask`` in bits 0..7, ``fanin`` in bits 8..15."""
        if not 0 <= self.mask < 256:
            raise ValueError(f"RouteEntry.mask must be in 0..255, got {self.mask}")
        if not 0 <= self.fanin < 256:
            raise ValueError(f"RouteEntry.fanin must be in 0..255, got {self.fanin}")
        return self.mask | (self.fanin << 8)

    @staticmethod
    def decode(value: int) -> "RouteEntry":
        return RouteEntry(value & 0xFF, (value >> 8) & 0xFF)


class Topology:
    """Base class: ``n`` nodes, ``n_net`` network ports per node."""
    n: int
    n_net: int
    name: str

    def neighbor(self, node: int, port: int):
        """Node on the other end of ``port`` of ``node`` (None if unconnected)."""
        raise NotImplementedError

    def next_port(self, node: int, dst: int) -> int:
        """Port ``node`` forwards a unicast packet for ``dst`` on (LOCAL when ``node == dst``)."""
        raise NotImplementedError

    def _check(self, node, what="node"):
        if not isinstance(node, int) or not 0 <= node < self.n:
            raise ValueError(f"{what} must be a node id in 0..{self.n - 1}, got {node!r}")

    def in_port(self, node: int, from_node: int) -> int:
        """Port of ``node`` whose neighbour is ``from_node``."""
        for p in range(1, self.n_net + 1):
            if self.neighbor(node, p) == from_node:
                return p
        raise ValueError(f"nodes {node} and {from_node} are not neighbours in {self.name}")

    def path(self, src: int, dst: int) -> list:
        """Nodes visited by a unicast packet from ``src`` to ``dst`` (both included)."""
        self._check(src, "src")
        self._check(dst, "dst")
        out = [src]
        while out[-1] != dst:
            out.append(self.neighbor(out[-1], self.next_port(out[-1], dst)))
            if len(out) > self.n:
                raise AssertionError("routing loop")  # cannot happen: both rules are minimal
        return out


class Ring(Topology):
    def __init__(self, n: int):
        if not isinstance(n, int) or n < 2:
            raise ValueError(f"Ring needs n >= 2 nodes, got {n!r}")
        self.n, self.n_net, self.name = n, 2, f"ring({n})"

    def neighbor(self, node, port):
        return {1: (node + 1) % self.n, 2: (node - 1) % self.n}.get(port)

    def next_port(self, node, dst):
        if node == dst:
            return LOCAL
        fwd = (dst - node) % self.n
        return 1 if fwd <= self.n - fwd else 2


class Mesh(Topology):
    def __init__(self, rows: int, cols: int):
        if not isinstance(rows, int) or not isinstance(cols, int) or rows < 1 or cols < 1 or rows * cols < 2:
            raise ValueError(f"Mesh needs rows, cols >= 1 and at least 2 nodes, got {rows}x{cols}")
        self.rows, self.cols = rows, cols
        self.n, self.n_net, self.name = rows * cols, 4, f"mesh({rows}x{cols})"

    def neighbor(self, node, port):
        y, x = divmod(node, self.cols)
        dx, dy = {1: (1, 0), 2: (-1, 0), 3: (0, -1), 4: (0, 1)}.get(port, (None, None))
        if dx is None:
            return None
        nx, ny = x + dx, y + dy
        if 0 <= nx < self.cols and 0 <= ny < self.rows:
            return ny * self.cols + nx
        return None

    def next_port(self, node, dst):
        y, x = divmod(node, self.cols)
        dy_, dx_ = divmod(dst, self.cols)
        if dx_ > x:
            return 1
        if dx_ < x:
            return 2
        if dy_ < y:
            return 3
        if dy_ > y:
            return 4
        return LOCAL


def make_topology(name: str, nodes: int) -> Topology:
    """``"ring"`` or ``"mesh"`` (the most square rows x cols with rows <= cols) of ``nodes`` nodes."""
    if name == "ring":
        return Ring(nodes)
    if name == "mesh":
        rows = max(r for r in range(1, int(nodes ** 0.5) + 1) if nodes % r == 0)
        return Mesh(rows, nodes // rows)
    raise ValueError(f"topology must be 'ring' or 'mesh', got {name!r}")


def route_masks(topo: Topology, src: int, dsts) -> dict:
    """Per node on the tree from ``src`` to every node in ``dsts``: its output-port mask."""
    dsts = sorted(set(dsts))
    if not dsts:
        raise ValueError("a route needs at least one destination")
    masks: dict = {}
    for d in dsts:
        p = topo.path(src, d)
        for a, b in zip(p, p[1:]):
            masks[a] = masks.get(a, 0) | (1 << topo.next_port(a, d))
            masks.setdefault(b, 0)
        masks[d] = masks.get(d, 0) | (1 << LOCAL)
    return masks


def src_masks(topo: Topology, node: int) -> list:
    """``SRC_ALLOW`` values of ``node``'s NIC: element p (port 0..``n_net``) has bit s set when
    frames from source s enter ``node`` on port p (module docstring). Port 0 (local) is 0: the
    NIC always accepts its own NODE_ID there. A network port accepts s when its neighbour is
    the node before ``node`` on ``path(s, node)`` (a 2-node ring has both ports facing the
    peer: both accept it); an unconnected port accepts nothing."""
    topo._check(node)
    masks = [0] * (topo.n_net + 1)
    for s in range(topo.n):
        if s == node:
            continue
        prev = topo.path(s, node)[-2]
        for p in range(1, topo.n_net + 1):
            if topo.neighbor(node, p) == prev:
                masks[p] |= 1 << s
    return masks


class RouteTables:
    """Route tables of a whole cluster, built route by route.

    ``add(src, dsts, fanin=0)`` allocates the next ``route_id`` and fills every node on
    the tree; ``fanin`` is stored at the destinations (reduction roots). ``tables[node]``
    maps route_id -> RouteEntry (absent = unconfigured).
    """

    def __init__(self, topo: Topology, n_routes: int = 64):
        self.topo, self.n_routes = topo, n_routes
        self.tables = [dict() for _ in range(topo.n)]
        self.next_id = 0

    def add(self, src: int, dsts, fanin: int = 0, route_id: int | None = None) -> int:
        rid = self.next_id if route_id is None else route_id
        if not 0 <= rid < self.n_routes:
            raise ValueError(f"route_id must be in 0..{self.n_routes - 1}, got {rid}")
        for node, mask in route_masks(self.topo, src, dsts).items():
            fi = fanin if mask & 1 else 0
            self.tables[node][rid] = RouteEntry(mask, fi)
        self.next_id = max(self.next_id, rid + 1)
        return rid
