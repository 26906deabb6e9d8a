"""AMD Kria KR260 Robotics Starter Kit (K26 SOM, XCK26-SFVC784-2LV-C): PL resources.

An amaranth-boards-style platform. Every pin and IOSTANDARD comes from
``mcf_fpga/boards/kr260-facts.md`` (a copy of the project's sourced board facts), with
its conflicts resolved as that file recommends:

* ``sfp_tx_disable`` (Y10) is LVCMOS33 (taxi XDC, board.xml, Pmod XDCs on the
  same HDB bank), not LVCMOS18 as one older community XDC has it.
* The four Pmods are LVCMOS33 (Xilinx XDCs, board.xml, XTP685), not LVCMOS18
  as the taxi XDCs have them.
* Both PL PHYs are TI DP83867 (device trees: ``rgmii-id`` with internal RX/TX
  delays, MDIO addresses 2 and 3); board.xml's "Marvell M88E1111" is a
  copy-paste error. The PHY adds the RGMII clock delays, so the MAC drives
  TXC edge-aligned and samples RXC without IDELAY.

The PS (Zynq UltraScale+ MPSoC) is not a PL resource: the PS block design,
its ``pl_clk0`` and the fan's TTC0 EMIO route come from the Tcl written by
:mod:`boards.vivado`.
"""
from amaranth.build import Resource, Subsignal, Pins, PinsN, DiffPairs, Attrs, Clock
from amaranth.vendor import XilinxPlatform
from amaranth_boards.resources import LEDResources

__all__ = ["KR260Platform", "XCK26_RESOURCES", "PART", "BOARD_PART", "PMOD_PINS",
           "RGMII_PHYS"]

#: Part and board-part strings (facts file section 1).
PART = "xck26-sfvc784-2LV-c"
BOARD_PART = "xilinx.com:kr260_som:part0:1.1"
BOARD_CONNECTIONS = ("som240_2_connector xilinx.com:kr260_carrier:som240_2_connector:1.0 "
                     "som240_1_connector xilinx.com:kr260_carrier:som240_1_connector:1.0")

#: PL resources of the XCK26 (facts file section 5).
XCK26_RESOURCES = {"LUT": 117_120, "FF": 234_240, "DSP": 1_248, "BRAM36": 144, "URAM": 64}

LV18 = Attrs(IOSTANDARD="LVCMOS18")
LV33 = Attrs(IOSTANDARD="LVCMOS33")

#: Pmod pins 1..8 (tri_io[0..7]) per connector J2, J18, J19, J20 (facts 2e).
PMOD_PINS = {
    0: "H12 E10 D10 C11 B10 E12 D11 B11",      # PMOD1 (J2)
    1: "J11 J10 K13 K12 H11 G10 F12 F11",      # PMOD2 (J18)
    2: "AE12 AF12 AG10 AH10 AF11 AG11 AH12 AH11",  # PMOD3 (J19)
    3: "AC12 AD12 AE10 AF10 AD11 AD10 AA11 AA10",  # PMOD4 (J20)
}

#: The two PL RGMII PHYs (facts 2b). Number 0 = "PL GEM2" (U79, MDIO addr 2),
#: number 1 = "PL GEM3" (U80, MDIO addr 3).
RGMII_PHYS = {
    0: dict(txc="A2", td="E1 D1 F2 E2", tx_ctl="F1", rxc="D4", rd="A1 B3 A3 B4", rx_ctl="A4",
            mdc="G3", mdio="F3", reset_n="B1", led="E4 E3 C1", mdio_addr=2),
    1: dict(txc="J1", td="U9 V9 U8 V8", tx_ctl="Y8", rxc="K4", rd="H1 K2 J2 H4", rx_ctl="H3",
            mdc="R8", mdio="T8", reset_n="K1", led="R7 T7 L1", mdio_addr=3),
}


def _rgmii_resource(number, p):
    # TX pins: the Xilinx XDC uses SLEW SLOW DRIVE 4, taxi SLEW FAST DRIVE 12 at
    # 125 MHz DDR; we take taxi's (it runs the MAC at 1 Gb/s on this board).
    tx = Attrs(IOSTANDARD="LVCMOS18", SLEW="FAST", DRIVE="12")
    return Resource("rgmii", number,
        Subsignal("txc",     Pins(p["txc"], dir="o"), tx),
        Subsignal("td",      Pins(p["td"], dir="o"), tx),
        Subsignal("tx_ctl",  Pins(p["tx_ctl"], dir="o"), tx),
        Subsignal("rxc",     Pins(p["rxc"], dir="i"), Clock(125e6), LV18),
        Subsignal("rd",      Pins(p["rd"], dir="i"), LV18),
        Subsignal("rx_ctl",  Pins(p["rx_ctl"], dir="i"), LV18),
        Subsignal("mdc",     Pins(p["mdc"], dir="o"), LV18),
        Subsignal("mdio",    Pins(p["mdio"], dir="io"), LV18),
        Subsignal("reset",   PinsN(p["reset_n"], dir="o"), LV18),
        Subsignal("phy_led", Pins(p["led"], dir="i"), LV18),
    )


class KR260Platform(XilinxPlatform):
    """KR260 carrier + K26 SOM programmable-logic resources.

    Resources: ``clk25`` 0/1 (HPA_CLK0P C3, HPB_CLK0P L3), ``led`` 0/1 (UF1/UF2),
    ``fan`` (``fan_en_b``, active-low A12), ``sfp`` (GTH quad 224 lane 2 serial
    pins, 156.25 MHz ``sfp_refclk``, control pins, I2C, LEDs), ``rgmii`` 0/1
    (DP83867 PHYs with MDIO, reset and PHY LEDs), ``pmod`` 0..3 (8 pins each),
    ``rpi_i2c``.
    """
    device = "xck26"
    package = "sfvc784"
    speed = "2LV-c"

    default_clk = "clk25"
    resources = [
        Resource("clk25", 0, Pins("C3", dir="i"), Clock(25e6), LV18),   # HPA_CLK0P, som240_1_a6
        Resource("clk25", 1, Pins("L3", dir="i"), Clock(25e6), LV18),   # HPB_CLK0P, som240_2_d18

        *LEDResources(pins="F8 E8", attrs=LV18),                          # UF1, UF2
        # fan_en_b: low = fan on. Normally driven from the PS TTC0 EMIO route.
        Resource("fan", 0, PinsN("A12", dir="o"), LV33),

        # SFP+ cage: GTH quad 224 lane 2 (GTHE4_CHANNEL_X1Y12) and U90 refclk.
        Resource("sfp_refclk", 0, DiffPairs("Y6", "Y5", dir="i"), Clock(156.25e6)),
        Resource("sfp", 0,
            Subsignal("rx",         DiffPairs("T2", "T1", dir="i")),
            Subsignal("tx",         DiffPairs("R4", "R3", dir="o")),
            Subsignal("tx_disable", Pins("Y10", dir="o"), LV33),
            Subsignal("tx_fault",   Pins("A10", dir="i"), LV33),
            Subsignal("rx_los",     Pins("J12", dir="i"), LV33),
            Subsignal("mod_abs",    Pins("W10", dir="i"), LV33),
            Subsignal("scl",        Pins("AB11", dir="io"), LV33),
            Subsignal("sda",        Pins("AC11", dir="io"), LV33),
            Subsignal("led",        Pins("G8 F7", dir="o"), LV18),
        ),

        *(_rgmii_resource(n, p) for n, p in RGMII_PHYS.items()),

        *(Resource("pmod", n, Pins(pins, dir="io"), LV33) for n, pins in PMOD_PINS.items()),

        # Raspberry Pi header I2C (4mb_4pmod XDC).
        Resource("rpi_i2c", 0,
            Subsignal("scl", Pins("AE14", dir="io")),
            Subsignal("sda", Pins("AE15", dir="io")),
            Attrs(IOSTANDARD="LVCMOS33", PULLUP="TRUE")),
    ]
    connectors = []

    @property
    def board_part(self):
        return BOARD_PART
