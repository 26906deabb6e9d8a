"""AMBA-named wrapper for export: flatten struct streams to plain ``tdata`` words.

Blocks carry command/descriptor/status streams whose payloads are structs of
non-AXI-Stream fields. :class:`AmbaTop` wraps a component and turns each such stream into a
plain AXI-Stream word: ``<name>_tdata`` is the struct's bits in field order (first field in
the low bits), zero-padded to whole bytes. AXI4/AXI4-Lite members and AXI-Stream packet
members pass through under their new names; plain signals keep theirs (or are renamed).
"""
from amaranth import Module
from amaranth.hdl import Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["AmbaTop"]

_AXIS = {"data", "keep", "last", "user"}


def _needs_flat(sig):
    if not isinstance(sig, stream.Signature):
        return False
    layout = sig.members["payload"].shape
    return not (isinstance(layout, data.StructLayout) and {n for n, _ in layout} <= _AXIS)


class AmbaTop(wiring.Component):
    """Wrap ``inner``, renaming members by ``names`` (``{inner_member: amba_name}``) and
    flattening non-AXI-Stream struct streams to byte-padded ``tdata`` words."""

    def __init__(self, inner, names: dict):
        self.inner, self.names = inner, dict(names)
        members = {}
        for name, member in inner.signature.members.items():
            if member.is_port:                      # plain signal: same flow and shape
                members[self.names.get(name, name)] = member
                continue
            sig = member.signature
            flipped = isinstance(sig, wiring.FlippedSignature)
            base = sig.flip() if flipped else sig
            flow = member.flow
            if flipped:      # an In(signature) member: the port's own flow is In
                flow = In
            if _needs_flat(base):
                width = Value.cast(getattr(inner, name).payload).shape().width
                base = stream.Signature(-(-width // 8) * 8)
            members[self.names.get(name, name)] = (In if flow == In else Out)(base)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.inner = inner = self.inner
        for name, member in inner.signature.members.items():
            src = getattr(inner, name)
            dst = getattr(self, self.names.get(name, name))
            if member.is_port:
                m.d.comb += (src.eq(dst) if member.flow == In else dst.eq(src))
                continue
            is_in = isinstance(member.signature, wiring.FlippedSignature)
            if _needs_flat(member.signature.flip() if is_in else member.signature):
                pw = Value.cast(src.payload).shape().width
                if is_in:
                    m.d.comb += [src.valid.eq(dst.valid), dst.ready.eq(src.ready),
                                 src.payload.eq(dst.payload[:pw])]
                else:
                    m.d.comb += [dst.valid.eq(src.valid), src.ready.eq(dst.ready),
                                 dst.payload.eq(Value.cast(src.payload))]
            elif is_in:
                wiring.connect(m, wiring.flipped(dst), src)
            else:
                wiring.connect(m, src, wiring.flipped(dst))
        return m

    @classmethod
    def auto(cls, inner, rename=None) -> "AmbaTop":
        """Wrap ``inner`` naming every stream member ``s_axis_<x>`` (input) or ``m_axis_<x>``
        (output), where ``<x>`` is the member name without an ``_in``/``_out`` suffix;
        ``rename`` overrides or adds names (e.g. ``{"bus": "s_axi"}``)."""
        names = {}
        for name, member in inner.signature.members.items():
            if member.is_port or name.startswith(("s_axis", "m_axis", "s_axi", "m_axi")):
                continue
            sig = member.signature
            is_in = isinstance(sig, wiring.FlippedSignature)
            base = sig.flip() if is_in else sig
            if isinstance(base, stream.Signature):
                stem = name.removesuffix("_in").removesuffix("_out")
                names[name] = ("s_axis_" if is_in else "m_axis_") + stem
        names.update(rename or {})
        return cls(inner, names)
