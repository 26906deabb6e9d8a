"""Op steering: split a packet stream in two by the Meta ``op`` of each packet.

The node puts it on the NIC's local delivery stream (``Nic.m_axis``): KV install packets
(``op == KV_REPLICA``) go to the KV installer, everything else to ``m_axis_rx`` as before. The
golden twin is :func:`golden.steer.split_by_op`.

Contract
--------
* ``s_axis`` (``PacketSignature(data_width)``, the Meta header first): each packet goes whole
  to exactly one output, in arrival order on that output. The choice is made on the packet's
  first beat from the ``op`` field (bits ``meta_layout(meta)["op"]`` of the header, which lie in
  the first beat) and held until ``last``: ``op`` in ``ops`` -> ``m_match``, else ``m_other``.
* No buffer: ``s_axis.ready`` is the chosen output's ``ready`` (back-pressure passes straight
  through) and the beats are forwarded unchanged in the same cycle. The other output idles.
"""
from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import PacketSignature
from mcf_fpga.spec.meta import DEFAULT_PARAMS, MetaParams
from mcf_fpga.hdl.meta import meta_layout

__all__ = ["OpSteer"]


class OpSteer(wiring.Component):
    """Steer packets by Meta ``op`` (module docstring).

    Parameters
    ----------
    ops : iterable of int
        The ``op`` values (``spec.meta.MetaOp``) that go to ``m_match``.
    data_width : int
        Packet stream width in bits (the ``op`` field must lie in the first beat).
    meta : MetaParams
        The Meta layout's widths.
    """

    def __init__(self, ops, data_width: int = 64, meta: MetaParams = DEFAULT_PARAMS):
        try:
            self._check(ops, data_width, meta)
        except ValueError:
            self._MustUse__silence = True      # a refused component is not an unused one
            raise
        super().__init__({"s_axis": In(PacketSignature(data_width)),
                          "m_match": Out(PacketSignature(data_width)),
                          "m_other": Out(PacketSignature(data_width))})

    def _check(self, ops, data_width, meta):
        f = meta_layout(meta)["op"]
        self.op_lo, self.op_w = f.offset, f.width
        self.ops = sorted({int(o) for o in ops})
        if not self.ops:
            raise ValueError("OpSteer ops must name at least one op")
        bad = [o for o in self.ops if not 0 <= o < 1 << self.op_w]
        if bad:
            raise ValueError(f"OpSteer ops must be in 0..{(1 << self.op_w) - 1} (the {self.op_w}-bit op field), got {bad}")
        if self.op_lo + self.op_w > data_width:
            raise ValueError(f"data_width={data_width}: the op field (bits {self.op_lo}..{self.op_lo + self.op_w - 1}) "
                             f"must lie in the first beat")
        self.data_width = data_width

    def elaborate(self, platform):
        m = Module()
        s, a, b = self.s_axis, self.m_match, self.m_other
        in_pkt = Signal()          # a beat of the current packet was taken
        held = Signal()            # the current packet's choice (1 = m_match)
        op = s.payload.data[self.op_lo:self.op_lo + self.op_w]
        hit = Signal()
        for o in self.ops:
            with m.If(op == o):
                m.d.comb += hit.eq(1)
        sel = Signal()
        m.d.comb += sel.eq(in_pkt & held | ~in_pkt & hit)
        m.d.comb += [a.payload.eq(s.payload), b.payload.eq(s.payload),
                     a.valid.eq(s.valid & sel), b.valid.eq(s.valid & ~sel),
                     s.ready.eq(sel & a.ready | ~sel & b.ready)]
        with m.If(s.valid & s.ready):
            m.d.sync += [in_pkt.eq(~s.payload.last), held.eq(sel)]
        return m
