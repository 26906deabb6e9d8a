"""Verilog export with AMBA port names (docs/harness.md, "Verilog export and port names").

``to_verilog(component, name="top")`` maps each member of the component's signature:

* a stream (``amaranth.lib.stream.Signature``) member ``<m>`` -> ``<m>_tvalid``, ``<m>_tready``
  and one port per payload field ``<m>_t<field>`` (``PacketLayout``: ``tdata/tkeep/tlast``
  [``/tuser``]); a non-struct payload becomes ``<m>_tdata``. Struct payloads may only hold
  AXI-Stream fields (data, keep, strb, last, user, id, dest).
* an ``AXI4LiteSignature`` or ``AXI4Signature`` member (either direction) ``<m>`` ->
  ``<m>_<channel><field>`` and ``<m>_<channel>valid/ready`` (``s_axi_awaddr``,
  ``m_axi_rdata``, ``m_axi_hp0_arlen``). By convention such members are named
  ``s_axi*``/``m_axi*``; ``rename={"bus": "s_axi"}`` renames a member's prefix.
* a plain signal keeps its name; the clock and reset are ``clk`` and ``rst``.

Anything else (another nested signature, a stream of a non-AXI-Stream struct) raises
``ValueError`` naming the member. ``amba_ports`` gives the same mapping as data, used by the
Verilator backend and the cocotb runner to discover the top's buses.
"""
from dataclasses import dataclass, field

from amaranth import Elaboratable, Module, Signal
from amaranth.back import verilog
from amaranth.hdl import Value, ValueCastable
from amaranth.hdl._ir import PortDirection
from amaranth.lib import data, stream, wiring

from mcf_fpga.hdl.bus import AXI4LiteSignature, AXI4Signature
from mcf_fpga.hdl.fast_meminit import fast_memory_init

__all__ = ["AmbaPort", "amba_ports", "to_verilog"]

AXIS_FIELDS = ("data", "keep", "strb", "last", "user", "id", "dest")


@dataclass
class AmbaPort:
    """One top-level member mapped to Verilog ports.

    kind: ``"axis"``, ``"axil"``, ``"axi4"`` or ``"signal"``; ``prefix``: the port-name prefix;
    ``is_input``: for buses, True when the DUT is the slave/sink (s_axi, s_axis);
    ``ports``: ``[(verilog_name, value, "i"|"o", width)]``; ``fields``: for buses a dict
    ``{(channel, field): (verilog_name, width)}`` (channel ``""`` for streams; field
    ``"valid"``/``"ready"`` for the handshake); ``signature``: the unflipped bus signature.
    """
    kind: str
    member: str
    prefix: str
    is_input: bool
    ports: list = field(default_factory=list)
    fields: dict = field(default_factory=dict)
    signature: object = None

    def width(self, channel, fld):
        return self.fields[(channel, fld)][1]


def _unflip(sig):
    return sig.flip() if isinstance(sig, wiring.FlippedSignature) else sig


def _add(port, channel, fld, vname, value, flow):
    value = Value.cast(value)
    w = value.shape().width
    port.ports.append((vname, value, "i" if flow == wiring.In else "o", w))
    port.fields[(channel, fld)] = (vname, w)


def _map_stream(port, iface, channel, vprefix, flow_valid):
    """Add valid/ready/payload ports of one stream ``iface`` whose valid flows ``flow_valid``."""
    flow_ready = wiring.In if flow_valid == wiring.Out else wiring.Out
    payload = iface.payload
    shape = payload.shape() if isinstance(payload, ValueCastable) else Value.cast(payload).shape()
    if isinstance(shape, data.StructLayout):
        for fname, _ in shape:
            if port.kind == "axis" and fname not in AXIS_FIELDS:
                raise ValueError(
                    f"member {port.member!r}: stream payload field {fname!r} has no AXI-Stream name "
                    f"(allowed fields: {', '.join(AXIS_FIELDS)}); wrap it into 'data'")
            t = "t" if port.kind == "axis" else ""
            _add(port, channel, fname, f"{vprefix}{t}{fname}", payload[fname], flow_valid)
    elif port.kind == "axis":
        _add(port, channel, "data", f"{vprefix}tdata", payload, flow_valid)
    else:
        raise ValueError(f"member {port.member!r}: channel {channel!r} payload is not a struct")
    t = "t" if port.kind == "axis" else ""
    _add(port, channel, "valid", f"{vprefix}{t}valid", iface.valid, flow_valid)
    _add(port, channel, "ready", f"{vprefix}{t}ready", iface.ready, flow_ready)


def amba_ports(component, rename=None) -> list[AmbaPort]:
    """Map ``component``'s signature members to AMBA-named ports (see module docstring)."""
    rename = dict(rename or {})
    unknown = set(rename) - set(component.signature.members)
    if unknown:
        raise ValueError(f"rename names members that do not exist: {sorted(unknown)}")
    result = []
    for mname, member in component.signature.members.items():
        prefix = rename.get(mname, mname)
        obj = getattr(component, mname)
        if member.is_port:
            p = AmbaPort("signal", mname, prefix, member.flow == wiring.In)
            _add(p, "", "", prefix, obj, member.flow)
            result.append(p)
            continue
        sig = _unflip(member.signature)
        flipped = isinstance(member.signature, wiring.FlippedSignature)
        # flow of a master-view Out channel as seen from the component
        if isinstance(sig, stream.Signature):
            # member.flow is Out for a source (m_axis); In for a sink (s_axis)
            p = AmbaPort("axis", mname, prefix, flipped, signature=sig)
            _map_stream(p, obj, "", f"{prefix}_", wiring.In if flipped else wiring.Out)
        elif isinstance(sig, (AXI4LiteSignature, AXI4Signature)):
            kind = "axil" if isinstance(sig, AXI4LiteSignature) else "axi4"
            p = AmbaPort(kind, mname, prefix, flipped, signature=sig)
            for ch, chm in sig.members.items():
                out = (chm.flow == wiring.Out) != flipped
                _map_stream(p, getattr(obj, ch), ch, f"{prefix}_{ch}",
                            wiring.Out if out else wiring.In)
        else:
            raise ValueError(
                f"member {mname!r} has signature {sig!r}, which maps to no AMBA port names "
                f"(supported: plain signals, lib.stream members, AXI4LiteSignature, AXI4Signature)")
        result.append(p)
    names = {}
    for p in result:
        for vname, *_ in p.ports:
            if vname in ("clk", "rst") or vname in names:
                raise ValueError(f"member {p.member!r}: port name {vname!r} collides with "
                                 f"{names.get(vname, 'the clock/reset')!r}")
            names[vname] = p.member
    return result


class _Top(Elaboratable):
    def __init__(self, dut, ports):
        self.dut, self.port_sigs = dut, []
        for p in ports:
            for vname, value, d, w in p.ports:
                self.port_sigs.append((vname, Signal(w, name=vname), value, d))

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = self.dut
        for vname, sig, value, d in self.port_sigs:
            m.d.comb += (value.eq(sig) if d == "i" else sig.eq(value))
        return m


def to_verilog(component, name: str = "top", *, rename=None, platform=None) -> str:
    """Verilog text of ``component`` as module ``name`` with AMBA port names; ``platform`` as
    ``amaranth.back.verilog.convert``'s (``hdl.dsp48e2.XCUP``: the XCK26 synthesis target)."""
    ports = amba_ports(component, rename)
    top = _Top(component, ports)
    pdict = {vname: (sig, PortDirection.Input if d == "i" else PortDirection.Output)
             for vname, sig, _, d in top.port_sigs}
    with fast_memory_init():                    # the same text, memories' contents written faster
        return verilog.convert(top, name=name, ports=pdict, platform=platform, emit_src=False)
