"""The vector unit's result path in registered stages: one element's operands in, its result
``LATENCY`` enabled cycles later, one element per cycle.

In: ``i`` (an :data:`OPERANDS` record) with ``i_valid``; ``adv`` moves every stage one step (the
vector unit drives it with ``~o.valid | o.ready``: the whole pipeline holds while its output is
held, so back-pressure loses nothing and needs no skid buffer). Out: ``o_valid`` and ``o`` (``data``
signed 40, ``e``, ``last``), the last stage's registers; ``busy`` while any stage holds an element.

Per element (golden ``mcf_fpga/golden/numerics.py``), by ``kind``:

* ADD: ``sat32(x + y)``;
* SWIGLU: ``swiglu_fixed(x, y, frac)`` (gate ``x``, up ``y``; sigmoid ROM read in stage 2);
* QR (QUANT / RMSNORM's last step): ``clamp(rshift_round(u, qs), +-(2**(bits-1) - 1))`` with
  ``u = rshift_round(x, sh) * z`` when ``rms`` (``z`` = the row's reciprocal RMS), else ``u = x``;
* ROPE: ``sat32(rshift_round(x*cos - y*sin, 14))``, or with ``second`` ``sat32(rshift_round(y*cos +
  x*sin, 14))`` (``z`` = cos | sin << 16, Q14).

Stages (register, then the logic after it): R1 operands | sat add, the sigmoid index's and the
pre-shift's shifts by whole bytes, ROPE's two products | R2 the sigmoid index's rest and clamp (the
ROM's address), the pre-shift's rest, ROPE's sum | R3 (ROM data) gate x sigmoid, hp x r, ROPE's
rounding and saturation | R4 silu's rounding, QR's shift by whole bytes | R5 silu x up as four
partial products (one DSP48E2 each), QR's rest | R6 (with QR's +-qmax) silu x up summed and
SWIGLU's shift by whole bytes, QR's clamp | R7 SWIGLU's rest and saturation, the select | R8 =
the output. Every variable shift is split as ``fixed.rshift_round_coarse`` / ``_fine``.
"""
from amaranth import Cat, Const, Module, Signal, Mux, signed
from amaranth.hdl import Value
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.numerics import FR, P_BITS, RMS_HP_BITS, ROPE_BITS, SIG_STEP_BITS, SIGMOID_LUT
from .fixed import (rshift_round, rshift_round_coarse, rshift_round_fine, rshift_round_fine_bounds,
                    rshift_round_fine_sat, sat)

__all__ = ["VectorResultPipe", "OPERANDS", "ResultKind", "LATENCY", "qclamp", "sigmoid_address",
           "partial_products", "sum_partial_products"]


class ResultKind:
    ADD = 0
    SWIGLU = 1
    QR = 2
    ROPE = 3


OPERANDS = data.StructLayout({
    "kind": 2, "x": signed(32), "y": signed(32), "z": 32, "sh": 5, "qs": signed(8), "rms": 1, "bits": 4,
    "frac": 6, "second": 1, "e": signed(8), "last": 1})
#: enabled cycles from ``i`` to ``o``
LATENCY = 8


def qmax_of(bits):
    """qmax = 2**(bits-1) - 1 (the quantizers' symmetric range), 8 bits."""
    return ((Const(1, 9) << (bits - 1)[:4]) - 1)[:8]


def qclamp(m, v, bits, qmax=None, nqmax=None):
    """``v`` clamped to +-qmax, qmax = :func:`qmax_of` ``(bits)``; or to [``nqmax``, ``qmax``] given
    (registers of qmax_of and its negation: the clamp is then two compares and a select)."""
    if qmax is None:
        q = Signal(8)
        m.d.comb += q.eq(qmax_of(bits))
        qmax, nqmax = q, -q
    return Mux(v > qmax, qmax, Mux(v < nqmax, nqmax, v))


#: silu's width in the pipe (|silu| <= 2**31)
SILU_BITS = 33
#: the low part's width of each factor in :func:`partial_products` (unsigned; fits a DSP48E2's B port)
PP_SPLIT = 17


def partial_products(a, b):
    """The four products of ``a`` = ah * 2**PP_SPLIT + al and ``b`` = bh * 2**PP_SPLIT + bl (al, bl
    unsigned, ah, bh signed), each small enough for one DSP48E2 (27 x 18), as a dict to register;
    :func:`sum_partial_products` gives a * b from them (a stage later: timing, no adder tree of a
    wide product behind the DSPs)."""
    a, b = Value.cast(a), Value.cast(b)
    al, ah = a[:PP_SPLIT], a[PP_SPLIT:].as_signed()
    bl, bh = b[:PP_SPLIT], b[PP_SPLIT:].as_signed()
    return {"ll": al * bl, "lh": al * bh, "hl": ah * bl, "hh": ah * bh}


def sum_partial_products(pp):
    """a * b from :func:`partial_products`' (registered) dict: ll and hh << 2k side by side (no
    overlap: one concatenation), the cross terms' sum added at 2**k."""
    k = PP_SPLIT
    ll, hh = pp["ll"], pp["hh"]
    return Cat(ll[:2 * k], hh).as_signed() + ((pp["lh"] + pp["hl"]) << k)


def sigmoid_address(c):
    """The sigmoid ROM's address ``clamp(g + 512, 0, 1023)`` of the index ``g =``
    :func:`rshift_round_fine` ``(c, max_left=SIG_STEP_BITS)`` of the coarse step ``c``: the clamp
    compares beside the rounding add (:func:`fixed.rshift_round_fine_bounds`) and no +512 adder
    (inside the range g + 512 is g's low 10 bits with bit 9 flipped)."""
    g, below, above = rshift_round_fine_bounds(c, -512, 511, max_left=SIG_STEP_BITS)
    return Mux(below, 0, Mux(above, 1023, Cat(g[:9], ~g[9])))


class VectorResultPipe(wiring.Component):
    """See the module docstring."""

    def __init__(self):
        super().__init__({
            "i": In(OPERANDS), "i_valid": In(1), "adv": In(1),
            "o": Out(data.StructLayout({"data": signed(40), "e": signed(8), "last": 1})),
            "o_valid": Out(1), "busy": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.sig = rom = Memory(shape=16, depth=1024, init=list(SIGMOID_LUT))
        sig = rom.read_port(domain="sync")
        adv = self.adv
        valids = []

        def stage(n, rec, valid, **vals):
            """Registers ``rec``, ``valid`` and ``vals`` (name: expression) when ``adv``; returns them."""
            r = Signal(OPERANDS, name=f"r{n}_rec")
            v = Signal(name=f"r{n}_valid")
            out = {k: Signal.like(Value.cast(e), name=f"r{n}_{k}") if not isinstance(e, dict)
                   else {f: Signal.like(Value.cast(x), name=f"r{n}_{k}_{f}") for f, x in e.items()}
                   for k, e in vals.items()}
            with m.If(adv):
                m.d.sync += [r.eq(rec), v.eq(valid)]
                for k, e in vals.items():
                    if isinstance(e, dict):
                        m.d.sync += [out[k][f].eq(x) for f, x in e.items()]
                    else:
                        m.d.sync += out[k].eq(e)
            valids.append(v)
            return r, v, out

        # R1: the operands
        r1, v1, _ = stage(1, self.i, self.i_valid)
        cos, sin = r1.z[:16].as_signed(), r1.z[16:32].as_signed()
        r2, v2, s2 = stage(2, r1, v1, add=sat(r1.x + r1.y, 32), pre=rshift_round_coarse(r1.x, r1.sh),
                           g=rshift_round_coarse(r1.x, r1.frac.as_signed() - SIG_STEP_BITS, max_left=SIG_STEP_BITS),
                           pc=Mux(r1.second, r1.y, r1.x) * cos, ps=Mux(r1.second, r1.x, r1.y) * sin)
        m.d.comb += [sig.addr.eq(sigmoid_address(s2["g"])), sig.en.eq(adv)]
        # hp in RMS_HP_BITS (|hp| <= 2**15 by RMSNORM's pre-shift; QUANT does not use u): hp x r is two
        # DSP48E2s and one adder, not four and a tree (timing)
        r3, v3, s3 = stage(3, r2, v2, add=s2["add"], hp=rshift_round_fine(s2["pre"])[:RMS_HP_BITS].as_signed(),
                           rs=Mux(r2.second, s2["pc"] + s2["ps"], s2["pc"] - s2["ps"]))
        # R3 (+ the sigmoid ROM's data)
        r4, v4, s4 = stage(4, r3, v3, simple=Mux(r3.kind == ResultKind.ROPE, sat(rshift_round(s3["rs"], ROPE_BITS), 32),
                                                  s3["add"]),
                           gs=r3.x * sig.data, u=s3["hp"] * r3.z[:FR + 1])
        # silu = rshift_round(x * sigmoid, 15): |x| <= 2**31 and the sigmoid < 2**15, so 33 bits
        r5, v5, s5 = stage(5, r4, v4, simple=s4["simple"], silu=rshift_round(s4["gs"], P_BITS)[:SILU_BITS].as_signed(),
                           q=rshift_round_coarse(Mux(r4.rms, s4["u"], r4.x), r4.qs, max_left=8))
        # QR's clamp bound +-qmax registered beside the shift's result (qmax of bits, then the
        # compares, were carry chains in a row into r7_res)
        qm = Signal(8, name="r5_qmax")
        m.d.comb += qm.eq(qmax_of(r5.bits))
        r6, v6, s6 = stage(6, r5, v5, res=Mux(r5.kind == ResultKind.QR, rshift_round_fine(s5["q"], max_left=8),
                                              s5["simple"]),
                           up=partial_products(s5["silu"], r5.y), qmax=qm, nqmax=-qm)
        r7, v7, s7 = stage(7, r6, v6, res=Mux(r6.kind == ResultKind.QR,
                                              qclamp(m, s6["res"], r6.bits, s6["qmax"], s6["nqmax"]), s6["res"]),
                           sw=rshift_round_coarse(sum_partial_products(s6["up"]), r6.frac.as_signed()))
        _, v8, s8 = stage(8, r7, v7, data=Mux(r7.kind == ResultKind.SWIGLU, rshift_round_fine_sat(s7["sw"], 32),
                                              s7["res"]), e=r7.e, last=r7.last)
        m.d.comb += [self.o_valid.eq(v8), self.o.data.eq(s8["data"]), self.o.e.eq(s8["e"]),
                     self.o.last.eq(s8["last"]), self.busy.eq(Cat(*valids).any())]
        return m
