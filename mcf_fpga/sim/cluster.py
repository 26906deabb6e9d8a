"""N MCF nodes linked as a ring or a 2-D mesh on the Verilator backend (simulation only).

``SimCluster(n, topology, node_cfg)`` builds :class:`hdl.node.Node` once (the Verilator build
is cached by a content hash of its Verilog), instantiates it ``n`` times (``Model.new()``)
and wires ``m_axis_eth<p>`` of node i to ``s_axis_eth<q>`` of its neighbour per
``spec.topology`` (port p of i faces node j, which sees i on port ``in_port(j, i)``),
forwarding whole frames between chunks of ``chunk`` cycles (each hop adds up to ``chunk``
cycles of latency). ``configure(routes)`` writes every NIC's node_id, num_nodes, members,
num_layers/num_blocks, the sources each port accepts (``spec.topology.src_masks``: a
NIC's network ports accept nothing until this is written), the route table (shadow bank, then a
bank flip) and every link's MACs (``spec.link.mac_for_node``) over AXI-Lite.

``fault(node, port, fate)`` puts a function on the wire leaving ``m_axis_eth<port>`` of
``node``: ``fate(frame) -> list of frames`` (``[]`` drops, a changed frame corrupts).

``SimCluster(..., group=RankGroup(n))`` is one torch.distributed rank's part of the cluster
(``sim.ranks``): it builds and steps only the nodes of ``group.local`` (``nodes[i]`` is None for
the others), forwards the frames that cross to other ranks after every chunk, and configures
its own nodes; the frames and cycles are those of the one-process cluster.
"""
from __future__ import annotations

from mcf_fpga.spec.link import mac_for_node, mac_to_int
from mcf_fpga.spec.topology import Ring, RouteTables, Topology, make_topology, src_masks
from mcf_fpga.hdl.bus import Resp
from mcf_fpga.spec.nic import Reg, src_allow_reg
from mcf_fpga.hdl.node import (MAC_LOCAL_HI, MAC_LOCAL_LO, MAC_PEER_HI, MAC_PEER_LO, Node, NodeConfig,
                      WINDOWS, node_nic, port_base)

__all__ = ["SimCluster", "configure_nodes", "link_wires", "NIC_BASE", "NODE_BASE", "KV_BASE", "ENGINE_BASE"]

ENGINE_BASE, NIC_BASE, KV_BASE, NODE_BASE = (b for _, b, _ in WINDOWS)
_builds = {}


def _model(cfg: NodeConfig, trace: bool = False):
    """A fresh Verilator instance of ``Node(cfg)`` (one build per configuration, tracing variant
    and process)."""
    from mcf_fpga.sim.verilator import build, source_key
    if (cfg, trace) not in _builds:
        _builds[cfg, trace] = build(Node(cfg), key=source_key("hdl.node.Node", cfg), trace=trace)
        return _builds[cfg, trace]
    return _builds[cfg, trace].new()


def link_wires(topo: Topology) -> list:
    """Every directed link of ``topo``: ``(node i, port p, node j, port q)`` = frames leaving
    ``m_axis_eth<p>`` of i enter ``s_axis_eth<q>`` of j (j = neighbour of i on p, q faces i).
    Ports come in opposite pairs (ring 1/2, mesh 1/2 and 3/4): q is the opposite of p, so
    that a 2-node ring gets two separate cables."""
    out = []
    for i in range(topo.n):
        for p in range(1, topo.n_net + 1):
            j = topo.neighbor(i, p)
            if j is not None:
                q = p + 1 if p % 2 else p - 1
                out.append((i, p, j, q if topo.neighbor(j, q) == i else topo.in_port(j, i)))
    return out


class SimCluster:
    """See the module docstring.

    Parameters
    ----------
    n : int
        Nodes (2..``node_cfg.nic.max_nodes``).
    topology : "ring" | "mesh" or a ``spec.topology.Topology``
        ``"mesh"`` takes the most square rows x cols (``spec.topology.make_topology``).
    node_cfg : NodeConfig
        ``nic.n_net`` must be at least the topology's (2 ring, 4 mesh); a mesh-sized node in a
        ring leaves ports 3 and 4 unconnected (idle).
    chunk : int
        Cycles between frame exchanges on the links.
    threads : int or None
        Threads that step the nodes between exchanges, 1..n (default
        ``sim.verilator.DEFAULT_THREADS``); the results are the same for every value
        (``sim.verilator.Cluster``).
    group : sim.ranks.RankGroup or None
        This rank's nodes of a cluster split over torch.distributed ranks (None: every node).
    trace : bool
        Build the FST-tracing variant of the node (``sim.verilator.build(trace=True)``): then
        ``trace(directory, start, stop)`` writes one waveform per node.
    """

    def __init__(self, n: int, topology="ring", node_cfg: NodeConfig = None, chunk: int = 32,
                 threads: int | None = None, group=None, trace: bool = False):
        from mcf_fpga.sim.verilator import Cluster, check_threads
        what = type(self).__name__
        cfg = node_cfg if node_cfg is not None else (
            NodeConfig() if topology == "ring" or isinstance(topology, Ring)
            else NodeConfig(nic=node_nic(n_net=4)))
        if not isinstance(n, int) or not 2 <= n <= cfg.nic.max_nodes:
            raise ValueError(f"{what} n must be in 2..{cfg.nic.max_nodes} "
                             f"(NicConfig.max_nodes), got {n!r}")
        if not isinstance(chunk, int) or chunk < 1:
            raise ValueError(f"{what} chunk must be a positive integer, got {chunk!r}")
        threads = check_threads(threads, n, f"{what} threads")
        topo = topology if isinstance(topology, Topology) else make_topology(topology, n)
        if topo.n != n:
            raise ValueError(f"{what} topology has {topo.n} nodes, n is {n}")
        self._check_topology(topo, cfg)
        if group is not None and group.n != n:
            raise ValueError(f"{what} group splits {group.n} nodes, n is {n}")
        self.n, self.topo, self.cfg, self.chunk, self.group = n, topo, cfg, chunk, group
        self.traced = trace
        self.local = tuple(range(n)) if group is None else tuple(group.local)
        self.nodes = [self._new_model(cfg) if i in self.local else None for i in range(n)]
        self.wires = link_wires(topo)
        if group is None:
            self._cluster = Cluster(chunk, threads=threads)
            for m in self.nodes:
                self._cluster.add(m)
            self._link = {(i, p): self._cluster.link(self.nodes[i], self._port_out(p), self.nodes[j],
                                                     self._port_in(q)) for i, p, j, q in self.wires}
        else:
            from mcf_fpga.sim.ranks import RankCluster
            self._cluster = RankCluster(group, {i: self.nodes[i] for i in self.local}, chunk, threads=threads)
            self._link = {(i, p): self._cluster.link(i, self._port_out(p), j, self._port_in(q))
                          for i, p, j, q in self.wires}
        self._attach()
        for i in self.local:
            self.nodes[i].reset()

    # ---- what a subclass may change (sim.boards.SimBoardCluster: board tops)
    def _new_model(self, cfg):
        """A fresh Verilator model of one node."""
        return _model(cfg, self.traced)

    def _port_out(self, p: int) -> str:
        return f"m_axis_eth{p}"

    def _port_in(self, q: int) -> str:
        return f"s_axis_eth{q}"

    def _check_topology(self, topo, cfg):
        if topo.n_net > cfg.nic.n_net:
            raise ValueError(f"{type(self).__name__}: topology {topo.name} needs nic.n_net >= {topo.n_net}, "
                             f"node_cfg has {cfg.nic.n_net}")

    def _attach(self):
        """Runs after the models are built and linked, before their reset."""

    # ---- access
    def node(self, i: int):
        """The Verilator ``Model`` of node ``i`` (one of this rank's, with a ``group``)."""
        if not 0 <= i < self.n:
            raise ValueError(f"node must be in 0..{self.n - 1}, got {i}")
        if self.nodes[i] is None:
            raise ValueError(f"node {i} is simulated by rank {self.group.owner[i]}, this is rank {self.group.rank}")
        return self.nodes[i]

    @property
    def cycle(self) -> int:
        return self.nodes[self.local[0]].cycle

    def fault(self, node: int, port: int, fate=None):
        """Install (or with None remove) ``fate`` on the wire leaving ``m_axis_eth<port>`` of ``node``."""
        if (node, port) not in self._link:
            raise ValueError(f"node {node} has no connected network port {port}")
        self._cluster.set_fate(self._link[(node, port)], fate)

    def trace(self, directory, start: int = 0, stop: int | None = None) -> list:
        """Write an FST waveform of cycles ``[start, stop)`` (the nodes' cycle counters, which
        ``configure`` restarts) of every node of this rank to ``directory/node<i>.fst``; needs
        ``trace=True``. The files are complete after ``close()``. Returns their paths."""
        import os
        if not self.traced:
            raise ValueError(f"{type(self).__name__}.trace needs the tracing build: {type(self).__name__}(..., trace=True)")
        os.makedirs(directory, exist_ok=True)
        paths = []
        for i in self.local:
            paths.append(os.path.join(directory, f"node{i}.fst"))
            self.nodes[i].trace(paths[-1], start, stop)
        return paths

    @property
    def threads(self) -> int:
        """Threads that step the nodes (the ``threads`` parameter)."""
        return self._cluster.threads

    def close(self):
        """End the threads that step the nodes (a later ``step`` starts them again) and finish
        any open waveform."""
        self._cluster.close()
        if self.traced:
            for i in self.local:
                self.nodes[i].trace_close()

    # ---- time
    def step(self, cycles: int):
        """Advance every node ``cycles`` clocks, moving frames across the links every ``chunk``."""
        self._cluster.step(cycles)

    def run_until(self, cond, max_cycles: int = 200_000, step: int = 256) -> bool:
        """Step until ``cond()`` is true (checked every ``step`` cycles); False on ``max_cycles``."""
        start = self.cycle
        while not cond():
            if self.cycle - start >= max_cycles:
                return False
            self.step(step)
        return True

    # ---- configuration
    def reset(self):
        for i in self.local:
            self.nodes[i].reset()

    def configure(self, routes: RouteTables | None = None, *, num_layers: int | None = None,
                  num_blocks: int | None = None, reduce_timeout: int | None = None):
        """Reset the nodes and write NIC identity, membership, KV bounds, per-port sources, the
        route tables of ``routes`` (shadow bank, then flip; None = no routes) and the link MACs."""
        configure_nodes(self.nodes, self.topo, self.cfg, routes, num_layers=num_layers, num_blocks=num_blocks,
                        reduce_timeout=reduce_timeout)


def configure_nodes(nodes, topo: Topology, cfg: NodeConfig, routes: RouteTables | None = None, *,
                    num_layers: int | None = None, num_blocks: int | None = None,
                    reduce_timeout: int | None = None):
    """``SimCluster.configure`` on any nodes that offer ``reset()`` and ``axil_write(addr, value)
    -> Resp`` (node i of ``topo`` = ``nodes[i]``): reset each node, then write NIC identity,
    membership, KV bounds, the sources each port accepts (SRC_ALLOW_p = ``src_masks(topo, i)``:
    every route of ``spec.topology`` delivers through a port only frames of these sources, so
    route updates need no rewrite), REDUCE_TIMEOUT when ``reduce_timeout`` is given (else its
    reset value ``cfg.nic.reduce_timeout``), the route tables of ``routes`` (shadow bank, then
    flip) and the MACs of every link of ``link_wires(topo)``. A write not answered OKAY raises,
    naming it. A None in ``nodes`` is a node another rank configures (``sim.ranks``)."""
    n, nic = len(nodes), cfg.nic
    if routes is not None:
        if routes.topo.n != n or routes.topo.n_net != topo.n_net:
            raise ValueError(f"routes were built for {routes.topo.name}, the cluster is {topo.name}")
        if routes.n_routes > nic.n_routes:
            raise ValueError(f"routes has {routes.n_routes} route ids; the route table holds "
                             f"{nic.n_routes} (NicConfig.n_routes)")

    def write(m, addr, value, what):
        r = m.axil_write(addr, value)
        if r != Resp.OKAY:
            raise RuntimeError(f"AXI-Lite write of {what} at {addr:#x} answered {Resp(r).name}")

    mp = nic.meta
    layers = (1 << mp.layer_bits) if num_layers is None else num_layers
    blocks = min(1 << mp.block_bits, 2 ** 32 - 1) if num_blocks is None else num_blocks
    for m in nodes:
        if m is not None:
            m.reset()
    members = (1 << n) - 1
    for i, m in enumerate(nodes):
        if m is None:
            continue
        for reg, val in ((Reg.NODE_ID, i), (Reg.NUM_NODES, n), (Reg.MEMBERS, members),
                         (Reg.NUM_LAYERS, layers), (Reg.NUM_BLOCKS, blocks)):
            write(m, NIC_BASE + reg, val, reg.name)
        for p, mask in enumerate(src_masks(topo, i)):
            write(m, NIC_BASE + src_allow_reg(p), mask, f"SRC_ALLOW_{p}")
        if reduce_timeout is not None:
            write(m, NIC_BASE + Reg.REDUCE_TIMEOUT, reduce_timeout, "REDUCE_TIMEOUT")
        if routes is not None:
            for rid, e in sorted(routes.tables[i].items()):
                write(m, NIC_BASE + Reg.ROUTE_INDEX, rid, "ROUTE_INDEX")
                write(m, NIC_BASE + Reg.ROUTE_DATA, e.encode(), "ROUTE_DATA")
            write(m, NIC_BASE + Reg.BANK_FLIP, 1, "BANK_FLIP")
    for i, p, j, _ in link_wires(topo):
        m = nodes[i]
        if m is None:
            continue
        loc, peer = mac_to_int(mac_for_node(i)), mac_to_int(mac_for_node(j))
        b = NODE_BASE + port_base(p)
        for off, val in ((MAC_LOCAL_LO, loc & 0xFFFFFFFF), (MAC_LOCAL_HI, loc >> 32),
                         (MAC_PEER_LO, peer & 0xFFFFFFFF), (MAC_PEER_HI, peer >> 32)):
            write(m, b + off, val, f"port {p} MAC")
