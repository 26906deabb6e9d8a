"""mcf_fpga/hdl/compute/fixed.py builders vs golden numerics: rshift_round_lanes (shared p and shift, one
bit-window select per lane; also its split form, floor + round bit, and with part of the shift on the lanes) against golden rshift_round per lane, exhaustively on a small shape
and on random / edge values at the attention unit's shape (p <= 2**15, int8 v, max_left 24, 48 bits);
bitlen_of_range (the bit length of a row's max|a| from its max and min) against Python's bit_length."""
from amaranth import Module, Signal, signed, unsigned
from amaranth.sim import Simulator
from hypothesis import given, strategies as st

from mcf_fpga.golden import numerics as nx
from mcf_fpga.hdl.compute.fixed import rshift_round_lanes, bitlen_of_range
from mcf_fpga.sim.kit import comb_outputs


def ref(p, v, s, max_left, width):
    """golden rshift_round with the builders' left-shift clamp, wrapped to ``width`` signed bits."""
    y = int(nx.rshift_round(p * v, max(s, -max_left)))
    y &= (1 << width) - 1
    return y - (1 << width) if y >> (width - 1) else y


def check(p_max, wv, max_left, width, cases, step_bits=3, lane_bits=0):
    """cases: [(p, s, [v per lane])] all with the same lane count; every output compared."""
    n = len(cases[0][2])
    m = Module()
    p = Signal(unsigned(p_max.bit_length()))
    s = Signal(signed(9))
    vs = [Signal(signed(wv), name=f"v{i}") for i in range(n)]
    outs = [Signal(signed(width), name=f"o{i}") for i in range(n)]
    m.d.comb += [o.eq(e) for o, e in zip(outs, rshift_round_lanes(p, vs, s, p_max=p_max, max_left=max_left,
                                                                   width=width, step_bits=step_bits,
                                                                   lane_bits=lane_bits))]
    # the split form: floor + round bit (the attention unit adds the bit as a carry-in)
    souts = [Signal(signed(width), name=f"so{i}") for i in range(n)]
    m.d.comb += [o.eq(f + b) for o, (f, b) in zip(souts, rshift_round_lanes(
        p, vs, s, p_max=p_max, max_left=max_left, width=width, step_bits=step_bits, split=True,
        lane_bits=lane_bits))]
    bad = []

    async def tb(ctx):
        for pv, sv, vv in cases:
            ctx.set(p, pv)
            ctx.set(s, sv)
            for sig, x in zip(vs, vv):
                ctx.set(sig, x)
            got = [ctx.get(o) for o in outs]
            split = [ctx.get(o) for o in souts]
            exp = [ref(pv, x, sv, max_left, width) for x in vv]
            if got != exp or split != exp:
                bad.append((pv, sv, vv, got, split, exp))
    sim = Simulator(m)
    sim.add_testbench(tb)
    sim.run()
    assert not bad, bad[:3]


def test_exhaustive_small():
    """Every p in [0, 5], v in int4, s in [-6, 10] (K = 6 here; right shifts past K give 0)."""
    vs = list(range(-8, 8))
    check(5, 4, 3, 10, [(p, s, vs) for p in range(6) for s in range(-6, 11)], step_bits=1)
    check(5, 4, 3, 10, [(p, s, vs) for p in range(6) for s in range(-6, 11)], step_bits=2)
    # part of the shift taken by the lanes (v << 2 * vs, then windows of 4 bits)
    check(5, 4, 3, 10, [(p, s, vs) for p in range(6) for s in range(-6, 11)], step_bits=1, lane_bits=1)
    check(5, 4, 3, 10, [(p, s, vs) for p in range(6) for s in range(-6, 11)], step_bits=1, lane_bits=2)


@given(st.lists(st.tuples(st.one_of(st.integers(0, 2 ** 15), st.sampled_from([0, 1, 2 ** 15, 2 ** 15 - 1])),
                          st.integers(-40, 40),
                          st.lists(st.one_of(st.integers(-128, 127), st.sampled_from([-128, 127, -1, 0, 1])),
                                   min_size=8, max_size=8)),
                min_size=1, max_size=40))
def test_attention_shape(cases):
    """The attention unit's p.v: p <= 2**15 (EXP2 ROM), int8 v, s = ev - 1, max_left 24, 48 bits;
    also with the shift's bit 3 taken by the lanes (the pipelined unit's form)."""
    check(2 ** 15, 8, 24, 48, cases)
    check(2 ** 15, 8, 24, 48, cases, lane_bits=1)


def test_attention_every_shift():
    """Every shift in [-130, 127] at the extreme products."""
    vs = [-128, 127, -1, 1, 0, -77, 55, 3]
    cases = [(p, s, vs) for p in (2 ** 15, 2 ** 15 - 1, 12345, 1) for s in range(-130, 128)]
    check(2 ** 15, 8, 24, 48, cases)
    check(2 ** 15, 8, 24, 48, cases, lane_bits=1)


def test_rshift_round_exhaustive():
    """rshift_round builder: every 7-bit x and every shift in [-9, 12] (right shifts past the width,
    left shifts past max_left=4 clamped), and max_left=0 (s >= 0)."""
    from mcf_fpga.hdl.compute.fixed import rshift_round
    m = Module()
    x = Signal(signed(7))
    s = Signal(signed(6))
    o4 = Signal(signed(16))
    o0 = Signal(signed(16))
    m.d.comb += [o4.eq(rshift_round(x, s, max_left=4)), o0.eq(rshift_round(x, s))]
    bad = []

    async def tb(ctx):
        for xv in range(-64, 64):
            for sv in range(-9, 13):
                ctx.set(x, xv)
                ctx.set(s, sv)
                e4 = int(nx.rshift_round(xv, max(sv, -4)))
                if ctx.get(o4) != e4 or (sv >= 0 and ctx.get(o0) != int(nx.rshift_round(xv, sv))):
                    bad.append((xv, sv, ctx.get(o4), ctx.get(o0), e4))
    sim = Simulator(m)
    sim.add_testbench(tb)
    sim.run()
    assert not bad, bad[:5]


def test_rshift_round_in_two_steps():
    """rshift_round_coarse then rshift_round_fine (the GEMM requantizer's pipelined form) equal
    golden rshift_round: 20-bit x (the coarse shift by whole bytes reaches 16), every shift in
    [-12, 24] (past the width; left shifts past max_left=8 clamped), and max_left=0 (s >= 0)."""
    import random
    from mcf_fpga.hdl.compute.fixed import rshift_round_coarse, rshift_round_fine
    rng = random.Random(7)
    xs = [-2 ** 19, 2 ** 19 - 1, -1, 0, 1, 255, -256, 2 ** 15, -2 ** 15 - 1] + \
        [rng.randint(-2 ** 19, 2 ** 19 - 1) for _ in range(60)]
    m = Module()
    x = Signal(signed(20))
    s = Signal(signed(6))
    o8 = Signal(signed(40))
    o0 = Signal(signed(40))
    m.d.comb += [o8.eq(rshift_round_fine(rshift_round_coarse(x, s, max_left=8), max_left=8)),
                 o0.eq(rshift_round_fine(rshift_round_coarse(x, s)))]
    bad = []

    async def tb(ctx):
        for xv in xs:
            for sv in range(-12, 25):
                ctx.set(x, xv)
                ctx.set(s, sv)
                e8 = int(nx.rshift_round(xv, max(sv, -8)))
                if ctx.get(o8) != e8 or (sv >= 0 and ctx.get(o0) != int(nx.rshift_round(xv, sv))):
                    bad.append((xv, sv, ctx.get(o8), ctx.get(o0), e8))
    sim = Simulator(m)
    sim.add_testbench(tb)
    sim.run()
    assert not bad, bad[:5]


def _range_bitlens(w, cases):
    """bitlen_of_range on signed(w) signals for each (hi, lo) in ``cases``; returns the outputs."""
    m = Module()
    hi, lo = Signal(signed(w)), Signal(signed(w))
    o = Signal(8)
    m.d.comb += o.eq(bitlen_of_range(hi, lo))
    return comb_outputs(m, (hi, lo), o, cases)


def test_bitlen_of_range_exhaustive_small():
    """Every (hi >= 0, lo <= 0) of signed(6): max(hi, -lo).bit_length()."""
    cases = [(h, l) for h in range(32) for l in range(-32, 1)]
    assert _range_bitlens(6, cases) == [max(h, -l).bit_length() for h, l in cases]


_POW = st.integers(0, 31).map(lambda k: 2 ** k)


@given(st.lists(st.tuples(st.integers(0, 2 ** 31 - 1) | _POW.map(lambda p: min(p, 2 ** 31 - 1)) | _POW.map(lambda p: p - 1),
                          st.integers(-2 ** 31, 0) | _POW.map(lambda p: -p) | _POW.map(lambda p: 1 - p)),
                min_size=1, max_size=40))
def test_bitlen_of_range_32_bits(cases):
    """The vector unit's width (32), random and edge rows: lo = -2**k - the +1 case - included."""
    assert _range_bitlens(32, cases) == [max(h, -l).bit_length() for h, l in cases]


def _fine_sat(w, bits, cases):
    """rshift_round_fine_sat(rshift_round_coarse(x, s), bits) on signed(w) x for each (x, s)."""
    from mcf_fpga.hdl.compute.fixed import rshift_round_coarse, rshift_round_fine_sat
    m = Module()
    x, s = Signal(signed(w)), Signal(signed(8))
    o = Signal(signed(bits))
    m.d.comb += o.eq(rshift_round_fine_sat(rshift_round_coarse(x, s), bits))
    return comb_outputs(m, (x, s), o, cases)


def _sat_ref(xv, sv, bits):
    """sat(rshift_round(x, s), bits) on Python integers (golden's int64 tensors cannot hold the
    72-bit products); golden rshift_round's rounding: half up, (x + 2**(s-1)) >> s."""
    r = (xv + (1 << (sv - 1))) >> sv if sv > 0 else xv
    assert abs(xv) >= 2 ** 60 or sv >= 60 or r == int(nx.rshift_round(xv, sv))    # where int64 holds it
    return max(-2 ** (bits - 1), min(2 ** (bits - 1) - 1, r))


def test_rshift_round_fine_sat_exhaustive_small():
    """The saturating fine step (its compares beside the rounding add) equals golden
    sat(rshift_round(x, s), 6) for every 10-bit x and every shift 0..12 (past the width)."""
    cases = [(xv, sv) for xv in range(-512, 512) for sv in range(13)]
    assert _fine_sat(10, 6, cases) == [_sat_ref(xv, sv, 6) for xv, sv in cases]


@given(st.lists(st.one_of(
    st.tuples(st.integers(-2 ** 71, 2 ** 71 - 1), st.integers(0, 72)),
    st.builds(lambda sv, e, d: (((e << sv) + d), sv), st.integers(0, 39),
              st.sampled_from([-2 ** 31 - 1, -2 ** 31, 2 ** 31 - 1, 2 ** 31]), st.integers(-3, 3))),
    min_size=1, max_size=64))
def test_rshift_round_fine_sat_32_bits(cases):
    """As above at the vector unit's SWIGLU output (72-bit products, sat to 32 bits), at random
    and around the bounds (x = bound << s and its neighbours)."""
    cases = [(max(-2 ** 71, min(2 ** 71 - 1, xv)), sv) for xv, sv in cases]
    assert _fine_sat(72, 32, cases) == [_sat_ref(xv, sv, 32) for xv, sv in cases]


def test_bitlen_and_msb_index_exhaustive():
    """bitlen (msb_index + 1, no adder in its tree) equals Python's bit_length for every value of
    widths 1..11 (non-powers of two padded), and msb_index's flag is x != 0."""
    from mcf_fpga.hdl.compute.fixed import bitlen, msb_index
    for w in range(1, 12):
        m = Module()
        x = Signal(w)
        o, nz = Signal(8), Signal()
        m.d.comb += [o.eq(bitlen(x)), nz.eq(msb_index(x)[1])]
        got = comb_outputs(m, (x,), (o, nz), [(v,) for v in range(1 << w)])
        assert got == [(v.bit_length(), int(v != 0)) for v in range(1 << w)], w
