"""NIC configuration: what the NIC hardware, mcf_fpga/golden/nic.py and the host agree on.

``NicConfig`` fixes every size of one node's NIC; ``ErrorCause`` numbers the
per-cause drop counters and ``HEADER_CAUSE_ORDER`` says which of several header faults is
counted; ``Reg`` is the AXI4-Lite register map (byte offsets).
See docs/nic.md for the behaviour each field controls.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from mcf_fpga.spec.meta import MetaParams, DEFAULT_PARAMS

__all__ = ["NicConfig", "ErrorCause", "HEADER_CAUSE_ORDER", "ERR_CAUSE_BITS", "Reg", "ERR_BASE",
           "NIC_ID", "src_allow_reg", "DEFAULT_REDUCE_TIMEOUT"]

NIC_ID = 0x4D43464E  # "MCFN"


class ErrorCause(enum.IntEnum):
    """Why a frame (or a reduction group) was dropped; one saturating 32-bit counter each
    (``Reg.ERR_BASE + 4*cause``) and one sticky bit of ``Reg.ERR_FLAGS``. A frame with several
    header faults counts the first of ``HEADER_CAUSE_ORDER``, except that a frame shorter than
    the header (a runt) is always ``LENGTH``; a payload that disagrees with ``length`` is
    ``LENGTH`` only when the header itself is clean. Numbers are stable register addresses:
    new causes are appended (``ERR_CAUSE_BITS`` = 4 bits, at most 16 causes)."""
    CRC = 0      #: bad frame check sequence (counted by the link layer, reported here)
    OP = 1       #: unknown op (>= 8), a link op (ack/nak) at the NIC, or a bad op/reduce_op pair
    SRC = 2      #: src not a cluster member (>= max_nodes or its MEMBERS bit clear)
    DST = 3      #: p2p/all-to-all dst >= NUM_NODES
    ROUTE = 4    #: route_id >= n_routes, empty route entry, bad reduction fan-in, a2a range
    KV = 5       #: kv_replica/replica_invalidate kv_id beyond NUM_LAYERS x NUM_BLOCKS
    LENGTH = 6   #: runt, length > max_payload, payload size != length, bad reduce/a2a length
    REDUCE = 7   #: reduction contribution that conflicts with its group (duplicate src, mismatch)
    SPOOF = 8    #: member src not allowed on the port the frame arrived on (SRC_ALLOW_p)
    TIMEOUT = 9  #: reduction group not complete REDUCE_TIMEOUT cycles after its first contribution


#: Precedence of the header causes: a frame with several faults counts the first one listed.
#: Who sent it (SRC, then SPOOF) is judged before where it goes.
HEADER_CAUSE_ORDER = (ErrorCause.OP, ErrorCause.SRC, ErrorCause.SPOOF, ErrorCause.DST,
                      ErrorCause.ROUTE, ErrorCause.KV, ErrorCause.LENGTH)

#: Width of an ``ErrorCause`` on the hardware's ``err_cause`` wires (ERR_c registers reserve 16).
ERR_CAUSE_BITS = 4
assert len(ErrorCause) <= 1 << ERR_CAUSE_BITS

#: Reset value of ``Reg.REDUCE_TIMEOUT`` (``NicConfig.reduce_timeout``): 2**24 cycles, 168 ms at
#: the board's 100 MHz: far beyond any skew between the members of one decode reduction.
DEFAULT_REDUCE_TIMEOUT = 1 << 24


class Reg(enum.IntEnum):
    """AXI4-Lite register byte offsets (docs/nic.md has the table)."""
    ID = 0x00          #: RO  NIC_ID
    NODE_ID = 0x04     #: RW  this node's id (src of reduction results; always allowed on port 0)
    NUM_NODES = 0x08   #: RW  cluster size: p2p/all-to-all dst must be below it
    MEMBERS = 0x0C     #: RW  bit i = node i is a cluster member (src check)
    NUM_LAYERS = 0x10  #: RW  kv_id.layer bound
    NUM_BLOCKS = 0x14  #: RW  kv_id.block bound
    ROUTE_INDEX = 0x18 #: RW  route-table index for ROUTE_DATA / ROUTE_READ
    ROUTE_DATA = 0x1C  #: WO  write RouteEntry.encode() into the SHADOW bank at ROUTE_INDEX
    ROUTE_READ = 0x20  #: RO  shadow-bank entry at ROUTE_INDEX
    BANK = 0x24        #: RO  index of the active bank (0/1)
    BANK_FLIP = 0x28   #: WO  any write: the shadow bank becomes active
    RX_FRAMES = 0x2C   #: RO  frames accepted (all input ports)
    ERR_FLAGS = 0x30   #: RO  bit c: cause c was counted since reset or its clear (sticky)
    ERR_CLEAR = 0x34   #: WO  write 1 to bit c: clear ERR_FLAGS bit c (an event in that cycle wins)
    REDUCE_TIMEOUT = 0x38  #: RW  cycles a reduction group may stay incomplete; 0 = never times out
    ERR_BASE = 0x40    #: RO  error counter of cause c at ERR_BASE + 4*c (c < 16: 0x40..0x7C)
    SRC_ALLOW_BASE = 0x80  #: RW  srcs allowed on port p at SRC_ALLOW_BASE + 4*p (reset 0)


def src_allow_reg(port: int) -> int:
    """Offset of ``SRC_ALLOW_<port>``: bit s set = frames with ``src = s`` are accepted on that
    port (port 0, the local node, also always accepts ``src = NODE_ID``)."""
    if not 0 <= port <= 7:
        raise ValueError(f"port must be in 0..7, got {port!r}")
    return Reg.SRC_ALLOW_BASE + 4 * port


ERR_BASE = Reg.ERR_BASE


@dataclass(frozen=True)
class NicConfig:
    """Sizes of one NIC.

    Parameters
    ----------
    meta : MetaParams
        Header field widths.
    data_width : int
        Packet-stream width in bits; 64 (one int64 word or two int32 lanes per beat).
    n_net : int
        Network ports (2 for a ring, 4 for a 2-D mesh); port 0 is the local node.
    n_routes : int
        Route-table entries per bank (route_id must be below it).
    max_nodes : int
        Largest cluster (MEMBERS width, reduction slots); at least 16, at most 32.
    max_payload : int
        Largest payload in bytes a port accepts; multiple of 8.
    reduce_contexts : int
        SUM / MAX reduction groups (distinct ``(dst, kv_id)``) that may be open at once, 1..32.
        Each holds one accumulator of ``max_payload`` bytes (contributions are combined as they
        arrive), so a context costs ``max_payload_beats`` 64-bit words.
    merge_contexts : int
        SOFTMAX_MERGE groups that may be open at once, 1..8. The merge is a left fold in
        ascending src order, so each keeps every contribution until the group is complete:
        ``max_nodes * max_payload_beats`` 64-bit words per context.
    out_depth : int
        Beats buffered per output port.
    reduce_timeout : int
        Reset value of ``REDUCE_TIMEOUT`` (cycles, 0..2**32-1; 0 = groups never time out).
    """
    meta: MetaParams = DEFAULT_PARAMS
    data_width: int = 64
    n_net: int = 4
    n_routes: int = 64
    max_nodes: int = 16
    max_payload: int = 512
    reduce_contexts: int = 2
    merge_contexts: int = 2
    out_depth: int = 4
    reduce_timeout: int = DEFAULT_REDUCE_TIMEOUT

    def __post_init__(self):
        def bad(name, lim):
            raise ValueError(f"NicConfig.{name} must be {lim}, got {getattr(self, name)!r}")
        if self.data_width != 64:
            bad("data_width", "64")
        if not 1 <= self.n_net <= 7:
            bad("n_net", "in 1..7")
        if not 1 <= self.n_routes <= self.meta.max_routes:
            bad("n_routes", f"in 1..{self.meta.max_routes}")
        if not 16 <= self.max_nodes <= min(32, self.meta.max_nodes):
            bad("max_nodes", f"in 16..{min(32, self.meta.max_nodes)}")
        if not 24 <= self.max_payload <= self.meta.max_length or self.max_payload % 8:
            bad("max_payload", f"a multiple of 8 in 24..{self.meta.max_length}")
        if not 1 <= self.reduce_contexts <= 32:
            bad("reduce_contexts", "in 1..32")
        if not 1 <= self.merge_contexts <= 8:
            bad("merge_contexts", "in 1..8")
        if not 3 <= self.out_depth <= 64:     # SyncFIFOBuffered below depth 3 halves throughput
            bad("out_depth", "in 3..64")
        if not isinstance(self.reduce_timeout, int) or not 0 <= self.reduce_timeout < 2 ** 32:
            bad("reduce_timeout", "an integer in 0..2**32-1")

    @property
    def n_ports(self) -> int:
        return self.n_net + 1

    @property
    def beat_bytes(self) -> int:
        return self.data_width // 8

    @property
    def header_beats(self) -> int:
        return self.meta.header_beats(self.data_width)

    @property
    def max_payload_beats(self) -> int:
        return self.max_payload // self.beat_bytes

    @property
    def in_depth(self) -> int:
        """Payload beats buffered per input port: two largest packets (store and forward)."""
        return 2 * self.max_payload_beats
