"""The DSP48E2 primitive (UltraScale+, UG579): the XCK26 synthesis target, and the primitive as a
Yosys / Vivado ``Instance`` there or, elsewhere (simulation, Verilator), as its behavioural model
-- one parameter and port dictionary for both, so what the simulator runs is what synthesis gets.

The model covers the subset the project uses: the 48-bit adder and the P register, with the
multiplier unused (``USE_MULT="NONE"``) or used (``"MULTIPLY"``: M = A[26:0] x B, both signed,
``INMODE`` 0000 -- the A2 / B2 registers' values, no pre-adder -- through the optional M register),
inputs A, B, C, CARRYIN through their optional registers, a dynamic ``OPMODE`` decoded per UG579
table 2-7 .. 2-10 (W, X, Y, Z multiplexers; no PCIN cascade; X = Y = 01 selects the product,
whose two partial products the primitive sums in X and Y: the model puts M on X and 0 on Y),
``ALUMODE`` 0000 (``P = Z + W + X + Y + CIN``) and ``CARRYINSEL`` 000. Every other setting
raises ``ValueError`` naming it. Resets are synchronous and win over the clock enables, as in the
primitive.
"""
from amaranth import Cat, ClockSignal, Const, Elaboratable, Instance, Module, Mux, Signal, Value

__all__ = ["XCUP", "UltraScalePlusTarget", "uses_dsp48e2", "dsp48e2", "DSP48E2Model", "opmode",
           "X_M", "X_AB", "Y_M", "Z_P"]


class UltraScalePlusTarget:
    """The Verilog target of synthesis for the XCK26 (Yosys ``synth_xilinx -family xcup``, Vivado):
    passed as ``platform`` to ``verilog.convert`` / ``hdl.verilog.to_verilog``, it makes units that
    have a hard-primitive form emit the primitive. It has no ``get_*`` hooks, so Amaranth's own
    library elaborates as for ``platform=None``."""
    dsp48e2 = True

    def __repr__(self):
        return "XCUP"


#: the target for the KR260's synthesis runs (bench_engine --synth, bench_timing, the board flow)
XCUP = UltraScalePlusTarget()


def uses_dsp48e2(platform) -> bool:
    """Does ``platform`` take DSP48E2 primitives (``Instance``) rather than their model?"""
    return bool(getattr(platform, "dsp48e2", False))


#: OPMODE selections (UG579 tables 2-7 .. 2-10) the project uses: X (bits 1:0) M or A:B, Y (3:2) M
#: (X = Y = M: the product), Z (6:4) P; 0 selects zero in each
X_M, X_AB, Y_M, Z_P = 0b01, 0b11, 0b01, 0b010


def opmode(x=0, y=0, z=0, w=0):
    """The 9-bit OPMODE of the X, Y, Z and W selections, each a constant or a Value of its field's
    width (2, 2, 3, 2 bits)."""
    return Cat(*(Const(v, n) if isinstance(v, int) else v for v, n in ((x, 2), (y, 2), (z, 3), (w, 2))))


# the parameters the model implements, each with the values it accepts (the first is the default)
_PARAMS = {
    "AREG": (1, 0), "BREG": (1, 0), "ACASCREG": (1, 0), "BCASCREG": (1, 0), "CREG": (1, 0),
    "CARRYINREG": (1, 0), "OPMODEREG": (1, 0), "ALUMODEREG": (1, 0), "CARRYINSELREG": (1, 0),
    "PREG": (1,), "MREG": (1, 0), "USE_MULT": ("MULTIPLY", "NONE"), "A_INPUT": ("DIRECT",),
    "B_INPUT": ("DIRECT",), "USE_SIMD": ("ONE48",), "USE_PATTERN_DETECT": ("NO_PATDET",),
    "RND": (0,),
}
_INPUTS = {"A": 30, "B": 18, "C": 48, "CARRYIN": 1, "OPMODE": 9, "ALUMODE": 4, "CARRYINSEL": 3}
_CLOCK_ENABLES = ("CEA2", "CEB2", "CEC", "CECARRYIN", "CECTRL", "CEALUMODE", "CEP")
_RESETS = ("RSTA", "RSTB", "RSTC", "RSTALLCARRYIN", "RSTCTRL", "RSTALUMODE", "RSTP")
#: the M register's enable and reset (with ``MREG=1``; tied off otherwise)
_M_PORTS = ("CEM", "RSTM")


def _check(params, inputs):
    for k, v in params.items():
        if k not in _PARAMS:
            raise ValueError(f"DSP48E2 parameter {k}: not in the modelled subset ({', '.join(_PARAMS)})")
        if v not in _PARAMS[k]:
            raise ValueError(f"DSP48E2 parameter {k}={v!r}: the model supports {_PARAMS[k]}")
    p = {k: v[0] for k, v in _PARAMS.items()} | params
    for reg, casc in (("AREG", "ACASCREG"), ("BREG", "BCASCREG")):
        if p[casc] != p[reg]:
            raise ValueError(f"DSP48E2 parameter {casc}={p[casc]}: must equal {reg}={p[reg]} (UG579)")
    for k in inputs:
        if k not in _INPUTS and k not in _CLOCK_ENABLES and k not in _RESETS and k not in _M_PORTS:
            raise ValueError(f"DSP48E2 port {k}: not in the modelled subset")
    for k, want in (("ALUMODE", 0), ("CARRYINSEL", 0)):
        v = inputs.get(k, Const(0, _INPUTS[k]))
        if not isinstance(v, Const) or v.value != want:
            raise ValueError(f"DSP48E2 port {k}: the model supports only the constant {want:b}")
    if p["USE_MULT"] == "NONE" and p["MREG"]:
        raise ValueError("DSP48E2 parameter MREG=1: needs the multiplier (USE_MULT='MULTIPLY'; UG579)")
    return p


def dsp48e2(platform, params: dict, inputs: dict, p: Signal) -> Elaboratable:
    """One DSP48E2 with ``params`` (UG579 attribute names) and ``inputs`` (port name -> value; a
    port left out is tied to 0, clock enables to 1) driving ``p`` (48 bits) from its P output: an
    ``Instance`` on ``platform`` if :func:`uses_dsp48e2`, else :class:`DSP48E2Model`."""
    p_ = _check(params, inputs)
    if not uses_dsp48e2(platform):
        return DSP48E2Model(p_, inputs, p)
    ports = {f"i_{k}": Const(0, w) for k, w in _INPUTS.items()}
    ports |= {f"i_{k}": Const(1, 1) for k in _CLOCK_ENABLES} | {f"i_{k}": Const(0, 1) for k in _RESETS}
    ports |= {f"i_{k}": v for k, v in inputs.items()}
    # unused inputs of the full primitive, tied off as UG579 recommends (data 0, enables 0)
    ports |= {"i_D": Const(0, 27), "i_INMODE": Const(0, 5), "i_CEA1": Const(0, 1), "i_CEB1": Const(0, 1),
              "i_CEAD": Const(0, 1), "i_CED": Const(0, 1), "i_CEM": Const(0, 1), "i_CEINMODE": Const(0, 1),
              "i_RSTD": Const(0, 1), "i_RSTM": Const(0, 1), "i_RSTINMODE": Const(0, 1),
              "i_ACIN": Const(0, 30), "i_BCIN": Const(0, 18), "i_PCIN": Const(0, 48),
              "i_CARRYCASCIN": Const(0, 1), "i_MULTSIGNIN": Const(0, 1), "i_CLK": ClockSignal()}
    if p_["MREG"]:                     # the M register's enable (default on) and reset, as given
        ports |= {"i_CEM": Const(1, 1)} | {f"i_{k}": v for k, v in inputs.items() if k in _M_PORTS}
    return Instance("DSP48E2", **{f"p_{k}": v for k, v in params.items()}, **ports, o_P=p)


class DSP48E2Model(Elaboratable):
    """The behavioural model of :func:`dsp48e2`'s subset (see the module's docstring): the
    optional input registers, the multiplier and its optional M register, the W / X / Y / Z
    multiplexers by ``OPMODE``, the adder and P."""

    def __init__(self, params, inputs, p):
        self.params, self.inputs, self.p = params, inputs, p

    def elaborate(self, platform):
        m = Module()
        pr, ins = self.params, self.inputs

        def port(k):
            return Value.cast(ins.get(k, Const(1 if k in _CLOCK_ENABLES + ("CEM",) else 0, _INPUTS.get(k, 1))))

        def reg(value, n, ce, rst, name):
            """``value`` through a register if ``n`` (reset ``rst`` wins over enable ``ce``)."""
            if not n:
                return value
            r = Signal(len(value), name=name, reset_less=True)
            with m.If(port(rst)):
                m.d.sync += r.eq(0)
            with m.Elif(port(ce)):
                m.d.sync += r.eq(value)
            return r
        a = reg(port("A"), pr["AREG"], "CEA2", "RSTA", "a2")
        b = reg(port("B"), pr["BREG"], "CEB2", "RSTB", "b2")
        c = reg(port("C"), pr["CREG"], "CEC", "RSTC", "creg")
        cin = reg(port("CARRYIN"), pr["CARRYINREG"], "CECARRYIN", "RSTALLCARRYIN", "carryin")
        op = reg(port("OPMODE"), pr["OPMODEREG"], "CECTRL", "RSTCTRL", "opmode")
        preg = Signal(48, name="preg", reset_less=True)
        zero, ones = Const(0, 48), Const((1 << 48) - 1, 48)
        if pr["USE_MULT"] == "MULTIPLY":   # M = A[26:0] x B (signed 27 x 18), sign-extended to 48
            prod = reg(a[:27].as_signed() * b.as_signed(), pr["MREG"], "CEM", "RSTM", "mreg")
            mx = Signal(48, name="m48")
            m.d.comb += mx.eq(prod.as_signed())
        else:
            mx = zero
        x = Mux(op[1], Mux(op[0], Cat(b, a), preg), Mux(op[0], mx, zero))   # 00 0, 01 M, 10 P, 11 A:B
        y = Mux(op[3], Mux(op[2], c, ones), zero)                         # 00 0, 10 all ones, 11 C
        z = Mux(op[4:7] == 0b010, preg,
                Mux(op[4:7] == 0b011, c,
                    Mux(op[4:7] == 0b100, preg,                           # MACC extend: P
                        Mux(op[4:7] == 0b110, preg.as_signed() >> 17, zero))))   # 000 0, 001/101 PCIN: 0
        w = Mux(op[8], Mux(op[7], c, Const(pr["RND"], 48)), Mux(op[7], preg, zero))
        with m.If(port("RSTP")):
            m.d.sync += preg.eq(0)
        with m.Elif(port("CEP")):
            m.d.sync += preg.eq((z + w + x + y + cin)[:48])
        m.d.comb += self.p.eq(preg)
        return m
