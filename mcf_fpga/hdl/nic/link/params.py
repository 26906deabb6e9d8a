"""Parameters and derived sizes of the reliable link (shared by its blocks).

The frame format and protocol constants come from ``spec.link``, which
defines the protocol; this module only turns them into beat counts for a
``data_width``-bit datapath.
"""
import zlib
from dataclasses import dataclass

from amaranth.lib.crc.catalog import CRC32_ISO_HDLC

from mcf_fpga.spec.link import Cause, FCS_BYTES, HEADER_BYTES, body_bytes, mac_to_int, max_frame_bytes

__all__ = ["LinkParams", "DROP_COUNTERS", "STAT_COUNTERS", "COUNTERS", "crc_check_constant"]

#: Drop counters, one per ``spec.link.Cause`` (same order), as output port names.
DROP_COUNTERS = tuple(f"drop_{c.name.lower()}" for c in Cause)
#: Activity counters (plain statistics; not drops).
STAT_COUNTERS = ("tx_bad_len", "tx_data_frames", "tx_ctrl_frames", "tx_retransmits",
                 "timeouts", "rx_good_frames", "delivered")
COUNTERS = DROP_COUNTERS + STAT_COUNTERS


def crc_check_constant(data_width: int) -> int:
    """What a ``data_width``-bit ``amaranth.lib.crc`` Processor (CRC-32/ISO-HDLC) outputs
    after any good frame fed as little-endian words, the last word zero-filled.

    By linearity the CRC register after a valid codeword is a constant (the residue);
    the zero fill after it (4 bytes on a 64-bit datapath, since frames are 4 mod 8
    bytes long) moves it to another constant. Computed here from a sample frame: the
    smallest body, all zero, with its FCS (CRC-32 least significant byte first).
    """
    b = data_width // 8
    body = bytes(body_bytes(0))
    sample = body + zlib.crc32(body).to_bytes(FCS_BYTES, "little")
    sample += bytes(-len(sample) % b)
    words = [int.from_bytes(sample[i:i + b], "little") for i in range(0, len(sample), b)]
    return CRC32_ISO_HDLC(data_width).compute(words)


@dataclass(frozen=True)
class LinkParams:
    """Parameters of one reliable link endpoint.

    Parameters
    ----------
    data_width : int
        Bits per beat of the node-side packet streams and the wire-side frame stream:
        8, 16, 32 or 64 (default 64).
    window : int
        Go-back-N window: packets sent and not yet acknowledged (power of two, 1..1024;
        default 8). Also the number of retransmit-buffer slots.
    max_packet : int
        Largest packet (Meta header + payload) in bytes, 1..65535 (default 1536).
    timeout : int
        Cycles without acknowledgement progress before resending from the oldest
        unacknowledged packet (default 2048; must exceed a round trip plus a window of frames).
    rx_slots : int
        Received packets buffered towards the node (power of two, default 2). When they are
        all full, in-order frames are dropped (counted as overflow) and later resent.
    counter_width : int
        Width of each counter output (default 32; counters wrap).
    """
    data_width: int = 64
    window: int = 8
    max_packet: int = 1536
    timeout: int = 2048
    rx_slots: int = 2
    counter_width: int = 32

    def __post_init__(self):
        if self.data_width not in (8, 16, 32, 64):
            raise ValueError(f"LinkParams.data_width must be 8, 16, 32 or 64, got {self.data_width!r}")
        for name, hi in (("window", 1024), ("rx_slots", 1024)):
            v = getattr(self, name)
            if not isinstance(v, int) or not 1 <= v <= hi or v & (v - 1):
                raise ValueError(f"LinkParams.{name} must be a power of two in 1..{hi}, got {v!r}")
        if not isinstance(self.max_packet, int) or not 1 <= self.max_packet <= 65535:
            raise ValueError(f"LinkParams.max_packet must be an integer in 1..65535, got {self.max_packet!r}")
        if not isinstance(self.timeout, int) or not 1 <= self.timeout < 1 << 24:
            raise ValueError(f"LinkParams.timeout must be an integer in 1..{(1 << 24) - 1}, got {self.timeout!r}")
        if not isinstance(self.counter_width, int) or not 1 <= self.counter_width <= 64:
            raise ValueError(f"LinkParams.counter_width must be in 1..64, got {self.counter_width!r}")

    @property
    def beat_bytes(self) -> int:
        return self.data_width // 8

    @property
    def header_beats(self) -> int:
        """Beats of the Ethernet + link header (24 bytes)."""
        return HEADER_BYTES // self.beat_bytes

    @property
    def fcs_beats(self) -> int:
        return -(-FCS_BYTES // self.beat_bytes)

    @property
    def tx_slot_beats(self) -> int:
        """Retransmit-buffer beats per packet slot."""
        return -(-self.max_packet // self.beat_bytes)

    @property
    def max_frame_beats(self) -> int:
        return -(-max_frame_bytes(self.max_packet) // self.beat_bytes)

    @property
    def rx_slot_beats(self) -> int:
        """Receive-buffer beats per slot: everything after the header of the largest frame."""
        return self.max_frame_beats - self.header_beats

    @property
    def crc_magic(self) -> int:
        return crc_check_constant(self.data_width)

    @staticmethod
    def mac(mac):
        """A MAC given as 6 bytes or an int -> int (byte 0 most significant);
        an Amaranth value (48 bits, same order) passes through."""
        from amaranth.hdl import Value
        if isinstance(mac, Value):
            if len(mac) != 48:
                raise ValueError(f"a MAC signal must be 48 bits wide, got {len(mac)}")
            return mac
        if isinstance(mac, int):
            if not 0 <= mac < 1 << 48:
                raise ValueError(f"a MAC address must fit in 48 bits, got {mac:#x}")
            return mac
        return mac_to_int(mac)
