"""Ping-pong loader (MCF §5): two on-chip buffers filled from DDR while the consumer drains.

Contract
--------
* ``desc`` ``{addr, length, buf}``: fill buffer ``buf`` (0/1) from ``[addr, addr+length)``.
  A descriptor is taken when its buffer is not filling and holds nothing unread -- or
  when its only unread content is the one the consumer is reading right now: the refill
  then starts at once (its bus reads overlap the memory latency with the drain) and
  each beat is written only behind the consumer's read position, so nothing unread is
  overwritten. Otherwise ``desc`` waits. The sequencer alternates ``buf`` so one buffer
  fills while the other is consumed.
* ``out``: one packet per filled buffer, in fill order: the buffer's beats, ``last`` on
  the final one, ``user`` = buffer index. Back-pressure on ``out`` holds the beat; the
  buffer is freed once its last beat has been read from it.
* ``status`` ``{code, addr, buf}``: one per descriptor, in order (codes of
  ``spec.dma.DmaStatus``). A descriptor longer than a buffer (``TOO_LONG``: the
  loader's ``max_length`` is the buffer size, or less if one is given) or
  otherwise illegal (zero length, misaligned, outside the window) is refused without a
  bus transaction and without locking its buffer. A fill whose bus reads failed still
  yields its packet (so the consumer never waits forever); the status says which address
  failed.
* ``m_axi``: the AXI4 master of the internal :class:`~hdl.dma.reader.DMAReader`.

Parameters: ``depth`` (beats per buffer) plus those of :class:`spec.dma.DmaParams`.
"""
from amaranth import Module, Signal, Mux
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import AXI4Signature, PacketSignature
from mcf_fpga.spec.dma import DmaParams, DmaStatus
from mcf_fpga.hdl.dma.common import descriptor_check
from .reader import DMAReader

__all__ = ["PingPongLoader"]


class PingPongLoader(wiring.Component):
    def __init__(self, depth: int = 256, **params):
        if not 2 <= depth <= 65536:
            raise ValueError(f"depth must be in 2..65536 beats, got {depth}")
        bpb = DmaParams(**params).bytes_per_beat
        cap = depth * bpb if params.get("max_length") is None else min(depth * bpb, params["max_length"])
        params = dict(params, max_length=cap)      # a descriptor longer than a buffer: TOO_LONG
        self.p = p = DmaParams(**params)
        self.depth = depth
        self.desc_layout = data.StructLayout({"addr": p.addr_width, "length": p.len_width, "buf": 1})
        self.status_layout = data.StructLayout({"code": 4, "addr": p.addr_width, "buf": 1})
        self._reader = DMAReader(**params)
        super().__init__({
            "desc": In(stream.Signature(self.desc_layout)),
            "out": Out(PacketSignature(p.data_width, user_width=1)),
            "status": Out(stream.Signature(self.status_layout)),
            "m_axi": Out(AXI4Signature(p.addr_width, p.data_width, p.id_width)),
        })

    def elaborate(self, platform):
        m = Module()
        p, depth = self.p, self.depth
        m.submodules.reader = rd = self._reader
        wiring.connect(m, wiring.flipped(self.m_axi), rd.m_axi)
        bufs = []
        for i in range(2):
            mem = memory.Memory(shape=p.data_width, depth=depth, init=[])
            m.submodules[f"buf{i}"] = mem
            bufs.append((mem.write_port(), mem.read_port(domain="sync")))

        # Buffer state: ``filling[b]`` from descriptor intake to the fill's last beat;
        # ``unread[b]`` counts filled contents of b not yet fully read (0..2: the consumer
        # may still be reading b's old content while its next content is written behind it).
        filling = Signal(2)
        set_filling = Signal(2)
        clr_filling = Signal(2)
        m.d.sync += filling.eq((filling | set_filling) & ~clr_filling)
        unread = [Signal(2, name=f"unread{i}") for i in range(2)]
        inc = Signal(2)
        dec = Signal(2)
        for i in range(2):
            m.d.sync += unread[i].eq(unread[i] + inc[i] - dec[i])

        # ---- consumer position (used by intake and by the fill guard) ----
        m.submodules.ready_q = ready_q = fifo.SyncFIFO(width=1 + depth.bit_length(), depth=4)
        cbuf = ready_q.r_data[0]            # buffer being read
        cnt = ready_q.r_data[1:]            # its beats
        idx = Signal(depth.bit_length())    # next beat to read

        # ---- descriptor intake: check, claim the buffer, forward legal ones ----
        olay = data.StructLayout({"buf": 1, "code": 4, "addr": p.addr_width})
        m.submodules.order = order = fifo.SyncFIFO(width=olay.size, depth=4)  # status order
        m.submodules.fills = fills = fifo.SyncFIFO(width=1, depth=2)          # data order
        d = self.desc.payload
        code = descriptor_check(m, p, d.addr, d.length)      # TOO_LONG: p.max_length
        legal = code == DmaStatus.OK
        # b may be refilled when it holds nothing unread, or when its only content is the
        # one being read now (the fill then trails the reader, see the guard below)
        d_unread = Mux(d.buf, unread[1], unread[0])
        buf_free = (~filling.bit_select(d.buf, 1)
                    & ((d_unread == 0) | ((d_unread == 1) & ready_q.r_rdy & (cbuf == d.buf))))
        go = Signal()
        m.d.comb += [
            go.eq(self.desc.valid & order.w_rdy &
                  (~legal | (buf_free & fills.w_rdy & rd.desc.ready))),
            self.desc.ready.eq(go),
            rd.desc.valid.eq(self.desc.valid & legal & buf_free & order.w_rdy & fills.w_rdy),
            rd.desc.payload.addr.eq(d.addr), rd.desc.payload.length.eq(d.length),
            order.w_en.eq(go),
            fills.w_en.eq(go & legal),
            fills.w_data.eq(d.buf),
        ]
        oe = data.View(olay, order.w_data)
        m.d.comb += [oe.buf.eq(d.buf), oe.code.eq(code), oe.addr.eq(d.addr)]
        with m.If(go & legal):
            m.d.comb += set_filling.eq(Mux(d.buf, 0b10, 0b01))

        # ---- fill: reader beats into the target buffer, never overtaking the consumer ----
        wr_idx = Signal(depth.bit_length())
        fbuf = fills.r_data
        beat = rd.data
        behind = ~(ready_q.r_rdy & (cbuf == fbuf)) | (wr_idx < idx)
        m.d.comb += beat.ready.eq(fills.r_rdy & behind & (~beat.payload.last | ready_q.w_rdy))
        fill_fire = beat.valid & beat.ready
        for i, (wp, _) in enumerate(bufs):
            m.d.comb += [wp.addr.eq(wr_idx), wp.data.eq(beat.payload.data),
                         wp.en.eq(fill_fire & (fbuf == i))]
        with m.If(fill_fire):
            m.d.sync += wr_idx.eq(wr_idx + 1)
            with m.If(beat.payload.last):
                m.d.sync += wr_idx.eq(0)
                m.d.comb += [fills.r_en.eq(1), ready_q.w_en.eq(1),
                             ready_q.w_data.eq(fbuf | ((wr_idx + 1) << 1)),
                             clr_filling.eq(Mux(fbuf, 0b10, 0b01)),
                             inc.eq(Mux(fbuf, 0b10, 0b01))]

        # ---- status: in descriptor order; legal ones wait for the reader's status ----
        oh = data.View(olay, order.r_data)
        st = self.status.payload
        m.d.comb += [st.buf.eq(oh.buf)]
        with m.If(oh.code != DmaStatus.OK):
            m.d.comb += [self.status.valid.eq(order.r_rdy), st.code.eq(oh.code), st.addr.eq(oh.addr),
                         order.r_en.eq(self.status.ready)]
        with m.Else():
            m.d.comb += [self.status.valid.eq(order.r_rdy & rd.status.valid),
                         st.code.eq(rd.status.payload.code), st.addr.eq(rd.status.payload.addr),
                         rd.status.ready.eq(order.r_rdy & self.status.ready),
                         order.r_en.eq(rd.status.valid & self.status.ready)]

        # ---- consume: read the oldest full buffer out as one packet ----
        ov = Signal()
        olast = Signal()
        obuf = Signal()
        adv = ~ov | self.out.ready
        issue = ready_q.r_rdy & adv
        for _, rp in bufs:
            m.d.comb += [rp.addr.eq(idx), rp.en.eq(adv)]
        m.d.comb += [
            self.out.valid.eq(ov),
            self.out.payload.data.eq(Mux(obuf, bufs[1][1].data, bufs[0][1].data)),
            self.out.payload.keep.eq(-1),
            self.out.payload.last.eq(olast),
            self.out.payload.user.eq(obuf),
        ]
        with m.If(issue):
            last = idx == cnt - 1
            m.d.sync += [ov.eq(1), olast.eq(last), obuf.eq(cbuf), idx.eq(idx + 1)]
            with m.If(last):
                m.d.sync += idx.eq(0)
                m.d.comb += [ready_q.r_en.eq(1), dec.eq(Mux(cbuf, 0b10, 0b01))]
        with m.Elif(self.out.ready):
            m.d.sync += ov.eq(0)
        return m
