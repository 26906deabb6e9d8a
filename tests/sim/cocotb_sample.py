"""cocotb tests (run inside the simulator by tests/sim/test_cocotb.py): the sample top has
the AXI4-Lite register file on s_axi and the AXIS register slice on s_axis -> m_axis.
Stimulus with cocotbext-axi; expected values from the golden register-file twin."""
import random

import cocotb
from cocotbext.axi import (AxiLiteBus, AxiLiteMaster, AxiStreamBus, AxiStreamFrame,
                           AxiStreamSink, AxiStreamSource)

from mcf_fpga.hdl.bus import Resp
from mcf_fpga.sim.cocotb_clock import clock_and_reset
from tests.hdl.bus.test_regfile import GoldenRegFile, REGS

STATUS = 0x0BADCAFE


async def _reset(dut):
    await clock_and_reset(dut)


@cocotb.test()
async def stream_frames_with_backpressure(dut):
    await _reset(dut)
    src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
    snk = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst)
    rng = random.Random(7)
    src.set_pause_generator(iter(lambda: rng.random() < 0.3, None))
    snk.set_pause_generator(iter(lambda: rng.random() < 0.4, None))
    frames = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 60))) for _ in range(30)]
    for f in frames:
        await src.send(AxiStreamFrame(f))
    for f in frames:
        rx = await snk.recv()
        assert bytes(rx.tdata) == f, (rx.tdata, f)
    assert snk.empty()


@cocotb.test()
async def register_file_matches_golden(dut):
    await _reset(dut)
    dut.status.value = STATUS
    axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axi"), dut.clk, dut.rst)
    gold = GoldenRegFile(REGS, 6)
    rng = random.Random(3)
    for _ in range(60):
        addr = rng.choice([0x0, 0x4, 0x8, 0xC, rng.randrange(0, 64) & ~3])
        if rng.random() < 0.5:
            data = rng.getrandbits(32)
            resp = await axil.write(addr, data.to_bytes(4, "little"))
            assert int(resp.resp) == gold.write(addr, data, 0xF), hex(addr)
        else:
            resp = await axil.read(addr, 4)
            want_data, want_resp = gold.read(addr, STATUS)
            assert int(resp.resp) == want_resp, hex(addr)
            if want_resp == Resp.OKAY:
                assert int.from_bytes(resp.data, "little") == want_data, hex(addr)
    assert int(dut.ctrl.value) == gold.value["ctrl"]
