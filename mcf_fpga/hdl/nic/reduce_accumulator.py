"""ReduceAccumulator: the reduce pool's accumulators, combined word by word as words arrive.

Contract
--------
* Memory of ``reduce_contexts << wbits`` words (``wbits`` address bits per context), with a
  one-cycle read port (``rd_en``, ``rd_addr`` -> ``rd_data`` the next cycle, held while
  ``rd_en`` is low).
* ``upd`` (a beat of a contribution, in the cycle it is accepted): when ``upd_store`` its word
  ``upd_data`` goes to ``upd_addr`` -- as it is if ``upd_first``, else combined with the
  stored word by :func:`combine_words` (``upd_sum``: add, else signed max; ``upd_wide``:
  one 64-bit lane, else two 32-bit lanes). The parent reads ``upd_addr`` in that same cycle
  (``rd_en``); the write lands one cycle later (read-modify-write, one word per cycle), so
  updates in consecutive cycles go to different words (the engine's beats do).
"""
from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["ReduceAccumulator", "combine_words"]


def combine_words(acc, x, is_sum, wide):
    """One 64-bit word of a SUM / MAX: per lane wrapping add (``is_sum``) or signed max, in one
    64-bit lane (``wide``: PARTIAL_STATE) or two 32-bit lanes (golden.nic.reduce_payloads)."""
    sum64 = (acc + x)[:64]
    max64 = Mux(acc.as_signed() > x.as_signed(), acc, x)
    lanes = []
    for ln in range(2):
        a_l, x_l = acc[32 * ln:32 * ln + 32], x[32 * ln:32 * ln + 32]
        lanes.append(Mux(is_sum, (a_l + x_l)[:32], Mux(a_l.as_signed() > x_l.as_signed(), a_l, x_l)))
    return Mux(wide, Mux(is_sum, sum64, max64), Cat(*lanes))


class ReduceAccumulator(wiring.Component):
    """See module docstring. ``contexts``: reduce-pool contexts; ``wbits``: word-index bits;
    ``data_width``: 64."""

    def __init__(self, contexts: int, wbits: int, data_width: int = 64):
        self.depth, self.data_width = contexts << wbits, data_width
        aw = max(0, (self.depth - 1).bit_length())
        super().__init__({
            "rd_en": In(1), "rd_addr": In(aw), "rd_data": Out(data_width),
            "upd": In(1), "upd_store": In(1), "upd_first": In(1), "upd_sum": In(1), "upd_wide": In(1),
            "upd_addr": In(aw), "upd_data": In(data_width),
        })

    def elaborate(self, platform):
        m = Module()
        dw = self.data_width
        m.submodules.acc = mem = memory.Memory(shape=dw, depth=self.depth, init=[])
        wp, rp = mem.write_port(), mem.read_port()
        m.d.comb += [rp.en.eq(self.rd_en), rp.addr.eq(self.rd_addr), self.rd_data.eq(rp.data)]
        p_v, p_first, p_sum, p_wide = Signal(), Signal(), Signal(), Signal()
        p_addr = Signal(len(wp.addr))
        p_data = Signal(dw)
        m.d.sync += p_v.eq(0)
        with m.If(self.upd):
            m.d.sync += [p_v.eq(self.upd_store), p_first.eq(self.upd_first), p_sum.eq(self.upd_sum),
                         p_wide.eq(self.upd_wide), p_addr.eq(self.upd_addr), p_data.eq(self.upd_data)]
        m.d.comb += [wp.addr.eq(p_addr), wp.en.eq(p_v),
                     wp.data.eq(Mux(p_first, p_data, combine_words(rp.data, p_data, p_sum, p_wide)))]
        return m
