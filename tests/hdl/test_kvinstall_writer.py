"""KVInstallWriter (hdl/kvinstall_writer.py) against a Python model of the installer's write
path (golden.kvinstall rules 2-3): per queued packet the directory command it sends, how it
reads the answer (write, drop_full or drop_state), the DMA descriptor, the pending entry and
the record words paired into bus beats; bad packets only drained. Random packets, directory
answers, ``commit_pending`` and back-pressure on every stream."""
import random

from hypothesis import given, settings, strategies as st

from mcf_fpga.spec.kvpool import Opcode, State, Status
from mcf_fpga.spec.kvregion import KVRegion
from mcf_fpga.spec.meta import DEFAULT_PARAMS
from mcf_fpga.hdl.kvinstall_receiver import packet_info_layout
from mcf_fpga.hdl.kvinstall_writer import KVInstallWriter
from mcf_fpga.sim.kit import StreamSink, StreamSource, run_simulation

MAX_RECORDS = 4


def model(entries, words, resps, region, kv_id_width):
    """Expected (commands, descriptors, pending entries, data beats, drop_state, drop_full)."""
    rw, k = region.row_bytes // 8, region.bus_bytes // 8
    cmds, descs, pends, beats, drops = [], [], [], [], {"state": 0, "full": 0}
    resps, pos = iter(resps), 0
    for e in entries:
        mine, pos = words[pos:pos + e["words"]], pos + e["words"]
        if not e["good"]:
            continue
        if e["kv_id"] >> kv_id_width:
            drops["full" if e["first"] else "state"] += 1
            continue
        cmds.append((Opcode.BEGIN_INSTALL if e["first"] else Opcode.LOOKUP, e["kv_id"]))
        r = next(resps)
        if r["status"] in (Status.OK, Status.EXISTS) and r["state"] == State.INSTALLING:
            descs.append((region.base + r["slot"] * region.slot_bytes + e["row0"] * region.row_bytes,
                          e["n"] * region.row_bytes))
            pends.append((e["kv_id"], e["last"], e["owner"]))
            for i in range(0, e["n"] * rw, k):
                beats.append((sum(w << 64 * j for j, w in enumerate(mine[i:i + k])), int(i + k == e["n"] * rw)))
        else:
            drops["full" if e["first"] and r["status"] in (Status.FULL, Status.OUT_OF_RANGE) else "state"] += 1
    return cmds, descs, pends, beats, drops


@settings(max_examples=10, deadline=None)
@given(bus_bytes=st.sampled_from([8, 16, 32]), kv_id_width=st.sampled_from([8, 16]),
       seed=st.integers(0, 2**32 - 1), p=st.sampled_from([0.4, 1.0]))
def test_writer_matches_model(bus_bytes, kv_id_width, seed, p):
    region = KVRegion(0x10000, n_slots=6, slot_rows=8, d=16, bus_bytes=bus_bytes)
    rw = region.row_bytes // 8
    lay = packet_info_layout(DEFAULT_PARAMS, MAX_RECORDS * rw)
    dut = KVInstallWriter(region, lay, kv_id_width=kv_id_width, max_readers=3, addr_width=32, len_width=16)
    rng = random.Random(seed)
    entries = []
    for _ in range(12):
        n = rng.randint(1, MAX_RECORDS)
        good = rng.random() < 0.8
        entries.append(dict(good=int(good), kv_id=rng.choice([1, 0x102, 0x1003, rng.getrandbits(16)]),
                            row0=rng.randrange(2 * region.slot_rows), n=n, last=rng.randrange(2),
                            first=rng.randrange(2), owner=rng.randrange(2),
                            words=n * rw if good else rng.randint(1, MAX_RECORDS * rw)))
    words = [rng.getrandbits(64) for _ in range(sum(e["words"] for e in entries))]
    got = {"cmds": [], "resps": [], "pends": [], "state": 0, "full": 0, "unit_last": 0}
    descs = StreamSink(dut.desc, seed=seed + 1, ready_prob=p)
    data = StreamSink(dut.data, seed=seed + 2, ready_prob=p)
    done = [False]

    async def feed_packets(ctx):
        await StreamSource(dut.packets, seed=seed + 3, valid_prob=p).send(ctx, entries)

    async def feed_records(ctx):
        await StreamSource(dut.records, seed=seed + 4, valid_prob=p).send(ctx, words)
        while ctx.get(dut.busy) or ctx.get(dut.packets.valid):
            await ctx.tick()
        done[0] = True

    async def directory_and_pend(ctx):
        occupied = 0                  # the pending FIFO (2 entries) the parent keeps: drains at random
        while not done[0]:
            resp = dict(status=rng.choice([Status.OK, Status.OK, Status.EXISTS, Status.FULL, Status.UNKNOWN,
                                           Status.OUT_OF_RANGE]),
                        state=rng.choice([State.INSTALLING, State.INSTALLING, State.REPLICA_VALID]),
                        slot=rng.randrange(region.n_slots))
            for name, v in resp.items():
                ctx.set(dut.dir_resp.payload[name], v)
            ctx.set(dut.dir_resp.valid, rng.random() < p)
            ctx.set(dut.dir_cmd.ready, rng.random() < p)
            ctx.set(dut.pend_rdy, occupied < 2)
            commit_pending = rng.random() < 0.3
            ctx.set(dut.commit_pending, commit_pending)
            if ctx.get(dut.packets.valid) and ctx.get(dut.packets.ready):
                assert not (ctx.get(dut.packets.payload.good) and commit_pending)
            if ctx.get(dut.dir_cmd.valid) and ctx.get(dut.dir_cmd.ready):
                got["cmds"].append((ctx.get(dut.dir_cmd.payload.opcode), ctx.get(dut.dir_cmd.payload.kv_id)))
            if ctx.get(dut.dir_resp.valid) and ctx.get(dut.dir_resp.ready):
                got["resps"].append(resp)
            if ctx.get(dut.pend_en):
                pd = ctx.get(dut.pend_data)
                got["pends"].append((pd.kv_id, pd.last, pd.owner))
            occupied += ctx.get(dut.pend_en) - (occupied > 0 and rng.random() < p / 4)
            got["state"] += ctx.get(dut.drop_state)
            got["full"] += ctx.get(dut.drop_full)
            got["unit_last"] += ctx.get(dut.unit_last)
            await ctx.tick()

    run_simulation(dut, [feed_packets, feed_records, directory_and_pend], background=[descs.run, data.run])
    cmds, want_descs, pends, beats, drops = model(entries, words, got["resps"], region, kv_id_width)
    assert got["cmds"] == [(int(o), kv & ((1 << kv_id_width) - 1)) for o, kv in cmds]
    assert [(d["addr"], d["length"]) for d in descs.beats] == want_descs
    assert got["pends"] == pends
    assert got["unit_last"] == sum(last for _, last, _ in pends)
    assert [(b["data"], b["last"]) for b in data.beats] == beats
    assert all(b["keep"] == (1 << bus_bytes) - 1 for b in data.beats)
    assert (got["state"], got["full"]) == (drops["state"], drops["full"])
