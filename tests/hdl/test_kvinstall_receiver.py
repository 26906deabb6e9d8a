"""KVInstallReceiver (hdl/kvinstall_receiver.py) against golden.kvinstall's packet check:
every well-formed packet (``KVInstaller.parse`` not None) comes out as a ``good`` entry with
its header's fields and its record words; every other packet counts ``malformed`` and leaves
only the record words it got before it failed (an entry to drain, if any), none if its
headers were already bad; random unit and fault packets, random valid gaps and random
back-pressure on both outputs."""
import random

from hypothesis import given, settings, strategies as st

from mcf_fpga.golden.header import unpack_header
from mcf_fpga.golden.kvinstall import KVInstaller as GoldenInstaller
from mcf_fpga.golden.kvpool import KVPool as GoldenPool
from mcf_fpga.golden.kvstore import KVStore
from mcf_fpga.spec.kvregion import KVRegion
from mcf_fpga.spec.meta import DEFAULT_PARAMS
from mcf_fpga.hdl.kvinstall_receiver import KVInstallReceiver
from mcf_fpga.sim.kit import StreamSink, StreamSource, packets_to_beats, run_simulation
from tests.hdl.test_kvinstall import KV_IDS, fault_packet, unit_packets

HB = DEFAULT_PARAMS.header_bytes
MAX_RECORDS = 6


def expected(golden, packet, row_bytes, max_words):
    """(malformed, entry or None, record words) the receiver makes of ``packet``."""
    words = [int.from_bytes(packet[i:i + 8], "little") for i in range(HB + 8, len(packet), 8)]
    f = golden.parse(packet)
    if f is not None:
        kv_id, row0, n, last, first, owner = f
        entry = dict(good=1, kv_id=kv_id, row0=row0, n=n, last=int(last), first=int(first), owner=int(owner),
                     words=n * row_bytes // 8)
        return False, entry, words
    # headers alone good: the same headers with exactly the promised payload parse
    length = unpack_header(packet[:HB]).length if len(packet) >= HB else 0
    headers_ok = len(packet) >= HB + 8 and length >= 8 and golden.parse(packet[:HB + 8] + bytes(length - 8))
    if not headers_ok:
        return True, None, []
    n = int.from_bytes(packet[HB + 2:HB + 4], "little")
    kept = words[:n * row_bytes // 8]
    return True, (dict(good=0, words=len(kept)) if kept else None), kept


@settings(max_examples=10, deadline=None)
@given(bus_bytes=st.sampled_from([8, 16]), seed=st.integers(0, 2**32 - 1),
       valid_p=st.sampled_from([0.5, 1.0]), ready_p=st.sampled_from([0.3, 1.0]))
def test_receiver_matches_golden_check(bus_bytes, seed, valid_p, ready_p):
    region = KVRegion(0x10000, n_slots=6, slot_rows=8, d=16, bus_bytes=bus_bytes)
    max_payload = 8 + MAX_RECORDS * region.row_bytes
    max_words = MAX_RECORDS * region.row_bytes // 8
    dut = KVInstallReceiver(region, DEFAULT_PARAMS, max_payload, max_words)
    golden = GoldenInstaller(GoldenPool(4, 64), KVStore(region), max_payload=max_payload)
    rng = random.Random(seed)
    pkts = []
    for _ in range(3):
        pkts += unit_packets(rng, rng.choice(KV_IDS), region=region, max_records=MAX_RECORDS,
                             first=rng.random() < 0.5)
        pkts += [fault_packet(rng, rng.choice(KV_IDS), region=region, max_records=MAX_RECORDS) for _ in range(3)]
    rng.shuffle(pkts)
    want = [expected(golden, p, region.row_bytes, max_words) for p in pkts]
    n_malformed = [0]
    src = StreamSource(dut.s_axis, seed=seed, valid_prob=valid_p)
    recs = StreamSink(dut.records, seed=seed + 1, ready_prob=ready_p)
    infos = StreamSink(dut.packets, seed=seed + 2, ready_prob=ready_p)

    async def feed(ctx):
        await src.send(ctx, packets_to_beats(pkts, 64))
        while ctx.get(dut.busy) or ctx.get(dut.records.valid):
            await ctx.tick()

    async def count(ctx):
        async for _, _, mal in ctx.tick().sample(dut.malformed):
            n_malformed[0] += mal

    run_simulation(dut, [feed], background=[recs.run, infos.run, count])
    assert n_malformed[0] == sum(w[0] for w in want)
    got = [{k: e[k] for k in w} for e, w in zip(infos.beats, [w[1] for w in want if w[1]])]
    assert got == [w[1] for w in want if w[1]]
    assert len(infos.beats) == len(got)
    assert recs.beats == [x for w in want for x in w[2]]
    assert any(w[1] and w[1]["good"] for w in want)
