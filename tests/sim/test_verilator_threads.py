"""``sim.verilator.Cluster(threads=K)``: nodes stepped in a thread pool between frame exchanges.

The results do not depend on K: the same frames on every wire in the same order, the same cycle
counts, logits and tokens (a ring of sample tops, and 4- and 8-node micro clusters running a
MARS program through ``run_rtl``, also split over 2 torch.distributed ranks); an error raised stepping a node in a pool thread reaches the
caller; an interrupted step ends cleanly, and a step that hangs does not hang the caller."""
import random
import signal
import threading
import time

import pytest
import torch

from mcf_fpga.sim.verilator import Cluster, build, check_threads

from .sample_top import SampleTop

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def sample_model():
    return build(SampleTop())


def _ring(sample_model, n, threads, seed=5):
    """``n`` sample tops (a register slice each) in a ring, frames queued on every input, random
    back-pressure; returns the cluster and the list its fates record ``(link, frame)`` into."""
    cl = Cluster(chunk=16, threads=threads)
    rng = random.Random(seed)
    nodes = [cl.add(sample_model.new()) for _ in range(n)]
    seen = []
    for i, m in enumerate(nodes):
        m.reset()
        m.sink_backpressure("m_axis", seed=seed + i)
        for _ in range(30):
            m.push("s_axis", bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))), rng.randrange(4))
        k = cl.link(m, "m_axis", nodes[(i + 1) % n], "s_axis")
        cl.set_fate(k, lambda f, k=k: seen.append((k, f)) or [f])
    return cl, nodes, seen


def _ring_outcome(cl, nodes, seen):
    cl.step(3000)
    return seen, [m.cycle for m in nodes], [m.pending("s_axis") for m in nodes]


@pytest.mark.parametrize("n", [3, 5])
def test_ring_frames_identical_for_every_thread_count(sample_model, n):
    outcomes = {t: _ring_outcome(*_ring(sample_model, n, t)) for t in (1, 2, 3)}
    seen, cycles, _ = outcomes[1]
    assert len(seen) > 100 and cycles == [3000] * n
    assert outcomes[2] == outcomes[1] and outcomes[3] == outcomes[1]


def test_threads_refused_with_the_limit():
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match=r"Cluster threads must be an integer >= 1, got"):
            Cluster(threads=bad)
    with pytest.raises(ValueError, match=r"SimCluster threads must be an integer in 1\.\.4 \(one node per thread"):
        from mcf_fpga.sim.cluster import SimCluster
        SimCluster(4, threads=5)               # refused before any build
    with pytest.raises(ValueError, match=r"SimBoardCluster threads must be an integer in 1\.\.2"):
        from mcf_fpga.sim.boards import SimBoardCluster
        SimBoardCluster(2, threads=3)
    assert check_threads(None) == 1 and check_threads(3, 4) == 3


def _two_node_cluster(sample_model, threads=2, grace=10.0):
    cl = Cluster(chunk=16, threads=threads, grace=grace)
    nodes = [cl.add(sample_model.new()) for _ in range(2)]
    for m in nodes:
        m.reset()
    return cl, nodes


def _in_two_threads(nodes, in_pool):
    """Make the next chunk step the two nodes in two threads (each waits for the other to have
    started), the one in the pool thread running ``in_pool(real_step, n)``; returns the names
    of the threads that stepped each node and a function that restores the real steps."""
    meet = threading.Barrier(2, timeout=30)
    where = {}

    def wrap(i, m):
        real = m.step

        def step(n):
            where[i] = threading.current_thread().name
            meet.wait()
            if threading.current_thread() is threading.main_thread():
                return real(n)
            return in_pool(real, n)
        return step
    for i, m in enumerate(nodes):
        m.step = wrap(i, m)

    def restore():
        for m in nodes:
            del m.step
    return where, restore


def test_node_steps_run_at_once(sample_model):
    """The C step releases the GIL: two nodes' steps are in flight at the same time (their spans
    overlap; were the GIL held, the second could only start once the first returned)."""
    cl, nodes = _two_node_cluster(sample_model)
    cl.chunk = 300_000
    meet, spans = threading.Barrier(2, timeout=30), {}

    def timed(i, real):
        def step(n):
            meet.wait()                        # one node per thread
            t0 = time.perf_counter()
            real(n)
            spans[i] = (t0, time.perf_counter())
        return step
    for i, m in enumerate(nodes):
        m.step = timed(i, m.step)
    cl.step(300_000)
    for m in nodes:
        del m.step
    assert nodes[0].cycle == nodes[1].cycle == 300_000
    (a0, a1), (b0, b1) = spans[0], spans[1]
    assert min(a1, b1) > max(a0, b0), f"the steps ran one after the other: {spans}"
    cl.close()


def test_worker_error_reaches_the_caller(sample_model):
    cl, nodes = _two_node_cluster(sample_model)
    cl.step(32)                                # the pool is up

    def broken(real, n):
        raise OSError("model exploded")
    where, restore = _in_two_threads(nodes, broken)
    with pytest.raises(OSError, match="model exploded") as info:
        cl.step(16)
    bad = next(i for i, name in where.items() if name != "MainThread")
    assert where[bad] == "mcf-cluster-1"
    assert any(f"cluster node {bad} in thread mcf-cluster-1" in note for note in info.value.__notes__)
    assert nodes[1 - bad].cycle == 48          # the caller's node finished its chunk
    restore()
    cl.step(16)                                # the cluster goes on
    assert nodes[1 - bad].cycle == 64 and nodes[bad].cycle == 48
    cl.close()


def _interrupt_main_when(event):
    def go():
        event.wait(30)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
    threading.Thread(target=go, daemon=True).start()


def test_interrupted_step_waits_for_the_pool_and_goes_on(sample_model):
    cl, nodes = _two_node_cluster(sample_model)
    started, finished = threading.Event(), threading.Event()

    def slow(real, n):
        started.set()
        time.sleep(0.5)
        real(n)
        finished.set()
    _, restore = _in_two_threads(nodes, slow)
    _interrupt_main_when(started)
    with pytest.raises(KeyboardInterrupt):
        cl.step(16)
    assert finished.is_set(), "step returned while a pool thread was still stepping a node"
    restore()
    before = [m.cycle for m in nodes]          # the caller's node may or may not have stepped
    cl.step(16)
    assert [m.cycle for m in nodes] == [c + 16 for c in before]
    cl.close()


def test_hung_step_does_not_hang_the_caller(sample_model):
    cl, nodes = _two_node_cluster(sample_model, grace=0.3)
    started, release = threading.Event(), threading.Event()

    def hung(real, n):
        started.set()
        release.wait(60)
    _, restore = _in_two_threads(nodes, hung)
    _interrupt_main_when(started)
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        cl.step(16)
    assert time.monotonic() - t0 < 10
    pool = cl._pool
    assert all(t.daemon for t in pool.threads)      # it cannot keep the process alive
    with pytest.raises(RuntimeError, match="still running 0.3 s after the interruption"):
        cl.step(16)
    release.set()
    cl.close()
    pool.threads[0].join(10)
    assert not pool.threads[0].is_alive()
    restore()


def test_pool_threads_end_with_the_cluster(sample_model):
    cl, _ = _two_node_cluster(sample_model)
    cl.step(16)
    t = cl._pool.threads[0]
    del cl
    import gc
    gc.collect()
    t.join(10)
    assert not t.is_alive()


# ---------------------------------------------------------------- micro clusters through run_rtl

def _program(nodes):
    """A MARS program (16 prompt tokens per node, 2 decode tokens, 1 layer of the micro model),
    its integer model and prompt."""
    from mcf_fpga.golden.config import get_config
    from mcf_fpga.golden.int_model import IntModel, quantize_model
    from mcf_fpga.golden.model import random_weights
    from mcf_fpga.host.scenario import build_programs
    cfg = get_config("micro").replace(num_layers=1)
    im = IntModel(quantize_model(random_weights(cfg, seed=3), block=16))
    S = 16 * nodes
    prog = build_programs(cfg, nodes=nodes, topology="ring", prompt_len=S, max_new_tokens=2, schedules=["mars"],
                          chunk=16, block=16)[0]["mars"]
    prompt = torch.randint(0, cfg.vocab_size, (S,), generator=torch.Generator().manual_seed(nodes)).tolist()
    return prog, im, prompt


def test_run_rtl_refuses_bad_threads_before_work():
    from mcf_fpga.host.executors.rtl import run_rtl
    prog, im, prompt = _program(2)
    with pytest.raises(ValueError, match=r"run_rtl threads must be an integer in 1\.\.2 \(one node per thread"):
        run_rtl(prog, im, prompt, threads=3)
    with pytest.raises(ValueError, match=r"the given cluster steps its nodes with its own"):
        run_rtl(prog, im, prompt, threads=1, cluster=object())


def _run(nodes, wires, threads=None, ranks=None):
    """``run_rtl`` of ``_program(nodes)``; every frame each link carried is appended, in order,
    to ``wires/link<i>_<p>`` (the fate runs in whichever process simulates node i)."""
    from mcf_fpga.host.executors.rtl import run_rtl
    prog, im, prompt = _program(nodes)
    wires.mkdir()

    def record(i, p, frame):
        with open(wires / f"link{i}_{p}", "ab") as f:
            f.write(len(frame).to_bytes(4, "little") + frame)
        return [frame]
    r = run_rtl(prog, im, prompt, threads=threads, ranks=ranks, link_fate=record)
    assert torch.equal(r.logits, im.forward(torch.tensor(prompt)))
    return r, {f.name: f.read_bytes() for f in sorted(wires.iterdir())}


@pytest.mark.slow
@pytest.mark.parametrize("nodes", [4, 8])
def test_micro_cluster_bit_identical_with_threads_and_ranks(nodes, tmp_path):
    """1 thread, 2 threads, and 2 torch.distributed ranks (forked gloo processes, 2 and 2 or
    4 and 4 nodes each): the same frames on every wire and the same results."""
    (r1, w1), (r2, w2), (r3, w3) = (_run(nodes, tmp_path / "one"), _run(nodes, tmp_path / "threads", threads=2),
                                    _run(nodes, tmp_path / "ranks", ranks=2))
    assert len(w1) == 2 * nodes and sum(map(len, w1.values())) > 0
    assert w2 == w1, "2 threads: the wires carried different frames"
    assert w3 == w1, "2 ranks: the wires carried different frames"
    for r in (r2, r3):
        assert torch.equal(r1.logits, r.logits) and r1.tokens == r.tokens
        for field in ("ttft_cycles", "decode_cycles", "prefill_cycles", "cycles_simulated", "wire_bytes", "rx_log",
                      "issued", "events", "nic_counters", "peak_slots", "layout", "req_tokens", "host_interactions",
                      "host_rates", "step_versions"):
            assert getattr(r1, field) == getattr(r, field), field
    assert r1.decode_cycles > 0 and r1.cycles_simulated > 0


def test_run_rtl_refuses_bad_ranks_before_work():
    from mcf_fpga.host.executors.rtl import run_rtl
    prog, im, prompt = _program(2)
    with pytest.raises(ValueError, match=r"ranks must be an integer in 1\.\.2 \(one node per rank"):
        run_rtl(prog, im, prompt, ranks=3)
    with pytest.raises(ValueError, match=r"a given cluster or make_hw runs in one process"):
        run_rtl(prog, im, prompt, ranks=2, cluster=object())
    with pytest.raises(ValueError, match=r"trace must be \(directory, start, stop\)"):
        run_rtl(prog, im, prompt, trace="dir")


@pytest.mark.slow
def test_a_killed_rank_ends_the_run_on_every_rank(tmp_path):
    """Node 2's process (rank 1 of 2) dies in the middle of the prefill: the run ends with an
    ExecError naming both ranks -- rank 0's collective fails when its peer is gone -- well within
    the rank timeout, not a hang."""
    import os
    import signal
    import time
    from mcf_fpga.host.executors.rtl import run_rtl
    from mcf_fpga.host.executors.runtime import ExecError
    prog, im, prompt = _program(4)
    sent = [0]

    def die_midway(i, p, frame):
        if i == 2:                              # node 2 is simulated by rank 1
            sent[0] += 1
        if sent[0] == 20:                       # in rank 1's process: node 2's 20th frame
            os.kill(os.getpid(), signal.SIGKILL)
        return [frame]
    t0 = time.monotonic()
    with pytest.raises(ExecError) as info:
        run_rtl(prog, im, prompt, ranks=2, link_fate=die_midway, rank_timeout=60)
    assert "rank 1: the rank's process ended with exit code -9" in str(info.value)
    assert "rank 0:" in str(info.value)
    assert time.monotonic() - t0 < 120
