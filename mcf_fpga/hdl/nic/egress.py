"""Local egress: what the NIC does with a packet delivered to its own node (port 0).

Input ``s``: packets from the switch's local output with the ``route_user_layout``
sideband; ``user.cls`` (constant over a packet, set by the parser) steers each packet:

* ``FORWARD``: to ``fwd`` unchanged (the local packet output);
* ``INVALIDATE`` (``replica_invalidate``): no data is written anywhere; on the final header
  beat the packet's ``kv_id`` (``kv_id_layout`` bits) is offered on ``inval`` for the KV
  pool's directory, and the rest of the packet is consumed;
* ``REDUCE``: to ``reduce`` (the reduction engine).

Each output's back-pressure stalls ``s`` only while a packet for that output is at the head.
"""
from amaranth import Module, Signal, Cat
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import PacketSignature
from mcf_fpga.hdl.meta import kv_id_layout, meta_layout

from mcf_fpga.spec.nic import NicConfig
from .ingress import Cls, route_user_layout

__all__ = ["LocalEgress"]


class LocalEgress(wiring.Component):
    def __init__(self, cfg: NicConfig):
        self.cfg = cfg
        uw = route_user_layout(cfg).size
        super().__init__({
            "s": In(PacketSignature(cfg.data_width, uw)),
            "fwd": Out(PacketSignature(cfg.data_width, uw)),
            "reduce": Out(PacketSignature(cfg.data_width, uw)),
            "inval": Out(stream.Signature(kv_id_layout(cfg.meta).size)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        H, dw = cfg.header_beats, cfg.data_width
        s = self.s
        user = data.View(route_user_layout(cfg), s.payload.user)
        m.d.comb += [self.fwd.payload.eq(s.payload), self.reduce.payload.eq(s.payload)]
        hdr = [Signal(dw, name=f"hdr{i}") for i in range(H - 1)]
        hidx = Signal(range(H + 1))
        hm = data.View(meta_layout(cfg.meta), Cat(*hdr, s.payload.data)[:cfg.meta.header_bits])
        m.d.comb += self.inval.payload.eq(hm.kv_id)
        with m.Switch(user.cls):
            with m.Case(Cls.FORWARD):
                m.d.comb += [self.fwd.valid.eq(s.valid), s.ready.eq(self.fwd.ready)]
            with m.Case(Cls.REDUCE):
                m.d.comb += [self.reduce.valid.eq(s.valid), s.ready.eq(self.reduce.ready)]
            with m.Default():   # INVALIDATE
                at_final = hidx == H - 1
                m.d.comb += [self.inval.valid.eq(s.valid & at_final),
                             s.ready.eq(~at_final | self.inval.ready)]
                with m.If(s.valid & s.ready):
                    for i in range(H - 1):
                        with m.If(hidx == i):
                            m.d.sync += hdr[i].eq(s.payload.data)
                    with m.If(s.payload.last):
                        m.d.sync += hidx.eq(0)
                    with m.Elif(hidx < H):
                        m.d.sync += hidx.eq(hidx + 1)
        return m
