"""Command prefetcher: a command stream's 64-bit words read from DDR ahead of execution.

Contract
--------
* ``start`` (one cycle, ``base`` 8-byte aligned, ``length`` > 0 words; the caller checks the
  window): the words ``[base, base + 8*length)`` are fetched in INCR bursts of at most
  ``max_burst`` beats (a :class:`hdl.dma.reader.DMAReader`), beat-aligned: a leading half beat
  is read and skipped, a trailing one read and never offered. A burst is requested only while
  ``enable`` is high and the FIFO of ``fifo_depth`` words has room for all its beats, so the bus
  never waits on the consumer (RREADY is withheld only by the reader itself, for one cycle, when
  a burst's last beat comes in the cycle after the previous burst's last beat: its status
  register is still full).
* ``word`` is the word at the head, valid while ``avail``; ``bad``: its beat came back
  SLVERR/DECERR (``resp``). ``pop`` (only while ``avail``) consumes it.
* ``drain`` (held): every word in the FIFO and every beat still in flight is discarded; ``idle``
  rises once none is left and no burst is requested (the AXI bus is then idle).
* ``m_axi``: the reader's AXI4 read master (write channels unused).
"""
from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import fifo, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import AXI4Signature, Resp
from mcf_fpga.hdl.dma.reader import DMAReader
from mcf_fpga.spec.dma import DmaParams

__all__ = ["CommandPrefetcher"]


class CommandPrefetcher(wiring.Component):
    """See module docstring. ``dma``: the reader's :class:`spec.dma.DmaParams` (``data_width``
    >= 64); ``fifo_depth``: words, a multiple of the words per beat and at least one burst."""

    def __init__(self, dma: DmaParams, fifo_depth: int):
        self.dma = p = dma
        self.fifo_depth = fifo_depth
        self.wpb = p.data_width // 64
        # the reader's in-flight head read directly: RREADY never waits on it, whatever the slave's latency
        self._reader = DMAReader(registered_head=False, addr_width=p.addr_width, data_width=p.data_width, max_burst=p.max_burst,
                                 max_outstanding=p.max_outstanding, id_width=p.id_width,
                                 window_base=p.window_base, window_size=p.window_size)
        super().__init__({
            "m_axi": Out(AXI4Signature(p.addr_width, p.data_width, p.id_width)),
            "start": In(1), "base": In(p.addr_width), "length": In(32),
            "enable": In(1),
            "word": Out(64), "resp": Out(2), "bad": Out(1), "avail": Out(1), "pop": In(1),
            "drain": In(1), "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        p, wpb = self.dma, self.wpb
        lg = p.size_log2
        m.submodules.reader = rd = self._reader
        wiring.connect(m, wiring.flipped(self.m_axi), rd.m_axi)
        m.d.comb += rd.status.ready.eq(1)          # per-beat errors are taken from RRESP below

        # bursts into the FIFO, only when all their beats fit
        qdepth = self.fifo_depth // wpb
        # one entry more than the bursts may fill: SyncFIFOBuffered's write side sees only its inner
        # memory (depth - 1 entries), and a word moving to the output register still occupies it
        # for a cycle; with qdepth inner entries every beat counted in has room when it comes
        m.submodules.q = q = fifo.SyncFIFOBuffered(width=p.data_width + 2, depth=qdepth + 1)
        f_addr = Signal(p.addr_width)
        f_rem = Signal(34)                         # beats still to request
        inflight = Signal(range(qdepth + 1))       # beats requested, not yet in the FIFO
        desc_valid = Signal()
        nb = Signal(range(p.max_burst + 1))
        m.d.comb += nb.eq(Mux(f_rem < p.max_burst, f_rem, p.max_burst))
        issue = Signal()
        m.d.comb += issue.eq(self.enable & ~desc_valid & (f_rem != 0) & (q.level + inflight + nb <= qdepth))
        m.d.comb += rd.desc.valid.eq(desc_valid)
        with m.If(rd.desc.valid & rd.desc.ready):
            m.d.sync += desc_valid.eq(0)
        with m.If(issue):
            m.d.sync += [desc_valid.eq(1), rd.desc.payload.addr.eq(f_addr),
                         rd.desc.payload.length.eq(nb << lg), f_addr.eq(f_addr + (nb << lg)), f_rem.eq(f_rem - nb)]
        beat_in = rd.data.valid & rd.data.ready
        m.d.comb += [rd.data.ready.eq(q.w_rdy), q.w_en.eq(rd.data.valid),
                     q.w_data.eq(Cat(rd.data.payload.data, self.m_axi.r.payload.resp))]
        m.d.sync += inflight.eq(inflight + Mux(issue, nb, 0) - beat_in)

        # the word at the head of the FIFO
        sel = Signal(range(wpb))
        m.d.comb += self.word.eq(q.r_data[:p.data_width].word_select(sel, 64) if wpb > 1 else q.r_data[:64])
        resp = q.r_data[p.data_width:]
        m.d.comb += [self.resp.eq(resp), self.bad.eq((resp == Resp.SLVERR) | (resp == Resp.DECERR)),
                     self.avail.eq(q.r_rdy)]
        with m.If(self.pop):
            if wpb > 1:
                m.d.sync += sel.eq(Mux(sel == wpb - 1, 0, sel + 1))
                m.d.comb += q.r_en.eq(sel == wpb - 1)
            else:
                m.d.comb += q.r_en.eq(1)
        with m.If(self.drain):
            m.d.comb += q.r_en.eq(1)
        m.d.comb += self.idle.eq(~desc_valid & (inflight == 0) & (q.level == 0) & ~beat_in)

        with m.If(self.start):
            skip = self.base[3:lg] if wpb > 1 else 0
            m.d.sync += [f_addr.eq(self.base & ~(p.bytes_per_beat - 1)),
                         f_rem.eq((skip + self.length + wpb - 1) >> (wpb.bit_length() - 1))]
            if wpb > 1:
                m.d.sync += sel.eq(skip)
        return m
