"""Value packer: 32/bits narrow values (the low bits of each word) -> one 32-bit word (EMIT pack)."""
from amaranth import Module, Signal, Mux
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["ValuePacker"]


class ValuePacker(wiring.Component):
    """``bits`` 8 (4 values per word) or 4 (8 values; any other value counts as 8): value j of a
    word is the low ``bits`` bits of the j-th ``word`` taken, at bits ``bits*j`` (low first);
    every 32/bits words one ``packed`` word goes out, ``last`` if its final value's word had
    ``last``. One packed word is held; a word is taken when there is room or the held word leaves
    in the same cycle (``ready`` high drops the held word even without ``valid``). ``clear``
    (wins) empties it and restarts at value 0."""

    def __init__(self):
        super().__init__({
            "word": In(stream.Signature(data.StructLayout({"data": 32, "last": 1}))),
            "packed": Out(stream.Signature(data.StructLayout({"data": 32, "last": 1}))),
            "bits": In(4), "clear": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        k = Signal(3)                        # value slot (last slot: 3 at 8 bits, 7 at 4 bits)
        last_k = Mux(self.bits == 4, k == 7, k == 3)
        acc = Signal(32)                     # word being packed
        acc_n = Signal(32)                   # ... with the current value in slot k
        full = Signal()
        w, p = self.word, self.packed
        take = w.valid & (~full | p.ready)
        m.d.comb += [w.ready.eq(take), p.valid.eq(full), acc_n.eq(acc)]
        with m.If(self.bits == 4):
            with m.Switch(k):
                for j in range(8):
                    with m.Case(j):
                        m.d.comb += acc_n[4 * j:4 * j + 4].eq(w.payload.data[:4])
        with m.Else():
            with m.Switch(k[:2]):
                for j in range(4):
                    with m.Case(j):
                        m.d.comb += acc_n[8 * j:8 * j + 8].eq(w.payload.data[:8])
        with m.If(p.ready):
            m.d.sync += full.eq(0)
        with m.If(take):
            m.d.sync += [acc.eq(acc_n), k.eq(Mux(last_k, 0, k + 1))]
            with m.If(last_k):
                m.d.sync += [p.payload.data.eq(acc_n), p.payload.last.eq(w.payload.last), full.eq(1)]
        with m.If(self.clear):
            m.d.sync += [k.eq(0), full.eq(0), acc.eq(0)]
        return m
