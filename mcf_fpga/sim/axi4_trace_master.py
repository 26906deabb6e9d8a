"""AXI4 trace master: replays a fixed list of bursts on an AXI4 master port.

Used to run one and the same AXI4 trace on the Python ``AXI4Memory`` (Amaranth simulator)
and on the C++ memory model (Verilator backend), and to exercise memory models in general.

Contract
--------
* ``commands``: ``[(kind, addr, len, size, burst)]`` with kind ``"R"`` or ``"W"``. Reads are
  issued on AR in list order, writes on AW in list order, each as soon as the slave is
  ready (reads and writes independently, so several may be outstanding). IDs are the
  command's index within its kind modulo ``2**id_width``.
* W beats come from ``s_axis``: data -> WDATA, keep -> WSTRB, last -> WLAST; feed one frame
  of ``len + 1`` beats per write, in order. ``s_axis.ready`` follows ``w.ready``.
* Every R beat leaves on ``m_axis`` with ``tdata = {rresp (8 bits), rdata}`` (rdata in the low
  bytes), ``tlast = rlast``; ``r.ready`` follows ``m_axis.ready``.
* B is always ready; ``b_count`` counts B responses and ``b_errors`` those that are not OKAY.
"""
from amaranth import Module, Signal, Cat
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import AXI4Signature, PacketSignature

__all__ = ["AXI4TraceMaster"]


class AXI4TraceMaster(wiring.Component):
    def __init__(self, commands, *, addr_width: int = 32, data_width: int = 64, id_width: int = 2):
        self.commands = [(k, int(a), int(n), int(s), int(b)) for k, a, n, s, b in commands]
        for i, (k, a, n, s, b) in enumerate(self.commands):
            if k not in ("R", "W"):
                raise ValueError(f"command {i}: kind must be 'R' or 'W', got {k!r}")
            if not (0 <= a < 2 ** addr_width and 0 <= n < 256 and 0 <= s < 8 and 0 <= b < 4):
                raise ValueError(f"command {i}: field out of range in {(k, a, n, s, b)}")
        self.data_width, self.addr_width, self.id_width = data_width, addr_width, id_width
        super().__init__({
            "m_axi": Out(AXI4Signature(addr_width, data_width, id_width)),
            "s_axis": In(PacketSignature(data_width)),
            "m_axis": Out(PacketSignature(data_width + 8)),
            "b_count": Out(16),
            "b_errors": Out(16),
        })

    def _issuer(self, m, ch, cmds, name):
        n = len(cmds)
        if n == 0:
            m.d.comb += ch.valid.eq(0)
            return
        layout = data.StructLayout({"addr": self.addr_width, "len": 8, "size": 3, "burst": 2})
        rom = memory.Memory(shape=layout, depth=n, init=[
            {"addr": a, "len": ln, "size": s, "burst": b} for _, a, ln, s, b in cmds])
        m.submodules[f"{name}_rom"] = rom
        rd = rom.read_port(domain="comb")
        ptr = Signal(range(n + 1), name=f"{name}_ptr")
        m.d.comb += [rd.addr.eq(ptr), ch.valid.eq(ptr < n),
                     ch.payload.addr.eq(rd.data.addr), ch.payload.len.eq(rd.data.len),
                     ch.payload.size.eq(rd.data.size), ch.payload.burst.eq(rd.data.burst),
                     ch.payload.id.eq(ptr[:self.id_width])]
        with m.If(ch.valid & ch.ready):
            m.d.sync += ptr.eq(ptr + 1)

    def elaborate(self, platform):
        m = Module()
        ax = self.m_axi
        self._issuer(m, ax.ar, [c for c in self.commands if c[0] == "R"], "ar")
        self._issuer(m, ax.aw, [c for c in self.commands if c[0] == "W"], "aw")
        m.d.comb += [ax.w.payload.data.eq(self.s_axis.payload.data),
                     ax.w.payload.strb.eq(self.s_axis.payload.keep),
                     ax.w.payload.last.eq(self.s_axis.payload.last),
                     ax.w.valid.eq(self.s_axis.valid), self.s_axis.ready.eq(ax.w.ready)]
        m.d.comb += [self.m_axis.payload.data.eq(Cat(ax.r.payload.data, ax.r.payload.resp)),
                     self.m_axis.payload.keep.eq(-1),
                     self.m_axis.payload.last.eq(ax.r.payload.last),
                     self.m_axis.valid.eq(ax.r.valid), ax.r.ready.eq(self.m_axis.ready)]
        m.d.comb += ax.b.ready.eq(1)
        with m.If(ax.b.valid):
            m.d.sync += self.b_count.eq(self.b_count + 1)
            with m.If(ax.b.payload.resp != 0):
                m.d.sync += self.b_errors.eq(self.b_errors + 1)
        return m
