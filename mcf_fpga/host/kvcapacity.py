"""A node's KV pool as the planners size it: how many slots a node has and what one slot costs.

Every KV *unit* (one layer's K and V of a token range, ``host.program``) occupies one slot of
its node's pool (``golden.kvpool.KVPool``). Two ways to say how big a node's pool is
(``host.config.ClusterConfig``):

* **bytes** (``kv_bytes_per_node`` = S_node, MCF eq. 10; no ``kv_region``): a slot is the
  compact hardware format of the largest unit (``host.config.kv_unit_bytes``) and the node has
  ``S_node // slot_bytes`` of them. This is what the published figures used.
* **region** (``kv_region``, a :class:`spec.kvregion.KVRegion`: the node's KV region in DDR):
  the node has the region's ``n_slots`` slots of ``slot_bytes`` (row records padded to
  the bus width: 144 B per INT8 row at d = 128, not 129), whatever the unit's size, as long as a
  unit fits one slot (``slot_rows = num_kv_heads x`` tokens per slot). Capacity is counted in
  slots, never in raw bytes.

``node_pool`` returns a :class:`NodePool` for either; its ``s_node`` is the byte budget eqs.
10-11 divide (``n_slots * slot_bytes`` for a region, so eq. 11's ``r_mem`` counts slots) and
``limit`` names the field and the limit for admission errors.
"""
from __future__ import annotations

from dataclasses import dataclass

from mcf_fpga.spec.kvregion import GIB, KVRegion

__all__ = ["NodePool", "node_pool", "region_label"]


@dataclass(frozen=True)
class NodePool:
    """One node's KV pool for units of at most ``unit_tokens`` tokens: ``n_slots`` slots of
    ``slot_bytes``; ``s_node`` bytes is S_node of eqs. 10-11; ``limit`` names the limit in
    errors; ``region`` is the KV region it comes from (None: the byte budget)."""
    slot_bytes: int
    n_slots: int
    s_node: int
    limit: str
    region: KVRegion | None = None


def _size(n: int) -> str:
    for unit, k in (("GiB", GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:,.1f} {unit}"
    return f"{n} B"


def region_label(region: KVRegion) -> str:
    """``<name> holds <n_slots> (<size> at <base>)``: how admission errors name a region."""
    name = region.name or (f"KVRegion(slot_rows={region.slot_rows}, d={region.d}, kv_bits={region.kv_bits})")
    return (f"the KV region {name} holds {region.n_slots:,} slots of {region.slot_bytes:,} B "
            f"({_size(region.size)} at {region.base:#_x}; ClusterConfig.kv_region.n_slots={region.n_slots})")


def region_slot_tokens(model, region: KVRegion, kv_bits: int) -> int:
    """Tokens of one layer a slot of ``region`` holds for ``model`` at ``kv_bits``; refuses a
    region whose rows do not match the model (``d``, ``kv_bits``, ``slot_rows``)."""
    if region.d != model.head_dim:
        raise ValueError(f"ClusterConfig.kv_region.d={region.d}, expected the model's head_dim={model.head_dim}")
    if region.kv_bits != kv_bits:
        raise ValueError(f"ClusterConfig.kv_region.kv_bits={region.kv_bits}, expected the program's kv_bits={kv_bits}")
    if region.slot_rows % model.num_kv_heads:
        raise ValueError(f"ClusterConfig.kv_region.slot_rows={region.slot_rows}, expected a multiple of the "
                         f"model's num_kv_heads={model.num_kv_heads} (a slot holds tokens x KV heads rows)")
    return region.slot_rows // model.num_kv_heads


def node_pool(model, cluster, unit_tokens: int, kv_bits: int) -> NodePool:
    """The pool of one node of ``cluster`` for KV units of at most ``unit_tokens`` tokens (module
    docstring). With a region, a unit longer than a slot is refused (naming ``slot_rows``)."""
    from mcf_fpga.host.config import kv_unit_bytes
    region = cluster.kv_region
    if region is None:
        slot = kv_unit_bytes(model, unit_tokens, kv_bits)
        return NodePool(slot, cluster.kv_bytes_per_node // slot, cluster.kv_bytes_per_node,
                        f"ClusterConfig.kv_bytes_per_node={cluster.kv_bytes_per_node}")
    per = region_slot_tokens(model, region, kv_bits)
    if unit_tokens > per:
        raise ValueError(f"a KV unit of {unit_tokens} tokens does not fit one slot of the KV region "
                         f"(ClusterConfig.kv_region.slot_rows={region.slot_rows} = {per} tokens x "
                         f"{model.num_kv_heads} KV heads): use chunks of at most {per} tokens")
    return NodePool(region.slot_bytes, region.n_slots, region.size, region_label(region), region)
