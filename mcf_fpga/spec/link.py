"""The MCF reliable link's frame: EtherType, field offsets, sizes, drop causes, MAC addresses.

The link protocol's contract; ``mcf_fpga/golden/link.py`` is its reference model
(CRC, go-back-N) and ``mcf_fpga/hdl/nic/link/`` implements it: both must produce
byte-identical frames.

Frame (all offsets in bytes; multi-byte link fields little-endian like the
Meta header, the EtherType big-endian as Ethernet requires)::

     0..5   destination MAC        (peer's MAC, see mac_for_node)
     6..11  source MAC
    12..13  EtherType 0x88B5       (0x88 then 0xB5)
    14      kind                   (MetaOp.DATA, ACK or NAK of spec.meta)
    15      reserved, 0            (ignored on receive)
    16..17  seq                    (data: sequence number; ack/nak: 0)
    18..19  ack                    (cumulative: next sequence number expected from the peer)
    20..21  length                 (packet bytes that follow; 0 for ack/nak)
    22..23  reserved, 0            (ignored on receive)
    24..    packet                 (Meta header + payload; opaque to the link)
            zero padding           so the bytes before the FCS number
                                   max(64, ceil8(24 + length)): at least the
                                   Ethernet minimum of 60, and a multiple of 8
    last 4  FCS                    CRC-32/ISO-HDLC of everything before it, LSB byte first

Preamble, SFD and inter-frame gap belong to the PHY and are not part of a frame here.
The 8-byte alignment keeps the packet word-aligned on a 64-bit datapath and lets the
hardware CRC (amaranth.lib.crc) work on whole words; the cost is at most 7 pad bytes.

Receive checks, in this order (the first failing one names the drop cause):
RUNT (< 64 bytes), LENGTH (frame size not 4 mod 8, or larger than the largest
frame), CRC, DST (destination MAC not ours), ETHERTYPE, KIND (not data/ack/nak),
LENGTH (length field > max_packet, disagreeing with the frame size, or 0 in a
data frame). A good
frame's ``ack`` is then checked against the sender's outstanding range (BAD_ACK if
outside; the frame is otherwise still used) and a data frame's ``seq`` against the
receiver's expectation: SEQ (ahead: a frame was lost; answered with one NAK per
gap), DUP (already delivered; answered with an ACK), OVERFLOW (in order but the
receive buffer is full; dropped, the sender will resend).

Go-back-N: the sender numbers packets mod 2**16, keeps up to ``window`` unacked
packets, sends in order, and on NAK(n) or a timeout (``timeout`` cycles without
progress while packets are outstanding) resends from the oldest unacked one.
The receiver delivers only the next expected sequence number, so every packet is
delivered exactly once, in order; any finite loss pattern is recovered by the
timeout.
"""
from __future__ import annotations

import enum

from mcf_fpga.spec.meta import MetaOp

__all__ = [
    "ETHERTYPE", "ETH_HEADER_BYTES", "LINK_HEADER_BYTES", "HEADER_BYTES", "FCS_BYTES",
    "MIN_FRAME_BYTES", "ALIGN_BYTES", "SEQ_BITS", "SEQ_MOD", "KINDS",
    "OFF_KIND", "OFF_SEQ", "OFF_ACK", "OFF_LENGTH", "Cause",
    "mac_for_node", "mac_to_int", "body_bytes", "frame_bytes", "max_frame_bytes",
]

#: IEEE 802 local experimental EtherType used by MCF links.
ETHERTYPE = 0x88B5
ETH_HEADER_BYTES = 14
LINK_HEADER_BYTES = 10
HEADER_BYTES = ETH_HEADER_BYTES + LINK_HEADER_BYTES   # 24: packet starts 8-aligned
FCS_BYTES = 4
MIN_FRAME_BYTES = 64          # Ethernet minimum including FCS
ALIGN_BYTES = 8
SEQ_BITS = 16
SEQ_MOD = 1 << SEQ_BITS
#: The frame kinds a link carries (byte ``OFF_KIND``).
KINDS = (MetaOp.DATA, MetaOp.ACK, MetaOp.NAK)

OFF_KIND, OFF_SEQ, OFF_ACK, OFF_LENGTH = 14, 16, 18, 20


class Cause(enum.IntEnum):
    """Per-cause drop counters (index = order of the hardware counter outputs)."""
    RUNT = 0
    LENGTH = 1
    CRC = 2
    DST = 3
    ETHERTYPE = 4
    KIND = 5
    SEQ = 6
    DUP = 7
    OVERFLOW = 8
    BAD_ACK = 9


def mac_for_node(node: int) -> bytes:
    """Locally administered unicast MAC of node ``node``: 02:4D:43:46:hi:lo ("MCF")."""
    if not isinstance(node, int) or not 0 <= node < 1 << 16:
        raise ValueError(f"node must be an integer in 0..65535, got {node!r}")
    return bytes([0x02, 0x4D, 0x43, 0x46, node >> 8, node & 0xFF])


def mac_to_int(mac: bytes) -> int:
    """MAC bytes -> integer whose byte 0 (first on the wire) is the most significant."""
    if not isinstance(mac, (bytes, bytearray)) or len(mac) != 6:
        raise ValueError(f"a MAC address must be 6 bytes, got {mac!r}")
    return int.from_bytes(mac, "big")


def body_bytes(length: int) -> int:
    """Bytes before the FCS for a packet of ``length`` bytes."""
    return max(MIN_FRAME_BYTES, -(-(HEADER_BYTES + length) // ALIGN_BYTES) * ALIGN_BYTES)


def frame_bytes(length: int) -> int:
    return body_bytes(length) + FCS_BYTES


def max_frame_bytes(max_packet: int) -> int:
    return frame_bytes(max_packet)
