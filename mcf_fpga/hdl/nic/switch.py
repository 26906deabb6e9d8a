"""Multicast packet switch: ``n_in`` packet inputs to ``n_out`` outputs in one pass.

Each input packet carries its output-port mask in the low ``n_out`` bits of ``user``
(constant over the packet). A packet is granted **all** of its outputs at once, when none
of them is carrying another packet, and then every beat is written to all of them in the
same cycle (a beat moves when every target output buffer has room). An output stays with
its packet until the last beat, so packets are never interleaved or split, and beats of
one input leave every output in input order.

Allocation (combinational, so a packet may start in the cycle after the previous one on
its outputs ended: no idle cycle between back-to-back packets): inputs are visited in
round-robin order from ``rr``; the first requesting input (the *head*) reserves its
outputs even when it cannot be granted yet, so a wide multicast is never starved by
narrow packets; later inputs are granted only outputs that are free and unreserved.
``rr`` moves past the head when the head is granted.

Each output has an ``out_depth``-beat FIFO, so ``valid`` on an output never depends on
another output's ``ready`` (AXI-Stream rule). A packet with an empty mask is consumed and
discarded (the parsers never send one).
"""
from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import fifo, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import PacketLayout, PacketSignature

__all__ = ["MulticastSwitch"]


class MulticastSwitch(wiring.Component):
    """Members: ``s[i]`` (In packet streams), ``m[o]`` (Out packet streams); user passes through."""

    def __init__(self, n_in: int, n_out: int, data_width: int = 64, user_width: int = 0,
                 out_depth: int = 4):
        if user_width < n_out:
            raise ValueError(f"user_width ({user_width}) must hold the {n_out}-bit output mask")
        if n_in < 1 or n_out < 1:
            raise ValueError(f"n_in and n_out must be >= 1, got {n_in}, {n_out}")
        self.n_in, self.n_out, self.dw, self.uw, self.out_depth = n_in, n_out, data_width, user_width, out_depth
        super().__init__({
            "s": In(PacketSignature(data_width, user_width)).array(n_in),
            "m": Out(PacketSignature(data_width, user_width)).array(n_out),
        })

    def elaborate(self, platform):
        m = Module()
        n_in, n_out = self.n_in, self.n_out
        lay = PacketLayout(self.dw, self.uw)
        fifos = []
        for o in range(n_out):
            f = fifo.SyncFIFOBuffered(width=lay.size, depth=self.out_depth)
            m.submodules[f"out_fifo{o}"] = f
            m.d.comb += [self.m[o].payload.eq(f.r_data), self.m[o].valid.eq(f.r_rdy),
                         f.r_en.eq(self.m[o].ready)]
            fifos.append(f)
        w_rdy = Cat(*(f.w_rdy for f in fifos))

        active = Signal(n_in)
        amask = [Signal(n_out, name=f"amask{i}") for i in range(n_in)]
        rmask = [self.s[i].payload.user[:n_out] for i in range(n_in)]
        busy = Signal(n_out)
        acc = Const(0, n_out)
        for i in range(n_in):
            acc = acc | Mux(active[i], amask[i], 0)
        m.d.comb += busy.eq(acc)
        req = Signal(n_in)
        m.d.comb += req.eq(Cat(*(self.s[i].valid & ~active[i] for i in range(n_in))))

        rr = Signal(range(n_in))
        grant = Signal(n_in)
        adv = Signal()
        next_rr = Signal(range(n_in))
        with m.Switch(rr):
            for r in range(n_in):
                with m.Case(r):
                    claimed = busy
                    head_seen = Const(0)
                    for k in range(n_in):
                        i = (r + k) % n_in
                        can = req[i] & ((rmask[i] & claimed) == 0)
                        is_head = req[i] & ~head_seen
                        m.d.comb += grant[i].eq(can)
                        with m.If(is_head & can):
                            m.d.comb += [adv.eq(1), next_rr.eq((i + 1) % n_in)]
                        claimed = claimed | Mux(can | is_head, rmask[i], 0)
                        head_seen = head_seen | req[i]
        with m.If(adv):
            m.d.sync += rr.eq(next_rr)

        xfer = []
        for i in range(n_in):
            s = self.s[i]
            room = Const(1)
            for o in range(n_out):
                room = room & (~rmask[i][o] | w_rdy[o])
            m.d.comb += s.ready.eq((active[i] | grant[i]) & room)
            x = Signal(name=f"xfer{i}")
            m.d.comb += x.eq(s.valid & s.ready)
            xfer.append(x)
            with m.If(x):
                m.d.sync += [active[i].eq(~s.payload.last), amask[i].eq(rmask[i])]
            with m.Elif(grant[i]):
                m.d.sync += [active[i].eq(1), amask[i].eq(rmask[i])]
        for o in range(n_out):
            f = fifos[o]
            for i in range(n_in):
                with m.If(xfer[i] & rmask[i][o]):
                    m.d.comb += [f.w_en.eq(1), f.w_data.eq(self.s[i].payload)]
        return m
