"""torch.distributed executor: one process per node, gloo on CPU, real send/recv.

Ranks are forked (``sim.ranks.fork_ranks``: ``torch.multiprocessing`` start method ``fork``,
~0.6 s for 4 ranks, vs ~8 s with spawn), or are the processes of a ``torchrun`` job
(``run_dist_rank``). Every message is a point-to-point ``isend``/``irecv`` whose
tag is the program's message id; a multicast is one send per destination (the NIC's route
replicates in hardware; the byte accounting uses the route tree). Decode all-reduces use
``dist.all_reduce`` over the decode group. Every wait has a timeout: a failing rank makes the
others fail, and the parent kills whatever is left, so a test never hangs.
"""
from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist

from mcf_fpga.host.program_ops import AllReduce

from .result import ExecResult, collect
from .runtime import ExecError, NodeRuntime

__all__ = ["run_dist", "run_dist_rank", "launched_by_torchrun"]


class GlooTransport:
    def __init__(self, node: int, groups: dict, timeout: float):
        self.node, self.groups, self.timeout = node, groups, datetime.timedelta(seconds=timeout)
        self.pending = []

    def send(self, msg, dsts, payload):
        payload = payload.contiguous()
        for d in dsts:
            self.pending.append((dist.isend(payload, dst=d, tag=msg), payload))

    def recv(self, msg, src, numel):
        buf = torch.empty(numel, dtype=torch.int64)
        work = dist.irecv(buf, src=src, tag=msg)
        if not work.wait(self.timeout):
            raise ExecError(f"rank {self.node}: timed out waiting for message {msg} from {src}")
        return buf
        yield  # pragma: no cover  (makes this a generator, like the golden transport)

    def allreduce(self, msg, group, tensor, op):
        t = tensor.clone()
        g = self.groups[tuple(sorted(group))]
        w = dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM, group=g,
                            async_op=True)
        if not w.wait(self.timeout):
            raise ExecError(f"rank {self.node}: all-reduce {msg} timed out")
        return t
        yield  # pragma: no cover

    def finish(self):
        for w, _ in self.pending:
            w.wait(self.timeout)
        self.pending.clear()


def _program_groups(program, world) -> dict:
    """Every all-reduce group of ``program`` (an elastic decode grows it), created by every rank
    in the same order, as gloo requires."""
    groups = {tuple(range(world)): dist.group.WORLD}
    wanted = {tuple(sorted(program.decode_group))}
    wanted |= {tuple(sorted(op.dsts)) for ops in program.ops for op in ops if isinstance(op, AllReduce)}
    for dg in sorted(wanted):
        if dg not in groups:
            groups[dg] = dist.new_group(list(dg))
    return groups


def _run_rank(rank, world, program, im, prompt, timeout, dry) -> dict:
    """This rank's node of ``program`` over an initialised process group: its result dict."""
    rt = NodeRuntime(rank, program, im, prompt, GlooTransport(rank, _program_groups(program, world), timeout),
                     dry=dry)
    for _ in rt.run():
        raise ExecError("blocking transport yielded")
    return rt.result()


def _forked_rank(program, im, prompt, timeout, dry) -> dict:
    """One forked rank of ``run_dist`` (its process group already initialised)."""
    res = _run_rank(dist.get_rank(), dist.get_world_size(), program, im, prompt, timeout, dry)
    dist.barrier()
    return res


def launched_by_torchrun() -> bool:
    """True in a process that ``torchrun`` started (its rendezvous set RANK, WORLD_SIZE,
    MASTER_ADDR and MASTER_PORT)."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def run_dist_rank(program, im, prompt, timeout: float = 30.0, dry: bool = False) -> ExecResult | None:
    """This process is one rank of a ``torchrun`` job (``init_method=env://``: any number of
    hosts): it runs node ``RANK`` of ``program``, and rank 0 gathers every node's result and
    returns the ``ExecResult``; the other ranks return None. ``WORLD_SIZE`` must equal the
    program's node count. The process group is created at the first call and kept for the next
    programs (one per schedule). A failing rank raises ``ExecError`` on every rank (a rank that
    dies makes the others' waits time out after ``timeout`` seconds)."""
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    if world != program.nodes:
        raise ValueError(f"torchrun WORLD_SIZE={world} must equal the cluster's nodes ({program.nodes}): "
                         f"one rank per node")
    program.prompts(prompt)
    if not dist.is_initialized():
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=timeout))
    try:
        res = ("ok", _run_rank(rank, world, program, im, list(prompt), timeout, dry))
    except Exception as exc:      # every rank reaches the gather, so all of them learn of it
        res = ("error", f"{type(exc).__name__}: {exc}")
    got = [None] * world if rank == 0 else None
    dist.gather_object(res, got, dst=0)
    verdict = [None]
    if rank == 0:
        verdict = ["; ".join(f"rank {r}: {g[1]}" for r, g in enumerate(got) if g[0] == "error")]
    dist.broadcast_object_list(verdict, src=0)        # every rank learns whether any failed
    if verdict[0]:
        raise ExecError(f"torch.distributed run failed: {verdict[0]}")
    return collect(program, [g[1] for g in got]) if rank == 0 else None


def run_dist(program, im, prompt, timeout: float = 30.0, dry: bool = False) -> ExecResult:
    """Run ``program`` with one forked gloo rank per node (``sim.ranks.fork_ranks``); raises
    ``ExecError`` if any rank fails or a wait exceeds ``timeout`` seconds (the whole run is
    bounded by a few timeouts)."""
    from mcf_fpga.sim.ranks import fork_ranks
    program.prompts(prompt)          # refused before any work: wrong count or length
    try:
        results = fork_ranks(program.nodes, _forked_rank, (program, im, list(prompt), timeout, dry),
                             timeout=timeout, deadline=4 * timeout)
    except RuntimeError as exc:
        raise ExecError(f"torch.distributed run failed: {str(exc).partition(': ')[2]}") from None
    return collect(program, results)
