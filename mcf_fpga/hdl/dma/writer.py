"""DMA writer: descriptors and AXI-Stream packets in, AXI4 write bursts out.

Contract
--------
* Every descriptor on ``desc`` consumes exactly one packet from ``data`` (also a refused
  one: its packet is dropped, so packets and descriptors stay paired). A legal descriptor
  ``{addr, length}`` writes the packet's beats to ``[addr, addr + length)``
  (``WSTRB = keep``), then one ``status`` entry ``{OK, descriptor address}`` follows its
  last B response.
* Packet length must equal ``length``: a short packet completes the remaining beats with
  ``WSTRB = 0`` (memory unchanged there); a long packet's excess beats are dropped; both
  report ``LENGTH_MISMATCH`` with the address of the burst where it was detected.
* A B response SLVERR/DECERR reports that code and the burst's start address (the first
  failing burst wins). An illegal descriptor (zero length, misaligned, outside the
  window) issues no bus transaction: only its status, in order.
* Bursts: INCR, at most ``max_burst`` beats, never across a 4 KB boundary; AW always
  precedes its W beats; at most ``max_outstanding`` writes await their B response.
* Back-pressure: an empty ``data`` stream holds WVALID low; ``status`` back-pressure
  stalls only BREADY of a descriptor's final burst.
"""
from amaranth import Cat, Module, Signal, Mux
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import AXI4Signature, Burst, PacketSignature, Resp
from mcf_fpga.spec.dma import DmaParams, DmaStatus
from mcf_fpga.hdl.dma.common import BurstSplitter, burst_layout, descriptor_layout, status_layout

__all__ = ["DMAWriter"]


class DMAWriter(wiring.Component):
    """AXI4 write DMA. Parameters are those of :class:`spec.dma.DmaParams`.

    Members: ``desc`` (In stream), ``data`` (In ``PacketSignature(data_width)``),
    ``status`` (Out stream ``{code, addr}``), ``m_axi`` (Out ``AXI4Signature``).
    """

    def __init__(self, **params):
        self.p = p = DmaParams(**params)
        super().__init__({
            "desc": In(stream.Signature(descriptor_layout(p.addr_width, p.len_width))),
            "data": In(PacketSignature(p.data_width)),
            "status": Out(stream.Signature(status_layout(p.addr_width))),
            "m_axi": Out(AXI4Signature(p.addr_width, p.data_width, p.id_width)),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.p
        lg = p.size_log2
        bus = self.m_axi
        m.submodules.split = split = BurstSplitter(p)
        wiring.connect(m, wiring.flipped(self.desc), split.desc)

        blay = burst_layout(p.addr_width)
        qlay = data.StructLayout({"burst": blay, "mismatch": 1})
        # a queued burst carries ``len == 0`` beside it: its first beat's "last" without a compare
        m.submodules.wq = wq = fifo.SyncFIFOBuffered(width=blay.size + 1, depth=p.max_outstanding)
        m.submodules.bq = bq = fifo.SyncFIFO(width=qlay.size, depth=p.max_outstanding + 1)

        # ---- AW issue (bounded by writes awaiting B) ----
        pending = Signal(range(p.max_outstanding + 1))
        aw_fire = bus.aw.valid & bus.aw.ready
        b_fire = bus.b.valid & bus.b.ready
        m.d.sync += pending.eq(pending + aw_fire - b_fire)
        b = split.bursts.payload
        room = pending < p.max_outstanding
        m.d.comb += [
            bus.aw.valid.eq(split.bursts.valid & ~b.null & wq.w_rdy & room),
            bus.aw.payload.addr.eq(b.addr), bus.aw.payload.len.eq(b.len),
            bus.aw.payload.size.eq(lg), bus.aw.payload.burst.eq(Burst.INCR),
            bus.aw.payload.cache.eq(0b0011), bus.aw.payload.prot.eq(0), bus.aw.payload.id.eq(0),
            split.bursts.ready.eq(wq.w_rdy & (b.null | (bus.aw.ready & room))),
            wq.w_en.eq(split.bursts.valid & split.bursts.ready),
            wq.w_data.eq(Cat(b.as_value(), b.len == 0)),
        ]

        # ---- W data: beats of the packet, padded/trimmed to the burst plan ----
        head = data.View(blay, wq.r_data[:blay.size])
        beat = Signal(8)
        # wlast = (beat == head.len) from registers (timing: no compare between the queue's head
        # and the W handshake): at the burst's first beat its queued len == 0, after that a
        # register set from the beat count as it steps
        at0, next_last = Signal(init=1), Signal()
        short = Signal()      # the packet ended before the descriptor did
        mism = Signal()       # mismatch seen in this burst
        drain = Signal()      # dropping input beats up to the packet's last
        push = data.View(qlay, bq.w_data)
        m.d.comb += push.burst.eq(head)
        inp = self.data
        with m.If(drain):
            m.d.comb += inp.ready.eq(1)
            with m.If(inp.valid & inp.payload.last):
                m.d.sync += drain.eq(0)
        with m.Elif(wq.r_rdy & head.null):
            # refused descriptor: drop its packet, then pass its status along
            m.d.comb += [inp.ready.eq(bq.w_rdy)]
            with m.If(inp.valid & inp.ready & inp.payload.last):
                m.d.comb += [wq.r_en.eq(1), bq.w_en.eq(1), push.mismatch.eq(0)]
        with m.Elif(wq.r_rdy):
            wlast = Mux(at0, wq.r_data[blay.size], next_last)
            final = wlast & head.last
            m.d.comb += [
                bus.w.valid.eq((inp.valid | short) & (~wlast | bq.w_rdy)),
                bus.w.payload.data.eq(Mux(short, 0, inp.payload.data)),
                bus.w.payload.strb.eq(Mux(short, 0, inp.payload.keep)),
                bus.w.payload.last.eq(wlast),
                inp.ready.eq(bus.w.ready & ~short & (~wlast | bq.w_rdy)),
            ]
            with m.If(bus.w.valid & bus.w.ready):
                m.d.sync += [beat.eq(beat + 1), at0.eq(0), next_last.eq(beat + 1 == head.len)]
                early = ~short & inp.payload.last & ~final    # packet shorter than descriptor
                late = ~short & ~inp.payload.last & final     # packet longer than descriptor
                with m.If(early):
                    m.d.sync += [short.eq(1), mism.eq(1)]
                with m.If(late):
                    m.d.sync += drain.eq(1)
                with m.If(wlast):
                    m.d.comb += [wq.r_en.eq(1), bq.w_en.eq(1),
                                 push.mismatch.eq(mism | early | late)]
                    m.d.sync += [beat.eq(0), mism.eq(0), at0.eq(1)]
                    with m.If(final):
                        m.d.sync += short.eq(0)

        # ---- B: collect responses, emit one status per descriptor ----
        bh = data.View(qlay, bq.r_data)
        st_valid = Signal()
        st = self.status.payload
        m.d.comb += self.status.valid.eq(st_valid)
        with m.If(self.status.valid & self.status.ready):
            m.d.sync += st_valid.eq(0)
        err = Signal()
        err_code = Signal(4)
        err_addr = Signal(p.addr_width)
        with m.If(bq.r_rdy & bh.burst.null):
            with m.If(~st_valid):
                m.d.comb += bq.r_en.eq(1)
                m.d.sync += [st_valid.eq(1), st.code.eq(bh.burst.code), st.addr.eq(bh.burst.desc_addr)]
        with m.Else():
            m.d.comb += bus.b.ready.eq(bq.r_rdy & (~bh.burst.last | ~st_valid))
            with m.If(b_fire):
                m.d.comb += bq.r_en.eq(1)
                resp = bus.b.payload.resp
                bad = (resp == Resp.SLVERR) | (resp == Resp.DECERR)
                code = Signal(4)
                m.d.comb += code.eq(Mux(bad, Mux(resp == Resp.SLVERR, DmaStatus.SLVERR,
                                                 DmaStatus.DECERR), DmaStatus.LENGTH_MISMATCH))
                first = (bad | bh.mismatch) & ~err
                with m.If(first):
                    m.d.sync += [err.eq(1), err_code.eq(code), err_addr.eq(bh.burst.addr)]
                with m.If(bh.burst.last):
                    m.d.sync += [st_valid.eq(1), err.eq(0)]
                    with m.If(first):
                        m.d.sync += [st.code.eq(code), st.addr.eq(bh.burst.addr)]
                    with m.Elif(err):
                        m.d.sync += [st.code.eq(err_code), st.addr.eq(err_addr)]
                    with m.Else():
                        m.d.sync += [st.code.eq(DmaStatus.OK), st.addr.eq(bh.burst.desc_addr)]
        return m
