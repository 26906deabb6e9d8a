"""Pin table read from mcf_fpga/boards/kr260-facts.md (the sourced board facts), independent of mcf_fpga/boards/kr260.py.

``facts_pins()`` returns ``{package_pin: iostandard or None}`` for every PL pin
the facts file lists in section 2 (None for GTH serial/refclk pins, which have
no IOSTANDARD), with its conflicts resolved as the file recommends (the tables
already carry the recommended standard). Excluded, with reason: the carrier
I2C ``iic0_main`` pins G11/F10, for which the file gives no IOSTANDARD.
"""
import os
import re

FACTS = os.path.join(os.path.dirname(__file__), "..", "..", "boards", "kr260-facts.md")
PIN = r"[A-Z]{1,2}[0-9]{1,2}"
EXCLUDED = {"G11", "F10"}


def _sections(text):
    sec = {}
    cur = None
    for line in text.splitlines():
        m = re.match(r"### (2[a-e])\.", line)
        if m:
            cur = m.group(1)
            sec[cur] = []
            continue
        if line.startswith("## ") and cur:
            cur = None if not line.startswith("## 2") else cur
        if cur:
            sec[cur].append(line)
    return sec


def _rows(lines):
    for line in lines:
        if line.startswith("|") and not re.match(r"\|\s*-", line):
            yield [c.strip() for c in line.strip().strip("|").split("|")]


def facts_pins(path=FACTS):
    text = open(path).read()
    sec = _sections(text)
    pins = {}

    def add(pin, std):
        assert pin not in pins or pins[pin] == std, f"{pin} listed twice with different standards"
        pins[pin] = std

    # 2a SFP: table, pin column 2 ("T2 / T1", "Y10, LVCMOS33")
    for row in list(_rows(sec["2a"]))[1:]:
        std = re.search(r"LVCMOS\d\d", row[1])
        for p in re.findall(rf"\b{PIN}\b", re.sub(r"LVCMOS\d\d", "", row[1])):
            add(p, std.group(0) if std else None)
    # 2b RGMII: "all LVCMOS18" (heading); columns 2 and 3
    heading_std = re.search(r"all (LVCMOS\d\d)", text[text.index("### 2b."):]).group(1)
    for row in list(_rows(sec["2b"]))[1:]:
        for cell in row[1:3]:
            for p in re.findall(rf"\b{PIN}\b", re.sub(r"\(.*?\)", "", cell)):
                add(p, heading_std)
    # 2c clocks: "**C3**, LVCMOS18"
    for line in sec["2c"]:
        for p, std in re.findall(rf"\*\*({PIN})\*\*, (LVCMOS\d\d)", line):
            add(p, std)
    # 2d LEDs ("**F8** (...) and **E8** (...), LVCMOS18") and fan ("= A12, LVCMOS33")
    for line in sec["2d"]:
        std = re.search(r"LVCMOS\d\d", line)
        if "User LEDs" in line:
            for p in re.findall(rf"\*\*({PIN})\*\*", line):
                add(p, std.group(0))
        m = re.search(rf"fan_en_b` = ({PIN}), (LVCMOS\d\d)", line)
        if m:
            add(m.group(1), m.group(2))
    # 2e Pmods: table, every pin LVCMOS33 (the recommended resolution); RPi I2C bullet
    pmod_std = re.search(r"Use (LVCMOS\d\d)\.", "\n".join(sec["2e"])).group(1)
    for row in list(_rows(sec["2e"]))[1:]:
        for p in re.findall(rf"\b{PIN}\b", row[1]):
            add(p, pmod_std)
    for line in sec["2e"]:
        if "RPi-header I2C" in line:
            std = re.search(r"LVCMOS\d\d", line).group(0)
            for p in re.findall(rf"\b({PIN}) \((?:SCL|SDA)\)", line):
                add(p, std)
    for p in EXCLUDED:
        pins.pop(p, None)
    return pins
