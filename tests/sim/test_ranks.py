"""``sim.ranks``: a cluster split over torch.distributed ranks (forked gloo processes) sends the
same frames over every wire, in the same order and at the same cycles, as the one-process
``Cluster``; a rank that dies ends the run on every rank with an error, not a hang; so does one that hangs
outside any collective once another rank failed."""
import os
import random
import signal
import time

import pytest
import torch

from mcf_fpga.sim.ranks import RankCluster, RankGroup, fork_ranks, groups
from mcf_fpga.sim.verilator import Cluster, build

from .sample_top import SampleTop

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")
torch.set_num_threads(1)
CYCLES = 2000


@pytest.fixture(scope="module")
def sample_model():
    return build(SampleTop())


def _prepare(m, i, seed):
    """Node i's reset, back-pressure and queued input frames (the same in every layout)."""
    rng = random.Random(seed * 100 + i)
    m.reset()
    m.sink_backpressure("m_axis", seed=seed + i)
    for _ in range(25):
        m.push("s_axis", bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))), rng.randrange(4))


def _wires(n):
    """A ring plus chords, so that links cross rank boundaries in both directions."""
    return [(i, (i + 1) % n) for i in range(n)]


def _one_process(sample_model, n, seed):
    cl = Cluster(chunk=16)
    nodes = [cl.add(sample_model.new()) for _ in range(n)]
    seen = []
    for i, m in enumerate(nodes):
        _prepare(m, i, seed)
    for k, (i, j) in enumerate(_wires(n)):
        cl.link(nodes[i], "m_axis", nodes[j], "s_axis")
        cl.set_fate(k, lambda f, k=k, m=nodes[i]: seen.append((m.cycle, k, f)) or [f])
    cl.step(CYCLES)
    return seen, {i: (m.cycle, m.pending("s_axis")) for i, m in enumerate(nodes)}


def _rank(sample_model, n, seed, die_at=None):
    group = RankGroup(n)
    models = {i: sample_model.new() for i in group.local}
    for i, m in models.items():
        _prepare(m, i, seed)
    cl = RankCluster(group, models, chunk=16)
    seen = []
    for k, (i, j) in enumerate(_wires(n)):
        cl.link(i, "m_axis", j, "s_axis")
        if i in models:
            cl.set_fate(k, lambda f, k=k, m=models[i]: seen.append((m.cycle, k, f)) or [f])
    for step in range(CYCLES // 80):           # whole chunks: the one-process boundaries
        if die_at is not None and group.rank == 1 and step == die_at:
            os.kill(os.getpid(), signal.SIGKILL)
        cl.step(80)
    return seen, {i: (m.cycle, m.pending("s_axis")) for i, m in models.items()}


@pytest.mark.parametrize("n, world", [(4, 2), (5, 2), (5, 3)])
def test_ranks_forward_the_frames_of_one_process(sample_model, n, world):
    want_seen, want_state = _one_process(sample_model, n, seed=n)
    assert len(want_seen) > 60
    parts = fork_ranks(world, _rank, (sample_model, n, n), timeout=60)
    seen = sorted((s for part, _ in parts for s in part), key=lambda s: (s[0], s[1]))  # stable: frame order
    state = {i: st for _, part in parts for i, st in part.items()}
    assert seen == want_seen
    assert state == want_state


def test_a_dead_rank_ends_the_run_with_an_error(sample_model):
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"rank 1: the rank's process ended with exit code -9") as info:
        fork_ranks(2, _rank, (sample_model, 4, 1, 3), timeout=20)
    assert "rank 0:" in str(info.value)          # the survivor failed too, it did not hang
    assert time.monotonic() - t0 < 60


def test_groups_are_contiguous_and_even():
    assert groups(5, 2) == [(0, 1, 2), (3, 4)]
    assert groups(8, 3) == [(0, 1, 2), (3, 4, 5), (6, 7)]
    assert groups(4, 4) == [(0,), (1,), (2,), (3,)]
    for bad in (0, 5, 1.5):
        with pytest.raises(ValueError, match=r"ranks must be an integer in 1\.\.4"):
            groups(4, bad)


def _hang_rank(seconds):
    """Rank 1 hangs outside any collective (a sleep); rank 0 waits for it at a barrier."""
    import torch.distributed as dist
    if dist.get_rank() == 1:
        time.sleep(seconds)
    dist.barrier()
    return dist.get_rank()


def test_a_rank_hung_outside_a_collective_is_killed_once_another_failed():
    with pytest.raises(RuntimeError, match=r"rank 1: still running 3 s after rank 0 failed") as info:
        fork_ranks(2, _hang_rank, (120,), timeout=3)
    assert "rank 0:" in str(info.value)          # the barrier's timeout


class _SlowToUnpickle:
    """Unpickles by sleeping: the parent rebuilds what follows it in a result only after the rank
    that sent it has exited."""

    def __reduce__(self):
        return (time.sleep, (1.0,))


def _tensor_result():
    return [_SlowToUnpickle(), torch.arange(1000)]


def test_tensor_results_outlive_their_rank():
    """A rank's tensors reach the parent by value: rebuilt a second after the rank exited, they are
    still there (sent as a shared-memory file descriptor, fetching it from the dead rank's fd
    server raised FileNotFoundError here, and ConnectionResetError once in the suite, under load)."""
    res = fork_ranks(2, _tensor_result, timeout=30)
    assert [torch.equal(r[1], torch.arange(1000)) for r in res] == [True, True]
