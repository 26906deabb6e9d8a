"""Value unpacker: one 32-bit word -> its 32/bits narrow values, sign-extended (SPW unpack)."""
from amaranth import Module, Signal, Mux, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["ValueUnpacker"]


class ValueUnpacker(wiring.Component):
    """``bits`` 8 (4 values per word) or 4 (8 values; any other value counts as 8): the ``packed``
    word is offered as ``value`` j = bits ``bits*j ..`` sign-extended, low value first; the word is
    consumed with its last value. No register stage (``value.valid`` is ``packed.valid``).
    ``clear`` restarts at value 0."""

    def __init__(self):
        super().__init__({
            "packed": In(stream.Signature(data.StructLayout({"data": 32}))),
            "value": Out(stream.Signature(data.StructLayout({"data": signed(32)}))),
            "bits": In(4), "clear": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        k = Signal(3)
        last_k = Mux(self.bits == 4, k == 7, k == 3)
        word, v = self.packed.payload.data, self.value.payload.data
        take = self.value.valid & self.value.ready
        m.d.comb += [self.value.valid.eq(self.packed.valid), self.packed.ready.eq(take & last_k)]
        with m.If(self.bits == 4):
            with m.Switch(k):
                for j in range(8):
                    with m.Case(j):
                        m.d.comb += v.eq(word[4 * j:4 * j + 4].as_signed())
        with m.Else():
            with m.Switch(k[:2]):
                for j in range(4):
                    with m.Case(j):
                        m.d.comb += v.eq(word[8 * j:8 * j + 8].as_signed())
        with m.If(take):
            m.d.sync += k.eq(Mux(last_k, 0, k + 1))
        with m.If(self.clear):
            m.d.sync += k.eq(0)
        return m
