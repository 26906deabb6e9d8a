"""Golden twin of :class:`hdl.nic.steer.OpSteer`: split packets by their Meta ``op``."""
from __future__ import annotations

from mcf_fpga.golden.header import field_bits
from mcf_fpga.spec.meta import DEFAULT_PARAMS, MetaParams

__all__ = ["packet_op", "split_by_op"]


def packet_op(packet: bytes, meta: MetaParams = DEFAULT_PARAMS) -> int:
    """The ``op`` field of ``packet``'s header (its bits, even for a runt shorter than a header)."""
    offset, width = field_bits("op", meta)
    return (int.from_bytes(packet, "little") >> offset) & ((1 << width) - 1)


def split_by_op(packets, ops, meta: MetaParams = DEFAULT_PARAMS):
    """``(matched, other)``: the packets whose ``op`` is in ``ops`` and the rest, each in order."""
    ops = {int(o) for o in ops}
    matched, other = [], []
    for p in packets:
        (matched if packet_op(p, meta) in ops else other).append(p)
    return matched, other
