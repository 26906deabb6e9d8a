#!/usr/bin/env python3
"""DMA bandwidth: achieved bytes/cycle against the bus peak, memory latency 20..200 cycles.

The DMA reader (and writer) tops run on the Verilator backend (``mcf_fpga/sim/verilator``) with
the C++ twin of ``AXI4Memory`` as DDR: one 128-bit beat per cycle of memory bandwidth
(peak 16 B/cycle), reads answered ``latency`` cycles after AR, the memory accepting up
to 32 transactions. Each run moves 1 MiB as 4 descriptors of 256 KiB starting 64 bytes
past a 4 KB boundary (so every descriptor also exercises the 4 KB split), checks the
data, and reports bytes / (16 x cycles from the first descriptor to the last byte).
If Verilator is unusable, the Amaranth simulator runs 16 KiB instead (said in the output).

The writer rows show the W-channel rate only: the memory model offers B the cycle after a
burst's last W beat (its ``latency`` applies to reads), so write latency is not exercised.

The loader rows stream 1 MiB through the ping-pong loader (one buffer per descriptor,
buffers alternating, consumer always ready): a buffer is refilled only after the consumer
has drained it, so each refill pays the memory latency once per buffer.

Configurations: max_burst 16 (Zynq HP port) with 1..16 outstanding bursts, and
max_burst 256 (AXI4 limit; 4 KB = 256 x 16 B) with 2. The LAST line is the reader's
utilisation at 100-cycle latency for max_burst=16, max_outstanding=8 (the KR260 setting).
"""
import random
import time


from mcf_fpga.hdl.dma.top import DMAReaderTop, DMAWriterTop  # noqa: E402

DW, BPB, AW = 128, 16, 32
LATENCIES = (20, 50, 100, 200)
CONFIGS = [(16, 1), (16, 4), (16, 8), (16, 16), (256, 2)]   # (max_burst, max_outstanding)
BASE = 0x10000


def descriptors(total, n=4):
    per = total // n
    return [(BASE + 64 + i * per, per) for i in range(n)]


def run_verilator(top_cls, burst, outst, latency, total, models):
    from mcf_fpga.sim.verilator import build
    key = (top_cls.__name__, burst, outst)
    if key not in models:
        models[key] = build(top_cls(addr_width=AW, data_width=DW, max_burst=burst,
                                    max_outstanding=outst))
    m = models[key].new()
    size = total + 2 * 4096 + 64
    mem = m.memory("m_axi", size, base=BASE, latency=latency, max_outstanding=32)
    image = random.Random(latency).randbytes(size)
    m.reset()
    descs = descriptors(total)
    reader = top_cls is DMAReaderTop
    if reader:
        mem.load(BASE, image)
    for a, n in descs:
        m.push("s_axis_desc", (a | n << AW).to_bytes(8, "little"))
        if not reader:
            m.push("s_axis", image[a - BASE:a - BASE + n])
    got, statuses, start = [], [], m.cycle
    while len(statuses) < len(descs):
        m.step(16)
        got += m.pull_all("m_axis") if reader else []
        statuses += m.pull_all("m_axis_status")
        if m.cycle - start > 40 * total // BPB + 100_000:
            raise RuntimeError("DMA did not finish (hang?)")
    cycles = m.cycle - start
    for (a, n), s in zip(descs, statuses):
        v = int.from_bytes(s, "little")
        assert v & 0xF == 0 and v >> 4 == a, f"status {v:#x} for descriptor at {a:#x}"
    if reader:
        assert got == [image[a - BASE:a - BASE + n] for a, n in descs], "data mismatch"
    else:
        for a, n in descs:
            assert mem.dump(a, n) == image[a - BASE:a - BASE + n], "write data mismatch"
    m.close()
    return total / (BPB * cycles)


def run_loader(depth, latency, total, models, burst=16, outst=8):
    """Ping-pong loader, consumer always ready: descriptors of one buffer each, alternating."""
    from mcf_fpga.hdl.dma.top import PingPongLoaderTop
    from mcf_fpga.sim.verilator import build
    key = ("loader", depth, burst, outst)
    if key not in models:
        models[key] = build(PingPongLoaderTop(depth, addr_width=AW, data_width=DW, max_burst=burst,
                                              max_outstanding=outst))
    m = models[key].new()
    size = total + 4096
    mem = m.memory("m_axi", size, base=BASE, latency=latency, max_outstanding=32)
    image = random.Random(latency).randbytes(size)
    mem.load(BASE, image)
    m.reset()
    chunk = depth * BPB
    descs = [(BASE + i * chunk, chunk, i % 2) for i in range(total // chunk)]
    for a, n, b in descs:
        m.push("s_axis_desc", (a | n << AW | b << (AW + 32)).to_bytes(-(-(AW + 33) // 8), "little"))
    got, start = [], m.cycle
    while len(got) < len(descs):
        m.step(16)
        got += m.pull_all("m_axis", with_user=True)
        if m.cycle - start > 40 * total // BPB:
            raise RuntimeError("loader did not finish (hang?)")
    cycles = m.cycle - start
    assert got == [(image[a - BASE:a - BASE + n], b) for a, n, b in descs], "loader data mismatch"
    assert all(int.from_bytes(s, "little") & 0xF == 0 for s in m.pull_all("m_axis_status"))
    m.close()
    return total / (BPB * cycles)


def run_amaranth(top_cls, burst, outst, latency, total, _models):
    from mcf_fpga.hdl.dma import DMAReader, DMAWriter
    from mcf_fpga.sim import AXI4Memory
    from mcf_fpga.sim.kit import StreamSink, StreamSource, run_simulation, packets_to_beats
    reader = top_cls is DMAReaderTop
    dut = (DMAReader if reader else DMAWriter)(addr_width=AW, data_width=DW, max_burst=burst,
                                               max_outstanding=outst)
    size = total + 2 * 4096 + 64
    mem = AXI4Memory(size, data_width=DW, base=BASE, latency=latency, max_outstanding=32)
    image = random.Random(latency).randbytes(size)
    mem.load(BASE, image)
    descs = descriptors(total)
    span = {}

    async def tb(ctx):
        await StreamSource(dut.desc).send(ctx, [{"addr": a, "length": n} for a, n in descs])

    async def tb_data(ctx):
        if reader:
            await StreamSink(dut.data).collect(ctx, total // BPB)
        else:
            await StreamSource(dut.data).send(ctx, packets_to_beats(
                [image[a - BASE:a - BASE + n] for a, n in descs], DW))

    async def tb_st(ctx):
        await StreamSink(dut.status).collect(ctx, len(descs))
        span["cycles"] = mem.cycle

    async def serve(ctx):
        await mem.serve(ctx, dut.m_axi)
    run_simulation(dut, [tb, tb_data, tb_st], background=[serve], vcd=False, check_streams=False,
                   max_cycles=10 * total)
    return total / (BPB * span["cycles"])


def main():
    backend, run, total = "verilator", run_verilator, 1 << 20
    try:
        from mcf_fpga.sim.verilator import build  # noqa: F401
        run(DMAReaderTop, 16, 8, 20, 4 * 4096, {})
    except Exception as exc:   # no usable Verilator: moderate lengths on the Amaranth simulator
        print(f"Verilator unusable ({exc!r}); falling back to the Amaranth simulator")
        backend, run, total = "amaranth", run_amaranth, 16 << 10
    print(f"backend: {backend}; transfer {total} bytes per run; bus peak {BPB} B/cycle (128-bit)")
    models, results = {}, {}
    t0 = time.time()
    header = "engine  max_burst outstanding " + " ".join(f"  lat={l:<4d}" for l in LATENCIES)
    print(header)
    for top, name in ((DMAReaderTop, "reader"), (DMAWriterTop, "writer")):
        for burst, outst in CONFIGS if name == "reader" else [(16, 4), (256, 2)]:
            for lat in LATENCIES:
                results[(name, burst, outst, lat)] = run(top, burst, outst, lat, total, models)
            print(f"{name:7s} {burst:9d} {outst:11d} " + " ".join(
                f"{100 * results[(name, burst, outst, l)]:6.1f}%   " for l in LATENCIES))
    if backend == "verilator":
        for depth in (256,):
            try:
                row = " ".join(f"{100 * run_loader(depth, l, total, models):6.1f}%   "
                               for l in LATENCIES)
            except Exception as exc:   # report and go on: the reader figure is the headline
                row = f"not measured ({str(exc).splitlines()[0][:80]})"
            print(f"loader  buffers of {depth * BPB // 1024:2d} KiB (max_burst 16, 8 outst.) " + row)
    print(f"(utilisation = achieved bytes/cycle / {BPB}; {time.time() - t0:.0f} s)")
    u = results[("reader", 16, 8, 100)]
    print(f"DMA reader utilisation at 100-cycle latency (max_burst=16, 8 outstanding, {backend}): "
          f"{100 * u:.1f}% ({u * BPB:.2f} of {BPB} B/cycle)")


if __name__ == "__main__":
    main()
