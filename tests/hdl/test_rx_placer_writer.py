"""RxBurstWriter (hdl/rx_placer_writer.py) against golden.rx_placer's write rule: random packets
(aligned addresses near 4 KB boundaries, lengths 1..max), both bus widths, burst and outstanding
limits, error ranges, random word gaps and memory stalls. Checked: the AW bursts are
``spec.dma.plan_bursts``'s, the memory holds exactly the payload bytes of the bursts answered OKAY
(nothing past ``length``), each packet's outcome (``placed`` or ``failed``, with its entry) in
order, the first error's code and address, and ``clear`` zeroes them."""
import random

from hypothesis import given, settings, strategies as st

from mcf_fpga.golden.rx_placer import DECERR, SLVERR
from mcf_fpga.spec.dma import DmaParams, burst_resp, plan_bursts
from mcf_fpga.hdl.bus import Resp
from mcf_fpga.hdl.rx_placer_writer import RxBurstWriter
from mcf_fpga.sim import AXI4Memory
from mcf_fpga.sim.kit import StreamSource, run_simulation

BASE, SIZE, MAX_WORDS = 0x1_0000_0000, 3 * 4096, 8


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), data_width=st.sampled_from([64, 128]), max_burst=st.sampled_from([1, 2, 4]),
       max_outstanding=st.sampled_from([1, 2]), p=st.sampled_from([1.0, 0.5]), stalls=st.booleans(),
       errors=st.booleans())
def test_writer_matches_golden(seed, data_width, max_burst, max_outstanding, p, stalls, errors):
    rng = random.Random(seed)
    bb = data_width // 8
    ranges = []
    if errors:
        for _ in range(rng.randint(1, 2)):
            s = BASE + rng.randrange(SIZE // 16) * 16
            ranges.append((s, s + rng.choice([1, 16, 100]), rng.choice([Resp.SLVERR, Resp.DECERR])))
    pkts = []
    for _ in range(rng.randint(3, 8)):
        length = rng.randint(1, MAX_WORDS * 8)
        near = rng.choice([4096, 8192]) - bb * rng.randrange(8)
        off = near if rng.random() < 0.5 else rng.randrange((SIZE - 128) // bb) * bb
        pkts.append((BASE + off, length, rng.randrange(4), rng.randbytes(length)))
    dut = RxBurstWriter(entries=4, addr_width=40, data_width=data_width, id_width=4, max_burst=max_burst,
                        max_outstanding=max_outstanding, max_words=MAX_WORDS, length_bits=16)
    mem = AXI4Memory(SIZE, data_width=data_width, base=BASE, max_outstanding=max_outstanding, error_ranges=ranges,
                     ready_seed=seed if stalls else None)
    image = rng.randbytes(SIZE)
    mem.load(BASE, image)
    words = [int.from_bytes(pl[i:i + 8], "little") for _, _, _, pl in pkts for i in range(0, len(pl), 8)]
    outcomes, err = [], {}

    async def control(ctx):
        for addr, length, e, _ in pkts:
            ctx.set(dut.start, 1)
            ctx.set(dut.addr, addr // bb)
            ctx.set(dut.length, length)
            ctx.set(dut.e, e)
            await ctx.tick()
            ctx.set(dut.start, 0)
            while not (await ctx.tick().sample(dut.done))[2]:
                pass
        while ctx.get(dut.busy):
            await ctx.tick()
        err["got"] = (ctx.get(dut.err_code), ctx.get(dut.err_addr))
        ctx.set(dut.clear, 1)
        await ctx.tick()
        assert (ctx.get(dut.err_code), ctx.get(dut.err_addr)) == (0, 0)

    async def words_in(ctx):
        await StreamSource(dut.words, seed=seed + 1, valid_prob=p).send(ctx, words)

    async def monitor(ctx):
        w, held = dut.bus.w, None
        while True:
            _, _, placed, failed, entry, valid, ready, data, strb, last = await ctx.tick().sample(
                dut.placed, dut.failed, dut.entry, w.valid, w.ready, w.payload.data, w.payload.strb, w.payload.last)
            assert not (placed and failed)
            if placed or failed:
                outcomes.append((bool(placed), entry))
            beat = (strb, last, [data >> 8 * i & 0xFF for i in range(bb) if strb >> i & 1])
            assert held is None or (valid and beat == held), "W beat changed or withdrawn before its handshake"
            held = beat if valid and not ready else None

    # no generic stream checker: a final beat's bytes past ``length`` (WSTRB 0) show whatever word
    # ``words`` holds (as in the placer); the monitor checks W's strobed bytes, strb and last instead
    run_simulation(dut, [control, words_in], background=[mem.testbench(dut.bus), monitor], vcd=False,
                   check_streams=False)
    dma = DmaParams(data_width=data_width, max_burst=max_burst, addr_width=40)
    want_img, want_out, want_bursts, first = bytearray(image), [], [], None
    for addr, length, e, payload in pkts:
        bad = None
        for baddr, beats in plan_bursts(dma, addr, -(-length // bb) * bb):
            want_bursts.append((baddr, beats - 1))
            resp = burst_resp(ranges, baddr, beats * bb)
            if resp:
                bad = bad or (SLVERR if resp == Resp.SLVERR else DECERR, baddr)
                continue
            for a in range(baddr, min(baddr + beats * bb, addr + length)):
                want_img[a - BASE] = payload[a - addr]
        want_out.append((bad is None, e))
        first = first or bad
    assert [(a, n) for _, kind, a, n, _ in mem.log if kind == "W"] == want_bursts
    assert outcomes == want_out
    assert mem.dump(BASE, SIZE) == bytes(want_img)
    assert err["got"] == (first or (0, 0))
