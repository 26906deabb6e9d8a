"""Golden twin of the Ethernet MAC (IEEE 802.3 clause 3/35 framing on GMII).

A frame on the wire is: 7 bytes 0x55, SFD 0xD5, the frame bytes (destination
address onward) zero-padded to 60 bytes, then the FCS (CRC-32, the value of
``zlib.crc32`` sent least-significant byte first), then at least 12 idle byte
times (inter-frame gap). ``fcs`` uses zlib, independent of the hardware's
``amaranth.lib.crc``.
"""
import zlib

__all__ = ["PREAMBLE", "SFD", "MIN_PAYLOAD", "IFG_BYTES", "fcs", "encode_frame", "decode_frame"]

from mcf_fpga.spec.ethernet import IFG_BYTES, MIN_PAYLOAD, PREAMBLE, SFD


def fcs(frame: bytes) -> bytes:
    """The 4 FCS bytes of ``frame`` in transmit order."""
    return zlib.crc32(bytes(frame)).to_bytes(4, "little")


def encode_frame(frame: bytes) -> bytes:
    """GMII byte sequence (TX_EN high) for ``frame``: preamble, SFD, padded frame, FCS."""
    body = bytes(frame) + bytes(max(0, MIN_PAYLOAD - len(frame)))
    return PREAMBLE + bytes([SFD]) + body + fcs(body)


def decode_frame(wire: bytes):
    """Inverse of :func:`encode_frame` for what a receiver sees while RX_DV is high.

    Returns ``(frame_bytes, ok)``: ``frame_bytes`` is everything after the SFD
    except the 4 FCS bytes (padding included, a MAC cannot tell it apart);
    ``ok`` is False for a missing SFD, a frame shorter than 64 bytes, or a bad
    FCS. Returns ``(None, False)`` when fewer than 5 bytes follow the SFD
    (such a runt produces no output at all).
    """
    wire = bytes(wire)
    i = 0
    while i < len(wire) and wire[i] == 0x55:
        i += 1
    if i == 0 or i >= len(wire) or wire[i] != SFD:
        return None, False
    body = wire[i + 1:]
    if len(body) < 5:
        return None, False
    data, tail = body[:-4], body[-4:]
    ok = len(body) >= MIN_PAYLOAD + 4 and fcs(data) == tail
    return data, ok
