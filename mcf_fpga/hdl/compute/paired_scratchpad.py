"""Paired scratchpad: the engine's int32 word memory in rows of two words, a pair per port per cycle."""
from amaranth import Module, Signal, Cat, Mux, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

__all__ = ["PairedScratchpad"]


class PairedScratchpad(wiring.Component):
    """``depth`` int32 words (even) as ``depth / 2`` rows of 64 bits: row ``r`` holds words ``2r``
    (low half) and ``2r + 1``, so an even-aligned pair is one row. One memory with a write port of
    32-bit granularity and two read ports: Yosys maps it to as many URAM288 as the one-word memory
    of the same depth (its 72-bit rows held two words already). Attributes ``attrs`` go to the
    memory (e.g. URAM).

    * Read ports ``ra``, ``rb`` (synchronous, as ``lib.memory`` read ports): ``addr`` this cycle,
      the next ``data`` = word ``addr`` and, for an even ``addr``, ``data1`` = word ``addr + 1``
      (for an odd ``addr`` ``data1`` is undefined).
    * Write port ``w``: with ``en``, word ``addr`` <- ``data``; with ``pair`` and an even ``addr``,
      word ``addr + 1`` <- ``data1`` as well (``pair`` at an odd ``addr`` writes word ``addr`` only).
      A read of a word written in the same cycle returns its old value."""

    def __init__(self, depth, attrs=None):
        if depth < 2 or depth % 2:
            self._MustUse__silence = True      # a refused memory is not an unused one
            raise ValueError(f"depth={depth} must be even and at least 2 (rows of two words)")
        self.depth, self.attrs = depth, attrs or {}
        self.aw = (depth - 1).bit_length()
        rd = {"addr": In(self.aw), "data": Out(signed(32)), "data1": Out(signed(32))}
        super().__init__({
            "ra": Out(wiring.Signature(rd)), "rb": Out(wiring.Signature(rd)),
            "w": In(wiring.Signature({"addr": Out(self.aw), "data": Out(signed(32)), "data1": Out(signed(32)),
                                      "en": Out(1), "pair": Out(1)})),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = Memory(shape=unsigned(64), depth=self.depth // 2, init=[], attrs=self.attrs)
        w = self.w
        wp = mem.write_port(granularity=32)
        odd = w.addr[0]
        m.d.comb += [wp.addr.eq(w.addr >> 1),
                     wp.data.eq(Cat(w.data, Mux(odd, w.data, w.data1))),
                     wp.en.eq(Cat(w.en & ~odd, w.en & (odd | w.pair)))]
        for port in (self.ra, self.rb):
            rp = mem.read_port()
            odd_r = Signal()            # word addr was a row's high half (the data's cycle)
            m.d.sync += odd_r.eq(port.addr[0])
            m.d.comb += [rp.addr.eq(port.addr >> 1),
                         port.data.eq(Mux(odd_r, rp.data[32:], rp.data[:32])), port.data1.eq(rp.data[32:])]
        return m
