"""KV pool: acquire / invalidate / drain / release in every order, and reader counts at every
boundary (0, 1, max-1, max), on golden.kvpool and on the Amaranth KVPool.

An INVALIDATE that freed a replica still holding one reader survived the stateful
test, whose rules always release a reader before anything else runs, and whose hardware check
tolerated one reader. Here:

* every distinct order of a small multiset of commands (two acquires, one invalidate or drain,
  two releases, ...) runs on both models;
* the stateful machine's rules are single commands, so any interleaving can happen;
* the invariant is exact and checked at every step, on golden's directory and on the
  hardware's own answers: **a slot is freed only when its reader count after the command is
  zero** (a RELEASE may free the slot it brings from one reader to zero; nothing else frees a
  slot with readers), and a slot with readers is never handed out again.

The same, plus BEGIN_INSTALL / COMMIT_INSTALL / COMMIT_OWNER (an INSTALLING entry is
never readable and never has readers), on both directories (``DIRS``: the register CAM and the
BRAM table, whose range covers every kv_id these tests use unless a test says otherwise).
"""
import itertools

import pytest

from hypothesis import given, strategies as st, settings
from hypothesis.stateful import RuleBasedStateMachine, rule, invariant

import tests.hdl.test_kvpool as base
from mcf_fpga.golden.kvpool import KVPool as GoldenPool, twin_of
from mcf_fpga.spec.kvpool import Opcode, State, Status
from mcf_fpga.hdl.kvpool import KVPool

A, R, I, D, L = Opcode.ACQUIRE, Opcode.RELEASE, Opcode.INVALIDATE, Opcode.MARK_DRAINING, Opcode.LOOKUP
B, C, O = Opcode.BEGIN_INSTALL, Opcode.COMMIT_INSTALL, Opcode.COMMIT_OWNER
MAX_READERS = 3
KV_BITS = 6
# the two directories; the table holds kv_ids 0..63 (6-bit kv_ids are all layer bits)
DIRS = {"cam": {}, "table": dict(directory="table", layers=2 ** KV_BITS, blocks=1, word_bits=2)}
ALLOCS = (Opcode.ALLOC_OWNER, Opcode.INSTALL_REPLICA, Opcode.BEGIN_INSTALL)


def check_freed_only_without_readers(ops, resps):
    """The exact invariant on a command stream and its answers (hardware or golden): a freed
    slot had exactly zero readers after the command; reader counts are tracked from the answers
    themselves (ACQUIRE/RELEASE/LOOKUP report them)."""
    readers = {}     # kv_id -> readers, as last answered
    for (kind, opcode, kv), r in zip(ops, resps):
        assert kind == "cmd"
        before = readers.get(kv, 0)
        if r.freed:
            after = before - 1 if opcode == Opcode.RELEASE else before
            assert after == 0, f"kv_id {kv} freed by {Opcode(opcode).name} with {before} reader(s) before it"
            readers.pop(kv, None)
        elif r.status == Status.OK:
            readers[kv] = r.readers
        elif r.status == Status.UNKNOWN:
            readers.pop(kv, None)
        if r.status == Status.OK and opcode in ALLOCS:
            assert before == 0 and r.readers == 0


def check_installing_never_read(ops, resps):
    """An INSTALLING entry has no readers and no ACQUIRE succeeds on it (states tracked from the
    answers, which all report the entry after the command)."""
    state = {}
    for (kind, opcode, kv), r in zip(ops, resps):
        assert kind == "cmd"
        if r.state == State.INSTALLING:
            assert r.readers == 0, f"kv_id {kv} INSTALLING with {r.readers} readers"
        if opcode == A and r.status == Status.OK:
            assert state.get(kv) != State.INSTALLING, f"kv_id {kv} acquired while INSTALLING"
        if r.status == Status.UNKNOWN or r.freed:
            state.pop(kv, None)
        elif r.state != State.FREE:
            state[kv] = r.state


def run_both(ops, n_slots=4, max_readers=MAX_READERS, seed=0, directory="cam"):
    dut = KVPool(n_slots, 64, kv_id_width=KV_BITS, max_readers=max_readers, **DIRS[directory])
    gold = twin_of(dut)
    expected = [gold.execute(o, k) for _, o, k in ops]
    got, csr = base.run_on_hardware(dut, ops, seed=seed)
    return expected, got, csr, gold


def orders(multiset):
    return sorted(set(itertools.permutations(multiset)))


@pytest.mark.parametrize("directory", DIRS)
def test_invalidate_and_drain_meet_every_reader_count_in_every_order(directory):
    """Each distinct order of {2 acquires, 1 invalidate or drain, 2 releases} (+ a lookup) on a
    fresh replica, then a cleanup; and each reader count 0..max met by INVALIDATE, by
    MARK_DRAINING and by a NIC message, on both models, answer for answer."""
    seqs = []
    for kill in (I, D):
        seqs += orders((A, A, kill, R, R))
        seqs += orders((A, kill, R, L))
    for n in range(MAX_READERS + 2):          # 0, 1, max-1, max readers, and one refused acquire
        for kill in (I, D):
            seqs.append((A,) * n + (L, kill, L) + (R,) * n + (L,))
            seqs.append((A,) * n + (kill, A, R) + (R,) * n + (L,))
    ops = []
    for j, seq in enumerate(seqs):
        kv = j % (1 << KV_BITS)
        ops.append(("cmd", int(Opcode.INSTALL_REPLICA), kv))
        ops += [("cmd", int(o), kv) for o in seq]
        ops += [("cmd", int(R), kv)] * MAX_READERS + [("cmd", int(I), kv)]   # cleanup: leaves nothing
    expected, got, csr, gold = run_both(ops, directory=directory)
    assert gold.used_slots == 0 and csr["used_slots"] == 0
    check_freed_only_without_readers(ops, expected)       # golden obeys the rule...
    check_freed_only_without_readers(ops, got)            # ...and so does the hardware, on its own answers
    assert got == expected
    # the scenario reaches the boundary the issue names: an INVALIDATE meeting exactly one reader
    pairs = list(zip(ops, expected))
    assert any(op[1] == I and r.status == Status.OK and r.state == State.INVALID and r.readers == 1
               for op, r in pairs)
    assert any(op[1] == I and r.freed for op, r in pairs)


@pytest.mark.parametrize("directory", DIRS)
def test_nic_invalidation_never_frees_a_read_replica(directory):
    """NIC messages (no answer) meet 0, 1, max-1 and max readers; the lookup right after shows
    the hardware kept every replica that still had readers (with those readers) and freed the
    unread ones, as golden does."""
    ops, probes = [], []          # probes: (index of the lookup's answer, readers at the message)
    n_cmds = 0

    def cmd(opcode, kv):
        nonlocal n_cmds
        ops.append(("cmd", int(opcode), kv))
        n_cmds += 1

    kv = 0
    for n in range(MAX_READERS + 1):
        for final in (1, 0):
            kv += 1
            cmd(Opcode.INSTALL_REPLICA, kv)
            for _ in range(n):
                cmd(A, kv)
            ops.append(("nic", kv, final))
            probes.append((n_cmds, n))
            cmd(L, kv)
            cmd(A, kv)                   # refused: not readable any more
            for _ in range(n + 1):
                cmd(R, kv)
            cmd(L, kv)
            ops.append(("nic", kv, 1))
    dut = KVPool(4, 64, kv_id_width=KV_BITS, max_readers=MAX_READERS, **DIRS[directory])
    gold = twin_of(dut)
    expected, applied = [], 0
    for op in ops:
        if op[0] == "cmd":
            expected.append(gold.execute(op[1], op[2]))
        else:
            applied += gold.nic_invalidate(op[1], bool(op[2]))
    got, csr = base.run_on_hardware(dut, ops)
    for idx, n in probes:
        r = got[idx]
        if n:
            assert r.status == Status.OK and r.readers == n, (n, r)
        else:
            assert r.status == Status.UNKNOWN, (n, r)
    assert got == expected
    assert csr["nic_applied"] == applied and csr["used_slots"] == gold.used_slots == 0


class InterleavedPool(RuleBasedStateMachine):
    """Single-command rules over few kv_ids and slots, so acquire, invalidate, drain, release,
    NIC messages and refusals interleave in any order; the exact invariant is checked on
    golden's directory after every step, the hardware replays the run in teardown. Installs
    (BEGIN, COMMIT_INSTALL, COMMIT_OWNER) interleave too: an INSTALLING entry is never acquired and
    never read; the byte counters (owner / replica, moved by COMMIT_OWNER) equal golden's."""
    N_SLOTS = 3
    DIRECTORY = "cam"

    def __init__(self):
        super().__init__()
        table = (2 ** KV_BITS, 1) if self.DIRECTORY == "table" else None
        self.gold = GoldenPool(self.N_SLOTS, 64, kv_id_width=KV_BITS, max_readers=MAX_READERS, table=table)
        self.ops, self.expected = [], []
        self.prev = {}

    kv = st.integers(0, 1)   # two kv_ids: commands mostly meet the same entry

    def _cmd(self, opcode, kv_id):
        before = self.gold.entries()
        r = self.gold.execute(opcode, kv_id)
        self.ops.append(("cmd", int(opcode), kv_id))
        self.expected.append(r)
        after = self.gold.entries()
        if kv_id in before and before[kv_id][1] == State.INSTALLING and opcode == A:
            assert r.status == Status.NOT_READABLE, "an INSTALLING entry was acquired"
        for k, (_slot, _state, readers) in before.items():
            if k not in after:
                left = readers - (1 if opcode == Opcode.RELEASE and k == kv_id else 0)
                assert left == 0, f"kv_id {k} freed by {Opcode(opcode).name} with {readers} reader(s)"

    @rule(kv_id=kv)
    def install(self, kv_id):
        self._cmd(Opcode.INSTALL_REPLICA, kv_id)

    @rule(kv_id=kv)
    def own(self, kv_id):
        self._cmd(Opcode.ALLOC_OWNER, kv_id)

    @rule(kv_id=kv)
    def acquire(self, kv_id):
        self._cmd(A, kv_id)

    @rule(kv_id=kv)
    def release(self, kv_id):
        self._cmd(R, kv_id)

    @rule(kv_id=kv)
    def invalidate(self, kv_id):
        self._cmd(I, kv_id)

    @rule(kv_id=kv)
    def drain(self, kv_id):
        self._cmd(D, kv_id)

    @rule(kv_id=kv)
    def free_owner(self, kv_id):
        self._cmd(Opcode.FREE_OWNER, kv_id)

    @rule(kv_id=kv)
    def lookup(self, kv_id):
        self._cmd(L, kv_id)

    @rule(kv_id=kv)
    def begin_install(self, kv_id):
        self._cmd(B, kv_id)

    @rule(kv_id=kv)
    def commit_install(self, kv_id):
        self._cmd(C, kv_id)

    @rule(kv_id=kv)
    def commit_owner(self, kv_id):
        self._cmd(O, kv_id)

    @rule(kv_id=kv, owner=st.booleans())
    def begin_then_commit(self, kv_id, owner):   # bias: a commit that meets its INSTALLING entry
        self._cmd(B, kv_id)
        self._cmd(O if owner else C, kv_id)

    @rule(kv_id=kv, final=st.booleans())
    def nic(self, kv_id, final):
        before = self.gold.entries()
        self.gold.nic_invalidate(kv_id, final)
        self.ops.append(("nic", kv_id, int(final)))
        if kv_id in before and before[kv_id][2] > 0:
            assert kv_id in self.gold.entries(), "a NIC message freed a replica with readers"

    @invariant()
    def readers_bounded_and_slots_distinct(self):
        e = self.gold.entries()
        assert all(0 <= rd <= MAX_READERS for _, _, rd in e.values())
        assert all(rd == 0 for _, st_, rd in e.values() if st_ == State.FREE)
        slots = [s for s, _, _ in e.values()]
        assert len(slots) == len(set(slots)) and all(0 <= s < self.N_SLOTS for s in slots)
        # an INVALID or draining entry exists only while read (else it would have been freed)
        assert all(rd > 0 for _, st_, rd in e.values() if st_ in (State.INVALID, State.REPLICA_DRAINING))
        assert all(rd == 0 for _, st_, rd in e.values() if st_ == State.INSTALLING)

    def teardown(self):
        if not self.ops:
            return
        dut = KVPool(self.N_SLOTS, 64, kv_id_width=KV_BITS, max_readers=MAX_READERS, **DIRS[self.DIRECTORY])
        got, csr = base.run_on_hardware(dut, self.ops, seed=len(self.ops))
        assert got == self.expected
        cmds = [op for op in self.ops if op[0] == "cmd"]
        if not any(op[0] == "nic" for op in self.ops):
            check_installing_never_read(cmds, got)
        if not any(op[0] == "nic" for op in self.ops):   # NIC frees are silent: no answer to track
            check_freed_only_without_readers(cmds, got)
        assert csr["used_slots"] == self.gold.used_slots
        assert (csr["owner_bytes_lo"], csr["replica_bytes_lo"], csr["peak_bytes_lo"]) == \
               (self.gold.owner_bytes, self.gold.replica_bytes, self.gold.peak_bytes)
        # the event stream: sequential with back-pressure on events, then all three ports at once
        ports = dict(kv_id_width=KV_BITS, max_readers=MAX_READERS, **DIRS[self.DIRECTORY])
        base.check_events_sequential(KVPool(self.N_SLOTS, 64, events=True, **ports), self.ops, self.expected,
                                     seed=len(self.ops))
        base.check_three_ports(KVPool(self.N_SLOTS, 64, install_port=True, events=True, **ports),
                               *base.split_ops(self.ops, len(self.ops) + 1), seed=len(self.ops))


InterleavedPool.TestCase.settings = settings(stateful_step_count=40)
TestInterleavedPool = InterleavedPool.TestCase


class InterleavedTablePool(InterleavedPool):
    DIRECTORY = "table"


InterleavedTablePool.TestCase.settings = settings(stateful_step_count=40)
TestInterleavedTablePool = InterleavedTablePool.TestCase


@given(st.integers(0, 255), st.integers(0, 2 ** 24 - 1))
def test_kv_id_from_packs_like_the_meta_layout(layer, block):
    """The flat kv_id the host puts in KV pool commands is the Amaranth kv_id layout's bits
    (layer low, block above), the same integer the NIC's invalidation stream carries."""
    from amaranth.lib import data
    from mcf_fpga.spec.kvpool import kv_id_from
    from mcf_fpga.golden.nic import kv_id_int
    from mcf_fpga.spec.meta import MetaFields
    from mcf_fpga.hdl.meta import kv_id_layout
    v = kv_id_from(layer, block)
    view = data.Const(kv_id_layout(), v)
    assert (view.layer, view.block) == (layer, block)
    assert v == kv_id_int(MetaFields(kv_id=(layer, block)))
    assert kv_id_from(layer % 16, block, layer_bits=4) == layer % 16 + 16 * block    # a narrower layer field


def test_encodings_are_the_documented_abi():
    """State, opcode and status numbers are a wire/register ABI (firmware decodes them): each
    enum equals its table in docs/memory.md, value for value, and no two names share a value."""
    import re
    from pathlib import Path
    doc = (Path(__file__).resolve().parents[2] / "docs" / "memory.md").read_text()
    rows = re.findall(r"^\| (\d+) \| `([A-Z_]+)` \|", doc, flags=re.M)
    for enum_ in (State, Opcode, Status):
        names = {m.name for m in enum_}
        documented = {name: int(v) for v, name in rows if name in names}
        assert documented == {m.name: m.value for m in enum_}, enum_.__name__
        assert len(enum_.__members__) == len(set(m.value for m in enum_)), f"{enum_.__name__} has aliases"


def test_parameter_bounds_named_at_both_edges(monkeypatch):
    """Every bounded constructor parameter, golden and hardware: the extreme legal values are
    accepted, one beyond is refused with the parameter's name."""
    import gc
    from mcf_fpga.hdl.bus import AXI4LiteRegisterFile
    for cls in (KVPool, AXI4LiteRegisterFile):    # built to check parameters, never elaborated
        monkeypatch.setattr(cls, "_MustUse__silence", True)
    golden_edges = {"n_slots": (1, None), "block_bytes": (1, None), "kv_id_width": (1, None),
                    "max_readers": (1, None), "budget": (0, None)}
    base_args = dict(n_slots=2, block_bytes=64, kv_id_width=4, max_readers=2)
    for name, (lo, _hi) in golden_edges.items():
        GoldenPool(**{**base_args, name: lo})
        with pytest.raises(ValueError, match=name):
            GoldenPool(**{**base_args, name: lo - 1})
    assert GoldenPool(**base_args, budget=3).budget == 2          # clamped to n_slots
    assert GoldenPool(**base_args, budget=2).budget == 2
    assert GoldenPool(**base_args, budget=1).budget == 1
    hw_edges = {"n_slots": (1, 4096), "block_bytes": (1, 2 ** 32 - 1), "kv_id_width": (1, 64),
                "max_readers": (1, 255)}
    for name, (lo, hi) in hw_edges.items():
        for v in (lo, hi):
            KVPool(**{**base_args, name: v})
        for v in (lo - 1, hi + 1):
            with pytest.raises(ValueError, match=name):
                KVPool(**{**base_args, name: v})
    gc.collect()


@pytest.mark.parametrize("directory", DIRS)
def test_smallest_pool_one_slot_one_reader(directory):
    """n_slots = 1, max_readers = 1, budget edges 0/1/2: hardware equals golden answer for answer."""
    ops = []
    for kv in (1, 2):
        ops += [("cmd", int(Opcode.INSTALL_REPLICA), kv), ("cmd", int(Opcode.ALLOC_OWNER), 3),
                ("cmd", int(A), kv), ("cmd", int(A), kv), ("cmd", int(I), kv), ("cmd", int(A), kv),
                ("cmd", int(R), kv), ("cmd", int(R), kv), ("budget", 0), ("cmd", int(Opcode.ALLOC_OWNER), 3),
                ("budget", 2), ("cmd", int(Opcode.ALLOC_OWNER), 3), ("cmd", int(A), 3),
                ("cmd", int(Opcode.FREE_OWNER), 3), ("cmd", int(R), 3), ("cmd", int(Opcode.FREE_OWNER), 3),
                ("budget", 1)]
    dut = KVPool(1, 64, kv_id_width=KV_BITS, max_readers=1, **DIRS[directory])
    gold = twin_of(dut)
    expected = []
    for op in ops:
        if op[0] == "cmd":
            expected.append(gold.execute(op[1], op[2]))
        else:
            gold.budget = op[1]
    got, csr = base.run_on_hardware(dut, ops)
    assert got == expected
    assert Status.READERS_FULL in {r.status for r in expected} and Status.FULL in {r.status for r in expected}
    assert csr["used_slots"] == gold.used_slots and csr["peak_bytes_lo"] == gold.peak_bytes


@pytest.mark.parametrize("n_slots, max_readers, kv_bits", [(1, 1, 1), (2, 3, 3), (5, 3, 8), (16, 15, 32),
                                                           (17, 128, 33), (4096, 255, 64)])
def test_stream_layouts_are_the_documented_fields(n_slots, max_readers, kv_bits):
    """docs/memory.md: cmd = {opcode:4, kv_id}, resp = {status:4, slot, state:3, readers,
    freed:1}, nic = {kv_id, final:1}, first field lowest (the AXI-Stream tdata of KVPoolTop);
    slot and readers just wide enough for slot n_slots-1 and max_readers."""
    from mcf_fpga.hdl.kvpool import cmd_layout, nic_layout, resp_layout

    def fields(layout):
        return [(name, f.width, f.offset) for name, f in sorted(layout, key=lambda x: x[1].offset)]

    def just_wide(w, top):
        return top < 2 ** w and (w == 1 or top >= 2 ** (w - 1))

    assert fields(cmd_layout(kv_bits)) == [("opcode", 4, 0), ("kv_id", kv_bits, 4)]
    assert fields(nic_layout(kv_bits)) == [("kv_id", kv_bits, 0), ("final", 1, kv_bits)]
    (s, s_w, _), (sl, sl_w, sl_o), (st_, st_w, st_o), (rd, rd_w, rd_o), (fr, fr_w, fr_o) = fields(
        resp_layout(n_slots, max_readers))
    assert (s, s_w, sl, st_, st_w, rd, fr, fr_w) == ("status", 4, "slot", "state", 3, "readers", "freed", 1)
    assert just_wide(sl_w, n_slots - 1) and just_wide(rd_w, max_readers)
    assert (sl_o, st_o, rd_o, fr_o) == (4, 4 + sl_w, 7 + sl_w, 7 + sl_w + rd_w)


@pytest.mark.parametrize("directory", DIRS)
@pytest.mark.parametrize("block_bytes", [2 ** 32 - 1, 2 ** 31, 2 ** 31 + 3])
def test_byte_counters_beyond_32_bits(block_bytes, directory):
    """Owner, replica and peak byte counters are 64-bit lo/hi register pairs: with blocks of up to
    2**32-1 bytes the sums cross bit 31 and bit 32, and each half reads as golden's."""
    ops = [("cmd", int(Opcode.ALLOC_OWNER), 1), ("cmd", int(Opcode.ALLOC_OWNER), 2),
           ("cmd", int(Opcode.INSTALL_REPLICA), 3), ("cmd", int(Opcode.INSTALL_REPLICA), 4),
           ("cmd", int(Opcode.ALLOC_OWNER), 5), ("cmd", int(I), 3), ("clear_peak",), ("cmd", int(I), 4)]
    dut = KVPool(5, block_bytes, kv_id_width=KV_BITS, **DIRS[directory])
    gold = twin_of(dut)
    expected = [gold.execute(op[1], op[2]) if op[0] == "cmd" else gold.clear_peak() for op in ops]
    got, csr = base.run_on_hardware(dut, ops)
    assert got == [r for r in expected if r is not None]
    for name, want in (("owner_bytes", gold.owner_bytes), ("replica_bytes", gold.replica_bytes),
                       ("peak_bytes", gold.peak_bytes)):
        assert (csr[name + "_lo"], csr[name + "_hi"]) == (want & 0xFFFFFFFF, want >> 32), name
    assert gold.owner_bytes == 3 * block_bytes and gold.peak_bytes == 4 * block_bytes
    assert csr["block_bytes"] == block_bytes
