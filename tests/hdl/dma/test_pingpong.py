"""Ping-pong loader against AXI4Memory: data in fill order with the buffer index, statuses
in descriptor order, refused descriptors without traffic, consumer back-pressure losing
nothing, and fill/consume overlapping cycle by cycle."""
import random

from hypothesis import given, settings, strategies as st

from mcf_fpga.hdl.dma import PingPongLoader
from mcf_fpga.spec.dma import DmaStatus, check_descriptor
from mcf_fpga.sim import AXI4Memory
from mcf_fpga.sim.kit import StreamSource, StreamSink, run_simulation

BASE, SIZE = 0x4000, 4 * 4096
DW, BPB = 64, 8


def serving(mem, port):
    async def serve(ctx):
        await mem.serve(ctx, port)
    return serve


def run_loader(dut, mem, descs, *, seed=0, ready=1.0, trace=None):
    got = {}
    src = StreamSource(dut.desc, seed=seed, valid_prob=0.9)
    osink = StreamSink(dut.out, seed=seed + 1, ready_prob=ready)
    ssink = StreamSink(dut.status, seed=seed + 2, ready_prob=0.7)
    n_pkts = sum(1 for a, n, b in descs if check_descriptor(dut.p, a, n) == DmaStatus.OK)

    async def tb_desc(ctx):
        await src.send(ctx, [{"addr": a, "length": n, "buf": b} for a, n, b in descs])

    async def tb_out(ctx):
        got["pkts"] = await osink.collect_packets(ctx, n_pkts, DW, with_user=True)

    async def tb_status(ctx):
        got["st"] = await ssink.collect(ctx, len(descs))

    bg = [serving(mem, dut.m_axi)]
    if trace is not None:
        fill, out = dut._reader.data, dut.out

        async def recorder(ctx):
            async for _, _, fv, fr, ov, orr in ctx.tick().sample(fill.valid, fill.ready,
                                                                 out.valid, out.ready):
                trace.append((bool(fv and fr), bool(ov and orr)))
        bg.append(recorder)
    run_simulation(dut, [tb_desc, tb_out, tb_status], background=bg, vcd=False, max_cycles=30_000)
    return got


def expected(dut, mem, descs):
    pkts, sts = [], []
    for a, n, b in descs:
        code = check_descriptor(dut.p, a, n)       # TOO_LONG past a buffer (dut.p.max_length)
        sts.append((code, a, b))
        if code == DmaStatus.OK:
            pkts.append((mem.dump(a, n), b))
    return pkts, sts


@settings(max_examples=15)
@given(seed=st.integers(0, 2 ** 16), latency=st.integers(1, 25),
       ready=st.sampled_from([1.0, 0.5, 0.2]),
       descs=st.lists(st.tuples(st.integers(0, SIZE // BPB - 1), st.integers(0, 20), st.integers(0, 1),
                                st.sampled_from(["ok", "ok", "ok", "misaligned", "window"])),
                      min_size=1, max_size=6))
def test_loader_against_memory(seed, latency, ready, descs):
    depth = 16
    dut = PingPongLoader(depth=depth, addr_width=32, data_width=DW, max_burst=8, max_outstanding=2,
                         window_base=BASE, window_size=SIZE)
    mem = AXI4Memory(SIZE, data_width=DW, base=BASE, latency=latency, max_outstanding=4,
                     ready_seed=seed)
    mem.load(BASE, random.Random(seed).randbytes(SIZE))
    ds = []
    for beat, n, b, kind in descs:
        a = BASE + beat * BPB
        n = min(n, SIZE // BPB - beat) * BPB         # n may be 0 (refused) or > depth (TOO_LONG)
        if kind == "misaligned":
            a += 3
        elif kind == "window":
            a = BASE + SIZE - BPB
            n = 2 * BPB
        ds.append((a, n, b))
    assert dut.p.max_length == depth * BPB                # longer than a buffer: TOO_LONG
    exp_pkts, exp_st = expected(dut, mem, ds)
    got = run_loader(dut, mem, ds, seed=seed, ready=ready)
    assert got["pkts"] == exp_pkts
    assert [(s["code"], s["addr"], s["buf"]) for s in got["st"]] == exp_st
    legal = [(a, n) for (a, n, _), (c, _, _) in zip(ds, exp_st) if c == DmaStatus.OK]
    assert sum(ln + 1 for _, k, _, ln, _ in mem.log) == sum(n // BPB for _, n in legal)


def test_fill_and_consume_overlap():
    """While the consumer drains one buffer the other fills: some cycle has both a fill beat
    and a consume beat, and nothing is lost under a slow consumer."""
    depth = 32
    dut = PingPongLoader(depth=depth, addr_width=32, data_width=DW, max_burst=16, max_outstanding=4,
                         window_base=BASE, window_size=SIZE)
    mem = AXI4Memory(SIZE, data_width=DW, base=BASE, latency=12, max_outstanding=4)
    mem.load(BASE, random.Random(7).randbytes(SIZE))
    ds = [(BASE + i * depth * BPB, depth * BPB, i % 2) for i in range(6)]
    trace = []
    got = run_loader(dut, mem, ds, seed=3, ready=0.6, trace=trace)
    exp_pkts, exp_st = expected(dut, mem, ds)
    assert got["pkts"] == exp_pkts
    assert [s["code"] for s in got["st"]] == [DmaStatus.OK] * 6
    both = sum(1 for f, c in trace if f and c)
    fills = sum(1 for f, _ in trace if f)
    assert fills == 6 * depth
    print(f"overlap: {both} of {len(trace)} cycles had a fill beat and a consume beat")
    assert both > depth, f"fill and consume overlapped on only {both} cycles"
