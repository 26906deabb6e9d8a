"""Node roles of elastic decode (KernelFlume §3.1, §8).

* A **W node** is the weight-bearing unit: W_Q, W_K, W_V projections, the merge of the
  A nodes' partials, W_O and the FFN. It may be a tensor-parallel group of nodes; TP
  all-reduces stay inside the group, and A-node scale events never change the group (§8).
* An **A node** is weightless: it stores KV token ranges (assigned by the routing table),
  appends K_new/V_new when it is a request's tail, attends locally over its ranges and
  returns online-softmax partials (o, m, l) (§3.2 "Local attention on the attention nodes").

``Roles`` validates a cluster split: W group and A pool are disjoint node ids of one cluster.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Role", "W_OPS", "A_OPS", "WNode", "Roles"]


class Role(enum.Enum):
    W = "weight"
    A = "attention"


#: per-layer work of each role, in execution order (query-first: q before k/v, §5.1)
W_OPS = ("proj_q", "dispatch_q", "proj_kv", "dispatch_kv", "merge", "w_o", "ffn")
A_OPS = ("recv_q", "append_kv_if_tail", "attend", "return_partial")


@dataclass(frozen=True)
class WNode:
    """A W node: one node or a tensor-parallel group (``members``; ``members[0]`` is the
    group's leader: it dispatches Q/KV and is the reduction root for partials)."""
    members: tuple

    def __post_init__(self):
        if not self.members:
            raise ValueError("WNode.members must name at least one node")
        if len(set(self.members)) != len(self.members):
            raise ValueError(f"WNode.members has duplicates: {self.members}")

    @property
    def leader(self) -> int:
        return self.members[0]

    @property
    def tp(self) -> int:
        return len(self.members)


@dataclass(frozen=True)
class Roles:
    """The W node (group) and the pool of nodes that may serve as A nodes."""
    w: WNode
    a_pool: tuple
    n_nodes: int

    def __post_init__(self):
        ids = list(self.w.members) + list(self.a_pool)
        bad = [i for i in ids if not (isinstance(i, int) and 0 <= i < self.n_nodes)]
        if bad:
            raise ValueError(f"Roles: node ids {bad} outside 0..{self.n_nodes - 1}")
        if set(self.w.members) & set(self.a_pool):
            raise ValueError(f"Roles: nodes {sorted(set(self.w.members) & set(self.a_pool))} "
                             f"cannot be both W and A")
        if len(set(self.a_pool)) != len(self.a_pool):
            raise ValueError(f"Roles.a_pool has duplicates: {self.a_pool}")

    def role(self, node: int) -> Role | None:
        if node in self.w.members:
            return Role.W
        if node in self.a_pool:
            return Role.A
        return None

    @classmethod
    def split(cls, n_nodes: int, tp: int = 1) -> "Roles":
        """Nodes 0..tp-1 form the W group, the rest are the A pool."""
        if not 1 <= tp < n_nodes:
            raise ValueError(f"tp={tp} must be in 1..{n_nodes - 1} (at least one A node)")
        return cls(WNode(tuple(range(tp))), tuple(range(tp, n_nodes)), n_nodes)
