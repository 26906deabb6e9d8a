"""Verilog of a top with AMBA port names (``s_axi_awaddr``, ``m_axis_link0_tdata``, ...).

Naming rule (DESIGN.md "Top-level ports"): a member that is an AXI interface
(five stream channels ``aw w b ar r``) becomes ``<member>_<channel><field>``,
``<member>_<channel>valid``/``ready``; a member that is one stream becomes
``<member>_t<field>``, ``<member>_tvalid``/``tready``; a plain port keeps its
name. ``clk`` and ``rst`` are the ``sync`` domain's clock and (synchronous,
active-high) reset.
"""
from amaranth import Module, Signal, ClockDomain, Elaboratable, Value
from amaranth.back import verilog
from amaranth.lib import wiring

__all__ = ["port_names", "AMBAWrapper", "convert"]

_AXI_CHANNELS = ("aw", "w", "b", "ar", "r")


def _name(path, top):
    member = path[0]
    sub = dict(top.signature.members[member].signature.members) if len(path) > 1 else {}
    if len(path) == 1:
        return member
    if set(sub) == set(_AXI_CHANNELS):          # (member, channel, payload|valid|ready)
        return f"{member}_{path[1]}" + ("" if path[2] == "payload" else path[2])
    if {"payload", "valid", "ready"} <= set(sub):   # (member, payload|valid|ready)
        return f"{member}_t" + ("" if path[1] == "payload" else path[1])
    raise ValueError(f"member {member!r}: no AMBA naming rule for its signature")


def port_names(top):
    """List of ``(verilog_name, value, flow)`` for every port bit-field of ``top``."""
    out = []
    for path, member, value in top.signature.flatten(top):
        base = _name(path, top)
        if path[-1] == "payload":
            for fname, _ in value.shape():
                out.append((base + fname, Value.cast(getattr(value, fname)), member.flow))
        else:
            out.append((base, Value.cast(value), member.flow))
    return out


class AMBAWrapper(Elaboratable):
    """Wraps ``top`` so each AMBA-named port is a plain Signal; ``ports`` is for verilog.convert."""

    def __init__(self, top):
        self.top = top
        self.ports = {}
        self._conns = []
        self.cd = ClockDomain("sync")
        self.ports["clk"] = (self.cd.clk, None)
        self.ports["rst"] = (self.cd.rst, None)
        for name, value, flow in port_names(top):
            if name in self.ports:
                raise ValueError(f"port name {name!r} occurs twice")
            sig = Signal(len(value), name=name)
            self.ports[name] = (sig, None)
            self._conns.append((sig, value, flow))

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = self.cd
        m.submodules.top = self.top
        for sig, value, flow in self._conns:
            m.d.comb += (sig.eq(value) if flow == wiring.Out else value.eq(sig))
        return m


def convert(top, name="mcf_node"):
    """Verilog text of ``top`` as module ``name`` with AMBA-named ports and ``clk``/``rst``."""
    w = AMBAWrapper(top)
    return verilog.convert(w, name=name, ports=w.ports, emit_src=False)
