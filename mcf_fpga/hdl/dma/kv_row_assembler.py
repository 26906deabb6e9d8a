"""KV row assembler: the K/V streamer's fill path, read-DMA beats to staging-memory words."""
from amaranth import Module, Signal, Cat, Mux, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import WritePort
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import PacketSignature
from .kvstream_layouts import ROW_BITS

__all__ = ["KVRowAssembler", "fill_layout"]


def fill_layout(win_width: int):
    """One read descriptor's destination: window ``win``, ``last`` = its rows per half - 1 (the
    row counter's end, stored so that no subtractor sits behind the queue's head); ``raw``: the
    beats go to ``raw_out`` instead."""
    return data.StructLayout({"win": win_width, "last": ROW_BITS, "raw": 1})


class KVRowAssembler(wiring.Component):
    """Turns the read DMA's beats into staging words, in the order of the ``fill`` entries.

    * ``fill`` (the descriptor-order queue): a load entry ``{win, last = n - 1, raw=0}`` takes
      ``2 * n`` rows of ``row_beats`` beats each, the window's K rows then its V rows; a raw entry
      takes one run of beats up to ``last``. Entries are taken ahead into two registers, the
      current one and the next (``fill.ready`` while the next is free, a flip-flop): the current
      one's last beat moves the next one in (or the one offered, if none waits), so the beat
      path ends at those registers, not at the queue's pointers (timing), and a following
      entry's first beat is taken in the next cycle (one cycle later only after an entry of a
      single beat).
    * ``beats`` (the reader's ``data``): ready while a current entry is held (and, for a raw
      entry, ``raw_out`` is ready). A row's last beat writes word ``win * win_rows + row`` of
      ``k_wr`` (K half) or ``v_wr`` (V half): the d lanes (kv_bits 4: each nibble sign-extended
      to 8 bits) then the row exponent.
    * ``raw_out`` ``{data, last}``: a raw entry's beats as they come, back-pressure on it stalls
      ``beats``.
    """

    def __init__(self, region, win_rows: int, win_width: int, addr_width: int):
        self.region, self.win_rows = region, win_rows
        self.dw = region.bus_bytes * 8
        self.word_bits = region.d * 8 + 8
        wp = WritePort.Signature(addr_width=addr_width, shape=unsigned(self.word_bits))
        super().__init__({
            "fill": In(stream.Signature(fill_layout(win_width))),
            "beats": In(PacketSignature(self.dw)),
            "raw_out": Out(stream.Signature(data.StructLayout({"data": self.dw, "last": 1}))),
            "k_wr": In(wp),
            "v_wr": In(wp),
        })

    def elaborate(self, platform):
        m = Module()
        reg, dw, d = self.region, self.dw, self.region.d
        rb, kvb = reg.row_beats, reg.kv_bits
        lay = fill_layout(len(self.fill.payload.win))
        f, f_v = Signal(lay, name="cur_fill"), Signal(name="cur_valid")      # the current entry
        nx, nx_v = Signal(lay, name="next_fill"), Signal(name="next_valid")  # the one after it
        done = Signal()                      # the current entry's last beat is taken
        take = self.fill.valid & self.fill.ready
        m.d.comb += self.fill.ready.eq(~nx_v)
        with m.If(done | ~f_v):              # the current slot frees: the waiting entry, else the offered one
            m.d.sync += [f.eq(Mux(nx_v, nx, self.fill.payload)), f_v.eq(nx_v | take), nx_v.eq(0)]
        with m.Elif(take):
            m.d.sync += [nx.eq(self.fill.payload), nx_v.eq(1)]
        f_sel = Signal()
        f_row = Signal(ROW_BITS)
        f_beat = Signal(range(rb))
        rowbuf = Signal(max(1, (rb - 1) * dw))
        beat = self.beats
        m.d.comb += beat.ready.eq(f_v & (~f.raw | self.raw_out.ready))
        m.d.comb += [self.raw_out.valid.eq(beat.valid & f_v & f.raw),
                     self.raw_out.payload.data.eq(beat.payload.data),
                     self.raw_out.payload.last.eq(beat.payload.last)]
        with m.If(beat.valid & beat.ready & f.raw & beat.payload.last):
            m.d.comb += done.eq(1)
        b_fire = beat.valid & beat.ready & ~f.raw
        full_rec = Cat(rowbuf, beat.payload.data) if rb > 1 else beat.payload.data
        if kvb == 8:
            lanes = full_rec[:8 * d]
        else:
            lanes = Cat(*[Cat(full_rec[4 * i:4 * i + 4], full_rec[4 * i + 3].replicate(4)) for i in range(d)])
        word = Cat(lanes, full_rec[d * kvb:d * kvb + 8])
        waddr = f.win * self.win_rows + f_row
        row_done = b_fire & (f_beat == rb - 1)
        for sel, wp in ((0, self.k_wr), (1, self.v_wr)):
            m.d.comb += [wp.addr.eq(waddr), wp.data.eq(word), wp.en.eq(row_done & (f_sel == sel))]
        with m.If(b_fire):
            if rb > 1:
                m.d.sync += [rowbuf.eq(Cat(rowbuf[dw:], beat.payload.data)), f_beat.eq(f_beat + 1)]
            with m.If(row_done):
                m.d.sync += [f_beat.eq(0), f_row.eq(f_row + 1)]
                with m.If(f_row == f.last):
                    m.d.sync += [f_row.eq(0), f_sel.eq(~f_sel)]
                    with m.If(f_sel):
                        m.d.comb += done.eq(1)
        return m
