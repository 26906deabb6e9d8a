"""PairedScratchpad vs a list of words: random single writes (any address) and pair writes (even
addresses), random reads on both ports: ``data`` is word ``addr`` and, at an even ``addr``,
``data1`` word ``addr + 1``, as they were before the cycle's write; a pair write at an odd address
writes one word."""
import random

import pytest
from hypothesis import given, settings, strategies as st

from mcf_fpga.hdl.compute.paired_scratchpad import PairedScratchpad
from mcf_fpga.sim.kit import run_simulation

DEPTH = 16


def s32(v):
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >> 31 else v


@given(seed=st.integers(0, 2 ** 31), cycles=st.integers(20, 120), wp=st.sampled_from([0.3, 0.8]))
@settings(max_examples=20, deadline=None)
def test_paired_scratchpad_matches_a_word_list(seed, cycles, wp):
    rng = random.Random(seed)
    dut = PairedScratchpad(DEPTH)
    ref = [0] * DEPTH
    bad = []

    async def tb(ctx):
        for _ in range(cycles):
            reads = {p: rng.randrange(DEPTH) for p in ("ra", "rb")}
            for p, a in reads.items():
                ctx.set(getattr(dut, p).addr, a)
            exp = {p: (ref[a], ref[a + 1] if a % 2 == 0 else None) for p, a in reads.items()}
            wen = rng.random() < wp
            wa, pair = rng.randrange(DEPTH), rng.random() < 0.5
            d0, d1 = rng.randrange(-2 ** 31, 2 ** 31), rng.randrange(-2 ** 31, 2 ** 31)
            ctx.set(dut.w.en, wen)
            ctx.set(dut.w.pair, pair)
            ctx.set(dut.w.addr, wa)
            ctx.set(dut.w.data, d0)
            ctx.set(dut.w.data1, d1)
            await ctx.tick()
            for p, (e0, e1) in exp.items():
                got0, got1 = s32(ctx.get(getattr(dut, p).data)), s32(ctx.get(getattr(dut, p).data1))
                if got0 != e0 or (e1 is not None and got1 != e1):
                    bad.append((p, reads[p], (got0, got1), (e0, e1)))
            if wen:
                ref[wa] = d0
                if pair and wa % 2 == 0:
                    ref[wa + 1] = d1
    run_simulation(dut, [tb], vcd=False, max_cycles=cycles + 10)
    assert not bad, bad[:5]


def test_paired_scratchpad_refuses_odd_depth():
    for depth in (0, 1, 7):
        with pytest.raises(ValueError, match=f"depth={depth} must be even"):
            PairedScratchpad(depth)


@pytest.mark.slow
def test_pairs_cost_no_more_uram(tmp_path):
    """Yosys maps the paired scratchpad of 8,192 words (4,096 rows of 64 bits, two read ports) to as
    many URAM288 as a one-word memory of 8,192 words with two read ports: 2 (a URAM288 row holds 72
    bits, two words either way). Two memories of even and odd words would take 4."""
    from amaranth import Module, signed
    from amaranth.back import verilog
    from amaranth.lib import wiring
    from amaranth.lib.memory import Memory
    from amaranth.lib.wiring import In, Out
    from mcf_fpga.boards.utilisation import synthesize

    class OneWord(wiring.Component):
        def __init__(self):
            super().__init__({"ra": In(13), "rb": In(13), "wa": In(13), "wd": In(signed(32)), "we": In(1),
                              "qa": Out(signed(32)), "qb": Out(signed(32))})

        def elaborate(self, platform):
            m = Module()
            m.submodules.sp = sp = Memory(shape=signed(32), depth=8192, init=[], attrs={"ram_style": "ultra"})
            w, a, b = sp.write_port(), sp.read_port(), sp.read_port()
            m.d.comb += [w.addr.eq(self.wa), w.data.eq(self.wd), w.en.eq(self.we), a.addr.eq(self.ra),
                         b.addr.eq(self.rb), self.qa.eq(a.data), self.qb.eq(b.data)]
            return m
    used = {}
    for name, dut in (("one", OneWord()), ("paired", PairedScratchpad(8192, attrs={"ram_style": "ultra"}))):
        d = tmp_path / name
        d.mkdir()
        (d / "top.v").write_text(verilog.convert(dut, name="top", emit_src=False))
        used[name] = synthesize(["top.v"], "top", str(d)).used
    assert used["paired"]["URAM"] == used["one"]["URAM"] == 2, used
