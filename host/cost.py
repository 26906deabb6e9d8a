"""A small analytic cost model of a program: TTFT in cycles and bytes moved.

Every node runs its ops in order on one compute engine; its NIC works asynchronously
(MCF §5: compute and communication overlap, eqs. 23-25):

* compute ops take ``max(MACs / macs_per_cycle, weight+KV bytes / ddr_bytes_per_cycle)``
  cycles (the ping-pong DMA overlaps loading with compute, so the slower one dominates);
* ``send`` does not stall the engine: the payload leaves when the node's egress port is free,
  occupies it ``nbytes / link_bytes_per_cycle`` cycles, and arrives ``depth * link_latency``
  later (cut-through multicast: the NIC replicates at branch points, the tree depth is D_crit);
* ``recv`` waits for the arrival; ``allreduce`` waits for every member, then costs a reduce and
  a multicast of the payload (2 x (bytes/BW + depth x latency));
* directory ops (acquire, release, drain, unstage, free, mark, append) cost nothing.

TTFT is the latest ``prefill_done`` over the nodes (first token produced *and* the decode
layout ready: for PD that includes the KV hand-off). This is a first-order model (no link
contention beyond each sender's port, no DDR contention between DMA and NIC); the calibrated
performance model is a later issue.
"""
from __future__ import annotations

from dataclasses import dataclass

from .config import HardwareConfig
from .program import Program

__all__ = ["Estimate", "estimate", "op_cycles"]


@dataclass
class Estimate:
    ttft_cycles: int
    ttft_seconds: float
    prefill_bytes: int              # payload x links, prefill (MCF eqs. 17-22)
    prefill_messages: int
    decode_cycles_per_token: float
    compute_cycles: list            # per node, busy cycles in prefill
    stall_cycles: list              # per node, cycles waiting for messages in prefill


def _pairs(rows, units, block_units) -> int:
    """Causal (query, key) pairs between query rows [r0, r1) and the listed key ranges."""
    r0, r1 = rows
    total = 0
    for t0, t1 in block_units:
        a, b = max(r0, t0), min(r1, t1) - 1          # rows inside the key range: r + 1 - t0 keys
        if a <= b:
            lo, hi = a + 1 - t0, b + 1 - t0
            total += (lo + hi) * (hi - lo + 1) // 2
        full = r1 - max(r0, t1)                        # rows past the range: all t1 - t0 keys
        if full > 0:
            total += full * (t1 - t0)
    return total


def op_cycles(program: Program, hw: HardwareConfig, op) -> float:
    m = program.model
    H, Hk, d, D, I = m.num_heads, m.num_kv_heads, m.head_dim, m.hidden_size, m.intermediate_size
    k = op.kind

    def gemm(rows, n_in, n_out):
        macs = rows * n_in * n_out
        return max(macs / hw.macs_per_cycle, n_in * n_out / 2 / hw.ddr_bytes_per_cycle)

    if k == "embed":
        return (op.rows[1] - op.rows[0]) * D / hw.ddr_bytes_per_cycle
    if k in ("project", "dproject"):
        return gemm(op.rows[1] - op.rows[0], D, H * d + 2 * Hk * d)
    if k in ("finish", "dfinish"):
        rows = max(1, op.rows[1] - op.rows[0])
        return gemm(rows, H * d, D) + 2 * gemm(rows, D, I) + gemm(rows, I, D)
    if k == "attend":
        ranges = [program.units[u] for u in op.units]
        pairs = _pairs(op.rows, op.units, ranges)
        kv = sum(t1 - t0 for t0, t1 in ranges) * (2 * Hk * d * program.kv_bits // 8 + 2 * Hk)
        return max(2 * H * d * pairs / hw.macs_per_cycle, kv / hw.ddr_bytes_per_cycle)
    if k == "dattend":
        return 2 * H * d * (op.rows[0] + 1) / max(1, len(program.decode_group)) / hw.macs_per_cycle
    if k == "logits":
        return gemm(1, D, m.vocab_size) if op.rows[1] == program.prompt_len else 0.0
    if k == "dlogits":
        return gemm(1, D, m.vocab_size)
    return 0.0


def estimate(program: Program, hw: HardwareConfig = HardwareConfig()) -> Estimate:
    N = program.nodes
    t = [0.0] * N
    busy = [0.0] * N
    stall = [0.0] * N
    egress = [0.0] * N
    arrival: dict = {}
    coll: dict = {}
    pc = [0] * N
    done_at = [None] * N
    end = [0.0] * N
    lat, bw = hw.link_latency_cycles, hw.link_bytes_per_cycle
    ops = program.ops
    while any(pc[n] < len(ops[n]) for n in range(N)):
        progress = False
        for n in range(N):
            while pc[n] < len(ops[n]):
                op = ops[n][pc[n]]
                if op.kind == "send":
                    dep = max(t[n], egress[n])
                    egress[n] = dep + op.nbytes / bw
                    arrival[op.msg] = egress[n] + op.depth * lat
                elif op.kind == "recv":
                    if op.msg not in arrival:
                        break
                    if arrival[op.msg] > t[n] and done_at[n] is None:
                        stall[n] += arrival[op.msg] - t[n]
                    t[n] = max(t[n], arrival[op.msg])
                elif op.kind == "allreduce":
                    c = coll.setdefault(op.msg, {"in": {}, "out": None})
                    c["in"][n] = t[n]
                    if c["out"] is None:
                        if len(c["in"]) < len(op.dsts):
                            break
                        hops = max(len(program.topo.path(op.peer, g)) - 1 for g in op.dsts)
                        c["out"] = max(c["in"].values()) + 2 * (op.nbytes / bw + hops * lat)
                    t[n] = c["out"]
                elif op.kind == "mark":
                    if op.name == "prefill_done":
                        done_at[n] = t[n]
                else:
                    cyc = op_cycles(program, hw, op)
                    t[n] += cyc
                    if done_at[n] is None:
                        busy[n] += cyc
                pc[n] += 1
                progress = True
            end[n] = t[n]
        if not progress:
            raise RuntimeError("cost model: program deadlocks")
    ttft = max(x for x in done_at if x is not None)
    tr = program.traffic()
    steps = max(1, program.max_new_tokens - 1)
    dec = (max(end) - ttft) / steps if program.max_new_tokens > 1 else 0.0
    return Estimate(ttft_cycles=int(round(ttft)), ttft_seconds=ttft / hw.clock_hz,
                    prefill_bytes=tr.prefill_bytes, prefill_messages=tr.prefill_messages,
                    decode_cycles_per_token=dec, compute_cycles=[int(b) for b in busy],
                    stall_cycles=[int(s) for s in stall])
