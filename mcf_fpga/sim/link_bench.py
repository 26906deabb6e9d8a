"""Simulation-only wire model and testbench for ``ReliableLink`` (Amaranth simulator).

``LinkBench`` puts two ``ReliableLink`` endpoints (or one, with scripted frames) on
wires modelled by ``golden.link.LinkModel``: per direction a latency (cycles from a
frame's last beat leaving ``tx`` to its first beat entering the peer's ``rx``: a
store-and-forward wire, ``LinkModel(store_and_forward=True)`` in golden terms), a
bandwidth (``bytes_per_cycle``, enforced by throttling ``tx.ready``) and seeded faults
(drop, single-bit corruption, duplication). Node-side sources and sinks apply seeded
random back-pressure. Everything is driven from one async testbench process, one
iteration per clock cycle.
"""
import random
from collections import deque

from amaranth.sim import Simulator

from mcf_fpga.golden.link import LinkModel
from mcf_fpga.spec.link import mac_for_node
from mcf_fpga.hdl.nic.link.link import ReliableLink
from mcf_fpga.hdl.nic.link.params import LinkParams, COUNTERS

__all__ = ["LinkBench", "beats_of", "bytes_of"]


def beats_of(packet: bytes, data_width: int):
    """Byte string -> list of (data, keep, last) beats, keep contiguous on the last beat."""
    b = data_width // 8
    out = []
    for i in range(0, len(packet), b):
        chunk = packet[i:i + b]
        out.append((int.from_bytes(chunk, "little"), (1 << len(chunk)) - 1, i + b >= len(packet)))
    return out


def bytes_of(data: int, keep: int, data_width: int) -> bytes:
    """Kept bytes of one beat (AXI-Stream byte order)."""
    raw = data.to_bytes(data_width // 8, "little")
    return bytes(raw[k] for k in range(data_width // 8) if keep >> k & 1)


class _Port:
    """Unpacks the raw value of a PacketLayout payload."""

    def __init__(self, w):
        self.w, self.b = w, w // 8

    def pack(self, data, keep, last):
        return data | keep << self.w | int(last) << (self.w + self.b)

    def unpack(self, v):
        return v & ((1 << self.w) - 1), (v >> self.w) & ((1 << self.b) - 1), (v >> (self.w + self.b)) & 1


class LinkBench:
    """Two endpoints, A (node 0) and B (node 1), joined by two modelled wires.

    Parameters
    ----------
    params : LinkParams
    packets : (list[bytes], list[bytes])
        Packets A sends to B and B sends to A.
    wires : (LinkModel, LinkModel) or None
        A->B and B->A wire models (default: clean, latency 4, full bandwidth).
    seed : int
        Seeds node-side back-pressure.
    p_src, p_sink : float
        Probability that a node-side source offers a beat / a sink is ready, per cycle.
    expect : (int, int) or None
        Packets B and A should end up with (default: all that the other end sends; give it
        when some sent packets are meant to be dropped).
    scripted : list[(cycle, bytes)] or None
        If given, B is not built: these frames are driven into A's ``rx`` at the given
        cycles (frames overlapping in time are queued back to back), and A's output is
        only recorded.
    """

    def __init__(self, params: LinkParams, packets=((), ()), wires=None, seed=0,
                 p_src=1.0, p_sink=1.0, scripted=None, expect=None):
        self.p = params
        self.port = _Port(params.data_width)
        self.rng = random.Random(seed)
        self.p_src, self.p_sink = p_src, p_sink
        self.packets = [list(packets[0]), list(packets[1])]
        self.scripted = scripted
        self.expect = expect or (len(self.packets[0]), len(self.packets[1]))
        macs = (mac_for_node(0), mac_for_node(1))
        self.macs = macs
        n = 1 if scripted is not None else 2
        self.ends = [ReliableLink(params, macs[i], macs[1 - i]) for i in range(n)]
        self.wires = wires or (LinkModel(latency=4), LinkModel(latency=4))
        self.delivered = [[] for _ in range(2)]    # packets that arrived at end i
        self.delivered_at = [[] for _ in range(2)]  # cycle of each delivery's last beat
        self.wire_frames = [[] for _ in range(2)]  # frames end i put on its tx (before faults)
        self.arrived = [[] for _ in range(2)]      # frames (after faults) sent towards end i's rx
        self.counters = [{} for _ in range(n)]
        self.cycles = 0

    def run(self, max_cycles: int = 20000, settle: int = 30):
        """Simulate until every packet is delivered and the wires have been quiet for
        ``settle`` cycles, or ``max_cycles``."""
        from amaranth import Module
        top = Module()
        for i, e in enumerate(self.ends):
            top.submodules[f"end{i}"] = e
        sim = Simulator(top)
        sim.add_clock(1e-8)
        sim.add_testbench(self._bench)
        self._max, self._settle = max_cycles, settle
        sim.run()
        return self

    def _done(self):
        if self.scripted is not None:
            return False
        return len(self.delivered[1]) >= self.expect[0] and len(self.delivered[0]) >= self.expect[1]

    async def _bench(self, ctx):
        p, port, rng = self.p, self.port, self.rng
        W, B = p.data_width, p.beat_bytes
        n = len(self.ends)
        src = [deque(b for pk in self.packets[i] for b in beats_of(pk, W)) for i in range(n)]
        sink_buf = [bytearray() for _ in range(n)]
        tx_buf = [bytearray() for _ in range(n)]
        tokens = [0.0] * n
        # pending arrivals per receiving end: deque of [arrival_cycle, beats]
        arrivals = [deque() for _ in range(n)]
        if self.scripted is not None:
            for cyc, f in sorted(self.scripted, key=lambda x: x[0]):
                arrivals[0].append([cyc, deque(beats_of(f, W))])
        rx_busy = [None] * n
        settle_left = self._settle
        for cycle in range(self._max):
            self.cycles = cycle
            drive = []
            for i, e in enumerate(self.ends):
                # node-side source
                offer = bool(src[i]) and rng.random() < self.p_src
                ctx.set(e.s_axis.valid, offer)
                if offer:
                    ctx.set(e.s_axis.payload.as_value(), port.pack(*src[i][0]))
                ctx.set(e.m_axis.ready, rng.random() < self.p_sink)
                # wire tx: bandwidth throttle (token bucket of bytes)
                wire = self.wires[i] if i < len(self.wires) else None
                bw = wire.bytes_per_cycle if wire else B
                tokens[i] = min(tokens[i] + bw, max(B, bw) * 2)
                ctx.set(e.tx.ready, tokens[i] >= B)
                # wire rx: next beat of the frame in progress, or start the next arrival
                if rx_busy[i] is None and arrivals[i] and arrivals[i][0][0] <= cycle:
                    rx_busy[i] = arrivals[i].popleft()[1]
                if rx_busy[i]:
                    beat = rx_busy[i].popleft()
                    ctx.set(e.rx.valid, 1)
                    ctx.set(e.rx.payload.as_value(), port.pack(*beat))
                    if not rx_busy[i]:
                        rx_busy[i] = None
                else:
                    ctx.set(e.rx.valid, 0)
                drive.append(offer)
            sampled = []
            for e in self.ends:
                sampled += [e.s_axis.ready, e.m_axis.valid, e.m_axis.ready, e.m_axis.payload.as_value(),
                            e.tx.valid, e.tx.ready, e.tx.payload.as_value(), e.rx.ready]
            _, _, *vals = await ctx.tick().sample(*sampled)
            for i, e in enumerate(self.ends):
                s_ready, m_valid, m_ready, m_pay, t_valid, t_ready, t_pay, r_ready = vals[8 * i:8 * i + 8]
                assert r_ready, "rx must always be ready"
                if drive[i] and s_ready:
                    src[i].popleft()
                if m_valid and m_ready:
                    d, k, last = port.unpack(m_pay)
                    sink_buf[i] += bytes_of(d, k, W)
                    if last:
                        self.delivered[i].append(bytes(sink_buf[i]))
                        self.delivered_at[i].append(cycle)
                        sink_buf[i].clear()
                if t_valid and t_ready:
                    tokens[i] -= B
                    d, k, last = port.unpack(t_pay)
                    tx_buf[i] += bytes_of(d, k, W)
                    if last:
                        frame = bytes(tx_buf[i])
                        tx_buf[i].clear()
                        self.wire_frames[i].append(frame)
                        if n == 2:
                            wire = self.wires[i]
                            for c in wire.fate(frame):
                                self.arrived[1 - i].append(c)
                                arrivals[1 - i].append([cycle + 1 + wire.latency, deque(beats_of(c, W))])
            # Stop after ``settle`` consecutive quiet cycles (nothing on or queued for any
            # wire) once the goal is reached, so every frame sent has also been checked.
            quiet = not any(arrivals[i] or rx_busy[i] or tx_buf[i] for i in range(n))
            goal = self._done() if self.scripted is None else True
            if goal and quiet:
                settle_left -= 1
                if settle_left <= 0:
                    break
            else:
                settle_left = self._settle
        for i, e in enumerate(self.ends):
            self.counters[i] = {name: ctx.get(getattr(e, name)) for name in COUNTERS}
