"""StripedReader against one AXI4Memory per lane (the same image): random descriptors (legal
and refused), stripe sizes, lane counts, latencies, port rates, ready stalls, error ranges and
back-pressure. Expected results come from the memory image and the single-port DMAReader's
contract (hdl.dma.reader; tests/hdl/dma/test_dma.py), never from the DUT: the merged stream is the
descriptor's bytes in address order, the status the first failing beat's, and lane i reads
exactly the chunks k = i mod lanes, as DMAReader bursts."""
import random

import pytest
from hypothesis import given, settings, strategies as st

from mcf_fpga.boards.striped_reader import StripedReader
from mcf_fpga.hdl.bus import Resp
from mcf_fpga.sim import AXI4Memory
from mcf_fpga.sim.kit import StreamSink, StreamSource, run_simulation
from mcf_fpga.spec.dma import DmaParams, DmaStatus, check_descriptor, plan_bursts
from tests.hdl.dma.axi_expect import expect_beat

BASE = 0x10000
SIZE = 3 * 4096
WINDOW = dict(window_base=BASE, window_size=SIZE + 4096)   # wider than memory: the DECERR path
BPB = 16


def descriptors(stripe):
    span = (SIZE + 4096) // BPB
    legal = st.tuples(st.integers(0, span - 1), st.integers(1, 12)).map(
        lambda t: (BASE + t[0] * BPB, t[1] * stripe))
    bad = st.one_of(
        st.just((BASE, 0)),                                                   # zero length
        st.integers(1, BPB - 1).map(lambda o: (BASE + o, stripe)),            # misaligned addr
        st.integers(1, 3).map(lambda n: (BASE, stripe + n * BPB)),            # not whole stripes
        st.integers(1, 4).map(lambda n: (BASE - n * BPB, stripe)),            # below the window
        st.just((BASE, 64 * stripe)),                                          # longer than max_length
    )
    return st.lists(st.one_of(legal, legal, legal, bad), min_size=1, max_size=5)


def expected(p, stripe, mem, image, descs):
    """(stripe beats, statuses) of the single-port reader's contract, in stripe-wide beats."""
    beats, status = [], []
    for a, n in descs:
        code = check_descriptor(p, a, n)
        if code == DmaStatus.OK and n % stripe:
            code = DmaStatus.MISALIGNED
        if code != DmaStatus.OK:
            status.append((code, a))
            continue
        fail = None
        for k in range(n // stripe):
            chunk = bytearray()
            for off in range(k * stripe, (k + 1) * stripe, BPB):
                data, bad = expect_beat(mem, image, a + off, BPB)
                chunk += data
                fail = fail or bad
            beats.append((int.from_bytes(chunk, "little"), k == n // stripe - 1))
        status.append(fail or (DmaStatus.OK, a))
    return beats, status


@settings(max_examples=25, deadline=None)
@given(lanes=st.integers(1, 3), words=st.sampled_from([1, 2, 4, 16]), max_burst=st.sampled_from([2, 16]),
       max_outstanding=st.sampled_from([1, 4]), latency=st.integers(1, 40), rate=st.sampled_from([None, 8]),
       stall=st.booleans(), errors=st.lists(st.integers(0, SIZE // BPB - 1), max_size=2),
       ready=st.sampled_from([1.0, 0.6, 0.25]), data=st.data(), seed=st.integers(0, 2 ** 16))
def test_striped_reader_matches_single_port_contract(lanes, words, max_burst, max_outstanding, latency, rate,
                                                     stall, errors, ready, data, seed):
    stripe = words * BPB
    descs = data.draw(descriptors(stripe))
    dut = StripedReader(lanes=lanes, stripe_bytes=stripe, addr_width=32, max_burst=max_burst,
                        max_outstanding=max_outstanding, max_length=16 * stripe, **WINDOW)
    p = dut.p
    image = random.Random(seed).randbytes(SIZE)
    errs = [(BASE + b * BPB, BASE + b * BPB + BPB, Resp.SLVERR if b % 2 else Resp.DECERR) for b in errors]
    mems = []
    for i in range(lanes):
        mem = AXI4Memory(SIZE, data_width=128, base=BASE, latency=latency + 7 * i, bytes_per_cycle=rate,
                         max_outstanding=8, error_ranges=errs, ready_seed=seed + i if stall else None)
        mem.load(BASE, image)
        mems.append(mem)
    exp_beats, exp_status = expected(p, stripe, mems[0], image, descs)

    src = StreamSource(dut.desc, seed=seed, valid_prob=0.7)
    dsink = StreamSink(dut.data, seed=seed + 1, ready_prob=ready)
    ssink = StreamSink(dut.status, seed=seed + 2, ready_prob=0.5)
    got, order = {}, []

    async def tb_desc(ctx):
        await src.send(ctx, [{"addr": a, "length": n} for a, n in descs])

    async def tb_data(ctx):
        got["beats"] = await dsink.collect(ctx, len(exp_beats))

    async def tb_status(ctx):
        got["st"] = await ssink.collect(ctx, len(exp_status))
        await ctx.tick().repeat(60)          # nothing more may arrive
        assert not ctx.get(dut.data.valid) and not ctx.get(dut.status.valid)

    async def tb_order(ctx):                 # a legal descriptor's status comes after its last beat
        async for _, _, dv, dr, last, sv, sr in ctx.tick().sample(
                dut.data.valid, dut.data.ready, dut.data.payload.last, dut.status.valid, dut.status.ready):
            if dv and dr and last:
                order.append("last")
            if sv and sr:
                order.append("status")

    def serve(mem, port):
        async def run(ctx):
            await mem.serve(ctx, port)
        return run

    run_simulation(dut, [tb_desc, tb_data, tb_status], vcd=False, max_cycles=30_000,
                   background=[serve(mem, getattr(dut, f"m_axi{i}")) for i, mem in enumerate(mems)] + [tb_order])
    assert [(b["data"], bool(b["last"])) for b in got["beats"]] == exp_beats
    assert [(s["code"], s["addr"]) for s in got["st"]] == exp_status
    lane_p = DmaParams(addr_width=32, max_burst=max_burst, max_outstanding=max_outstanding, **WINDOW)
    legal = [(a, n) for a, n in descs if check_descriptor(p, a, n) == DmaStatus.OK and n % stripe == 0]
    for i, mem in enumerate(mems):
        want = [b for a, n in legal for k in range(i, n // stripe, lanes)
                for b in plan_bursts(lane_p, a + k * stripe, stripe)]
        assert [(a, ln + 1) for _, kind, a, ln, _ in mem.log if kind == "R"] == want
    # a legal descriptor's status follows its last data beat (refused ones have no data)
    lasts, nst = 0, 0
    for ev in order:
        if ev == "last":
            lasts += 1
            continue
        nst += 1
        assert lasts >= sum(1 for d in descs[:nst] if d in legal), f"status {nst - 1} before its data: {order}"
    assert (lasts, nst) == (len(legal), len(descs))


class _Fixed:
    def __init__(self, descs):
        self.descs = descs

    def draw(self, strategy):
        return self.descs


def test_status_waits_for_the_stalled_last_beat():
    """Two lanes, 4-word stripes, a slow data sink: the lanes' statuses arrive while the last
    stripe still waits in its buffer; the descriptor's status must still follow that beat."""
    inner = test_striped_reader_matches_single_port_contract.hypothesis.inner_test
    inner(lanes=2, words=4, max_burst=16, max_outstanding=4, latency=5, rate=None, stall=False, errors=[],
          ready=0.25, data=_Fixed([(BASE, 4 * 64), (BASE + 64, 2 * 64)]), seed=3)


def test_parameters_refused():
    for bad in (dict(lanes=0, stripe_bytes=16), dict(lanes=9, stripe_bytes=16), dict(lanes=2, stripe_bytes=48),
                dict(lanes=2, stripe_bytes=8), dict(lanes=2, stripe_bytes=0)):
        with pytest.raises(ValueError, match="lanes|stripe_bytes"):
            StripedReader(**bad, addr_width=32)
