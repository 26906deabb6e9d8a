"""RX placer (mcf_fpga/hdl/rx_placer.py) against golden.rx_placer: the NIC's local delivery landed in DDR
(AXI4Memory) at programmed entries, unmatched packets passed on m_axis.

Random tables (1..4 entries, keys drawn from a small pool so several entries share a key and
several packets share an entry, entries invalidated, ctrl writes with a bad sel), random frames
(matching, unmatched, runts, size mismatches, length 0, too long, overruns of small limits),
random back-pressure on s_axis (valid gaps), m_axis (ready gaps) and the memory (AW/W ready
stalls), AXI error ranges; both bus widths, several alignments. Afterwards the memory equals
golden's byte for byte (unwritten bytes keep their random contents), the passed frames equal
golden's (bytes and order), every entry's landed/offset (registers and the ``landed`` port) and
every counter equal golden's, and the placer is idle within a bound.
"""
import random

import pytest
from amaranth.hdl import Value
from hypothesis import given, settings, strategies as st

from mcf_fpga.spec.rx_placer import RxKind, land_bytes, packet_key, rx_kind
from mcf_fpga.golden.rx_placer import RxPlacer as GoldenPlacer
from mcf_fpga.hdl.bus import Resp
from mcf_fpga.spec.meta import MetaFields, MetaOp, ReduceOp, Stage
from mcf_fpga.golden.header import pack_header
from mcf_fpga.hdl.rx_placer import CTRL_CLEAR, CTRL_INVALIDATE, CTRL_PROGRAM, REGISTERS, RxPlacer
from mcf_fpga.sim import AXI4Memory
from mcf_fpga.sim.kit import AXI4LiteMaster, StreamSink, StreamSource, beats_to_packets, packets_to_beats, run_simulation

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")

REG = {r.name: r.offset for r in REGISTERS}
BASE, SLOT = 0x8_0000_0000, 512          # entry e lands in [BASE + e * SLOT, ...): bit 35 set (base_hi used)
MAX_PAYLOAD = 64
HB = 16                                  # header bytes at the default MetaParams
GLOBAL = ("passed", "placed", "drop_malformed", "drop_overrun", "axi_err", "err_code", "err_addr_lo",
          "err_addr_hi", "bad_sel")


def frame(meta: MetaFields, payload: bytes, length=None) -> bytes:
    return pack_header(meta.replace(length=len(payload) if length is None else length)) + payload


def metas(rng, n):
    """``n`` Meta headers (length 0) over every rx_kind; src/layer/block from small sets."""
    out = []
    for _ in range(n):
        out.append(MetaFields(stage=rng.choice([Stage.PREFILL, Stage.DECODE, Stage.DECODE]),
                              op=rng.choice([MetaOp.QUERY, MetaOp.DATA, MetaOp.PARTIAL_STATE, MetaOp.REDUCTION, MetaOp.KV_REPLICA]),
                              reduce_op=rng.choice([ReduceOp.NONE, ReduceOp.NONE, ReduceOp.MAX, ReduceOp.SUM,
                                                    ReduceOp.SOFTMAX_MERGE]),
                              src=rng.randrange(4), dst=rng.randrange(256), route_id=rng.randrange(256),
                              kv_id=(rng.randrange(3), rng.choice([0, 1, 0xFFFFFF]))))
    return out


def scenario(rng, entries, align):
    """(ctrl steps, frames): the table is programmed from a pool of Meta headers (some entries
    share a key, one may get a key no packet has, one may be invalidated, a ctrl write may name a
    bad sel); frames mostly from the pool, some from outside it, some malformed."""
    pool = metas(rng, rng.randint(1, 4))
    steps = []
    for e in range(entries):
        if rng.random() < 0.1:
            continue                                            # never programmed
        key = packet_key(rng.choice(pool)) if rng.random() < 0.85 else (RxKind.OTHER, 15, 200, 77)
        if rng.random() < 0.3:
            key = (*key[:2], None, key[3])                      # any layer (key_any_layer)
        limit = rng.choice([SLOT, SLOT, rng.randrange(0, SLOT + 1), align * rng.randint(0, 3)])
        steps.append((CTRL_PROGRAM | (CTRL_INVALIDATE if rng.random() < 0.2 else 0), e, key, BASE + e * SLOT,
                      limit))
        if rng.random() < 0.1:
            steps.append((CTRL_INVALIDATE, e, key, 0, 0))
    if rng.random() < 0.3:
        steps.append((rng.choice([CTRL_PROGRAM, CTRL_INVALIDATE]), entries + rng.randrange(3), (0, 0, 0, 0), BASE, 0))
    rng.shuffle(steps)
    frames = []
    for _ in range(rng.randint(4, 16)):
        m = rng.choice(pool)
        if rng.random() < 0.15:
            m = metas(rng, 1)[0]
        length = rng.choice([rng.randint(1, MAX_PAYLOAD), rng.randint(1, 17), MAX_PAYLOAD])
        payload = rng.randbytes(length)
        kind = rng.randrange(12)
        if kind == 0:                                           # shorter than its length
            f = frame(m, payload)[:HB + length - rng.randint(1, length)]
        elif kind == 1:                                         # longer than its length
            f = frame(m, payload) + rng.randbytes(rng.choice([1, 7, 8, 9]))
        elif kind == 2:                                         # length 0 (header alone, or a payload)
            f = frame(m, b"" if rng.random() < 0.5 else payload, length=0)
        elif kind == 3:                                         # length over max_payload (consistent size)
            f = frame(m, rng.randbytes(MAX_PAYLOAD + rng.randint(1, 20)))
        elif kind == 4:                                         # runt: less than a header
            f = frame(m, payload)[:rng.randint(1, HB - 1)]
        else:
            f = frame(m, payload)
        frames.append(f)
    return steps, frames


async def ctrl_write(ctx, csr, value, sel, key, base, limit):
    await csr.write(ctx, REG["sel"], sel)
    if value & CTRL_PROGRAM:
        kind, src, layer, block = key
        for name, v in (("key_kind", int(kind)), ("key_src", src), ("key_layer", layer or 0), ("key_block", block),
                        ("key_any_layer", int(layer is None)),
                        ("base_lo", base & 0xFFFF_FFFF), ("base_hi", base >> 32), ("limit", limit)):
            assert await csr.write(ctx, REG[name], v) == Resp.OKAY
    assert await csr.write(ctx, REG["ctrl"], value) == Resp.OKAY


def run(entries, program, batches, *, data_width=128, align=None, seed=0, valid_prob=1.0, ready_prob=1.0,
        stalls=True, error_ranges=(), after=(), bound=3000, scan_lanes=2):
    """Program the table (``program``: ctrl writes), send each batch of frames (waiting for idle
    after each), apply the ``after`` ctrl writes; compare everything with golden. Returns
    ``(golden, got)``."""
    rng = random.Random(seed)
    dut = RxPlacer(entries, data_width=data_width, max_payload=MAX_PAYLOAD, align=align, max_burst=4,
                   max_outstanding=2, scan_lanes=scan_lanes)
    gold = GoldenPlacer(entries, MAX_PAYLOAD, align=align, data_width=data_width, max_burst=4,
                        error_ranges=[(s, e, int(r)) for s, e, r in error_ranges])
    size = entries * SLOT
    mem = AXI4Memory(size, data_width=data_width, base=BASE, max_outstanding=2, error_ranges=error_ranges,
                     ready_seed=seed if stalls else None)
    image = rng.randbytes(size)
    mem.load(BASE, image)
    for step in program:
        gold.ctrl(*step)
    for batch in batches:
        for f in batch:
            gold.receive(f)
    for step in after:
        gold.ctrl(*step)
    sink = StreamSink(dut.m_axis, seed=seed + 2, ready_prob=ready_prob)
    got = {}

    async def bench(ctx):
        csr = AXI4LiteMaster(dut.csr)
        for step in program:
            await ctrl_write(ctx, csr, *step)
        src = StreamSource(dut.s_axis, seed=seed + 1, valid_prob=valid_prob)
        for batch in batches:
            await src.send(ctx, packets_to_beats(batch, 64))
            n = 0
            while ctx.get(dut.busy):
                await ctx.tick()
                n += 1
                assert n <= bound, f"placer still busy {bound} cycles after the last packet"
        for step in after:
            await ctrl_write(ctx, csr, *step)
        got["regs"] = {name: (await csr.read(ctx, REG[name]))[0] for name in GLOBAL + ("status",)}
        got["landed"], got["offset"] = [], []
        for e in range(entries + 1):                            # entry `entries`: a bad sel reads 0
            await csr.write(ctx, REG["sel"], e)
            got["landed"].append((await csr.read(ctx, REG["landed"]))[0])
            got["offset"].append((await csr.read(ctx, REG["offset"]))[0])
        got["port"] = [ctx.get(dut.landed[e]) for e in range(entries)]

    run_simulation(dut, [bench], background=[mem.testbench(dut.m_axi), sink.run], vcd=False, max_cycles=200_000)
    want = gold.registers()
    assert got["regs"] == {**want, "status": 0}, (got["regs"], want)
    assert got["landed"] == gold.landed + [0] and got["port"] == gold.landed
    assert got["offset"] == gold.offset + [0]
    passed = beats_to_packets(sink.beats, 64)
    assert passed == gold.passed_frames, "m_axis differs from golden's passed frames"
    want_img = bytearray(image)
    for a, b in gold.memory.items():
        want_img[a - BASE] = b
    img = mem.dump(BASE, size)
    if img != bytes(want_img):
        i = next(i for i in range(size) if img[i] != want_img[i])
        raise AssertionError(f"memory differs from golden first at {BASE + i:#x} (entry {i // SLOT}, "
                             f"byte {i % SLOT}): got {img[i]:#04x}, want {want_img[i]:#04x}")
    return gold, got


# ---------------------------------------------------------------- property
@given(st.integers(0, 2 ** 32 - 1), st.integers(1, 6), st.sampled_from([64, 128]), st.sampled_from([1, 2, 4]),
       st.sampled_from([1.0, 0.6]), st.sampled_from([1.0, 0.7, 0.3]), st.booleans(), st.booleans(),
       st.sampled_from([1, 2, 4]))
def test_placement_matches_golden(seed, entries, data_width, align_x, valid_prob, ready_prob, stalls, errors,
                                  scan_lanes):
    """Random tables and frames, back-pressure on every port, AXI error ranges, scans of 1 to 6
    rows (``scan_lanes``; frames arrive and wait while one is scanned): memory, passed frames,
    landed/offset and every counter equal golden."""
    rng = random.Random(seed)
    align = data_width // 8 * align_x
    program, frames = scenario(rng, entries, align)
    ranges = []
    if errors:
        for _ in range(rng.randint(1, 2)):
            s = BASE + rng.randrange(entries * SLOT // 16) * 16
            ranges.append((s, s + rng.choice([1, 16, 100]), rng.choice([Resp.SLVERR, Resp.DECERR])))
    run(entries, program, [frames], data_width=data_width, align=align, seed=seed, valid_prob=valid_prob,
        ready_prob=ready_prob, stalls=stalls, error_ranges=ranges, scan_lanes=scan_lanes)


def test_scenarios_reach_every_outcome():
    """The generator the property draws from (golden alone, 100 seeds): every outcome occurs in
    at least a tenth of the scenarios."""
    from collections import Counter
    runs = Counter()
    for seed in range(100):
        rng = random.Random(seed)
        entries = rng.randint(1, 4)
        program, frames = scenario(rng, entries, 16)
        gold = GoldenPlacer(entries, MAX_PAYLOAD, align=16)
        for step in program:
            gold.ctrl(*step)
        runs.update({o.value for o in (gold.receive(f) for f in frames)})
        runs["bad_sel"] += gold.bad_sel > 0
    for want in ("passed", "placed", "drop_malformed", "drop_overrun", "bad_sel"):
        assert runs[want] >= 10, (want, runs)


# ---------------------------------------------------------------- corner cases
KEY_META = MetaFields(stage=Stage.DECODE, op=MetaOp.QUERY, src=2, kv_id=(1, 5))
KEY = packet_key(KEY_META)


@pytest.mark.parametrize("data_width", [64, 128])
def test_payload_not_a_multiple_of_eight(data_width):
    """Payloads of 1, 13 and 63 bytes (keep on the last s_axis beat, WSTRB on the last bus beat):
    the bytes past length keep their old contents; the next packet lands at the aligned offset."""
    pkts = [frame(KEY_META, bytes(range(1, 1 + n))) for n in (13, 1, 63)]
    gold, got = run(1, [(CTRL_PROGRAM, 0, KEY, BASE, SLOT)], [pkts], data_width=data_width, stalls=False)
    bb = data_width // 8
    assert got["landed"][0] == 3 and got["offset"][0] == land_bytes(13, bb) + bb + land_bytes(63, bb)
    assert gold.memory[BASE + 12] == 13 and BASE + 13 not in gold.memory


def test_two_packets_back_to_back_at_align_boundaries():
    """align 64 on a 128-bit bus: 16 bytes then 40 bytes land at offsets 0 and 64 (offset 128),
    a third of 64 bytes fits exactly up to the limit 192, a fourth overruns."""
    pkts = [frame(KEY_META, bytes([n]) * n) for n in (16, 40, 64, 8)]
    gold, got = run(1, [(CTRL_PROGRAM, 0, KEY, BASE, 192)], [pkts], align=64, stalls=False)
    assert got["offset"][0] == 192 and got["landed"][0] == 3 and got["regs"]["drop_overrun"] == 1
    assert gold.memory[BASE + 64] == 40 and gold.memory[BASE + 128 + 63] == 64 and BASE + 56 not in gold.memory


def test_ctrl_invalidate_clear_and_bad_sel():
    """Invalidate: later packets of the key pass on, offset and landed kept; re-program: counts
    restart; a duplicate key in a higher entry takes over when the lower one is invalid; a bad sel
    counts; clear zeroes every entry and counter."""
    other = (int(RxKind.DATA), 1, 0, 0)
    prog = [(CTRL_PROGRAM, 0, KEY, BASE, SLOT), (CTRL_PROGRAM, 1, KEY, BASE + SLOT, SLOT),
            (CTRL_PROGRAM, 2, other, BASE + 2 * SLOT, SLOT), (CTRL_INVALIDATE, 7, KEY, 0, 0),
            (CTRL_PROGRAM, 3, other, BASE, 0)]
    p = frame(KEY_META, b"x" * 24)
    gold, got = run(3, prog, [[p, p]], after=[(CTRL_INVALIDATE, 0, KEY, 0, 0)], stalls=False)
    assert got["landed"] == [2, 0, 0, 0] and got["offset"] == [64, 0, 0, 0] and got["regs"]["bad_sel"] == 2
    gold, got = run(3, prog + [(CTRL_INVALIDATE, 0, KEY, 0, 0)], [[p], [p]], stalls=False)
    assert got["landed"] == [0, 2, 0, 0]                   # entry 1 (same key) takes them
    gold, got = run(3, prog, [[p, p]], after=[(CTRL_CLEAR | CTRL_PROGRAM, 0, KEY, BASE, SLOT)], stalls=False)
    assert got["landed"] == [0] * 4 and got["offset"] == [0] * 4 and got["regs"]["placed"] == 0
    assert got["regs"]["bad_sel"] == 0 and not any(gold.valid)


def test_register_reads_and_landed_port():
    """landed/offset read through sel (and the ``landed`` port) per entry; runts and unmatched
    packets pass unchanged in order; a header-only matched packet is malformed."""
    m2 = KEY_META.replace(src=3)
    pkts = [frame(KEY_META, b"a" * 8), frame(m2, b"b" * 20), frame(m2, b"c" * 9), b"\x01\x02\x03",
            frame(KEY_META.replace(kv_id=(1, 6)), b"pass"), frame(KEY_META, b""), frame(KEY_META, b"d" * 3)]
    prog = [(CTRL_PROGRAM, 0, packet_key(m2), BASE, SLOT), (CTRL_PROGRAM, 1, KEY, BASE + SLOT, SLOT)]
    gold, got = run(2, prog, [pkts], data_width=64, ready_prob=0.5, valid_prob=0.5, seed=3)
    assert got["landed"] == [2, 2, 0] and got["offset"] == [24 + 16, 8 + 8, 0]
    assert got["regs"]["passed"] == 2 and got["regs"]["drop_malformed"] == 1


def test_axi_error_keeps_offset_advanced():
    """An error range over the second packet's bytes: axi_err, first error's code and burst
    address, landed not incremented, offset advanced; the third packet lands after it."""
    p = frame(KEY_META, bytes(range(32)))
    bad = BASE + 40
    gold, got = run(1, [(CTRL_PROGRAM, 0, KEY, BASE, SLOT)], [[p, p, p]], error_ranges=[(bad, bad + 1, Resp.DECERR)],
                    stalls=False)
    assert got["landed"][0] == 2 and got["offset"][0] == 96
    assert got["regs"]["axi_err"] == 1 and got["regs"]["err_code"] == 5 and got["regs"]["err_addr_lo"] == 32
    assert got["regs"]["err_addr_hi"] == BASE >> 32


def test_rx_kind_rule():
    assert rx_kind(Stage.PREFILL, MetaOp.QUERY, ReduceOp.MAX) == RxKind.KV
    assert rx_kind(Stage.DECODE, MetaOp.QUERY, ReduceOp.MAX) == RxKind.MAX
    assert rx_kind(Stage.DECODE, MetaOp.PARTIAL_STATE, ReduceOp.SOFTMAX_MERGE) == RxKind.SUM
    assert rx_kind(Stage.DECODE, MetaOp.REDUCTION, ReduceOp.SUM) == RxKind.SUM
    assert rx_kind(Stage.DECODE, MetaOp.QUERY, ReduceOp.NONE) == RxKind.Q
    assert rx_kind(Stage.DECODE, MetaOp.DATA, ReduceOp.NONE) == RxKind.DATA
    assert rx_kind(Stage.DECODE, MetaOp.KV_REPLICA, ReduceOp.NONE) == RxKind.OTHER
    assert land_bytes(1, 16) == 16 and land_bytes(16, 16) == 16 and land_bytes(17, 16) == 32


def test_parameter_checks():
    for kw, field in ((dict(entries=0), "entries"), (dict(entries=257), "entries"), (dict(data_width=32), "data_width"),
                      (dict(max_payload=12), "max_payload"), (dict(max_payload=65536), "max_payload"),
                      (dict(align=8), "align"), (dict(align=48), "align"), (dict(addr_width=32), "addr_width")):
        with pytest.raises(ValueError, match=field):
            RxPlacer(**{"entries": 2, **kw})
    g = GoldenPlacer(2, 64, align=32)
    with pytest.raises(ValueError, match="base"):
        g.program(0, KEY, 16, 64)
    with pytest.raises(ValueError, match="entry"):
        g.program(2, KEY, 0, 64)
    with pytest.raises(ValueError, match="key src"):
        g.program(0, (0, 256, 0, 0), 0, 64)


def test_registered_block_builds():
    from mcf_fpga.hdl import blocks
    from mcf_fpga.hdl.verilog import amba_ports, to_verilog
    comp, rename = blocks.build("rx_placer", entries=2)
    assert {p.prefix for p in amba_ports(comp, rename)} >= {"s_axis", "m_axis", "m_axi", "s_axi", "landed"}
    assert "module rx_placer(" in to_verilog(comp, "rx_placer", rename=rename)


def test_long_packets_cut_through_or_drain():
    """Packets far longer than the buffer (20 beats here): an unmatched one of 1000 bytes passes
    cut through under m_axis back-pressure, a matched one with length 600 > max_payload is
    drained (malformed), a matched one 600 bytes longer than its length too."""
    long_pass = frame(KEY_META.replace(src=9), random.Random(1).randbytes(1000))
    long_bad = frame(KEY_META, bytes(600))
    long_size = frame(KEY_META, bytes(16)) + bytes(600)
    gold, got = run(1, [(CTRL_PROGRAM, 0, KEY, BASE, SLOT)], [[long_pass, long_bad, long_size, frame(KEY_META, b"ok")]],
                    ready_prob=0.3, seed=5)
    assert got["regs"]["passed"] == 1 and got["regs"]["drop_malformed"] == 2 and got["landed"][0] == 1


@pytest.mark.parametrize("scan", ["short", "long"])
@pytest.mark.parametrize("where", ["payload", "header", "last"])
def test_irregular_keep_is_malformed(where, scan):
    """Hardware-only rule (golden's frames cannot express it): a matched packet with a partial
    ``keep`` before its last beat, or a last ``keep`` that disagrees with ``length``, is
    malformed: nothing written, nothing passed, drop_malformed counts it -- whether its verdict
    comes before its last beat (one entry) or after it (the key in the last of 16 entries, one
    compared per cycle)."""
    E, e = (1, 0) if scan == "short" else (16, 15)
    dut = RxPlacer(E, data_width=64, max_payload=MAX_PAYLOAD, scan_lanes=1)
    beats = packets_to_beats([frame(KEY_META, bytes(range(20)))], 64)
    if where == "payload":
        beats[2]["keep"] = 0x0F
    elif where == "header":
        beats[0]["keep"] = 0x7F
    else:
        beats[-1]["keep"] = 0xFF
    mem = AXI4Memory(SLOT, data_width=64, base=BASE)
    sink = StreamSink(dut.m_axis)
    got = {}

    async def bench(ctx):
        csr = AXI4LiteMaster(dut.csr)
        await ctrl_write(ctx, csr, CTRL_PROGRAM, e, KEY, BASE, SLOT)
        await StreamSource(dut.s_axis).send(ctx, beats + packets_to_beats([frame(KEY_META, b"z" * 8)], 64))
        while ctx.get(dut.busy):
            await ctx.tick()
        got["regs"] = {n: (await csr.read(ctx, REG[n]))[0] for n in ("drop_malformed", "placed", "offset", "passed")}

    run_simulation(dut, [bench], background=[mem.testbench(dut.m_axi), sink.run], vcd=False, max_cycles=20_000)
    assert got["regs"] == {"drop_malformed": 1, "placed": 1, "offset": 8, "passed": 0}
    assert mem.dump(BASE, 16) == b"z" * 8 + bytes(8) and not sink.beats


@pytest.mark.parametrize("seed", range(6))
def test_table_change_during_scans_is_linearizable(seed):
    """Against the host rule (entries change while their packets arrive), to pin down the scan:
    short packets of one key K stream through a 1-lane scan of 16 rows while the host programs
    entry 0 with K and then invalidates entry 15 (K), two control writes closer together than
    one scan. Every verdict sees the table at one instant (a control write restarts the scan),
    so no packet passes on: the first p land in entry 15, the rest in entry 0 -- the memory and
    every counter equal golden's with the change after p packets."""
    E = 16
    rng = random.Random(seed)
    pkts = [frame(KEY_META, rng.randbytes(rng.randint(1, 24))) for _ in range(14)]
    dut = RxPlacer(E, data_width=128, max_payload=MAX_PAYLOAD, max_burst=4, max_outstanding=2, scan_lanes=1)
    mem = AXI4Memory(E * SLOT, data_width=128, base=BASE, max_outstanding=2, ready_seed=seed)
    image = rng.randbytes(E * SLOT)
    mem.load(BASE, image)
    sink = StreamSink(dut.m_axis, seed=seed)
    started, got = [], {}
    delay = rng.randrange(10, 120)

    async def traffic(ctx):
        while not started:
            await ctx.tick()
        await StreamSource(dut.s_axis, seed=seed, valid_prob=0.9).send(ctx, packets_to_beats(pkts, 64))

    async def host(ctx):
        csr = AXI4LiteMaster(dut.csr)
        await ctrl_write(ctx, csr, CTRL_PROGRAM, E - 1, KEY, BASE + (E - 1) * SLOT, SLOT)
        started.append(1)
        await ctx.tick().repeat(delay)
        await ctrl_write(ctx, csr, CTRL_PROGRAM, 0, KEY, BASE, SLOT)
        await csr.write(ctx, REG["sel"], E - 1)
        await csr.write(ctx, REG["ctrl"], CTRL_INVALIDATE)
        await ctx.tick().repeat(200)
        while ctx.get(dut.busy):
            await ctx.tick()
        got["regs"] = {name: (await csr.read(ctx, REG[name]))[0] for name in GLOBAL}
        got["port"] = [ctx.get(dut.landed[e]) for e in range(E)]

    run_simulation(dut, [host, traffic], background=[mem.testbench(dut.m_axi), sink.run], vcd=False,
                   max_cycles=50_000)
    p = got["port"][E - 1]
    gold = GoldenPlacer(E, MAX_PAYLOAD, data_width=128, max_burst=4)
    gold.program(E - 1, KEY, BASE + (E - 1) * SLOT, SLOT)
    for f in pkts[:p]:
        gold.receive(f)
    gold.program(0, KEY, BASE, SLOT)
    gold.invalidate(E - 1)
    for f in pkts[p:]:
        gold.receive(f)
    assert got["regs"] == gold.registers() and got["port"] == gold.landed, (p, got, gold.landed)
    assert 0 < p < len(pkts), f"the table changed outside the stream (p = {p}): move the delay"
    want = bytearray(image)
    for a, b in gold.memory.items():
        want[a - BASE] = b
    assert mem.dump(BASE, E * SLOT) == bytes(want) and not sink.beats


@pytest.mark.parametrize("lanes", [1, 2, 4])
def test_lowest_entry_wins_across_scan_rows(lanes):
    """Seven entries scanned ``lanes`` per cycle: every key lands in its own entry, whatever row
    and lane hold it; entry 6 repeats entry 3's key and gets nothing (entry 3 is lower); entry 1
    is invalid, so its key's packets pass on."""
    ms = [KEY_META.replace(src=10 + e) for e in range(7)]
    ms[6] = ms[3]
    prog = [(CTRL_PROGRAM, e, packet_key(ms[e]), BASE + e * SLOT, SLOT) for e in range(7)]
    prog.append((CTRL_INVALIDATE, 1, packet_key(ms[1]), 0, 0))
    pkts = [frame(ms[e], bytes([e]) * (8 + 8 * e)) for e in (5, 0, 6, 2, 4, 1, 3, 5)]
    gold, got = run(7, prog, [pkts], scan_lanes=lanes, stalls=False)
    assert got["landed"][:7] == [1, 0, 1, 2, 1, 2, 0] and got["regs"]["passed"] == 1


def test_short_packets_wait_for_the_scan():
    """One key in the last of 16 entries, one compared per cycle: every verdict comes long after
    a short packet's last beat, and the next packet waits for it. Back to back (no valid gaps):
    good packets, header-only ones and ones longer than their length (dropped: their beats
    drained, the next packet's kept), unmatched ones and runts (passed) -- all as golden."""
    E = 16
    rng = random.Random(4)
    key_m, other = KEY_META, KEY_META.replace(src=7)
    pkts = []
    for k in range(24):
        kind = k % 6
        if kind == 0:
            pkts.append(frame(key_m, rng.randbytes(rng.randint(1, 16))))
        elif kind == 1:
            pkts.append(frame(key_m, b"", length=rng.randint(1, 8)))               # header only
        elif kind == 2:
            pkts.append(frame(key_m, rng.randbytes(9), length=rng.randint(1, 8)))  # longer than its length
        elif kind == 3:
            pkts.append(frame(other, rng.randbytes(rng.randint(1, 20))))
        elif kind == 4:
            pkts.append(frame(key_m, rng.randbytes(3))[:rng.randint(1, HB - 1)])  # runt
        else:
            pkts.append(frame(key_m, rng.randbytes(8)))
    rng.shuffle(pkts)
    prog = [(CTRL_PROGRAM, E - 1, KEY, BASE, SLOT * E)]
    gold, got = run(E, prog, [pkts], scan_lanes=1, ready_prob=0.7, seed=9)
    assert got["regs"]["drop_malformed"] == 8 and got["regs"]["passed"] == 8 and got["landed"][E - 1] == 8


@pytest.mark.parametrize("data_width", [64, 128])
def test_bursts_split_at_4k_and_fail_alone(data_width):
    """64-byte payloads landing 16 bytes before a 4 KB boundary, max_burst 4: the bursts of
    plan_bursts (none across the boundary: 16 bytes, then the rest); an error range just past the
    boundary makes that burst alone write nothing (golden's memory: the 16 bytes before it
    land), the packet counts axi_err with that burst's address, the next packet lands after it."""
    base = BASE + 4096 - 16
    p = frame(KEY_META, bytes(range(1, 65)))
    bad = BASE + 4096 + 8
    gold, got = run(9, [(CTRL_PROGRAM, 0, KEY, base, 512)], [[p, p]], data_width=data_width,
                    error_ranges=[(bad, bad + 1, Resp.SLVERR)], seed=2)
    assert got["landed"][0] == 1 and got["regs"]["axi_err"] == 1 and got["regs"]["err_code"] == 4
    assert got["regs"]["err_addr_lo"] == 4096 and got["offset"][0] == 128
    assert gold.memory[base + 15] == 16 and BASE + 4096 not in gold.memory and gold.memory[base + 64] == 1
