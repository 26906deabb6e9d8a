"""KV pool: the hardware directory against golden.kvpool, by Hypothesis stateful testing.

The state machine drives the golden pool rule by rule (checking the pool invariants on
golden), records every operation, and in ``teardown`` replays the same sequence on the
Amaranth KVPool with random response back-pressure, comparing every response bit for
bit, the CSR counters, and hardware-only invariants derived from the hardware's own
answers (a slot is never handed out twice; a read slot is never freed). The machine runs
on both directories: the register CAM and the BRAM table (``TablePoolMachine``: 2 layers x
8 blocks, kv_ids in and out of that range, a two-word free-slot bitmap).
"""
import random

import pytest
from amaranth.sim import Simulator
from hypothesis import given, strategies as st, settings
from hypothesis.stateful import RuleBasedStateMachine, rule, invariant, precondition

from mcf_fpga.golden.kvpool import KVPool as GoldenPool, twin_of
from mcf_fpga.spec.kvpool import Event, Opcode, Source, State, Status, Response, kv_id_from
from mcf_fpga.hdl.kvpool import KVPool, REGISTERS, DEFAULT_KV_ID_WIDTH
from mcf_fpga.sim.kit import AXI4LiteMaster

REG = {r.name: r.offset for r in REGISTERS}


def to_response(p):
    """A sampled ``resp_layout`` value (Const or field dict) as a golden Response."""
    g = (lambda k: p[k]) if isinstance(p, dict) else (lambda k: getattr(p, k))
    return Response(Status(g("status")), g("slot"), State(g("state")), g("readers"), bool(g("freed")))


def to_event(p):
    """A sampled ``event_layout`` field dict as a golden Event."""
    return Event(Source(p["src"]), p["cmd"]["opcode"], p["cmd"]["kv_id"], to_response(p["resp"]))


def run_on_hardware(dut, ops, seed=0, events=None):
    """Replay ``ops`` on ``dut``. Each op is ("cmd", opcode, kv_id), ("nic", kv_id, final),
    ("budget", value) or ("clear_peak",). Returns (responses, csr dict). With ``events`` (a list;
    the dut built with ``events=True``) a background sink takes ``dut.events`` with random
    back-pressure (ready 40 % of cycles) into ``events`` (golden Events), and the run ends when
    every cmd/nic op has its event."""
    from mcf_fpga.sim.kit import StreamSink
    rng = random.Random(seed)
    out = {"resps": [], "csr": {}}
    sink = StreamSink(dut.events, seed=seed + 1, ready_prob=0.4) if events is not None else None

    async def bench(ctx):
        for op in ops:
            if op[0] == "cmd":
                ctx.set(dut.cmd.payload.opcode, op[1])
                ctx.set(dut.cmd.payload.kv_id, op[2])
                ctx.set(dut.cmd.valid, 1)
                await ctx.tick().until(dut.cmd.ready)
                ctx.set(dut.cmd.valid, 0)
                while True:   # random back-pressure on resp
                    rdy = rng.random() < 0.6
                    ctx.set(dut.resp.ready, rdy)
                    _, _, v, p = await ctx.tick().sample(dut.resp.valid, dut.resp.payload)
                    if v and rdy:
                        break
                ctx.set(dut.resp.ready, 0)
                out["resps"].append(to_response(p))
            elif op[0] == "nic":
                ctx.set(dut.nic.payload.kv_id, op[1])
                ctx.set(dut.nic.payload.final, op[2])
                ctx.set(dut.nic.valid, 1)
                await ctx.tick().until(dut.nic.ready)
                ctx.set(dut.nic.valid, 0)
                await ctx.tick().repeat(2)
            elif op[0] == "budget":
                assert await AXI4LiteMaster(dut.csr).write(ctx, REG["budget"], op[1]) == 0
            elif op[0] == "clear_peak":
                assert await AXI4LiteMaster(dut.csr).write(ctx, REG["clear_peak"], 1) == 0
        if sink is not None:
            n = sum(op[0] in ("cmd", "nic") for op in ops)
            for _ in range(100 * n + 100):
                if len(sink.beats) >= n:
                    break
                await ctx.tick()
            assert len(sink.beats) == n, f"{len(sink.beats)} events for {n} commands/NIC messages"
        for r in REGISTERS:
            if r.access.value == "ro":
                out["csr"][r.name], _ = await AXI4LiteMaster(dut.csr).read(ctx, r.offset)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    if sink is not None:
        sim.add_testbench(sink.run, background=True)
    sim.run()
    if sink is not None:
        events += [to_event(b) for b in sink.beats]
    return out["resps"], out["csr"]


def split_ops(ops, seed):
    """The cmd/nic ops of a sequential run dealt to the pool's three ports: each command to
    ``cmd`` or ``icmd`` at random (seeded), NIC messages to ``nic``; budget/clear_peak dropped."""
    rng = random.Random(seed)
    cmds, nics, icmds = [], [], []
    for op in ops:
        if op[0] == "cmd":
            (cmds if rng.random() < 0.5 else icmds).append((op[1], op[2]))
        elif op[0] == "nic":
            nics.append((op[1], op[2]))
    return cmds, nics, icmds


def run_three_ports(dut, cmds, nics, icmds, seed=0):
    """Drive ``cmd``, ``nic`` and ``icmd`` of ``dut`` (``install_port=True, events=True``) at
    once, each with random valid gaps, and take ``resp``, ``iresp`` and ``events`` with random
    back-pressure. Returns (events, resps, iresps, csr): golden Events / Responses."""
    from mcf_fpga.sim.kit import StreamSource, StreamSink, run_simulation
    got = {}
    srcs = [(dut.cmd, [{"opcode": o, "kv_id": k} for o, k in cmds]),
            (dut.nic, [{"kv_id": k, "final": f} for k, f in nics]),
            (dut.icmd, [{"opcode": o, "kv_id": k} for o, k in icmds])]
    sinks = {"resp": (StreamSink(dut.resp, seed=seed + 4, ready_prob=0.6), len(cmds)),
             "iresp": (StreamSink(dut.iresp, seed=seed + 5, ready_prob=0.6), len(icmds)),
             "events": (StreamSink(dut.events, seed=seed + 6, ready_prob=0.5), len(cmds) + len(nics) + len(icmds))}

    def source(i, port, beats):
        async def tb(ctx):
            await StreamSource(port, seed=seed + i, valid_prob=0.5).send(ctx, beats)
        return tb

    def sink(name, snk, n):
        async def tb(ctx):
            got[name] = await snk.collect(ctx, n)
        return tb

    async def csr(ctx):
        while len(got) < 3:
            await ctx.tick()
        got["csr"] = {r.name: (await AXI4LiteMaster(dut.csr).read(ctx, r.offset))[0]
                      for r in REGISTERS if r.access.value == "ro"}

    run_simulation(dut, [source(i, p, b) for i, (p, b) in enumerate(srcs)]
                   + [sink(n, snk, k) for n, (snk, k) in sinks.items()] + [csr], vcd=False,
                   max_cycles=100 * (len(cmds) + len(nics) + len(icmds)) + 1000)
    return ([to_event(b) for b in got["events"]], [to_response(b) for b in got["resp"]],
            [to_response(b) for b in got["iresp"]], got["csr"])


def check_three_ports(dut, cmds, nics, icmds, seed=0):
    """:func:`run_three_ports`, then: replaying the events into a fresh golden pool reproduces
    every recorded answer; each port's commands appear in the events exactly once, in the order
    sent (a NIC message as MARK_DRAINING/INVALIDATE); ``resp`` / ``iresp`` carry exactly the
    answers of their own port's events, in order; the counters equal golden's. Returns the events."""
    events, resps, iresps, csr = run_three_ports(dut, cmds, nics, icmds, seed)
    gold = twin_of(dut)
    gold.replay(events)                       # raises EventMismatch on the first difference
    by = lambda src: [e for e in events if e.src == src]
    assert [(e.opcode, e.kv_id) for e in by(Source.CMD)] == [(int(o), k) for o, k in cmds]
    assert [(e.opcode, e.kv_id) for e in by(Source.ICMD)] == [(int(o), k) for o, k in icmds]
    assert [(e.kv_id, e.opcode) for e in by(Source.NIC)] == \
        [(k, Opcode.INVALIDATE if f else Opcode.MARK_DRAINING) for k, f in nics]
    assert len(events) == len(cmds) + len(nics) + len(icmds)
    assert resps == [e.resp for e in by(Source.CMD)]
    assert iresps == [e.resp for e in by(Source.ICMD)]
    applied = sum(e.resp.status == Status.OK for e in by(Source.NIC))
    assert (csr["nic_applied"], csr["nic_dropped"]) == (applied, len(nics) - applied)
    assert csr["used_slots"] == gold.used_slots
    assert csr["owner_bytes_lo"] | csr["owner_bytes_hi"] << 32 == gold.owner_bytes
    assert csr["replica_bytes_lo"] | csr["replica_bytes_hi"] << 32 == gold.replica_bytes
    assert csr["peak_bytes_lo"] | csr["peak_bytes_hi"] << 32 == gold.peak_bytes
    return events


class PoolMachine(RuleBasedStateMachine):
    N_SLOTS = 5
    KV_BITS = 3          # 8 kv_ids over 5 slots: collisions, fills and refusals are common
    BLOCK = 96
    MAX_READERS = 3
    IDS = tuple(range(8))    # rules draw an index into IDS (the kv_ids this machine uses)
    TABLE_RANGE = None       # golden's table=(layers, blocks), as make_dut's

    def make_dut(self, **ports):
        return KVPool(self.N_SLOTS, self.BLOCK, kv_id_width=self.KV_BITS, max_readers=self.MAX_READERS, **ports)

    def __init__(self):
        super().__init__()
        self.gold = GoldenPool(self.N_SLOTS, self.BLOCK, kv_id_width=self.KV_BITS,
                               max_readers=self.MAX_READERS, table=self.TABLE_RANGE)
        self.ops, self.expected = [], []
        self.nic_applied = self.nic_dropped = 0

    kv = st.integers(0, 2 ** 3 - 1)

    def _do(self, opcode, kv_id):
        kv_id = self.IDS[kv_id]
        before = self.gold.entries()
        r = self.gold.execute(opcode, kv_id)
        self.ops.append(("cmd", int(opcode), kv_id))
        self.expected.append(r)
        after = self.gold.entries()
        # golden invariants: refused commands change nothing; owners are never dropped
        if r.status != Status.OK:
            assert before == after
        for k, (slot, state, readers) in before.items():
            if state == State.OWNER and not (opcode == Opcode.FREE_OWNER and k == kv_id):
                assert k in after and after[k][0] == slot
            if k not in after and readers > (1 if opcode == Opcode.RELEASE and k == kv_id else 0):
                raise AssertionError(f"slot {slot} of kv_id {k} freed with {readers} readers")
        return r

    @rule(op=st.sampled_from(list(Opcode)), kv_id=kv)
    def command(self, op, kv_id):
        r = self._do(op, kv_id)
        if op in (Opcode.ALLOC_OWNER, Opcode.INSTALL_REPLICA, Opcode.BEGIN_INSTALL) and r.status == Status.FULL:
            assert self.gold.used_slots >= self.gold.budget

    @rule(kv_id=kv)
    def acquire_release(self, kv_id):   # bias towards reader traffic
        self._do(Opcode.ACQUIRE, kv_id)
        self._do(Opcode.MARK_DRAINING, kv_id)
        self._do(Opcode.RELEASE, kv_id)

    @rule(kv_id=kv, owner=st.booleans())
    def install_and_commit(self, kv_id, owner):   # bias towards installs that commit (either way)
        self._do(Opcode.BEGIN_INSTALL, kv_id)
        self._do(Opcode.COMMIT_OWNER if owner else Opcode.COMMIT_INSTALL, kv_id)

    @rule(opcode=st.integers(max(Opcode) + 1, 15), kv_id=kv)   # every opcode golden does not know
    def bad_opcode(self, opcode, kv_id):
        assert self._do(opcode, kv_id).status == Status.BAD_OPCODE

    @rule(kv_id=kv, final=st.booleans())
    def nic(self, kv_id, final):
        kv_id = self.IDS[kv_id]
        applied = self.gold.nic_invalidate(kv_id, final)
        self.nic_applied += applied
        self.nic_dropped += not applied
        self.ops.append(("nic", kv_id, int(final)))

    @rule(value=st.integers(0, 7))
    def budget(self, value):
        self.gold.budget = value
        self.ops.append(("budget", value))

    @precondition(lambda self: len(self.ops) > 3)
    @rule()
    def clear_peak(self):
        self.gold.clear_peak()
        self.ops.append(("clear_peak",))

    @invariant()
    def within_budget(self):
        assert self.gold.used_slots <= self.N_SLOTS
        slots = [s for s, _, _ in self.gold.entries().values()]
        assert len(slots) == len(set(slots))

    def _nic_touched(self, kv_id):
        return any(op[0] == "nic" and op[1] == kv_id for op in self.ops)

    def teardown(self):
        if not self.ops:
            return
        dut = self.make_dut()
        resps, csr = run_on_hardware(dut, self.ops, seed=len(self.ops))
        assert resps == self.expected
        # hardware-only invariants, from the hardware's own answers
        held = {}    # slot -> [kv_id, readers]
        answers = iter(resps)
        for op in self.ops:
            if op[0] != "cmd":   # NIC messages may free unread replicas silently
                continue
            _, opcode, kv_id = op
            r = next(answers)
            if opcode == Opcode.LOOKUP:   # re-sync: lookups report the hardware's own view
                for slot in [s for s, (k, _) in held.items() if k == kv_id]:
                    del held[slot]
                if r.status == Status.OK:
                    held[r.slot] = [kv_id, r.readers]
            if r.status == Status.OK and opcode in (Opcode.ALLOC_OWNER, Opcode.INSTALL_REPLICA,
                                                    Opcode.BEGIN_INSTALL):
                assert r.slot not in held or held[r.slot][1] == 0 and self._nic_touched(held[r.slot][0]), \
                    "allocation overwrote a slot in use"
                held[r.slot] = [kv_id, 0]
            if r.freed:
                slots = [s for s, (k, _) in held.items() if k == kv_id]
                assert all(held[s][1] <= 1 for s in slots), "slot freed while read"
                for s in slots:
                    del held[s]
            elif r.status == Status.OK and opcode in (Opcode.ACQUIRE, Opcode.RELEASE):
                held[r.slot] = [kv_id, r.readers]
        g = self.gold
        assert csr["owner_bytes_lo"] | csr["owner_bytes_hi"] << 32 == g.owner_bytes
        assert csr["replica_bytes_lo"] | csr["replica_bytes_hi"] << 32 == g.replica_bytes
        assert csr["peak_bytes_lo"] | csr["peak_bytes_hi"] << 32 == g.peak_bytes
        assert csr["used_slots"] == g.used_slots
        assert csr["nic_applied"] == self.nic_applied and csr["nic_dropped"] == self.nic_dropped
        assert csr["n_slots"] == self.N_SLOTS and csr["block_bytes"] == self.BLOCK
        check_events_sequential(self.make_dut(events=True), self.ops, self.expected, seed=len(self.ops))
        check_three_ports(self.make_dut(install_port=True, events=True), *split_ops(self.ops, len(self.ops)),
                          seed=len(self.ops))


def check_events_sequential(dut, ops, expected, seed=0):
    """``ops`` on ``dut`` (``events=True``) one at a time, with random back-pressure on
    ``events``: the host's ``resp`` stream is still golden's ``expected``, there is one event
    per cmd/nic op in op order, and replaying the events into a fresh golden pool (budget
    changes applied at their place) reproduces every event's answer."""
    events = []
    resps, _ = run_on_hardware(dut, ops, seed=seed, events=events)
    assert resps == expected
    gold, evs = twin_of(dut), iter(events)
    for op in ops:
        if op[0] == "budget":
            gold.budget = op[1]
            continue
        if op[0] == "clear_peak":
            continue
        e = next(evs)
        want = (Source.CMD, op[1], op[2]) if op[0] == "cmd" else \
            (Source.NIC, Opcode.INVALIDATE if op[2] else Opcode.MARK_DRAINING, op[1])
        assert (e.src, e.opcode, e.kv_id) == want
        gold.replay([e])
    assert next(evs, None) is None
    assert [e.resp for e in events if e.src == Source.CMD] == expected


PoolMachine.TestCase.settings = settings(stateful_step_count=60)
TestKVPoolAgainstGolden = PoolMachine.TestCase

# table directory: 2 layers x 8 blocks; six kv_ids in range and two outside it (layer 2, block 8,
# which would alias entries (0, 1) and (0, 0) if the range check were missing)
TABLE = dict(directory="table", layers=2, blocks=8, word_bits=4)


class TablePoolMachine(PoolMachine):
    KV_BITS = 12
    TABLE_RANGE = (TABLE["layers"], TABLE["blocks"])
    IDS = tuple(kv_id_from(layer, block) for layer, block in
                ((0, 0), (1, 0), (0, 1), (1, 7), (0, 7), (1, 3), (2, 0), (0, 8)))

    def make_dut(self, **ports):   # 5 slots in bitmap words of 4: allocation crosses the word boundary
        return KVPool(self.N_SLOTS, self.BLOCK, kv_id_width=self.KV_BITS, max_readers=self.MAX_READERS,
                      **TABLE, **ports)

    @invariant()
    def out_of_range_never_held(self):
        assert all(self.gold.in_range(k) for k in self.gold.entries())


TablePoolMachine.TestCase.settings = settings(stateful_step_count=60)
TestTableKVPoolAgainstGolden = TablePoolMachine.TestCase


def test_default_width_and_lifecycle():
    """Default kv_id width comes from hdl.meta; a draining replica with readers is freed by
    its last release; an owner is never drained; lookups of unknown kv_id answer UNKNOWN."""
    assert DEFAULT_KV_ID_WIDTH == 32
    kv = kv_id_from(3, 0xABCDE)
    seq = [(Opcode.LOOKUP, kv), (Opcode.INSTALL_REPLICA, kv), (Opcode.ACQUIRE, kv),
           (Opcode.ACQUIRE, kv), (Opcode.MARK_DRAINING, kv), (Opcode.ACQUIRE, kv),
           (Opcode.RELEASE, kv), (Opcode.LOOKUP, kv), (Opcode.RELEASE, kv), (Opcode.LOOKUP, kv),
           (Opcode.ALLOC_OWNER, kv + 1), (Opcode.MARK_DRAINING, kv + 1),
           (Opcode.INVALIDATE, kv + 1), (Opcode.ALLOC_OWNER, 2 ** 32 - 1),
           (Opcode.ALLOC_OWNER, 5), (Opcode.LOOKUP, 2 ** 32 - 1)]
    gold = GoldenPool(2, 4096)
    expected = [gold.execute(o, k) for o, k in seq]
    assert [r.status for r in expected] == [
        Status.UNKNOWN, Status.OK, Status.OK, Status.OK, Status.OK, Status.NOT_READABLE,
        Status.OK, Status.OK, Status.OK, Status.UNKNOWN, Status.OK, Status.IS_OWNER,
        Status.IS_OWNER, Status.OK, Status.FULL, Status.OK]
    assert expected[8].freed and expected[7].state == State.REPLICA_DRAINING
    resps, csr = run_on_hardware(KVPool(2, 4096), [("cmd", int(o), k) for o, k in seq])
    assert resps == expected
    assert csr["owner_bytes_lo"] == 2 * 4096 and csr["replica_bytes_lo"] == 0
    assert csr["peak_bytes_lo"] == 2 * 4096


def test_golden_rejects_out_of_range_kv_id():
    gold = GoldenPool(4, 64, kv_id_width=8)
    with pytest.raises(ValueError, match="kv_id"):
        gold.alloc_owner(256)
    with pytest.raises(ValueError, match="n_slots"):
        GoldenPool(0, 64)
    with pytest.raises(ValueError, match="n_slots"):
        KVPool(0, 64)


@pytest.mark.parametrize("directory", [{}, dict(directory="table", layers=6, blocks=1)], ids=["cam", "table"])
def test_cmd_and_nic_streams_alternate(directory):
    """With commands and NIC messages both waiting, the pool serves them alternately
    (command first) and neither starves; the result equals golden run in that order.
    (Table: kv_ids 6 and 7 are outside its 6 x 1 range.)"""
    from mcf_fpga.sim.kit import StreamSource, StreamSink, run_simulation
    rng = random.Random(5)
    cmds = [(int(rng.choice(list(Opcode))), rng.randrange(8)) for _ in range(30)]
    nics = [(rng.randrange(8), rng.randrange(2)) for _ in range(30)]
    dut = KVPool(4, 64, kv_id_width=3, max_readers=3, **directory)
    gold = twin_of(dut)
    expected, applied = [], 0
    for (op, kv), (nkv, final) in zip(cmds, nics):
        expected.append(gold.execute(op, kv))
        applied += gold.nic_invalidate(nkv, bool(final))
    got = {}

    async def tb_cmd(ctx):
        await StreamSource(dut.cmd).send(ctx, [{"opcode": o, "kv_id": k} for o, k in cmds])

    async def tb_nic(ctx):
        await StreamSource(dut.nic).send(ctx, [{"kv_id": k, "final": f} for k, f in nics])

    async def tb_resp(ctx):
        got["r"] = await StreamSink(dut.resp).collect(ctx, len(cmds))
        await ctx.tick().repeat(4)
        got["applied"], _ = await AXI4LiteMaster(dut.csr).read(ctx, REG["nic_applied"])
        got["dropped"], _ = await AXI4LiteMaster(dut.csr).read(ctx, REG["nic_dropped"])

    run_simulation(dut, [tb_cmd, tb_nic, tb_resp], vcd=False, max_cycles=5000)
    assert [Response(Status(r["status"]), r["slot"], State(r["state"]), r["readers"], bool(r["freed"]))
            for r in got["r"]] == expected
    assert (got["applied"], got["dropped"]) == (applied, len(nics) - applied)


@settings(max_examples=60)
@given(src=st.sampled_from(list(Source)), opcode=st.integers(0, 15), kv_id=st.integers(0, (1 << 12) - 1),
       status=st.sampled_from(list(Status)), slot=st.integers(0, 47), state=st.sampled_from(list(State)),
       readers=st.integers(0, 15), freed=st.booleans(), pad=st.integers(0, 255))
def test_unpack_event_reads_every_field_and_ignores_the_byte_padding(src, opcode, kv_id, status, slot, state,
                                                                       readers, freed, pad):
    """``unpack_event`` of an event's bits (as a node's ``m_axis_kvevent`` carries them, padded to
    whole bytes: the pad bits above the layout are not part of the event) gives back every field."""
    from mcf_fpga.hdl.kvpool import event_layout, unpack_event
    lay = event_layout(12, 48, 15)
    bits = lay.const({"src": int(src), "cmd": {"opcode": opcode, "kv_id": kv_id},
                            "resp": {"status": int(status), "slot": slot, "state": int(state),
                                     "readers": readers, "freed": int(freed)}}).as_value().value
    got = unpack_event(bits | pad << lay.size, 12, 48, 15)
    assert got == Event(src, opcode, kv_id, Response(status, slot, state, readers, freed))
