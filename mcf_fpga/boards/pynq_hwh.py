"""The register map in a PYNQ hardware handoff (``.hwh``), as ``pynq.pl_server.hwh_parser`` reads it.

Vivado writes ``<app>.hwh`` with the block design (``MODULE`` per cell, the PS's ``MEMORYMAP``
of ``MEMRANGE``s), but a module-reference cell carries no registers. :func:`hwh_with_registers`
returns that file with the node cell's registers added under its ``MODULE``::

    <ADDRESSBLOCKS>
      <ADDRESSBLOCK ACCESS="read-write" INTERFACE="s_axi" NAME="reg0" RANGE="65536" USAGE="register">
        <REGISTERS>
          <REGISTER NAME="engine_status">
            <PROPERTY NAME="DESCRIPTION" VALUE="..."/>   ADDRESS_OFFSET, SIZE (bits), ACCESS,
            ...                                          IS_ENABLED, RESET_VALUE
            <FIELDS><FIELD NAME="busy"> DESCRIPTION, ADDRESS_OFFSET, ACCESS, BIT_OFFSET,
                                        BIT_WIDTH </FIELD> ...</FIELDS>
          </REGISTER> ...

so ``Overlay(...).ip_dict["node"]["registers"]`` (and PYNQ's ``RegisterMap`` on the driver)
lists every register of ``spec.regmap.RegisterMap.flat`` by name. The cell must be the target
of one of the PS's ``MEMRANGE``s (the address the block design assigned); anything else is a
``ValueError`` naming what is missing.
"""
import xml.etree.ElementTree as ET

from .ip.component_xml import ADDRESS_BLOCK
from mcf_fpga.spec.regmap import DATA_BITS

__all__ = ["hwh_with_registers", "hwh_registers"]


def _prop(parent, name, value):
    ET.SubElement(parent, "PROPERTY", {"NAME": name, "VALUE": str(value)})


def hwh_registers(regmap, interface="s_axi") -> ET.Element:
    """The ``ADDRESSBLOCKS`` element of ``regmap`` (see the module docstring)."""
    blocks = ET.Element("ADDRESSBLOCKS")
    ab = ET.SubElement(blocks, "ADDRESSBLOCK", {"ACCESS": "read-write", "INTERFACE": interface,
                                               "NAME": ADDRESS_BLOCK, "RANGE": str(regmap.size),
                                               "USAGE": "register"})
    regs = ET.SubElement(ab, "REGISTERS")
    for fr in regmap.flat():
        r = fr.register
        e = ET.SubElement(regs, "REGISTER", {"NAME": fr.name})
        _prop(e, "DESCRIPTION", r.doc or f"{fr.window.name} register {r.name}")
        _prop(e, "ADDRESS_OFFSET", f"{fr.address:#x}")
        _prop(e, "SIZE", DATA_BITS)
        _prop(e, "ACCESS", r.access.ipxact)
        _prop(e, "IS_ENABLED", "true")
        _prop(e, "RESET_VALUE", f"{r.reset:#x}")
        fields = ET.SubElement(e, "FIELDS")
        for f in r.bit_fields():
            fe = ET.SubElement(fields, "FIELD", {"NAME": f.name})
            _prop(fe, "DESCRIPTION", f.doc or r.doc)
            _prop(fe, "ADDRESS_OFFSET", 0)
            _prop(fe, "ACCESS", r.access.ipxact)
            _prop(fe, "BIT_OFFSET", f.lsb)
            _prop(fe, "BIT_WIDTH", f.width)
    return blocks


def hwh_with_registers(hwh_text: str, regmap, *, cell="node", interface="s_axi", base=None) -> str:
    """``hwh_text`` with ``regmap``'s registers under cell ``cell``'s ``MODULE`` (replacing any
    ``ADDRESSBLOCKS`` it had). ``base``: the address the cell's ``interface`` must be mapped at
    (checked against the PS's ``MEMRANGE``), or None to accept any."""
    try:
        root = ET.fromstring(hwh_text)
    except ET.ParseError as exc:
        raise ValueError(f"the .hwh is not XML ({exc})") from None
    mods = [m for m in root.iter("MODULE") if m.get("INSTANCE") == cell]
    if len(mods) != 1:
        raise ValueError(f"the .hwh has {len(mods)} MODULEs with INSTANCE={cell!r}, expected 1 "
                         f"(the block design's node cell)")
    ranges = [r for r in root.iter("MEMRANGE")
              if r.get("INSTANCE") == cell and r.get("SLAVEBUSINTERFACE") == interface]
    if not ranges:
        raise ValueError(f"the .hwh maps no address range to {cell}/{interface} (no MEMRANGE)")
    for r in ranges:
        lo, hi = int(r.get("BASEVALUE", "-1"), 16), int(r.get("HIGHVALUE", "-1"), 16)
        if base is not None and lo != base:
            raise ValueError(f"the .hwh maps {cell}/{interface} at {lo:#x}, expected {base:#x}")
        if hi - lo + 1 < regmap.size:
            raise ValueError(f"the .hwh maps {hi - lo + 1:#x} bytes to {cell}/{interface}; the "
                             f"register map spans {regmap.size:#x}")
    mod = mods[0]
    for old in mod.findall("ADDRESSBLOCKS"):
        mod.remove(old)
    mod.append(hwh_registers(regmap, interface))
    ET.indent(root, "  ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
