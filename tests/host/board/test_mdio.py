"""MDIO bit-bang against an independent clause-22 PHY model (pin level) with MMD indirect access."""
import pytest

from mcf_fpga.host.board.mdio import MDIOBitBang, configure_dp83867_rgmii_delays, SysfsGPIOPins


class FakePHY:
    """MDIO slave: samples MDIO on MDC rising edges, drives read data after rising edges.
    Registers: clause-22 space plus an MMD space behind REGCR/ADDAR (IEEE 802.3 22.2.4.3.11)."""

    def __init__(self, addr):
        self.addr, self.regs, self.mmd = addr, {0x02: 0x2000, 0x03: 0xA231}, {}
        self.bits, self.state, self.out, self.host = [], "frame", None, 1
        self.mmd_dev, self.mmd_addr, self.mdc_level = 0, 0, 0

    # pin interface seen by the host
    def mdc(self, v):
        if v and not self.mdc_level:
            self._rise()
        self.mdc_level = v

    def mdio_out(self, v):
        self.host = v

    def mdio_in(self):
        line = [x for x in (self.host, self.out) if x is not None]
        assert len(line) <= 1 or line[0] == line[1], "bus contention"
        return line[0] if line else 1           # pulled up

    def _rise(self):
        if self.state == "read_data":
            self.out = (self.rdata >> 15) & 1 if self.rcount < 16 else None
            self.rdata = (self.rdata << 1) & 0xFFFF
            self.rcount += 1
            if self.rcount > 16:
                self.state, self.bits, self.out = "frame", [], None
            return
        self.bits.append(1 if self.host is None else self.host)
        b = self.bits
        # wait for >= 32 ones then ST=01
        if len(b) >= 34 and b[-34:-2] == [1] * 32 and b[-2:] == [0, 1] and self.state == "frame":
            self.state, self.bits = "hdr", []
            return
        if self.state == "hdr" and len(b) == 12:
            op = b[0] << 1 | b[1]
            phy = int("".join(map(str, b[2:7])), 2)
            reg = int("".join(map(str, b[7:12])), 2)
            self.op, self.reg, self.mine = op, reg, phy == self.addr
            self.bits = []
            if op == 0b10 and self.mine:
                self.state, self.rcount = "read_ta", 0
            else:
                self.state = "write"
            return
        if self.state == "read_ta":
            assert self.host is None, "host drives MDIO during read turnaround"
            self.state, self.rdata, self.rcount, self.out = "read_data", self._read(self.reg), 0, 0
            return
        if self.state == "write" and len(b) == 18:
            if self.mine and self.op == 0b01:
                assert b[:2] == [1, 0], "bad write turnaround"
                self._write(self.reg, int("".join(map(str, b[2:])), 2))
            self.state, self.bits = "frame", []

    def _read(self, reg):
        if reg == 0x0E and self.mmd_func:
            return self.mmd.get((self.mmd_dev, self.mmd_addr), 0)
        return self.regs.get(reg, 0)

    def _write(self, reg, val):
        if reg == 0x0D:
            self.mmd_dev, self.mmd_func = val & 0x1F, val >> 14
        elif reg == 0x0E:
            if self.mmd_func:
                self.mmd[(self.mmd_dev, self.mmd_addr)] = val
            else:
                self.mmd_addr = val
        else:
            self.regs[reg] = val

    mmd_func = 0


def test_clause22_read_write_roundtrip():
    phy = FakePHY(2)
    m = MDIOBitBang(phy)
    assert m.read(2, 0x03) == 0xA231
    m.write(2, 0x09, 0x1234)
    assert phy.regs[0x09] == 0x1234
    assert m.read(2, 0x09) == 0x1234
    m.write(3, 0x09, 0xFFFF)                 # another PHY address: ignored
    assert phy.regs[0x09] == 0x1234
    with pytest.raises(OSError, match="no PHY answered at MDIO address 3"):
        m.read(3, 0x03)                      # nobody drives the turnaround: pulled-up line
    assert m.read(2, 0x02) == 0x2000         # and the bus still works afterwards


def test_dp83867_delay_configuration_via_mmd():
    phy = FakePHY(3)
    phy.mmd[(0x1F, 0x32)] = 0x00D0
    m = MDIOBitBang(phy)
    assert configure_dp83867_rgmii_delays(m, 3, rx_delay=0x4, tx_delay=0x4) == 0x44
    assert phy.mmd[(0x1F, 0x32)] == 0x00D3 and phy.mmd[(0x1F, 0x86)] == 0x44


def test_bad_arguments_touch_no_pin():
    class NoPins:
        def __getattr__(self, name):
            raise AssertionError("pin touched")
    m = MDIOBitBang(NoPins())
    for args in ((32, 0), (0, 32), (-1, 0)):
        with pytest.raises(ValueError, match="MDIO"):
            m.read(*args)
    with pytest.raises(ValueError, match="value"):
        m.write(0, 0, 1 << 16)


def test_sysfs_pins_need_the_zynqmp_controller(tmp_path):
    with pytest.raises(OSError, match="zynqmp_gpio"):
        SysfsGPIOPins(0, 1, sysfs=str(tmp_path))
