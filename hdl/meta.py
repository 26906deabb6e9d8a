"""Packet metadata: the ``Meta`` layout, its enums and the wire header.

Every payload in MCF travels with ``Meta = {stage, op, src, dst, kv_id,
route_id, collective, reduce_op, length}`` (MCF paper §5, DESIGN.md
"Metadata"). This module defines it **once**; the hardware (``meta_layout``),
the host and golden (``MetaFields`` + ``pack_header``/``unpack_header``) all
use the same definition.

Field widths are parameters (``MetaParams``); the defaults give 256 node ids,
256 route-table entries, 256 layers x 2^24 blocks per layer and payloads of
up to 65535 bytes.

Bit layout (``lib.data.StructLayout``, first field at bit 0)::

    bits  field                 default width
    ----  --------------------  -------------
          op                    4   (Op; values >= 8 are unknown -> dropped)
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
header (EtherType 0x88B5); inside the node it is the first beat(s) of the
packet stream (see ``hdl/packetizer.py``).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from amaranth.lib import data, enum

__all__ = [
    "Stage", "Op", "Collective", "ReduceOp",
    "MetaParams", "DEFAULT_PARAMS", "meta_layout", "kv_id_layout",
    "MetaFields", "pack_int", "unpack_int", "pack_header", "unpack_header",
    "ETHERTYPE",
]

#: IEEE 802 local experimental EtherType used by MCF links.
ETHERTYPE = 0x88B5


class Stage(enum.IntEnum, shape=1):
    """Inference stage the payload belongs to."""
    PREFILL = 0
    DECODE = 1


class Op(enum.IntEnum, shape=4):
    """What the payload is. Encodings 8..15 are unknown and dropped by the NIC."""
    KV_REPLICA = 0          #: a KV block copy (prefill replication)
    REPLICA_INVALIDATE = 1  #: directory-only: drop a replica of kv_id (no payload data)
    QUERY = 2               #: a query vector travelling to KV-stationary nodes
    PARTIAL_STATE = 3       #: online-softmax partial words (m, l, o as int64) to be reduced
    REDUCTION = 4           #: an int32 vector taking part in an all-reduce
    DATA = 5                #: opaque payload (point-to-point, all-to-all)
    ACK = 6                 #: link layer acknowledgement
    NAK = 7                 #: link layer negative acknowledgement


class Collective(enum.IntEnum, shape=2):
    """Communication pattern of the packet."""
    P2P = 0
    MULTICAST = 1
    ALL_TO_ALL = 2
    ALL_REDUCE = 3


class ReduceOp(enum.IntEnum, shape=2):
    """Reduction applied by the NIC's reduction engines.

    The packet's ``op`` chooses the lane width (the field stays 2 bits): ``MAX`` and ``SUM``
    over ``op == PARTIAL_STATE`` payloads use signed 64-bit lanes (the partials' int64 word
    format; SUM wraps mod 2**64), over ``op == REDUCTION`` signed 32-bit lanes (SUM wraps mod
    2**32). ``SOFTMAX_MERGE`` is valid only with ``PARTIAL_STATE`` (payload ``m, l, o[0..d-1]``).
    Any other (op, reduce_op != NONE) pair is dropped (``ErrorCause.OP``); see ``golden/nic.py``.
    """
    NONE = 0
    MAX = 1
    SUM = 2
    SOFTMAX_MERGE = 3


_FIXED_BITS = 4 + 1 + 2 + 2 + 7  # op, stage, collective, reduce_op, _rsvd0


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
    def header_bits(self) -> int:
        """Bits used by the layout (before padding)."""
        return (_FIXED_BITS + 2 * self.node_bits + self.route_bits + self.layer_bits
                + self.block_bits + self.length_bits)

    @property
    def header_bytes(self) -> int:
        """Size of the wire header: ``header_bits`` rounded up to whole 8-byte words."""
        return -(-self.header_bits // 64) * 8

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


DEFAULT_PARAMS = MetaParams()


def kv_id_layout(params: MetaParams = DEFAULT_PARAMS) -> data.StructLayout:
    """``kv_id = {layer, block}``."""
    return data.StructLayout({"layer": params.layer_bits, "block": params.block_bits})


def meta_layout(params: MetaParams = DEFAULT_PARAMS) -> data.StructLayout:
    """The ``Meta`` layout for hardware (``Signal(meta_layout(p))`` gives a ``View``)."""
    return data.StructLayout({
        "op": Op,
        "stage": Stage,
        "collective": Collective,
        "reduce_op": ReduceOp,
        "_rsvd0": 7,
        "src": params.node_bits,
        "dst": params.node_bits,
        "route_id": params.route_bits,
        "kv_id": kv_id_layout(params),
        "length": params.length_bits,
    })


@dataclass(frozen=True)
class MetaFields:
    """Python-side ``Meta`` value (host, golden, tests).

    ``op`` may be an ``Op`` or, to model malformed traffic, a raw int 0..15;
    ``kv_id`` is ``(layer, block)``. ``validate(params)`` checks every field
    against its width and raises ``ValueError`` naming the field and the limit.
    """
    op: int = Op.DATA
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

    def validate(self, params: MetaParams = DEFAULT_PARAMS) -> "MetaFields":
        def check(name, value, bits):
            if not isinstance(value, int) or not 0 <= value < (1 << bits):
                raise ValueError(f"Meta.{name} must be an integer in 0..{(1 << bits) - 1}, got {value!r}")
        check("op", int(self.op), 4)
        check("stage", int(self.stage), 1)
        check("collective", int(self.collective), 2)
        check("reduce_op", int(self.reduce_op), 2)
        check("src", self.src, params.node_bits)
        check("dst", self.dst, params.node_bits)
        check("route_id", self.route_id, params.route_bits)
        if not (isinstance(self.kv_id, tuple) and len(self.kv_id) == 2):
            raise ValueError(f"Meta.kv_id must be a (layer, block) tuple, got {self.kv_id!r}")
        check("kv_id.layer", self.kv_id[0], params.layer_bits)
        check("kv_id.block", self.kv_id[1], params.block_bits)
        check("length", self.length, params.length_bits)
        return self

    def as_dict(self) -> dict:
        """Nested dict accepted by ``meta_layout(p).const(...)``; needs a known ``op``
        (for malformed headers use ``pack_int``, which accepts any 4-bit op)."""
        op = int(self.op)
        if op >= 8:
            raise ValueError(f"Meta.op {op} is not a known Op; use pack_int() for raw headers")
        return {"op": Op(op), "stage": Stage(int(self.stage)),
                "collective": Collective(int(self.collective)),
                "reduce_op": ReduceOp(int(self.reduce_op)),
                "src": self.src, "dst": self.dst, "route_id": self.route_id,
                "kv_id": {"layer": self.kv_id[0], "block": self.kv_id[1]}, "length": self.length}


@functools.lru_cache(maxsize=None)
def _offsets(params: MetaParams):
    """(name, offset, width) in layout order, from the single layout definition (cached per
    parameter set: packing is on the compiler's hot path)."""
    out = []
    for name, fld in meta_layout(params):
        if name == "kv_id":
            for sub, sfld in fld.shape:
                out.append((f"kv_id.{sub}", fld.offset + sfld.offset, sfld.width))
        else:
            out.append((name, fld.offset, fld.width))
    return tuple(out)


def pack_int(meta: MetaFields, params: MetaParams = DEFAULT_PARAMS) -> int:
    """``Meta`` -> the integer value of the layout (bit 0 = first field)."""
    meta.validate(params)
    values = {"op": int(meta.op), "stage": int(meta.stage), "collective": int(meta.collective),
              "reduce_op": int(meta.reduce_op), "_rsvd0": 0, "src": meta.src, "dst": meta.dst,
              "route_id": meta.route_id, "kv_id.layer": meta.kv_id[0], "kv_id.block": meta.kv_id[1],
              "length": meta.length}
    value = 0
    for name, offset, width in _offsets(params):
        value |= values[name] << offset
    return value


def unpack_int(value: int, params: MetaParams = DEFAULT_PARAMS) -> MetaFields:
    """Integer value of the layout -> ``MetaFields`` (reserved bits ignored; unknown ``op`` kept as int)."""
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"header value must be a non-negative integer, got {value!r}")
    f = {name: (value >> offset) & ((1 << width) - 1) for name, offset, width in _offsets(params)}
    return MetaFields(op=Op(f["op"]) if f["op"] < 8 else f["op"], stage=Stage(f["stage"]),
                      collective=Collective(f["collective"]), reduce_op=ReduceOp(f["reduce_op"]),
                      src=f["src"], dst=f["dst"], route_id=f["route_id"],
                      kv_id=(f["kv_id.layer"], f["kv_id.block"]), length=f["length"])


def pack_header(meta: MetaFields, params: MetaParams = DEFAULT_PARAMS) -> bytes:
    """``Meta`` -> the ``params.header_bytes`` wire header (little-endian, zero padded)."""
    return pack_int(meta, params).to_bytes(params.header_bytes, "little")


def unpack_header(header: bytes, params: MetaParams = DEFAULT_PARAMS) -> MetaFields:
    """Wire header (exactly ``params.header_bytes`` bytes) -> ``MetaFields``."""
    if len(header) != params.header_bytes:
        raise ValueError(f"wire header must be exactly {params.header_bytes} bytes, got {len(header)}")
    return unpack_int(int.from_bytes(header, "little") & ((1 << params.header_bits) - 1), params)
