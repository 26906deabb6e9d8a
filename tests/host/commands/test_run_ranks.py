"""``mcf run --backend rtl`` split over processes and traced: ``--sim-workers K`` (K local
torch.distributed ranks) and a ``torchrun`` launch (one rank per process, rank 0 prints) give the
JSON of the one-process run, byte for byte but the wall times; ``--trace DIR --trace-window A:B``
writes one FST per node and schedule that a waveform reader opens with the node's signals."""
import json
import os
import subprocess
import sys

import pytest

from tests.cli_helpers import cli, last_line

ARGS = ["run", "--json", "--layers", "1", "--prompt-len", "32", "--max-new-tokens", "2", "--schedules", "mars"]
pytestmark = pytest.mark.slow


def _comparable(text):
    out = json.loads(text)
    out.pop("seconds")
    for r in out["runs"].values():
        r.pop("sim_seconds")
    return out


@pytest.fixture(scope="module")
def one_process():
    rc, out, err = cli(*ARGS)
    assert rc == 0, err
    return _comparable(out)


def test_sim_workers_print_the_one_process_result(one_process):
    rc, out, err = cli(*ARGS, "--sim-workers", "2")
    assert rc == 0, err
    got = _comparable(out)
    assert got == one_process
    assert got["matches_golden"] and got["ttft_cycles"] > 0


def test_torchrun_ranks_print_the_one_process_result_once(one_process, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                        "-m", "mcf_fpga.host.cli", *ARGS, "--no-progress"],
                       capture_output=True, text=True, timeout=1200, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = [l for l in p.stdout.splitlines() if l.strip()]
    assert len(lines) == 1
    assert _comparable(lines[0]) == one_process


@pytest.mark.extended
def test_trace_writes_one_waveform_per_node(tmp_path):
    """``mcf run --trace`` on ranks: one FST per node with the window asked for. Extended tier: the
    node's FST-tracing build is a Verilator build of its own (about 6 minutes of the suite); the
    tracing itself (window, values, the model's own signals) is tests/sim/test_verilator_trace.py's."""
    pywellen = pytest.importorskip("pywellen")
    rc, out, err = cli(*ARGS, "--trace", str(tmp_path), "--trace-window", "100:600")
    assert rc == 0, err
    files = sorted(p.name for p in (tmp_path / "mars").iterdir())
    assert files == [f"node{i}.fst" for i in range(4)]
    wave = pywellen.Waveform(str(tmp_path / "mars" / "node0.fst"))
    names = {v.full_name: v for v in wave.all_vars()}
    for port in ("clk", "rst", "m_axis_eth1_tvalid", "s_axis_eth2_tdata", "s_axi_awaddr", "irq"):
        assert f"TOP.{port}" in names, sorted(names)[:30]
    clk = names["TOP.clk"].signal
    assert clk.value_at(199) is None                      # nothing before the window
    assert clk.value_at(200) == 0 and clk.value_at(201) == 1 and clk.value_at(1198) == 0


@pytest.mark.parametrize("argv, words", [
    (["--sim-workers", "5"], ["--sim-workers=5", "1..4"]),
    (["--backend", "golden", "--sim-workers", "2"], ["--sim-workers needs --backend rtl"]),
    (["--backend", "golden", "--trace", "x"], ["--trace needs --backend rtl"]),
    (["--trace-window", "10:20"], ["--trace-window needs --trace"]),
    (["--trace", "x", "--trace-window", "20:10"], ["--trace-window", "0 <= A < B"]),
])
def test_bad_worker_and_trace_options_are_one_line(argv, words):
    rc, out, err = cli(*ARGS, *argv)
    assert rc == 2 and out == ""
    for w in words:
        assert w in last_line(err), last_line(err)
