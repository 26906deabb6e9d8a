"""KV installer (mcf_fpga/hdl/kvinstall.py) against golden.kvinstall: KV install packets from the NIC
written into the KV region in DDR (AXI4Memory) and the directory (KVPool's install port).

Random units split into random packet sizes, several kv_ids interleaved, faults mixed in
(packets for unallocated / valid / draining / invalid / owner entries, malformed lengths,
headers, sizes, ops; row0 and n at 0, 1, max-1, max, max+1), units that allocate their own
entry (header bit ``first``: BEGIN_INSTALL, also over the host's BEGIN_INSTALL and over an
entry a failed attempt left INSTALLING) or not, replica and owner units (bit ``owner``:
COMMIT_OWNER), a lowered pool budget (FULL drops), random back-pressure on s_axis and the
memory (AW/W ready stalls; B responses delayed by up to 130 cycles by ``SlowBMemory``, a
test-only subclass: AXI4Memory's own ``latency`` delays reads only), AXI error ranges.
Afterwards the memory equals golden's KVStore image byte for byte (margins unchanged), every
kv_id's directory entry equals golden's, the installer's registers and the pool's counters
(owner / replica / peak bytes, used slots) equal golden's; a monitor checks that every commit
is issued with no write awaiting its B response; the installer is idle within a bound after the
last packet.
"""
import collections
import random

import pytest
from amaranth import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from hypothesis import given, settings, strategies as st

from mcf_fpga.golden.kvinstall import KVInstaller as GoldenInstaller, install_packet
from mcf_fpga.spec.kvinstall import pack_install_header
from mcf_fpga.golden.kvpool import KVPool as GoldenPool, twin_of
from mcf_fpga.spec.kvpool import Opcode, Response, State, Status
from mcf_fpga.spec.kvregion import KVRegion
from mcf_fpga.golden.kvstore import KVStore
from mcf_fpga.hdl.bus import AXI4LiteSignature, AXI4Signature, PacketSignature, Resp
from mcf_fpga.hdl.kvinstall import KVInstaller, REGISTERS
from mcf_fpga.spec.kvinstall import RSVD_LSB
from mcf_fpga.hdl.kvpool import KVPool, REGISTERS as POOL_REGISTERS, cmd_layout, resp_layout
from mcf_fpga.spec.meta import MetaFields, MetaOp
from mcf_fpga.golden.header import pack_header
from mcf_fpga.sim import AXI4Memory
from mcf_fpga.sim.kit import AXI4LiteMaster, StreamSource, packets_to_beats, run_simulation, stream_checker

REG = {r.name: r.offset for r in REGISTERS}
PREG = {r.name: r.offset for r in POOL_REGISTERS}
COMMITS = (Opcode.COMMIT_INSTALL, Opcode.COMMIT_OWNER)
BASE, MARGIN = 0x10000, 256
REGION = KVRegion(BASE, n_slots=6, slot_rows=8, d=16)          # row_bytes 32: 4 words, 2 beats
MAX_RECORDS = 6
MAX_PAYLOAD = 8 + MAX_RECORDS * REGION.row_bytes
KV_IDS = (0x0001, 0x0102, 0x0203, 0x0300, 0x0005, 0x0106)
SETUPS = {  # target directory state -> commands on the host port
    "none": [],
    "installing": [Opcode.BEGIN_INSTALL],
    "valid": [Opcode.INSTALL_REPLICA],
    "owner": [Opcode.ALLOC_OWNER],
    "draining": [Opcode.INSTALL_REPLICA, Opcode.ACQUIRE, Opcode.MARK_DRAINING],
    "invalid": [Opcode.INSTALL_REPLICA, Opcode.ACQUIRE, Opcode.INVALIDATE],
}


class SlowBMemory(AXI4Memory):
    """AXI4Memory whose B responses are offered ``b_latency`` cycles after the last W beat
    (the model offers them the next cycle): the install's commit must wait for them."""

    def __init__(self, *args, b_latency=0, **kw):
        super().__init__(*args, **kw)
        self.b_latency = b_latency

    def _reset_state(self):
        super()._reset_state()
        self._b_due = []

    def outputs(self):
        ar, aw, w, r, b = super().outputs()
        if b is not None and self.cycle < self._b_due[0]:
            b = None
        return ar, aw, w, r, b

    def edge(self, out, ar, aw, w, r_ready, b_ready):
        before = len(self._bq)
        popped = out[4] is not None and b_ready
        super().edge(out, ar, aw, w, r_ready, b_ready)
        if popped:
            self._b_due.pop(0)
        if len(self._bq) > before - popped:
            self._b_due.append(self.cycle + self.b_latency)


class Bench(wiring.Component):
    """KVInstaller + KVPool(install_port=True): the installer's directory port on the pool's
    ``icmd``/``iresp``; the host's ``cmd``/``resp`` and both register files exported."""

    def __init__(self, region=REGION, directory=None, kv_id_width=32, **kw):
        dirkw = directory or {}
        self.pool = KVPool(region.n_slots, region.slot_bytes, max_readers=3, install_port=True,
                           kv_id_width=kv_id_width, **dirkw)
        self.inst = KVInstaller(region, max_readers=3, addr_width=32, kv_id_width=kv_id_width, **kw)
        super().__init__({
            "s_axis": In(PacketSignature(64)),
            "cmd": In(stream.Signature(cmd_layout(self.pool.kv_id_width))),
            "resp": Out(stream.Signature(resp_layout(region.n_slots, 3))),
            "m_axi": Out(AXI4Signature(32, region.bus_bytes * 8, 4)),
            "csr": In(AXI4LiteSignature(6, 32)),
            "pcsr": In(AXI4LiteSignature(8, 32)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.pool, m.submodules.inst = pool, inst = self.pool, self.inst
        wiring.connect(m, inst.dir_cmd, pool.icmd)
        wiring.connect(m, pool.iresp, inst.dir_resp)
        wiring.connect(m, wiring.flipped(self.s_axis), inst.s_axis)
        wiring.connect(m, wiring.flipped(self.cmd), pool.cmd)
        wiring.connect(m, pool.resp, wiring.flipped(self.resp))
        wiring.connect(m, wiring.flipped(self.m_axi), inst.m_axi)
        wiring.connect(m, wiring.flipped(self.csr), inst.csr)
        wiring.connect(m, wiring.flipped(self.pcsr), pool.csr)
        m.d.comb += self.busy.eq(inst.busy)
        return m


# ---------------------------------------------------------------- packets
def header(kv_id, length, op=MetaOp.KV_REPLICA):
    return pack_header(MetaFields(op=op, kv_id=(kv_id & 0xFF, kv_id >> 8), length=length, src=3, dst=1))


def raw_packet(kv_id, row0, n, last, records, *, length=None, rsvd=0, op=MetaOp.KV_REPLICA, first=False, owner=False):
    body = pack_install_header(row0, n, last, rsvd, first=first, owner=owner) + records
    return header(kv_id, len(body) if length is None else length, op) + body


def unit_packets(rng, kv_id, region=REGION, max_records=MAX_RECORDS, *, first=False, owner=False):
    """A unit: records [row0, row0 + count) of the slot, random bytes, split into packets of
    1..max_records records, the last flagged; ``first`` flags the first packet, ``owner`` the
    last (and, at random, the others too: the installer reads it on the last only)."""
    total = 2 * region.slot_rows
    row0 = rng.choice([0, 0, rng.randrange(total)])
    count = rng.randint(1, total - row0)
    pkts, r = [], row0
    while r < row0 + count:
        n = min(rng.randint(1, max_records), row0 + count - r)
        recs = rng.randbytes(n * region.row_bytes)
        last = r + n == row0 + count
        pkts.append(install_packet(kv_id, r, recs, last, row_bytes=region.row_bytes, first=first and r == row0,
                                   owner=owner and (last or rng.random() < 0.5)))
        r += n
    return pkts


def fault_packet(rng, kv_id, region=REGION, max_records=MAX_RECORDS):
    """A packet with one fault (or a boundary value of row0 / n, well formed or not); never
    ``last`` when well formed, so it does not end its unit."""
    rb, total = region.row_bytes, 2 * region.slot_rows
    recs = lambda n: rng.randbytes(n * rb)
    kind = rng.randrange(15)
    if kind == 0:      # length disagrees with n
        n = rng.randint(1, max_records - 1)
        return raw_packet(kv_id, 0, n, 0, recs(n), length=8 + n * rb + rng.choice([-8, 8, rb, -rb]))
    if kind == 1:      # n = 0
        return raw_packet(kv_id, 0, 0, rng.randrange(2), b"")
    if kind == 2:      # row0 + n = total + 1 (one past the slot)
        n = rng.randint(1, max_records)
        return raw_packet(kv_id, total - n + 1, n, 0, recs(n))
    if kind == 3:      # row0 at its boundaries with n = 1: 0, 1, max-1 are good; max, max+1 are not
        return raw_packet(kv_id, rng.choice([0, 1, total - 1, total, total + 1]), 1, 0, recs(1))
    if kind == 4:      # n at its boundaries: 0, 1, max-1, max good (if in the slot), max+1 too long
        n = rng.choice([1, max_records - 1, max_records, max_records + 1])
        return raw_packet(kv_id, rng.choice([0, total - n]) if n <= total else 0, n, 0, recs(n))
    if kind == 5:      # a reserved install-header bit
        return raw_packet(kv_id, 0, 1, 0, recs(1), rsvd=1 << rng.randrange(RSVD_LSB, 64))
    if kind == 6:      # payload truncated (any number of bytes)
        p = raw_packet(kv_id, 0, 2, 0, recs(2))
        return p[:len(p) - rng.randint(1, 2 * rb + 7)]
    if kind == 7:      # payload too long
        return raw_packet(kv_id, 0, 1, 0, recs(1)) + rng.randbytes(rng.choice([1, 8, rb]))
    if kind == 8:      # another op
        return raw_packet(kv_id, 0, 1, 0, recs(1), op=rng.choice([MetaOp.DATA, MetaOp.QUERY, MetaOp.REDUCTION]))
    if kind == 9:      # runt: header only or less
        return header(kv_id, 8 + rb)[:rng.choice([1, 8, 16])] + (b"\0" * rng.choice([0, 4]))
    if kind == 10:     # header + install header, no records
        return raw_packet(kv_id, 0, 1, 0, b"", length=8 + rb)
    if kind == 11:     # length above max_payload with a consistent n
        n = max_records + 1
        return raw_packet(kv_id, 0, n, 0, recs(n))
    if kind == 12:     # row0 + n = total exactly (good)
        n = rng.randint(1, max_records)
        return raw_packet(kv_id, total - n, n, 0, recs(n))
    if kind == 13:     # a unit's start that never ends (well formed: allocates an entry left INSTALLING)
        n = rng.randint(1, max_records)
        return raw_packet(kv_id, 0, n, 0, recs(n), first=True, owner=rng.random() < 0.5)
    return raw_packet(kv_id, 0, 1, 0, recs(1), rsvd=1 << RSVD_LSB, first=rng.random() < 0.5)


def scenario(rng, *, n_faults):
    """(setup {kv_id: state name}, packet list, pool budget or None): units for every kv_id,
    interleaved, faults mixed in. A kv_id's units allocate their entry (``first``) or not (half
    each), are owner units (30 %) or replicas; its directory state is mostly what its units
    expect (none or installing for ``first``, installing without) but any; the budget (half of the runs) is
    the slots the setup holds + 0..1, so some ``first`` packets find the pool FULL."""
    states = list(SETUPS)
    setup = {}
    # one unit per kv_id (80 %), a second one (a re-send) for some
    streams = []
    for k in KV_IDS:
        first, owner = rng.random() < 0.5, rng.random() < 0.3
        setup[k] = rng.choice(states + (["none", "none", "installing"] if first else ["installing"] * 4))
        if rng.random() < 0.8:
            streams.append(unit_packets(rng, k, first=first, owner=owner)
                           + (unit_packets(rng, k, first=first, owner=owner) if rng.random() < 0.3 else []))
    pkts = []
    while any(streams):
        s = rng.choice([s for s in streams if s])
        pkts.append(s.pop(0))
    for _ in range(n_faults):
        pkts.insert(rng.randint(0, len(pkts)), fault_packet(rng, rng.choice(KV_IDS + (0x0707,))))
    held = sum(name != "none" for name in setup.values())
    budget = held + rng.randint(0, 1) if rng.random() < 0.5 else None
    return setup, pkts, budget


def test_scenarios_reach_every_rule():
    """The generator the properties draw from (golden alone, 100 seeds): each directory answer
    the installer acts on occurs in at least a tenth of the scenarios -- BEGIN_INSTALL answered
    OK, EXISTS with INSTALLING, EXISTS in another state and FULL; LOOKUP of an INSTALLING entry;
    COMMIT_INSTALL and COMMIT_OWNER answered OK."""
    runs = collections.Counter()
    for seed in range(100):
        rng = random.Random(seed)
        setup, pkts, budget = scenario(rng, n_faults=rng.randint(0, 6))
        pool = GoldenPool(REGION.n_slots, REGION.slot_bytes, max_readers=3)
        for k, name in setup.items():
            for op in SETUPS[name]:
                pool.execute(op, k)
        if budget is not None:
            pool.budget = budget
        seen = set()

        def spy(name, f):
            def call(k):
                r = f(k)
                seen.add((name, r.status, r.state if r.status in (Status.OK, Status.EXISTS) else None))
                return r
            return call
        for name in ("begin_install", "lookup", "commit_install", "commit_owner"):
            setattr(pool, name, spy(name, getattr(pool, name)))
        gold = GoldenInstaller(pool, KVStore(REGION), max_payload=MAX_PAYLOAD, max_burst=4)
        for p in pkts:
            gold.receive(p)
        runs.update(seen)
        runs[("other state",)] += any(n == "begin_install" and s == Status.EXISTS and t != State.INSTALLING
                                      for n, s, t in seen)
    for want in (("begin_install", Status.OK, State.INSTALLING), ("begin_install", Status.EXISTS, State.INSTALLING),
                 ("other state",), ("begin_install", Status.FULL, None), ("lookup", Status.OK, State.INSTALLING),
                 ("commit_install", Status.OK, State.REPLICA_VALID), ("commit_owner", Status.OK, State.OWNER)):
        assert runs[want] >= 10, (want, runs[want])


# ---------------------------------------------------------------- run
def run(setup, pkts, *, seed=0, valid_prob=1.0, latency=20, stalls=True, error_ranges=(), max_failed=4,
        directory=None, bound=4000, clear_after=False, mutate=None, b_latency=0, kv_id_width=32, budget=None,
        max_payload=MAX_PAYLOAD, clear_value=1):
    """Run ``pkts`` through the bench after ``setup`` (and the pool's ``budget`` register, when
    given, written after it); compare everything with golden."""
    rng = random.Random(seed)
    dut = Bench(directory=directory, max_payload=max_payload, max_burst=4, max_failed=max_failed,
                kv_id_width=kv_id_width)
    ids = [k for k in KV_IDS + (0x0707,) if k < 2 ** kv_id_width]   # the kv_ids the pool can be asked
    if mutate:
        mutate(dut)
    gpool = twin_of(dut.pool)
    store = KVStore(REGION)
    store.image[:] = rng.randbytes(REGION.size)
    size = REGION.size + 2 * MARGIN
    mem = SlowBMemory(size, data_width=128, base=BASE - MARGIN, latency=latency, max_outstanding=4,
                      error_ranges=error_ranges, ready_seed=seed if stalls else None, b_latency=b_latency)
    margins = (rng.randbytes(MARGIN), rng.randbytes(MARGIN))
    mem.load(BASE - MARGIN, margins[0] + bytes(store.image) + margins[1])
    gold = GoldenInstaller(gpool, store, max_payload=max_payload, max_burst=4,
                           error_ranges=[(s, e, int(r)) for s, e, r in error_ranges], max_failed=max_failed)
    setup_ops = [(op, k) for k, name in setup.items() for op in SETUPS[name]]
    exp_setup = [gpool.execute(op, k) for op, k in setup_ops]
    if budget is not None:
        gpool.budget = budget
    for p in pkts:
        gold.receive(p)
    if clear_after and clear_value & 1:
        gold.clear()
    exp_lookup = [gpool.lookup(k) for k in ids]
    got = {}
    mon = {"aw": 0, "b": 0, "commits": 0}

    async def cmd(ctx, op, k):
        ctx.set(dut.cmd.payload.opcode, op)
        ctx.set(dut.cmd.payload.kv_id, k)
        ctx.set(dut.cmd.valid, 1)
        await ctx.tick().until(dut.cmd.ready)
        ctx.set(dut.cmd.valid, 0)
        ctx.set(dut.resp.ready, 1)
        p, = await ctx.tick().sample(dut.resp.payload).until(dut.resp.valid)
        ctx.set(dut.resp.ready, 0)
        return Response(Status(p.status), p.slot, State(p.state), p.readers, bool(p.freed))

    async def bench(ctx):
        got["setup"] = [await cmd(ctx, op, k) for op, k in setup_ops]
        pcsr = AXI4LiteMaster(dut.pcsr)
        if budget is not None:
            assert await pcsr.write(ctx, PREG["budget"], budget) == Resp.OKAY
        await StreamSource(dut.s_axis, seed=seed + 1, valid_prob=valid_prob).send(ctx, packets_to_beats(pkts, 64))
        n = 0
        while ctx.get(dut.busy):
            await ctx.tick()
            n += 1
            assert n <= bound, f"installer still busy {bound} cycles after the last packet"
        got["idle_after"] = n
        csr = AXI4LiteMaster(dut.csr)
        if clear_after:
            assert await csr.write(ctx, REG["clear"], clear_value) == Resp.OKAY
        got["regs"] = {r.name: (await csr.read(ctx, r.offset))[0] for r in REGISTERS if r.access.value == "ro"}
        got["lookup"] = [await cmd(ctx, Opcode.LOOKUP, k) for k in ids]
        got["pool"] = {name: (await pcsr.read(ctx, PREG[name]))[0] for name in
                       ("owner_bytes_lo", "replica_bytes_lo", "peak_bytes_lo", "used_slots")}

    async def monitor(ctx):
        """Every commit (COMMIT_INSTALL / COMMIT_OWNER) leaves the installer with no write awaiting
        its B response."""
        ax, dc = dut.m_axi, dut.inst.dir_cmd
        async for _, _, awv, awr, bv, br, cv, cr, op in ctx.tick().sample(
                ax.aw.valid, ax.aw.ready, ax.b.valid, ax.b.ready, dc.valid, dc.ready, dc.payload.opcode):
            if cv and cr and op in COMMITS:
                assert mon["aw"] == mon["b"], (f"{Opcode(op).name} issued with {mon['aw'] - mon['b']} "
                                               f"write(s) awaiting B")
                mon["commits"] += 1
            mon["aw"] += bool(awv and awr)
            mon["b"] += bool(bv and br)

    run_simulation(dut, [bench], background=[mem.testbench(dut.m_axi), monitor,
                                             stream_checker(dut.inst.dir_cmd, "dir_cmd"),
                                             stream_checker(dut.pool.iresp, "iresp")],
                   vcd=False, max_cycles=400_000)
    assert got["setup"] == exp_setup
    want = gold.registers()
    want_regs = {k: want[k] for k in ("installed", "committed", "drop_state", "drop_malformed", "axi_err",
                                      "err_addr_lo", "err_addr_hi", "err_code", "drop_full")}
    want_regs["status"] = want["overflow"] << 1
    assert got["regs"] == want_regs, (got["regs"], want_regs)
    assert got["lookup"] == exp_lookup
    assert got["pool"] == {"owner_bytes_lo": gpool.owner_bytes, "replica_bytes_lo": gpool.replica_bytes,
                           "peak_bytes_lo": gpool.peak_bytes, "used_slots": gpool.used_slots}
    img = mem.dump(BASE - MARGIN, size)
    assert img[:MARGIN] == margins[0] and img[MARGIN + REGION.size:] == margins[1], "bytes outside the region changed"
    region = img[MARGIN:MARGIN + REGION.size]
    if region != bytes(store.image):
        i = next(i for i in range(REGION.size) if region[i] != store.image[i])
        raise AssertionError(f"memory differs from golden first at {BASE + i:#x} (slot {i // REGION.slot_bytes}, "
                             f"record {(i % REGION.slot_bytes) // REGION.row_bytes})")
    return gold, got, mon


# ---------------------------------------------------------------- properties
@given(st.integers(0, 2 ** 32 - 1), st.sampled_from([1.0, 0.8, 0.4]), st.sampled_from([0, 8, 30, 110]),
       st.booleans(), st.integers(0, 6))
def test_installs_match_golden(seed, valid_prob, b_latency, stalls, n_faults):
    """Random units (allocating their entry with ``first`` or not, replica or owner), interleaved
    kv_ids in random directory states, faults mixed in, a lowered budget, random back-pressure
    (s_axis valid gaps, AW/W ready stalls, B delayed by up to 110 cycles): memory, directory,
    pool counters and registers equal golden; commits only after B."""
    rng = random.Random(seed)
    setup, pkts, budget = scenario(rng, n_faults=n_faults)
    gold, got, mon = run(setup, pkts, seed=seed, valid_prob=valid_prob, b_latency=b_latency, stalls=stalls,
                         budget=budget)
    assert mon["commits"] >= gold.committed


@settings(max_examples=8)
@given(st.integers(0, 2 ** 32 - 1), st.sampled_from([Resp.SLVERR, Resp.DECERR]), st.integers(1, 4))
def test_axi_errors_leave_units_uncommitted(seed, resp, max_failed):
    """Error ranges inside the region: failing bursts write nothing, the packets count AXI_ERR,
    the first error's code/address are kept, a unit with an error is not committed (its later
    packets are still written, a re-sent unit -- ``first`` finding the entry still INSTALLING --
    can commit), the failed-unit set overflows as golden says; latency >= 100."""
    rng = random.Random(seed)
    setup, pkts, budget = scenario(rng, n_faults=2)
    ranges = []
    for _ in range(rng.randint(1, 3)):
        s = BASE + rng.randrange(REGION.size // 16) * 16
        ranges.append((s, s + rng.choice([1, 16, 64, 200]), resp))
    gold, got, mon = run(setup, pkts, seed=seed, valid_prob=0.7, b_latency=rng.randint(100, 130),
                         error_ranges=ranges, max_failed=max_failed, budget=budget)
    assert mon["commits"] >= gold.committed


def test_table_directory_narrow_kv_id_and_clear():
    """Same through the table directory (kv_ids in and out of its range: a ``first`` packet of
    0x0300 finds OUT_OF_RANGE, DROP_FULL); a pool with a 10-bit kv_id (packets for the wider
    kv_id 0x0707 drop without a directory command: DROP_STATE, or DROP_FULL with ``first``);
    CLEAR zeroes the counters and the error registers."""
    rng = random.Random(7)
    setup, pkts, budget = scenario(rng, n_faults=4)
    out = unit_packets(rng, 0x0300, first=True)
    gold, _, _ = run(setup, pkts + out, seed=7, b_latency=30, directory=dict(directory="table", layers=4, blocks=2),
                     error_ranges=[(BASE + 512, BASE + 600, Resp.SLVERR)], budget=budget)
    assert gold.drop_full >= 1
    wide = unit_packets(rng, 0x0707) + unit_packets(rng, 0x0707, first=True, owner=True)
    gold, _, _ = run(setup, pkts + wide, seed=9, b_latency=10, kv_id_width=10)
    assert gold.drop_state + gold.drop_full >= len(wide) and gold.drop_full >= 1
    run(setup, pkts, seed=8, b_latency=30, clear_after=True, budget=budget)


def test_kv_pool_top_exports_the_install_port():
    from mcf_fpga.hdl.kvpool import KVPoolTop
    from mcf_fpga.hdl.verilog import amba_ports
    top = KVPoolTop(8, 512, install_port=True)
    assert {p.prefix for p in amba_ports(top) if p.kind != "signal"} == {
        "s_axis_cmd", "m_axis_resp", "s_axis_nic", "s_axi", "s_axis_icmd", "m_axis_iresp"}


def test_malformed_drain_at_line_rate():
    """Malformed packets are drained at line rate: with the memory never answering (latency
    far above the run), a stream of malformed packets is still consumed one beat per cycle."""
    rng = random.Random(3)
    pkts = [fault_packet(rng, 1) for _ in range(40)]
    pkts = [p for p in pkts if GoldenInstaller(GoldenPool(4, 64), KVStore(REGION),
                                               max_payload=MAX_PAYLOAD).parse(p) is None]
    beats = packets_to_beats(pkts, 64)
    dut = KVInstaller(REGION, max_readers=3, addr_width=32, max_payload=MAX_PAYLOAD)
    got = {}

    async def bench(ctx):
        ctx.set(dut.dir_cmd.ready, 0)
        ctx.set(dut.dir_resp.valid, 0)
        t = 0
        for b in beats:
            for k, v in b.items():
                ctx.set(dut.s_axis.payload[k], v)
            ctx.set(dut.s_axis.valid, 1)
            _, _, rdy = await ctx.tick().sample(dut.s_axis.ready)
            assert rdy, "a malformed packet's beat was not taken at once"
            t += 1
        ctx.set(dut.s_axis.valid, 0)
        await ctx.tick().repeat(3)
        got["busy"] = ctx.get(dut.busy)
        got["malformed"], _ = await AXI4LiteMaster(dut.csr).read(ctx, REG["drop_malformed"])

    run_simulation(dut, [bench], vcd=False, max_cycles=20_000)
    assert got["busy"] == 0 and got["malformed"] == len(pkts)


def test_install_port_keeps_host_responses_unmixed():
    """cmd, nic and icmd all waiting: served round-robin, each answer on its own port, results
    equal golden run in that order (both directories)."""
    from mcf_fpga.sim.kit import StreamSink
    for directory in ({}, dict(directory="table", layers=8, blocks=1)):
        rng = random.Random(11)
        cmds = [(int(rng.choice(list(Opcode))), rng.randrange(8)) for _ in range(20)]
        icmds = [(int(rng.choice(list(Opcode))), rng.randrange(8)) for _ in range(20)]
        nics = [(rng.randrange(8), rng.randrange(2)) for _ in range(20)]
        dut = KVPool(4, 64, kv_id_width=3, max_readers=3, install_port=True, **directory)
        gold = twin_of(dut)
        exp_c, exp_i = [], []
        for (op, k), (nk, f), (iop, ik) in zip(cmds, nics, icmds):
            exp_c.append(gold.execute(op, k))
            gold.nic_invalidate(nk, bool(f))
            exp_i.append(gold.execute(iop, ik))
        got = {}

        async def tb_cmd(ctx):
            await StreamSource(dut.cmd).send(ctx, [{"opcode": o, "kv_id": k} for o, k in cmds])

        async def tb_icmd(ctx):
            await StreamSource(dut.icmd).send(ctx, [{"opcode": o, "kv_id": k} for o, k in icmds])

        async def tb_nic(ctx):
            await StreamSource(dut.nic).send(ctx, [{"kv_id": k, "final": f} for k, f in nics])

        async def tb_resp(ctx):
            got["c"] = await StreamSink(dut.resp, seed=1, ready_prob=0.7).collect(ctx, len(cmds))

        async def tb_iresp(ctx):
            got["i"] = await StreamSink(dut.iresp, seed=2, ready_prob=0.7).collect(ctx, len(icmds))

        run_simulation(dut, [tb_cmd, tb_icmd, tb_nic, tb_resp, tb_iresp], vcd=False, max_cycles=10_000)
        conv = lambda rs: [Response(Status(r["status"]), r["slot"], State(r["state"]), r["readers"],
                                    bool(r["freed"])) for r in rs]
        assert conv(got["c"]) == exp_c
        assert conv(got["i"]) == exp_i


def test_parameter_checks():
    with pytest.raises(ValueError, match="max_payload"):
        KVInstaller(REGION, max_payload=8 + REGION.row_bytes - 8)
    with pytest.raises(ValueError, match="max_payload"):
        KVInstaller(REGION, max_payload=8 + REGION.row_bytes + 4)
    with pytest.raises(ValueError, match="bus_bytes"):
        KVInstaller(KVRegion(0, 2, 4, 16, bus_bytes=4))


def test_golden_rules_directed():
    """Golden alone, by hand: records land at row_addr(slot, sel, row) (record = sel * slot_rows
    + row); the last packet commits; an error in a middle packet leaves the unit INSTALLING, its
    later packets still land, a re-sent unit commits; packets after the commit drop (state)."""
    pool = GoldenPool(REGION.n_slots, REGION.slot_bytes)
    store = KVStore(REGION)
    assert pool.alloc_owner(9).slot == 0 and pool.begin_install(0x0102).slot == 1
    vals = [[(r * 7 + i) % 256 - 128 for i in range(REGION.d)] for r in range(2 * REGION.slot_rows)]
    recs = b"".join(REGION.pack_row(v, r - 5) for r, v in enumerate(vals))
    rb = REGION.row_bytes
    bad_addr = REGION.slot_addr(1) + 4 * rb                     # record 4: packet 2 of 3
    gold = GoldenInstaller(pool, store, max_payload=MAX_PAYLOAD, max_burst=4,
                           error_ranges=[(bad_addr, bad_addr + 1, 2)])
    unit = [install_packet(0x0102, r, recs[r * rb:(r + n) * rb], r + n == 16, row_bytes=rb)
            for r, n in ((0, 4), (4, 6), (10, 6))]
    assert [gold.receive(p).value for p in unit] == ["installed", "axi_err", "not_committed"]
    assert pool.lookup(0x0102).state == State.INSTALLING and gold.err_code == 4 and gold.err_addr == bad_addr
    assert store.read_row(1, 1, 7) == (vals[15], 10)            # record 15 = V row 7, landed
    assert store.read_row(1, 0, 4) == ([0] * REGION.d, 0)       # the failing burst wrote nothing
    gold.error_ranges = []
    assert [gold.receive(p).value for p in unit] == ["installed", "installed", "committed"]
    assert pool.lookup(0x0102).state == State.REPLICA_VALID
    assert all(store.read_row(1, r // 8, r % 8) == (vals[r], r - 5) for r in range(16))
    assert gold.receive(unit[0]).value == "drop_state"          # after the commit
    assert gold.receive(install_packet(9, 0, recs[:rb], True, row_bytes=rb)).value == "drop_state"  # owner
    assert store.read_row(0, 0, 0) == ([0] * REGION.d, 0)
    assert (gold.installed, gold.committed, gold.axi_err, gold.drop_state) == (5, 1, 1, 2)   # not_committed and committed packets count installed too


@pytest.mark.parametrize("max_failed", [1, 2])
def test_failed_set_overflow(max_failed):
    """Every kv_id installing, units interleaved packet by packet, an error range over slot 0's
    and slot 2's first records: more failed units in flight than the set holds sets ``overflow``
    and then no unit commits (hardware equals golden, registers included)."""
    rng = random.Random(max_failed)
    setup = {k: "installing" for k in KV_IDS}
    streams = [[install_packet(k, r, rng.randbytes(2 * REGION.row_bytes), r == 14, row_bytes=REGION.row_bytes)
                for r in range(0, 16, 2)] for k in KV_IDS]
    pkts = [s[i] for i in range(8) for s in streams]
    ranges = [(REGION.slot_addr(s), REGION.slot_addr(s) + 16, Resp.DECERR) for s in (0, 2, 4)]
    gold, got, mon = run(setup, pkts, seed=max_failed, b_latency=20, error_ranges=ranges, max_failed=max_failed)
    assert gold.overflow and gold.committed == 0 and gold.axi_err == 3


def test_first_packets_allocate_resend_owner_and_full():
    """Header bits ``first`` and ``owner``, by hand on golden (outcome by outcome), then the same
    packets through the hardware (equal to golden): a ``first`` unit allocates its entry
    (BEGIN_INSTALL OK) and commits as an owner (COMMIT_OWNER); an AXI error leaves it INSTALLING
    and its re-send (``first`` again: EXISTS with state INSTALLING) writes and commits; ``first``
    over the host's BEGIN_INSTALL writes; ``first`` over a valid replica drops (state); ``first``
    with the pool at its budget drops (full) and the unit's later packets find no entry."""
    rb = REGION.row_bytes
    a, b, c, d = 0x0001, 0x0102, 0x0203, 0x0300
    setup = {b: "installing", c: "valid"}                  # slots 0 and 1; a's unit takes slot 2
    rng = random.Random(18)

    def unit(kv, runs, owner=False, first=True):
        return [install_packet(kv, r, rng.randbytes(n * rb), r + n == 16, row_bytes=rb, first=first and i == 0,
                               owner=owner and (r + n == 16 or i == 0))
                for i, (r, n) in enumerate(runs)]
    a1 = unit(a, [(0, 4), (4, 6), (10, 6)], owner=True)
    a2 = unit(a, [(4, 6), (10, 6)], owner=True)           # the re-send avoids the failing record 2
    pkts = [a1[0], *unit(b, [(8, 4), (12, 4)]), a1[1], a1[2], *unit(c, [(0, 6)]), *a2,
            *unit(d, [(0, 5), (5, 5), (10, 6)]), *unit(b, [(0, 6)], first=False)]
    bad = REGION.slot_addr(2) + 2 * rb
    ranges = [(bad, bad + 1, Resp.SLVERR)]
    pool = GoldenPool(REGION.n_slots, REGION.slot_bytes, max_readers=3)
    for k, name in setup.items():
        for op in SETUPS[name]:
            pool.execute(op, k)
    pool.budget = 3
    gold = GoldenInstaller(pool, KVStore(REGION), max_payload=MAX_PAYLOAD, max_burst=4,
                           error_ranges=[(s, e, int(r)) for s, e, r in ranges])
    assert [gold.receive(p).value for p in pkts] == [
        "axi_err", "installed", "committed", "installed", "not_committed", "drop_state", "installed", "committed",
        "drop_full", "drop_state", "drop_state", "drop_state"]
    assert {k: v[:2] for k, v in pool.entries().items()} == {
        b: (0, State.REPLICA_VALID), c: (1, State.REPLICA_VALID), a: (2, State.OWNER)}
    assert (pool.owner_bytes, pool.replica_bytes, gold.drop_full, gold.committed) == \
           (REGION.slot_bytes, 2 * REGION.slot_bytes, 1, 2)
    run(setup, pkts, seed=18, b_latency=40, error_ranges=ranges, budget=3)


def test_full_size_packets_at_a_power_of_two_word_count():
    """``max_payload`` for exactly 8 records of 32 bytes: a full packet is 32 words of 64 bits, a
    power of two, so a word counter or record-count field one bit short would wrap (mutation
    survivors: ``range(max_words + 1)`` -> ``range(max_words - 1)`` in the installer). Units
    sent as full-size packets install as golden says."""
    mp = 8 + 8 * REGION.row_bytes
    recs = lambda n: random.Random(n).randbytes(n * REGION.row_bytes)  # noqa: E731
    pkts = [install_packet(KV_IDS[0], 0, recs(8), False, row_bytes=REGION.row_bytes, first=True),
            install_packet(KV_IDS[0], 8, recs(8), True, row_bytes=REGION.row_bytes),
            install_packet(KV_IDS[1], 0, recs(8), True, row_bytes=REGION.row_bytes, first=True)]
    gold, got, _mon = run({}, pkts, max_payload=mp)
    assert got["regs"]["committed"] == 2 and got["regs"]["drop_malformed"] == 0


def test_writing_zero_to_clear_clears_nothing():
    """CLEAR acts on a write of bit 0 = 1 only (a mutation survivor: ``clear_wstb | clear`` would
    also clear on a write of 0)."""
    rng = random.Random(3)
    pkts = unit_packets(rng, KV_IDS[0], first=True) + [raw_packet(KV_IDS[1], 0, 0, True, b"")]
    gold, got, _mon = run({}, pkts, clear_after=True, clear_value=0)
    assert got["regs"]["installed"] > 0 and got["regs"]["drop_malformed"] == 1



def test_packets_with_two_faults_at_once_are_dropped():
    """Every pair of the install header's faults in one packet (wrong op, a reserved bit, n = 0,
    rows past the slot, a length that does not match, a length over max_payload): each packet is
    dropped as malformed and writes nothing (a mutation survivor: one ``|`` of the verdict turned
    into ``^`` accepts a packet whose two faults cancel)."""
    import itertools
    rb, top = REGION.row_bytes, 2 * REGION.slot_rows

    def pkt(kv_id, faults):
        row0, n = (top - 1, 2) if "rows" in faults else (0, 2)
        n = 0 if "n0" in faults else (MAX_RECORDS + 1 if "long" in faults else n)
        row0 = 0 if "long" in faults and "rows" not in faults else row0
        recs = bytes(n * rb)
        length = 8 + n * rb + (rb if "len" in faults else 0)
        return raw_packet(kv_id, row0, n, True, recs, length=length, rsvd=1 if "rsvd" in faults else 0,
                          op=MetaOp.DATA if "op" in faults else MetaOp.KV_REPLICA, first=True)
    kinds = ("op", "rsvd", "n0", "rows", "len", "long")
    pkts = [pkt(KV_IDS[i % len(KV_IDS)], set(pair)) for i, pair in enumerate(itertools.combinations(kinds, 2))]
    gold, got, _mon = run({}, pkts)
    assert got["regs"]["drop_malformed"] == len(pkts) == 15 and got["regs"]["installed"] == 0
