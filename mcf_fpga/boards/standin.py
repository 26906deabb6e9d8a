"""Stand-in PL top for the KR260 flow until the node (mcf_fpga/hdl/node.py) exists.

A small real design that satisfies :mod:`boards.top`'s contract, so platform,
block design, device tree, packaging and synthesis run end to end:

========  ======  ====  ==================================================
offset    name    acc.  meaning
========  ======  ====  ==================================================
0x00      ID      RO    ``0x4D4346`` ("MCF") << 8 | version
0x04      SCRATCH RW    any value, read back unchanged
0x08      LED     RW    bit k drives user LED k; bit 8 = LED0 blinks instead
0x0C      IRQ     RO    bit 0 = interrupt pending; reading clears it
0x10      IRQ_SET WO    writing bit 0 = 1 sets the pending bit
0x14      IRQ_EN  RW    bit 0 = 1 lets the pending bit drive ``irq``
0x18      CYCLES  RO    free-running clock-cycle counter (low 32 bits)
0x1C      LINK_RX RO    good frames on link k in byte k, bad in byte k+2
0x20      NODE    RO    node id in bits 7:0, number of nodes in bits 15:8
========  ======  ====  ==================================================

Links: each ``s_axis_link<k>`` is echoed to ``m_axis_link<k>`` (a plain
stream connection: back-pressure passes straight through; ``user`` is not
forwarded, so a bad frame is echoed and the MAC appends a fresh FCS). Received
frames are counted in LINK_RX: byte k = good frames on link k, byte k+2 = bad
frames (``user`` on the last beat). Setting and reading IRQ in the same cycle leaves it pending.
"""
from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import AXI4LiteSignature, AXI4LiteRegisterFile, Register, Access, PacketSignature

__all__ = ["StandInTop", "REGISTERS", "ID_VALUE"]

VERSION = 1
ID_VALUE = (0x4D4346 << 8) | VERSION

REGISTERS = (
    Register("id", 0x00, Access.RO, doc="MCF magic and version"),
    Register("scratch", 0x04, Access.RW),
    Register("led", 0x08, Access.RW, width=9),
    Register("irq_status", 0x0C, Access.RO, width=1),
    Register("irq_set", 0x10, Access.WO, width=1),
    Register("irq_enable", 0x14, Access.RW, width=1),
    Register("cycles", 0x18, Access.RO),
    Register("link_rx", 0x1C, Access.RO),
    Register("node", 0x20, Access.RO, width=16),
)
OFFSETS = {r.name: r.offset for r in REGISTERS}


class StandInTop(wiring.Component):
    """AXI-Lite register file + blinky + interrupt + link echo (see module docstring).

    Parameters
    ----------
    addr_width : int
        AXI-Lite window is 2**addr_width bytes (16 = 64 KiB, the dtsi's UIO size).
    blink_bits : int
        LED0 blinks with period 2**blink_bits cycles (26 ≈ 0.67 s at 100 MHz).
    nodes, node_id : int
        Cluster size and this node's id (read back from NODE).
    links : iterable of int
        Link numbers to expose as echoing ``s_axis_link<k>``/``m_axis_link<k>`` (0, 1: 8-bit RGMII).
    """

    def __init__(self, addr_width=16, blink_bits=26, links=(0, 1), nodes=1, node_id=0):
        if not 1 <= nodes <= 255:
            raise ValueError(f"nodes must be in 1..255, got {nodes}")
        if not 0 <= node_id < nodes:
            raise ValueError(f"node_id must be in 0..nodes-1 = 0..{nodes - 1}, got {node_id}")
        self.nodes, self.node_id = nodes, node_id
        if not 2 <= blink_bits <= 32:
            raise ValueError(f"blink_bits must be in 2..32, got {blink_bits}")
        self.links = tuple(links)
        for k in self.links:
            if k not in (0, 1):
                raise ValueError(f"stand-in links must be 0 or 1 (8-bit RGMII), got {k}")
        self.blink_bits = blink_bits
        members = {"s_axi": In(AXI4LiteSignature(addr_width, 32)), "irq": Out(1), "led": Out(2)}
        for k in self.links:
            members[f"s_axis_link{k}"] = In(PacketSignature(8, user_width=1))
            members[f"m_axis_link{k}"] = Out(PacketSignature(8))
        super().__init__(members)
        self._addr_width = addr_width

    def register_map(self, name="mcf_node"):
        """The stand-in's AXI-Lite map (``spec.regmap.RegisterMap``): :data:`REGISTERS` in one
        window ``standin`` spanning the whole slave, as its register file decodes them."""
        from mcf_fpga.spec.regmap import RegisterMap, Window
        return RegisterMap(name, self._addr_width,
                           [Window("standin", 0, self._addr_width, REGISTERS,
                                   doc="stand-in: ID, scratch, LEDs, interrupt, cycle and link counters")])

    def elaborate(self, platform):
        m = Module()
        m.submodules.regs = regs = AXI4LiteRegisterFile(REGISTERS, addr_width=self._addr_width)
        wiring.connect(m, wiring.flipped(self.s_axi), regs.bus)

        m.d.comb += [regs.id.eq(ID_VALUE), regs.node.eq(self.node_id | (self.nodes << 8))]

        cycles = Signal(32)
        m.d.sync += cycles.eq(cycles + 1)
        m.d.comb += regs.cycles.eq(cycles)

        blink = Signal(self.blink_bits)
        m.d.sync += blink.eq(blink + 1)
        m.d.comb += [
            self.led[0].eq(regs.led[0] | (regs.led[8] & blink[-1])),
            self.led[1].eq(regs.led[1]),
        ]

        pending = Signal()
        with m.If(regs.irq_set_wstb & regs.irq_set[0]):
            m.d.sync += pending.eq(1)
        with m.Elif(regs.irq_status_rstb):
            m.d.sync += pending.eq(0)
        m.d.comb += [regs.irq_status.eq(pending), self.irq.eq(pending & regs.irq_enable[0])]

        for k in self.links:
            rx, tx = getattr(self, f"s_axis_link{k}"), getattr(self, f"m_axis_link{k}")
            m.d.comb += [tx.valid.eq(rx.valid), rx.ready.eq(tx.ready),
                         tx.payload.data.eq(rx.payload.data), tx.payload.keep.eq(rx.payload.keep),
                         tx.payload.last.eq(rx.payload.last)]
            good = Signal(8, name=f"link{k}_good")
            bad = Signal(8, name=f"link{k}_bad")
            with m.If(rx.valid & rx.ready & rx.payload.last):
                with m.If(rx.payload.user):
                    m.d.sync += bad.eq(bad + 1)
                with m.Else():
                    m.d.sync += good.eq(good + 1)
            m.d.comb += [regs.link_rx[8 * k:8 * k + 8].eq(good),
                         regs.link_rx[8 * k + 16:8 * k + 24].eq(bad)]
        return m
