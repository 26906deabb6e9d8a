"""DMA descriptor check and burst splitter at every boundary: the window's first and
last beat and one beyond, length 0 / one beat / max_length / one beat more, misalignment by 1
and by bpb-1, an end address that would wrap the address width, bursts that end exactly at a
4 KB boundary or at max_burst; and DmaParams at both edges of every bounded parameter.

Expected codes are written out from the rule in mcf_fpga/hdl/dma/common.py's docstring, expected bursts
from the AXI4 rule stated per beat (a burst ends at max_burst beats, at a 4 KB boundary or at the
descriptor's end), never from the code under test. The BurstSplitter runs in the Amaranth
simulator and must give exactly those bursts; ``check_descriptor``/``plan_bursts`` (the Python
reference the engine tests use) must agree too.
"""
import pytest

from mcf_fpga.spec.dma import DmaParams, DmaStatus
from mcf_fpga.hdl.dma.common import BurstSplitter
from mcf_fpga.spec.dma import check_descriptor, plan_bursts
from mcf_fpga.sim.kit import StreamSink, StreamSource, run_simulation

OK, ZERO, MIS, OUT, LONG = (DmaStatus.OK, DmaStatus.ZERO_LENGTH, DmaStatus.MISALIGNED,
                            DmaStatus.OUT_OF_WINDOW, DmaStatus.TOO_LONG)


def rule_bursts(addr, length, bpb, max_burst):
    """Bursts by the per-beat rule: a new burst starts at the first beat, after max_burst beats,
    and at every 4 KB boundary."""
    out = []
    for i in range(length // bpb):
        a = addr + i * bpb
        if not out or out[-1][1] == max_burst or a % 4096 == 0:
            out.append([a, 0])
        out[-1][1] += 1
    return [tuple(b) for b in out]


def cases(bpb, max_burst, base, size, max_length, aw):
    end = base + size
    top = 2 ** aw
    c = [
        ((base, bpb), OK), ((base, 0), ZERO), ((base + 1, bpb), MIS), ((base + bpb - 1, bpb), MIS),
        ((base, bpb + 1), MIS), ((base, 2 * bpb - 1), MIS), ((base - bpb, bpb), OUT), ((base - bpb, 2 * bpb), OUT),
        ((end - bpb, bpb), OK), ((end - bpb, 2 * bpb), OUT), ((end, bpb), OUT),
        ((base, max_length), OK), ((base, max_length + bpb), LONG), ((base, max_length - bpb), OK),
        ((top - bpb, 2 * bpb), OUT),                                      # end wraps the address width
        ((0x3000 - bpb, 2 * bpb), OK),                                    # across a 4 KB boundary
        ((0x3000 - max_burst * bpb, max_burst * bpb), OK),                # ends exactly at it
        ((0x2000, (max_burst + 1) * bpb), OK), ((0x2000, max_burst * bpb), OK), ((0x2000, (max_burst - 1) * bpb or bpb), OK),
        ((0x2000, 4096), OK),                                             # one whole page
        ((0x2000 - bpb, 4096 + bpb), OK if 4096 + bpb <= max_length else LONG),
        ((0, 0), ZERO), ((end - bpb, 0), ZERO),
    ]
    return [x for x in c if bpb > 1 or x[1] != MIS]      # a byte-wide bus has no misalignment


@pytest.mark.parametrize("data_width, max_burst", [(32, 1), (32, 16), (32, 256), (8, 3), (128, 256)])
def test_descriptor_edges_and_burst_split(data_width, max_burst):
    bpb, aw = data_width // 8, 16
    base, size = 0x1000, 0xE000                                    # window [0x1000, 0xF000)
    max_length = 4096 + 2 * bpb
    p = DmaParams(addr_width=aw, data_width=data_width, len_width=16, max_burst=max_burst,
                  window_base=base, window_size=size, max_length=max_length)
    table = cases(bpb, max_burst, base, size, max_length, aw)
    # the Python reference agrees with the stated rule
    for (a, n), code in table:
        assert check_descriptor(p, a, n) == code, (hex(a), n)
        if code == OK:
            assert plan_bursts(p, a, n) == rule_bursts(a, n, bpb, max_burst)
    # the hardware: every descriptor in order, random back-pressure on the bursts
    dut = BurstSplitter(p)
    want = []
    for (a, n), code in table:
        if code != OK:
            want.append({"null": 1, "code": code, "desc_addr": a, "last": 1})
        else:
            bs = rule_bursts(a, n, bpb, max_burst)
            for i, (ba, nb) in enumerate(bs):
                want.append({"null": 0, "code": 0, "desc_addr": a, "last": int(i == len(bs) - 1),
                             "addr": ba, "len": nb - 1})
    got = {}

    async def tb(ctx):
        await StreamSource(dut.desc, seed=1, valid_prob=0.7).send(ctx, [{"addr": a, "length": n}
                                                                        for (a, n), _ in table])

    async def rx(ctx):
        got["b"] = await StreamSink(dut.bursts, seed=2, ready_prob=0.6).collect(ctx, len(want))

    run_simulation(dut, [tb, rx], vcd=False, max_cycles=200_000)
    for i, (g, w) in enumerate(zip(got["b"], want)):
        assert {k: g[k] for k in w} == w, (i, g, w)


@pytest.mark.filterwarnings("ignore")
def test_params_at_both_edges():
    """Extreme legal values accepted, one beyond refused with the parameter named."""
    ok = [dict(data_width=8), dict(data_width=1024), dict(addr_width=12), dict(addr_width=64),
          dict(max_burst=1), dict(max_burst=256), dict(max_outstanding=1), dict(max_outstanding=64),
          dict(data_width=128, len_width=5), dict(len_width=40), dict(data_width=8, len_width=1),
          dict(addr_width=12, window_base=0, window_size=4096), dict(addr_width=12, window_base=4095, window_size=1),
          dict(data_width=128, max_length=16), dict(data_width=128, len_width=8, max_length=240)]
    bad = [(dict(data_width=4), "data_width"), (dict(data_width=2048), "data_width"), (dict(data_width=96), "data_width"),
           (dict(addr_width=11), "addr_width"), (dict(addr_width=65), "addr_width"),
           (dict(max_burst=0), "max_burst"), (dict(max_burst=257), "max_burst"),
           (dict(max_outstanding=0), "max_outstanding"), (dict(max_outstanding=65), "max_outstanding"),
           (dict(data_width=128, len_width=4), "len_width"), (dict(len_width=41), "len_width"),
           (dict(addr_width=12, window_base=0, window_size=4097), "window"),
           (dict(addr_width=12, window_base=4096, window_size=1), "window"),
           (dict(addr_width=12, window_base=-1, window_size=1), "window"),
           (dict(addr_width=12, window_base=0, window_size=0), "window"),
           (dict(data_width=128, max_length=8), "max_length"), (dict(data_width=128, max_length=24), "max_length"),
           (dict(data_width=128, len_width=8, max_length=256), "max_length"),
           (dict(data_width=128, max_length=0), "max_length")]
    for kw in ok:
        p = DmaParams(**kw)
        assert p.bytes_per_beat == p.data_width // 8 and 2 ** p.size_log2 == p.bytes_per_beat
    for kw, name in bad:
        with pytest.raises(ValueError, match=name):
            DmaParams(**kw)
    assert DmaParams(addr_width=12, window_base=16).window_size == 4096 - 16      # default: to the top


@pytest.mark.parametrize("aw, lw", [(16, 32), (12, 40), (32, 40), (40, 32)])
def test_length_beyond_the_address_space_is_out_of_window(aw, lw):
    """A length field wider than the address: addr + length must not wrap in the window check
    (it did with an end register of addr_width + 2 bits: a 2**(aw+2)-byte descriptor passed as
    in-window and was split into bursts that wrapped the address space)."""
    p = DmaParams(addr_width=aw, data_width=32, len_width=lw)
    descs = [(0, 2 ** (aw + 2)), (4, 2 ** (aw + 2) - 4), (0, 2 ** lw - 4), (0, 2 ** aw + 4), (0, 2 ** aw)]
    want = [OUT, OUT, OUT if 2 ** lw - 4 > 2 ** aw else OK, OUT, OK]
    descs, want = zip(*[(d, w) for d, w in zip(descs, want) if d[1] < 2 ** lw])
    assert [check_descriptor(p, a, n) for a, n in descs] == list(want)
    dut = BurstSplitter(p)
    got = {}

    async def tb(ctx):
        await StreamSource(dut.desc).send(ctx, [{"addr": a, "length": n} for a, n in descs[:-1]])

    async def rx(ctx):
        got["b"] = await StreamSink(dut.bursts).collect(ctx, len(descs) - 1)

    run_simulation(dut, [tb, rx], vcd=False, max_cycles=10_000)
    assert [(b["null"], b["code"]) for b in got["b"]] == [(int(w != OK), w) for w in want[:-1]]
