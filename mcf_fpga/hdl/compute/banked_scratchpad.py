"""Two-bank scratchpad: the engine's int32 word memory with two words per port per cycle."""
from amaranth import Module, Signal, Mux, signed
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

__all__ = ["BankedScratchpad"]


class BankedScratchpad(wiring.Component):
    """``depth`` int32 words (even) in two memories of ``depth / 2``: word ``a`` is word ``a >> 1``
    of bank ``a % 2``, so words ``a`` and ``a + 1`` are in different banks at any ``a`` and a port
    reaches both in one cycle. Attributes ``attrs`` go to both memories (e.g. URAM).

    * Read ports ``ra``, ``rb`` (synchronous, as ``lib.memory`` read ports): ``addr`` this cycle,
      ``data`` = word ``addr`` and ``data1`` = word ``addr + 1`` the next (``addr + 1`` wraps at
      ``depth``).
    * Write port ``w``: with ``en``, word ``addr`` <- ``data``; with ``pair`` as well, word ``addr +
      1`` <- ``data1`` in the same cycle (wrapping at ``depth``). A read of a word written in the
      same cycle returns its old value (as the one-bank memory's ports)."""

    def __init__(self, depth, attrs=None):
        if depth < 2 or depth % 2:
            self._MustUse__silence = True      # a refused memory is not an unused one
            raise ValueError(f"depth={depth} must be even and at least 2 (two banks)")
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
        half = self.depth // 2
        banks = []
        for b in range(2):
            mem = Memory(shape=signed(32), depth=half, init=[], attrs=self.attrs)
            m.submodules[f"bank{b}"] = mem
            banks.append(mem)

        def nxt(a):                     # word a + 1, wrapping at depth
            return Mux(a == self.depth - 1, 0, a + 1)[:self.aw]

        # bank b's row for the words a and a + 1: a >> 1 in bank a % 2, (a + 1) >> 1 in the other
        w = self.w
        a1 = Signal(self.aw, name="w_a1")
        m.d.comb += a1.eq(nxt(w.addr))
        for b, mem in enumerate(banks):
            wp = mem.write_port()
            mine = w.addr[0] == b        # word addr is in this bank (else word addr + 1 is)
            m.d.comb += [wp.addr.eq(Mux(mine, w.addr, a1) >> 1), wp.data.eq(Mux(mine, w.data, w.data1)),
                         wp.en.eq(w.en & (mine | w.pair))]
        for port in (self.ra, self.rb):
            a, p1 = port.addr, Signal(self.aw)
            m.d.comb += p1.eq(nxt(a))
            odd = Signal()              # word addr was in bank 1 (the data's cycle)
            m.d.sync += odd.eq(a[0])
            rps = []
            for b, mem in enumerate(banks):
                rp = mem.read_port()
                m.d.comb += rp.addr.eq(Mux(a[0] == b, a, p1) >> 1)
                rps.append(rp)
            m.d.comb += [port.data.eq(Mux(odd, rps[1].data, rps[0].data)),
                         port.data1.eq(Mux(odd, rps[0].data, rps[1].data))]
        return m
