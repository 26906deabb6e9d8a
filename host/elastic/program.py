"""An elastic-decode program (KernelFlume on the cluster): prefill on a subset of the nodes,
then KV-stationary decode whose group grows by route updates at token boundaries.

``elastic_program(model, cluster, hw, prompt_len, max_new_tokens, prefill_nodes=P,
scale_ups={step: node})``: ring prefill (``host.baselines``) on nodes 0..P-1 of the cluster's
topology leaves an owner-only layout; those nodes are the initial decode group (the node
holding the last prompt row leads: it runs the weight side — projections, merge, W_O, FFN).
Before decode step ``s`` in ``scale_ups`` the weightless node ``scale_ups[s]`` joins as the
tail: it receives the new K/V from then on, takes part in the two-phase merge, and the change
is a ``publish`` op on every node (``host.program.add_decode``). The same program runs on the
golden, torch.distributed and RTL executors; on the RTL cluster a publish rewrites the decode
collectives' route entries in every NIC's shadow bank and flips the banks at the token
boundary (``host.executors.rtl``).

Scale-down (a node leaving when the requests holding its ranges finish) needs several
requests in one program; programs hold one request today.
"""
from __future__ import annotations

from host.baselines import _last_row_owner, _ring_prefill, _setup
from host.config import kv_unit_bytes
from host.program import Program, ProgramBuilder, add_decode

__all__ = ["elastic_program"]


def elastic_program(model, cluster, hw, prompt_len: int, max_new_tokens: int, *, prefill_nodes: int,
                    scale_ups: dict, chunk: int, kv_bits: int = 8, block: int = 16) -> Program:
    N, P = cluster.nodes, prefill_nodes
    if not 1 <= P < N:
        raise ValueError(f"prefill_nodes={P} must be in 1..{N - 1} (the others are the A-node pool)")
    bad = [n for n in scale_ups.values() if not P <= n < N]
    if bad:
        raise ValueError(f"scale_ups nodes {bad} must come from the A-node pool {P}..{N - 1}")
    if len(set(scale_ups.values())) != len(scale_ups):
        raise ValueError("scale_ups: a node can join only once")
    if any(not 0 <= s < max_new_tokens - 1 for s in scale_ups):
        raise ValueError(f"scale_ups steps must be decode steps 0..{max_new_tokens - 2}")
    topo = _setup(model, cluster, hw, prompt_len, max_new_tokens, chunk, block, kv_bits, P, False)
    b = ProgramBuilder(model, topo, block, kv_bits, cluster.route_table_size)
    group = list(range(P))
    units, owner = _ring_prefill(b, group, prompt_len, chunk, False)
    leader = _last_row_owner(units, owner, prompt_len)
    for n in range(N):
        b.add(n, "mark", name="prefill_done")
    groups = add_decode(b, units, owner, leader, tuple(group), leader, prompt_len, max_new_tokens, block,
                        scale_ups=scale_ups)
    slot = max(kv_unit_bytes(model, t1 - t0, kv_bits) for t0, t1 in units)
    return Program("elastic", model, topo, block, kv_bits, prompt_len, max_new_tokens, units, owner, b.ops,
                   b.routes, leader, tuple(group), slot, cluster.kv_bytes_per_node // slot,
                   stats={"routes": b.routes.next_id, "route_fallbacks": b.route_fallbacks,
                          "decode_groups": groups, "scale_ups": dict(scale_ups)})
