"""Golden model of the MCF reliable link: Ethernet II framing, CRC-32, go-back-N.

The frame format (offsets, sizes, kinds, drop causes, MAC addresses) is ``spec.link``'s;
this module is the reference ``mcf_fpga/hdl/nic/link/`` must match byte for byte. The host executors can use
:class:`Endpoint` and :class:`LinkModel` to model links in software.

The receive checks, their order and the go-back-N rules are stated in ``spec.link``.
"""
from __future__ import annotations

import random
import zlib
from collections import deque
from dataclasses import dataclass, field

from mcf_fpga.spec.link import (ALIGN_BYTES, Cause, ETHERTYPE, FCS_BYTES, HEADER_BYTES, KINDS, MIN_FRAME_BYTES, OFF_ACK,
                       OFF_KIND, OFF_LENGTH, OFF_SEQ, SEQ_MOD, body_bytes, frame_bytes, mac_for_node,
                       max_frame_bytes)
from mcf_fpga.spec.meta import MetaOp

__all__ = ["fcs", "build_frame", "Frame", "check_frame", "Sender", "Receiver", "Endpoint",
           "LinkModel", "simulate"]


def fcs(body: bytes) -> bytes:
    """Ethernet FCS of ``body``: CRC-32/ISO-HDLC, least significant byte first."""
    return zlib.crc32(body).to_bytes(4, "little")


def build_frame(dst: bytes, src: bytes, kind: int, seq: int, ack: int, packet: bytes = b"") -> bytes:
    """The exact bytes of one frame (see module docstring)."""
    if int(kind) not in [int(k) for k in KINDS]:
        raise ValueError(f"kind must be one of {[k.name for k in KINDS]}, got {kind!r}")
    for name, v in (("seq", seq), ("ack", ack)):
        if not 0 <= v < SEQ_MOD:
            raise ValueError(f"{name} must be in 0..{SEQ_MOD - 1}, got {v}")
    if len(packet) >= 1 << 16:
        raise ValueError(f"packet length must be at most 65535 bytes, got {len(packet)}")
    head = (bytes(dst) + bytes(src) + ETHERTYPE.to_bytes(2, "big")
            + bytes([int(kind), 0]) + seq.to_bytes(2, "little") + ack.to_bytes(2, "little")
            + len(packet).to_bytes(2, "little") + bytes(2))
    body = head + bytes(packet)
    body += bytes(body_bytes(len(packet)) - len(body))
    return body + fcs(body)


@dataclass(frozen=True)
class Frame:
    dst: bytes
    src: bytes
    kind: int
    seq: int
    ack: int
    packet: bytes


def check_frame(frame: bytes, local_mac: bytes, max_packet: int):
    """Receive checks. Returns ``(None, Frame)`` for a good frame or ``(Cause, None)``."""
    n = len(frame)
    if n < MIN_FRAME_BYTES:
        return Cause.RUNT, None
    if n % ALIGN_BYTES != FCS_BYTES or n > max_frame_bytes(max_packet):
        return Cause.LENGTH, None
    if zlib.crc32(frame[:-4]) != int.from_bytes(frame[-4:], "little"):
        return Cause.CRC, None
    if frame[0:6] != bytes(local_mac):
        return Cause.DST, None
    if int.from_bytes(frame[12:14], "big") != ETHERTYPE:
        return Cause.ETHERTYPE, None
    kind = frame[OFF_KIND]
    if kind not in [int(k) for k in KINDS]:
        return Cause.KIND, None
    length = int.from_bytes(frame[OFF_LENGTH:OFF_LENGTH + 2], "little")
    if length > max_packet or n != frame_bytes(length) or (kind == MetaOp.DATA and length == 0):
        return Cause.LENGTH, None
    return None, Frame(dst=frame[0:6], src=frame[6:12], kind=MetaOp(kind),
                       seq=int.from_bytes(frame[OFF_SEQ:OFF_SEQ + 2], "little"),
                       ack=int.from_bytes(frame[OFF_ACK:OFF_ACK + 2], "little"),
                       packet=frame[HEADER_BYTES:HEADER_BYTES + length])


def _diff(a: int, b: int) -> int:
    """(a - b) mod 2**16."""
    return (a - b) % SEQ_MOD


class Sender:
    """Go-back-N sender. ``base``: oldest unacked; ``next_seq``: next to assign;
    ``send_ptr``: next to transmit; ``sent_hw``: one past the highest ever transmitted."""

    def __init__(self, window: int, timeout: int):
        if window < 1 or window >= SEQ_MOD // 2:
            raise ValueError(f"window must be in 1..{SEQ_MOD // 2 - 1}, got {window}")
        if timeout < 1:
            raise ValueError(f"timeout must be >= 1 cycle, got {timeout}")
        self.window, self.timeout = window, timeout
        self.base = self.next_seq = self.send_ptr = self.sent_hw = 0
        self.timer = 0
        self.buffer: dict[int, bytes] = {}
        self.retransmits = self.timeouts = 0

    def can_accept(self) -> bool:
        return _diff(self.next_seq, self.base) < self.window

    def offer(self, packet: bytes) -> bool:
        """Queue a packet; False (nothing changes) when the window is full."""
        if not self.can_accept():
            return False
        self.buffer[self.next_seq] = bytes(packet)
        self.next_seq = (self.next_seq + 1) % SEQ_MOD
        return True

    def has_data(self) -> bool:
        return self.send_ptr != self.next_seq

    def take(self) -> tuple[int, bytes]:
        """The next data frame to transmit (seq, packet); advances ``send_ptr``."""
        seq = self.send_ptr
        if seq != self.sent_hw:
            self.retransmits += 1
        else:
            self.sent_hw = (self.sent_hw + 1) % SEQ_MOD
        self.send_ptr = (seq + 1) % SEQ_MOD
        return seq, self.buffer[seq]

    def on_ack(self, ack: int, nak: bool) -> bool:
        """Cumulative ack (and go-back for NAK). False when ``ack`` is out of range (ignored)."""
        if _diff(ack, self.base) > _diff(self.sent_hw, self.base):
            return False
        if ack != self.base:
            self.timer = 0
        for s in range(_diff(ack, self.base)):
            self.buffer.pop((self.base + s) % SEQ_MOD, None)
        self.base = ack
        if nak or _diff(self.send_ptr, self.base) > _diff(self.sent_hw, self.base):
            self.send_ptr = ack
        return True

    def tick(self):
        """One clock cycle of the retransmission timer."""
        if self.base == self.next_seq:
            self.timer = 0
        elif self.timer + 1 >= self.timeout:
            self.timer = 0
            self.timeouts += 1
            self.send_ptr = self.base
        else:
            self.timer += 1


class Receiver:
    """Go-back-N receiver: accepts only ``expected``; one NAK per gap; ACK on progress or dup."""

    def __init__(self):
        self.expected = 0
        self.nak_sent = False
        self.ack_pending = False
        self.nak_pending = False

    def on_data(self, seq: int, can_store: bool):
        """Returns None (deliver) or the drop Cause."""
        d = _diff(seq, self.expected)
        if d == 0:
            if not can_store:
                return Cause.OVERFLOW
            self.expected = (self.expected + 1) % SEQ_MOD
            self.ack_pending = True
            self.nak_sent = False
            return None
        if d < SEQ_MOD // 2:
            if not self.nak_sent:
                self.nak_pending = self.nak_sent = True
            return Cause.SEQ
        self.ack_pending = True
        return Cause.DUP


class Endpoint:
    """One end of a link: sender + receiver + framing + drop counters.

    ``rx_capacity``: packets the receive buffer holds before it drains to the node
    (None: unbounded); ``deliver()`` drains one.
    """

    def __init__(self, local_mac: bytes, peer_mac: bytes, *, window: int = 4, timeout: int = 256,
                 max_packet: int = 1536, rx_capacity: int | None = None):
        self.local_mac, self.peer_mac = bytes(local_mac), bytes(peer_mac)
        self.max_packet = max_packet
        self.sender = Sender(window, timeout)
        self.receiver = Receiver()
        self.rx_capacity = rx_capacity
        self.rx_queue: deque[bytes] = deque()
        self.delivered: list[bytes] = []
        self.counters = {c: 0 for c in Cause}
        self.tx_data = self.tx_ctrl = 0

    def offer(self, packet: bytes) -> bool:
        if not 1 <= len(packet) <= self.max_packet:
            raise ValueError(f"packet length must be in 1..{self.max_packet}, got {len(packet)}")
        return self.sender.offer(packet)

    def next_frame(self) -> bytes | None:
        """The frame to send now, by priority NAK > data (piggybacks the ack) > ACK; or None."""
        s, r = self.sender, self.receiver
        if r.nak_pending:
            r.nak_pending = r.ack_pending = False
            self.tx_ctrl += 1
            return build_frame(self.peer_mac, self.local_mac, MetaOp.NAK, 0, r.expected)
        if s.has_data():
            seq, packet = s.take()
            r.ack_pending = False
            self.tx_data += 1
            return build_frame(self.peer_mac, self.local_mac, MetaOp.DATA, seq, r.expected, packet)
        if r.ack_pending:
            r.ack_pending = False
            self.tx_ctrl += 1
            return build_frame(self.peer_mac, self.local_mac, MetaOp.ACK, 0, r.expected)
        return None

    def receive(self, frame: bytes):
        """Process one received frame; returns the drop Cause or None."""
        cause, f = check_frame(frame, self.local_mac, self.max_packet)
        if cause is not None:
            self.counters[cause] += 1
            return cause
        result = None
        if not self.sender.on_ack(f.ack, f.kind == MetaOp.NAK):
            self.counters[Cause.BAD_ACK] += 1
            result = Cause.BAD_ACK
        if f.kind == MetaOp.DATA:
            can_store = self.rx_capacity is None or len(self.rx_queue) < self.rx_capacity
            c = self.receiver.on_data(f.seq, can_store)
            if c is None:
                self.rx_queue.append(f.packet)
            else:
                self.counters[c] += 1
                result = c
        return result

    def deliver(self) -> bytes | None:
        if not self.rx_queue:
            return None
        p = self.rx_queue.popleft()
        self.delivered.append(p)
        return p

    def tick(self):
        self.sender.tick()


class LinkModel:
    """One direction of a wire: latency, bandwidth and seeded fault injection.

    ``send(frame, now)`` returns the list of ``(arrival_cycle, frame)`` copies:
    none if dropped, one with a flipped bit if corrupted, two if duplicated.
    ``bytes_per_cycle`` limits the serialisation rate (``busy_until``); faults stop
    after ``max_faults`` (finite losses), None means unlimited. A frame's last byte arrives
    ``latency`` cycles after it was serialised; with ``store_and_forward`` the receiver
    only starts receiving it then (another serialisation time), which is what the
    Amaranth testbench ``hdl.nic.link.model.LinkBench`` models.
    """

    def __init__(self, *, latency: int = 10, bytes_per_cycle: float = 8.0, p_drop: float = 0.0,
                 p_corrupt: float = 0.0, p_dup: float = 0.0, seed: int = 0,
                 max_faults: int | None = None, store_and_forward: bool = False):
        self.store_and_forward = store_and_forward
        for name, p in (("p_drop", p_drop), ("p_corrupt", p_corrupt), ("p_dup", p_dup)):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} must be a probability in 0..1, got {p}")
        if latency < 0:
            raise ValueError(f"latency must be >= 0 cycles, got {latency}")
        if bytes_per_cycle <= 0:
            raise ValueError(f"bytes_per_cycle must be > 0, got {bytes_per_cycle}")
        self.latency, self.bytes_per_cycle = latency, bytes_per_cycle
        self.p_drop, self.p_corrupt, self.p_dup = p_drop, p_corrupt, p_dup
        self.rng = random.Random(seed)
        self.faults_left = max_faults
        self.busy_until = 0
        self.stats = {"frames": 0, "dropped": 0, "corrupted": 0, "duplicated": 0}

    def _fault(self, p: float) -> bool:
        if self.faults_left is not None and self.faults_left <= 0:
            return False
        if self.rng.random() < p:
            if self.faults_left is not None:
                self.faults_left -= 1
            return True
        return False

    def fate(self, frame: bytes) -> list[bytes]:
        """Copies of ``frame`` that arrive (after drop / corruption / duplication)."""
        self.stats["frames"] += 1
        if self._fault(self.p_drop):
            self.stats["dropped"] += 1
            return []
        if self._fault(self.p_corrupt):
            self.stats["corrupted"] += 1
            bit = self.rng.randrange(len(frame) * 8)
            frame = bytearray(frame)
            frame[bit // 8] ^= 1 << (bit % 8)
            frame = bytes(frame)
        copies = [frame]
        if self._fault(self.p_dup):
            self.stats["duplicated"] += 1
            copies.append(frame)
        return copies

    def send(self, frame: bytes, now: int) -> list[tuple[int, bytes]]:
        start = max(now, self.busy_until)
        serial = -(-len(frame) // self.bytes_per_cycle)
        self.busy_until = start + serial
        arrive = int(self.busy_until) + self.latency + (int(serial) if self.store_and_forward else 0)
        return [(arrive + i, f) for i, f in enumerate(self.fate(frame))]


@dataclass
class SimResult:
    delivered: dict = field(default_factory=dict)   # endpoint index -> list of packets
    delivered_at: dict = field(default_factory=dict)  # endpoint index -> cycle of each delivery
    cycles: int = 0
    endpoints: tuple = ()
    links: tuple = ()


def simulate(packets: tuple[list[bytes], list[bytes]], *, window: int = 4, timeout: int = 200,
             max_packet: int = 1536, links: tuple[LinkModel, LinkModel] | None = None,
             rx_capacity: int | None = None, max_cycles: int = 1_000_000) -> SimResult:
    """Cycle-stepped golden simulation of a two-node link carrying ``packets[i]`` from
    endpoint i to the other; stops when everything is delivered (or ``max_cycles``)."""
    macs = (mac_for_node(0), mac_for_node(1))
    eps = tuple(Endpoint(macs[i], macs[1 - i], window=window, timeout=timeout,
                         max_packet=max_packet, rx_capacity=rx_capacity) for i in range(2))
    links = links or (LinkModel(), LinkModel())
    todo = [deque(p) for p in packets]
    in_flight: list[list[tuple[int, bytes]]] = [[], []]   # arrivals at endpoint i
    want = [len(packets[1]), len(packets[0])]
    delivered_at: dict = {0: [], 1: []}
    cycle = 0
    while cycle < max_cycles and any(len(eps[i].delivered) < want[i] for i in range(2)):
        for i in range(2):
            ep = eps[i]
            while todo[i] and ep.offer(todo[i][0]):
                todo[i].popleft()
            if links[i].busy_until <= cycle:
                f = ep.next_frame()
                if f is not None:
                    in_flight[1 - i].extend(links[i].send(f, cycle))
            arrived = [x for x in in_flight[i] if x[0] <= cycle]
            in_flight[i] = [x for x in in_flight[i] if x[0] > cycle]
            for _, f in sorted(arrived, key=lambda x: x[0]):
                ep.receive(f)
            if ep.deliver() is not None:
                delivered_at[i].append(cycle)
            ep.tick()
        cycle += 1
    return SimResult(delivered={i: eps[i].delivered for i in range(2)}, delivered_at=delivered_at,
                     cycles=cycle,
                     endpoints=eps, links=links)
