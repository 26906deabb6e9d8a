"""All-to-all engine: splits one local all-to-all packet into one packet per node.

Sits between the local ingress port (which has already validated the packet: its
``length`` is a non-zero multiple of ``8 * NUM_NODES`` and ``route_id + NUM_NODES`` is
within the table) and the switch. A packet with ``user.a2a`` set and payload
``c_0 | c_1 | ... | c_{n-1}`` (n = ``NUM_NODES`` equal chunks) leaves as n packets: chunk
``j`` with ``dst = j``, ``route_id = route_id + j``, ``length = length / n``, routed by
route-table entry ``route_id + j``, looked up once when the chunk starts (a bank flip never
splits a chunk). An empty entry drops that chunk and pulses ``err`` (``ErrorCause.ROUTE``).
Other packets pass through unchanged. Each chunk costs one lookup cycle plus its header
beats during which the input is stalled; payload beats move at one per cycle.
"""
from amaranth import Cat, Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import PacketSignature
from mcf_fpga.hdl.meta import meta_layout

from mcf_fpga.spec.nic import NicConfig
from .ingress import RegsSignature, route_user_layout
from .route_table import LookupSignature

__all__ = ["AllToAllSplitter"]


class AllToAllSplitter(wiring.Component):
    def __init__(self, cfg: NicConfig):
        self.cfg = cfg
        uw = route_user_layout(cfg).size
        super().__init__({
            "s": In(PacketSignature(cfg.data_width, uw)),
            "m": Out(PacketSignature(cfg.data_width, uw)),
            "lookup": Out(LookupSignature(cfg)),
            "regs": In(RegsSignature(cfg)),
            "err": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, mp = self.cfg, self.cfg.meta
        H, dw = cfg.header_beats, cfg.data_width
        ulay = route_user_layout(cfg)
        s, o = self.s, self.m
        s_user = data.View(ulay, s.payload.user)
        hdr = [Signal(dw, name=f"hdr{i}") for i in range(H - 1)]
        hidx = Signal(range(H + 1))
        hm = data.View(meta_layout(mp), Cat(*hdr, s.payload.data)[:mp.header_bits])
        meta_r = Signal(meta_layout(mp))
        user_r = Signal(ulay)
        chunk = Signal(mp.length_bits)          # chunk length in beats
        j = Signal(range(cfg.max_nodes + 1))
        remaining = Signal(mp.length_bits)
        entry_r = Signal.like(self.lookup.entry)

        out_meta = Signal(meta_layout(mp))
        m.d.comb += [out_meta.eq(meta_r), out_meta.dst.eq(j), out_meta.route_id.eq(meta_r.route_id + j),
                     out_meta.length.eq(chunk << 3)]
        out_user = Signal(ulay)
        m.d.comb += [out_user.eq(user_r), out_user.mask.eq(entry_r.mask[:cfg.n_ports]),
                     out_user.fanin.eq(entry_r.fanin), out_user.a2a.eq(0)]
        header = Signal(H * dw)
        m.d.comb += header.eq(out_meta.as_value())
        m.d.comb += self.lookup.addr.eq(meta_r.route_id + j)
        n = self.regs.num_nodes

        with m.FSM():
            with m.State("IDLE"):
                with m.If(s.valid & s_user.a2a):
                    m.next = "CAPTURE"
                with m.Else():       # pass the first beat in this cycle: no bubble
                    m.d.comb += [o.payload.eq(s.payload), o.valid.eq(s.valid), s.ready.eq(o.ready)]
                    with m.If(s.valid & s.ready & ~s.payload.last):
                        m.next = "PASS"
            with m.State("PASS"):
                m.d.comb += [o.payload.eq(s.payload), o.valid.eq(s.valid), s.ready.eq(o.ready)]
                with m.If(s.valid & s.ready & s.payload.last):
                    m.next = "IDLE"
            with m.State("CAPTURE"):
                m.d.comb += s.ready.eq(1)
                with m.If(s.valid):
                    for i in range(H - 1):
                        with m.If(hidx == i):
                            m.d.sync += hdr[i].eq(s.payload.data)
                    with m.If(hidx == H - 1):
                        m.d.sync += [hidx.eq(0), meta_r.eq(hm), user_r.eq(s_user), j.eq(0),
                                     chunk.eq((hm.length >> 3) // n)]
                        m.next = "LOOKUP"
                    with m.Else():
                        m.d.sync += hidx.eq(hidx + 1)
            with m.State("LOOKUP"):
                m.d.sync += [entry_r.eq(self.lookup.entry), remaining.eq(chunk)]
                with m.If(self.lookup.entry.mask[:cfg.n_ports] == 0):
                    m.d.comb += self.err.eq(1)
                    m.next = "SKIP"
                with m.Else():
                    m.next = "HEADER"
            with m.State("HEADER"):
                m.d.comb += [o.valid.eq(1), o.payload.data.eq(header.word_select(hidx, dw)),
                             o.payload.keep.eq(0xFF), o.payload.last.eq(0),
                             o.payload.user.eq(out_user)]
                with m.If(o.ready):
                    with m.If(hidx == H - 1):
                        m.d.sync += hidx.eq(0)
                        m.next = "DATA"
                    with m.Else():
                        m.d.sync += hidx.eq(hidx + 1)
            with m.State("DATA"):
                m.d.comb += [o.valid.eq(s.valid), o.payload.data.eq(s.payload.data),
                             o.payload.keep.eq(0xFF), o.payload.last.eq(remaining == 1),
                             o.payload.user.eq(out_user), s.ready.eq(o.ready)]
                with m.If(s.valid & s.ready):
                    m.d.sync += remaining.eq(remaining - 1)
                    with m.If(remaining == 1):
                        m.d.sync += j.eq(j + 1)
                        m.next = "NEXT"
            with m.State("SKIP"):
                m.d.comb += s.ready.eq(1)
                with m.If(s.valid):
                    m.d.sync += remaining.eq(remaining - 1)
                    with m.If(remaining == 1):
                        m.d.sync += j.eq(j + 1)
                        m.next = "NEXT"
            with m.State("NEXT"):
                with m.If(j == n):
                    m.next = "IDLE"
                with m.Else():
                    m.next = "LOOKUP"
        return m
