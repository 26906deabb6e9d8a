"""The RX placer's contract: a received packet's key and landing size, and its parameter limits.

A packet's key is ``(rx_kind(stage, op, reduce_op), src, kv_id.layer, kv_id.block)`` of its
Meta header (:mod:`spec.meta`); :func:`rx_kind` is the host's inbox rule (stage PREFILL -> KV;
else reduce_op MAX -> MAX; SUM or SOFTMAX_MERGE -> SUM; else op QUERY -> Q; DATA -> DATA; else
OTHER). A payload of ``length`` bytes takes ``land_bytes(length, align)`` bytes of its entry.
The hardware placer (:class:`hdl.rx_placer.RxPlacer`), its golden model (``golden.rx_placer``,
whose docstring states the placement rules) and the host's node image agree on these.
"""
from __future__ import annotations

import enum

from mcf_fpga.spec.meta import MetaOp, ReduceOp, Stage

__all__ = ["RxKind", "rx_kind", "packet_key", "land_bytes", "check_params"]


class RxKind(enum.IntEnum):
    """What a received packet is to the host's inbox (3 bits in hardware)."""
    KV = 0
    MAX = 1
    SUM = 2
    Q = 3
    DATA = 4
    OTHER = 5


def rx_kind(stage, op, reduce_op) -> RxKind:
    """The inbox kind of a packet (mcf_fpga/host/executors/rtl.py ``_inbox_kind``'s rule)."""
    if int(stage) == Stage.PREFILL:
        return RxKind.KV
    if int(reduce_op) == ReduceOp.MAX:
        return RxKind.MAX
    if int(reduce_op) in (ReduceOp.SUM, ReduceOp.SOFTMAX_MERGE):
        return RxKind.SUM
    if int(op) == MetaOp.QUERY:
        return RxKind.Q
    if int(op) == MetaOp.DATA:
        return RxKind.DATA
    return RxKind.OTHER


def packet_key(meta) -> tuple:
    """``(rx_kind, src, layer, block)`` of a ``spec.meta.MetaFields``."""
    return (rx_kind(meta.stage, meta.op, meta.reduce_op), meta.src, meta.kv_id[0], meta.kv_id[1])


def land_bytes(length: int, align: int) -> int:
    """Bytes a payload of ``length`` bytes takes in its entry: ``length`` rounded up to ``align``."""
    return -(-length // align) * align


def check_params(entries, max_payload, align, data_width, meta):
    """The parameter checks shared by the golden model and the hardware (ValueError naming the
    field and the limit)."""
    if not isinstance(entries, int) or not 1 <= entries <= 256:
        raise ValueError(f"entries must be an integer in 1..256, got {entries!r}")
    if data_width not in (64, 128):
        raise ValueError(f"data_width must be 64 or 128, got {data_width!r}")
    if not isinstance(max_payload, int) or max_payload % 8 or not 8 <= max_payload <= meta.max_length:
        raise ValueError(f"max_payload must be a multiple of 8 in 8..{meta.max_length} (meta.max_length), "
                         f"got {max_payload!r}")
    bb = data_width // 8
    if align is not None and (not isinstance(align, int) or align < bb or align & (align - 1) or align > 1 << 20):
        raise ValueError(f"align must be a power of two in {bb}..{1 << 20} (at least data_width/8), got {align!r}")
