"""The node top's DMA front-end (mcf_fpga/boards/node_dma.py) against AXI4Memory models of DDR (one per
HP port, sharing one memory image) with random latency, bandwidth and AR/AW/W stalls, and
random back-pressure on the node-side streams.

Golden: the bytes placed in memory (commands, weight tiles, scratchpad words) and the packets
/ words the test pushes (RX ring records, SPR output), laid out as the module docstring says.
"""
import random

from hypothesis import given, settings, strategies as st

from mcf_fpga.boards.node_dma import (NodeDMA, DMA_ID, INFO_REGS, RX_REGS, KV_REGS, KV_EV_REGS, Reject, engine_offset,
                             rx_slot_bytes)
from mcf_fpga.hdl.bus import Resp
from mcf_fpga.spec.dma import DmaStatus
from mcf_fpga.sim import AXI4Memory
from mcf_fpga.sim.kit import (AXI4LiteMaster, StreamSource, StreamSink, run_simulation, packets_to_beats)

BASE = 0x4000_0000
SIZE = 3 * 4096
CMD_BITS, W_BITS, W_TILE = 432, 256, 8      # W_TILE: HP words of the largest tile
MAX_PACKET = 56
KV_CMD, KV_RESP = 40, 16


def make_dut(w_lanes=1, sp_pairs=False):
    return NodeDMA(cmd_bits=CMD_BITS, w_bits=W_BITS, w_tile_words=W_TILE, max_packet=MAX_PACKET,
                   kv_cmd_bits=KV_CMD, kv_resp_bits=KV_RESP, window_base=BASE, window_size=SIZE, w_lanes=w_lanes,
                   sp_pairs=sp_pairs)


def sp_beats(words, pairs):
    """The ``sp_in`` beats of one descriptor's words as (word 0, word 1 or None, keep): one word
    a beat, or with ``pairs`` two a beat from the first, an odd count's last word alone
    (``hdl.host_sp``)."""
    if not pairs:
        return [(w, None, None) for w in words]
    return [(words[j], words[j + 1] if j + 1 < len(words) else None, 0xff if j + 1 < len(words) else 0x0f)
            for j in range(0, len(words), 2)]


def sp_got(beat):
    """A received ``sp_in`` beat as :func:`sp_beats` writes it (word 1 only when ``keep`` says so)."""
    if "keep" not in beat:
        return beat["data"], None, None
    d, k = beat["data"], beat["keep"]
    return d & 0xFFFF_FFFF, (d >> 32) if k & 0x10 else None, k


def memories(dut, cfg, seed, n=3):
    """``n`` AXI4Memory models answering hp0..2 (and hpc0, hpc1), all on the same bytearray (one DDR)."""
    mems = []
    for k in range(n):
        m = AXI4Memory(SIZE, base=BASE, latency=cfg[0], bytes_per_cycle=cfg[1], max_outstanding=4,
                       ready_seed=None if cfg[2] is None else cfg[2] + k)
        if mems:
            m.mem = mems[0].mem
        mems.append(m)
    mems[0].mem[:] = random.Random(seed).randbytes(SIZE)
    return mems


mem_cfg = st.tuples(st.integers(1, 24), st.sampled_from([None, 8]), st.one_of(st.none(), st.integers(0, 2 ** 20)))


async def post(ctx, bus, name, addr, length):
    assert await bus.write(ctx, engine_offset(name, "addr_lo"), addr & 0xFFFFFFFF) == Resp.OKAY
    assert await bus.write(ctx, engine_offset(name, "addr_hi"), addr >> 32) == Resp.OKAY
    assert await bus.write(ctx, engine_offset(name, "length"), length) == Resp.OKAY
    assert await bus.write(ctx, engine_offset(name, "go"), 1) == Resp.OKAY


async def reg(ctx, bus, off):
    v, r = await bus.read(ctx, off)
    assert r == Resp.OKAY
    return v


async def wait_done(ctx, bus, name, n):
    while await reg(ctx, bus, engine_offset(name, "done")) < n:
        await ctx.tick().repeat(8)


@settings(max_examples=9)
@given(n_cmd=st.integers(1, 5), tiles=st.lists(st.integers(1, W_TILE // 2), min_size=1, max_size=3),
       sp=st.lists(st.integers(1, 13), min_size=1, max_size=3), sp_refused=st.booleans(), cfg=mem_cfg,
       seed=st.integers(0, 2 ** 16), rp=st.sampled_from([1.0, 0.4]), w_lanes=st.sampled_from([1, 2, 3]),
       sp_pairs=st.booleans())
def test_readers_into_node_streams(n_cmd, tiles, sp, sp_refused, cfg, seed, rp, w_lanes, sp_pairs):
    """Commands, weight tiles and scratchpad words from DDR into the node's streams, bit-exact.
    ``sp_in`` descriptors are word-granular: n words in, exactly n words out (no padding word
    of the last beat), also when a refused descriptor (misaligned address) sits between them.
    ``w_lanes`` > 1: the weight tiles striped over HP2, HPC0 (and HPC1) give the same stream.
    ``sp_pairs``: the same words two a beat, each descriptor's from its first word."""
    dut = make_dut(w_lanes, sp_pairs)
    mems = memories(dut, cfg, seed, 3 + w_lanes - 1)
    image = mems[0].mem
    cmd_at, w_at, sp_at = BASE, BASE + 4096, BASE + 8192
    want_cmd = [int.from_bytes(image[k * 64:(k + 1) * 64], "little") & ((1 << CMD_BITS) - 1)
                for k in range(n_cmd)]
    want_w, off = [], 4096
    for t in tiles:
        for b in range(t):
            want_w.append({"data": int.from_bytes(image[off:off + 32], "little"), "last": int(b == t - 1)})
            off += 32
    sp_desc, want_sp, off = [], [], 8192
    for n in sp:                                   # each descriptor at the next 16-byte boundary
        sp_desc.append((BASE + off, 4 * n))
        want_sp += sp_beats([int.from_bytes(image[off + 4 * j:off + 4 * j + 4], "little") for j in range(n)], sp_pairs)
        off += 16 * -(-n // 4)
    if sp_refused:
        sp_desc.insert(len(sp_desc) // 2, (BASE + 8192 + 4, 16))
    bus = AXI4LiteMaster(dut.s_axi)
    sinks = [StreamSink(s, seed=seed + i, ready_prob=rp) for i, s in enumerate((dut.cmd, dut.w, dut.sp_in))]
    got = {}

    async def host(ctx):
        assert await reg(ctx, bus, INFO_REGS["id"]) == DMA_ID
        assert await reg(ctx, bus, INFO_REGS["cmd_bytes"]) == 64
        assert await reg(ctx, bus, INFO_REGS["w_beat_bytes"]) == 32
        assert await reg(ctx, bus, INFO_REGS["w_tile_bytes"]) == 16 * W_TILE
        await post(ctx, bus, "cmd", cmd_at, 64 * n_cmd)
        for a, length in sp_desc:
            await post(ctx, bus, "sp_in", a, length)
        a = w_at
        for t in tiles:
            await post(ctx, bus, "w", a, 32 * t)
            a += 32 * t
        for name, n in (("cmd", 1), ("sp_in", len(sp_desc)), ("w", len(tiles))):
            await wait_done(ctx, bus, name, n)
            assert await reg(ctx, bus, engine_offset(name, "posted")) == n
            assert await reg(ctx, bus, engine_offset(name, "errors")) == int(name == "sp_in" and sp_refused)
            if name != "sp_in":
                assert await reg(ctx, bus, engine_offset(name, "code")) == DmaStatus.OK

    def collect(i, key, n):
        async def run(ctx):
            got[key] = await sinks[i].collect(ctx, n)
            await ctx.tick().repeat(40)          # no word beyond the n asked for
            got[key + "_extra"] = ctx.get(sinks[i].stream.valid)
        return run

    run_simulation(dut, [host, collect(0, "cmd", n_cmd), collect(1, "w", len(want_w)),
                         collect(2, "sp", len(want_sp))],
                   background=[mems[k].testbench(getattr(dut, f"m_axi_hp{k}")) for k in range(3)]
                   + [mems[3 + i].testbench(getattr(dut, f"m_axi_hpc{i}")) for i in range(w_lanes - 1)],
                   max_cycles=60_000)
    # every lane read its share: weight beat k of a tile on lane k mod w_lanes
    lanes = [mems[2]] + mems[3:]
    for i, mem in enumerate(lanes):
        assert sum(ln + 1 for _, kind, _, ln, _ in mem.log if kind == "R") == \
            sum(2 * len(range(i, t, w_lanes)) for t in tiles)
    assert got["cmd"] == want_cmd
    assert got["w"] == want_w
    assert [sp_got(b) for b in got["sp"]] == want_sp
    assert not got["sp_extra"]


@settings(max_examples=4)
@given(words=st.lists(st.lists(st.integers(0, 2 ** 32 - 1), min_size=1, max_size=11), min_size=1, max_size=3),
       packets=st.lists(st.binary(min_size=1, max_size=MAX_PACKET + 20), min_size=1, max_size=6),
       slots=st.integers(1, 3), cfg=mem_cfg, seed=st.integers(0, 2 ** 16), vp=st.sampled_from([1.0, 0.5]))
def test_writers_sp_out_and_rx_ring(words, packets, slots, cfg, seed, vp):
    """SPR words and received packets written back to DDR: SP words at the posted address,
    packets as RX ring records (length, truncation flag, sequence, bytes); the ring wraps
    while the host consumes records (RX_RP), and bytes past each record stay untouched."""
    dut = make_dut()
    mems = memories(dut, cfg, seed)
    image = mems[0].mem
    before = bytes(image)
    sp_at, ring = BASE, BASE + 4096
    slot_b = rx_slot_bytes(MAX_PACKET)
    bus = AXI4LiteMaster(dut.s_axi)
    sp_src = StreamSource(dut.sp_out, seed=seed, valid_prob=vp)
    rx_src = StreamSource(dut.rx, seed=seed + 1, valid_prob=vp)
    records = []
    ready = {"ring": False}

    async def host(ctx):
        assert await reg(ctx, bus, INFO_REGS["rx_slot_bytes"]) == slot_b
        await bus.write(ctx, RX_REGS["rx_base_lo"], ring & 0xFFFFFFFF)
        await bus.write(ctx, RX_REGS["rx_base_hi"], ring >> 32)
        await bus.write(ctx, RX_REGS["rx_slots"], slots)
        ready["ring"] = True
        a = sp_at
        for w in words:
            await post(ctx, bus, "sp_out", a, 16 * -(-len(w) // 4))
            a += 16 * -(-len(w) // 4) + 16
        rp = 0
        while rp < len(packets):
            wp = await reg(ctx, bus, RX_REGS["rx_wp"])
            assert wp - rp <= slots
            while rp < wp:       # read the record, then hand the slot back
                s = ring + (rp % slots) * slot_b - BASE
                records.append(bytes(image[s:s + slot_b]))
                rp += 1
                await bus.write(ctx, RX_REGS["rx_rp"], rp)
            await ctx.tick().repeat(4)
        await wait_done(ctx, bus, "sp_out", len(words))
        assert await reg(ctx, bus, engine_offset("sp_out", "errors")) == 0
        assert await reg(ctx, bus, RX_REGS["rx_errors"]) == 0
        assert await reg(ctx, bus, RX_REGS["rx_dropped"]) == 0

    async def sp_feed(ctx):
        beats = []
        for w in words:
            beats += [{"data": x, "last": int(j == len(w) - 1)} for j, x in enumerate(w)]
        await sp_src.send(ctx, beats)

    async def rx_feed(ctx):
        while not ready["ring"]:          # packets before RX_SLOTS is set are dropped (counted)
            await ctx.tick()
        await rx_src.send(ctx, packets_to_beats(packets, 64))

    run_simulation(dut, [host, sp_feed, rx_feed],
                   background=[mems[k].testbench(getattr(dut, f"m_axi_hp{k}")) for k in range(3)],
                   max_cycles=30_000)
    # scratchpad words: little-endian int32 at the posted addresses; the rest of a beat untouched
    a = 0
    for w in words:
        n = 16 * -(-len(w) // 4)
        want = b"".join(x.to_bytes(4, "little") for x in w)
        want += before[a + len(want):a + n]
        assert bytes(image[a:a + n]) == want
        a += n + 16
    cap = slot_b - 16
    for k, (pkt, rec) in enumerate(zip(packets, records)):
        stored = pkt[:cap]
        assert int.from_bytes(rec[0:4], "little") == len(stored)
        assert int.from_bytes(rec[4:8], "little") == int(len(pkt) > cap)
        assert int.from_bytes(rec[8:12], "little") == k
        assert rec[16:16 + len(stored)] == stored
    assert len(records) == len(packets)


@settings(max_examples=8)
@given(bad=st.lists(st.sampled_from(["zero", "misaligned", "below", "past", "record", "toolong", "words"]),
                    min_size=1, max_size=5), seed=st.integers(0, 2 ** 16))
def test_bad_descriptors_answered_never_hang(bad, seed):
    """Illegal descriptors get their status code (engine: zero length, misaligned, outside the
    window, longer than the largest weight tile; front-end: not a whole record, not whole sp_in
    words) and no bus traffic;
    a full queue rejects with QUEUE_FULL; a good descriptor after them still works."""
    dut = make_dut()
    mems = memories(dut, (5, None, seed), seed)
    bus = AXI4LiteMaster(dut.s_axi)
    got = {}
    cases = {"zero": ("cmd", BASE, 0, DmaStatus.ZERO_LENGTH),
             "misaligned": ("cmd", BASE + 8, 64, DmaStatus.MISALIGNED),
             "below": ("cmd", BASE - 64, 64, DmaStatus.OUT_OF_WINDOW),
             "past": ("cmd", BASE + SIZE - 64, 128, DmaStatus.OUT_OF_WINDOW),
             "record": ("cmd", BASE, 48, Reject.BAD_RECORD),
             "words": ("sp_in", BASE, 6, Reject.BAD_RECORD),            # sp_in: whole 4-byte words
             "toolong": ("w", BASE, 16 * W_TILE + 32, DmaStatus.TOO_LONG)}

    async def host(ctx):
        for b in bad:
            name, addr, length, code = cases[b]
            before = {r: await reg(ctx, bus, engine_offset(name, r)) for r in ("posted", "done", "rejected")}
            await post(ctx, bus, name, addr, length)
            if code == Reject.BAD_RECORD:
                assert await reg(ctx, bus, engine_offset(name, "rejected")) == before["rejected"] + 1
                assert (await reg(ctx, bus, engine_offset(name, "code")) >> 8) & 0xF == Reject.BAD_RECORD
                assert await reg(ctx, bus, engine_offset(name, "posted")) == before["posted"]
            else:
                await wait_done(ctx, bus, name, before["done"] + 1)
                c = await reg(ctx, bus, engine_offset(name, "code"))
                assert c & 0xF == code and (c >> 8) & 0xF == Reject.NONE
                st_addr = await reg(ctx, bus, engine_offset(name, "st_addr_lo"))
                st_addr |= await reg(ctx, bus, engine_offset(name, "st_addr_hi")) << 32
                assert st_addr == addr
        assert [x for x in mems[0].log + mems[1].log + mems[2].log] == []   # nothing reached the bus
        # fill the cmd queue while the sink is stopped: the 5th post (queue 4 deep + 1 in the
        # reader) or later is rejected, nothing hangs
        ctx.set(dut.cmd.ready, 0)
        n_rej0 = await reg(ctx, bus, engine_offset("cmd", "rejected"))
        for k in range(12):
            await post(ctx, bus, "cmd", BASE, 64)
        rej = await reg(ctx, bus, engine_offset("cmd", "rejected")) - n_rej0
        assert rej >= 1
        assert (await reg(ctx, bus, engine_offset("cmd", "code")) >> 8) & 0xF == Reject.QUEUE_FULL
        posted = await reg(ctx, bus, engine_offset("cmd", "posted"))
        done0 = await reg(ctx, bus, engine_offset("cmd", "done"))
        got["n"] = posted - done0
        got["posted"] = posted

    async def drain(ctx):
        await ctx.tick().repeat(10)

    run_simulation(dut, [host, drain], max_cycles=40_000,
                   background=[mems[k].testbench(getattr(dut, f"m_axi_hp{k}")) for k in range(3)])
    assert 1 <= got["n"] <= 11


def test_kv_registers():
    """KV commands through KV_CMD_LO/HI + KV_GO reach kvcmd bit-exactly; responses pushed on
    kvresp read back from KV_RESP (bit 31 valid) in order and are popped by the read; a 5th
    command while kvcmd is stalled is rejected and counted."""
    dut = make_dut()
    bus = AXI4LiteMaster(dut.s_axi)
    rng = random.Random(3)
    cmds = [rng.getrandbits(KV_CMD) for _ in range(4)]
    resps = [rng.getrandbits(KV_RESP) for _ in range(3)]
    got = []

    async def host(ctx):
        ctx.set(dut.kvcmd.ready, 0)
        for c in cmds + [rng.getrandbits(KV_CMD)]:
            await bus.write(ctx, KV_REGS["kv_cmd_lo"], c & 0xFFFFFFFF)
            await bus.write(ctx, KV_REGS["kv_cmd_hi"], c >> 32)
            await bus.write(ctx, KV_REGS["kv_go"], 1)
        assert await reg(ctx, bus, KV_REGS["kv_posted"]) == 4
        assert await reg(ctx, bus, KV_REGS["kv_rejected"]) == 1
        ctx.set(dut.kvcmd.ready, 1)
        for _ in range(4):
            v, = await ctx.tick().sample(dut.kvcmd.payload).until(dut.kvcmd.valid)
            got.append(v)
        ctx.set(dut.kvcmd.ready, 0)
        assert await reg(ctx, bus, KV_REGS["kv_resp"]) == 0            # nothing yet
        for r in resps:
            ctx.set(dut.kvresp.payload, r)
            ctx.set(dut.kvresp.valid, 1)
            await ctx.tick()
        ctx.set(dut.kvresp.valid, 0)
        for r in resps:
            assert await reg(ctx, bus, KV_REGS["kv_resp"]) == (1 << 31) | r
        assert await reg(ctx, bus, KV_REGS["kv_resp"]) == 0

    run_simulation(dut, [host], max_cycles=5_000)
    assert got == cmds


def test_rx_without_ring_drops_and_counts():
    """While RX_SLOTS = 0 (ring not configured) received packets are dropped and counted in
    RX_DROPPED, nothing is written, and the NIC side is never blocked."""
    dut = make_dut()
    mems = memories(dut, (3, None, None), 7)
    bus = AXI4LiteMaster(dut.s_axi)
    packets = [bytes(range(n)) for n in (1, 17, MAX_PACKET, MAX_PACKET + 9)]
    src = StreamSource(dut.rx, seed=1)
    seen = {}

    async def feed(ctx):
        await src.send(ctx, packets_to_beats(packets, 64))
        await ctx.tick().repeat(40)
        seen["dropped"] = await reg(ctx, bus, RX_REGS["rx_dropped"])
        seen["wp"] = await reg(ctx, bus, RX_REGS["rx_wp"])

    run_simulation(dut, [feed], max_cycles=5_000,
                   background=[mems[k].testbench(getattr(dut, f"m_axi_hp{k}")) for k in range(3)])
    assert seen == {"dropped": len(packets), "wp": 0}
    assert mems[0].log == []


# ------------------------------------------------------------------ kv_install: HP2 writes, events
EV_BITS = 54


def make_install_dut():
    return NodeDMA(cmd_bits=CMD_BITS, w_bits=W_BITS, w_tile_words=W_TILE, max_packet=MAX_PACKET,
                   kv_cmd_bits=KV_CMD, kv_resp_bits=KV_RESP, window_base=BASE, window_size=SIZE,
                   kv_install=True, kv_event_bits=EV_BITS)


@settings(max_examples=4)
@given(bursts=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 7)), min_size=1, max_size=5),
       tiles=st.lists(st.integers(1, W_TILE // 2), min_size=1, max_size=3), cfg=mem_cfg,
       seed=st.integers(0, 2 ** 16))
def test_installer_writes_share_hp2_with_weight_reads(bursts, tiles, cfg, seed):
    """With kv_install, the installer's AW/W/B (``kvin``) leave on HP2 next to the weight reader's
    AR/R: the write bursts land in DDR byte for byte and are HP2's only writes (HP0/HP1 write
    nothing), the weight tiles still arrive bit-exact, and ``kvin``'s read channels are never served."""
    dut = make_install_dut()
    mems = memories(dut, cfg, seed)
    image = bytearray(mems[0].mem)
    rng = random.Random(seed)
    writes, at = [], BASE + 8192            # writes in the upper 4 KiB, weights read from 4096..
    for off, ln in bursts:
        addr = at + 16 * off
        data = rng.randbytes(16 * (ln + 1))
        writes.append((addr, ln, data))
        image[addr - BASE:addr - BASE + len(data)] = data
    want_w, off = [], 4096
    for t in tiles:
        for b in range(t):
            want_w.append({"data": int.from_bytes(image[off:off + 32], "little"), "last": int(b == t - 1)})
            off += 32
    bus = AXI4LiteMaster(dut.s_axi)
    sink = StreamSink(dut.w, seed=seed, ready_prob=0.6)
    got = {}

    async def installer(ctx):               # an AXI4 write master on kvin: AW, W beats, B
        k = dut.kvin
        for addr, ln, data in writes:
            for f, v in (("addr", addr), ("len", ln), ("size", 4), ("burst", 1), ("id", 0)):
                ctx.set(getattr(k.aw.payload, f), v)
            ctx.set(k.aw.valid, 1)
            await ctx.tick().until(k.aw.ready)
            ctx.set(k.aw.valid, 0)
            for i in range(ln + 1):
                ctx.set(k.w.payload.data, int.from_bytes(data[16 * i:16 * (i + 1)], "little"))
                ctx.set(k.w.payload.strb, 0xFFFF)
                ctx.set(k.w.payload.last, i == ln)
                ctx.set(k.w.valid, 1)
                await ctx.tick().until(k.w.ready)
            ctx.set(k.w.valid, 0)
            ctx.set(k.b.ready, 1)
            resp, = await ctx.tick().sample(k.b.payload.resp).until(k.b.valid)
            ctx.set(k.b.ready, 0)
            assert resp == Resp.OKAY
            assert not ctx.get(k.ar.ready) and not ctx.get(k.r.valid)
        got["written"] = True

    async def host(ctx):
        a = BASE + 4096
        for t in tiles:
            await post(ctx, bus, "w", a, 32 * t)
            a += 32 * t
        await wait_done(ctx, bus, "w", len(tiles))

    async def weights(ctx):
        got["w"] = await sink.collect(ctx, len(want_w))

    run_simulation(dut, [installer, host, weights], max_cycles=40_000,
                   background=[mems[k].testbench(getattr(dut, f"m_axi_hp{k}")) for k in range(3)])
    assert got["written"] and got["w"] == want_w
    assert bytes(mems[0].mem) == bytes(image)
    assert [(a, ln) for _c, kind, a, ln, _r in mems[2].log if kind == "W"] == [(a, ln) for a, ln, _ in writes]
    assert not [1 for k in (0, 1) for e in mems[k].log if e[1] == "W"]


def test_kv_event_registers():
    """KV_EV_CTRL = 0: events are taken at once and discarded (counted); = 1: kept in order in the
    8-deep queue, a 9th waits (kvevent not ready) until the host pops one; KV_EV_W0..W2 show the
    head's bits, KV_EV_STATUS its presence and the queue level, KV_EV_POP drops it."""
    dut = make_install_dut()
    bus = AXI4LiteMaster(dut.s_axi)
    rng = random.Random(5)
    dropped = [rng.getrandbits(EV_BITS) for _ in range(3)]
    kept = [rng.getrandbits(EV_BITS) for _ in range(9)]
    got = []
    R = lambda n: KV_EV_REGS[n]

    async def push(ctx, v, wait=True):
        ctx.set(dut.kvevent.payload, v)
        ctx.set(dut.kvevent.valid, 1)
        if wait:
            await ctx.tick().until(dut.kvevent.ready)
            ctx.set(dut.kvevent.valid, 0)

    async def host(ctx):
        for v in dropped:
            await push(ctx, v)
        assert await reg(ctx, bus, R("kv_ev_discarded")) == 3
        assert await reg(ctx, bus, R("kv_ev_status")) == 0
        assert await bus.write(ctx, R("kv_ev_ctrl"), 1) == Resp.OKAY
        for v in kept[:8]:
            await push(ctx, v)
        await push(ctx, kept[8], wait=False)           # the 9th: the queue is full
        for _ in range(20):
            _, _, rdy = await ctx.tick().sample(dut.kvevent.ready)
            assert not rdy
        assert await reg(ctx, bus, R("kv_ev_status")) == 1 | 8 << 8
        while True:
            st = await reg(ctx, bus, R("kv_ev_status"))
            if not st & 1:
                break
            w = [await reg(ctx, bus, R(f"kv_ev_w{i}")) for i in range(3)]
            got.append(w[0] | w[1] << 32 | w[2] << 64)
            assert await bus.write(ctx, R("kv_ev_pop"), 1) == Resp.OKAY
        assert await reg(ctx, bus, R("kv_ev_discarded")) == 3

    async def release(ctx):                            # drop valid once the 9th was taken
        while True:
            _, _, v, r, p = await ctx.tick().sample(dut.kvevent.valid, dut.kvevent.ready, dut.kvevent.payload)
            if v and r and p == kept[8]:
                ctx.set(dut.kvevent.valid, 0)
                return

    run_simulation(dut, [host, release], max_cycles=20_000)
    assert got == kept
