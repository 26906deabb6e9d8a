"""MDIO (IEEE 802.3 clause 22) bit-banged from Linux over the PS EMIO GPIO lines.

The KR260 block design wires EMIO GPIO 0..3 to MDC0, MDIO0, MDC1, MDIO1 of the
two PL PHYs (mcf_fpga/boards/board_top.py). :class:`MDIOBitBang` drives a *pin set*
(``mdc(v)``, ``mdio_out(v)`` with ``None`` = release, ``mdio_in()``) through
clause-22 frames: 32-bit preamble of ones, ST 01, OP (10 read / 01 write), PHY
address, register address, turnaround, 16 data bits MSB first; data is written
while MDC is low (the PHY samples it on the rising edge) and read after the
falling edge (the PHY drives each bit after a rising edge), as Linux's
mdio-bitbang does. ``mmd_read``/``mmd_write`` use the clause-22 indirect MMD access
(REGCR 0x0D / ADDAR 0x0E). :func:`configure_dp83867_rgmii_delays` sets the
DP83867's internal RGMII clock delays as Xilinx's KR260 device trees do
(``ti,rx/tx-internal-delay = <0x4>``), which the PL MAC relies on.

:class:`SysfsGPIOPins` is the on-board pin set: the ZynqMP GPIO controller's
EMIO lines start at offset 78.
"""
import os

__all__ = ["MDIOBitBang", "SysfsGPIOPins", "configure_dp83867_rgmii_delays", "EMIO_BASE"]

EMIO_BASE = 78            # first EMIO line of the zynqmp_gpio controller
REGCR, ADDAR = 0x0D, 0x0E
DP83867_DEVAD = 0x1F
DP83867_RGMIICTL, DP83867_RGMIIDCTL = 0x0032, 0x0086


def _check(name, value, bits):
    if not isinstance(value, int) or not 0 <= value < (1 << bits):
        raise ValueError(f"MDIO {name} {value!r} must be in 0..{(1 << bits) - 1}")


class MDIOBitBang:
    def __init__(self, pins):
        self.pins = pins

    def _put_bit(self, v):
        self.pins.mdio_out(v)          # set while MDC is low, PHY samples on the rising edge
        self.pins.mdc(1)
        self.pins.mdc(0)

    def _get_bit(self):
        self.pins.mdc(1)               # PHY drives the next bit after this rising edge
        self.pins.mdc(0)
        return self.pins.mdio_in() & 1  # stable after the falling edge

    def _send(self, value, nbits):
        for i in reversed(range(nbits)):
            self._put_bit((value >> i) & 1)

    def _header(self, op, phy, reg):
        self.pins.mdc(0)
        self._send(0xFFFF_FFFF, 32)                         # preamble
        self._send((0b01 << 12) | (op << 10) | (phy << 5) | reg, 14)

    def read(self, phy, reg):
        """Clause-22 read; raises OSError if no PHY drives the turnaround bit low."""
        _check("PHY address", phy, 5)
        _check("register", reg, 5)
        self._header(0b10, phy, reg)
        self.pins.mdio_out(None)                            # turnaround: release the line
        ta = self._get_bit()
        value = 0
        for _ in range(16):
            value = (value << 1) | self._get_bit()
        self._get_bit()                                     # idle clock
        if ta != 0:
            raise OSError(f"no PHY answered at MDIO address {phy}")
        return value

    def write(self, phy, reg, value):
        _check("PHY address", phy, 5)
        _check("register", reg, 5)
        _check("value", value, 16)
        self._header(0b01, phy, reg)
        self._send(0b10, 2)                                 # turnaround
        self._send(value, 16)
        self.pins.mdio_out(None)
        self._get_bit()                                     # idle clock

    def mmd_read(self, phy, devad, reg):
        self.write(phy, REGCR, devad)
        self.write(phy, ADDAR, reg)
        self.write(phy, REGCR, 0x4000 | devad)
        return self.read(phy, ADDAR)

    def mmd_write(self, phy, devad, reg, value):
        self.write(phy, REGCR, devad)
        self.write(phy, ADDAR, reg)
        self.write(phy, REGCR, 0x4000 | devad)
        self.write(phy, ADDAR, value)


def configure_dp83867_rgmii_delays(mdio, phy, rx_delay=0x4, tx_delay=0x4):
    """Enable the DP83867's RGMII RX/TX clock delays with the given codes (0..15)."""
    _check("rx_delay", rx_delay, 4)
    _check("tx_delay", tx_delay, 4)
    ctl = mdio.mmd_read(phy, DP83867_DEVAD, DP83867_RGMIICTL)
    mdio.mmd_write(phy, DP83867_DEVAD, DP83867_RGMIICTL, ctl | 0b11)     # TX and RX clock delay on
    mdio.mmd_write(phy, DP83867_DEVAD, DP83867_RGMIIDCTL, (tx_delay << 4) | rx_delay)
    return mdio.mmd_read(phy, DP83867_DEVAD, DP83867_RGMIIDCTL)


class SysfsGPIOPins:
    """MDC/MDIO on two EMIO GPIO lines through /sys/class/gpio (needs root)."""

    def __init__(self, mdc_line, mdio_line, sysfs="/sys/class/gpio", label="zynqmp_gpio"):
        base = None
        if os.path.isdir(sysfs):
            for chip in sorted(os.listdir(sysfs)):
                if chip.startswith("gpiochip"):
                    try:
                        with open(os.path.join(sysfs, chip, "label")) as f:
                            if f.read().strip() == label:
                                with open(os.path.join(sysfs, chip, "base")) as fb:
                                    base = int(fb.read())
                    except OSError:
                        continue
        if base is None:
            raise OSError(f"no GPIO controller labelled {label!r} under {sysfs}")
        self.sysfs = sysfs
        self.mdc_n = base + EMIO_BASE + mdc_line
        self.mdio_n = base + EMIO_BASE + mdio_line
        for n in (self.mdc_n, self.mdio_n):
            if not os.path.isdir(os.path.join(sysfs, f"gpio{n}")):
                with open(os.path.join(sysfs, "export"), "w") as f:
                    f.write(str(n))
        self._set(self.mdc_n, "direction", "out")
        self._dir = None

    def _set(self, n, attr, value):
        with open(os.path.join(self.sysfs, f"gpio{n}", attr), "w") as f:
            f.write(value)

    def mdc(self, v):
        self._set(self.mdc_n, "value", str(int(v)))

    def mdio_out(self, v):
        if v is None:
            if self._dir != "in":
                self._set(self.mdio_n, "direction", "in")
                self._dir = "in"
        else:
            self._set(self.mdio_n, "direction", "high" if v else "low")
            self._dir = "out"

    def mdio_in(self):
        with open(os.path.join(self.sysfs, f"gpio{self.mdio_n}", "value")) as f:
            return int(f.read().strip())
