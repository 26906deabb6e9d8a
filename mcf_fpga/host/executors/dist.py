"""torch.distributed executor: one process per node, gloo on CPU, real send/recv.

Ranks are forked (``torch.multiprocessing`` start method ``fork``: ~0.6 s for 4 ranks, vs
~8 s with spawn, TOOLCHAIN.md). Every message is a point-to-point ``isend``/``irecv`` whose
tag is the program's message id; a multicast is one send per destination (the NIC's route
replicates in hardware; the byte accounting uses the route tree). Decode all-reduces use
``dist.all_reduce`` over the decode group. Every wait has a timeout: a failing rank makes the
others fail, and the parent kills whatever is left, so a test never hangs.
"""
from __future__ import annotations

import datetime
import os
import socket
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from mcf_fpga.host.program_ops import AllReduce

from .result import ExecResult, collect
from .runtime import ExecError, NodeRuntime

__all__ = ["run_dist"]


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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank, world, port, program, im, prompt, timeout, queue, dry):
    try:
        torch.set_num_threads(1)
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
        dist.init_process_group("gloo", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout))
        groups = {tuple(range(world)): dist.group.WORLD}
        # every all-reduce group of the program (an elastic decode grows it), created by every
        # rank in the same order as gloo requires
        wanted = {tuple(sorted(program.decode_group))}
        wanted |= {tuple(sorted(op.dsts)) for ops in program.ops for op in ops if isinstance(op, AllReduce)}
        for dg in sorted(wanted):
            if dg not in groups:
                groups[dg] = dist.new_group(list(dg))
        rt = NodeRuntime(rank, program, im, prompt, GlooTransport(rank, groups, timeout), dry=dry)
        for _ in rt.run():
            raise ExecError("blocking transport yielded")
        res = rt.result()
        dist.barrier()
        queue.put(("ok", rank, res))
    except BaseException as exc:  # report, never hang the parent
        queue.put(("error", rank, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
    finally:
        try:
            dist.destroy_process_group()
        except Exception:
            pass


def run_dist(program, im, prompt, timeout: float = 30.0, dry: bool = False) -> ExecResult:
    """Run ``program`` with one forked gloo rank per node; raises ``ExecError`` if any rank fails
    or the run exceeds ``timeout`` seconds per wait (the whole run is bounded by a few timeouts)."""
    program.prompts(prompt)          # refused before any work: wrong count or length
    world = program.nodes
    ctx = mp.get_context("fork")
    queue = ctx.SimpleQueue()
    port = _free_port()
    procs = [ctx.Process(target=_rank_main, args=(r, world, port, program, im, list(prompt), timeout,
                                                  queue, dry), daemon=True) for r in range(world)]
    for p in procs:
        p.start()
    results, errors = [], []
    deadline = time.monotonic() + 4 * timeout
    while len(results) + len(errors) < world and time.monotonic() < deadline:
        if not queue.empty():
            status, rank, payload = queue.get()
            (results if status == "ok" else errors).append(payload if status == "ok" else (rank, payload))
            continue
        if errors and all(not p.is_alive() for p in procs):
            break
        time.sleep(0.005)
    for p in procs:
        p.join(timeout=2.0)
        if p.is_alive():
            p.kill()
            p.join(timeout=2.0)
    if errors or len(results) < world:
        msg = "; ".join(f"rank {r}: {e.splitlines()[0]}" for r, e in sorted(errors)) or "ranks timed out"
        raise ExecError(f"torch.distributed run failed: {msg}")
    return collect(program, results)
