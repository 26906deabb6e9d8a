"""The ``Meta`` wire format: its enums, its field table and its Python value.

Every payload in MCF travels with ``Meta = {stage, op, src, dst, kv_id,
route_id, collective, reduce_op, length}`` (MCF paper §5). This module is the one definition of it: ``FIELDS`` lists the
fields in bit order with their widths, ``MetaParams`` fixes the variable
widths, ``MetaFields`` is a header's value on the Python side. The hardware
builds its ``lib.data.StructLayout`` from ``FIELDS`` (``hdl.meta.meta_layout``);
golden packs and unpacks the wire header from ``FIELDS`` with integer shifts
(``golden.header``). The two are independent implementations of this table,
and a test compares them bit for bit.

Field widths are parameters (``MetaParams``); the defaults give 256 node ids,
256 route-table entries, 256 layers x 2^24 blocks per layer and payloads of
up to 65535 bytes.

Bit layout (first field at bit 0)::

    bits  field                 default width
    ----  --------------------  -------------
          op                    4   (MetaOp; values >= 8 are unknown -> dropped)
          stage                 1   (Stage)
          collective            2   (Collective)
          reduce_op             2   (ReduceOp)
          _rsvd0                7   (zero on send, ignored on receive)
          src                   node_bits
          dst                   node_bits
          route_id              route_bits
          kv_id.layer           layer_bits
          kv_id.block           block_bits
          length                length_bits  (payload bytes after the header)

Wire header
-----------
The header is the layout's bits, zero-padded to a whole number of 8-byte
words (``MetaParams.header_bytes``; 16 bytes = 128 bits at the defaults),
sent **little-endian**: wire byte ``i`` holds header bits ``8*i .. 8*i+7``.
This is also AXI-Stream byte order (byte ``i`` is ``tdata[8*i+7:8*i]``), so
in hardware the header of a packet is simply the low ``header_bits`` of its
first beat(s). On an Ethernet link the header follows the 14-byte Ethernet II
header (EtherType ``spec.link.ETHERTYPE``); inside the node it is the first
beat(s) of the packet stream (see ``mcf_fpga/hdl/packetizer.py``).
"""
from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, replace

__all__ = ["Stage", "MetaOp", "Collective", "ReduceOp", "FIELDS", "FIELD_ENUMS",
           "MetaParams", "DEFAULT_PARAMS", "MetaFields"]


class Stage(enum.IntEnum):
    """Inference stage the payload belongs to."""
    PREFILL = 0
    DECODE = 1


class MetaOp(enum.IntEnum):
    """What the payload is (the header's ``op``). Encodings 8..15 are unknown and dropped by
    the NIC."""
    KV_REPLICA = 0          #: a KV block copy (prefill replication)
    REPLICA_INVALIDATE = 1  #: directory-only: drop a replica of kv_id (no payload data)
    QUERY = 2               #: a query vector travelling to KV-stationary nodes
    PARTIAL_STATE = 3       #: online-softmax partial words (m, l, o as int64) to be reduced
    REDUCTION = 4           #: an int32 vector taking part in an all-reduce
    DATA = 5                #: opaque payload (point-to-point, all-to-all)
    ACK = 6                 #: link layer acknowledgement
    NAK = 7                 #: link layer negative acknowledgement


class Collective(enum.IntEnum):
    """Communication pattern of the packet."""
    P2P = 0
    MULTICAST = 1
    ALL_TO_ALL = 2
    ALL_REDUCE = 3


class ReduceOp(enum.IntEnum):
    """Reduction applied by the NIC's reduction engines.

    The packet's ``op`` chooses the lane width (the field stays 2 bits): ``MAX`` and ``SUM``
    over ``op == PARTIAL_STATE`` payloads use signed 64-bit lanes (the partials' int64 word
    format; SUM wraps mod 2**64), over ``op == REDUCTION`` signed 32-bit lanes (SUM wraps mod
    2**32). ``SOFTMAX_MERGE`` is valid only with ``PARTIAL_STATE`` (payload ``m, l, o[0..d-1]``).
    Any other (op, reduce_op != NONE) pair is dropped (``ErrorCause.OP``); see ``mcf_fpga/golden/nic.py``.
    """
    NONE = 0
    MAX = 1
    SUM = 2
    SOFTMAX_MERGE = 3


#: The header's fields in bit order, the first at bit 0: ``(name, width)``, where a width is a
#: number of bits or the name of the ``MetaParams`` attribute that holds it. ``kv_id.layer`` and
#: ``kv_id.block`` are the two halves of ``kv_id``; ``_rsvd0`` is zero on send, ignored on receive.
FIELDS = (
    ("op", 4), ("stage", 1), ("collective", 2), ("reduce_op", 2), ("_rsvd0", 7),
    ("src", "node_bits"), ("dst", "node_bits"), ("route_id", "route_bits"),
    ("kv_id.layer", "layer_bits"), ("kv_id.block", "block_bits"), ("length", "length_bits"),
)

#: The enum each enumerated field takes its values from (its width is the field's in ``FIELDS``).
FIELD_ENUMS = {"op": MetaOp, "stage": Stage, "collective": Collective, "reduce_op": ReduceOp}


@dataclass(frozen=True)
class MetaParams:
    """Widths of the variable ``Meta`` fields.

    Parameters
    ----------
    node_bits : int
        Width of ``src``/``dst`` (default 8: 256 node ids; at least 4 = 16 nodes).
    route_bits : int
        Width of ``route_id`` (default 8: 256 route-table entries).
    layer_bits : int
        Width of ``kv_id.layer`` (default 8).
    block_bits : int
        Width of ``kv_id.block`` (default 24; at least 20 = 2^20 KV blocks).
    length_bits : int
        Width of ``length``, the payload size in bytes (default 16: 65535 bytes).
    """
    node_bits: int = 8
    route_bits: int = 8
    layer_bits: int = 8
    block_bits: int = 24
    length_bits: int = 16

    def __post_init__(self):
        limits = {"node_bits": (4, 16), "route_bits": (1, 16), "layer_bits": (1, 16),
                  "block_bits": (20, 32), "length_bits": (8, 24)}
        for name, (lo, hi) in limits.items():
            value = getattr(self, name)
            if not isinstance(value, int) or not lo <= value <= hi:
                raise ValueError(f"MetaParams.{name} must be an integer in {lo}..{hi}, got {value!r}")

    @property
    def field_widths(self) -> tuple:
        """``FIELDS`` with every width a number of bits: ``((name, width), ...)`` in bit order."""
        return _field_widths(self)

    @property
    def header_bits(self) -> int:
        """Bits used by the layout (before padding)."""
        return sum(w for _, w in self.field_widths)

    @property
    def header_bytes(self) -> int:
        """Size of the wire header: ``header_bits`` rounded up to whole 8-byte words."""
        return -(-self.header_bits // 64) * 8

    @property
    def kv_id_bits(self) -> int:
        """Bits of a flat kv_id (``layer`` in the low bits, ``block`` above)."""
        return self.layer_bits + self.block_bits

    @property
    def max_nodes(self) -> int:
        return 1 << self.node_bits

    @property
    def max_routes(self) -> int:
        return 1 << self.route_bits

    @property
    def max_length(self) -> int:
        return (1 << self.length_bits) - 1

    def header_beats(self, data_width: int) -> int:
        """Beats the header occupies on a ``data_width``-bit packet stream (payload starts after)."""
        if data_width <= 0 or data_width % 8:
            raise ValueError(f"data_width must be a positive multiple of 8, got {data_width}")
        return -(-self.header_bytes // (data_width // 8))


@functools.lru_cache(maxsize=None)
def _field_widths(params: MetaParams) -> tuple:
    # cached per parameter set: packing is on the compiler's hot path
    return tuple((name, w if isinstance(w, int) else getattr(params, w)) for name, w in FIELDS)


DEFAULT_PARAMS = MetaParams()


@dataclass(frozen=True)
class MetaFields:
    """Python-side ``Meta`` value (host, golden, tests).

    ``op`` may be a ``MetaOp`` or, to model malformed traffic, a raw int 0..15;
    ``kv_id`` is ``(layer, block)``. ``validate(params)`` checks every field
    against its width and raises ``ValueError`` naming the field and the limit.
    """
    op: int = MetaOp.DATA
    stage: int = Stage.PREFILL
    src: int = 0
    dst: int = 0
    kv_id: tuple = (0, 0)
    route_id: int = 0
    collective: int = Collective.P2P
    reduce_op: int = ReduceOp.NONE
    length: int = 0

    def replace(self, **changes) -> "MetaFields":
        return replace(self, **changes)

    def field_values(self) -> dict:
        """``{name: int}`` for every name of ``FIELDS`` (``_rsvd0`` is 0)."""
        return {"op": int(self.op), "stage": int(self.stage), "collective": int(self.collective),
                "reduce_op": int(self.reduce_op), "_rsvd0": 0, "src": self.src, "dst": self.dst,
                "route_id": self.route_id, "kv_id.layer": self.kv_id[0], "kv_id.block": self.kv_id[1],
                "length": self.length}

    @classmethod
    def from_field_values(cls, f: dict) -> "MetaFields":
        """Inverse of ``field_values`` (``_rsvd0`` ignored; an unknown ``op`` is kept as an int)."""
        return cls(op=MetaOp(f["op"]) if f["op"] < len(MetaOp) else f["op"], stage=Stage(f["stage"]),
                   collective=Collective(f["collective"]), reduce_op=ReduceOp(f["reduce_op"]),
                   src=f["src"], dst=f["dst"], route_id=f["route_id"],
                   kv_id=(f["kv_id.layer"], f["kv_id.block"]), length=f["length"])

    def validate(self, params: MetaParams = DEFAULT_PARAMS) -> "MetaFields":
        if not (isinstance(self.kv_id, tuple) and len(self.kv_id) == 2):
            raise ValueError(f"Meta.kv_id must be a (layer, block) tuple, got {self.kv_id!r}")
        values = self.field_values()
        for name, bits in params.field_widths:
            value = values[name]
            if not isinstance(value, int) or not 0 <= value < (1 << bits):
                raise ValueError(f"Meta.{name} must be an integer in 0..{(1 << bits) - 1}, got {value!r}")
        return self

    def as_dict(self) -> dict:
        """Nested dict accepted by ``hdl.meta.meta_layout(p).const(...)``; needs a known ``op``
        (for malformed headers use ``golden.header.pack_int``, which accepts any 4-bit op)."""
        op = int(self.op)
        if op >= len(MetaOp):
            raise ValueError(f"Meta.op {op} is not a known MetaOp; use pack_int() for raw headers")
        return {"op": MetaOp(op), "stage": Stage(int(self.stage)),
                "collective": Collective(int(self.collective)),
                "reduce_op": ReduceOp(int(self.reduce_op)),
                "src": self.src, "dst": self.dst, "route_id": self.route_id,
                "kv_id": {"layer": self.kv_id[0], "block": self.kv_id[1]}, "length": self.length}
