"""FST waveforms from the tracing Verilator build (``build(..., trace=True)``, ``Model.trace``):
the file read back with pywellen (the reader of the Surfer viewer) has the design's signals by
name, holds exactly the cycles of the window (cycle c at 2c ns with the inputs driven, 2c+1 ns
after the rising edge) with the values the model had, and tracing changes no result."""
import random

import pytest
from hypothesis import given, settings, strategies as st

pywellen = pytest.importorskip("pywellen")

from mcf_fpga.sim.verilator import build                           # noqa: E402
from tests.sim.sample_top import SampleTop                          # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")
CYCLES = 48


@pytest.fixture(scope="module")
def models():
    return build(SampleTop()), build(SampleTop(), trace=True)


def _drive(model, seed):
    """Random status words, AXI-Lite writes and stream frames; returns per cycle the status
    poked during it and ``ctrl`` after its rising edge."""
    rng = random.Random(seed)
    model.reset()
    status, ctrl = [], []
    while len(status) < CYCLES:
        s = rng.getrandbits(32)
        model.poke("status", s)
        if rng.random() < 0.3:
            model.push("s_axis", bytes(rng.getrandbits(8) for _ in range(4 * rng.randint(1, 3))))
        if rng.random() < 0.15:
            before = model.cycle
            model.axil_write(rng.choice([0x0, 0x4, 0x8]), rng.getrandbits(32), 0xF)
            status += [s] * (model.cycle - before)
            ctrl += [None] * (model.cycle - before)      # changed inside the write: not sampled
            continue
        model.step(1)
        status.append(s)
        ctrl.append(model.peek("ctrl"))
    return status[:CYCLES], ctrl[:CYCLES]


@settings(max_examples=8)
@given(seed=st.integers(0, 2**16), start=st.integers(0, CYCLES - 2), span=st.integers(1, CYCLES))
def test_fst_holds_the_window_with_the_models_values(models, tmp_path_factory, seed, start, span):
    plain, traced = models[0].new(), models[1].new()
    stop = min(CYCLES, start + span)
    path = tmp_path_factory.mktemp("fst") / "node0.fst"
    traced.reset()
    traced.trace(path, start, stop)
    status, ctrl = _drive(traced, seed)
    traced.trace_close()
    assert (status, ctrl) == _drive(plain, seed)          # the tracing build computes the same
    wave = pywellen.Waveform(str(path))
    assert wave.file_format == "FST"
    names = {v.full_name: v for v in wave.all_vars()}
    for port in ("clk", "rst", "status", "ctrl", "narrow", "s_axi_awaddr", "s_axis_tdata", "m_axis_tvalid"):
        assert f"TOP.{port}" in names, sorted(names)[:20]
    assert any(n.startswith("TOP.top.") for n in names)  # the design's inner signals too
    sig = {p: names[f"TOP.{p}"].signal for p in ("clk", "status", "ctrl")}
    assert sig["status"].value_at(2 * start - 1) is None if start else True   # nothing before it
    for c in range(start, stop):
        assert sig["clk"].value_at(2 * c) == 0 and sig["clk"].value_at(2 * c + 1) == 1
        assert sig["status"].value_at(2 * c) == status[c]
        if ctrl[c] is not None:
            assert sig["ctrl"].value_at(2 * c + 1) == ctrl[c]


def test_tracing_needs_the_tracing_build_and_a_window(models, tmp_path):
    with pytest.raises(ValueError, match="trace=True"):
        models[0].new().trace(tmp_path / "x.fst")
    traced = models[1].new()
    with pytest.raises(ValueError, match="empty"):
        traced.trace(tmp_path / "x.fst", 5, 5)
    with pytest.raises(OSError, match="cannot open"):
        traced.trace(tmp_path / "no" / "such" / "dir" / "x.fst")
