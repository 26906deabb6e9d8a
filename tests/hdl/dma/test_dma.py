"""DMA reader/writer against the AXI4Memory model: random descriptors (legal and illegal),
latencies, bandwidth, ready stalls, back-pressure and error ranges.

Expected results come from the memory image and the AXI4 rules, never from the DUT:
packet bytes = memory bytes (error beats read as 0, as the memory model answers them),
status = first failing beat/burst address, bursts = the 4 KB / max_burst split rule.
"""
import random

import pytest
from hypothesis import given, strategies as st, settings

from mcf_fpga.hdl.bus import Resp
from mcf_fpga.hdl.dma import DMAReader, DMAWriter
from mcf_fpga.spec.dma import DmaParams, DmaStatus, plan_bursts, check_descriptor
from mcf_fpga.sim import AXI4Memory
from mcf_fpga.sim.kit import StreamSource, StreamSink, run_simulation, packets_to_beats, beats_to_packets
from tests.hdl.dma.axi_expect import beat_resp, expect_beat

BASE = 0x10000
SIZE = 3 * 4096
WINDOW = dict(window_base=BASE, window_size=SIZE + 4096)   # window wider than memory: DECERR path


def descriptors(bpb):
    legal = st.tuples(st.integers(0, (SIZE + 4096) // bpb - 1), st.integers(1, 70)).map(
        lambda t: (BASE + t[0] * bpb, min(t[1], (SIZE + 4096) // bpb - t[0]) * bpb))
    near4k = st.tuples(st.integers(1, 3), st.integers(1, 20), st.integers(2, 40)).map(
        lambda t: (BASE + t[0] * 4096 - t[1] * bpb, t[2] * bpb))
    bad = st.one_of(
        st.integers(0, SIZE // bpb).map(lambda a: (BASE + a * bpb, 0)),                 # zero length
        st.tuples(st.integers(0, 100), st.integers(1, bpb - 1)).map(
            lambda t: (BASE + t[0] * bpb + t[1], bpb)),                                  # misaligned addr
        st.integers(1, bpb - 1).map(lambda n: (BASE, bpb + n)),                          # misaligned length
        st.integers(1, 8).map(lambda n: (BASE - n * bpb, 2 * bpb)),                      # below window
        st.integers(1, 8).map(lambda n: (BASE + SIZE + 4096 - bpb, (n + 1) * bpb)),      # past window
    )
    return st.lists(st.one_of(legal, legal, near4k, bad), min_size=1, max_size=4)


memory_cfg = st.fixed_dictionaries({
    "latency": st.integers(1, 30),
    "bytes_per_cycle": st.sampled_from([None, 4, 8]),
    "ready_seed": st.one_of(st.none(), st.integers(0, 2 ** 32)),
    "errors": st.lists(st.tuples(st.integers(0, SIZE // 16 - 1), st.sampled_from([Resp.SLVERR, Resp.DECERR])),
                       max_size=2),
})


def make_memory(cfg, dw, seed):
    errs = [(BASE + b * 16, BASE + b * 16 + 16, r) for b, r in cfg["errors"]]
    mem = AXI4Memory(SIZE, data_width=dw, base=BASE, latency=cfg["latency"],
                     bytes_per_cycle=cfg["bytes_per_cycle"], max_outstanding=16,
                     error_ranges=errs, ready_seed=cfg["ready_seed"])
    mem.load(BASE, random.Random(seed).randbytes(SIZE))
    return mem


def check_bursts(mem, kind, p, descs):
    """Exact burst sequence, 4 KB rule and max_burst, and no traffic for refused descriptors."""
    got = [(a, ln + 1) for _, k, a, ln, _ in mem.log if k == kind]
    want = [b for a, n in descs if check_descriptor(p, a, n) == DmaStatus.OK
            for b in plan_bursts(p, a, n)]
    assert got == want
    for a, n in got:
        assert n <= p.max_burst
        assert (a % 4096) + n * p.bytes_per_beat <= 4096, f"burst at {a:#x} crosses 4 KB"


def serving(mem, port):
    async def serve(ctx):
        await mem.serve(ctx, port)
    return serve


def outstanding_monitor(port, limit, kind):
    async def mon(ctx):
        n = 0
        if kind == "R":
            sig = (port.ar.valid, port.ar.ready, port.r.valid, port.r.ready, port.r.payload.last)
        else:
            sig = (port.aw.valid, port.aw.ready, port.b.valid, port.b.ready, port.b.valid)
        async for _, _, av, ar, rv, rr, rl in ctx.tick().sample(*sig):
            n += (av and ar) - (rv and rr and rl)
            assert 0 <= n <= limit, f"{n} bursts outstanding (limit {limit})"
    return mon


dma_params = st.fixed_dictionaries({
    "data_width": st.sampled_from([32, 128]),
    "max_burst": st.sampled_from([1, 3, 16, 256]),
    "max_outstanding": st.sampled_from([1, 2, 4]),
    "max_length": st.sampled_from([None, None, 512]),   # 512: longer descriptors TOO_LONG
})


def test_max_length_rule():
    """The reference rule: TOO_LONG only past max_length, after the other checks; a bad
    max_length is refused naming the field."""
    p = DmaParams(data_width=128, max_length=64, window_base=0x100, window_size=0x1000)
    assert check_descriptor(p, 0x100, 64) == DmaStatus.OK
    assert check_descriptor(p, 0x100, 80) == DmaStatus.TOO_LONG
    assert check_descriptor(p, 0x108, 80) == DmaStatus.MISALIGNED
    assert check_descriptor(p, 0x80, 80) == DmaStatus.OUT_OF_WINDOW
    assert check_descriptor(DmaParams(data_width=128), 0, 1 << 20) == DmaStatus.OK
    for bad in (0, 8, 72, 2 ** 32):
        with pytest.raises(ValueError, match="max_length"):
            DmaParams(data_width=128, max_length=bad)


@settings(max_examples=20)
@given(prm=dma_params, mcfg=memory_cfg, data=st.data(), seed=st.integers(0, 2 ** 16),
       ready=st.sampled_from([1.0, 0.7, 0.3]), head=st.booleans())
def test_reader_against_memory(prm, mcfg, data, seed, ready, head):
    """Either in-flight queue (``registered_head``) against the memory model."""
    dw = prm["data_width"]
    bpb = dw // 8
    descs = data.draw(descriptors(bpb))
    dut = DMAReader(registered_head=head, addr_width=32, **prm, **WINDOW)
    p = dut.p
    mem = make_memory(mcfg, dw, seed)
    image = bytes(mem.mem)
    exp_pkts, exp_status = [], []
    for a, n in descs:
        code = check_descriptor(p, a, n)
        if code != DmaStatus.OK:
            exp_status.append((code, a))
            continue
        pkt, fail = bytearray(), None
        for off in range(0, n, bpb):
            data, bad = expect_beat(mem, image, a + off, bpb)
            pkt += data
            fail = fail or bad
        exp_pkts.append(bytes(pkt))
        exp_status.append(fail or (DmaStatus.OK, a))

    src = StreamSource(dut.desc, seed=seed, valid_prob=0.8)
    dsink = StreamSink(dut.data, seed=seed + 1, ready_prob=ready)
    ssink = StreamSink(dut.status, seed=seed + 2, ready_prob=0.5)
    got = {}

    async def tb_desc(ctx):
        await src.send(ctx, [{"addr": a, "length": n} for a, n in descs])

    async def tb_data(ctx):
        got["pkts"] = await dsink.collect_packets(ctx, len(exp_pkts), dw)

    async def tb_status(ctx):
        got["st"] = await ssink.collect(ctx, len(exp_status))
        await ctx.tick().repeat(40)     # nothing more may arrive
        assert not ctx.get(dut.data.valid) and not ctx.get(dut.status.valid)

    run_simulation(dut, [tb_desc, tb_data, tb_status], vcd=False, max_cycles=20_000,
                   background=[serving(mem, dut.m_axi),
                               outstanding_monitor(dut.m_axi, p.max_outstanding, "R")])
    assert got["pkts"] == exp_pkts
    assert [(s["code"], s["addr"]) for s in got["st"]] == exp_status
    check_bursts(mem, "R", p, descs)


@settings(max_examples=20)
@given(prm=dma_params, mcfg=memory_cfg, data=st.data(), seed=st.integers(0, 2 ** 16),
       valid=st.sampled_from([1.0, 0.6]))
def test_writer_against_memory(prm, mcfg, data, seed, valid):
    dw = prm["data_width"]
    bpb = dw // 8
    descs = data.draw(descriptors(bpb))
    dut = DMAWriter(addr_width=32, **prm, **WINDOW)
    p = dut.p
    mem = make_memory(mcfg, dw, seed)
    expect = bytearray(mem.mem)
    rng = random.Random(seed)
    pkts, exp_status = [], []
    for a, n in descs:
        code = check_descriptor(p, a, n)
        pkt = rng.randbytes(n if code == DmaStatus.OK else rng.randint(1, 3) * bpb)
        pkts.append(pkt)
        if code != DmaStatus.OK:
            exp_status.append((code, a))
            continue
        fail = None
        for ba, nb in plan_bursts(p, a, n):
            resps = [beat_resp(mem, ba + i * bpb, bpb) for i in range(nb)]
            worst = max(resps)
            if worst == Resp.OKAY:
                expect[ba - BASE:ba - BASE + nb * bpb] = pkt[ba - a:ba - a + nb * bpb]
            elif fail is None:
                fail = (DmaStatus.SLVERR if worst == Resp.SLVERR else DmaStatus.DECERR, ba)
        exp_status.append(fail or (DmaStatus.OK, a))

    src = StreamSource(dut.desc, seed=seed, valid_prob=0.8)
    dsrc = StreamSource(dut.data, seed=seed + 1, valid_prob=valid)
    ssink = StreamSink(dut.status, seed=seed + 2, ready_prob=0.5)
    got = {}

    async def tb_desc(ctx):
        await src.send(ctx, [{"addr": a, "length": n} for a, n in descs])

    async def tb_data(ctx):
        await dsrc.send(ctx, packets_to_beats(pkts, dw))

    async def tb_status(ctx):
        got["st"] = await ssink.collect(ctx, len(exp_status))

    run_simulation(dut, [tb_desc, tb_data, tb_status], vcd=False, max_cycles=20_000,
                   background=[serving(mem, dut.m_axi),
                               outstanding_monitor(dut.m_axi, p.max_outstanding, "W")])
    assert [(s["code"], s["addr"]) for s in got["st"]] == exp_status
    assert bytes(mem.mem) == bytes(expect)
    check_bursts(mem, "W", p, descs)


def test_writer_length_mismatch():
    """A short packet pads with WSTRB=0 (memory unchanged there), a long one is trimmed;
    both report LENGTH_MISMATCH; the following descriptor is unaffected."""
    dw, bpb = 64, 8
    dut = DMAWriter(addr_width=32, data_width=dw, max_burst=4, **WINDOW)
    mem = AXI4Memory(SIZE, data_width=dw, base=BASE, latency=3)
    mem.load(BASE, bytes(range(256)) * (SIZE // 256))
    before = bytes(mem.mem)
    descs = [(BASE, 6 * bpb), (BASE + 0x100, 2 * bpb), (BASE + 0x200, 3 * bpb)]
    pkts = [b"\xAA" * (3 * bpb), b"\xBB" * (5 * bpb), b"\xCC" * (3 * bpb)]
    got = {}

    async def tb(ctx):
        await StreamSource(dut.desc).send(ctx, [{"addr": a, "length": n} for a, n in descs])

    async def tb_data(ctx):
        await StreamSource(dut.data).send(ctx, packets_to_beats(pkts, dw))

    async def tb_st(ctx):
        got["st"] = await StreamSink(dut.status).collect(ctx, 3)

    run_simulation(dut, [tb, tb_data, tb_st], vcd=False, max_cycles=5000,
                   background=[serving(mem, dut.m_axi)])
    assert [(s["code"], s["addr"]) for s in got["st"]] == [
        (DmaStatus.LENGTH_MISMATCH, BASE), (DmaStatus.LENGTH_MISMATCH, BASE + 0x100),
        (DmaStatus.OK, BASE + 0x200)]
    out = bytes(mem.mem)
    assert out[:3 * bpb] == pkts[0] and out[3 * bpb:6 * bpb] == before[3 * bpb:6 * bpb]
    assert out[0x100:0x100 + 2 * bpb] == pkts[1][:2 * bpb]
    assert out[0x100 + 2 * bpb:0x200] == before[0x100 + 2 * bpb:0x200]
    assert out[0x200:0x200 + 3 * bpb] == pkts[2]


def test_illegal_descriptors_issue_no_transaction():
    """Zero-length, misaligned and out-of-window descriptors: a clear status each, and the
    memory model's log stays empty for both engines."""
    dw, bpb = 128, 16
    bad = [(BASE, 0), (BASE + 4, 32), (BASE, 24), (BASE - 16, 32), (BASE + SIZE + 4096 - 16, 32)]
    codes = [DmaStatus.ZERO_LENGTH, DmaStatus.MISALIGNED, DmaStatus.MISALIGNED,
             DmaStatus.OUT_OF_WINDOW, DmaStatus.OUT_OF_WINDOW]
    for cls in (DMAReader, DMAWriter):
        dut = cls(addr_width=32, data_width=dw, **WINDOW)
        mem = AXI4Memory(SIZE, data_width=dw, base=BASE, latency=2)
        got = {}

        async def tb(ctx, dut=dut):
            await StreamSource(dut.desc).send(ctx, [{"addr": a, "length": n} for a, n in bad])

        async def tb_st(ctx, dut=dut):
            got["st"] = await StreamSink(dut.status).collect(ctx, len(bad))

        tbs = [tb, tb_st]
        if cls is DMAWriter:   # every descriptor takes one packet, refused ones are dropped
            async def tb_data(ctx, dut=dut):
                await StreamSource(dut.data).send(ctx, packets_to_beats([b"x" * 16] * len(bad), dw))
            tbs.append(tb_data)
        run_simulation(dut, tbs, vcd=False, max_cycles=2000,
                       background=[serving(mem, dut.m_axi)])
        assert [(s["code"], s["addr"]) for s in got["st"]] == list(zip(codes, (a for a, _ in bad)))
        assert mem.log == []


def test_params_rejected_with_names():
    import pytest
    with pytest.raises(ValueError, match="max_burst"):
        DmaParams(max_burst=257)
    with pytest.raises(ValueError, match="data_width"):
        DmaParams(data_width=96)
    with pytest.raises(ValueError, match="window"):
        DmaParams(addr_width=32, window_base=2 ** 32)


def test_reader_long_descriptor_hits_max_burst_and_4k():
    """32-bit bus: 4 KB is 1024 beats, so a long descriptor is cut by max_burst=256 and by
    the 4 KB boundaries; the exact burst list and the data are checked."""
    dw, bpb = 32, 4
    dut = DMAReader(addr_width=32, data_width=dw, max_burst=256, max_outstanding=4, **WINDOW)
    mem = AXI4Memory(SIZE, data_width=dw, base=BASE, latency=5, max_outstanding=8)
    mem.load(BASE, random.Random(1).randbytes(SIZE))
    descs = [(BASE + 4096 - 40 * bpb, 700 * bpb)]
    got = {}

    async def tb(ctx):
        await StreamSource(dut.desc).send(ctx, [{"addr": a, "length": n} for a, n in descs])

    async def rx(ctx):
        got["pkts"] = await StreamSink(dut.data).collect_packets(ctx, 1, dw)
        got["st"] = await StreamSink(dut.status).collect(ctx, 1)

    run_simulation(dut, [tb, rx], vcd=False, max_cycles=5000,
                   background=[serving(mem, dut.m_axi)])
    a, n = descs[0]
    assert got["pkts"] == [mem.dump(a, n)]
    assert [(s["code"], s["addr"]) for s in got["st"]] == [(DmaStatus.OK, a)]
    check_bursts(mem, "R", dut.p, descs)
    assert [ln + 1 for _, _, _, ln, _ in mem.log] == [40, 256, 256, 148]
