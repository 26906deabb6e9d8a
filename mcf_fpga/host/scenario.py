"""One comparison scenario: the same prompt compiled by several schedules for one cluster.

Shared by ``mcf run`` and ``scripts/bench_prefill.py`` so both compare like with like:

* every schedule gets the same piece size ``chunk``: MARS computes one chunk of ``chunk``
  tokens per step on one node; ring splits chunks of ``nodes * chunk`` tokens across the
  ring; zigzag splits chunks of ``2 * nodes * chunk`` into 2N pieces (pieces are whole golden
  blocks, so a smaller zigzag chunk would leave pieces empty and degenerate to ring), each
  node computing pieces j and 2N-1-j; PD's prefill pool (nodes/2) splits ``nodes/2 * chunk``;
* S_node (MCF eq. 10) is ``kv_headroom`` times the owner-only minimum of MARS's layout, in
  whole slots, so MARS has room for some replicas but not all;
* the hardware model handed to the planner describes the simulated node
  (``host.executors.rtl.SIM_ENGINE``: its MACs/cycle; 8-byte link beats; the cluster step as
  the hop latency).
"""
from __future__ import annotations

import dataclasses
import math

from mcf_fpga.host import baselines, mars
from mcf_fpga.host.config import ClusterConfig, HardwareConfig, kv_unit_bytes
from mcf_fpga.host.tp import DEFAULT_TILE

__all__ = ["SCHEDULES", "sim_hardware", "build_programs"]

SCHEDULES = ("mars", "ring", "zigzag", "pd")


def sim_hardware() -> HardwareConfig:
    from mcf_fpga.host.executors.rtl import SIM_ENGINE
    return HardwareConfig(macs_per_cycle=SIM_ENGINE["pn"] * SIM_ENGINE["pk"], link_bytes_per_cycle=8.0,
                          link_latency_cycles=64, kv_buffer_bytes=1 << 20)


def build_programs(cfg, *, nodes: int, topology: str, prompt_len: int, max_new_tokens: int,
                   schedules, chunk: int = 16, block: int = 16, kv_headroom: float = 2.0,
                   kv_bits: int = 8, hw: HardwareConfig | None = None, placement: str = "round_robin",
                   w_group=None, w_tile: int = DEFAULT_TILE, logits: str = "all"):
    """{schedule: Program} and the ClusterConfig (see the module docstring); ``hw`` is the
    hardware the planners see (default: the simulated node, ``sim_hardware()``); ``placement``
    is MARS's chunk placement (``host.mars.PLACEMENTS``); ``w_group`` / ``w_tile``: decode's
    tensor-parallel weight group (default: the schedule's leader alone); ``logits``: the prompt rows
    the head runs on (``Program.logits``: "all", or "last" -- only the first token's row)."""
    names = list(schedules)
    bad = [s for s in names if s not in SCHEDULES]
    if bad or not names:
        raise ValueError(f"schedules={names!r}: expected names from {', '.join(SCHEDULES)}")
    for k, v, lo in (("nodes", nodes, 2), ("prompt_len", prompt_len, 1), ("max_new_tokens", max_new_tokens, 0),
                     ("chunk", chunk, 1), ("block", block, 1), ("kv_bits", kv_bits, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"{k}={v!r} must be an integer >= {lo}")
    if prompt_len + max_new_tokens > cfg.max_position:
        raise ValueError(f"prompt_len + max_new_tokens = {prompt_len + max_new_tokens} exceeds "
                         f"ModelConfig.max_position={cfg.max_position}")
    if not isinstance(kv_headroom, (int, float)) or math.isnan(kv_headroom) or kv_headroom < 1:
        raise ValueError(f"kv_headroom={kv_headroom} must be >= 1 (below it even the owner-only layout "
                         f"does not fit)")
    if math.isinf(kv_headroom):
        raise ValueError(f"kv_headroom={kv_headroom} must be finite")
    B, N, L = chunk, nodes, cfg.num_layers
    C = -(-prompt_len // B)
    slot = kv_unit_bytes(cfg, B, kv_bits)
    dec = max(0, -(-(prompt_len + max_new_tokens - 1) // block) - -(-prompt_len // block))
    owner_min = -(-C // N) * L * slot + -(-dec // N) * L * kv_unit_bytes(cfg, block, kv_bits)
    cluster = ClusterConfig(nodes=N, topology=topology,
                            kv_bytes_per_node=max(slot, int(owner_min * kv_headroom) // slot * slot))
    hw = hw or sim_hardware()
    progs = {}
    for s in names:
        if s == "mars":
            progs[s] = mars.plan(cfg, cluster, hw, prompt_len, max_new_tokens, kv_bits=kv_bits, block=block,
                                 params=mars.MarsParams(chunk=B, placement=placement), w_group=w_group,
                                 w_tile=w_tile)
        else:
            share = {"pd": max(1, N // 2), "zigzag": 2 * N}.get(s, N)
            progs[s] = baselines.SCHEDULES[s](cfg, cluster, hw, prompt_len, max_new_tokens, chunk=B * share,
                                              kv_bits=kv_bits, block=block, w_group=w_group, w_tile=w_tile)
    return {s: dataclasses.replace(p, logits=logits) for s, p in progs.items()}, cluster
