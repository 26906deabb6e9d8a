"""RMSNorm row scale: from a row's pre-shifted elements, the reciprocal RMS and the row exponent."""
from amaranth import Module, Signal, Mux, signed
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.numerics import FR, RMS_HP_BITS, RSQRT_LUT, RSQRT_MANT_BITS
from .fixed import bitlen, abs_u, rshift_round_coarse, rshift_round_fine
from .restoring_divider import RestoringDivider

__all__ = ["RmsNormScale", "PIPE_EXTRA"]

#: cycles a row takes longer with ``pipelined=True``
PIPE_EXTRA = 10


class RmsNormScale(wiring.Component):
    """The statistics half of golden ``rmsnorm_quant`` for one row of ``len`` elements.

    ``start`` (one cycle, when idle) begins a row; from the next cycle ``reading`` is high and the
    caller presents one element ``hp`` = rshift_round(h, sh) per cycle (no stalls; ``sh`` =
    max(0, bitlen(max|h|) - 15) as golden ``rmsnorm_quant``'s, or any larger: |hp| <= 2**15, which
    the pipelined unit holds in :data:`RMS_HP_BITS` bits), ``last`` with
    the row's final one. Then (48-cycle divider, then 3 cycles) ``done`` is high for one cycle with
    ``e`` = the row exponent (bits-1 + FR - bitlen(max|hp| * r), 0 when that product is 0); ``r``
    = RSQRT_LUT[ms >> 2k] >> k for ms = max(1, sum(hp**2) // len + (eps_q >> 2*sh)) holds from
    then until the next row's ``r``. ``len``, ``eps_q``, ``sh`` and ``bits`` stay constant
    meanwhile. A row takes ``len + 51`` cycles from ``start`` to ``done``.

    ``pipelined=True``: the same results with every step cut for timing; the caller presents the
    raw element ``x`` (int32) instead of ``hp``, which the unit rounds itself, hp =
    rshift_round(x, sh), in two steps (the element's shift by whole bytes, then the rest of the
    shift with the rounding, and its square registered before the sum, the eps term shifted during
    the division, the bit length of the mean square, the RSQRT index, ROM read and shift, and the
    exponent's product and difference each a cycle of their own, the two bit lengths two cycles
    each): a row takes ``len + 51 + PIPE_EXTRA`` cycles.

    ``pairs=True`` (with ``pipelined``): ``pair`` (constant during a row) makes each reading cycle
    take two elements, ``x`` and ``x1`` (``last`` with the pair holding the row's last), their
    squares summed in a stage of their own: ``len / 2 + 52 + PIPE_EXTRA`` cycles a row (one
    element a cycle without ``pair``: ``len + 52 + PIPE_EXTRA``). The results are the same."""

    def __init__(self, pipelined=False, pairs=False):
        if pairs and not pipelined:
            self._MustUse__silence = True
            raise ValueError("RmsNormScale(pairs=True) needs pipelined=True")
        self.pipelined, self.pairs = pipelined, pairs
        super().__init__({
            "start": In(1), **({"x": In(signed(32))} if pipelined else {"hp": In(signed(33))}), "last": In(1),
            **({"x1": In(signed(32)), "pair": In(1)} if pairs else {}),
            "len": In(16), "eps_q": In(32), "sh": In(5), "bits": In(4),
            "reading": Out(1), "done": Out(1), "r": Out(FR + 1), "e": Out(signed(8)),
        })

    def elaborate(self, platform):
        if self.pipelined:
            return self._elaborate_pipelined()
        m = Module()
        m.submodules.rsq = rsq = Memory(shape=FR + 1, depth=2 ** RSQRT_MANT_BITS, init=list(RSQRT_LUT))
        rsq_rp = rsq.read_port(domain="comb")
        m.submodules.div = div = RestoringDivider(48, 16)
        hp = self.hp
        ss = Signal(48)          # sum hp**2
        mxh = Signal(17)         # max |hp|
        ms = Signal(48)          # mean square (+ eps), at least 1
        r = self.r
        m.d.comb += div.divisor.eq(self.len)
        with m.FSM(name="rms"):
            self._idle(m, ss, mxh)
            with m.State("SS"):
                m.d.comb += self.reading.eq(1)
                m.d.sync += ss.eq(ss + hp * hp)
                ah = abs_u(hp)
                with m.If(ah > mxh):
                    m.d.sync += mxh.eq(ah)
                with m.If(self.last):
                    m.d.comb += [div.load.eq(1), div.dividend.eq(ss + hp * hp)]
                    m.next = "DIV"
            with m.State("DIV"):          # ss // len
                m.d.comb += div.run.eq(1)
                with m.If(div.last):
                    m.next = "MS"
            with m.State("MS"):
                msv = div.quotient + (self.eps_q >> (self.sh << 1))
                m.d.sync += ms.eq(Mux(msv == 0, 1, msv))
                m.next = "RSQ"
            with m.State("RSQ"):
                blm = bitlen(ms)
                kk = Mux(blm > RSQRT_MANT_BITS - 1, (blm - (RSQRT_MANT_BITS - 1))[:6] >> 1, 0)[:5]
                m.d.comb += rsq_rp.addr.eq(ms >> (kk << 1))
                m.d.sync += r.eq(rsq_rp.data >> kk)
                m.next = "EXP"
            with m.State("EXP"):
                mu = Signal(FR + 18)
                m.d.comb += [mu.eq(mxh * r), self.done.eq(1),
                             self.e.eq(Mux(mu == 0, 0, (self.bits - 1) + FR - bitlen(mu)))]
                m.next = "IDLE"
        return m

    def _elaborate_pipelined(self):
        m = Module()
        assert RSQRT_LUT[0] == RSQRT_LUT[1], "the MS state's unclamped ms needs RSQRT_LUT[0] == [1]"
        m.submodules.rsq = rsq = Memory(shape=FR + 1, depth=2 ** RSQRT_MANT_BITS, init=list(RSQRT_LUT))
        rsq_rp = rsq.read_port(domain="sync")
        m.submodules.div = div = RestoringDivider(48, 16)
        # the raw element's shift by whole bytes (rshift_round_coarse), registered; then the rest
        # and the rounding (a variable shift and the rounding's adder in one cycle were the whole
        # engine's slowest path)
        x0, lo0, pos0, v0, last0 = Signal(signed(32)), Signal(3), Signal(), Signal(), Signal()
        # the element rounded, registered: |hp| <= 2**15 (the contract's sh), 17 bits, so its
        # square is one DSP48E2 with no adder of partial products behind it (timing)
        hp1, v1, last1 = Signal(signed(RMS_HP_BITS)), Signal(), Signal()
        sq2, v2, last2 = Signal(66), Signal(), Signal()              # its square, registered
        ss = Signal(48)          # sum hp**2
        mxh = Signal(17)         # max |hp|
        ms = Signal(48)          # mean square (+ eps), at least 1
        eps = Signal(48)         # eps_q >> 2*sh
        kk = Signal(5)
        blm, blu = Signal(6), Signal(6)     # bitlen(ms), bitlen(mu)
        mu = Signal(FR + 18)
        r = self.r
        m.d.comb += div.divisor.eq(self.len)
        c0 = rshift_round_coarse(self.x, self.sh)
        m.d.sync += [x0.eq(c0["x"]), lo0.eq(c0["lo"]), pos0.eq(c0["pos"]), v0.eq(self.reading),
                     last0.eq(self.reading & self.last),
                     hp1.eq(rshift_round_fine(dict(x=x0, lo=lo0, pos=pos0))), v1.eq(v0), last1.eq(last0),
                     sq2.eq(hp1 * hp1), v2.eq(v1), last2.eq(last1)]
        if self.pairs:
            # the pair's second element (0 without ``pair``) beside the first; max over both, then
            # the two squares' sum each a stage of their own: the sum takes sq3 one cycle later
            x0b, hq1, sq2b = Signal(signed(32)), Signal(signed(RMS_HP_BITS)), Signal(66)
            am2, sq3, v3, last3 = Signal(17), Signal(67), Signal(), Signal()
            ah_a, ah_b = abs_u(hp1), abs_u(hq1)
            m.d.sync += [x0b.eq(rshift_round_coarse(Mux(self.pair, self.x1, 0), self.sh)["x"]),
                         hq1.eq(rshift_round_fine(dict(x=x0b, lo=lo0, pos=pos0))), sq2b.eq(hq1 * hq1),
                         am2.eq(Mux(ah_b > ah_a, ah_b, ah_a)), sq3.eq(sq2 + sq2b), v3.eq(v2), last3.eq(last2)]
            with m.If(v2 & (am2 > mxh)):
                m.d.sync += mxh.eq(am2)
            with m.If(v3):
                m.d.sync += ss.eq(ss + sq3)
            sq_end, last_end = sq3, last3
        else:
            ah = abs_u(hp1)
            with m.If(v1 & (ah > mxh)):
                m.d.sync += mxh.eq(ah)
            with m.If(v2):
                m.d.sync += ss.eq(ss + sq2)
            sq_end, last_end = sq2, last2
        with m.FSM(name="rms"):
            self._idle(m, ss, mxh)
            with m.State("SS"):
                m.d.comb += self.reading.eq(1)
                with m.If(self.last):
                    m.next = "TAIL"
            with m.State("TAIL"):         # the last element's square reaches the sum
                with m.If(last_end):
                    m.d.comb += [div.load.eq(1), div.dividend.eq(ss + sq_end)]
                    m.next = "DIV"
            with m.State("DIV"):          # ss // len
                m.d.comb += div.run.eq(1)
                m.d.sync += eps.eq(self.eps_q >> (self.sh << 1))
                with m.If(div.last):
                    m.next = "MS"
            with m.State("MS"):
                # golden's max(1, quotient + eps) without the clamp: ms = 0 reads the same RSQRT
                # entry as 1 (asserted at the top) and shifts by k = 0 as 1 does; no zero test
                # behind the add
                m.d.sync += ms.eq(div.quotient + eps)
                m.next = "BLM"
            _bitlen_states(m, "BLM", ms, blm, "RSQ")
            with m.State("RSQ"):
                m.d.sync += kk.eq(Mux(blm > RSQRT_MANT_BITS - 1, (blm - (RSQRT_MANT_BITS - 1))[:6] >> 1, 0)[:5])
                m.next = "ROM"
            with m.State("ROM"):
                m.d.comb += rsq_rp.addr.eq(ms >> (kk << 1))
                m.next = "R"
            with m.State("R"):
                m.d.sync += r.eq(rsq_rp.data >> kk)
                m.next = "MU"
            with m.State("MU"):
                m.d.sync += mu.eq(mxh * r)
                m.next = "BLU"
            _bitlen_states(m, "BLU", mu, blu, "EXP")
            with m.State("EXP"):
                m.d.comb += [self.done.eq(1), self.e.eq(Mux(blu == 0, 0, (self.bits - 1) + FR - blu))]
                m.next = "IDLE"
        return m

    def _idle(self, m, ss, mxh):
        """Both FSMs' IDLE state: ``start`` clears the sum and the max and starts a row."""
        with m.State("IDLE"):
            with m.If(self.start):
                m.d.sync += [ss.eq(0), mxh.eq(0)]
                m.next = "SS"


def _bitlen_states(m, name, x, out, then):
    """FSM states ``name``, ``name``2 (then ``then``): ``out`` = bitlen(``x``) in two cycles, the
    bit lengths of both halves and whether the high one is nonzero registered between them (a
    48-bit priority tree in one cycle was the pipelined unit's slowest path)."""
    h = len(x) // 2
    hi_any, bl_hi, bl_lo = Signal(name=f"{name.lower()}_hi_any"), Signal(6, name=f"{name.lower()}_hi"), \
        Signal(6, name=f"{name.lower()}_lo")
    with m.State(name):
        m.d.sync += [hi_any.eq(x[h:].any()), bl_hi.eq(bitlen(x[h:])), bl_lo.eq(bitlen(x[:h]))]
        m.next = name + "2"
    with m.State(name + "2"):
        m.d.sync += out.eq(Mux(hi_any, bl_hi + h, bl_lo))
        m.next = then
