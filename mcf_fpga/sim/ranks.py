"""A simulated cluster spread over torch.distributed ranks: each rank steps a group of the nodes.

``RankGroup`` says which nodes a rank simulates (contiguous groups, as even as ``n`` allows:
``groups(n, world)``) and carries the collectives the ranks need: ``gather`` (every rank's
object, on every rank), ``all_true`` / ``total`` / ``largest`` on small values and
``all_in_order`` (a short-circuit ``all`` over every rank's nodes in node order);
``OneProcess`` is the same for a cluster in one process (every node local, no collective). It works over an
initialised gloo process group (``init_method=env://`` under ``torchrun``, or the local ranks of
``fork_ranks``); every collective has the process group's timeout, so a rank that dies makes the
others fail with an error, not hang.

``RankCluster`` is ``sim.verilator.Cluster`` for one rank: it holds the rank's models only and
the whole cluster's links by node index. ``step(n)`` advances the local nodes chunk by chunk
(in ``threads`` threads, as ``Cluster`` does) and, after every chunk, forwards every frame that
left a local node: to a local destination directly, to a remote one through one ``gather`` of
the chunk's outgoing frames; each rank then pushes what reached its nodes in link order, then
frame order. That is ``Cluster.step``'s order, and a frame still waits exactly one chunk on the
wire (the modelled wire latency is the look-ahead that makes the split exact), so the frames on
every wire, their order, every cycle count and every memory image are those of the one-process
cluster whatever the number of ranks.
"""
from __future__ import annotations

import datetime
import os
import pickle
import socket
import time
import traceback

__all__ = ["RankGroup", "OneProcess", "RankCluster", "groups", "fork_ranks"]


def _pickle_data_consts():
    """Ranks exchange what host drivers keep, which holds ``amaranth.lib.data.Const`` values (an
    instruction's Meta field): pickle them as (layout, bits), since the default round trip
    recurses in ``Const.__getattr__`` before the object has its state."""
    import copyreg

    from amaranth.lib import data
    copyreg.pickle(data.Const, lambda c: (data.Const, (c.shape(), c.as_bits())))


def groups(n: int, world: int) -> list[tuple[int, ...]]:
    """Nodes ``0..n-1`` in ``world`` contiguous groups, sizes differing by at most one (the first
    ``n % world`` one larger); every rank gets at least one node."""
    if not isinstance(world, int) or not 1 <= world <= n:
        raise ValueError(f"ranks must be an integer in 1..{n} (one node per rank at most), got {world!r}")
    q, r = divmod(n, world)
    out, start = [], 0
    for g in range(world):
        size = q + (g < r)
        out.append(tuple(range(start, start + size)))
        start += size
    return out


class RankGroup:
    """This rank's share of an ``n``-node cluster over the initialised default process group."""

    def __init__(self, n: int):
        import torch.distributed as dist
        _pickle_data_consts()
        if not dist.is_initialized():
            raise RuntimeError("RankGroup needs an initialised torch.distributed process group (gloo)")
        self._dist = dist
        self.world, self.rank = dist.get_world_size(), dist.get_rank()
        self.groups = groups(n, self.world)
        self.n = n
        self.owner = [g for g, nodes in enumerate(self.groups) for _ in nodes]
        self.local = self.groups[self.rank]

    def gather(self, obj) -> list:
        """Every rank's ``obj``, in rank order, on every rank."""
        out = [None] * self.world
        self._dist.all_gather_object(out, obj)
        return out

    def all_true(self, flag: bool) -> bool:
        return all(self.gather(bool(flag)))

    def total(self, value: int) -> int:
        return sum(self.gather(int(value)))

    def largest(self, value: int) -> int:
        return max(self.gather(int(value)))

    def all_in_order(self, items, pred) -> bool:
        """``all(pred(x) for x in every rank's items)``, the items in rank order, evaluated as that
        expression is in one process: ``pred`` runs on a rank's items only if every item of the
        ranks before held, and stops at the first that fails. For a ``pred`` with side effects
        (an AXI-Lite read steps its node) the same nodes are touched as in one process. One
        collective per rank."""
        for r in range(self.world):
            ok = all(pred(x) for x in items) if r == self.rank else None
            if not self.gather(ok)[r]:
                return False
        return True


class OneProcess(RankGroup):
    """Every node in this process: the collectives are the identity (no torch.distributed)."""

    def __init__(self, n: int):
        self.world, self.rank, self.n = 1, 0, n
        self.groups = [tuple(range(n))]
        self.owner = [0] * n
        self.local = self.groups[0]

    def gather(self, obj) -> list:
        return [obj]


class RankCluster:
    """See the module docstring. ``models``: this rank's node index -> ``Model``."""

    def __init__(self, group: RankGroup, models: dict, chunk: int = 64, threads: int | None = None):
        from .verilator import Cluster
        if sorted(models) != list(group.local):
            raise ValueError(f"rank {group.rank} simulates nodes {list(group.local)}, got models for {sorted(models)}")
        self.group, self.models, self.chunk = group, dict(models), chunk
        self._step = Cluster(chunk, threads=threads)     # steps the local nodes only
        for i in group.local:
            self._step.add(models[i])
        self.links, self.fates = [], []

    @property
    def threads(self) -> int:
        return self._step.threads

    def link(self, i: int, a_port: str, j: int, b_port: str) -> int:
        """Frames leaving ``a_port`` of node ``i`` enter ``b_port`` of node ``j`` (either may be
        on another rank); returns the link's index. Every rank adds the same links in the same
        order."""
        if i in self.models:
            self.models[i]._snk(a_port)
        if j in self.models and b_port not in self.models[j]._srcs:
            raise ValueError(f"no AXI-Stream input port {b_port!r} on node {j}")
        self.links.append((i, a_port, j, b_port))
        self.fates.append(None)
        return len(self.links) - 1

    def set_fate(self, k: int, fate=None):
        """``fate(frame) -> [frames]`` on link ``k``; it runs on the rank of the link's source."""
        self.fates[k] = fate

    def step(self, n: int):
        done = 0
        while done < n:
            k = min(self.chunk, n - done)
            self._step._advance(k)
            self._exchange()
            done += k

    def _exchange(self):
        local, remote = self.models, {}
        arrived = {}
        for idx, ((i, ap, j, _bp), fate) in enumerate(zip(self.links, self.fates)):
            if i not in local:
                continue
            frames = []
            for frame, user in local[i].pull_all(ap, with_user=True):
                frames += [(f, user) for f in (fate(frame) if fate else [frame])]
            if not frames:
                continue
            (arrived if j in local else remote)[idx] = frames
        if self.group.world > 1:
            for sent in self.group.gather(remote):
                for idx, frames in sent.items():
                    if self.links[idx][2] in local:
                        arrived[idx] = frames
        for idx in sorted(arrived):
            _i, _ap, j, bp = self.links[idx]
            for f, user in arrived[idx]:
                local[j].push(bp, f, user)

    def close(self):
        self._step.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank, world, port, fn, args, queue, timeout):
    import gc
    import torch
    import torch.distributed as dist
    gc.freeze()         # the parent's objects stay out of this rank's collections (no inherited __del__)
    try:
        torch.set_num_threads(1)
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
        dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=timeout))
        # pickled here, by value: through torch.multiprocessing's queue a tensor would go as a file
        # descriptor that the parent fetches from this process's fd server, which is gone once
        # this rank has exited (ConnectionResetError in the parent, seen under load)
        queue.put(("ok", rank, pickle.dumps(fn(*args))))
    except BaseException as exc:          # report, never hang the parent
        queue.put(("error", rank, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
    finally:
        try:
            dist.destroy_process_group()
        except Exception:
            pass


def fork_ranks(world: int, fn, args=(), timeout: float = 120.0, deadline: float | None = None) -> list:
    """Run ``fn(*args)`` in ``world`` forked processes, each a gloo rank of one process group
    (``init_method=env://`` on a free local port, collectives time out after ``timeout`` s);
    returns their results in rank order. A rank that fails or dies ends the run: the others'
    collectives fail, and ``RuntimeError`` names every failed rank. A rank still running
    ``timeout`` s after another failed (hung outside any collective, where no timeout reaches it)
    is killed and named too. ``deadline``: seconds after which ranks still running are killed and
    reported (None: no limit beyond the timeouts)."""
    import torch.multiprocessing as mp
    ctx = mp.get_context("fork")
    queue = ctx.SimpleQueue()
    port = _free_port()
    procs = [ctx.Process(target=_rank_main, args=(r, world, port, fn, args, queue, timeout), daemon=True)
             for r in range(world)]
    for p in procs:
        p.start()
    results, errors = {}, {}
    end = None if deadline is None else time.monotonic() + deadline
    failed_at = None                        # (when, rank) of the first failure
    while len(results) + len(errors) < world:
        late = None
        if end is not None and time.monotonic() > end:
            late = f"still running after {deadline:g} s"
        elif failed_at is not None and time.monotonic() > failed_at[0] + timeout:
            late = f"still running {timeout:g} s after rank {failed_at[1]} failed"
        if late is not None:
            for r in range(world):
                if r not in results and r not in errors:
                    errors[r] = late
            break
        if errors and failed_at is None:
            failed_at = (time.monotonic(), min(errors))
        if not queue.empty():
            status, rank, payload = queue.get()
            if status == "ok":
                results[rank] = pickle.loads(payload)
            else:
                errors[rank] = payload
            continue
        dead = [r for r, p in enumerate(procs) if not p.is_alive() and r not in results and r not in errors]
        if dead and queue.empty():
            time.sleep(0.2)                 # its last message may still be in the pipe
            if queue.empty():
                for r in dead:
                    errors[r] = f"the rank's process ended with exit code {procs[r].exitcode} and no result"
        time.sleep(0.005)
    for p in procs:
        p.join(timeout=5.0)
        if p.is_alive():
            p.kill()
            p.join(timeout=2.0)
    if errors:
        raise RuntimeError("simulation ranks failed: " + "; ".join(
            f"rank {r}: {e.strip().splitlines()[0]}" for r, e in sorted(errors.items())))
    return [results[r] for r in range(world)]
