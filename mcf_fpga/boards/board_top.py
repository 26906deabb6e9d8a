"""The KR260 PL top: the PS block design (with the node inside) plus the board I/O.

Structure (see docs/boards.md)::

    kr260_top (Amaranth, this file; its ports are the board pins of boards.kr260)
    ├── mcf_ps_wrapper (Vivado block design written by boards.vivado)
    │   ├── zynq_ultra_ps_e (KR260 SOM preset)  HPM0_FPD → SmartConnect → node.s_axi
    │   ├── node (RTL module reference)          node.m_axi_hp<k> → S_AXI_HP<k>_FPD
    │   └── TTC0 EMIO wave 2 → fan_en_b,  pl_clk0 (+ reset) → node clock, node.irq → pl_ps_irq0
    ├── per RGMII PHY: RGMIILink = TxFrameFIFO (store and forward) → RGMIIMac → AsyncFIFO,
    │   between pl_clk0 (node) and pl_clk1 = 125 MHz (MAC TX) / RXC (MAC RX)
    └── SFP+ (only if the node has link 2): TxFrameFIFO → xxv_ethernet 10GBASE-R on
        GTH X1Y12 → RxFrameFIFO, between pl_clk0 and the subsystem's tx/rx clocks

:func:`bd_ports` lists the block design's external ports; the Tcl writer and
the Instance here both use it, so they cannot disagree.
"""
from amaranth import Module, Signal, ClockDomain, Instance, Elaboratable, Cat, Const, DomainRenamer
from amaranth.lib import io, wiring
from amaranth.lib.cdc import ResetSynchronizer

from mcf_fpga.hdl.eth.rgmii_link import RGMIILink
from mcf_fpga.hdl.eth.tx_frame_fifo import TxFrameFIFO
from mcf_fpga.hdl.eth.rx_frame_fifo import RxFrameFIFO
from .top import TopPorts

__all__ = ["KR260Top", "bd_ports", "BD_NAME", "TOP_NAME", "XXV_NAME", "XXV_PORTS"]

BD_NAME = "mcf_ps"
MDIO_GPIO_BITS = 4
TOP_NAME = "kr260_top"
XXV_NAME = "xxv_eth_sfp"
#: ports of the xxv_ethernet instance we use (PG210 names, single core "_0"): dir, width
XXV_PORTS = {
    "gt_rxp_in_0": ("I", 1), "gt_rxn_in_0": ("I", 1), "gt_txp_out_0": ("O", 1),
    "gt_txn_out_0": ("O", 1), "gt_refclk_p": ("I", 1), "gt_refclk_n": ("I", 1),
    "sys_reset": ("I", 1), "dclk": ("I", 1), "tx_clk_out_0": ("O", 1), "rx_clk_out_0": ("O", 1),
    "rx_core_clk_0": ("I", 1), "txoutclksel_in_0": ("I", 3), "rxoutclksel_in_0": ("I", 3),
    "gtwiz_reset_tx_datapath_0": ("I", 1), "gtwiz_reset_rx_datapath_0": ("I", 1),
    "rx_reset_0": ("I", 1), "tx_reset_0": ("I", 1), "ctl_tx_enable_0": ("I", 1),
    "ctl_rx_enable_0": ("I", 1), "ctl_tx_send_idle_0": ("I", 1), "ctl_tx_send_lfi_0": ("I", 1),
    "ctl_tx_send_rfi_0": ("I", 1), "tx_preamblein_0": ("I", 56), "stat_rx_status_0": ("O", 1),
    "tx_axis_tdata_0": ("I", 64), "tx_axis_tkeep_0": ("I", 8), "tx_axis_tlast_0": ("I", 1),
    "tx_axis_tvalid_0": ("I", 1), "tx_axis_tuser_0": ("I", 1), "tx_axis_tready_0": ("O", 1),
    "rx_axis_tdata_0": ("O", 64), "rx_axis_tkeep_0": ("O", 8), "rx_axis_tlast_0": ("O", 1),
    "rx_axis_tvalid_0": ("O", 1), "rx_axis_tuser_0": ("O", 1),
}


def bd_ports(ports: TopPorts):
    """External ports of the block design: list of ``(name, direction 'I'|'O', width)``."""
    out = [("pl_clk0", "O", 1), ("pl_clk1", "O", 1), ("pl_reset", "O", 1), ("fan_en_b", "O", 1),
           # PS EMIO GPIO 0..3 = MDC0, MDIO0, MDC1, MDIO1 (Linux bit-bangs the PHYs' MDIO)
           ("mdio_gpio_o", "O", MDIO_GPIO_BITS), ("mdio_gpio_t", "O", MDIO_GPIO_BITS),
           ("mdio_gpio_i", "I", MDIO_GPIO_BITS)]
    if ports.led_width:
        out.append(("led", "O", ports.led_width))
    for k in ports.links:
        w = 8 if k < 2 else 64
        out += [(f"m_axis_link{k}_tdata", "O", w), (f"m_axis_link{k}_tkeep", "O", w // 8),
                (f"m_axis_link{k}_tlast", "O", 1), (f"m_axis_link{k}_tvalid", "O", 1),
                (f"m_axis_link{k}_tready", "I", 1),
                (f"s_axis_link{k}_tdata", "I", w), (f"s_axis_link{k}_tkeep", "I", w // 8),
                (f"s_axis_link{k}_tlast", "I", 1), (f"s_axis_link{k}_tuser", "I", 1),
                (f"s_axis_link{k}_tvalid", "I", 1), (f"s_axis_link{k}_tready", "O", 1)]
    return out


class KR260Top(Elaboratable):
    """Board top for ``ports`` (a :class:`boards.top.TopPorts`). Requests every PL resource
    of the platform so the XDC constrains every pin, unused ones included."""

    def __init__(self, ports: TopPorts, *, fifo_depth=2048):
        if fifo_depth < 64 or fifo_depth & (fifo_depth - 1):
            raise ValueError(f"fifo_depth must be a power of two >= 64, got {fifo_depth}")
        self.ports = ports
        self.fifo_depth = fifo_depth

    def elaborate(self, platform):
        m = Module()
        p = self.ports
        bd = {name: Signal(w, name=f"bd_{name}") for name, _, w in bd_ports(p)}
        inst = {}
        for name, d, _ in bd_ports(p):
            inst[("o_" if d == "O" else "i_") + name] = bd[name]
        m.submodules.ps = Instance(f"{BD_NAME}_wrapper", **inst)

        cd_sync, cd_tx = ClockDomain("sync"), ClockDomain("tx")
        m.domains += [cd_sync, cd_tx]
        m.d.comb += [cd_sync.clk.eq(bd["pl_clk0"]), cd_sync.rst.eq(bd["pl_reset"]),
                     cd_tx.clk.eq(bd["pl_clk1"])]
        m.submodules.tx_rst = ResetSynchronizer(bd["pl_reset"], domain="tx")

        def out_pin(pins, value, name):
            m.submodules[name] = b = io.Buffer("o", pins)
            m.d.comb += b.o.eq(value)

        # user LEDs: the node's, else LED0 shows the PL clock is running (1.3 s blink)
        heartbeat = Signal(27)
        m.d.sync += heartbeat.eq(heartbeat + 1)
        for n in range(2):
            value = bd["led"][n] if n < p.led_width else (heartbeat[-1] if n == 0 else 0)
            out_pin(platform.request("led", n, dir="-"), value, f"led{n}")
        # fan: the pin follows the PS TTC0 wave (pin = wave); the resource is active-low
        out_pin(platform.request("fan", 0, dir="-"), ~bd["fan_en_b"], "fan")
        # Unused pins still get a buffer, so they are top-level ports with their constraints:
        # 25 MHz inputs (the node runs on pl_clk0), Pmods and RPi I2C released (oe = 0).
        for n in range(2):
            m.submodules[f"clk25_{n}"] = io.Buffer("i", platform.request("clk25", n, dir="-"))
        for n in range(4):
            m.submodules[f"pmod{n}"] = io.Buffer("io", platform.request("pmod", n, dir="-"))
        rpi = platform.request("rpi_i2c", 0, dir="-")
        m.submodules.rpi_scl = io.Buffer("io", rpi.scl)
        m.submodules.rpi_sda = io.Buffer("io", rpi.sda)

        # RGMII PHYs: one RGMIILink each (frame FIFOs + MAC), RX domain rx<k> clocked by RXC
        for k in range(2):
            pins = platform.request("rgmii", k, dir="-")
            dom = f"rx{k}"
            m.domains += ClockDomain(dom)
            m.submodules[f"{dom}_rst"] = ResetSynchronizer(bd["pl_reset"], domain=dom)
            link = RGMIILink(pins, self.fifo_depth, define_rx_domain=False)
            m.submodules[f"link{k}"] = DomainRenamer({"rx": dom})(link)
            out_pin(pins.reset, bd["pl_reset"], f"phy{k}_reset")   # PHY held in reset with the PL
            # MDIO: the PS bit-bangs it through EMIO GPIO (mcf_fpga/host/board/mdio.py): bit 2k = MDC,
            # bit 2k+1 = MDIO (tri-state: gpio_t = 1 releases the line)
            gpo, gpt, gpi = bd["mdio_gpio_o"], bd["mdio_gpio_t"], bd["mdio_gpio_i"]
            out_pin(pins.mdc, gpo[2 * k], f"phy{k}_mdc")
            m.submodules[f"phy{k}_mdio"] = mdio = io.Buffer("io", pins.mdio)
            m.d.comb += [mdio.o.eq(gpo[2 * k + 1]), mdio.oe.eq(~gpt[2 * k + 1]),
                         gpi[2 * k + 1].eq(mdio.i), gpi[2 * k].eq(gpo[2 * k])]
            m.submodules[f"phy{k}_led"] = io.Buffer("i", pins.phy_led)  # PHY-driven LEDs: unused
            if k in p.links:
                self._from_bd(m, bd, f"m_axis_link{k}", link.tx_i)
                self._to_bd(m, bd, f"s_axis_link{k}", link.rx_o)
            else:
                m.d.comb += link.rx_o.ready.eq(1)      # no node link: receive and discard

        # SFP+
        # GTH serial pins and refclk exist as ports only with the xxv_ethernet (an I/O buffer
        # on an MGT pin is illegal), i.e. only when the node has link 2.
        sfp = platform.request("sfp", 0, dir="-")
        use_sfp = 2 in p.links
        out_pin(sfp.tx_disable, 0 if use_sfp else 1, "sfp_tx_disable")   # laser off when unused
        m.submodules.sfp_los = los = io.Buffer("i", sfp.rx_los)
        m.submodules.sfp_abs = mod_abs = io.Buffer("i", sfp.mod_abs)
        m.submodules.sfp_fault = fault = io.Buffer("i", sfp.tx_fault)
        for name in ("scl", "sda"):
            m.submodules[f"sfp_{name}"] = io.Buffer("io", getattr(sfp, name))   # released
        link_up = Signal()
        if use_sfp:
            self._sfp(m, sfp, platform.request("sfp_refclk", 0, dir="-"), bd, link_up)
        out_pin(sfp.led, Cat(~los.i & ~mod_abs.i, link_up | fault.i), "sfp_led")
        return m

    @staticmethod
    def _from_bd(m, bd, prefix, st):
        """Drive stream ``st`` from the block-design port group ``prefix`` (the node's output)."""
        m.d.comb += [st.payload.data.eq(bd[f"{prefix}_tdata"]), st.payload.keep.eq(bd[f"{prefix}_tkeep"]),
                     st.payload.last.eq(bd[f"{prefix}_tlast"]), st.valid.eq(bd[f"{prefix}_tvalid"]),
                     bd[f"{prefix}_tready"].eq(st.ready)]

    @staticmethod
    def _to_bd(m, bd, prefix, st):
        """Drive the block-design port group ``prefix`` (the node's input) from stream ``st``."""
        m.d.comb += [bd[f"{prefix}_tdata"].eq(st.payload.data), bd[f"{prefix}_tkeep"].eq(st.payload.keep),
                     bd[f"{prefix}_tlast"].eq(st.payload.last), bd[f"{prefix}_tuser"].eq(st.payload.user),
                     bd[f"{prefix}_tvalid"].eq(st.valid), st.ready.eq(bd[f"{prefix}_tready"])]

    def _sfp(self, m, sfp, refclk, bd, link_up):
        """xxv_ethernet (10G/25G Ethernet Subsystem, MAC+PCS/PMA 64-bit, created by the Tcl)."""
        rx_clk, tx_clk = Signal(), Signal()
        conn = {
            "gt_rxp_in_0": sfp.rx.p, "gt_rxn_in_0": sfp.rx.n, "gt_txp_out_0": sfp.tx.p,
            "gt_txn_out_0": sfp.tx.n, "gt_refclk_p": refclk.p, "gt_refclk_n": refclk.n,
            "sys_reset": bd["pl_reset"], "dclk": bd["pl_clk0"],
            "tx_clk_out_0": tx_clk, "rx_clk_out_0": rx_clk, "rx_core_clk_0": rx_clk,
            "txoutclksel_in_0": Const(0b101, 3), "rxoutclksel_in_0": Const(0b101, 3),
            "gtwiz_reset_tx_datapath_0": 0, "gtwiz_reset_rx_datapath_0": 0,
            "rx_reset_0": 0, "tx_reset_0": 0, "ctl_tx_enable_0": 1, "ctl_rx_enable_0": 1,
            "ctl_tx_send_idle_0": 0, "ctl_tx_send_lfi_0": 0, "ctl_tx_send_rfi_0": 0,
            "tx_preamblein_0": Const(0, 56), "stat_rx_status_0": link_up,
            "tx_axis_tuser_0": 0,
        }
        # the Ethernet Subsystem's streams run on its own clocks: cross to/from pl_clk0
        cd_stx, cd_srx = ClockDomain("sfp_tx"), ClockDomain("sfp_rx")
        m.domains += [cd_stx, cd_srx]
        m.d.comb += [cd_stx.clk.eq(tx_clk), cd_srx.clk.eq(rx_clk)]
        m.submodules.sfp_tx_rst = ResetSynchronizer(bd["pl_reset"], domain="sfp_tx")
        m.submodules.sfp_rx_rst = ResetSynchronizer(bd["pl_reset"], domain="sfp_rx")
        m.submodules.txfifo2 = txf = TxFrameFIFO(64, 512, "sync", "sfp_tx")
        m.submodules.rxfifo2 = rxf = RxFrameFIFO(64, 512, "sfp_rx", "sync")
        self._from_bd(m, bd, "m_axis_link2", txf.i)
        self._to_bd(m, bd, "s_axis_link2", rxf.o)
        for f in ("tdata", "tkeep", "tlast"):
            conn[f"tx_axis_{f}_0"] = getattr(txf.o.payload, f[1:])
            conn[f"rx_axis_{f}_0"] = getattr(rxf.i.payload, f[1:])
        conn["tx_axis_tvalid_0"] = txf.o.valid
        conn["tx_axis_tready_0"] = txf.o.ready
        conn["rx_axis_tvalid_0"] = rxf.i.valid
        conn["rx_axis_tuser_0"] = rxf.i.payload.user
        kw = {}
        for name, value in conn.items():
            d, _ = XXV_PORTS[name]
            kw[{"I": "i_", "O": "o_", "IO": "io_"}[d] + name] = value
        m.submodules.xxv = Instance(XXV_NAME, **kw)
