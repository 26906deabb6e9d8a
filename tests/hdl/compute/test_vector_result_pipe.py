"""VectorResultPipe against golden numerics, element by element: every kind (ADD, SWIGLU, QR with
and without RMSNorm's pre-shift and reciprocal, ROPE's two halves) on random operands, with random
input gaps and random stalls of ``adv``; results in order, none lost or repeated, each LATENCY
enabled cycles after it went in. The unit-level test (test_vector.py, ``pipelined=True``) checks
the same path against whole golden ops."""
import random

import torch
from hypothesis import given, settings, strategies as st

from amaranth import Module, Signal, signed
from amaranth.sim import Simulator
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.golden import numerics as nx
from mcf_fpga.hdl.compute.fixed import rshift_round_coarse
from mcf_fpga.hdl.compute.vector_result_pipe import (LATENCY, ResultKind, VectorResultPipe, partial_products,
                                                     sigmoid_address, sum_partial_products)
from mcf_fpga.sim.kit import comb_outputs, run_simulation
from mcf_fpga.spec.numerics import FR, SIG_STEP_BITS

DUT = VectorResultPipe()
I32 = st.integers(-2 ** 31, 2 ** 31 - 1)


def expected(op) -> int:
    """The golden result of one operand record."""
    t = lambda v: torch.tensor([v], dtype=torch.int64)  # noqa: E731
    x, y = op["x"], op["y"]
    if op["kind"] == ResultKind.ADD:
        return int(nx.sat(t(x + y)))
    if op["kind"] == ResultKind.SWIGLU:
        return int(nx.swiglu_fixed(t(x), t(y), op["frac"]))
    if op["kind"] == ResultKind.QR:
        u = nx.rshift_round(t(x), op["sh"]) * op["z"] if op["rms"] else t(x)
        qmax = 2 ** (op["bits"] - 1) - 1
        return int(nx.rshift_round(u, op["qs"]).clamp(-qmax, qmax))
    s16 = lambda v: v - (1 << 16) if v >> 15 else v  # noqa: E731
    cos, sin = s16(op["z"] & 0xFFFF), s16(op["z"] >> 16)
    # rope_fixed's pair (a, b) = (x, y): the first half a*cos - b*sin, the second b*cos + a*sin
    v = y * cos + x * sin if op["second"] else x * cos - y * sin
    return int(nx.sat(nx.rshift_round(t(v), 14)))


@st.composite
def operands(draw):
    kind = draw(st.sampled_from([ResultKind.ADD, ResultKind.SWIGLU, ResultKind.QR, ResultKind.ROPE]))
    op = dict(kind=kind, x=draw(I32), y=draw(I32), z=0, sh=0, qs=0, rms=0, bits=8, frac=0, second=0,
              e=draw(st.integers(-128, 127)), last=draw(st.integers(0, 1)))
    if kind == ResultKind.SWIGLU:
        op["frac"] = draw(st.integers(0, 20))
        op["x"] >>= draw(st.integers(0, 31))
        op["y"] >>= draw(st.integers(0, 31))
    elif kind == ResultKind.QR:
        op["rms"] = draw(st.integers(0, 1))
        op["bits"] = draw(st.integers(2, 8))
        if op["rms"]:       # the unit's ranges: |rshift_round(x, sh)| <= 2**15, r < 2**(FR+1)
            op["sh"] = draw(st.integers(0, 17))
            op["x"] >>= max(0, 16 - op["sh"])
            op["z"] = draw(st.integers(0, 2 ** (FR + 1) - 1))
            op["qs"] = draw(st.integers(FR - 40, FR + 40))
        else:
            op["qs"] = draw(st.integers(-8, 33))
    elif kind == ResultKind.ROPE:
        op["z"] = draw(st.integers(0, 2 ** 32 - 1))
        op["second"] = draw(st.integers(0, 1))
    return op


@given(ops=st.lists(operands(), min_size=1, max_size=24), seed=st.integers(0, 2 ** 31),
       gap=st.sampled_from([0.0, 0.4]), stall=st.sampled_from([0.0, 0.5]))
@settings(max_examples=40, deadline=None)
def test_pipe_matches_golden(ops, seed, gap, stall):
    _check(ops, seed, gap, stall)


def test_sigmoid_index_edges():
    """SWIGLU gates whose sigmoid index g = rshift_round(x, frac - 6) lies at and around the
    ROM's ends (g + 512 clamped to 0..1023): g = -514 .. -510 and 510 .. 514, for frac 6 (g = x),
    2 (g = x << 4, a left shift: x = g >> 4, g on the multiples of 16 nearest) and 9 (rounded:
    x = 8g + 4 rounds half away)."""
    ops = []
    for frac, xs in ((6, lambda g: [g]), (2, lambda g: [g >> 4]), (9, lambda g: [8 * g, 8 * g + 4, 8 * g - 4])):
        for g in list(range(-514, -509)) + list(range(510, 515)):
            for x in xs(g):
                ops.append(dict(kind=ResultKind.SWIGLU, x=x, y=12345, z=0, sh=0, qs=0, rms=0, bits=8, frac=frac,
                                second=0, e=0, last=0))
    _check(ops, 1, 0.0, 0.0)


def test_swiglu_extremes():
    """SWIGLU at the gate's and up's extremes and at the partial products' split (2**17): silu x up
    from its four registered partial products equals golden's, every sign combination."""
    ups = [-2 ** 31, 2 ** 31 - 1, -1, 0, 1, 2 ** 17 - 1, 2 ** 17, -2 ** 17, -2 ** 17 - 1]
    ops = [dict(kind=ResultKind.SWIGLU, x=x, y=y, z=0, sh=0, qs=0, rms=0, bits=8, frac=frac, second=0, e=0, last=0)
           for x in (-2 ** 31, 2 ** 31 - 1, 2 ** 20, -7) for y in ups for frac in (0, 20)]
    _check(ops, 2, 0.0, 0.3)


@given(a=st.integers(-2 ** 32, 2 ** 32 - 1) | st.sampled_from([-2 ** 32, 2 ** 32 - 1, 2 ** 17, -2 ** 17, 2 ** 17 - 1]),
       b=I32 | st.sampled_from([-2 ** 31, 2 ** 31 - 1, 2 ** 17, -2 ** 17 - 1]))
@settings(max_examples=200, deadline=None)
def test_partial_products_sum_to_the_product(a, b):
    """sum_partial_products(partial_products(a, b)) == a * b for 33 x 32-bit signed operands."""
    m = Module()
    sa, sb = Signal(signed(33)), Signal(signed(32))
    o = Signal(signed(66))
    m.d.comb += o.eq(sum_partial_products(partial_products(sa, sb)))
    got = []

    async def tb(ctx):
        ctx.set(sa, a)
        ctx.set(sb, b)
        got.append(ctx.get(o))
    sim = Simulator(m)
    sim.add_testbench(tb)
    sim.run()
    assert got == [a * b]


def _check(ops, seed, gap, stall):
    """Feeds ``ops`` (random input gaps and ``adv`` stalls from ``seed``); the results must be
    golden's, in order, each LATENCY enabled cycles after its operands."""
    rng = random.Random(seed)
    got, sent = [], []

    async def tb(ctx):
        pending = list(ops)
        enabled = 0
        while len(got) < len(ops):
            adv = rng.random() >= stall
            feed = adv and pending and rng.random() >= gap
            ctx.set(DUT.adv, adv)
            ctx.set(DUT.i_valid, bool(feed))
            if feed:
                op = pending.pop(0)
                for k, v in op.items():
                    ctx.set(getattr(DUT.i, k), v)
                sent.append(enabled)
            if adv and ctx.get(DUT.o_valid):
                # the output register is emptied on an adv cycle; each result once, in order
                got.append((ctx.get(DUT.o.data), ctx.get(DUT.o.e), ctx.get(DUT.o.last), enabled))
            await ctx.tick()
            enabled += adv
        for _ in range(2):
            await ctx.tick()
        assert not ctx.get(DUT.busy)

    run_simulation(DUT, [tb], max_cycles=20000, vcd=False)
    assert [g[0] for g in got] == [expected(op) for op in ops]
    assert [(g[1], g[2]) for g in got] == [(op["e"], op["last"]) for op in ops]
    # each result is seen LATENCY enabled cycles after its operands went in
    assert [g[3] - s for g, s in zip(got, sent)] == [LATENCY] * len(ops)


class _SigmoidAddress(wiring.Component):
    """sigmoid_address of rshift_round_coarse(x, s) as the pipe computes it, the coarse step
    combinational (in the pipe a register sits between them)."""
    x: In(signed(32))
    s: In(signed(8))
    addr: Out(10)

    def elaborate(self, platform):
        m = Module()
        c = rshift_round_coarse(self.x, self.s, max_left=SIG_STEP_BITS)
        m.d.comb += self.addr.eq(sigmoid_address(c))
        return m


def _golden_address(x, s):
    g = int(nx.rshift_round(torch.tensor([x], dtype=torch.int64), s))
    return min(max(g + 512, 0), 1023)


def _addresses(cases):
    cases = [(max(-2 ** 31, min(2 ** 31 - 1, x)), s) for x, s in cases]
    dut = _SigmoidAddress()
    return comb_outputs(dut, (dut.x, dut.s), dut.addr, cases), [_golden_address(x, s) for x, s in cases]


def test_sigmoid_address_at_the_clamp_edges():
    """The ROM address (compares beside the rounding, no +512 adder) is golden's clamp(g + 512,
    0, 1023) of g = rshift_round(x, s) at both ends, for every shift the unit uses (s = frac - 6,
    frac 0..63): g = -514..-511 and 510..513, x = g << s and the x up to 2 away (a right shift),
    or x = g >> -s and its neighbours (a left shift)."""
    cases = [((g << s) + d if s > 0 else (g >> -s) + d, s) for s in range(-SIG_STEP_BITS, 58)
             for g in (-514, -513, -512, -511, 510, 511, 512, 513) for d in range(-2, 3)]
    got, want = _addresses(cases)
    assert got == want


@given(cases=st.lists(st.tuples(I32, st.integers(-SIG_STEP_BITS, 57)), min_size=1, max_size=64))
@settings(max_examples=30, deadline=None)
def test_sigmoid_address_matches_golden_clamp(cases):
    """As above, anywhere in 32 bits."""
    got, want = _addresses(cases)
    assert got == want
