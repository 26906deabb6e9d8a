"""Run a benchmark or calibration script of the source checkout: ``mcf bench NAME [ARGS ...]``.

``NAME`` is a script of ``scripts/`` without ``bench_`` and ``.py`` (``mcf bench kv`` runs
``scripts/bench_kv.py``; ``mcf bench calibrate_perf`` runs ``scripts/calibrate_perf.py``); the
arguments after it are the script's own (``mcf bench kv -- --help``). ``mcf bench --list`` lists
them with their first docstring line. The script runs in a child Python (this interpreter) from
its own directory's point of view, so its output, last-line figure and exit code are the
script's. The scripts are part of the repository, not of the installed wheel: from a wheel this
command says so.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import mcf_fpga
from mcf_fpga.host.errors import UsageError

NAME = "bench"
HELP = "run a benchmark or calibration script of the checkout (scripts/bench_NAME.py, ...)"

#: scripts that are not benchmarks or calibrations (setup, test runner, helpers)
_NOT_RUNNABLE = {"mutation_profile"}


def scripts_dir() -> Path:
    return Path(mcf_fpga.__file__).resolve().parent.parent / "scripts"


def available() -> dict[str, Path]:
    """NAME -> script, for every runnable Python script of ``scripts/``."""
    d = scripts_dir()
    if not d.is_dir():
        return {}
    out = {}
    for p in sorted(d.glob("*.py")):
        if p.stem.startswith("_") or p.stem in _NOT_RUNNABLE:
            continue
        out[p.stem.removeprefix("bench_")] = p
    return out


def summary(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text(), str(path))) or ""
    return doc.strip().split("\n")[0]


def add_arguments(p):
    p.add_argument("--list", action="store_true", help="list the scripts and what each measures")
    p.add_argument("name", nargs="?", metavar="NAME", help="script name, e.g. kv, paper, calibrate_perf")
    p.add_argument("args", nargs="...", metavar="ARGS", help="the script's own arguments")


def run(args) -> int:
    scripts = available()
    if not scripts:
        raise UsageError(f"no scripts/ directory beside the installed package ({scripts_dir()}): "
                         "the benchmarks ship with the source checkout, not the wheel")
    if args.list or not args.name:
        width = max(map(len, scripts))
        for name, path in scripts.items():
            print(f"{name:<{width}}  {summary(path)}")
        return 0
    if args.name not in scripts:
        raise UsageError(f"NAME {args.name!r} is not a script of {scripts_dir()}: one of "
                         f"{', '.join(scripts)}")
    argv = args.args[1:] if args.args[:1] == ["--"] else args.args
    return subprocess.call([sys.executable, str(scripts[args.name]), *argv])
