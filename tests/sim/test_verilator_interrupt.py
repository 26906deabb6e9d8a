"""An interrupted Verilator build (Ctrl-C while the compilers run) leaves nothing behind: no
work directory in the cache and no process of the compiler's group (make, g++ ...)."""
import os
import signal
import threading
import time

import pytest

import mcf_fpga.sim.verilator as vl
from tests.sim.fake_verilator import install

FAKE = """#!/bin/sh
# a stand-in for verilator --build: a grandchild (the "compiler") and a long wait
sleep 300 &
echo $! >> "$PIDS"
echo $$ >> "$PIDS"
: > "$PIDS.ready"
wait
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return not any(l.startswith("State:") and ("Z" in l or "X" in l) for l in f)
    except FileNotFoundError:
        return False


def _interrupt_when(path, timeout=60.0):
    """SIGINT this process once ``path`` exists (the fake compiler is running)."""
    def go():
        t0 = time.monotonic()
        while not os.path.exists(path) and time.monotonic() - t0 < timeout:
            time.sleep(0.02)
        # to the main thread itself: a process-directed SIGINT may be taken by this thread, and
        # the main thread's blocking pipe read would then not return until the child ends
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
    threading.Thread(target=go, daemon=True).start()


@pytest.fixture
def fake_verilator(tmp_path, monkeypatch):
    pids = tmp_path / "pids"
    install(tmp_path, monkeypatch, FAKE, PIDS=str(pids))
    return pids


def _wait_dead(pids, timeout=10.0):
    t0 = time.monotonic()
    while any(_alive(p) for p in pids) and time.monotonic() - t0 < timeout:
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def test_interrupted_build_removes_work_dir_and_ends_compilers(fake_verilator):
    pids = fake_verilator
    _interrupt_when(f"{pids}.ready")
    with pytest.raises(KeyboardInterrupt):
        vl.build_from_sources("module top(); endmodule\n", "// harness\n")
    started = [int(x) for x in pids.read_text().split()]
    assert len(started) == 2
    assert _wait_dead(started) == [], "a compiler process survived the interrupted build"
    root = vl.cache_root()
    left = [p.name for p in root.iterdir() if not p.name.endswith(".lock")]
    assert left == [], f"the interrupted build left {left} in the cache"


def test_failed_build_removes_work_dir(fake_verilator, monkeypatch, tmp_path):
    bindir = tmp_path / "bin"
    (bindir / "verilator").write_text("#!/bin/sh\necho '%Error: fake failure' >&2\nexit 3\n")
    with pytest.raises(vl.VerilatorBuildError, match=r"(?s)exit 3.*removed.*fake failure"):
        vl.build_from_sources("module top(); endmodule\n", "// harness\n")
    assert [p.name for p in vl.cache_root().iterdir() if not p.name.endswith(".lock")] == []


def test_run_process_group_reports_output():
    rc, out = vl.run_process_group(["sh", "-c", "echo hi; echo err >&2; exit 4"])
    assert rc == 4 and "hi" in out and "err" in out
