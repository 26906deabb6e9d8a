"""Address walker: the engine movers' three nested counters producing SP word and EM row addresses."""
from amaranth import Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["AddressWalker", "WALK"]

#: a walk: ``for o < no: for i < ni: for j < nj``: word ``base + o*so + i*si + j``, row ``ebase + o*eo + i*ei``
WALK = data.StructLayout({"base": 20, "so": 20, "si": 20, "no": 16, "ni": 16, "nj": 16,
                          "ebase": 12, "eo": 12, "ei": 12})


class AddressWalker(wiring.Component):
    """``start`` (one cycle) loads the walk ``cfg`` and makes the walker ``active``; each cycle
    with ``step`` then advances it by one word. ``addr`` is the current word address, ``eaddr``
    the current row's EM address, ``last_j``/``last_all`` mark the row's / the walk's last word;
    the step from the last word ends the walk (``active`` low). ``start`` wins over ``step``.
    Counts of 0 are not checked (the engine's instruction check refuses them).

    ``pairs=True``: a ``pair`` input, taken with ``start``, makes that walk step two words at a
    time (``addr`` is the pair's first word, ``addr + 1`` its second; ``nj`` must be even: the
    two-word movers' rows); ``last_j`` / ``last_all`` mark the row's / walk's last pair."""

    def __init__(self, pairs=False):
        self.pairs = pairs
        super().__init__({"start": In(1), "cfg": In(WALK), "step": In(1),
                          **({"pair": In(1)} if pairs else {}),
                          "active": Out(1), "addr": Out(25), "eaddr": Out(16),
                          "last_j": Out(1), "last_all": Out(1)})

    def elaborate(self, platform):
        m = Module()
        c = Signal(WALK)                 # the walk being made
        o, i, j = Signal(16), Signal(16), Signal(16)
        obase, rbase, eobase, erbase = Signal(24), Signal(24), Signal(16), Signal(16)
        # the last indices, registered at start: the ends are compares of two registers (no
        # subtraction in front of them: the movers' control reads last_j / last_all every cycle)
        nj_m1, ni_m1, no_m1 = Signal(16), Signal(16), Signal(16)
        last_j, last_i, last_o = j == nj_m1, i == ni_m1, o == no_m1
        m.d.comb += [self.addr.eq(rbase + j), self.eaddr.eq(erbase), self.last_j.eq(last_j),
                     self.last_all.eq(last_j & last_i & last_o)]
        cfg = self.cfg
        pair = Signal(name="pair") if self.pairs else None      # this walk's step is two words
        with m.If(self.start):
            m.d.sync += [c.eq(cfg), nj_m1.eq(cfg.nj - 1 - self.pair if self.pairs else cfg.nj - 1),
                         ni_m1.eq(cfg.ni - 1), no_m1.eq(cfg.no - 1),
                         o.eq(0), i.eq(0), j.eq(0), obase.eq(cfg.base), rbase.eq(cfg.base),
                         eobase.eq(cfg.ebase), erbase.eq(cfg.ebase), self.active.eq(1)]
            if self.pairs:
                m.d.sync += pair.eq(self.pair)
        with m.Elif(self.step):
            m.d.sync += j.eq(j + 1 + pair if self.pairs else j + 1)
            with m.If(last_j):
                m.d.sync += [j.eq(0), i.eq(i + 1), rbase.eq(rbase + c.si), erbase.eq(erbase + c.ei)]
                with m.If(last_i):
                    m.d.sync += [i.eq(0), o.eq(o + 1), obase.eq(obase + c.so), rbase.eq(obase + c.so),
                                 eobase.eq(eobase + c.eo), erbase.eq(eobase + c.eo)]
                    with m.If(last_o):
                        m.d.sync += self.active.eq(0)
        return m
