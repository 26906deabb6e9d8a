"""cocotb tests of the DMA tops' generated Verilog with cocotbext-axi's AxiRam as the memory
(run by tests/hdl/dma/test_dma_cocotb.py). Expected data is what was put into / read out of
the AxiRam; the burst rules are checked by watching the AR/AW channels every cycle."""
import os
import random

import cocotb
from mcf_fpga.sim.cocotb_clock import clock_and_reset
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiBus, AxiRam, AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

ADDR_W, LEN_W = 32, 32
MAX_BURST = int(os.environ.get("DMA_MAX_BURST", "16"))
BPB = 16
RAM = 1 << 16


async def setup(dut):
    await clock_and_reset(dut)
    ram = AxiRam(AxiBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst, size=RAM)
    desc = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis_desc"), dut.clk, dut.rst)
    status = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis_status"), dut.clk, dut.rst)
    await ClockCycles(dut.clk, 2)
    return ram, desc, status


async def watch_bursts(dut, ch, seen):
    while True:
        await RisingEdge(dut.clk)
        if getattr(dut, f"m_axi_{ch}valid").value == 1 and getattr(dut, f"m_axi_{ch}ready").value == 1:
            addr = int(getattr(dut, f"m_axi_{ch}addr").value)
            beats = int(getattr(dut, f"m_axi_{ch}len").value) + 1
            assert beats <= MAX_BURST, f"{ch} burst of {beats} beats > {MAX_BURST}"
            assert addr % 4096 + beats * BPB <= 4096, f"{ch} burst at {addr:#x} crosses 4 KB"
            seen.append((addr, beats))


def descriptors(rng, n):
    out = []
    for _ in range(n):
        beats = rng.randint(1, 90)
        addr = rng.choice([rng.randrange(0, RAM // BPB - beats) * BPB,
                           rng.randint(1, 15) * 4096 - rng.randint(1, 20) * BPB])
        out.append((addr, beats * BPB))
    return out


async def send_desc(src, addr, length):
    await src.send(AxiStreamFrame((addr | length << ADDR_W).to_bytes((ADDR_W + LEN_W) // 8, "little")))


async def recv_status(sink):
    f = await sink.recv()
    v = int.from_bytes(bytes(f.tdata), "little")
    return v & 0xF, v >> 4


@cocotb.test()
async def reader_reads_axiram(dut):
    ram, desc, status = await setup(dut)
    data = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst)
    rng = random.Random(11)
    data.set_pause_generator(iter(lambda: rng.random() < 0.3, None))
    image = rng.randbytes(RAM)
    ram.write(0, image)
    seen = []
    cocotb.start_soon(watch_bursts(dut, "ar", seen))
    descs = descriptors(rng, 12) + [(0, 0), (8, 32)]      # + zero-length, misaligned: refused
    for a, n in descs:
        await send_desc(desc, a, n)
    for a, n in descs[:-2]:
        f = await data.recv()
        assert bytes(f.tdata) == image[a:a + n], f"data mismatch for {a:#x}+{n}"
        assert await recv_status(status) == (0, a)
    assert await recv_status(status) == (1, 0)       # ZERO_LENGTH
    assert await recv_status(status) == (2, 8)       # MISALIGNED
    await ClockCycles(dut.clk, 50)
    assert data.empty()
    assert sum(b for _, b in seen) * BPB == sum(n for _, n in descs[:-2])


@cocotb.test()
async def writer_writes_axiram(dut):
    ram, desc, status = await setup(dut)
    src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
    rng = random.Random(12)
    src.set_pause_generator(iter(lambda: rng.random() < 0.3, None))
    image = bytearray(rng.randbytes(RAM))
    ram.write(0, bytes(image))
    seen = []
    cocotb.start_soon(watch_bursts(dut, "aw", seen))
    descs = descriptors(rng, 10)
    for a, n in descs:
        pkt = rng.randbytes(n)
        image[a:a + n] = pkt
        await send_desc(desc, a, n)
        await src.send(AxiStreamFrame(pkt))
    for a, n in descs:
        assert await recv_status(status) == (0, a)
    assert ram.read(0, RAM) == bytes(image)
    assert sum(b for _, b in seen) * BPB == sum(n for _, n in descs)
