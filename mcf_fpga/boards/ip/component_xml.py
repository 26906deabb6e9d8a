"""IP-XACT ``component.xml`` (IEEE 1685-2009, the SPIRIT schema Vivado's ``ipx::`` commands
write) for a top packaged as a Vivado IP.

:func:`component_xml` describes one component:

* ``busInterfaces``: every interface of :func:`boards.ip.interfaces.bus_interfaces` — AXI4
  masters (each with its own ``addressSpace``), the AXI4-Lite slave (``memoryMapRef`` to the
  register map), AXI4-Stream masters and slaves, the clock (``ASSOCIATED_BUSIF``,
  ``ASSOCIATED_RESET``), the reset (``POLARITY``) and the interrupt (``SENSITIVITY``), each
  with its port map onto the physical ports;
* ``memoryMaps``: memory map ``<slave>`` with one address block ``reg0`` spanning the slave's
  address space, one ``register`` per ``spec.regmap.RegisterMap.flat`` entry (name
  ``<window>_<register>``, address, width, access, reset, fields);
* ``model``: synthesis and simulation views naming the top module, and every port with its
  direction and range;
* ``fileSets``: the Verilog files (paths relative to the IP directory).

The memory map's registers are the ``Register`` definitions the hardware decodes; nothing here
is typed twice.
"""
import xml.etree.ElementTree as ET

from mcf_fpga.spec.regmap import DATA_BITS

__all__ = ["component_xml", "SPIRIT", "XILINX", "VENDOR", "LIBRARY", "VERSION", "ADDRESS_BLOCK"]

SPIRIT = "http://www.spiritconsortium.org/XMLSchema/SPIRIT/1685-2009"
XILINX = "http://www.xilinx.com"
XSI = "http://www.w3.org/2001/XMLSchema-instance"
VENDOR, LIBRARY, VERSION = "mcf", "mcf", "1.0"
#: the address block's name: the segment the Vivado flow assigns (``<cell>/s_axi/reg0``)
ADDRESS_BLOCK = "reg0"
VIEWS = (("xilinx_anylanguagesynthesis", "Synthesis", ":vivado.xilinx.com:synthesis"),
         ("xilinx_anylanguagebehavioralsimulation", "Simulation", ":vivado.xilinx.com:simulation"))

ET.register_namespace("spirit", SPIRIT)
ET.register_namespace("xilinx", XILINX)
ET.register_namespace("xsi", XSI)


def _s(tag):
    return f"{{{SPIRIT}}}{tag}"


def _x(tag):
    return f"{{{XILINX}}}{tag}"


def _el(parent, tag, text=None, **attrs):
    e = ET.SubElement(parent, _s(tag), {_s(k): str(v) for k, v in attrs.items()})
    if text is not None:
        e.text = str(text)
    return e


def _vlnv(parent, tag, vlnv):
    v, lib, name, ver = vlnv.split(":")
    _el(parent, tag, vendor=v, library=lib, name=name, version=ver)


def _bus_interface(parent, bi, memory_map):
    e = _el(parent, "busInterface")
    _el(e, "name", bi.name)
    _vlnv(e, "busType", bi.bus_type)
    _vlnv(e, "abstractionType", bi.abstraction_type)
    role = _el(e, bi.mode)
    if bi.kind == "aximm" and bi.mode == "slave" and memory_map is not None:
        _el(role, "memoryMapRef", memoryMapRef=memory_map)
    elif bi.kind == "aximm" and bi.mode == "master":
        _el(role, "addressSpaceRef", addressSpaceRef=bi.name)
    maps = _el(e, "portMaps")
    for logical, physical in bi.port_map:
        pm = _el(maps, "portMap")
        _el(_el(pm, "logicalPort"), "name", logical)
        _el(_el(pm, "physicalPort"), "name", physical)
    if bi.parameters:
        ps = _el(e, "parameters")
        for k, v in bi.parameters.items():
            p = _el(ps, "parameter")
            _el(p, "name", k)
            _el(p, "value", v, id=f"BUSIFPARAM_VALUE.{bi.name.upper()}.{k}")


def _memory_map(parent, name, regmap):
    mm = _el(parent, "memoryMap")
    _el(mm, "name", name)
    ab = _el(mm, "addressBlock")
    _el(ab, "name", ADDRESS_BLOCK)
    _el(ab, "baseAddress", 0, format="long")
    _el(ab, "range", regmap.size, format="long")
    _el(ab, "width", DATA_BITS, format="long")
    _el(ab, "usage", "register")
    for fr in regmap.flat():
        r = fr.register
        re_ = _el(ab, "register")
        _el(re_, "name", fr.name)
        _el(re_, "description", r.doc or f"{fr.window.name} register {r.name}")
        _el(re_, "addressOffset", f"{fr.address:#x}")
        _el(re_, "size", DATA_BITS, format="long")
        _el(re_, "access", r.access.ipxact)
        reset = _el(re_, "reset")
        _el(reset, "value", f"{r.reset:#x}")
        _el(reset, "mask", f"{r.mask:#x}")
        for f in r.bit_fields():
            fe = _el(re_, "field")
            _el(fe, "name", f.name)
            if f.doc:
                _el(fe, "description", f.doc)
            _el(fe, "bitOffset", f.lsb)
            _el(fe, "bitWidth", f.width, format="long")
            _el(fe, "access", r.access.ipxact)


def component_xml(name: str, ports: dict, interfaces, files, regmap=None, description="") -> str:
    """The ``component.xml`` text of component ``name`` (also its top module): ``ports``
    {port: (direction, width)} in order, ``interfaces`` (``BusInterface`` list), ``files``
    (Verilog paths relative to the IP directory), ``regmap`` (``spec.regmap.RegisterMap`` of
    the AXI4-Lite slave, or None)."""
    slaves = [b for b in interfaces if b.kind == "aximm" and b.mode == "slave"]
    if regmap is not None and len(slaves) != 1:
        raise ValueError(f"a register map needs exactly one AXI4-Lite slave, {name} has {len(slaves)}")
    mm_name = slaves[0].name if regmap is not None else None
    root = ET.Element(_s("component"))
    for tag, text in (("vendor", VENDOR), ("library", LIBRARY), ("name", name), ("version", VERSION)):
        _el(root, tag, text)
    bis = _el(root, "busInterfaces")
    for bi in interfaces:
        _bus_interface(bis, bi, mm_name)
    masters = [b for b in interfaces if b.kind == "aximm" and b.mode == "master"]
    if masters:
        spaces = _el(root, "addressSpaces")
        for b in masters:
            a = _el(spaces, "addressSpace")
            _el(a, "name", b.name)
            _el(a, "range", 1 << b.addr_width, format="long")
            _el(a, "width", b.data_width, format="long")
    if regmap is not None:
        if slaves[0].parameters.get("ADDR_WIDTH", regmap.addr_bits) < regmap.addr_bits:
            raise ValueError(f"register map {regmap.name} spans {regmap.addr_bits} address bits, "
                             f"{mm_name} has {slaves[0].parameters['ADDR_WIDTH']}")
        _memory_map(_el(root, "memoryMaps"), mm_name, regmap)
    model = _el(root, "model")
    views = _el(model, "views")
    for vname, disp, env in VIEWS:
        v = _el(views, "view")
        _el(v, "name", vname)
        _el(v, "displayName", disp)
        _el(v, "envIdentifier", env)
        _el(v, "language", "Verilog")
        _el(v, "modelName", name)
        _el(_el(v, "fileSetRef"), "localName", f"{vname}_view_fileset")
    ps = _el(model, "ports")
    for pname, (direction, width) in ports.items():
        p = _el(ps, "port")
        _el(p, "name", pname)
        w = _el(p, "wire")
        _el(w, "direction", {"input": "in", "output": "out", "inout": "inout"}[direction])
        if width > 1:
            vec = _el(w, "vector")
            _el(vec, "left", width - 1, format="long")
            _el(vec, "right", 0, format="long")
    fsets = _el(root, "fileSets")
    for vname, _, _ in VIEWS:
        fs = _el(fsets, "fileSet")
        _el(fs, "name", f"{vname}_view_fileset")
        for path in files:
            f = _el(fs, "file")
            _el(f, "name", path)
            _el(f, "fileType", "verilogSource")
            _el(f, "logicalName", "xil_defaultlib")
    _el(root, "description", description or name)
    params = _el(root, "parameters")
    p = _el(params, "parameter")
    _el(p, "name", "Component_Name")
    _el(p, "value", f"{name}_v1_0", id="PARAM_VALUE.Component_Name", resolve="user", order=1)
    ext = _el(root, "vendorExtensions")
    core = ET.SubElement(ext, _x("coreExtensions"))
    fams = ET.SubElement(core, _x("supportedFamilies"))
    ET.SubElement(fams, _x("family"), {_x("lifeCycle"): "Production"}).text = "zynquplus"
    tax = ET.SubElement(core, _x("taxonomies"))
    ET.SubElement(tax, _x("taxonomy")).text = "/UserIP"
    ET.SubElement(core, _x("displayName")).text = name
    ET.SubElement(core, _x("coreRevision")).text = "1"
    pack = ET.SubElement(ext, _x("packagingInfo"))
    ET.SubElement(pack, _x("xilinxVersion")).text = "2022.2"
    ET.indent(root, "  ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
