"""Golden link protocol (mcf_fpga/golden/link.py): framing, CRC, go-back-N — pure Python, fast.

The CRC is checked against a bit-serial CRC-32 written here from the standard
(reflected polynomial 0xEDB88320), independent of zlib and amaranth.lib.crc.
"""
import random

import pytest
from hypothesis import given, settings, strategies as st

from mcf_fpga.spec.link import Cause, ETHERTYPE, HEADER_BYTES, frame_bytes, mac_for_node
from mcf_fpga.golden.link import Endpoint, LinkModel, build_frame, check_frame, simulate
from mcf_fpga.spec.meta import MetaOp
from mcf_fpga.hdl.nic.link.params import crc_check_constant
from tests.hdl.nic.crc_oracle import crc32_bitwise

A, B = mac_for_node(0), mac_for_node(1)


def test_crc_reference_vector():
    # CRC-32/ISO-HDLC check value from the CRC catalogue.
    assert crc32_bitwise(b"123456789") == 0xCBF43926


@given(st.binary(min_size=0, max_size=200), st.integers(0, 0xFFFF), st.integers(0, 0xFFFF),
       st.sampled_from([MetaOp.DATA, MetaOp.ACK, MetaOp.NAK]))
def test_frame_layout(packet, seq, ack, kind):
    if kind != MetaOp.DATA:
        packet = b""
    f = build_frame(B, A, kind, seq, ack, packet)
    body = f[:-4]
    assert len(f) == frame_bytes(len(packet)) >= 64
    assert len(body) % 8 == 0 and len(body) >= 60
    assert f[0:6] == B and f[6:12] == A and f[12:14] == bytes([0x88, 0xB5])
    assert f[14] == int(kind) and f[15] == 0
    assert f[16:18] == seq.to_bytes(2, "little") and f[18:20] == ack.to_bytes(2, "little")
    assert f[20:22] == len(packet).to_bytes(2, "little") and f[22:24] == b"\0\0"
    assert f[HEADER_BYTES:HEADER_BYTES + len(packet)] == packet
    assert set(body[HEADER_BYTES + len(packet):]) <= {0}
    assert int.from_bytes(f[-4:], "little") == crc32_bitwise(body)
    cause, parsed = check_frame(f, B, max_packet=200)
    if kind == MetaOp.DATA and not packet:
        assert cause == Cause.LENGTH
    else:
        assert cause is None
        assert (parsed.kind, parsed.seq, parsed.ack, parsed.packet) == (kind, seq, ack, packet)


@given(st.binary(min_size=1, max_size=100), st.data())
def test_single_bit_error_is_caught_by_crc(packet, data):
    f = bytearray(build_frame(B, A, MetaOp.DATA, 1, 2, packet))
    bit = data.draw(st.integers(0, len(f) * 8 - 1))
    f[bit // 8] ^= 1 << (bit % 8)
    assert check_frame(bytes(f), B, 100)[0] == Cause.CRC


def test_check_order():
    good = build_frame(B, A, MetaOp.DATA, 0, 0, b"x" * 10)
    assert check_frame(good[:63], B, 100)[0] == Cause.RUNT
    assert check_frame(good + b"\0", B, 100)[0] == Cause.LENGTH
    assert check_frame(build_frame(B, A, MetaOp.DATA, 0, 0, b"x" * 120), B, 100)[0] == Cause.LENGTH
    assert check_frame(good, A, 100)[0] == Cause.DST

    def refcs(body):
        return body + crc32_bitwise(body).to_bytes(4, "little")
    assert check_frame(refcs(good[:12] + b"\x08\x00" + good[14:-4]), B, 100)[0] == Cause.ETHERTYPE
    assert check_frame(refcs(good[:14] + b"\x09" + good[15:-4]), B, 100)[0] == Cause.KIND
    assert check_frame(refcs(good[:20] + b"\x30\x00" + good[22:-4]), B, 100)[0] == Cause.LENGTH


def test_crc_check_constant_is_the_ethernet_residue():
    # The well-known Ethernet "magic number" (register after a good frame, xor-out applied).
    assert crc_check_constant(8) == crc_check_constant(32) == 0x2144DF1C
    # On 64-bit words, a good frame plus 4 zero bytes: computed bit-serially here.
    f = build_frame(B, A, MetaOp.DATA, 7, 9, b"abc") + bytes(4)
    crc = 0xFFFFFFFF
    for byte in f:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0xEDB88320 if crc & 1 else 0)
    assert crc_check_constant(64) == crc ^ 0xFFFFFFFF


@settings(max_examples=100)
@given(st.integers(0, 2**32 - 1), st.integers(1, 8), st.lists(st.integers(1, 60), max_size=25),
       st.lists(st.integers(1, 60), max_size=10),
       st.floats(0, 0.4), st.floats(0, 0.3), st.floats(0, 0.3), st.integers(0, 30))
def test_golden_go_back_n_delivers_exactly_once_in_order(seed, window, la, lb, pd, pc, pu, faults):
    rng = random.Random(seed)
    pa = [rng.randbytes(n) for n in la]
    pb = [rng.randbytes(n) for n in lb]
    wires = tuple(LinkModel(latency=rng.randrange(0, 20), bytes_per_cycle=rng.choice([1, 4, 8]),
                            p_drop=pd, p_corrupt=pc, p_dup=pu, seed=seed + i, max_faults=faults)
                  for i in range(2))
    r = simulate((pa, pb), window=window, timeout=400, max_packet=64, links=wires,
                 rx_capacity=rng.choice([None, 1, 2]), max_cycles=500_000)
    assert r.delivered[1] == pa and r.delivered[0] == pb


def test_endpoint_refuses_bad_packets_and_window():
    e = Endpoint(A, B, window=2, max_packet=16)
    with pytest.raises(ValueError, match="packet length"):
        e.offer(b"")
    with pytest.raises(ValueError, match="packet length"):
        e.offer(bytes(17))
    assert e.offer(b"a") and e.offer(b"b") and not e.offer(b"c")
    with pytest.raises(ValueError, match="p_drop"):
        LinkModel(p_drop=2)
    assert ETHERTYPE == 0x88B5
