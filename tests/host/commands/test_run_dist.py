"""``mcf run --backend dist``: the golden executor on torch.distributed ranks (one gloo process
per node), forked by the command or started by ``torchrun`` (one rank per process, rank 0 prints),
prints the same JSON as ``--backend golden`` -- tokens, logits check, byte accounting, peak KV --
and refuses a torchrun launch that does not match the cluster."""
import json
import os
import subprocess
import sys

import pytest

from tests.cli_helpers import cli, last_line

ARGS = ["run", "--json", "--layers", "1", "--prompt-len", "24", "--max-new-tokens", "2"]


def _comparable(text):
    out = json.loads(text)
    for k in ("seconds", "backend"):
        out.pop(k)
    for r in out["runs"].values():
        r.pop("sim_seconds")
    return out


@pytest.fixture(scope="module")
def golden():
    rc, out, err = cli(*ARGS, "--backend", "golden")
    assert rc == 0, err
    return _comparable(out)


def test_forked_ranks_print_what_golden_prints(golden):
    rc, out, err = cli(*ARGS, "--backend", "dist")
    assert rc == 0, err
    assert json.loads(out)["backend"] == "dist"
    got = _comparable(out)
    assert got == golden
    assert got["matches_golden"] and set(got["runs"]) == {"mars", "ring"}


def test_torchrun_ranks_print_what_golden_prints_once(golden, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
                        "-m", "mcf_fpga.host.cli", *ARGS, "--backend", "dist", "--nodes", "4"],
                       capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = [l for l in p.stdout.splitlines() if l.strip()]
    assert len(lines) == 1                      # rank 0 alone reports
    assert _comparable(lines[0]) == golden


@pytest.mark.parametrize("env, argv, words", [
    ({"RANK": "0", "WORLD_SIZE": "2"}, ["--backend", "dist", "--nodes", "4"],
     ["--nodes=4", "WORLD_SIZE=2"]),
    ({"RANK": "1", "WORLD_SIZE": "4"}, ["--backend", "golden"], ["torchrun", "--backend golden", "--backend dist"]),
    ({}, ["--backend", "dist", "--numerics", "float"], ["--numerics float needs --backend golden"]),
])
def test_a_launch_that_does_not_fit_is_one_line(monkeypatch, env, argv, words):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    rc, out, err = cli(*ARGS, *argv)
    assert rc == 2 and out == ""
    line = last_line(err)
    for w in words:
        assert w in line, line
