"""AXI4LiteDecoder (Amaranth simulator): random reads/writes over the whole address space,
including unmapped and misaligned addresses and reserved holes inside windows, with random
valid gaps on the requests and random ready on the answers; every answer (resp, data) must
equal a Python model of the address map built from the register lists."""
import random

from amaranth import Module
from amaranth.lib import wiring
from hypothesis import given, strategies as st

import pytest

from mcf_fpga.hdl.bus import AXI4LiteRegisterFile, AXI4LiteSignature, Access, Register, Resp
from mcf_fpga.hdl.bus.axil_decoder import AXI4LiteDecoder
from mcf_fpga.sim.kit import run_simulation

WINDOWS = (("a", 0x000, 6), ("b", 0x100, 8), ("c", 0x400, 4))
REGS = {
    "a": [Register("x", 0x0), Register("y", 0x8, width=12), Register("ro", 0x10, Access.RO)],
    "b": [Register("x", 0x4), Register("ro", 0xFC, Access.RO), Register("wo", 0x20, Access.WO)],
    "c": [Register("x", 0xC, width=20)],
}
RO_VALUE = {"a": 0x12345678, "b": 0xCAFEF00D}


class Bench(wiring.Component):
    def __init__(self):
        self.dec = AXI4LiteDecoder(11, WINDOWS)
        super().__init__({"bus": wiring.In(AXI4LiteSignature(11, 32))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.dec = self.dec
        wiring.connect(m, wiring.flipped(self.bus), self.dec.bus)
        for name, _, sw in WINDOWS:
            rf = AXI4LiteRegisterFile(REGS[name], sw)
            m.submodules[f"rf_{name}"] = rf
            wiring.connect(m, getattr(self.dec, name), rf.bus)
            if name in RO_VALUE:
                m.d.comb += rf.ro.eq(RO_VALUE[name])
        return m


class Model:
    """Golden map: the window, then the register file's rules (mcf_fpga/hdl/bus/regfile.py)."""

    def __init__(self):
        self.values = {(w, r.name): r.reset for w in REGS for r in REGS[w]}

    def _find(self, addr):
        for name, base, sw in WINDOWS:
            if base <= addr < base + (1 << sw):
                off = addr - base
                if off % 4:
                    return name, None
                return name, next((r for r in REGS[name] if r.offset == off), None)
        return None, None

    def write(self, addr, value, strb):
        w, r = self._find(addr)
        if r is None:
            return Resp.DECERR
        if r.access is Access.RO:
            return Resp.SLVERR
        old = self.values[(w, r.name)]
        new = 0
        for i in range(4):
            src = value if strb >> i & 1 else old
            new |= src & (0xFF << 8 * i)
        self.values[(w, r.name)] = new & ((1 << r.width) - 1)
        return Resp.OKAY

    def read(self, addr):
        w, r = self._find(addr)
        if r is None:
            return 0, Resp.DECERR
        if r.access is Access.RO:
            return RO_VALUE[w], Resp.OKAY
        if r.access is Access.WO:
            return 0, Resp.OKAY
        return self.values[(w, r.name)], Resp.OKAY


def interesting_addr():
    regs = [base + r.offset for name, base, _ in WINDOWS for r in REGS[name]]
    return st.one_of(st.sampled_from(regs), st.integers(0, 0x7FF))


@given(ops=st.lists(st.tuples(st.booleans(), interesting_addr(), st.integers(0, 2 ** 32 - 1),
                              st.integers(0, 15)), min_size=1, max_size=30),
       seed=st.integers(0, 2 ** 16))
def test_decoder_matches_address_map(ops, seed):
    dut = Bench()
    model = Model()
    rng = random.Random(seed)
    bus = dut.bus
    got, want = [], []

    async def wait_ready(ctx, stream):
        await ctx.tick().until(stream.ready)

    async def tb(ctx):
        for is_write, addr, value, strb in ops:
            for _ in range(rng.randrange(3)):
                await ctx.tick()
            if is_write:
                ctx.set(bus.aw.payload.addr, addr)
                ctx.set(bus.w.payload.data, value)
                ctx.set(bus.w.payload.strb, strb)
                ctx.set(bus.aw.valid, 1)
                ctx.set(bus.w.valid, 1)
                await wait_ready(ctx, bus.aw)
                ctx.set(bus.aw.valid, 0)
                ctx.set(bus.w.valid, 0)
                while True:
                    ctx.set(bus.b.ready, rng.random() < 0.5)
                    _, _, v, r, resp = await ctx.tick().sample(bus.b.valid, bus.b.ready, bus.b.payload.resp)
                    if v and r:
                        break
                ctx.set(bus.b.ready, 0)
                got.append(("w", addr, Resp(resp)))
                want.append(("w", addr, model.write(addr, value, strb)))
            else:
                ctx.set(bus.ar.payload.addr, addr)
                ctx.set(bus.ar.valid, 1)
                await wait_ready(ctx, bus.ar)
                ctx.set(bus.ar.valid, 0)
                while True:
                    ctx.set(bus.r.ready, rng.random() < 0.5)
                    _, _, v, r, d, resp = await ctx.tick().sample(bus.r.valid, bus.r.ready, bus.r.payload.data,
                                                                bus.r.payload.resp)
                    if v and r:
                        break
                ctx.set(bus.r.ready, 0)
                got.append(("r", addr, d, Resp(resp)))
                want.append(("r", addr, *model.read(addr)))

    run_simulation(dut, [tb], max_cycles=20_000)
    assert got == want


@pytest.mark.parametrize("windows, msg", [
    ((("a", 0x10, 6),), "multiple of its size"),
    ((("a", 0, 6), ("b", 0x20, 4)), "overlap"),
    ((("a", 0, 12),), "sub_width"),
    ((("bus", 0, 4),), "identifier"),
    ((), "at least one"),
])
def test_bad_windows_are_refused(windows, msg):
    with pytest.raises(ValueError, match=msg):
        AXI4LiteDecoder(11, windows)
