"""Stream loader (mcf_fpga/hdl/dma/loader.py) against its golden twin (mcf_fpga/golden/loader.py), bit for bit.

The hardware reads an ``sim.AXI4Memory`` (random latency, rate, ready stalls, SLVERR beats,
DECERR past the end of memory) under random back-pressure on ``w``, ``sp`` and ``status``;
descriptors mix both destinations, boundary counts and every refusal cause, with ``put`` words
(immediate SP units) between them. Checked: the units of each output, the statuses, that a
status comes only after its load's final unit was taken, that units leave in the order of their
descriptors and puts across both outputs (a put word after every unit of the earlier loads,
before any of the later ones), the exact AR bursts (none for a refused load), nothing more after
the last status, and that the run ends within a bound (no hang).
"""
import random

import pytest
from hypothesis import event, given, settings, strategies as st

from mcf_fpga.golden import loader as golden
from mcf_fpga.spec.dma import DmaStatus, plan_bursts
from mcf_fpga.hdl.dma import StreamLoader
from mcf_fpga.spec.dma import DmaParams
from mcf_fpga.spec.loader import Dest, check_load, load_bytes, unit_bits, unit_stride_bytes
from mcf_fpga.hdl.bus import Resp
from mcf_fpga.sim import AXI4Memory
from mcf_fpga.sim.kit import StreamSource, plain, run_simulation

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")

BASE = 0x10000
SIZE = 3 * 4096
WIN_END = BASE + SIZE + 4096          # the window reaches 4 KB past memory: DECERR beats
AW = 32

#: (w_bits, data_width): units narrower than, equal to and wider than a beat, with padding
CONFIGS = [(24, 64), (64, 64), (128, 64), (136, 64), (24, 128), (64, 128), (128, 128), (136, 128)]


def max_count(dest, addr, w_bits, dw, len_width):
    """Largest legal count at ``addr`` (the window and 2**len_width bound it)."""
    bpb = dw // 8
    limit = min(WIN_END - addr, (2 ** len_width - 1) // bpb * bpb)
    return limit // unit_stride_bytes(unit_bits(dest, w_bits), dw)


@st.composite
def descriptors(draw, w_bits, dw, len_width):
    bpb = dw // 8
    out = []
    for _ in range(draw(st.integers(1, 5))):
        dest = draw(st.sampled_from([Dest.W, Dest.SP]))
        stride = unit_stride_bytes(unit_bits(dest, w_bits), dw)
        upb = max(1, bpb // stride)
        kind = draw(st.sampled_from(["legal", "legal", "near4k", "max", "refused", "refused", "put", "put"]))
        if kind == "put":                   # an immediate SP word (the fetcher's PUT)
            out.append(("put", draw(st.sampled_from([0, 2 ** 32 - 1, 0x5A5A0000])) + len(out)))
            continue
        if kind in ("legal", "near4k"):
            if kind == "legal":
                addr = BASE + draw(st.integers(0, (SIZE + 2048) // bpb)) * bpb
            else:                           # a few beats before a 4 KB boundary
                addr = BASE + draw(st.integers(1, 3)) * 4096 - draw(st.integers(1, 6)) * bpb
            count = draw(st.one_of(st.just(1), st.just(upb), st.just(upb + 1), st.just(2 * upb),
                                   st.integers(1, 30)))
            count = max(1, min(count, max_count(dest, addr, w_bits, dw, len_width)))
        elif kind == "max":                 # the longest legal load, or one unit more (refused)
            addr = WIN_END - draw(st.integers(4, 40)) * bpb if len_width > 12 else \
                BASE + draw(st.integers(0, 32)) * bpb
            count = max_count(dest, addr, w_bits, dw, len_width) + draw(st.sampled_from([0, 0, 1]))
        else:
            cause = draw(st.sampled_from(["dest", "zero", "misaligned", "overflow", "below",
                                          "past"]))
            addr, count = BASE + draw(st.integers(0, 64)) * bpb, draw(st.integers(1, 8))
            if cause == "dest":
                dest = draw(st.sampled_from([2, 3]))
            elif cause == "zero":
                count = 0
            elif cause == "misaligned":
                addr += draw(st.integers(1, bpb - 1))
            elif cause == "overflow":       # load_bytes >= 2**len_width (count is 32 bits)
                count = draw(st.sampled_from([2 ** 32 - 1, 2 ** len_width // stride + 1]))
            elif cause == "below":
                addr = BASE - draw(st.integers(1, 8)) * bpb
            else:
                addr = WIN_END - bpb
                count = (bpb // stride if stride < bpb else 1) + count * upb
        out.append((int(dest), addr, count))
    return out


def recorder(stream, prob, seed, into):
    """Background sink: ready with probability ``prob``; records ``(cycle, payload)``."""
    rng = random.Random(seed)

    async def tb(ctx):
        cycle = 0
        while True:
            ctx.set(stream.ready, rng.random() < prob)
            _, _, v, r, p = await ctx.tick().sample(stream.valid, stream.ready, stream.payload)
            if v and r:
                into.append((cycle, plain(p)))
            cycle += 1
    return tb


def run_loader(descs, *, w_bits, dw, len_width=32, max_burst=16, max_outstanding=2,
               max_length=None, latency=5, bytes_per_cycle=None, ready_seed=None, bad=(),
               seed=0, ready=(1.0, 1.0, 1.0), desc_valid=1.0, sp_pairs=False):
    """Run ``descs`` through the hardware and golden (``("put", word)`` entries go to ``put``,
    each offered once the previous entry was taken); assert they agree. ``bad``: byte addresses
    of beats (within memory) answering SLVERR. ``sp_pairs``: ``sp`` beats of two words."""
    bpb = dw // 8
    prm = dict(addr_width=AW, data_width=dw, len_width=len_width, max_burst=max_burst,
               max_outstanding=max_outstanding, window_base=BASE, window_size=WIN_END - BASE,
               max_length=max_length)
    dut = StreamLoader(w_bits=w_bits, sp_pairs=sp_pairs, **prm)
    bad_beats = set(bad)
    mem = AXI4Memory(SIZE, data_width=dw, base=BASE, latency=latency, max_outstanding=8,
                     bytes_per_cycle=bytes_per_cycle, ready_seed=ready_seed,
                     error_ranges=[(a, a + bpb, Resp.SLVERR) for a in bad_beats])
    mem.load(BASE, random.Random(seed).randbytes(SIZE))
    want = golden.run(bytes(mem.mem), BASE, descs, w_bits=w_bits, data_width=dw, addr_width=AW,
                      len_width=len_width, window_base=BASE, window_size=WIN_END - BASE,
                      max_length=max_length, bad_beats=bad_beats, sp_pairs=sp_pairs)
    got = {"w": [], "sp": [], "status": []}
    loads = [d for d in descs if d[0] != "put"]

    async def tb_desc(ctx):
        rng = random.Random(seed)
        for d in descs:
            s = dut.put if d[0] == "put" else dut.desc
            await StreamSource(s, seed=rng.getrandbits(32), valid_prob=desc_valid).send(
                ctx, [{"data": d[1]}] if d[0] == "put" else [{"dest": d[0], "addr": d[1], "count": d[2]}])

    async def tb_end(ctx):
        while len(got["status"]) < len(loads) or len(got["sp"]) < len(want.sp):
            await ctx.tick()
        await ctx.tick().repeat(40)          # nothing more may come out

    async def serve(ctx):
        await mem.serve(ctx, dut.m_axi)

    units = len(want.w) + len(want.sp)
    beats = sum(load_bytes(c, unit_bits(d, w_bits), dw) // bpb for d, a, c in loads
                if check_load(dut.p, d, a, c, w_bits) == DmaStatus.OK)
    slow = 1 / min(ready)
    bound = int(400 + 40 * len(descs) * slow + (latency + 4) * (beats + units) * slow)
    run_simulation(dut, [tb_desc, tb_end], vcd=False, max_cycles=bound,
                   background=[serve] + [recorder(getattr(dut, n), pr, seed + 1 + i, got[n])
                                         for i, (n, pr) in enumerate(zip(("w", "sp", "status"),
                                                                         ready))])
    assert [(u["data"], u["last"]) for _, u in got["w"]] == want.w
    if sp_pairs:
        assert [tuple([u["data"], u["data1"]][:1 + u["two"]]) for _, u in got["sp"]] == want.sp
    else:
        assert [u["data"] for _, u in got["sp"]] == want.sp

    def sp_beats(c):
        """``sp`` beats of an SP load of ``c`` words."""
        return (c + 1) // 2 if sp_pairs else c
    assert [(s["code"], s["addr"]) for _, s in got["status"]] == want.status
    # a status only after its load's final unit was accepted
    nw = nsp = 0
    for (d, a, c), (cyc, s) in zip(loads, got["status"]):
        if check_load(dut.p, d, a, c, w_bits) != DmaStatus.OK:
            continue
        if d == Dest.W:
            nw += c
            assert got["w"][nw - 1][0] < cyc, f"status of load {a:#x} before its final unit"
        else:
            nsp += sp_beats(c)
            assert got["sp"][nsp - 1][0] < cyc, f"status of load {a:#x} before its final unit"
    # units leave in the order of their entries, across both outputs: entry i's units (a put's
    # word) all before entry i + 1's
    owner = {"w": [], "sp": []}
    for i, d in enumerate(descs):
        if d[0] == "put":
            owner["sp"].append(i)
        elif check_load(dut.p, *d, w_bits) == DmaStatus.OK:
            owner["w" if d[0] == Dest.W else "sp"] += [i] * (d[2] if d[0] == Dest.W else sp_beats(d[2]))
    order = sorted((cyc, owner[n][k]) for n in ("w", "sp") for k, (cyc, _) in enumerate(got[n]))
    for (c0, i0), (c1, i1) in zip(order, order[1:]):
        assert i0 <= i1, f"cycle {c1}: a unit of entry {i1} after one of entry {i0} (cycle {c0})"
    # the exact bursts: none for a refused load
    p = DmaParams(**prm)
    assert [(a, ln + 1) for _, k, a, ln, _ in mem.log if k == "R"] == [
        b for d, a, c in loads if check_load(p, d, a, c, w_bits) == DmaStatus.OK
        for b in plan_bursts(p, a, load_bytes(c, unit_bits(d, w_bits), dw))]
    return want


@settings(deadline=None)
@given(cfg=st.sampled_from(CONFIGS), len_width=st.sampled_from([10, 32]), data=st.data(),
       seed=st.integers(0, 2 ** 16),
       ready=st.tuples(*[st.sampled_from([1.0, 0.5, 0.2])] * 2, st.sampled_from([1.0, 0.3])),
       mcfg=st.fixed_dictionaries({
           "latency": st.integers(1, 30), "bytes_per_cycle": st.sampled_from([None, 4]),
           "ready_seed": st.one_of(st.none(), st.integers(0, 2 ** 32)),
           "max_burst": st.sampled_from([4, 16]), "max_outstanding": st.sampled_from([1, 2, 4]),
           "max_length": st.sampled_from([None, None, 512])}),
       sp_pairs=st.booleans())
def test_loader_against_golden(cfg, len_width, data, seed, ready, mcfg, sp_pairs):
    w_bits, dw = cfg
    descs = data.draw(descriptors(w_bits, dw, len_width))
    bpb = dw // 8
    p = DmaParams(addr_width=AW, data_width=dw, len_width=len_width, window_base=BASE,
                  window_size=WIN_END - BASE, max_length=mcfg["max_length"])
    read = sorted({b for d, a, c in (x for x in descs if x[0] != "put") if check_load(p, d, a, c, w_bits) == DmaStatus.OK
                   for b in range(a, min(a + load_bytes(c, unit_bits(d, w_bits), dw),
                                         BASE + SIZE), bpb)})
    bad = data.draw(st.lists(st.sampled_from(read), max_size=2)) if read else []
    want = run_loader(descs, w_bits=w_bits, dw=dw, len_width=len_width, bad=bad, seed=seed,
                      ready=ready, desc_valid=0.8, sp_pairs=sp_pairs, **mcfg)
    for code, _ in want.status:                  # --hypothesis-show-statistics
        event(f"status {DmaStatus(code).name}")
    event(f"w units: {bool(want.w)}, sp units: {bool(want.sp)}")
    event(f"puts: {sum(d[0] == 'put' for d in descs)}")


@pytest.mark.parametrize("w_bits,dw,sp_pairs", [(24, 64, False), (136, 128, False), (136, 128, True)])
def test_boundaries_and_every_refusal(w_bits, dw, sp_pairs):
    """Fixed list: count 1, units exactly filling a beat, a 4 KB crossing, the longest legal
    load (len_width 10) and each refusal cause between them, SLVERR on one beat, then loads
    with several causes at once (the first in check_load's order wins). ``sp_pairs``: the same
    lengths and refusals with SP words two a beat."""
    bpb = dw // 8
    sw = unit_stride_bytes(w_bits, dw)
    upb = max(1, bpb // sw)
    lmax = (2 ** 10 - 1) // bpb * bpb
    descs = [(Dest.W, BASE, 1), (3, BASE, 4), (Dest.SP, BASE + bpb, 1),
             (Dest.W, BASE + 2 * bpb, upb), (Dest.SP, BASE, 0),
             (Dest.SP, BASE + 4096 - 2 * bpb, bpb // 4 * 3 + 1), (Dest.W, BASE + 1, 1),
             (Dest.W, BASE + 0x200, lmax // sw), (Dest.W, BASE, lmax // sw + 1),
             (Dest.SP, BASE - bpb, 1), (Dest.SP, WIN_END - bpb, bpb // 4 + 1),
             (Dest.SP, BASE, 2 ** 32 - 1), (2, BASE, 1), (Dest.W, BASE + 3 * bpb, 2 * upb + 1),
             # the order of the causes; 256 SP words = 2**10 bytes: the length wraps to 0
             (3, BASE + 1, 0), (Dest.W, BASE + 1, 0), (Dest.SP, BASE + 1, 256),
             (Dest.SP, BASE, 256), (Dest.SP, BASE - bpb, 256)]
    want = run_loader(descs, w_bits=w_bits, dw=dw, len_width=10, bad=[BASE + 0x200 + bpb],
                      seed=3, ready=(0.5, 0.5, 0.3), latency=7, sp_pairs=sp_pairs)
    S = DmaStatus
    assert [c for c, _ in want.status] == [S.OK, S.BAD_DEST, S.OK, S.OK, S.ZERO_LENGTH, S.OK,
                                           S.MISALIGNED, S.SLVERR, S.TOO_LONG, S.OUT_OF_WINDOW,
                                           S.OUT_OF_WINDOW, S.TOO_LONG, S.BAD_DEST, S.OK,
                                           S.BAD_DEST, S.ZERO_LENGTH, S.MISALIGNED, S.TOO_LONG,
                                           S.TOO_LONG]
    assert want.status[7] == (S.SLVERR, BASE + 0x200 + bpb)


def test_puts_between_loads_in_order():
    """Put words between loads of both outputs: each leaves on ``sp`` after the earlier loads'
    units (W ones too) and before the later ones'; a refused load between them changes nothing;
    no status and no bus read for a put."""
    descs = [("put", 1), (Dest.SP, BASE, 3), ("put", 2), ("put", 0xFFFFFFFF), (Dest.W, BASE + 64, 5),
             ("put", 3), (3, BASE, 1), ("put", 4), (Dest.SP, BASE + 128, 2), ("put", 5)]
    want = run_loader(descs, w_bits=64, dw=128, ready=(0.3, 0.4, 0.5), latency=12, desc_valid=0.5)
    assert [want.sp[i] for i in (0, 4, 5, 6, 7, 10)] == [1, 2, 0xFFFFFFFF, 3, 4, 5] and len(want.sp) == 11
    assert [c for c, _ in want.status] == [DmaStatus.OK, DmaStatus.OK, DmaStatus.BAD_DEST, DmaStatus.OK]


def test_put_waits_behind_a_held_descriptor():
    """The reader is busy with a long load, so the next descriptor is held for its check; the put
    offered meanwhile must wait for it (not overtake it into the queue)."""
    descs = [(Dest.SP, BASE, 200), (Dest.W, BASE + 0x1000, 4), ("put", 7), (Dest.SP, BASE + 0x800, 2), ("put", 8)]
    want = run_loader(descs, w_bits=64, dw=128, max_burst=4, max_outstanding=1, ready=(0.5, 0.2, 1.0), latency=9)
    assert want.sp[200:] == [7] + want.sp[201:203] + [8]


def test_descriptor_offered_with_a_put_goes_first():
    """``desc`` and ``put`` offered in the same cycle: the descriptor is taken first (put.ready
    low while a descriptor is offered or held), so the put word follows its units."""
    dut = StreamLoader(w_bits=64, addr_width=AW, data_width=128, window_base=BASE, window_size=WIN_END - BASE)
    mem = AXI4Memory(SIZE, data_width=128, base=BASE, latency=4)
    mem.load(BASE, bytes(range(256)) * 48)
    sp = []

    async def tb(ctx):
        ctx.set(dut.desc.payload.dest, Dest.SP)
        ctx.set(dut.desc.payload.addr, BASE)
        ctx.set(dut.desc.payload.count, 2)
        ctx.set(dut.put.payload.data, 0xCAFE)
        ctx.set(dut.desc.valid, 1)
        ctx.set(dut.put.valid, 1)
        _, _, dr, pr = await ctx.tick().sample(dut.desc.ready, dut.put.ready)
        assert dr and not pr
        ctx.set(dut.desc.valid, 0)
        await ctx.tick().until(dut.put.ready)
        ctx.set(dut.put.valid, 0)
        ctx.set(dut.status.ready, 1)
        ctx.set(dut.sp.ready, 1)
        while len(sp) < 3:
            _, _, v, d = await ctx.tick().sample(dut.sp.valid, dut.sp.payload.data)
            if v:
                sp.append(d)

    async def serve(ctx):
        await mem.serve(ctx, dut.m_axi)
    run_simulation(dut, [tb], background=[serve], vcd=False, max_cycles=500)
    assert sp == [0x03020100, 0x07060504, 0xCAFE]


def test_golden_image_rule_by_hand():
    """The image rule on a hand example: 24-bit units on a 64-bit bus are 4 bytes apart,
    136-bit units on a 128-bit bus 32 bytes apart; tail and padding dropped."""
    mem = bytes(range(256))
    r = golden.run(mem, 0, [(Dest.W, 8, 3), (Dest.SP, 16, 1)], w_bits=24, data_width=64)
    assert r.w == [(0x0A0908, 0), (0x0E0D0C, 0), (0x121110, 1)] and r.sp == [0x13121110]
    assert r.status == [(0, 8), (0, 16)]
    r = golden.run(mem, 0, [(Dest.W, 0, 2)], w_bits=136, data_width=128)
    assert r.w == [(int.from_bytes(mem[0:17], "little"), 0), (int.from_bytes(mem[32:49], "little"), 1)]
    r = golden.run({0x100 + i: i for i in range(16)}, 0, [(Dest.SP, 0x100, 2)], w_bits=8,
                   data_width=128, bad_beats={0x100})
    assert r.sp == [0, 0] and r.status == [(DmaStatus.SLVERR, 0x100)]


@pytest.mark.parametrize("bad", [0, -8, 12, 7, "64"])
def test_w_bits_validation(bad):
    with pytest.raises(ValueError, match=r"w_bits must be a positive multiple of 8.*got"):
        StreamLoader(w_bits=bad)
    with pytest.raises(ValueError, match=r"w_bits"):
        golden.run(b"", 0, [], w_bits=bad, data_width=128)


def test_sp_pairs_needs_a_64_bit_bus():
    with pytest.raises(ValueError, match=r"sp_pairs needs a data_width of at least 64 bits.*got 32"):
        StreamLoader(w_bits=64, sp_pairs=True, addr_width=32, data_width=32)


def test_dma_params_pass_through():
    with pytest.raises(ValueError, match="data_width"):
        StreamLoader(w_bits=64, data_width=48)
    assert StreamLoader(w_bits=2048).p.data_width == 128


def test_dma_status_is_the_documented_abi():
    """DmaStatus (with the loader's BAD_DEST) equals its table in docs/memory.md, value for value."""
    import re
    from pathlib import Path
    doc = (Path(__file__).resolve().parents[3] / "docs" / "memory.md").read_text()
    rows = re.findall(r"^\| (\d+) \| `([A-Z_]+)` \|", doc, flags=re.M)
    names = {m.name for m in DmaStatus}
    assert {(name, int(v)) for v, name in rows if name in names} == {(m.name, m.value) for m in DmaStatus}


def test_byte_bus_length_never_wraps():
    """An 8-bit bus: an SP word is 4 beats, so ``count * 4`` needs 34 bits; 2**31 words is
    TOO_LONG, not a wrapped length of 0. Small legal loads of both outputs around it."""
    descs = [(Dest.SP, BASE, 3), (Dest.SP, BASE, 2 ** 31), (Dest.W, BASE + 5, 2),
             (Dest.SP, BASE, 2 ** 32 - 1), (Dest.W, BASE + 1, 1)]
    want = run_loader(descs, w_bits=8, dw=8, ready=(0.5, 0.5, 0.5), latency=3)
    assert [c for c, _ in want.status] == [DmaStatus.OK, DmaStatus.TOO_LONG, DmaStatus.OK,
                                           DmaStatus.TOO_LONG, DmaStatus.OK]
