"""RxBurstWriter: the RX placer's write side: one packet's payload to DDR in AXI4 bursts, and
its status after the last B response.

Contract
--------
* ``start`` (one cycle, while idle) takes a packet: ``addr`` (in bus beats), ``length`` bytes
  and its entry ``e`` (``e`` held until ``done``). Its ``ceil(length / 8)`` 64-bit words come on
  ``words``; ``data_width / 64`` of them make a bus beat, the packet's final beat carrying
  WSTRB 0 for the bytes past ``length``.
* ``bus`` (AXI4 write master, all IDs 0, AWCACHE 0b0011; the read channels idle): INCR bursts of
  at most ``max_burst`` beats that never cross 4 KB (:func:`spec.dma.plan_bursts`), each
  burst's W beats after its AW handshake, at most ``max_outstanding`` bursts awaiting their B.
  ``done`` pulses with the packet's last W handshake (the writer is idle the next cycle).
* After a packet's last B response ``placed`` pulses with its ``entry`` if every burst answered
  OKAY, else ``failed``; the first error since ``clear`` is kept in ``err_code`` (``DmaStatus``
  4 SLVERR or 5 DECERR, the packet's first failing burst's) and ``err_addr`` (that burst's).
* Back-pressure: ``bus`` stalls hold ``words``. ``busy``: a packet or a B response is pending.
"""
from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.dma import DmaStatus
from mcf_fpga.hdl.bus import AXI4Signature, Burst, Resp

__all__ = ["RxBurstWriter"]


class RxBurstWriter(wiring.Component):
    """See module docstring. ``entries``; ``addr_width``, ``data_width``, ``id_width``,
    ``max_burst``, ``max_outstanding``: the AXI master's; ``max_words``: largest packet in 64-bit
    words; ``length_bits``: bits of ``length``."""

    def __init__(self, *, entries: int, addr_width: int, data_width: int, id_width: int, max_burst: int,
                 max_outstanding: int, max_words: int, length_bits: int):
        self.bus_bytes = data_width // 8
        self.lg = (self.bus_bytes - 1).bit_length()
        self.max_burst, self.max_outstanding, self.max_words = max_burst, max_outstanding, max_words
        self.addr_width = addr_width
        super().__init__({
            "start": In(1),
            "addr": In(addr_width - self.lg),
            "length": In(length_bits),
            "e": In(range(max(entries, 2))),
            "words": In(stream.Signature(64)),
            "bus": Out(AXI4Signature(addr_width, data_width, id_width)),
            "done": Out(1),
            "clear": In(1),
            "placed": Out(1),
            "failed": Out(1),
            "entry": Out(range(max(entries, 2))),
            "err_code": Out(4),
            "err_addr": Out(addr_width),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        bb, lg, mb, max_words = self.bus_bytes, self.lg, self.max_burst, self.max_words
        k = bb // 8                               # 64-bit words per bus beat
        bus, words = self.bus, self.words
        cur = Signal(self.addr_width - lg)        # the next burst's address, in bus beats
        rem_beats = Signal(range(max_words + 1))  # bus beats of the packet not yet in a burst
        rem_words = Signal(range(max_words + 1))  # 64-bit words of the packet not yet taken
        rem_bytes = Signal(len(self.length))      # payload bytes from the current bus beat on
        wcnt = Signal(range(mb + 1))              # W beats left in the current burst
        nb = Signal(range(mb + 1))
        to4k = Signal(13 - lg)
        m.d.comb += [to4k.eq(Const(4096 >> lg, 13 - lg) - cur[:12 - lg]),
                     nb.eq(Mux((rem_beats <= mb) & (rem_beats <= to4k), rem_beats, Mux(to4k < mb, to4k, mb)))]
        j = Signal(range(k))                      # words of the bus beat held in acc
        acc = [Signal(64, name=f"acc{i}") for i in range(k - 1)]
        flush = Signal()                          # the packet's last word is in acc: send the beat
        bqw = data.StructLayout({"e": len(self.e), "last": 1, "addr": self.addr_width - lg})
        m.submodules.pend = bq = fifo.SyncFIFOBuffered(width=bqw.size, depth=self.max_outstanding)
        bpush = data.View(bqw, bq.w_data)
        m.d.comb += [bus.aw.payload.addr.eq(Cat(Const(0, lg), cur)), bus.aw.payload.len.eq(nb - 1),
                     bus.aw.payload.size.eq(lg), bus.aw.payload.burst.eq(Burst.INCR),
                     bus.aw.payload.cache.eq(0b0011),
                     bus.w.payload.data.eq(Cat(*acc, words.payload)),
                     bus.w.payload.strb.eq(Cat(*(rem_bytes > i for i in range(bb)))),
                     bus.w.payload.last.eq(wcnt == 1),
                     bpush.e.eq(self.e), bpush.last.eq(nb == rem_beats), bpush.addr.eq(cur),
                     bus.ar.valid.eq(0), bus.r.ready.eq(0)]
        w_fire = bus.w.valid & bus.w.ready
        with m.If(w_fire):
            m.d.sync += [wcnt.eq(wcnt - 1), rem_bytes.eq(rem_bytes - bb), j.eq(0)]
        with m.FSM(name="wr") as wr:
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [cur.eq(self.addr), rem_bytes.eq(self.length),
                                 rem_words.eq((self.length + 7) >> 3), rem_beats.eq((self.length + bb - 1) >> lg),
                                 j.eq(0)]
                    m.next = "AW"
            with m.State("AW"):
                m.d.comb += [bus.aw.valid.eq(bq.w_rdy), bq.w_en.eq(bus.aw.valid & bus.aw.ready)]
                with m.If(bus.aw.valid & bus.aw.ready):
                    m.d.sync += [wcnt.eq(nb), cur.eq(cur + nb), rem_beats.eq(rem_beats - nb)]
                    m.next = "W"
            with m.State("W"):
                take = Signal()                   # this cycle's word goes into acc
                with m.If(flush):                 # the final beat, all of it in acc
                    m.d.comb += bus.w.valid.eq(1)
                with m.Elif(j == k - 1):          # acc + this word make the bus beat
                    m.d.comb += [bus.w.valid.eq(words.valid), words.ready.eq(bus.w.ready)]
                with m.Else():
                    m.d.comb += [words.ready.eq(1), take.eq(words.valid)]
                with m.If(words.ready & words.valid):
                    m.d.sync += rem_words.eq(rem_words - 1)
                with m.If(take):
                    m.d.sync += j.eq(j + 1)
                    for i in range(k - 1):
                        with m.If(j == i):
                            m.d.sync += acc[i].eq(words.payload)
                    with m.If(rem_words == 1):
                        m.d.sync += flush.eq(1)
                with m.If(w_fire):
                    m.d.sync += flush.eq(0)
                    with m.If((wcnt == 1) & (rem_beats == 0)):   # the packet's last beat
                        m.d.comb += self.done.eq(1)
                        m.next = "IDLE"
                    with m.Elif(wcnt == 1):                      # the burst's: the next one
                        m.next = "AW"
        self._status(m, bq, bqw)
        m.d.comb += self.busy.eq(~wr.ongoing("IDLE") | (bq.level != 0))
        return m

    def _status(self, m, bq, bqw):
        """After each B: the packet's outcome on its last, the first error since ``clear``."""
        bus, lg = self.bus, self.lg
        bh_q = data.View(bqw, bq.r_data)
        resp = bus.b.payload.resp
        b_fire = bus.b.valid & bus.b.ready
        bad = (resp == Resp.SLVERR) | (resp == Resp.DECERR)
        code = Signal(4)
        m.d.comb += [bus.b.ready.eq(bq.r_rdy), bq.r_en.eq(b_fire), self.entry.eq(bh_q.e),
                     code.eq(Mux(resp == Resp.SLVERR, DmaStatus.SLVERR, DmaStatus.DECERR))]
        perr = Signal()                           # a burst of this packet failed: its code, address
        pcode = Signal(4)
        paddr = Signal(self.addr_width - lg)
        err_code, err_addr = self.err_code, self.err_addr
        with m.If(b_fire):
            with m.If(bad & ~perr):
                m.d.sync += [perr.eq(1), pcode.eq(code), paddr.eq(bh_q.addr)]
            with m.If(bh_q.last):
                m.d.sync += perr.eq(0)
                with m.If(~perr & ~bad):
                    m.d.comb += self.placed.eq(1)
                with m.Else():
                    m.d.comb += self.failed.eq(1)
                    with m.If(err_code == 0):
                        m.d.sync += [err_code.eq(Mux(perr, pcode, code)),
                                     err_addr.eq(Cat(Const(0, lg), Mux(perr, paddr, bh_q.addr)))]
        with m.If(self.clear):
            m.d.sync += [err_code.eq(0), err_addr.eq(0)]
