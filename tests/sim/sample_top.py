"""The sample top shared by the cocotb and Verilator-backend tests (one build each):
s_axi -> AXI4LiteRegisterFile(REGS); s_axis -> AXISRegisterSlice(32, user 2) -> m_axis."""
from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import AXI4LiteRegisterFile, AXI4LiteSignature, PacketSignature
from mcf_fpga.hdl.bus.axis_register_slice import AXISRegisterSlice

from tests.hdl.bus.test_regfile import REGS


class SampleTop(wiring.Component):
    s_axi: In(AXI4LiteSignature(6, 32))
    s_axis: In(PacketSignature(32, 2))
    m_axis: Out(PacketSignature(32, 2))
    status: In(32)
    ctrl: Out(32)
    narrow: Out(12)

    def elaborate(self, platform):
        m = Module()
        m.submodules.regs = regs = AXI4LiteRegisterFile(REGS, addr_width=6)
        m.submodules.slice = sl = AXISRegisterSlice(32, 2)
        wiring.connect(m, wiring.flipped(self.s_axi), regs.bus)
        wiring.connect(m, wiring.flipped(self.s_axis), sl.s_axis)
        wiring.connect(m, sl.m_axis, wiring.flipped(self.m_axis))
        m.d.comb += [regs.status.eq(self.status), self.ctrl.eq(regs.ctrl),
                     self.narrow.eq(regs.narrow)]
        return m
