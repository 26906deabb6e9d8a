"""scripts/bench_timing.py's command line: the documented default run (no unit named) parses, every
variant is a valid engine configuration, an unknown name is refused with the list of names."""
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def bt():
    # bench_timing imports its sibling bench_engine by name (a script's directory is on its path):
    # give it the module, without editing the import path
    saved = sys.modules.get("bench_engine")
    sys.modules["bench_engine"] = _load("bench_engine")
    try:
        yield _load("bench_timing")
    finally:
        if saved is None:
            del sys.modules["bench_engine"]
        else:
            sys.modules["bench_engine"] = saved


def test_no_unit_is_the_default_run(bt):
    assert bt.parse_args([]).units == []
    assert bt.parse_args(["engine-cycles", "vector", "--force"]).units == ["engine-cycles", "vector"]


def test_timeout_default_is_the_environment_s(bt, monkeypatch):
    """A Yosys run that times out says "set MCF_SYNTH_TIMEOUT to wait longer": the script's
    default timeout must honour it (it passed 3600 explicitly, so the variable did nothing)."""
    monkeypatch.delenv("MCF_SYNTH_TIMEOUT", raising=False)
    assert bt.parse_args([]).timeout == 3600
    monkeypatch.setenv("MCF_SYNTH_TIMEOUT", "7200")
    assert bt.parse_args(["engine"]).timeout == 7200
    assert bt.parse_args(["engine", "--timeout", "60"]).timeout == 60


def test_unknown_unit_refused(bt, capsys):
    with pytest.raises(SystemExit):
        bt.parse_args(["vector", "vectr"])
    err = capsys.readouterr().err
    assert "unknown unit vectr" in err and "engine-cycles" in err


def test_variants_are_engine_options(bt):
    from mcf_fpga.hdl.compute.engine import ComputeEngine, kr260_ddr_engine
    for name, (base, options) in bt.VARIANTS.items():
        assert base in bt.UNIT_NAMES + ("engine",), name
        eng = ComputeEngine(**{**kr260_ddr_engine(), **options})
        eng._MustUse__silence = True
