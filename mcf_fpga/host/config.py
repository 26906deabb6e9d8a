"""Host-side configuration: model, cluster and hardware, validated.

* The model is ``golden.config.ModelConfig`` (not repeated here); ``kv_bits`` and the
  golden merge block come from the quantised model (``golden.int_model.QuantModel``).
* ``ClusterConfig``: N nodes, topology (ring | mesh), per-node KV memory ``S_node`` in
  bytes (MCF eq. 10) or, with ``kv_region`` (``ClusterConfig.from_region``), the node's KV
  region in DDR counted in slots (``host.kvcapacity``), route-table entries per NIC.
* ``HardwareConfig``: one KR260 node: clock, link bandwidth/latency, DDR bandwidth,
  compute MACs/cycle, on-chip KV propagation buffer ``M_buf`` (MCF eq. 5).

Every ``__post_init__`` raises ``ValueError`` naming the field and its limit.
Defaults: KR260 at 200 MHz, 10 Gb/s SFP+ (``HardwareConfig.kr260(link="rgmii")`` for the
1 Gb/s RGMII ports).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from mcf_fpga.golden.config import ModelConfig, get_config  # noqa: F401  (re-exported: the one model config)
from mcf_fpga.spec.kvregion import KVRegion
from mcf_fpga.spec.topology import Topology, make_topology
from mcf_fpga.spec.meta import DEFAULT_PARAMS, MetaParams

__all__ = ["ModelConfig", "get_config", "ClusterConfig", "HardwareConfig", "LINKS", "kv_unit_bytes"]

#: Link presets: name -> (bits per second, one-hop latency in seconds).
LINKS = {
    "sfp10g": (10e9, 1.0e-6),    # SFP+ 10GBASE-R, MAC+PHY+cable ~1 us per hop
    "rgmii1g": (1e9, 2.0e-6),    # RGMII 1000BASE-T, ~2 us per hop
}


def _need(cls, cond, field, value, expected):
    if not cond:
        raise ValueError(f"{cls}.{field}={value!r}, expected {expected}")


@dataclass(frozen=True)
class ClusterConfig:
    """The cluster: ``nodes`` nodes on a ``topology``, ``kv_bytes_per_node`` of KV memory each
    (S_node of MCF eqs. 10-11), ``route_table_size`` entries in every NIC route table.

    ``kv_region`` (None: a byte budget): every node's KV region in DDR
    (:class:`spec.kvregion.KVRegion`). The planners then count its slots (a KV unit of one layer
    occupies one slot of ``slot_bytes``, padding included), not bytes: ``host.kvcapacity``. It
    lives here, not in ``HardwareConfig``, because the planners already take per-node KV memory
    from the cluster (``kv_bytes_per_node``; ``HardwareConfig.kv_buffer_bytes`` is the on-chip
    propagation buffer M_buf of eq. 5, a different memory). Build with :meth:`from_region`;
    ``kv_bytes_per_node`` must then equal the region's ``size``."""
    nodes: int = 4
    topology: str = "ring"
    kv_bytes_per_node: int = 1 << 30
    route_table_size: int = 64
    meta: MetaParams = DEFAULT_PARAMS
    kv_region: KVRegion | None = None

    @classmethod
    def from_region(cls, region: KVRegion, **kw) -> "ClusterConfig":
        """A cluster whose every node's KV memory is ``region`` (``kv_bytes_per_node`` = its size)."""
        if "kv_bytes_per_node" in kw:
            raise ValueError("ClusterConfig.from_region: kv_bytes_per_node comes from the region, do not pass it")
        if not isinstance(region, KVRegion):
            raise ValueError(f"ClusterConfig.kv_region={region!r}, expected a spec.kvregion.KVRegion")
        return cls(kv_bytes_per_node=region.size, kv_region=region, **kw)

    def __post_init__(self):
        n = "ClusterConfig"
        _need(n, isinstance(self.nodes, int) and self.nodes >= 2, "nodes", self.nodes, "an integer >= 2")
        _need(n, self.topology in ("ring", "mesh"), "topology", self.topology, "'ring' or 'mesh'")
        _need(n, isinstance(self.kv_bytes_per_node, int) and self.kv_bytes_per_node > 0,
              "kv_bytes_per_node", self.kv_bytes_per_node, "a positive integer (bytes)")
        if self.kv_region is not None:
            _need(n, isinstance(self.kv_region, KVRegion), "kv_region", self.kv_region, "a spec.kvregion.KVRegion")
            _need(n, self.kv_bytes_per_node == self.kv_region.size, "kv_bytes_per_node", self.kv_bytes_per_node,
                  f"kv_region.size={self.kv_region.size} (n_slots x slot_bytes; build with ClusterConfig.from_region)")
        _need(n, isinstance(self.route_table_size, int) and 1 <= self.route_table_size <= self.meta.max_routes,
              "route_table_size", self.route_table_size, f"1..{self.meta.max_routes} (Meta.route_id width)")
        _need(n, self.nodes <= self.meta.max_nodes, "nodes", self.nodes,
              f"<= {self.meta.max_nodes} (Meta.src/dst width)")
        # every node is the source of at least one route (its replica multicast / decode query)
        _need(n, self.nodes <= self.route_table_size, "nodes", self.nodes,
              f"<= route_table_size={self.route_table_size} (one route per node at least)")

    def make_topology(self) -> Topology:
        return make_topology(self.topology, self.nodes)

    def replace(self, **kw) -> "ClusterConfig":
        return replace(self, **kw)


@dataclass(frozen=True)
class HardwareConfig:
    """One node's hardware rates, in cycles of ``clock_hz``.

    ``link_bytes_per_cycle`` and ``link_latency_cycles`` describe one hop (BW_eff and
    tau_link of MCF eq. 7); ``macs_per_cycle`` is P_node / 2 (a MAC is two operations, eq. 6);
    ``kv_buffer_bytes`` is M_buf (eq. 5); ``ddr_bytes_per_cycle`` is the node's DDR bandwidth
    shared by all its AXI HP ports, ``port_bytes_per_cycle`` what one port moves per direction
    (128 bits: 16 B/cycle; ``host.ddrports``), ``weight_ports`` the read ports the GEMM weight
    tiles are striped over (``boards.striped_reader``: HP2, HPC0, HPC1)."""
    clock_hz: float = 200e6
    link_bytes_per_cycle: float = 10e9 / 8 / 200e6
    link_latency_cycles: int = 200
    ddr_bytes_per_cycle: float = 64.0
    macs_per_cycle: int = 256
    kv_buffer_bytes: int = 1 << 20
    port_bytes_per_cycle: float = 16.0
    weight_ports: int = 1

    def __post_init__(self):
        n = "HardwareConfig"
        _need(n, self.weight_ports in (1, 2, 3), "weight_ports", self.weight_ports, "1, 2 or 3 (HP2, HPC0, HPC1)")
        _need(n, self.port_bytes_per_cycle > 0, "port_bytes_per_cycle", self.port_bytes_per_cycle, "> 0")
        _need(n, self.clock_hz > 0, "clock_hz", self.clock_hz, "> 0")
        _need(n, self.link_bytes_per_cycle > 0, "link_bytes_per_cycle", self.link_bytes_per_cycle, "> 0")
        _need(n, isinstance(self.link_latency_cycles, int) and self.link_latency_cycles >= 0,
              "link_latency_cycles", self.link_latency_cycles, "an integer >= 0")
        _need(n, self.ddr_bytes_per_cycle > 0, "ddr_bytes_per_cycle", self.ddr_bytes_per_cycle, "> 0")
        _need(n, isinstance(self.macs_per_cycle, int) and self.macs_per_cycle > 0, "macs_per_cycle",
              self.macs_per_cycle, "a positive integer")
        _need(n, isinstance(self.kv_buffer_bytes, int) and self.kv_buffer_bytes > 0, "kv_buffer_bytes",
              self.kv_buffer_bytes, "a positive integer (bytes)")

    @classmethod
    def kr260(cls, link: str = "sfp10g", clock_hz: float = 200e6, **kw) -> "HardwareConfig":
        """KR260 at ``clock_hz`` with the ``link`` preset (``sfp10g`` | ``rgmii1g``): 19.2 GB/s
        DDR4 at ~2/3 efficiency, 127 DSPs packing two INT4xINT8 MACs each (256/cycle), the
        weight tiles striped over 3 read ports (HP2, HPC0, HPC1: the ``node-kr260`` board top)."""
        if link not in LINKS:
            raise ValueError(f"HardwareConfig.link={link!r}, expected one of {sorted(LINKS)}")
        bps, lat = LINKS[link]
        kw.setdefault("link_bytes_per_cycle", bps / 8 / clock_hz)
        kw.setdefault("link_latency_cycles", int(round(lat * clock_hz)))
        kw.setdefault("ddr_bytes_per_cycle", 19.2e9 * 2 / 3 / clock_hz)
        kw.setdefault("weight_ports", 3)
        return cls(clock_hz=clock_hz, **kw)

    def replace(self, **kw) -> "HardwareConfig":
        return replace(self, **kw)


def kv_unit_bytes(model: ModelConfig, tokens: int, kv_bits: int = 8) -> int:
    """Bytes of one layer's K and V for ``tokens`` tokens in the hardware format: ``kv_bits``
    values per element plus one exponent byte per (token, KV head) for K and for V."""
    return tokens * (2 * model.kv_dim * kv_bits // 8 + 2 * model.num_kv_heads)
