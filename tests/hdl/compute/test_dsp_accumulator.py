"""DSPAccumulator (and through it the DSP48E2 model's A:B / CARRYIN / OPMODE registers, the X and Z
multiplexers and P) vs a Python accumulator, cycle by cycle, on random terms, carry bits, loads,
enables and resets; the model's multiplier (``USE_MULT="MULTIPLY"``, with and without its M
register) vs a Python MACC of UG579's semantics; the XCK26 target gets the primitive (one DSP48E2,
no LUT); the model refuses what it does not model."""

import pytest
from amaranth import ClockDomain, Const, Elaboratable, Module, Mux, Signal
from amaranth.back import verilog
from hypothesis import given, settings, strategies as st

from mcf_fpga.hdl.compute.dsp_accumulator import DSPAccumulator
from mcf_fpga.hdl.dsp48e2 import X_M, XCUP, Y_M, Z_P, dsp48e2, opmode
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
    got, want = _lockstep(top, Golden(), steps, dut.p, lambda: (dut.x, dut.ci, dut.load, dut.en, top.rst))
    assert got == want


def _lockstep(top, gold, steps, p, ports):
    """Each step's values on ``ports()`` (in order), a clock edge, then ``p`` beside ``gold.p``
    after ``gold.tick(*step)``: (got, want), cycle by cycle."""
    got, want = [], []

    async def tb(ctx):
        for step in steps:
            for port, v in zip(ports(), step):
                ctx.set(port, v)
            await ctx.tick()
            gold.tick(*step)
            got.append(ctx.get(p))
            want.append(gold.p)
    run_simulation(top, [tb], vcd=False, check_streams=False, max_cycles=1000)
    return got, want


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
    ({"USE_MULT": "NONE", "MREG": 1}, {}, "MREG=1"),
    ({"USE_MULT": "ADD"}, {}, "USE_MULT"),
    ({"PREG": 0}, {}, "PREG=0"),
    ({"AREG": 0, "ACASCREG": 1, "USE_MULT": "NONE", "MREG": 0}, {}, "ACASCREG"),
    ({"DREG": 1, "USE_MULT": "NONE"}, {}, "DREG"),
    ({"USE_MULT": "NONE", "MREG": 0}, {"ALUMODE": Const(3, 4)}, "ALUMODE"),
    ({"USE_MULT": "NONE", "MREG": 0}, {"PCIN": Const(0, 48)}, "PCIN"),
    ({"USE_MULT": "MULTIPLY"}, {"INMODE": Const(0, 5)}, "INMODE"),
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


class _Macc(Elaboratable):
    """One modelled DSP48E2 as a multiply-accumulator: P <= (P or 0 by ``keep``) + A[26:0] * B,
    A, B and OPMODE registered (AREG, BREG, OPMODEREG), M registered if ``mreg``."""

    def __init__(self, mreg):
        self.mreg = mreg
        self.a, self.b, self.keep = Signal(30), Signal(18), Signal()
        self.ce = Signal(5)           # CEA2, CEB2, CECTRL, CEM, CEP
        self.p, self.rst = Signal(48), Signal()

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = cd = ClockDomain()
        m.d.comb += cd.rst.eq(self.rst)
        op = opmode(x=X_M, y=Y_M, z=Mux(self.keep, Const(Z_P, 3), Const(0, 3)))
        params = {"AREG": 1, "BREG": 1, "ACASCREG": 1, "BCASCREG": 1, "OPMODEREG": 1, "CREG": 0,
                  "MREG": self.mreg, "PREG": 1, "USE_MULT": "MULTIPLY"}
        ce = dict(zip(("CEA2", "CEB2", "CECTRL", "CEM", "CEP"), self.ce))
        inputs = {"A": self.a, "B": self.b, "OPMODE": op, **ce,
                  **{r: self.rst for r in ("RSTA", "RSTB", "RSTCTRL", "RSTM", "RSTP")}}
        m.submodules.dsp = dsp48e2(None, params, inputs, self.p)
        return m


def _s(v, bits):
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


class MaccGolden:
    """UG579's MACC, register by register: A2, B2, OPMODE, (M), P; reset clears them all (an
    OPMODE register of 0 selects neither the product nor P: P <= 0 until it is loaded)."""

    def __init__(self, mreg):
        self.mreg = mreg
        self.a = self.b = self.keep = self.m = self.p = self.mult = 0

    def tick(self, a, b, keep, ce, rst):
        """``ce``: the enables CEA2, CEB2, CECTRL, CEM, CEP as bits 0..4."""
        if rst:
            self.a = self.b = self.keep = self.m = self.p = self.mult = 0
            return
        prod = _s(self.a, 27) * _s(self.b, 18)
        source = self.m if self.mreg else prod
        cea, ceb, cec, cem, cep = (ce >> i & 1 for i in range(5))
        if cep:
            self.p = ((source if self.mult else 0) + (self.p if self.keep else 0)) & M48
        if cem:
            self.m = prod
        if cea:
            self.a = a
        if ceb:
            self.b = b
        if cec:
            self.keep, self.mult = keep, 1


@given(mreg=st.sampled_from([0, 1]),
       steps=st.lists(st.tuples(st.one_of(st.integers(0, (1 << 30) - 1), st.integers(0, 300)),
                                st.one_of(st.integers(0, (1 << 18) - 1), st.integers(0, 300)), st.booleans(),
                                st.lists(st.sampled_from([0, 1, 1]), min_size=5, max_size=5),
                                st.sampled_from([0] * 15 + [1])), min_size=1, max_size=50))
@settings(max_examples=30, deadline=None)
def test_multiplier_macc_matches_ug579(mreg, steps):
    top = _Macc(mreg)
    steps = [(a, b, keep, sum(c << i for i, c in enumerate(ce)), rst) for a, b, keep, ce, rst in steps]
    got, want = _lockstep(top, MaccGolden(mreg), steps, top.p, lambda: (top.a, top.b, top.keep, top.ce, top.rst))
    assert got == want


def test_target_gets_the_multiplier():
    """On the XCK26 target the MACC is the primitive with its multiplier on and the M register's
    enable and reset wired when MREG=1 (tied off when 0)."""
    for mreg in (0, 1):
        params = {"AREG": 1, "BREG": 1, "ACASCREG": 1, "BCASCREG": 1, "OPMODEREG": 1, "CREG": 0,
                  "MREG": mreg, "PREG": 1, "USE_MULT": "MULTIPLY"}
        cem_in = Signal(name="cem_in")
        inst = dsp48e2(XCUP, params, {"A": Signal(30), "B": Signal(18), "CEM": cem_in}, Signal(48))
        assert inst.parameters["USE_MULT"] == "MULTIPLY" and inst.parameters["MREG"] == mreg
        cem = inst.ports["CEM"][0]
        assert (cem is cem_in) == bool(mreg), (mreg, cem)
