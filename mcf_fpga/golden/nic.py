"""Golden model of one node's NIC: validation, routing, multicast, all-to-all, reductions.

A frame is the bytes of one packet: the ``MetaParams.header_bytes`` wire header
(``golden.header.pack_header``) followed by ``length`` payload bytes. ``NicModel.receive(port,
frame)`` returns what leaves the NIC, as ``[(out_port, frame), ...]``:

* **Validation** (``classify``): a frame with a fault is dropped and counts one
  ``ErrorCause`` (precedence: ``spec.nic.HEADER_CAUSE_ORDER``). Among the faults, the
  **source check**: a frame entering on port p must have its ``src`` bit set in
  ``src_allow[p]`` (the SRC_ALLOW_p registers; on the local port ``src == node_id`` is always
  allowed), else ``SPOOF`` (a src that is no member at all is ``SRC``). Every counted drop
  also sets its sticky bit in ``err_flags`` (ERR_FLAGS; ``clear_flags`` = ERR_CLEAR).
* **Routing**: the entry ``route_id`` of the *active* bank gives an output-port mask
  (bit 0 = local); the frame leaves unchanged on every port of the mask (except that the
  header's reserved bits and padding are re-emitted as zero).
* **All-to-all** (``collective == ALL_TO_ALL`` entering on the local port): the payload is
  ``NUM_NODES`` equal chunks; chunk ``j`` leaves as its own frame with ``dst = j``,
  ``route_id = route_id + j``, ``length = length / NUM_NODES``, routed by entry
  ``route_id + j`` (an empty entry drops that chunk and counts ``ROUTE``).
  All-to-all frames entering on a network port are routed like point-to-point ones.
* **Local delivery** (port 0): ``replica_invalidate`` frames change only directory state:
  their ``kv_id`` is appended to ``invalidations`` and no frame leaves. Frames with
  ``reduce_op != NONE`` enter the reduction engine (``ReduceModel``); its results leave on
  port 0. Everything else leaves on port 0 unchanged.
* **Reductions**: contributions are grouped by ``(dst, kv_id)``: the host gives every
  reduction in flight its own pair (``dst`` names the group or root). The first contribution
  sets the group's ``fanin`` (from its route entry) and its key fields (op, reduce_op, stage,
  collective, kv_id, length, fanin); a contribution whose key differs, or whose src already
  contributed, is dropped and counts ``REDUCE``. When ``fanin`` contributions have arrived the
  result is ``reduce_payloads(reduce_op, payloads, op=op)`` over the contributions in
  **ascending src order**. **Lane rule** (the op chooses the lane width, ``reduce_op`` the
  operation): ``SUM`` / ``MAX`` over ``op == PARTIAL_STATE`` use signed 64-bit lanes (the
  partials' int64 words; SUM wraps mod 2^64), over any other op (``REDUCTION``) signed 32-bit
  lanes (SUM wraps mod 2^32); ``SOFTMAX_MERGE`` (only with ``PARTIAL_STATE``) is
  ``golden.numerics.merge_partials`` (left fold) of the decoded partials. SUM and MAX are
  associative and commutative in these lanes, so their result does not depend on the order
  (the hardware accumulates them on arrival); the softmax fold does.
  The result frame has the group's key fields, ``src = NODE_ID``, ``dst`` = the group,
  ``route_id = 0``.
* **Reduction contexts** (``ReduceModel``): SUM/MAX groups and SOFTMAX_MERGE groups live in
  two pools of ``NicConfig.reduce_contexts`` and ``NicConfig.merge_contexts`` open groups. A
  contribution that would open one more group than its pool holds **waits**, and every later
  contribution to the reduction engine waits behind it (one input stream): nothing is dropped,
  nothing is counted. A group closes when its result leaves, or when it times out.
* **Reduction timeout** (``reduce_timeout`` = REDUCE_TIMEOUT, T cycles, 0 = never): a group
  still incomplete T cycles after its first contribution is dropped: its context is freed, its
  partial result discarded, ``TIMEOUT`` counted; waiting contributions then move on (a later
  contribution to the same ``(dst, kv_id)`` opens a new group).
* **Time** in this model advances only in ``idle(cycles)`` (no frame arrives for that long);
  frames themselves take no time. The hardware times the same rule in clock cycles
  (``hdl.nic.reduce``), so the two agree on which groups time out when every burst of traffic
  (first frame in to last frame out) lasts fewer than T cycles and the bursts are separated by
  ``idle`` gaps of at least T cycles: every group still open when a gap starts times out in it,
  none times out during a burst (tests/hdl/nic/test_nic_fuzz.py keeps to this; the cycle-exact
  boundaries are tested on the engine itself).

Partial-state payload (one query row): little-endian int64 words ``m, l, o[0..d-1]``
(``encode_partial``/``decode_partial``); ``m`` is the low 32 bits of its word, sign-extended.
Int32 / int64 vectors are little-endian int32 / int64 lanes (``encode_i32``, ``encode_i64``).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

import torch

from mcf_fpga.golden.numerics import Partial, merge_partials
from mcf_fpga.spec.topology import RouteEntry, src_masks
from mcf_fpga.spec.meta import Collective, MetaFields, MetaOp, ReduceOp
from mcf_fpga.golden.header import pack_header, unpack_header
from mcf_fpga.spec.nic import HEADER_CAUSE_ORDER, ErrorCause, NicConfig

__all__ = ["NicModel", "Verdict", "ReduceModel", "encode_partial", "decode_partial",
           "encode_i32", "decode_i32", "encode_i64", "decode_i64", "lane_bits", "reduce_payloads",
           "make_frame", "kv_id_int"]

#: (op, reduce_op) pairs the NIC reduces; any other reduce_op != NONE is an OP fault.
_REDUCE_PAIRS = {(MetaOp.REDUCTION, ReduceOp.SUM), (MetaOp.REDUCTION, ReduceOp.MAX),
                 (MetaOp.PARTIAL_STATE, ReduceOp.SUM), (MetaOp.PARTIAL_STATE, ReduceOp.MAX),
                 (MetaOp.PARTIAL_STATE, ReduceOp.SOFTMAX_MERGE)}


def make_frame(meta: MetaFields, payload: bytes = b"", cfg: NicConfig = NicConfig()) -> bytes:
    """Header + payload bytes (``meta.length`` is NOT adjusted: malformed frames are allowed)."""
    return pack_header(meta, cfg.meta) + bytes(payload)


def kv_id_int(meta: MetaFields, cfg: NicConfig = NicConfig()) -> int:
    """kv_id as the integer of ``hdl.meta.kv_id_layout`` (what the invalidation stream carries)."""
    return meta.kv_id[0] | (meta.kv_id[1] << cfg.meta.layer_bits)


def encode_i32(values) -> bytes:
    return struct.pack(f"<{len(values)}i", *values)


def decode_i32(payload: bytes) -> list:
    return list(struct.unpack(f"<{len(payload) // 4}i", payload))


def encode_i64(values) -> bytes:
    return struct.pack(f"<{len(values)}q", *values)


def decode_i64(payload: bytes) -> list:
    return list(struct.unpack(f"<{len(payload) // 8}q", payload))


def encode_partial(m: int, l: int, o) -> bytes:
    return struct.pack(f"<{2 + len(o)}q", m, l, *o)


def decode_partial(payload: bytes) -> Partial:
    words = struct.unpack(f"<{len(payload) // 8}q", payload)
    m = ((words[0] & 0xFFFFFFFF) ^ 0x80000000) - 0x80000000
    return Partial(torch.tensor(m, dtype=torch.int64), torch.tensor(words[1], dtype=torch.int64),
                   torch.tensor(words[2:], dtype=torch.int64))


def lane_bits(op) -> int:
    """Lane width of SUM / MAX (module docstring): 64 over ``PARTIAL_STATE`` payloads (int64
    words), 32 over any other op."""
    return 64 if int(op) == MetaOp.PARTIAL_STATE else 32


def reduce_payloads(reduce_op: ReduceOp, payloads, *, op) -> bytes:
    """Reduce payloads given in ascending-src order (module docstring); ``op`` (the packets'
    ``MetaOp``) chooses the SUM/MAX lane width (``lane_bits``)."""
    if reduce_op == ReduceOp.SOFTMAX_MERGE:
        p = merge_partials([decode_partial(x) for x in payloads])
        return encode_partial(int(p.m), int(p.l), [int(v) for v in p.o])
    bits = lane_bits(op)
    enc, dec = (encode_i64, decode_i64) if bits == 64 else (encode_i32, decode_i32)
    vecs = [dec(x) for x in payloads]
    if reduce_op == ReduceOp.SUM:
        half = 1 << (bits - 1)
        out = [((sum(col) + half) % (2 * half)) - half for col in zip(*vecs)]
    elif reduce_op == ReduceOp.MAX:
        out = [max(col) for col in zip(*vecs)]
    else:
        raise ValueError(f"reduce_op must be SUM, MAX or SOFTMAX_MERGE, got {reduce_op!r}")
    return enc(out)


@dataclass
class Verdict:
    """Result of validating one frame: ``cause`` is None for a good frame."""
    cause: ErrorCause | None
    meta: MetaFields | None = None
    payload: bytes = b""
    entry: RouteEntry = RouteEntry()


@dataclass
class _Group:
    key: tuple
    fanin: int
    deadline: int | None = None     # model time at which it times out (None: never)
    slots: dict = field(default_factory=dict)


class ReduceModel:
    """The reduction engine at the local port (module docstring: reductions, contexts, timeout,
    time). ``timeout`` is REDUCE_TIMEOUT (default ``cfg.reduce_timeout``), read when a group
    opens; ``now`` is the model time (cycles of ``advance``)."""

    def __init__(self, cfg: NicConfig, timeout: int | None = None):
        self.cfg = cfg
        self.timeout = cfg.reduce_timeout if timeout is None else timeout
        self.now = 0
        self.groups: dict = {}
        self.waiting: list = []     # (meta, payload, fanin) held at the engine's input, in order

    @staticmethod
    def pool(reduce_op) -> str:
        """``"merge"`` for SOFTMAX_MERGE groups, ``"reduce"`` for SUM / MAX groups."""
        return "merge" if int(reduce_op) == ReduceOp.SOFTMAX_MERGE else "reduce"

    def open_groups(self, pool: str) -> int:
        return sum(1 for g in self.groups.values() if self.pool(g.key[1]) == pool)

    def capacity(self, pool: str) -> int:
        return self.cfg.merge_contexts if pool == "merge" else self.cfg.reduce_contexts

    def contribute(self, meta: MetaFields, payload: bytes, fanin: int, node_id: int):
        """Returns ``(result_frame or None, error_cause or None)``; a contribution that must wait
        for a context (see module docstring) returns ``(None, None)`` and joins ``waiting``."""
        gid = (meta.dst, meta.kv_id)
        if self.waiting or (gid not in self.groups and self.open_groups(self.pool(meta.reduce_op))
                            >= self.capacity(self.pool(meta.reduce_op))):
            self.waiting.append((meta, payload, fanin))
            return None, None
        key = (int(meta.op), int(meta.reduce_op), int(meta.stage), int(meta.collective),
               meta.kv_id, meta.length, fanin)
        g = self.groups.get(gid)
        if g is None:
            g = self.groups[gid] = _Group(key, fanin, self.now + self.timeout if self.timeout else None)
        elif g.key != key or meta.src in g.slots:
            return None, ErrorCause.REDUCE
        g.slots[meta.src] = payload
        if len(g.slots) < g.fanin:
            return None, None
        del self.groups[gid]
        result = reduce_payloads(ReduceOp(int(meta.reduce_op)), [g.slots[s] for s in sorted(g.slots)],
                                 op=meta.op)
        out = MetaFields(op=meta.op, reduce_op=meta.reduce_op, stage=meta.stage,
                         collective=meta.collective, kv_id=meta.kv_id, length=meta.length,
                         src=node_id, dst=meta.dst, route_id=0)
        return make_frame(out, result, self.cfg), None

    def advance(self, cycles: int, node_id: int):
        """``cycles`` pass with nothing arriving: groups reaching their deadline time out (in
        deadline order); after each, the waiting contributions are offered again, in order.
        Returns ``(result frames, error causes)`` of that, in order."""
        if cycles < 0:
            raise ValueError(f"cycles must be >= 0, got {cycles}")
        end, results, errors = self.now + cycles, [], []
        while True:
            due = [g.deadline for g in self.groups.values() if g.deadline is not None]
            if not due or min(due) > end:
                break
            self.now = min(due)
            for gid in [gid for gid, g in self.groups.items() if g.deadline == self.now]:
                del self.groups[gid]
                errors.append(ErrorCause.TIMEOUT)
            waiting, self.waiting = self.waiting, []
            for meta, payload, fanin in waiting:
                res, err = self.contribute(meta, payload, fanin, node_id)
                if err is not None:
                    errors.append(err)
                if res is not None:
                    results.append(res)
        self.now = end
        return results, errors


class NicModel:
    """One node's NIC. Registers are attributes named as in ``spec.nic.Reg``:
    ``src_allow`` is the list of SRC_ALLOW_p values (p = 0..n_net) and defaults to every member
    on every port (a NIC whose source check is open; the hardware resets to 0, so a harness
    writes this model's values: tests/hdl/nic/nic_tb.configure_ops); ``reduce_timeout`` is
    REDUCE_TIMEOUT. ``errors`` are the ERR_c counters, ``err_flags`` the ERR_FLAGS bits."""

    def __init__(self, cfg: NicConfig = NicConfig(), node_id: int = 0, num_nodes: int | None = None,
                 members: int | None = None, num_layers: int = 1 << 8, num_blocks: int = 1 << 20,
                 src_allow=None, reduce_timeout: int | None = None):
        self.cfg = cfg
        self.node_id = node_id
        self.num_nodes = cfg.max_nodes if num_nodes is None else num_nodes
        self.members = (1 << cfg.max_nodes) - 1 if members is None else members
        self.num_layers, self.num_blocks = num_layers, num_blocks
        everyone = (1 << cfg.max_nodes) - 1
        self.src_allow = [everyone] * cfg.n_ports if src_allow is None else list(src_allow)
        if len(self.src_allow) != cfg.n_ports or not all(0 <= v <= everyone for v in self.src_allow):
            raise ValueError(f"src_allow must be {cfg.n_ports} masks of {cfg.max_nodes} bits, got {src_allow!r}")
        self.banks = [[RouteEntry()] * cfg.n_routes for _ in range(2)]
        self.active = 0
        self.errors = {c: 0 for c in ErrorCause}
        self.err_flags = 0
        self.rx_frames = 0
        self.invalidations: list = []
        self.reduce = ReduceModel(cfg, reduce_timeout)

    @property
    def reduce_timeout(self) -> int:
        return self.reduce.timeout

    @reduce_timeout.setter
    def reduce_timeout(self, cycles: int):
        self.reduce.timeout = cycles

    def fresh(self) -> "NicModel":
        """A new NIC with this one's register values (no routes, counts or reduction state)."""
        return NicModel(self.cfg, self.node_id, self.num_nodes, self.members, self.num_layers,
                        self.num_blocks, self.src_allow, self.reduce_timeout)

    def count(self, cause: ErrorCause, n: int = 1):
        """Count ``n`` drops of ``cause`` (ERR_c) and set its ERR_FLAGS bit."""
        self.errors[cause] += n
        if n:
            self.err_flags |= 1 << cause

    def clear_flags(self, mask: int):
        """ERR_CLEAR: clear the ERR_FLAGS bits set in ``mask``."""
        self.err_flags &= ~mask

    # ---- configuration
    def write_route(self, route_id: int, entry: RouteEntry):
        """Write the SHADOW bank."""
        if not 0 <= route_id < self.cfg.n_routes:
            raise ValueError(f"route_id must be in 0..{self.cfg.n_routes - 1}, got {route_id}")
        self.banks[1 - self.active][route_id] = entry

    def flip(self):
        self.active ^= 1

    def load_table(self, table: dict):
        """Write every entry of ``{route_id: RouteEntry}`` to the shadow bank and flip."""
        for rid in range(self.cfg.n_routes):
            self.write_route(rid, table.get(rid, RouteEntry()))
        self.flip()

    # ---- validation
    def classify(self, port: int, frame: bytes) -> Verdict:
        cfg = self.cfg
        hb = cfg.meta.header_bytes
        if len(frame) < hb:
            return Verdict(ErrorCause.LENGTH)
        meta = unpack_header(frame[:hb], cfg.meta)
        payload = frame[hb:]
        op, rop, coll = int(meta.op), int(meta.reduce_op), int(meta.collective)
        is_reduce = rop != ReduceOp.NONE
        a2a_local = port == 0 and coll == Collective.ALL_TO_ALL
        entry = (self.banks[self.active][meta.route_id] if meta.route_id < cfg.n_routes
                 else RouteEntry())
        n = self.num_nodes
        src_ok = ((self.src_allow[port] >> meta.src) & 1) or (port == 0 and meta.src == self.node_id)
        fault = {
            ErrorCause.OP: op >= 8 or op in (MetaOp.ACK, MetaOp.NAK) or (is_reduce and (op, rop) not in _REDUCE_PAIRS),
            ErrorCause.SRC: meta.src >= cfg.max_nodes or not (self.members >> meta.src) & 1,
            ErrorCause.SPOOF: not src_ok,
            ErrorCause.DST: coll in (Collective.P2P, Collective.ALL_TO_ALL) and meta.dst >= n,
            ErrorCause.ROUTE: (meta.route_id >= cfg.n_routes
                               or (a2a_local and meta.route_id + n > cfg.n_routes)
                               or (not a2a_local and entry.mask & ((1 << cfg.n_ports) - 1) == 0)
                               or (not a2a_local and is_reduce and entry.mask & 1
                                   and not 1 <= entry.fanin <= cfg.max_nodes)),
            ErrorCause.KV: op in (MetaOp.KV_REPLICA, MetaOp.REPLICA_INVALIDATE) and (
                meta.kv_id[0] >= self.num_layers or meta.kv_id[1] >= self.num_blocks),
            ErrorCause.LENGTH: (meta.length > cfg.max_payload
                                or (is_reduce and (meta.length == 0 or meta.length % 8))
                                or (rop == ReduceOp.SOFTMAX_MERGE and meta.length < 24)
                                or (a2a_local and (n == 0 or meta.length == 0 or meta.length % (8 * n)))
                                or len(payload) != meta.length),
        }
        cause = next((c for c in HEADER_CAUSE_ORDER if fault[c]), None)
        return Verdict(cause, meta, payload, entry)

    # ---- datapath
    def receive(self, port: int, frame: bytes) -> list:
        """Process one frame arriving on ``port``; returns ``[(out_port, frame), ...]``."""
        v = self.classify(port, frame)
        if v.cause is not None:
            self.count(v.cause)
            return []
        self.rx_frames += 1
        meta = v.meta
        if port == 0 and int(meta.collective) == Collective.ALL_TO_ALL:
            out = []
            chunk = meta.length // self.num_nodes
            for j in range(self.num_nodes):
                m = meta.replace(dst=j, route_id=meta.route_id + j, length=chunk)
                e = self.banks[self.active][m.route_id]
                if e.mask & ((1 << self.cfg.n_ports) - 1) == 0:
                    self.count(ErrorCause.ROUTE)
                    continue
                f = make_frame(m, v.payload[j * chunk:(j + 1) * chunk], self.cfg)
                out += self._deliver(m, f, e)
            return out
        # the NIC re-emits the header from its fields: reserved bits and padding become zero
        return self._deliver(meta, make_frame(meta, v.payload, self.cfg), v.entry)

    def _deliver(self, meta, frame, entry) -> list:
        out = []
        for p in range(self.cfg.n_ports):
            if not (entry.mask >> p) & 1:
                continue
            if p != 0:
                out.append((p, frame))
            elif int(meta.op) == MetaOp.REPLICA_INVALIDATE:
                self.invalidations.append(kv_id_int(meta, self.cfg))
            elif int(meta.reduce_op) != ReduceOp.NONE:
                res, err = self.reduce.contribute(meta, frame[self.cfg.meta.header_bytes:],
                                                  entry.fanin, self.node_id)
                if err is not None:
                    self.count(err)
                if res is not None:
                    out.append((0, res))
            else:
                out.append((0, frame))
        return out

    def idle(self, cycles: int) -> list:
        """``cycles`` pass with no frame arriving (module docstring: time): reduction groups
        time out; returns ``[(0, result frame), ...]`` of contributions that waited."""
        results, errors = self.reduce.advance(cycles, self.node_id)
        for e in errors:
            self.count(e)
        return [(0, r) for r in results]


class ClusterModel:
    """Golden cluster: one ``NicModel`` per node of ``topo``, network ports joined as the
    topology says (``mcf_fpga/spec/topology.py``), each NIC's ``src_allow`` = ``src_masks(topo, i)``
    (what ``sim.cluster.configure_nodes`` writes). ``send(node, frame)`` injects a frame on a node's
    local port and moves it (and everything it causes) hop by hop until no frame is in
    flight; frames delivered to a node's local port are appended to ``delivered[node]``,
    invalidations to ``nodes[i].invalidations``."""

    def __init__(self, topo, cfg: NicConfig, tables, **regs):
        from collections import deque
        self.topo, self.cfg = topo, cfg
        self.nodes = []
        for i in range(topo.n):
            allow = src_masks(topo, i)
            allow += [0] * (cfg.n_ports - len(allow))       # ports the topology leaves unconnected
            nic = NicModel(cfg, node_id=i, num_nodes=topo.n, **{"src_allow": allow, **regs})
            nic.load_table(tables[i])
            self.nodes.append(nic)
        self.delivered = [[] for _ in range(topo.n)]
        self._queue = deque()

    def send(self, node: int, frame: bytes):
        self._queue.append((node, 0, frame))
        while self._queue:
            n, port, f = self._queue.popleft()
            for out_port, out in self.nodes[n].receive(port, f):
                if out_port == 0:
                    self.delivered[n].append(out)
                else:
                    nb = self.topo.neighbor(n, out_port)
                    if nb is None:
                        raise ValueError(f"node {n} sends on unconnected port {out_port}")
                    self._queue.append((nb, self.topo.in_port(nb, n), out))
