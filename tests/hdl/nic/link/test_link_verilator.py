"""Soak of ReliableLink on the Verilator backend (mcf_fpga/sim/verilator): two endpoints built
once (MACs as inputs), thousands of packets through seeded lossy wires (drop, bit
corruption, duplication), random back-pressure on delivery, and a run long enough to wrap
the 16-bit sequence numbers. Every packet delivered exactly once, in order; every frame
on the wire byte-identical to golden.link.build_frame; CRC drops counted exactly.
"""
import random
import zlib

import pytest

from mcf_fpga.spec.link import Cause, mac_for_node, mac_to_int
from mcf_fpga.golden.link import LinkModel, build_frame, check_frame
from mcf_fpga.spec.meta import MetaOp
from mcf_fpga.hdl.nic.link import DROP_COUNTERS
from mcf_fpga.hdl.nic.link import LinkParams, ReliableLink

pytestmark = pytest.mark.slow
MACS = (mac_for_node(0), mac_for_node(1))


@pytest.fixture(scope="module")
def models():
    from mcf_fpga.sim.verilator import build
    p = LinkParams(data_width=64, window=8, max_packet=256, timeout=600, rx_slots=2)
    a = build(ReliableLink(p, mac_ports=True))
    b = a.new()
    for m, (loc, peer) in ((a, (0, 1)), (b, (1, 0))):
        m.poke("local_mac", mac_to_int(MACS[loc]))
        m.poke("peer_mac", mac_to_int(MACS[peer]))
        m.reset()
    return a, b


def run_pair(models, packets, wires, *, chunk=16, max_cycles=5_000_000, check_frames=True,
             backpressure_seed=None, inject=None):
    """``inject``: optional list of extra frames pushed into B's rx, a few per chunk,
    between the frames coming from A."""
    a, b = models
    ends = (a, b)
    for m in ends:
        m.poke("local_mac", mac_to_int(MACS[ends.index(m)]))
        m.poke("peer_mac", mac_to_int(MACS[1 - ends.index(m)]))
        m.reset()
        m.sink_backpressure("m_axis", backpressure_seed)
    for i, m in enumerate(ends):
        for pk in packets[i]:
            m.push("s_axis", pk)
    got = ([], [])
    bad_crc = [0, 0]
    while a.cycle < max_cycles and (len(got[1]) < len(packets[0]) or len(got[0]) < len(packets[1])
                                    or inject):
        for m in ends:
            m.step(chunk)
        for i, m in enumerate(ends):
            for f in m.pull_all("tx"):
                if check_frames:
                    kind, seq, ack = f[14], int.from_bytes(f[16:18], "little"), int.from_bytes(f[18:20], "little")
                    if kind == MetaOp.DATA:
                        # the packet with this seq: the index congruent to seq mod 2^16 nearest the delivery point
                        n = len(got[1 - i])
                        idx = n + ((seq - n) % 65536 if (seq - n) % 65536 < 32768 else (seq - n) % 65536 - 65536)
                        payload = packets[i][idx]
                    else:
                        payload, seq = b"", 0
                    assert f == build_frame(MACS[1 - i], MACS[i], kind, seq, ack, payload)
                for c in wires[i].fate(f):
                    bad_crc[1 - i] += zlib.crc32(c[:-4]) != int.from_bytes(c[-4:], "little")
                    ends[1 - i].push("rx", c)
            got[i].extend(m.pull_all("m_axis"))
        if inject and b.pending("rx") < 256:
            for _ in range(2):
                if inject:
                    b.push("rx", inject.pop())
    # let every frame already pushed be checked (and counted) before the caller reads counters
    while a.pending("rx") or b.pending("rx"):
        a.step(64)
        b.step(64)
    a.step(64)
    b.step(64)
    return got, bad_crc


def test_soak_faulty_link(models):
    rng = random.Random(2024)
    packets = ([rng.randbytes(rng.randrange(1, 257)) for _ in range(3000)],
               [rng.randbytes(rng.randrange(1, 257)) for _ in range(1000)])
    wires = tuple(LinkModel(latency=0, bytes_per_cycle=8, p_drop=0.03, p_corrupt=0.03, p_dup=0.03,
                            seed=7 + i) for i in range(2))
    got, bad_crc = run_pair(models, packets, wires, backpressure_seed=5)
    assert got[1] == packets[0]
    assert got[0] == packets[1]
    assert not models[0].pull_all("m_axis") and not models[1].pull_all("m_axis")
    for i, m in enumerate(models):
        assert m.peek("drop_crc") == bad_crc[i]
        assert m.peek("delivered") == len(packets[1 - i])
    assert models[0].peek("tx_retransmits") > 0 and models[1].peek("drop_dup") > 0


def test_sequence_numbers_wrap(models):
    rng = random.Random(7)
    packets = ([rng.randbytes(rng.randrange(1, 9)) for _ in range(70_000)], [])
    wires = tuple(LinkModel(latency=0, bytes_per_cycle=8, p_drop=0.001, seed=11 + i) for i in range(2))
    got, _ = run_pair(models, packets, wires, chunk=64, check_frames=False)
    assert got[1] == packets[0]


def _junk(rng, good):
    """A malformed frame that fails golden's stateless checks (runt, size, CRC, MAC, type, kind, length)."""
    def refcs(body):
        return body + zlib.crc32(body).to_bytes(4, "little")
    body = bytearray(good[:-4])
    how = rng.randrange(8)
    if how == 0:
        return rng.randbytes(rng.randrange(1, 300))
    if how == 1:
        f = bytearray(good)
        for _ in range(rng.randrange(1, 4)):
            bit = rng.randrange(len(f) * 8)
            f[bit // 8] ^= 1 << bit % 8
        return bytes(f)
    if how == 2:
        body[rng.randrange(6)] ^= 1 << rng.randrange(8)
    elif how == 3:
        body[12:14] = rng.choice([b"\x08\x00", b"\x86\xdd", b"\x88\xb6", rng.randbytes(2)])
    elif how == 4:
        body[14] = rng.choice([0, 1, 2, 3, 4, 8, 0x45, 0xFF])
    elif how == 5:
        body[20:22] = rng.randrange(0, 65536).to_bytes(2, "little")
    elif how == 6:
        return refcs(bytes(body) + rng.randbytes(rng.randrange(1, 300)))
    else:
        return rng.randbytes(rng.randrange(64, 300))
    return refcs(bytes(body))


def test_fuzz_malformed_frames_between_valid_traffic(models):
    """10,000 malformed frames into B's rx while A streams packets to B over a lossy wire:
    nothing valid lost or duplicated, nothing malformed delivered, every drop counted under
    the cause golden gives it."""
    rng = random.Random(99)
    packets = ([rng.randbytes(rng.randrange(1, 257)) for _ in range(2000)],
               [rng.randbytes(rng.randrange(1, 257)) for _ in range(300)])
    junk, expect = [], {c: 0 for c in Cause}
    while len(junk) < 10_000:
        good = build_frame(MACS[1], MACS[0], MetaOp.DATA, rng.randrange(65536), 0,
                           rng.randbytes(rng.randrange(1, 257)))
        f = _junk(rng, good)
        cause, _ = check_frame(f, MACS[1], 256)
        if cause is None:
            continue
        expect[cause] += 1
        junk.append(f)
    wires = tuple(LinkModel(latency=0, bytes_per_cycle=8, p_drop=0.02, p_corrupt=0.02, p_dup=0.02,
                            seed=3 + i) for i in range(2))
    got, bad_crc = run_pair(models, packets, wires, inject=list(junk), backpressure_seed=9)
    a, b = models
    assert got[1] == packets[0]
    assert got[0] == packets[1]
    assert not b.pull_all("m_axis")
    for cause, name in zip(Cause, DROP_COUNTERS):
        if cause in (Cause.RUNT, Cause.LENGTH, Cause.DST, Cause.ETHERTYPE, Cause.KIND):
            assert b.peek(name) == expect[cause], name
    assert b.peek("drop_crc") == expect[Cause.CRC] + bad_crc[1]
    assert sum(expect.values()) == 10_000 and min(expect[c] for c in (Cause.RUNT, Cause.LENGTH,
               Cause.CRC, Cause.DST, Cause.ETHERTYPE, Cause.KIND)) > 100
