"""cocotb test of hdl.eth.RGMIIMac against cocotbext-eth's RGMII PHY models (independent party).

TX: frames in through s_axis (cocotbext-axi AxiStreamSource) must arrive at
cocotbext-eth's RgmiiSink with preamble/SFD, padding to 60 bytes and a correct
FCS. RX: frames from RgmiiSource (good, bad FCS, runt) must leave m_axis with
the FCS stripped and tuser = 1 on the last beat exactly for the bad ones.
"""
import random
import zlib

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Timer, with_timeout
from cocotbext.axi import AxiStreamBus, AxiStreamSource, AxiStreamSink, AxiStreamFrame
from cocotbext.eth import GmiiFrame, RgmiiSource, RgmiiSink


async def setup(dut):
    cocotb.start_soon(Clock(dut.tx_clk, 8, unit="ns").start())
    cocotb.start_soon(Clock(dut.rxc, 8, unit="ns").start())
    dut.tx_rst.value = 1
    dut.rd.value = 0
    dut.rx_ctl.value = 0
    await ClockCycles(dut.tx_clk, 4)
    dut.tx_rst.value = 0
    await ClockCycles(dut.tx_clk, 2)


@cocotb.test()
async def tx_frames_reach_the_phy_model(dut):
    await setup(dut)
    src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.tx_clk, dut.tx_rst)
    sink = RgmiiSink(dut.td, dut.tx_ctl, dut.txc)
    rng = random.Random(1)
    payloads = [bytes(rng.randrange(256) for _ in range(n)) for n in (1, 59, 60, 61, 130)]
    for p in payloads:
        await src.send(AxiStreamFrame(p))
    for p in payloads:
        frame = await with_timeout(sink.recv(), 20, "us")
        assert frame.check_fcs(), f"bad FCS on a {len(p)}-byte frame"
        assert frame.get_payload() == p + bytes(max(0, 60 - len(p))), len(p)
        assert not any(frame.error or [])
    assert int(dut.tx_frames.value) == len(payloads)


@cocotb.test()
async def rx_frames_from_the_phy_model(dut):
    await setup(dut)
    src = RgmiiSource(dut.rd, dut.rx_ctl, dut.rxc)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.rxc)
    rng = random.Random(2)
    good = [bytes(rng.randrange(256) for _ in range(n)) for n in (60, 64, 200)]
    await src.send(GmiiFrame.from_payload(good[0]))
    bad_fcs = GmiiFrame.from_raw_payload(good[1] + b"\x01\x02\x03\x04")
    await src.send(bad_fcs)
    runt = b"\x55" * 20
    await src.send(GmiiFrame.from_raw_payload(runt + zlib.crc32(runt).to_bytes(4, "little")))  # 24 bytes
    await src.send(GmiiFrame.from_payload(good[2]))
    expect = [(good[0], 0), (good[1], 1), (b"\x55" * 20, 1), (good[2], 0)]
    for data, bad in expect:
        frame = await with_timeout(sink.recv(), 40, "us")
        assert bytes(frame.tdata) == data, (len(frame.tdata), len(data))
        tuser = frame.tuser if isinstance(frame.tuser, list) else [frame.tuser]
        assert int(tuser[-1]) == bad, (len(data), tuser[-1])
    await Timer(1, "us")
    assert int(dut.rx_frames.value) == 2 and int(dut.rx_errors.value) == 2
