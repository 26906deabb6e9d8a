"""DMA reader: descriptors in, AXI4 read bursts out, AXI-Stream packets back.

Contract
--------
* ``desc`` ``{addr, length}`` (bytes): each legal descriptor produces one packet on
  ``data`` of ``length / bytes_per_beat`` full beats (``keep`` all ones, ``last`` on the
  final beat) and then one ``status`` entry ``{code=OK, addr=descriptor address}``.
  If any beat came back SLVERR/DECERR the packet is still delivered whole (erroring beats
  carry whatever the slave sent) and the status carries that code and the address of
  the first failing beat.
* An illegal descriptor (``spec.dma.DmaStatus``: zero length, misaligned, outside
  the window) issues no bus transaction and no packet: only its status, in order.
* Bursts: INCR, at most ``max_burst`` beats, never across a 4 KB boundary; up to
  ``max_outstanding`` bursts in flight (all with ARID 0, so answers come in order).
* Back-pressure on ``data`` stalls RREADY (the slave holds its beat); back-pressure on
  ``status`` stalls only the final beat of a descriptor. Nothing is ever dropped.
* ``registered_head`` (default): a burst's bookkeeping entry is read from a register (the
  in-flight queue a ``SyncFIFOBuffered``), so it is usable 2 cycles after its AR; a slave
  answering within 1 cycle then sees RREADY low for a cycle. ``registered_head=False``: the
  queue's LUT-RAM is read directly (a longer path, no such stall).
"""
from amaranth import Module, Signal, Mux
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import AXI4Signature, Burst, PacketSignature, Resp
from mcf_fpga.spec.dma import DmaParams, DmaStatus
from mcf_fpga.hdl.dma.common import BurstSplitter, burst_layout, descriptor_layout, status_layout

__all__ = ["DMAReader"]


class DMAReader(wiring.Component):
    """AXI4 read DMA. Parameters are those of :class:`spec.dma.DmaParams`.

    Members: ``desc`` (In stream), ``data`` (Out ``PacketSignature(data_width)``),
    ``status`` (Out stream ``{code, addr}``), ``m_axi`` (Out ``AXI4Signature``).
    """

    def __init__(self, registered_head: bool = True, **params):
        self.registered_head = registered_head
        self.p = p = DmaParams(**params)
        super().__init__({
            "desc": In(stream.Signature(descriptor_layout(p.addr_width, p.len_width))),
            "data": Out(PacketSignature(p.data_width)),
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

        # ---- issue: one burst per AR; its bookkeeping entry waits in order in `inflight` ----
        blay = burst_layout(p.addr_width)
        queue = fifo.SyncFIFOBuffered if self.registered_head else fifo.SyncFIFO
        m.submodules.inflight = q = queue(width=blay.size, depth=p.max_outstanding)
        b = split.bursts.payload
        m.d.comb += [
            bus.ar.valid.eq(split.bursts.valid & ~b.null & q.w_rdy),
            bus.ar.payload.addr.eq(b.addr), bus.ar.payload.len.eq(b.len),
            bus.ar.payload.size.eq(lg), bus.ar.payload.burst.eq(Burst.INCR),
            bus.ar.payload.cache.eq(0b0011), bus.ar.payload.prot.eq(0), bus.ar.payload.id.eq(0),
            split.bursts.ready.eq(q.w_rdy & (b.null | bus.ar.ready)),
            q.w_en.eq(split.bursts.valid & split.bursts.ready),
            q.w_data.eq(split.bursts.payload.as_value()),
        ]

        # ---- return: R beats become the packet; the status follows the final beat ----
        head = data.View(blay, q.r_data)
        st_valid = Signal()
        st = self.status.payload
        m.d.comb += self.status.valid.eq(st_valid)
        with m.If(self.status.valid & self.status.ready):
            m.d.sync += st_valid.eq(0)
        err = Signal()
        err_code = Signal(4)
        err_addr = Signal(p.addr_width)
        beat = Signal(8)

        with m.If(q.r_rdy & head.null):
            # a refused descriptor: status only, no data, no bus traffic
            with m.If(~st_valid):
                m.d.comb += q.r_en.eq(1)
                m.d.sync += [st_valid.eq(1), st.code.eq(head.code), st.addr.eq(head.desc_addr)]
        with m.Else():
            final = bus.r.payload.last & head.last
            can = q.r_rdy & (~final | ~st_valid)
            m.d.comb += [
                self.data.valid.eq(bus.r.valid & can),
                self.data.payload.data.eq(bus.r.payload.data),
                self.data.payload.keep.eq(-1),
                self.data.payload.last.eq(final),
                bus.r.ready.eq(self.data.ready & can),
            ]
            with m.If(bus.r.valid & bus.r.ready):
                m.d.sync += beat.eq(beat + 1)
                bad = (bus.r.payload.resp == Resp.SLVERR) | (bus.r.payload.resp == Resp.DECERR)
                first_err = bad & ~err
                with m.If(first_err):
                    m.d.sync += [err.eq(1), err_addr.eq(head.addr + (beat << lg)),
                                 err_code.eq(Mux(bus.r.payload.resp == Resp.SLVERR,
                                                 DmaStatus.SLVERR, DmaStatus.DECERR))]
                with m.If(bus.r.payload.last):
                    m.d.comb += q.r_en.eq(1)
                    m.d.sync += beat.eq(0)
                    with m.If(head.last):
                        m.d.sync += [st_valid.eq(1), err.eq(0)]
                        with m.If(first_err):
                            m.d.sync += [st.code.eq(Mux(bus.r.payload.resp == Resp.SLVERR,
                                                        DmaStatus.SLVERR, DmaStatus.DECERR)),
                                         st.addr.eq(head.addr + (beat << lg))]
                        with m.Elif(err):
                            m.d.sync += [st.code.eq(err_code), st.addr.eq(err_addr)]
                        with m.Else():
                            m.d.sync += [st.code.eq(DmaStatus.OK), st.addr.eq(head.desc_addr)]
        return m

