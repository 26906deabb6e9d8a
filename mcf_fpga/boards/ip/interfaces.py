"""The Vivado bus interfaces of an exported top: which physical ports form which AXI4, AXI4-Lite,
AXI4-Stream, clock, reset and interrupt interface, with their parameters.

:func:`bus_interfaces` reads the component's signature through ``hdl.verilog.amba_ports``
(the mapping ``to_verilog`` names the ports by) and checks every physical port against the
Verilog module's header (:func:`boards.ip.verilog_ports.module_ports`): an interface that names a
port the Verilog lacks is a ``ValueError``, never a silent mismatch. Both the IP-XACT
``component.xml`` and the ``X_INTERFACE_INFO`` wrapper are written from this one list.

Conventions (docs/harness.md, "Verilog export and port names"): one clock ``clk`` with the active-high synchronous
reset ``rst``; every bus is associated with ``clk``; a one-bit output ``irq`` is a level-high
interrupt.
"""
from dataclasses import dataclass, field

__all__ = ["BusInterface", "bus_interfaces", "VLNV"]

#: Xilinx interface definitions: kind -> (bus type VLNV, abstraction type VLNV)
VLNV = {
    "aximm": ("xilinx.com:interface:aximm:1.0", "xilinx.com:interface:aximm_rtl:1.0"),
    "axis": ("xilinx.com:interface:axis:1.0", "xilinx.com:interface:axis_rtl:1.0"),
    "clock": ("xilinx.com:signal:clock:1.0", "xilinx.com:signal:clock_rtl:1.0"),
    "reset": ("xilinx.com:signal:reset:1.0", "xilinx.com:signal:reset_rtl:1.0"),
    "interrupt": ("xilinx.com:signal:interrupt:1.0", "xilinx.com:signal:interrupt_rtl:1.0"),
}
CLOCK, RESET, IRQ = "clk", "rst", "irq"


@dataclass
class BusInterface:
    """One interface: ``name`` (the port prefix), ``kind`` (a key of :data:`VLNV`), ``mode``
    ("master" or "slave"), ``port_map`` [(logical port, physical port)], ``parameters``
    {name: value} (Vivado's interface parameters), and for an AXI master its address space
    ``addr_width``/``data_width``."""
    name: str
    kind: str
    mode: str
    port_map: list = field(default_factory=list)
    parameters: dict = field(default_factory=dict)
    addr_width: int = 0
    data_width: int = 0

    @property
    def bus_type(self):
        return VLNV[self.kind][0]

    @property
    def abstraction_type(self):
        return VLNV[self.kind][1]


def _logical(kind, channel, fld):
    """AMBA logical port name: AXI ``AWADDR``/``RREADY``, AXI-Stream ``TDATA``/``TVALID``."""
    return (channel + fld).upper() if kind in ("axil", "axi4") else "T" + fld.upper()


def bus_interfaces(component, verilog_ports: dict, rename=None) -> list:
    """The interfaces of ``component`` exported with ``verilog_ports`` ({name: (direction,
    width)} of the module header, see the module docstring). Raises ValueError naming the
    port when a mapped port is not in the Verilog."""
    from mcf_fpga.hdl.verilog import amba_ports
    out = []
    for p in amba_ports(component, rename):
        for vname, _, d, w in p.ports:
            have = verilog_ports.get(vname)
            if have is None:
                raise ValueError(f"member {p.member!r}: port {vname!r} is not in the Verilog module")
            if have != ("input" if d == "i" else "output", w):
                raise ValueError(f"member {p.member!r}: port {vname!r} is {have} in the Verilog, "
                                 f"expected {('input' if d == 'i' else 'output', w)}")
        if p.kind == "signal":
            if p.prefix == IRQ and not p.is_input and p.ports[0][3] == 1:
                out.append(BusInterface(IRQ, "interrupt", "master", [("INTERRUPT", IRQ)],
                                        {"SENSITIVITY": "LEVEL_HIGH"}))
            continue
        mode = "slave" if p.is_input else "master"
        pmap = [(_logical(p.kind, ch, f), vname) for (ch, f), (vname, _) in p.fields.items()]
        sig = p.signature
        if p.kind in ("axil", "axi4"):
            params = {"PROTOCOL": "AXI4LITE" if p.kind == "axil" else "AXI4",
                      "ADDR_WIDTH": sig.addr_width, "DATA_WIDTH": sig.data_width}
            if p.kind == "axi4":
                params["ID_WIDTH"] = p.width("ar", "id")
            bi = BusInterface(p.prefix, "aximm", mode, pmap, params, sig.addr_width, sig.data_width)
        else:
            names = {f for _, f in p.fields}
            params = {"TDATA_NUM_BYTES": -(-p.width("", "data") // 8),
                      "HAS_TKEEP": int("keep" in names), "HAS_TLAST": int("last" in names),
                      "HAS_TREADY": 1, "TUSER_WIDTH": p.width("", "user") if "user" in names else 0}
            bi = BusInterface(p.prefix, "axis", mode, pmap, params)
        out.append(bi)
    buses = [b.name for b in out if b.kind in ("aximm", "axis")]
    if RESET in verilog_ports:
        out.insert(0, BusInterface(RESET, "reset", "slave", [("RST", RESET)],
                                   {"POLARITY": "ACTIVE_HIGH"}))
    if CLOCK in verilog_ports:
        params = {"ASSOCIATED_BUSIF": ":".join(buses)}
        if RESET in verilog_ports:
            params["ASSOCIATED_RESET"] = RESET
        out.insert(0, BusInterface(CLOCK, "clock", "slave", [("CLK", CLOCK)], params))
    return out
