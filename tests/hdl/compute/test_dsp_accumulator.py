"""DSPAccumulator (and through it the DSP48E2 model's A:B / CARRYIN / OPMODE registers, the X and Z
multiplexers and P) vs a Python accumulator, cycle by cycle, on random terms, carry bits, loads,
enables and resets; the XCK26 target gets the primitive (one DSP48E2, no LUT); the model refuses
what it does not model."""

import pytest
from amaranth import ClockDomain, Const, Module, Signal, Elaboratable
from amaranth.back import verilog
from hypothesis import given, settings, strategies as st

from mcf_fpga.hdl.compute.dsp_accumulator import DSPAccumulator
from mcf_fpga.hdl.dsp48e2 import XCUP, dsp48e2
from mcf_fpga.hdl.verilog import to_verilog
from mcf_fpga.sim.kit import run_simulation

M48 = (1 << 48) - 1


def signed48(v):
    v &= M48
    return v - (1 << 48) if v >> 47 else v


class Golden:
    """The accumulator's contract: inputs registered, P updated on the next cycle's ``en``."""

    def __init__(self):
        self.x = self.ci = self.load = self.p = 0

    def tick(self, x, ci, load, en, rst):
        if rst:
            self.x = self.ci = self.load = self.p = 0
            return
        if en:
            self.p = signed48(self.x + self.ci + (0 if self.load else self.p))
        self.x, self.ci, self.load = x, ci, load


class _WithReset(Elaboratable):
    """The accumulator in a sync domain whose reset the testbench drives."""

    def __init__(self):
        self.acc = DSPAccumulator()
        self.rst = Signal()

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = cd = ClockDomain()
        m.d.comb += cd.rst.eq(self.rst)
        m.submodules.acc = self.acc
        return m


big = st.integers(-(1 << 47), (1 << 47) - 1)
step = st.tuples(st.one_of(big, st.integers(-300, 300)), st.integers(0, 1), st.booleans(),
                 st.sampled_from([0, 1, 1, 1]), st.sampled_from([0] * 15 + [1]))


@given(steps=st.lists(step, min_size=1, max_size=60))
@settings(max_examples=30, deadline=None)
def test_accumulator_matches_golden(steps):
    top = _WithReset()
    dut = top.acc
    gold = Golden()
    got, want = [], []

    async def tb(ctx):
        for x, ci, load, en, rst in steps:
            ctx.set(dut.x, x)
            ctx.set(dut.ci, ci)
            ctx.set(dut.load, load)
            ctx.set(dut.en, en)
            ctx.set(top.rst, rst)
            await ctx.tick()
            gold.tick(x, ci, load, en, rst)
            got.append(ctx.get(dut.p))
            want.append(gold.p)
    run_simulation(top, [tb], vcd=False, check_streams=False, max_cycles=1000)
    assert got == want


def test_wraps_mod_2_48():
    """The adder's carry out of bit 47 is lost, as in the primitive: (2**47 - 1) + 1 -> -2**47."""
    dut = DSPAccumulator()
    got = []

    async def tb(ctx):
        for x, ci, load in ((M48 >> 1, 0, 1), (0, 1, 0), (0, 0, 0)):
            ctx.set(dut.x, x)
            ctx.set(dut.ci, ci)
            ctx.set(dut.load, load)
            ctx.set(dut.en, 1)
            await ctx.tick()
            got.append(ctx.get(dut.p))
    run_simulation(dut, [tb], vcd=False, check_streams=False, max_cycles=100)
    assert got[1:] == [(1 << 47) - 1, -(1 << 47)]


def test_target_gets_the_primitive():
    text = verilog.convert(DSPAccumulator(), name="top", platform=XCUP, emit_src=False)
    assert "DSP48E2" in text
    for attr in (".AREG(", ".OPMODEREG(", ".CARRYINREG(", ".USE_MULT(\"NONE\")"):
        assert attr in text, attr
    plain = verilog.convert(DSPAccumulator(), name="top", emit_src=False)
    assert "DSP48E2" not in plain
    # the board flow's path (hdl.verilog.to_verilog with the target)
    assert "DSP48E2" in to_verilog(DSPAccumulator(), "top", platform=XCUP)
    assert "DSP48E2" not in to_verilog(DSPAccumulator(), "top")


@pytest.mark.slow
def test_primitive_costs_no_lut(tmp_path):
    """Yosys synth_xilinx counts the primitive as one DSP and no LUT; the model as LUTs."""
    from mcf_fpga.boards.utilisation import synthesize
    for plat, dsp, lut_max in ((XCUP, 1, 0), (None, 0, None)):
        d = tmp_path / str(plat)
        d.mkdir()
        (d / "top.v").write_text(verilog.convert(DSPAccumulator(), name="top", platform=plat, emit_src=False))
        used = synthesize(["top.v"], "top", str(d)).used
        assert used["DSP"] == dsp, used
        if lut_max is not None:
            assert used["LUT"] <= lut_max, used
        else:
            assert used["LUT"] >= 48, used


@pytest.mark.parametrize("params, inputs, match", [
    ({"USE_MULT": "MULTIPLY"}, {}, "USE_MULT"),
    ({"PREG": 0}, {}, "PREG=0"),
    ({"AREG": 0, "ACASCREG": 1, "USE_MULT": "NONE"}, {}, "ACASCREG"),
    ({"DREG": 1, "USE_MULT": "NONE"}, {}, "DREG"),
    ({"USE_MULT": "NONE"}, {"ALUMODE": Const(3, 4)}, "ALUMODE"),
    ({"USE_MULT": "NONE"}, {"PCIN": Const(0, 48)}, "PCIN"),
])
def test_model_refuses_what_it_does_not_model(params, inputs, match):
    with pytest.raises(ValueError, match=match):
        dsp48e2(None, params, inputs, Signal(48))


@pytest.mark.parametrize("kpc, want", [(1, 8), (2, 0)])
def test_attention_block_accumulators_are_primitives(kpc, want):
    """The pipelined attention unit's o_b: one DSP48E2 per lane at one key per cycle (two keys'
    terms are summed in LUTs: one CARRYIN cannot take two round bits)."""
    from mcf_fpga.hdl.compute.attention import AttentionUnit
    att = AttentionUnit(d=8, nq_max=2, kv_depth=16, nb_max=2, z_max=16, blk_max=8, merge_lanes=2,
                        keys_per_cycle=kpc, pipelined=True)
    text = verilog.convert(att, name="top", platform=XCUP, emit_src=False)
    assert text.count("DSP48E2 ") == want
