"""Shared fixtures for the host scheduler tests: the micro model, prompts, random configs."""
from __future__ import annotations

import torch
from hypothesis import strategies as st

from mcf_fpga.golden.config import get_config
from mcf_fpga.golden.int_model import IntModel, quantize_model
from mcf_fpga.golden.model import random_weights
from mcf_fpga.host import baselines, mars
from mcf_fpga.host.config import ClusterConfig, HardwareConfig, kv_unit_bytes
from mcf_fpga.host.program_ops import DecodeProject, Publish

torch.set_num_threads(1)   # 2 shared cores: intra-op threads only add contention at these sizes

CFG = get_config("micro")
BLOCK = 8
IM = IntModel(quantize_model(random_weights(CFG, seed=5), block=BLOCK))
HW = HardwareConfig()
SCHEDULES = ("mars", "ring", "zigzag", "pd")


def prompt(n: int, seed: int = 0) -> list:
    return torch.randint(0, CFG.vocab_size, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def min_s_node(nodes: int, S: int, B: int, K: int = 0, model=CFG) -> int:
    """Smallest per-node KV memory that holds the owner-only layout (prompt + decode) for MARS."""
    C = -(-S // B)
    slot = kv_unit_bytes(model, B)
    dec = max(0, -(-(S + K - 1) // BLOCK) - -(-S // BLOCK))
    return (-(-C // nodes)) * model.num_layers * slot + -(-dec // nodes) * model.num_layers * kv_unit_bytes(model, BLOCK)


def build(schedule: str, cluster: ClusterConfig, S: int, K: int, chunk: int, alpha: float = 0.5, hw=HW,
          placement: str = "round_robin", **decode):
    """A micro-model program; ``decode``: ``w_group`` / ``w_tile`` of its decode (host.tp)."""
    if schedule == "mars":
        return mars.plan(CFG, cluster, hw, S, K, block=BLOCK,
                         params=mars.MarsParams(chunk=chunk, alpha=alpha, placement=placement), **decode)
    return baselines.SCHEDULES[schedule](CFG, cluster, hw, S, K, chunk=chunk, block=BLOCK, **decode)


def decode_reference(im, prompt, K: int) -> tuple:
    """IntModel's tokens for ``prompt`` and, per decode step, (largest logit, its token): what a
    tensor-parallel W group picks (``ExecResult.req_picked``)."""
    cache = im.new_cache()
    lg = im.forward(prompt, cache, decode=False)
    toks, picked = [int(torch.argmax(lg[-1]))], []
    for _ in range(K - 1):
        lg = im.forward([toks[-1]], cache, decode=True)[-1]
        picked.append((int(lg.max()), int(torch.argmax(lg))))
        toks.append(picked[-1][1])
    return toks, picked


@st.composite
def mars_cases(draw, max_nodes=6, max_chunks=12):
    """(cluster, S, K, chunk, alpha, placement) with S_node between the owner-only minimum and 4x it."""
    nodes = draw(st.integers(2, max_nodes))
    topo = draw(st.sampled_from(["ring", "mesh"]))
    chunk = BLOCK * draw(st.integers(1, 3))
    S = draw(st.integers(1, max_chunks * chunk))
    K = draw(st.integers(0, 3))
    alpha = draw(st.floats(0.0, 2.0))
    lo = min_s_node(nodes, S, chunk, K)
    s_node = draw(st.integers(lo, 4 * lo))
    placement = draw(st.sampled_from(mars.PLACEMENTS))
    return ClusterConfig(nodes=nodes, topology=topo, kv_bytes_per_node=s_node), S, K, chunk, alpha, placement


def assert_one_route_version_per_step(step_versions, prog):
    """Elastic decode: every decode op of one (request, position, layer) ran under one routing
    version on every node (``ExecResult.step_versions``), and that version is the number of
    ``publish`` ops before the step in the leader's stream."""
    seen = {}
    for per_node in step_versions:
        for key, v in per_node.items():
            seen.setdefault(key, set()).add(v)
    assert seen and all(len(v) == 1 for v in seen.values()), {k: v for k, v in seen.items() if len(v) > 1}
    want, pubs = {}, 0
    for op in prog.ops[prog.leader]:
        pubs += isinstance(op, Publish)
        if isinstance(op, DecodeProject):
            want[(op.req, op.rows[0], op.layer)] = pubs
    assert {k: next(iter(v)) for k, v in seen.items()} == want
