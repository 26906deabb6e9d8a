"""The host's copy of a node's KV pool when the NIC installs KV itself (issue #18 item 4).

With ``NodeConfig.kv_install`` the pool takes commands from three ports: the host (``cmd``), the
NIC's replica-invalidation messages and the KV installer (``BEGIN_INSTALL`` on a unit's first
packet, ``COMMIT_INSTALL`` / ``COMMIT_OWNER`` after its last). The order in which they meet decides
which slot an allocation gets, so the host cannot predict the answers from its own commands. The
node reports every command it executes, with its answer, on ``m_axis_kvevent``
(``hdl.kvpool.event_layout``); :class:`PoolMirror` replays them, in that order, into
:class:`golden.kvpool.KVPool` and checks every answer bit for bit. Then

* the host's own commands get golden's answer in hardware order (:meth:`PoolMirror.host_answer`);
* a unit the installer committed is announced with its slot (:meth:`PoolMirror.installed`);
* an allocation the installer could not make (``FULL``, ``OUT_OF_RANGE``, ``EXISTS`` in a state
  other than ``INSTALLING``) is an error: the unit's packets were dropped and counted, nobody
  would ever finish waiting for it.
"""
from __future__ import annotations

import collections

from golden.kvpool import Opcode, State, Status
from hdl.meta import DEFAULT_PARAMS

__all__ = ["PoolMirror", "struct_value", "SRC_HOST", "SRC_NIC", "SRC_INSTALL"]

SRC_HOST, SRC_NIC, SRC_INSTALL = 0, 1, 2       #: ``event.src`` (hdl.kvpool.event_layout)
_COMMITS = (Opcode.COMMIT_INSTALL, getattr(Opcode, "COMMIT_OWNER", None))


def struct_value(layout, value: int) -> dict:
    """The fields of ``value`` (an int holding the bits of an ``amaranth.lib.data.StructLayout``,
    first field at bit 0) as a dict; nested structs become nested dicts."""
    from amaranth.lib import data
    from amaranth.hdl import Shape
    out = {}
    for name, field in layout:
        w = Shape.cast(field.shape).width
        bits = value >> field.offset & ((1 << w) - 1)
        shape = field.shape
        out[name] = struct_value(shape, bits) if isinstance(shape, data.StructLayout) else bits
    return out


class PoolMirror:
    """``pool``: the golden pool (same slots, budget and directory range as the node's);
    ``layout``: the event struct (``hdl.kvpool.event_layout``); ``node``: for messages."""

    def __init__(self, pool, layout, node: int):
        self.pool, self.layout, self.node = pool, layout, node
        self.host = collections.deque()          # golden answers of the host's commands, in order
        self.commits = collections.defaultdict(collections.deque)   # (layer, unit) -> slots
        self.count = collections.Counter()       # (src, opcode name) -> events
        self.log = []                            # (src, opcode, kv_id, status) of every event

    @staticmethod
    def unit(kv_id: int) -> tuple:
        lb = DEFAULT_PARAMS.layer_bits
        return kv_id & ((1 << lb) - 1), kv_id >> lb

    def feed(self, frame: bytes):
        """One ``m_axis_kvevent`` frame: replay it, check the answer, route it."""
        from host.errors import ExecError
        ev = struct_value(self.layout, int.from_bytes(frame, "little"))
        src, op, kid, got = ev["src"], ev["cmd"]["opcode"], ev["cmd"]["kv_id"], ev["resp"]
        gold = self.pool.execute(op, kid)
        exp = {"status": int(gold.status), "slot": gold.slot, "state": int(gold.state),
               "readers": gold.readers, "freed": int(gold.freed)}
        if {k: got[k] for k in exp} != exp:
            raise ExecError(f"node {self.node}: the KV pool answered {got} to {_name(op)} {self.unit(kid)} "
                            f"from source {src}; golden.kvpool replaying the node's command order says {exp}")
        self.count[(src, _name(op))] += 1
        self.log.append((src, op, kid, gold.status))
        if src == SRC_HOST:
            self.host.append(gold)
        elif src == SRC_INSTALL:
            if op == Opcode.BEGIN_INSTALL and not (
                    gold.status == Status.OK
                    or (gold.status == Status.EXISTS and gold.state == State.INSTALLING)):
                raise ExecError(f"node {self.node}: the KV installer could not allocate a slot for "
                                f"{self.unit(kid)}: {gold.status.name} (slots in use "
                                f"{self.pool.used_slots} of budget {self.pool.budget}); the unit's "
                                f"packets are dropped (raise NodeConfig.kv_slots or the pool budget)")
            if op in _COMMITS:
                if gold.status != Status.OK:
                    raise ExecError(f"node {self.node}: the KV installer's {_name(op)} of "
                                    f"{self.unit(kid)} answered {gold.status.name}")
                self.commits[self.unit(kid)].append(gold.slot)

    def host_answer(self):
        """The next golden answer to a host command, or None if its event has not arrived yet."""
        return self.host.popleft() if self.host else None

    def installed(self, layer: int, unit: int):
        """The slot of the next committed install of (layer, unit), or None (not yet)."""
        q = self.commits.get((layer, unit))
        return q.popleft() if q else None


def _name(op: int) -> str:
    try:
        return Opcode(op).name
    except ValueError:
        return f"opcode {op}"
