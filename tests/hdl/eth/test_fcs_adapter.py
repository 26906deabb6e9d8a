"""FCS adapters (mcf_fpga/hdl/eth/fcs_adapter.py) vs golden framing (zlib CRC), and two reliable links
talking through them over a byte-wide "MAC" that flags corrupted frames (tuser).

Expected values: frames with FCS from ``golden.link.fcs`` / ``zlib.crc32``; delivered packets
= the packets sent; the corrupted frame is counted as the receiver's ``drop_crc``.
"""
import random
import zlib

from amaranth import Module
from amaranth.lib import wiring
from hypothesis import given, settings, strategies as st

from mcf_fpga.golden.link import fcs as link_fcs
from mcf_fpga.hdl.bus import PacketSignature
from mcf_fpga.hdl.eth.fcs_adapter import FcsStripTx, FcsAppendRx
from mcf_fpga.hdl.nic.link import LinkParams, ReliableLink
from mcf_fpga.sim.kit import StreamSource, StreamSink, run_simulation, packets_to_beats, beats_to_packets

frames_st = st.lists(st.binary(min_size=1, max_size=90), min_size=1, max_size=4)


@settings(max_examples=15)
@given(frames=frames_st, seed=st.integers(0, 2 ** 16), vp=st.sampled_from([1.0, 0.5]),
       rp=st.sampled_from([1.0, 0.3]))
def test_strip_tx(frames, seed, vp, rp):
    """64-bit frames with FCS in -> the same frames without the last 4 bytes, byte-wide."""
    dut = FcsStripTx(64)
    wire = [f + link_fcs(f) for f in frames]
    src = StreamSource(dut.i, seed=seed, valid_prob=vp)
    sink = StreamSink(dut.o, seed=seed + 1, ready_prob=rp)
    got = []

    async def tx(ctx):
        await src.send(ctx, packets_to_beats(wire, 64))

    async def rx(ctx):
        got.extend(await sink.collect_packets(ctx, len(frames), 8))
    run_simulation(dut, [tx, rx], max_cycles=20_000)
    assert got == frames


@settings(max_examples=15)
@given(frames=st.lists(st.tuples(st.binary(min_size=1, max_size=90), st.booleans()), min_size=1, max_size=4),
       seed=st.integers(0, 2 ** 16), vp=st.sampled_from([1.0, 0.5]), rp=st.sampled_from([1.0, 0.3]))
def test_append_rx(frames, seed, vp, rp):
    """Byte-wide frames (tuser = bad) in -> 64-bit frames + FCS (bit-inverted for bad ones)."""
    dut = FcsAppendRx(64)
    src = StreamSource(dut.i, seed=seed, valid_prob=vp)
    sink = StreamSink(dut.o, seed=seed + 1, ready_prob=rp)
    want = []
    for f, bad in frames:
        c = zlib.crc32(f) ^ (0xFFFFFFFF if bad else 0)
        want.append(f + c.to_bytes(4, "little"))
    beats = []
    for f, bad in frames:
        b = packets_to_beats([f], 8)
        for x in b:
            x["user"] = int(bad and x["last"])
        beats += b
    got = []

    async def tx(ctx):
        await src.send(ctx, beats)

    async def rx(ctx):
        got.extend(await sink.collect_packets(ctx, len(frames), 64))
    run_simulation(dut, [tx, rx], max_cycles=20_000)
    assert got == want


class _Pair(wiring.Component):
    """Two ReliableLinks (64-bit) whose wires go through the FCS adapters to 8-bit MAC ports."""

    def __init__(self, params):
        self.a = ReliableLink(params, 0x020000000001, 0x020000000002)
        self.b = ReliableLink(params, 0x020000000002, 0x020000000001)
        sig = {}
        for n in ("a", "b"):
            link = getattr(self, n)
            sig[f"{n}_in"] = wiring.In(PacketSignature(64))
            sig[f"{n}_out"] = wiring.Out(PacketSignature(64))
            sig[f"{n}_mac_tx"] = wiring.Out(PacketSignature(8))
            sig[f"{n}_mac_rx"] = wiring.In(PacketSignature(8, user_width=1))
            sig[f"{n}_drop_crc"] = wiring.Out(32)
            sig[f"{n}_delivered"] = wiring.Out(32)
        super().__init__(sig)

    def elaborate(self, platform):
        m = Module()
        for n in ("a", "b"):
            link = getattr(self, n)
            m.submodules[n] = link
            m.submodules[f"{n}_st"] = st_ = FcsStripTx(64)
            m.submodules[f"{n}_ap"] = ap = FcsAppendRx(64)
            wiring.connect(m, wiring.flipped(getattr(self, f"{n}_in")), link.s_axis)
            wiring.connect(m, link.m_axis, wiring.flipped(getattr(self, f"{n}_out")))
            wiring.connect(m, link.tx, st_.i)
            wiring.connect(m, st_.o, wiring.flipped(getattr(self, f"{n}_mac_tx")))
            wiring.connect(m, wiring.flipped(getattr(self, f"{n}_mac_rx")), ap.i)
            wiring.connect(m, ap.o, link.rx)
            m.d.comb += [getattr(self, f"{n}_drop_crc").eq(link.drop_crc),
                         getattr(self, f"{n}_delivered").eq(link.delivered)]
        return m


@settings(max_examples=4)
@given(packets=st.lists(st.binary(min_size=1, max_size=40), min_size=2, max_size=4),
       corrupt=st.integers(0, 3), seed=st.integers(0, 2 ** 16))
def test_links_through_adapters(packets, corrupt, seed):
    """Packets a -> b and b -> a through strip/append and a byte-wide MAC model; one frame
    a -> b is corrupted on the wire (the MAC flags it with tuser): b counts it in drop_crc,
    the link resends, and every packet arrives once, in order, bit-exact."""
    params = LinkParams(data_width=64, window=4, max_packet=64, timeout=600, rx_slots=2)
    dut = _Pair(params)
    rng = random.Random(seed)
    corrupt = corrupt % len(packets)
    got = {"a": [], "b": []}
    state = {"a_frames": 0}

    def mac(src_name, dst_name):
        """Wire model: bytes of each frame from <src>_mac_tx, delivered to <dst>_mac_rx with
        tuser on the last byte if the frame was hit (a flipped bit, as the PHY would see)."""
        tx = getattr(dut, f"{src_name}_mac_tx")
        rx = getattr(dut, f"{dst_name}_mac_rx")

        async def run(ctx):
            frame = []
            ctx.set(tx.ready, 1)
            while True:
                _, _, v, d, last = await ctx.tick().sample(tx.valid, tx.payload.data, tx.payload.last)
                if not v:
                    continue
                frame.append(d)
                if not last:
                    continue
                bad = False
                if src_name == "a" and len(frame) > 24:     # a data frame (carries a packet)
                    if state["a_frames"] == corrupt:
                        frame[rng.randrange(len(frame))] ^= 1 << rng.randrange(8)
                        bad = True
                    state["a_frames"] += 1
                ctx.set(tx.ready, 0)
                for k, byte in enumerate(frame):
                    ctx.set(rx.payload.data, byte)
                    ctx.set(rx.payload.keep, 1)
                    ctx.set(rx.payload.last, k == len(frame) - 1)
                    ctx.set(rx.payload.user, int(bad and k == len(frame) - 1))
                    ctx.set(rx.valid, 1)
                    while not (await ctx.tick().sample(rx.ready))[2]:
                        pass
                ctx.set(rx.valid, 0)
                frame = []
                ctx.set(tx.ready, 1)
        return run

    sources = {n: StreamSource(getattr(dut, f"{n}_in"), seed=seed + i, valid_prob=0.7)
               for i, n in enumerate("ab")}
    sinks = {n: StreamSink(getattr(dut, f"{n}_out"), seed=seed + 5 + i, ready_prob=0.5)
             for i, n in enumerate("ab")}

    def sender(n):
        async def run(ctx):
            await sources[n].send(ctx, packets_to_beats(packets, 64))
        return run

    def receiver(n):
        async def run(ctx):
            got[n] = await sinks[n].collect_packets(ctx, len(packets), 64)
            if n == "b":      # everything a sent has arrived: the one corrupted frame was counted
                assert ctx.get(dut.b_drop_crc) == 1
            else:
                assert ctx.get(dut.a_drop_crc) == 0
        return run

    run_simulation(dut, [sender("a"), sender("b"), receiver("a"), receiver("b")],
                   background=[mac("a", "b"), mac("b", "a")], max_cycles=150_000)
    assert got["b"] == packets          # sent by a
    assert got["a"] == packets          # sent by b

