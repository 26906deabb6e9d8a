"""RGMIILink at pin level in the Amaranth simulator: node clock 100 MHz, TX 125 MHz, TXD/TX_CTL
looped back to RXD/RX_CTL with RXC delayed 2 ns (the PHY's internal delay); frames sent on
tx_i must come back on rx_o padded to 60 bytes and marked good, with the counters agreeing."""
import random

from hypothesis import given, settings, strategies as st
from amaranth import Module, ClockSignal, ClockDomain
from amaranth.sim import Simulator

from mcf_fpga.hdl.eth.rgmii_link import RGMIILink


def _loop(frames, seed):
    link = RGMIILink(None, fifo_depth=128)
    m = Module()
    m.submodules.link = link
    m.domains.phy = ClockDomain("phy")      # the PHY's delayed copy of TXC, looped to RXC
    m.d.comb += [link.rd.eq(link.td), link.rx_ctl.eq(link.tx_ctl), link.rxc.eq(ClockSignal("phy"))]
    sim = Simulator(m)
    sim.add_clock(10e-9, domain="sync")
    sim.add_clock(8e-9, phase=4e-9, domain="tx")           # rising edges at 4, 12, ... ns
    sim.add_clock(8e-9, phase=6e-9, domain="phy")          # 2 ns later: the PHY's clock skew
    got = []
    rng = random.Random(seed)

    async def send(ctx):
        for f in frames:
            for k, b in enumerate(f):
                while rng.random() < 0.3:
                    ctx.set(link.tx_i.valid, 0)
                    await ctx.tick("sync")
                ctx.set(link.tx_i.payload.data, b)
                ctx.set(link.tx_i.payload.last, k == len(f) - 1)
                ctx.set(link.tx_i.valid, 1)
                await ctx.tick("sync").until(link.tx_i.ready)
            ctx.set(link.tx_i.valid, 0)

    async def recv(ctx):
        cur = bytearray()
        ctx.set(link.rx_o.ready, 1)
        while len(got) < len(frames):
            _, _, v, p = await ctx.tick("sync").sample(link.rx_o.valid, link.rx_o.payload)
            if v:
                cur.append(p.data)
                if p.last:
                    got.append((bytes(cur), p.user))
                    cur = bytearray()
        await ctx.tick("sync").repeat(5)
        assert ctx.get(link.tx_frames) == len(frames) and ctx.get(link.tx_underruns) == 0
        assert ctx.get(link.rx_frames) == len(frames) and ctx.get(link.rx_errors) == 0

    async def watchdog(ctx):
        await ctx.delay(1e-4)
        raise AssertionError("link loopback hung")

    sim.add_testbench(send)
    sim.add_testbench(recv)
    sim.add_testbench(watchdog, background=True)
    sim.run()
    return got


@settings(max_examples=3)
@given(st.lists(st.binary(min_size=1, max_size=70), min_size=1, max_size=3), st.integers(0, 99))
def test_frames_loop_back_through_the_pins(frames, seed):
    got = _loop(frames, seed)
    assert got == [(f + bytes(max(0, 60 - len(f))), 0) for f in frames]
