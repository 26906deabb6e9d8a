"""Two-bank route table: route_id -> RouteEntry {mask, fanin} (mcf_fpga/spec/topology.py).

Writes always go to the *shadow* bank; ``flip`` (one cycle pulse) makes the shadow
bank active from the next cycle on. Lookups are combinational and read the active
bank; every ingress port looks a packet up exactly once, when its header is
complete, and the packet keeps that result to its last beat. A flip therefore
takes effect between packets: packets already looked up finish on the old routes,
packets whose header completes after the flip use the new ones.
"""
from amaranth import Module, Signal, Mux
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.nic import NicConfig

__all__ = ["RouteTable", "entry_layout", "LookupSignature"]


def entry_layout() -> data.StructLayout:
    """RouteEntry bits as written over AXI-Lite: mask in 0..7, fanin in 8..15."""
    return data.StructLayout({"mask": 8, "fanin": 8})


class LookupSignature(wiring.Signature):
    """Combinational lookup port (requester view): ``addr`` out, ``entry`` in."""

    def __init__(self, cfg: NicConfig):
        super().__init__({"addr": Out(range(cfg.n_routes)), "entry": In(entry_layout())})


class RouteTable(wiring.Component):
    """Members: ``lookup[i]`` (``n_lookup`` combinational read ports on the active bank),
    ``w_addr``/``w_data``/``w_en`` (write into the shadow bank), ``r_addr``/``r_data``
    (combinational read of the shadow bank, for AXI-Lite read-back), ``flip`` (pulse),
    ``active`` (current bank)."""

    def __init__(self, cfg: NicConfig, n_lookup: int):
        self.cfg, self.n_lookup = cfg, n_lookup
        super().__init__({
            "lookup": In(LookupSignature(cfg)).array(n_lookup),
            "w_addr": In(range(cfg.n_routes)), "w_data": In(entry_layout()), "w_en": In(1),
            "r_addr": In(range(cfg.n_routes)), "r_data": Out(entry_layout()),
            "flip": In(1), "active": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        banks = []
        for b in range(2):
            mem = memory.Memory(shape=entry_layout(), depth=self.cfg.n_routes, init=[])
            m.submodules[f"bank{b}"] = mem
            wp = mem.write_port()
            m.d.comb += [wp.addr.eq(self.w_addr), wp.data.eq(self.w_data),
                         wp.en.eq(self.w_en & (self.active != b))]
            rps = []
            for i in range(self.n_lookup):
                rp = mem.read_port(domain="comb")
                m.d.comb += rp.addr.eq(self.lookup[i].addr)
                rps.append(rp)
            shadow_rp = mem.read_port(domain="comb")
            m.d.comb += shadow_rp.addr.eq(self.r_addr)
            banks.append((rps, shadow_rp))
        for i in range(self.n_lookup):
            m.d.comb += self.lookup[i].entry.eq(
                Mux(self.active, banks[1][0][i].data, banks[0][0][i].data))
        m.d.comb += self.r_data.eq(Mux(self.active, banks[0][1].data, banks[1][1].data))
        with m.If(self.flip):
            m.d.sync += self.active.eq(~self.active)
        return m
