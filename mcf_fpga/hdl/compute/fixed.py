"""Amaranth expression builders for mcf_fpga/golden/numerics.py's integer primitives.

Each builder returns a combinational expression that equals the golden function for every
input in the stated range (the ranges are the hardware's documented limits):

* :func:`rshift_round` — ``golden.numerics.rshift_round`` (round half up; a negative shift is
  a left shift). ``x`` signed, ``s`` signed; right shifts are clamped to ``len(x)`` (exact: any
  larger shift also gives 0 for a value of that width) and left shifts to ``max_left`` (the
  caller saturates afterwards, so a larger shift gives the same saturated result).
  :func:`rshift_round_coarse` / :func:`rshift_round_fine` are the same in two steps, a register
  apart: the shift by whole bytes first, then the rest, the rounding and a left shift.
* :func:`bitlen` — ``golden.numerics.bitlen`` of an unsigned value (priority encoder);
  :func:`bitlen_of_range` — that of a row's max|a| from its maximum and minimum, in one step or,
  :func:`bitlen_of_range_parts` then :func:`bitlen_plus`, in two a register apart.
* :func:`sat` — ``golden.numerics.sat`` to a signed width.
* :func:`abs_u` — |x| of a signed value as unsigned (one bit narrower is not enough for -2**(w-1),
  so the width stays ``len(x)``).
* :func:`rshift_round_lanes` — ``rshift_round(p * v, s)`` for many lanes ``v`` sharing ``p`` and
  ``s`` (the attention unit's p.v), without a barrel shifter per lane.
"""
from amaranth import Mux, Const, Array, Cat, signed, unsigned
from amaranth.hdl import Value

__all__ = ["rshift_round", "rshift_round_coarse", "rshift_round_fine", "rshift_round_fine_bounds", "rshift_round_fine_sat", "rshift_round_lanes",
           "rshift_round_lanes_shift", "rshift_round_lanes_lane", "rshift_round_lanes_select", "bitlen", "bitlen_of_range", "bitlen_of_range_parts", "bitlen_plus", "msb_index", "sat", "abs_u", "clamp"]


def _bits_for(n: int) -> int:
    return max(1, int(n).bit_length())


def clamp(x, lo: int, hi: int):
    """Clamp a signed expression to [lo, hi]."""
    x = Value.cast(x)
    return Mux(x < lo, lo, Mux(x > hi, hi, x))


def _right_shift(s, w: int):
    """``sr1``: one less than the right shift ``s`` clamped to [1, w] (the rounding's first shift)."""
    return (Mux(s > w, w, Mux(s < 1, 1, s)) - 1)[:_bits_for(w)]


def _left_shift(s, max_left: int):
    """The left shift of a negative ``s``, clamped to ``max_left`` (0 for ``s >= 0``)."""
    return Mux(-s > max_left, max_left, Mux(s > 0, 0, -s))[:_bits_for(max_left)]


def rshift_round(x, s, *, max_left: int = 0):
    """``rshift_round(x, s)`` as an expression (see module docstring)."""
    x = Value.cast(x)
    s = Value.cast(s)
    xs = x
    # floor((x + 2**(s-1)) / 2**s) == (floor(x / 2**(s-1)) + 1) >> 1: no decoded 2**(s-1), and the
    # variable shift comes before the (then narrower) increment
    right = ((xs >> _right_shift(s, len(x))) + 1) >> 1
    if max_left > 0:
        left = xs << _left_shift(s, max_left)
        return Mux(s > 0, right, Mux(s < 0, left, xs))
    return Mux(s > 0, right, xs)      # caller guarantees s >= 0


def rshift_round_coarse(x, s, *, max_left: int = 0) -> dict:
    """The first step of ``rshift_round(x, s, max_left=max_left)``: ``{"x": x >> 8*hi, "lo",
    "pos", "neg", "sl"}`` where the right shift ``sr1 = 8*hi + lo`` (:func:`rshift_round`'s), ``pos`` /
    ``neg`` the sign of ``s`` and ``sl`` the left shift. Register them; :func:`rshift_round_fine`
    finishes: ``x >> sr1 == (x >> 8*hi) >> lo`` (arithmetic), and with ``s <= 0`` the coarse
    shift is 0, so ``x`` passes unchanged for the left shift and for ``s == 0``."""
    x, s = Value.cast(x), Value.cast(s)
    sr1 = _right_shift(s, len(x))
    out = {"x": x >> Cat(Const(0, 3), sr1[3:]), "lo": sr1[:3], "pos": s > 0, "neg": s < 0}
    if max_left > 0:
        out["sl"] = _left_shift(s, max_left)
    return out


def rshift_round_fine(c: dict, max_left: int = 0):
    """The second step (:func:`rshift_round_coarse`): equals ``rshift_round(x, s,
    max_left=max_left)`` of the first step's inputs."""
    x = Value.cast(c["x"])
    right = ((x >> c["lo"]) + 1) >> 1
    if max_left > 0:
        return Mux(c["pos"], right, Mux(c["neg"], x << c["sl"], x))
    return Mux(c["pos"], right, x)


def rshift_round_fine_bounds(c: dict, lo: int, hi: int, max_left: int = 0):
    """``(g, below, above)``: ``g`` = :func:`rshift_round_fine` ``(c, max_left)`` and whether
    ``g < lo`` / ``g > hi``, the compares beside the rounding add, not behind it (carry chains
    side by side). A right shift's g = (t + 1) >> 1 (t = x >> lo-shift) is above ``hi`` exactly
    when t > 2*hi and below ``lo`` when t < 2*lo - 1; a left shift's g = x << sl when
    x > hi >> sl or x < -((-lo) >> sl) (floor and ceiling of the bounds over 2**sl); with no
    shift g = x."""
    x = Value.cast(c["x"])
    t = x >> c["lo"]
    g = rshift_round_fine(c, max_left=max_left)
    below_x, above_x = x < lo, x > hi
    if max_left > 0:
        sl = c["sl"]
        lo_l, hi_l = Const(lo), Const(hi)
        for k in range(1, max_left + 1):
            lo_l, hi_l = Mux(sl == k, -((-lo) >> k), lo_l), Mux(sl == k, hi >> k, hi_l)
        below_x, above_x = Mux(c["neg"], x < lo_l, below_x), Mux(c["neg"], x > hi_l, above_x)
    return g, Mux(c["pos"], t < 2 * lo - 1, below_x), Mux(c["pos"], t > 2 * hi, above_x)


def rshift_round_fine_sat(c: dict, bits: int = 32):
    """``sat(rshift_round_fine(c), bits)`` for a coarse step without a left shift, the saturation
    compares beside the rounding add (:func:`rshift_round_fine_bounds`)."""
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    g, below, above = rshift_round_fine_bounds(c, lo, hi)
    return Mux(above, Const(hi, signed(bits)), Mux(below, Const(lo, signed(bits)), g[:bits].as_signed()))


def msb_index(x):
    """``(i, nz)``: ``nz`` is ``x != 0`` and ``i`` the index of its highest set bit (0 for 0), of
    the unsigned ``x`` zero-extended to a power-of-two width: a balanced tree of selects with no
    adder in it (each level's index bit is whether its upper half has a set bit)."""
    x = Value.cast(x)
    w = 1 << max(0, (len(x) - 1).bit_length())
    x = Cat(x, Const(0, w - len(x))) if w > len(x) else x

    def tree(v):
        if len(v) == 1:
            return Const(0, 0), v[0]
        h = len(v) // 2
        (il, nl), (ih, nh) = tree(v[:h]), tree(v[h:])
        return Cat(Mux(nh, ih, il), nh), nh | nl
    return tree(x)


def bitlen(x):
    """Number of bits of the unsigned value ``x`` (0 for 0): :func:`msb_index` + 1 (log depth; the
    one adder at the end)."""
    i, nz = msb_index(x)
    return Mux(nz, i + 1, 0)


def bitlen_of_range(hi, lo):
    """``max(bitlen(hi), bitlen(-lo))`` for a row's largest element ``hi >= 0`` and smallest ``lo <= 0``
    (signed, same width w): the bit length of its max|a|, without negating ``lo``. With u = ~lo
    (-lo - 1, free in the LUTs), -lo = u + 1, so bitlen(-lo) = bitlen(u) + (u is 2**k - 1); and
    max(bitlen(hi), bitlen(u) + 1) = bitlen(hi | u) + 1 exactly when u is 2**k - 1 and hi <= u
    (hi has no bit above u's). ``lo == 0`` (its sign bit clear) takes u = 0 and no +1. Returns
    ``w.bit_length()`` bits: :func:`bitlen_of_range_parts` then :func:`bitlen_plus`."""
    v, carry = bitlen_of_range_parts(hi, lo)
    return bitlen_plus(v, carry, len(Value.cast(lo)).bit_length())


def bitlen_of_range_parts(hi, lo):
    """``(v, carry)`` of :func:`bitlen_of_range`: ``v`` = hi | u (w - 1 bits) and ``carry`` the +1,
    so that ``bitlen_of_range(hi, lo)`` = ``bitlen_plus(v, carry, w.bit_length())`` (a pipeline may
    register them in between)."""
    hi, lo = Value.cast(hi), Value.cast(lo)
    w = len(lo)
    neg = lo[w - 1]
    u = Mux(neg, ~lo[:w - 1], 0)                        # -lo - 1 for lo < 0, else 0
    ones = ~(u[1:] & ~u[:-1]).any()                     # u is 2**k - 1 (0...01...1)
    carry = neg & ones & ~(hi[:w - 1] & ~u).any()
    return hi[:w - 1] | u, carry


def bitlen_plus(v, carry, width):
    """bitlen(``v``) + ``carry`` in ``width`` bits (``carry`` with ``v`` = 0: 1)."""
    i, nz = msb_index(v)
    return Mux(nz, i + Cat(~carry, carry), carry)[:width]     # bitlen + carry, one adder


def sat(x, bits: int = 32):
    """Saturate a signed expression to ``bits`` bits (result shape signed(bits))."""
    x = Value.cast(x)
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return Mux(x < lo, Const(lo, signed(bits)), Mux(x > hi, Const(hi, signed(bits)), x[:bits].as_signed()))


def abs_u(x):
    x = Value.cast(x)
    return Mux(x < 0, -x, x)[:len(x)].as_unsigned()


def rshift_round_lanes(p, vs, s, *, p_max: int, max_left: int, width: int, step_bits: int = 3, split: bool = False,
                       lane_bits: int = 0):
    """``[rshift_round(p * v, s, max_left=max_left)[:width] for v in vs]`` (the builder above,
    bit for bit) for an unsigned ``p <= p_max``, signed ``v`` and one signed shift ``s``.

    With K = bitlen(max |p*v|) every right shift s > K gives 0, and for s in [-max_left, K]
    rshift_round(x, s) = (x * 2**sh + 2**(K-1)) >> K, sh = K - s (exact: same floor for s > 0;
    for s <= 0 the low K bits are 0). sh = 2**step_bits * j + lo: the shared operand takes
    ``p << lo`` (one shifter; keep it within the DSP's 27-bit port), and each lane only selects
    one of ceil((K + max_left + 1) / 2**step_bits) fixed bit windows of its product (a small mux
    instead of a variable shift).

    ``split``: per lane the pair ``(f, b)`` with ``f + b`` the rounded value (mod 2**width):
    ``f = (y >> K)[:width]`` and ``b = y[K-1]`` for ``y = p*v * 2**sh``, since (y + 2**(K-1)) >> K
    == (y >> K) + y[K-1]. The round bit can then enter the consumer's adder as its carry-in
    (the attention unit's block accumulators) instead of a rounding adder per lane.

    The same in three steps a register apart (``split`` only): :func:`rshift_round_lanes_shift`
    (``p << lo`` and ``hi``), the lanes' products ``u = ps * v``, :func:`rshift_round_lanes_select`.

    ``lane_bits``: the next ``lane_bits`` bits of ``sh`` above ``lo`` shift each lane's ``v`` instead
    (``v << 2**step_bits * vs``, :func:`rshift_round_lanes_lane`: a DSP's wider operand port takes
    it), so the window select has 2**lane_bits times fewer windows: the attention unit's lanes
    select one of 3 windows (one LUT per bit) instead of 6.
    """
    vs = [Value.cast(v) for v in vs]
    wv = max(len(v) for v in vs)
    st = rshift_round_lanes_shift(p, s, p_max=p_max, wv=wv, max_left=max_left, step_bits=step_bits,
                                  lane_bits=lane_bits)
    ps, hi, K = st["ps"], st["hi"], st["K"]
    if lane_bits:
        vs = [rshift_round_lanes_lane(v, st["vs"], step_bits=step_bits) for v in vs]
        step_bits += lane_bits
    if split:
        return [rshift_round_lanes_select(ps * v, hi, K=K, max_left=max_left, width=width, step_bits=step_bits)
                for v in vs]
    step = 1 << step_bits
    nj = (K + max_left) // step + 1
    r = Array([Const(1 << (K - 1 - step * j) if step * j <= K - 1 else 0, K) for j in range(nj)])[hi]
    return [_lanes_window(ps * v + r, hi, K, nj, step, width) for v in vs]


def rshift_round_lanes_shift(p, s, *, p_max: int, wv: int, max_left: int, step_bits: int = 3,
                             lane_bits: int = 0) -> dict:
    """The first step of :func:`rshift_round_lanes` for lanes ``v`` of ``wv`` bits: ``{"ps": p <<
    lo (0 when s > K), "hi": the window index, "K": K}`` (register ``ps`` and ``hi``); with
    ``lane_bits``, also ``"vs"``: the lanes' shift (:func:`rshift_round_lanes_lane`), and ``hi``
    counts windows of 2**(step_bits + lane_bits) bits."""
    p = Value.cast(p)
    s = Value.cast(s)
    K = (p_max << (wv - 1)).bit_length()
    sc = Mux(s > K, K, Mux(s < -max_left, -max_left, s))
    sh = (K - sc)[:_bits_for(K + max_left)]
    lo = sh[:step_bits]
    out = {"ps": Mux(s > K, 0, p << lo), "hi": sh[step_bits + lane_bits:], "K": K}
    if lane_bits:
        out["vs"] = sh[step_bits:step_bits + lane_bits]
    return out


def rshift_round_lanes_lane(v, vs, *, step_bits: int = 3):
    """A lane's ``v << 2**step_bits * vs`` (signed): the share of the shift a lane takes before its
    product with ``rshift_round_lanes_shift``'s ``ps`` (``lane_bits``)."""
    v = Value.cast(v)
    n = 1 << len(Value.cast(vs))
    return Array([(v << ((1 << step_bits) * k)).as_signed() for k in range(n)])[vs]


def rshift_round_lanes_select(u, hi, *, K: int, max_left: int, width: int, step_bits: int = 3):
    """The last step of :func:`rshift_round_lanes` (``split``) for one lane's product ``u = ps * v``:
    ``(f, b)``, the floor and the round bit."""
    u = Value.cast(u)
    step = 1 << step_bits
    nj = (K + max_left) // step + 1
    return (_lanes_window(u, hi, K, nj, step, width),
            Array([u[K - 1 - step * j] if step * j <= K - 1 else Const(0, 1) for j in range(nj)])[hi])


def _lanes_window(u, hi, K, nj, step, width):
    """(u * 2**(step*hi)) >> K, as a select of fixed bit windows."""
    return Array([((u << (step * j)) >> K)[:width].as_signed() for j in range(nj)])[hi]
