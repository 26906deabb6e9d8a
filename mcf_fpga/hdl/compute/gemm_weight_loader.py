"""GEMM weight loader: ``w_in`` weight tiles into the GEMM array's weight ring and header/scale banks."""
from amaranth import Module, Signal, Mux, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import WritePort
from amaranth.lib.wiring import In, Out

__all__ = ["GemmWeightLoader"]


class GemmWeightLoader(wiring.Component):
    """Writes weight tiles (format: :mod:`hdl.compute.gemm`) into bank ``wr_buf`` (A|B) and the ring.

    * ``w_in`` is taken while ``running``, fewer than ``tiles`` tiles are loaded since ``start``
      and bank ``wr_buf``'s ``full`` bit is clear. Beat 0 (header) sets ``we[wr_buf]`` and
      ``bias[wr_buf]``; each scale beat writes one group's ``pn`` scales per cycle to ``ws_wr``
      (word ``g + wr_buf * gmax``) and is held (not ready) until its last group is written; each
      of the ``kc`` weight beats writes ring row ``w_addr`` (``w_wr``), then the ring advances.
      With the tile's last beat ``tile_loaded`` pulses (the parent sets ``full[wr_buf]``) and
      ``wr_buf`` flips. ``framing`` pulses when a taken beat's ``last`` is misplaced.
    * Ring hazard (only if ``w_rows < 2 * kc_max``): a weight beat that would overwrite a row of
      the tile being issued (``rd_buf != wr_buf``) that the array still reads (``rd_last_token``,
      ``rd_chunk``: its token and chunk) is held.
    * ``start`` (a RUN is taken) empties the ring: loaded tiles 0, ring row 0.
    * ``kc`` and ``kc_m1`` (= kc - 1, the array's register set with kc) hold while ``running``;
      the loader's other compares use registers derived from ``kc`` a cycle later (kc - cpg, and
      kc + l_c - w_rows kept beside the chunk count ``l_c``), which a tile's header beat, the
      first one taken, never reads.
    """

    def __init__(self, pn: int, pk: int, cpg: int, kc_max: int, w_rows: int):
        self.pn, self.pk, self.cpg, self.kc_max, self.w_rows = pn, pk, cpg, kc_max, w_rows
        self.gmax = kc_max // cpg
        super().__init__({
            "w_in": In(stream.Signature(data.StructLayout({"data": pn * pk * 4, "last": 1}))),
            "start": In(1), "running": In(1), "tiles": In(16), "kc": In(16), "kc_m1": In(16), "full": In(2),
            "rd_buf": In(1), "rd_last_token": In(1), "rd_chunk": In(16),
            "w_wr": In(WritePort.Signature(addr_width=(w_rows - 1).bit_length(),
                                           shape=unsigned(pn * pk * 4))),
            "ws_wr": In(WritePort.Signature(addr_width=(2 * self.gmax - 1).bit_length(),
                                            shape=unsigned(pn * 8))),
            "we": Out(data.ArrayLayout(data.ArrayLayout(signed(8), pn), 2)),
            "bias": Out(data.ArrayLayout(data.ArrayLayout(signed(32), pn), 2)),
            "wr_buf": Out(1), "tile_loaded": Out(1), "framing": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        pn, pk, cpg, kc_max, gmax, w_rows = self.pn, self.pk, self.cpg, self.kc_max, self.gmax, self.w_rows
        kc = self.kc
        spb = pk // 2                    # groups' scales per scale beat
        wr_buf = Signal()
        l_tiles = Signal(16)             # tiles fully loaded
        w_addr = Signal(range(w_rows))   # ring row the loader writes next
        l_hdr = Signal(init=1)
        l_scale = Signal()
        l_c = Signal(16)
        l_g = Signal(16)                 # group whose scales are written next
        l_gk = Signal(16)                # l_g * cpg
        l_sj = Signal(range(spb))        # its slot in the scale beat
        w = self.w_in
        wdat = w.payload.data
        can = Signal()
        scale_last = Signal()            # l_gk >= kc - cpg: the scale beat's last group (a register)
        w_hold = Signal()
        m.d.comb += self.wr_buf.eq(wr_buf)
        # l_tiles != tiles and l_gk >= kc - cpg as registers, set from their next values (not
        # compares in front of ``ready`` and what it enables: timing)
        l_more = Signal(name="l_more")
        # l_tiles + 1 == tiles registered every cycle, for l_more's update at a tile's end: l_tiles
        # and tiles change at least three cycles before one (a tile is a header, a scale and a
        # weight beat at least), so it is current there and no adder sits in that update
        l_last = Signal(name="l_last")
        m.d.sync += l_last.eq(l_tiles + 1 == self.tiles)
        with m.If(self.start):
            m.d.sync += [l_tiles.eq(0), w_addr.eq(0), l_more.eq(1)]     # a RUN has tiles >= 1
        kc_m1 = self.kc_m1
        kc_mc = Signal(signed(17))        # kc - cpg: registered (see the class docstring)
        l_ck = Signal(signed(18))         # kc + l_c - w_rows: set while l_c is 0, counted with it
        m.d.sync += kc_mc.eq(kc - cpg)
        m.d.comb += can.eq(self.running & l_more & ~self.full.bit_select(wr_buf, 1))
        with m.If(l_hdr | l_scale):
            m.d.sync += l_ck.eq(kc - w_rows)
        if w_rows < 2 * kc_max:
            # The loader only starts a tile once the tile two back has retired (`full`), so the
            # one tile it can overwrite is the one being issued, which it is exactly while
            # rd_buf != wr_buf. Weight row l_c lands on that tile's row kc + l_c - w_rows once
            # kc + l_c >= w_rows; the row is read for the last time on the last token, and rows
            # < rd_chunk have been read.
            m.d.comb += w_hold.eq(~l_hdr & ~l_scale & (self.rd_buf != wr_buf) & (l_ck >= 0)
                                  & ~(self.rd_last_token & (self.rd_chunk > l_ck)))
        # a scale beat is held (not ready) until the last of its groups is written
        m.d.comb += w.ready.eq(can & ~w_hold & (~l_scale | (l_sj == spb - 1) | scale_last))
        m.d.comb += [
            self.w_wr.addr.eq(w_addr), self.w_wr.data.eq(wdat),
            self.ws_wr.addr.eq(l_g + Mux(wr_buf, gmax, 0)), self.ws_wr.data.eq(wdat.word_select(l_sj, pn * 8)),
        ]
        tile_end = ~l_hdr & ~l_scale & (l_c == kc_m1)
        with m.If(w.valid & can & l_scale):
            m.d.comb += self.ws_wr.en.eq(1)
            m.d.sync += [l_g.eq(l_g + 1), l_gk.eq(l_gk + cpg), l_sj.eq(Mux(l_sj == spb - 1, 0, l_sj + 1)),
                         scale_last.eq(l_gk + cpg >= kc_mc)]
            with m.If(scale_last):
                m.d.sync += [l_scale.eq(0), l_sj.eq(0)]
        with m.If(w.valid & w.ready):
            with m.If(w.payload.last != tile_end):
                m.d.comb += self.framing.eq(1)
            with m.If(l_hdr):
                for b in range(2):
                    with m.If(wr_buf == b):
                        for n in range(pn):
                            m.d.sync += [self.bias[b][n].eq(wdat[40 * n:40 * n + 32].as_signed()),
                                         self.we[b][n].eq(wdat[40 * n + 32:40 * n + 40].as_signed())]
                m.d.sync += [l_hdr.eq(0), l_scale.eq(1), l_g.eq(0), l_gk.eq(0), l_sj.eq(0),
                             scale_last.eq(kc <= cpg)]
            with m.Elif(~l_scale):
                m.d.comb += self.w_wr.en.eq(1)
                m.d.sync += [l_c.eq(l_c + 1), l_ck.eq(l_ck + 1), w_addr.eq(Mux(w_addr == w_rows - 1, 0, w_addr + 1))]
                with m.If(tile_end):
                    m.d.sync += [l_c.eq(0), l_hdr.eq(1), wr_buf.eq(~wr_buf), l_tiles.eq(l_tiles + 1),
                                 l_more.eq(~l_last)]
                    m.d.comb += self.tile_loaded.eq(1)
        return m
