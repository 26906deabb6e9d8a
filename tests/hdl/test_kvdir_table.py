"""KV pool: the table directory (``KVPool(directory="table")``, mcf_fpga/hdl/kvdir_table.py)
and the INSTALLING state, against golden.kvpool on both directories.

* every order of BEGIN_INSTALL / COMMIT_INSTALL / INVALIDATE (or MARK_DRAINING) / ACQUIRE /
  RELEASE on one kv_id, with the invariants checked on every answer (a slot with readers is never
  freed, an INSTALLING entry is never readable);
* kv_ids outside the table's (layers, blocks) range, including the ones that would alias an
  in-range entry if the range check were missing;
* lowest-free-slot allocation under fragmentation on a 300-slot table (five 64-bit bitmap words);
* parameter validation naming the field and its limit.
"""
import random

import pytest
from hypothesis import given, settings, strategies as st

import tests.hdl.test_kvpool as base
from tests.hdl.test_kvpool_interleavings import (DIRS, KV_BITS, MAX_READERS, check_freed_only_without_readers,
                                                    check_installing_never_read, orders)
from mcf_fpga.golden.kvpool import KVPool as GoldenPool, twin_of
from mcf_fpga.spec.kvpool import Opcode, State, Status, Response, kv_id_from
from mcf_fpga.hdl.kvpool import KVPool
from mcf_fpga.hdl.kvdir_table import table_index

A, R, I, D, L = Opcode.ACQUIRE, Opcode.RELEASE, Opcode.INVALIDATE, Opcode.MARK_DRAINING, Opcode.LOOKUP
B, C, O, F = Opcode.BEGIN_INSTALL, Opcode.COMMIT_INSTALL, Opcode.COMMIT_OWNER, Opcode.FREE_OWNER


def replay(dut, ops):
    """Golden (``twin_of(dut)``) and hardware answers to ``ops`` (cmd/nic/budget tuples)."""
    gold = twin_of(dut)
    expected = []
    for op in ops:
        if op[0] == "cmd":
            expected.append(gold.execute(op[1], op[2]))
        elif op[0] == "nic":
            gold.nic_invalidate(op[1], bool(op[2]))
        elif op[0] == "clear_peak":
            gold.clear_peak()
        else:
            gold.budget = op[1]
    got, csr = base.run_on_hardware(dut, ops, seed=len(ops))
    return expected, got, csr, gold


@pytest.mark.parametrize("directory", DIRS)
def test_install_commands_in_every_order(directory):
    """Every distinct order of {BEGIN_INSTALL, COMMIT_INSTALL, INVALIDATE or MARK_DRAINING,
    ACQUIRE, RELEASE} (+ a LOOKUP), of {BEGIN_INSTALL, COMMIT_OWNER, INVALIDATE or MARK_DRAINING,
    ACQUIRE} on a fresh kv_id, and COMMIT_INSTALL / COMMIT_OWNER of every state, then a cleanup: hardware
    equals golden answer for answer (byte counters included), and on the answers a slot is freed
    only with zero readers after the command, an INSTALLING entry never has readers and no ACQUIRE
    of it succeeds."""
    seqs = []
    for kill in (I, D):
        seqs += orders((B, C, kill, A, R))
        seqs += orders((B, A, C, A, L))
    for kill in (I, D):
        seqs += orders((B, O, kill, A))       # (the cleanup releases)
    # COMMIT_INSTALL / COMMIT_OWNER of every other state: valid, draining, invalid, owner, committed
    for c in (C, O):
        seqs += [(B, c, c), (B, c, A, D, c, R), (B, c, A, I, c, R), (Opcode.ALLOC_OWNER, c, F),
                 (Opcode.INSTALL_REPLICA, c), (B, C, O) if c == O else (B, O, C), (B, A, c, A, F, R, R, F)]
    ops = []
    for j, seq in enumerate(seqs):
        kv = j % (1 << KV_BITS)
        ops += [("cmd", int(o), kv) for o in seq]
        ops += [("cmd", int(R), kv)] * MAX_READERS + [("cmd", int(I), kv), ("cmd", int(F), kv)]
        if j % 50 == 7:                         # the counters mid-run (an entry of each kind held)
            ops += [("cmd", int(Opcode.ALLOC_OWNER), 60), ("cmd", int(B), 61), ("cmd", int(O), 61),
                    ("cmd", int(B), 62), ("clear_peak",), ("cmd", int(F), 60), ("cmd", int(F), 61),
                    ("cmd", int(I), 62)]
    expected, got, csr, gold = replay(KVPool(4, 64, kv_id_width=KV_BITS, max_readers=MAX_READERS,
                                             **DIRS[directory]), ops)
    assert got == expected
    cmds = [op for op in ops if op[0] == "cmd"]
    for answers in (expected, got):
        check_freed_only_without_readers(cmds, answers)
        check_installing_never_read(cmds, answers)
    assert gold.used_slots == 0 and csr["used_slots"] == 0
    assert (csr["owner_bytes_lo"], csr["replica_bytes_lo"], csr["peak_bytes_lo"]) == \
           (gold.owner_bytes, gold.replica_bytes, gold.peak_bytes) == (0, 0, 3 * 64)
    pairs = list(zip(cmds, expected))
    # the scenarios reach the new rules
    assert any(op[1] == A and r.status == Status.NOT_READABLE and r.state == State.INSTALLING for op, r in pairs)
    assert any(op[1] == L and r.state == State.INSTALLING for op, r in pairs)
    assert any(op[1] == C and r.status == Status.OK and r.state == State.REPLICA_VALID for op, r in pairs)
    assert any(op[1] == C and r.status == Status.NOT_INSTALLING for op, r in pairs)
    assert any(op[1] == C and r.status == Status.UNKNOWN for op, r in pairs)
    assert any(op[1] == O and r.status == Status.OK and r.state == State.OWNER for op, r in pairs)
    assert any(op[1] == O and r.status == Status.NOT_INSTALLING for op, r in pairs)
    assert any(op[1] == O and r.status == Status.UNKNOWN for op, r in pairs)
    assert any(op[1] == I and r.status == Status.IS_OWNER and prev[1] == O for (op, r), (prev, _) in zip(pairs[1:], pairs))
    assert any(op[1] in (I, D) and r.freed and prev[1] == B for (op, r), (prev, _) in zip(pairs[1:], pairs))


@pytest.mark.parametrize("directory", DIRS)
def test_installing_counts_as_replica_bytes(directory):
    """An INSTALLING slot counts as replica bytes (and in used_slots / peak); a second
    BEGIN_INSTALL of it is EXISTS, a full pool refuses it with FULL; COMMIT_OWNER moves its bytes
    to the owner counter (used slots and peak unchanged)."""
    kv = [1, 2, 3]
    ops = [("cmd", int(Opcode.ALLOC_OWNER), kv[0]), ("cmd", int(B), kv[1]), ("cmd", int(B), kv[1]),
           ("cmd", int(B), kv[2]), ("cmd", int(L), kv[1])]
    expected, got, csr, gold = replay(KVPool(2, 100, kv_id_width=KV_BITS, **DIRS[directory]), ops)
    assert got == expected
    assert [r.status for r in got] == [Status.OK, Status.OK, Status.EXISTS, Status.FULL, Status.OK]
    assert got[4] == Response(Status.OK, 1, State.INSTALLING, 0, False)
    assert (csr["owner_bytes_lo"], csr["replica_bytes_lo"], csr["peak_bytes_lo"], csr["used_slots"]) == \
           (100, 100, 200, 2) == (gold.owner_bytes, gold.replica_bytes, gold.peak_bytes, gold.used_slots)
    ops += [("cmd", int(O), kv[1]), ("cmd", int(O), kv[1]), ("cmd", int(Opcode.INVALIDATE), kv[1])]
    expected, got, csr, gold = replay(KVPool(2, 100, kv_id_width=KV_BITS, **DIRS[directory]), ops)
    assert got == expected
    assert got[5:] == [Response(Status.OK, 1, State.OWNER), Response(Status.NOT_INSTALLING, 1, State.OWNER),
                       Response(Status.IS_OWNER, 1, State.OWNER)]
    assert (csr["owner_bytes_lo"], csr["replica_bytes_lo"], csr["peak_bytes_lo"], csr["used_slots"]) == \
           (200, 0, 200, 2) == (gold.owner_bytes, gold.replica_bytes, gold.peak_bytes, gold.used_slots)


def test_kv_ids_outside_the_table_range():
    """Table of 2 layers x 8 blocks over 12-bit kv_ids: an allocation outside the range answers
    OUT_OF_RANGE (before FULL and EXISTS), every other command UNKNOWN, a NIC message is
    dropped -- also for kv_ids whose index ``block * layers + layer`` lands on a held entry
    (layer 2 of block 0 = entry of layer 0 of block 1; block 8 = one past the table, which a
    truncated address would wrap to entry 0)."""
    layers, blocks = 2, 8
    dut = KVPool(3, 64, kv_id_width=12, max_readers=3, directory="table", layers=layers, blocks=blocks,
                 word_bits=2)
    inside = [kv_id_from(0, 1), kv_id_from(0, 0), kv_id_from(1, 7)]
    outside = [kv_id_from(2, 0), kv_id_from(0, 8), kv_id_from(255, 15), kv_id_from(1, 15), kv_id_from(3, 0)]
    assert table_index(kv_id_from(2, 0), layers) == table_index(inside[0], layers)
    assert table_index(kv_id_from(0, 8), layers) % (layers * blocks) == table_index(inside[1], layers)
    ops = [("cmd", int(Opcode.ALLOC_OWNER), inside[0]), ("cmd", int(Opcode.INSTALL_REPLICA), inside[1])]
    for kv in outside:
        ops += [("cmd", int(op), kv) for op in Opcode] + [("cmd", 12, kv), ("nic", kv, 0), ("nic", kv, 1)]
    ops += [("cmd", int(B), inside[2])]                     # the pool is now full
    for kv in outside[:2]:
        ops += [("cmd", int(op), kv) for op in (Opcode.ALLOC_OWNER, Opcode.INSTALL_REPLICA, B, L)]
    ops += [("cmd", int(L), k) for k in inside]
    expected, got, csr, gold = replay(dut, ops)
    assert got == expected
    answers = iter(got)
    for op in ops:
        if op[0] != "cmd":
            continue
        r = next(answers)
        if op[2] in outside:
            want = (Status.BAD_OPCODE if op[1] > max(Opcode) else
                    Status.OUT_OF_RANGE if op[1] in (Opcode.ALLOC_OWNER, Opcode.INSTALL_REPLICA, B) else
                    Status.UNKNOWN)
            assert r == Response(want), (op, r)
    assert got[-3:] == [Response(Status.OK, 0, State.OWNER), Response(Status.OK, 1, State.REPLICA_VALID),
                        Response(Status.OK, 2, State.INSTALLING)]
    assert csr["nic_dropped"] == 2 * len(outside) and csr["nic_applied"] == 0
    assert csr["used_slots"] == 3 == gold.used_slots


@pytest.mark.parametrize("directory", DIRS)
@settings(max_examples=8)
@given(data=st.data())
def test_install_traffic_from_three_ports_replays_into_golden(directory, data):
    """The node's traffic pattern on both directories: the host's BEGIN_INSTALL / LOOKUP /
    ACQUIRE / RELEASE / INVALIDATE on ``cmd``, the installer's LOOKUP / COMMIT_INSTALL on
    ``icmd``, NIC invalidations on ``nic``, all at once with random gaps and back-pressure on
    ``resp``, ``iresp`` and ``events``, over three kv_ids on three slots: the event stream replayed
    into golden reproduces every answer, each port's commands appear once and in order, ``resp`` and
    ``iresp`` carry their own port's answers (``base.check_three_ports``)."""
    kv = st.integers(0, 2)
    cmds = data.draw(st.lists(st.tuples(st.sampled_from([B, B, L, A, R, I, D, Opcode.ALLOC_OWNER]), kv),
                              max_size=14), "cmd")
    icmds = data.draw(st.lists(st.tuples(st.sampled_from([L, C, C]), kv), max_size=14), "icmd")
    nics = data.draw(st.lists(st.tuples(kv, st.integers(0, 1)), max_size=6), "nic")
    dut = KVPool(3, 64, kv_id_width=KV_BITS, max_readers=MAX_READERS, install_port=True, events=True,
                 **DIRS[directory])
    base.check_three_ports(dut, [(int(o), k) for o, k in cmds], nics, [(int(o), k) for o, k in icmds],
                           seed=data.draw(st.integers(0, 1000), "seed"))


def test_lowest_free_slot_under_fragmentation_300_slots():
    """A 300-slot table (28 layers x 11 blocks, five 64-bit bitmap words, the last one partial),
    filled with owners, replicas and installs in random kv_id order, then a scattered subset
    freed in random order (a whole word, single bits on both sides of every word boundary, the
    first and the last slot, 30 random ones), then refilled: the refill takes exactly the freed
    slots in ascending order (computed here, independently of golden), then FULL; the hardware
    equals golden answer for answer."""
    n, layers, blocks = 300, 28, 11
    rng = random.Random(18)
    ids = [kv_id_from(layer, block) for block in range(blocks) for layer in range(layers)]
    rng.shuffle(ids)
    fill, spare = ids[:n], ids[n:]
    kinds = [rng.choice((Opcode.ALLOC_OWNER, Opcode.INSTALL_REPLICA, B)) for _ in fill]
    ops = [("cmd", int(k), kv) for k, kv in zip(kinds, fill)]
    ops.append(("cmd", int(Opcode.ALLOC_OWNER), spare[0]))                 # FULL
    freed = set(range(64, 128)) | {0, 63, 127, 128, 191, 192, 255, 256, n - 1} | set(rng.sample(range(n), 30))
    order = sorted(freed, key=lambda _: rng.random())
    ops += [("cmd", int(Opcode.FREE_OWNER if kinds[s] == Opcode.ALLOC_OWNER else I), fill[s]) for s in order]
    refill = spare + [fill[s] for s in order]            # freed kv_ids may come back
    refill = refill[:len(freed) + 1]
    ops += [("cmd", int(rng.choice((Opcode.ALLOC_OWNER, Opcode.INSTALL_REPLICA, B))), kv) for kv in refill]
    dut = KVPool(n, 4096, kv_id_width=12, max_readers=3, directory="table", layers=layers, blocks=blocks)
    expected, got, csr, gold = replay(dut, ops)
    assert got == expected
    assert [r.slot for r in got[:n]] == list(range(n)) and got[n].status == Status.FULL
    frees = got[n + 1:n + 1 + len(freed)]
    assert all(r.freed for r in frees)
    tail = got[n + 1 + len(freed):]
    assert [r.slot for r in tail[:-1]] == sorted(freed) and all(r.status == Status.OK for r in tail[:-1])
    assert tail[-1].status == Status.FULL
    assert csr["used_slots"] == gold.used_slots == n


def test_table_parameters_named_with_their_limits(monkeypatch):
    """Each table parameter at its legal edges is accepted; beyond them the error names the
    parameter and its limit. The CAM keeps its 4096-slot limit; layers/blocks belong to the table."""
    import gc
    from mcf_fpga.hdl.bus import AXI4LiteRegisterFile
    for cls in (KVPool, AXI4LiteRegisterFile):
        monkeypatch.setattr(cls, "_MustUse__silence", True)
    t = dict(directory="table", layers=2, blocks=8, kv_id_width=12)
    for kw in (dict(n_slots=65536), dict(n_slots=1), dict(layers=256), dict(layers=1), dict(blocks=16),
               dict(blocks=1), *(dict(word_bits=w) for w in (2, 4, 8, 16, 32, 64)),
               dict(layers=256, blocks=4096, kv_id_width=20)):
        KVPool(**{"n_slots": 4, "block_bytes": 64, **t, **kw})
    KVPool(4096, 64)
    bad = [(dict(n_slots=65537), "n_slots must be in 1..65536"), (dict(n_slots=0), "n_slots"),
           (dict(layers=257), r"layers must be in 1..256"), (dict(layers=0), "layers"),
           (dict(layers=None), "layers"), (dict(blocks=17), r"blocks must be in 1..16"),
           (dict(blocks=0), "blocks"), (dict(blocks=None), "blocks"),
           *((dict(word_bits=w), "word_bits") for w in (1, 3, 5, 7, 9, 15, 17, 31, 33, 63, 65, 128)),
           (dict(directory="hash"), "directory"),
           (dict(layers=256, blocks=4097, kv_id_width=21), r"layers \* blocks must be <= 1048576")]
    for kw, msg in bad:
        with pytest.raises(ValueError, match=msg):
            KVPool(**{"n_slots": 4, "block_bytes": 64, **t, **kw})
    with pytest.raises(ValueError, match="n_slots must be in 1..4096"):
        KVPool(4097, 64)
    with pytest.raises(ValueError, match="directory='table' only"):
        KVPool(4, 64, layers=2, blocks=2)
    for kw, msg in ((dict(table=(0, 1)), "layers"), (dict(table=(1, 0)), "blocks"), (dict(layer_bits=0), "layer_bits")):
        with pytest.raises(ValueError, match=msg):
            GoldenPool(4, 64, **kw)
    gc.collect()


def test_kr260_table_elaborates():
    """The KR260 table (7,281 slots, 28 layers x 512 blocks, docs/memory.md) builds to RTLIL: the
    memories and the find-first-set of 114 bitmap words elaborate at full size."""
    from amaranth.back import rtlil
    from mcf_fpga.spec.kvregion import kr260_region
    n = kr260_region().n_slots
    assert n == 7281
    dut = KVPool(n, kr260_region().slot_bytes, directory="table", layers=28, blocks=512)
    text = rtlil.convert(dut)
    assert "$mem" in text
