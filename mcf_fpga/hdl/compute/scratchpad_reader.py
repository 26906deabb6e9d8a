"""Scratchpad reader: an address walker over a memory read port, its words into a small FIFO."""
from amaranth import Module, Signal, Cat, Mux, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from .address_walker import AddressWalker, WALK

__all__ = ["ScratchpadReader"]


class ScratchpadReader(wiring.Component):
    """``start``/``cfg`` begin a walk (:class:`AddressWalker`); the reader drives ``addr``
    (``eaddr``: the row's EM address) of a synchronous read port and, one cycle later, writes
    {word, e, last_row, last} into an 8-entry FIFO read on ``out``: word = ``rdata`` (or, with
    ``em_only``, ``edata`` sign-extended), e = ``edata``, ``last_row``/``last`` the walk's row
    end / end. It issues a read only while the FIFO holds fewer than 5 words (reads in flight
    fit), so back-pressure on ``out`` stalls the walk and loses nothing. ``drained``: the walk is
    over and every word has left the FIFO.

    ``pairs=True`` (a :class:`PairedScratchpad` port): a ``pair`` input, taken with ``start``, makes
    the walk read two words a cycle (:class:`AddressWalker` ``pairs``: ``nj`` even, every address of
    the walk even): ``addr`` is the pair's first word, ``rdata1`` (the port's word ``addr + 1``) its second, and a beat carries
    both (``data``, ``data1``; ``last_row`` / ``last`` on the row's / walk's last pair). Without
    ``pair``, ``data1`` is the word after ``data`` and unused."""

    def __init__(self, pairs=False):
        self.pairs = pairs
        word1 = {"data1": signed(32)} if pairs else {}
        super().__init__({
            "start": In(1), "cfg": In(WALK), "addr": Out(25), "eaddr": Out(16),
            **({"pair": In(1), "rdata1": In(signed(32))} if pairs else {}),
            "rdata": In(signed(32)), "edata": In(8), "em_only": In(1),
            "out": Out(stream.Signature(data.StructLayout({"data": signed(32), "e": signed(8),
                                                           "last_row": 1, "last": 1, **word1}))),
            "drained": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.walk = w = AddressWalker(pairs=self.pairs)
        m.submodules.fifo = fifo = SyncFIFO(width=32 + 8 + 2 + 32 * self.pairs, depth=8)
        pend, pend_lr, pend_la = Signal(), Signal(), Signal()
        issue = w.active & (fifo.level < 5)
        m.d.comb += [w.start.eq(self.start), w.cfg.eq(self.cfg), w.step.eq(issue),
                     self.addr.eq(w.addr), self.eaddr.eq(w.eaddr)]
        if self.pairs:
            m.d.comb += w.pair.eq(self.pair)
        m.d.sync += [pend.eq(issue), pend_lr.eq(w.last_j), pend_la.eq(w.last_all)]
        word = Mux(self.em_only, self.edata.as_signed(), self.rdata)
        fields = [word, self.edata, pend_lr, pend_la] + ([self.rdata1] if self.pairs else [])
        m.d.comb += [fifo.w_data.eq(Cat(*fields)), fifo.w_en.eq(pend),
                     self.out.valid.eq(fifo.r_rdy), self.out.payload.eq(fifo.r_data), fifo.r_en.eq(self.out.ready),
                     self.drained.eq(~w.active & ~pend & (fifo.level == 0))]
        return m
