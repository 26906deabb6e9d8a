"""ReliableLink hardware (mcf_fpga/hdl/nic/link) in the Amaranth simulator against mcf_fpga/golden/link.py.

Properties: every packet is delivered exactly once, in order, unchanged, under random
node-side back-pressure, wire bandwidth, latency and seeded faults (drop, bit
corruption, duplication); every frame the hardware puts on the wire is byte-identical
to ``golden.link.build_frame`` of the packet the test sent with that sequence number;
its FCS equals a bit-serial CRC-32 written here and zlib.crc32; bad frames are dropped and counted
per cause exactly as golden classifies them. Amaranth-sim tests stay small
(few packets, window <= 4, max_packet 64).
"""
import os
import random
import zlib

import pytest
from hypothesis import given, settings, strategies as st

from mcf_fpga.spec.link import Cause, frame_bytes, mac_for_node
from mcf_fpga.golden.link import Endpoint, LinkModel, build_frame, check_frame
from mcf_fpga.spec.meta import MetaOp
from mcf_fpga.hdl.nic.link import LinkParams, ReliableLink, DROP_COUNTERS
from mcf_fpga.sim.link_bench import LinkBench
from tests.hdl.nic.crc_oracle import crc32_bitwise

MAX_PACKET = 64
MACS = (mac_for_node(0), mac_for_node(1))
_SCALE = 5 if os.environ.get("HYPOTHESIS_PROFILE") == "thorough" else 1


def _examples(n):
    return settings(max_examples=n * _SCALE, deadline=None)


def _timeout(p: LinkParams, bw: float, latency: int) -> int:
    frame_cycles = -(-frame_bytes(p.max_packet) // bw)
    return int(p.window * frame_cycles * 2 + 4 * latency + 40)


def check_wire_frames(bench, packets):
    """Each frame end i sent: byte-identical to golden built from the test's own packet list."""
    for i in range(len(bench.ends)):
        sent = packets[i]
        for f in bench.wire_frames[i]:
            assert int.from_bytes(f[-4:], "little") == crc32_bitwise(f[:-4]) == zlib.crc32(f[:-4])
            kind, seq, ack = f[14], int.from_bytes(f[16:18], "little"), int.from_bytes(f[18:20], "little")
            assert kind in (MetaOp.DATA, MetaOp.ACK, MetaOp.NAK)
            packet = sent[seq] if kind == MetaOp.DATA else b""
            assert f == build_frame(MACS[1 - i], MACS[i], kind, seq if kind == MetaOp.DATA else 0, ack, packet)


packet_lists = st.lists(st.integers(1, MAX_PACKET), min_size=0, max_size=5)


@_examples(8)
@given(width=st.sampled_from([8, 16, 32, 64]), window=st.sampled_from([1, 2, 4]),
       la=packet_lists, lb=st.lists(st.integers(1, MAX_PACKET), max_size=2),
       seed=st.integers(0, 2**32 - 1), p_src=st.sampled_from([1.0, 0.5]),
       p_sink=st.sampled_from([1.0, 0.6, 0.2]), bw_frac=st.sampled_from([1.0, 0.5]),
       latency=st.integers(0, 12))
def test_clean_link_delivers_and_frames_match_golden(width, window, la, lb, seed, p_src, p_sink,
                                                     bw_frac, latency):
    rng = random.Random(seed)
    pa, pb = [rng.randbytes(n) for n in la], [rng.randbytes(n) for n in lb]
    B = width // 8
    p = LinkParams(data_width=width, window=window, max_packet=MAX_PACKET,
                   timeout=_timeout(LinkParams(data_width=width, window=window, max_packet=MAX_PACKET),
                                    B * bw_frac, latency))
    wires = tuple(LinkModel(latency=latency, bytes_per_cycle=B * bw_frac, seed=seed + i) for i in range(2))
    bench = LinkBench(p, (pa, pb), wires, seed=seed, p_src=p_src, p_sink=p_sink).run(max_cycles=20000)
    assert bench.delivered[1] == pa
    assert bench.delivered[0] == pb
    check_wire_frames(bench, (pa, pb))
    for i, c in enumerate(bench.counters):
        sent = (pa, pb)[i]
        assert c["delivered"] == len((pb, pa)[i])
        assert all(c[name] == 0 for name in DROP_COUNTERS if name not in ("drop_dup", "drop_overflow",
                                                                          "drop_seq"))
        assert c["tx_data_frames"] >= len(sent)


@_examples(10)
@given(width=st.sampled_from([8, 32, 64]), window=st.sampled_from([1, 2, 4]),
       la=st.lists(st.integers(1, MAX_PACKET), min_size=1, max_size=5),
       lb=st.lists(st.integers(1, MAX_PACKET), max_size=2),
       seed=st.integers(0, 2**32 - 1), p_drop=st.floats(0, 0.5), p_corrupt=st.floats(0, 0.5),
       p_dup=st.floats(0, 0.5), max_faults=st.integers(1, 6), p_sink=st.sampled_from([1.0, 0.3]),
       latency=st.integers(0, 10))
def test_faulty_link_delivers_exactly_once_in_order(width, window, la, lb, seed, p_drop, p_corrupt,
                                                    p_dup, max_faults, p_sink, latency):
    rng = random.Random(seed)
    pa, pb = [rng.randbytes(n) for n in la], [rng.randbytes(n) for n in lb]
    B = width // 8
    base = LinkParams(data_width=width, window=window, max_packet=MAX_PACKET)
    p = LinkParams(data_width=width, window=window, max_packet=MAX_PACKET, timeout=_timeout(base, B, latency))
    wires = tuple(LinkModel(latency=latency, bytes_per_cycle=B, p_drop=p_drop, p_corrupt=p_corrupt,
                            p_dup=p_dup, seed=seed + i, max_faults=max_faults) for i in range(2))
    bench = LinkBench(p, (pa, pb), wires, seed=seed, p_sink=p_sink).run(max_cycles=40000)
    assert bench.delivered[1] == pa, "A->B packets lost, duplicated or reordered"
    assert bench.delivered[0] == pb, "B->A packets lost, duplicated or reordered"
    check_wire_frames(bench, (pa, pb))
    for i, c in enumerate(bench.counters):
        bad_crc = sum(crc32_bitwise(f[:-4]) != int.from_bytes(f[-4:], "little") for f in bench.arrived[i])
        assert c["drop_crc"] == bad_crc
        assert c["drop_runt"] == c["drop_length"] == c["drop_dst"] == c["drop_ethertype"] == 0
        assert c["drop_kind"] == c["drop_bad_ack"] == 0


def _malformed(rng, good: bytes) -> bytes:
    """One random malformed variant of a good frame (with a recomputed FCS where the
    corruption is meant to get past the CRC check)."""
    def refcs(body):
        return body + crc32_bitwise(body).to_bytes(4, "little")
    body = bytearray(good[:-4])
    how = rng.choice(["runt", "crc", "dst", "type", "kind", "len", "size", "oversize", "seqahead"])
    if how == "runt":
        return rng.randbytes(rng.randrange(1, 64))
    if how == "crc":
        f = bytearray(good)
        bit = rng.randrange(len(f) * 8)
        f[bit // 8] ^= 1 << bit % 8
        return bytes(f)
    if how == "dst":
        body[rng.randrange(6)] ^= 1 << rng.randrange(8)
    elif how == "type":
        body[12 + rng.randrange(2)] ^= 1 << rng.randrange(8)
    elif how == "kind":
        body[14] = rng.choice([0, 1, 2, 3, 4, 8, 0x15, 0xFF])
    elif how == "len":
        body[20:22] = rng.choice([0, MAX_PACKET + 1, 0xFFFF, rng.randrange(1, 0x10000)]).to_bytes(2, "little")
    elif how == "size":
        return refcs(bytes(body) + bytes(rng.randrange(1, 8)))
    elif how == "oversize":
        return refcs(bytes(body) + bytes(8 * rng.randrange(6, 12)))
    elif how == "seqahead":
        body[16:18] = ((int.from_bytes(body[16:18], "little") + rng.randrange(1, 100)) % 65536).to_bytes(2, "little")
    return refcs(bytes(body))


@_examples(6)
@given(width=st.sampled_from([8, 32, 64]), seed=st.integers(0, 2**32 - 1), n=st.integers(4, 14))
def test_bad_frames_dropped_and_counted_like_golden(width, seed, n):
    rng = random.Random(seed)
    B = width // 8
    p = LinkParams(data_width=width, window=2, max_packet=MAX_PACKET, timeout=5000)
    frames, seq = [], 0
    packets = {}
    for _ in range(n):
        packet = rng.randbytes(rng.randrange(1, MAX_PACKET + 1))
        s = seq if rng.random() < 0.8 else (seq - rng.randrange(1, 3)) % 65536  # some duplicates
        ack = 0 if rng.random() < 0.8 else rng.randrange(1, 65536)            # some bad acks
        good = build_frame(MACS[0], MACS[1], MetaOp.DATA, s, ack, packets.get(s, packet))
        if rng.random() < 0.5:
            frames.append(_malformed(rng, good))
        else:
            frames.append(good)
            if s == seq:
                packets[s] = packet
                seq += 1
    # golden verdicts for the same frames at a receiver with room to spare
    gold = Endpoint(MACS[0], MACS[1], window=2, max_packet=MAX_PACKET)
    for f in frames:
        gold.receive(f)
        gold.deliver()
    gap = 2 * (frame_bytes(MAX_PACKET) + 120) // B + 10
    t, scripted = 5, []
    for f in frames:
        scripted.append((t, f))
        t += -(-len(f) // B) + gap
    bench = LinkBench(p, scripted=scripted, seed=seed).run(max_cycles=t + 400, settle=200)
    c = bench.counters[0]
    for cause, name in zip(Cause, DROP_COUNTERS):
        assert c[name] == gold.counters[cause], name
    assert bench.delivered[0] == gold.delivered
    assert c["rx_good_frames"] == sum(check_frame(f, MACS[0], MAX_PACKET)[0] is None for f in frames)
    # its answers (ACK / NAK) are golden frames too, and the last one acknowledges exactly
    # what golden's receiver expects next
    check_wire_frames(bench, ([], []))
    if bench.wire_frames[0]:
        assert int.from_bytes(bench.wire_frames[0][-1][18:20], "little") == gold.receiver.expected
    if gold.receiver.expected or gold.counters[Cause.DUP]:
        assert bench.wire_frames[0], "no acknowledgement sent"


@_examples(2)
@given(width=st.sampled_from([8, 64]), seed=st.integers(0, 2**32 - 1))
def test_oversize_node_packet_dropped_and_counted(width, seed):
    rng = random.Random(seed)
    sizes = [5, MAX_PACKET + 1 + rng.randrange(20), 9, MAX_PACKET, MAX_PACKET + 9]
    pa = [rng.randbytes(s) for s in sizes]
    p = LinkParams(data_width=width, window=2, max_packet=MAX_PACKET, timeout=800)
    good = [x for x in pa if len(x) <= MAX_PACKET]
    bench = LinkBench(p, (pa, []), seed=seed, p_src=0.7, expect=(len(good), 0)).run(max_cycles=6000)
    assert bench.delivered[1] == good
    assert bench.counters[0]["tx_bad_len"] == len(pa) - len(good)


@pytest.mark.parametrize("kw, field", [({"data_width": 128}, "data_width"), ({"window": 3}, "window"),
                                       ({"max_packet": 0}, "max_packet"), ({"rx_slots": 0}, "rx_slots"),
                                       ({"timeout": 0}, "timeout")])
def test_bad_params_name_the_field(kw, field):
    with pytest.raises(ValueError, match=field):
        LinkParams(**kw)


def test_verilog_export_has_amba_names():
    from mcf_fpga.hdl.verilog import to_verilog
    text = to_verilog(ReliableLink(LinkParams(data_width=64, window=2, max_packet=64)), name="link")
    for port in ("s_axis_tdata", "s_axis_tready", "m_axis_tkeep", "m_axis_tlast", "tx_tvalid",
                 "rx_tdata", "drop_crc", "delivered"):
        assert port in text, port
