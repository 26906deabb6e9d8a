"""The distribution as a user installs it: a wheel built from this tree (not the editable
install the suite runs on) carries its package data, installs in a fresh venv and runs ``mcf``;
the board side installs on Python 3.10 and 3.12 with the core dependencies only (no torch).

The wheel's own dependencies come from the project venv (a ``.pth`` path to its site-packages,
which does not load the editable install's finder), so the main check needs no network. The
board-side check installs numpy and amaranth from PyPI into each Python found on the machine.
"""
import email.parser
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = ["mcf_fpga/sim/verilator/mcf_harness.h", "mcf_fpga/sim/verilator_waivers.vlt",
        "mcf_fpga/boards/kr260-facts.md"]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    # a copy of the source tree (tracked and new files, not ignored ones): the build must not
    # write into the working copy
    src = out / "src"
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        if (REPO / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, src / rel)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(out), str(src)], check=True, capture_output=True, text=True)
    (whl,) = out.glob("mcf_fpga-*.whl")
    return whl


def _metadata(whl):
    with zipfile.ZipFile(whl) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(z.read(name).decode()), z.namelist()


def test_wheel_carries_package_data_and_the_mcf_command(wheel):
    meta, names = _metadata(wheel)
    for f in DATA:
        assert f in names, f"{f} missing from the wheel"
    assert not any(n.split("/")[0] in ("hdl", "golden", "host", "boards", "spec", "tests", "scripts")
                   for n in names), "only the mcf_fpga package may be top level"
    assert meta["Name"] == "mcf-fpga"
    assert meta["Requires-Python"] == "<3.13,>=3.10" or meta["Requires-Python"] == ">=3.10,<3.13"
    with zipfile.ZipFile(wheel) as z:
        ep = z.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "mcf = mcf_fpga.host.cli:main" in ep


def test_core_dependencies_leave_torch_to_the_sim_extra(wheel):
    meta, _ = _metadata(wheel)
    reqs = meta.get_all("Requires-Dist")
    core = [r for r in reqs if "extra ==" not in r]
    assert not any(r.startswith(("torch", "pytest", "hypothesis", "matplotlib", "transformers"))
                   for r in core), core
    torch = [r for r in reqs if r.startswith("torch")]
    assert torch and all('extra == "sim"' in r for r in torch), torch
    assert any(r.startswith("safetensors") and 'extra == "sim"' in r for r in reqs)
    assert any(r.startswith("matplotlib") and 'extra == "plots"' in r for r in reqs)


def test_wheel_installs_and_runs(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "_mcf_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", str(wheel)],
                   check=True, capture_output=True, text=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MCF_TRACEBACK")}
    mcf = env_dir / "bin" / "mcf"

    def run(*argv):
        return subprocess.run([str(mcf), *argv], cwd=tmp_path, env=env, capture_output=True, text=True)

    where = subprocess.run([str(py), "-c", "import mcf_fpga, importlib.resources as r; print(mcf_fpga.__file__); "
                            "print(r.files('mcf_fpga.sim.verilator').joinpath('mcf_harness.h').is_file())"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout.split()
    assert where[0].startswith(str(env_dir)) and where[1] == "True", where
    r = run("--version")
    assert r.returncode == 0 and r.stdout.startswith("mcf "), r
    r = run("verilog", "axis_register_slice", "--param", "data_width=16")
    assert r.returncode == 0 and "module axis_register_slice" in r.stdout, r.stderr
    r = run("run", "--backend", "golden", "--model", "micro", "--layers", "1", "--nodes", "2",
            "--prompt-len", "16", "--max-new-tokens", "2", "--schedules", "mars", "--json")
    assert r.returncode == 0, r.stderr
    r = run("run", "--backend", "golden", "--checkpoint", str(tmp_path / "no-such-dir"))   # bad input
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert "no-such-dir" in r.stderr
    r = run("run", "--backend", "golden", "--model", "micro", "--layers", "1", "--nodes", "2",
            "--prompt-len", "16", "--max-new-tokens", "2", "--schedules", "mars", "--json")
    import json
    out = json.loads(r.stdout)
    assert out["matches_golden"] and all(rec["matches_golden"] for rec in out["runs"].values()), out


def _pythons():
    """Python 3.10 and 3.12 interpreters on this machine (PATH or pyenv)."""
    found = {}
    for v in ("3.10", "3.12"):
        cands = [shutil.which(f"python{v}")]
        cands += sorted(Path(os.path.expanduser("~/.pyenv/versions")).glob(f"{v}.*/bin/python{v}"))
        for c in cands:
            if c and subprocess.run([str(c), "-c", "import venv"], capture_output=True).returncode == 0:
                found[v] = str(c)
                break
    return found


@pytest.mark.parametrize("version", ["3.10", "3.12"])
def test_board_side_installs_without_torch(wheel, tmp_path, version):
    py_base = _pythons().get(version)
    if py_base is None:     # the project itself needs only 3.11 (setup.sh); other Pythons are the
        # machine's: without one there is nothing to install into, which is not a defect of the wheel
        pytest.skip(f"no Python {version} on this machine (PATH or ~/.pyenv)")
    env_dir = tmp_path / "venv"
    subprocess.run([py_base, "-m", "venv", str(env_dir)], check=True, capture_output=True)
    py = str(env_dir / "bin" / "python")
    r = subprocess.run([py, "-m", "pip", "install", "-q", str(wheel)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    probe = ("import importlib.util, mcf_fpga.host.board.board_server, mcf_fpga.host.board.remote; "
             "print(importlib.util.find_spec('torch') is None)")
    r = subprocess.run([py, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "True", r.stderr[-2000:]
    for argv in (["--version"], ["serve-board", "--help"]):
        r = subprocess.run([str(env_dir / "bin" / "mcf"), *argv], cwd=tmp_path, env=env, capture_output=True,
                           text=True)
        assert r.returncode == 0, (argv, r.stderr[-2000:])
