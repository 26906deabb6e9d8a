"""The host's copy of a node's KV pool when the NIC installs KV itself.

With ``NodeConfig.kv_install`` the pool takes commands from three ports: the host (``cmd``), the
NIC's replica-invalidation messages and the KV installer (``BEGIN_INSTALL`` on a unit's first
packet, ``COMMIT_INSTALL`` / ``COMMIT_OWNER`` after its last). The order in which they meet decides
which slot an allocation gets, so the host cannot predict the answers from its own commands. The
node reports every command it executes, with its answer, on ``m_axis_kvevent``
(``hdl.kvpool.event_layout``); :class:`PoolMirror` replays them, in that order, into
:class:`golden.kvpool.KVPool` (``KVPool.replay``) and checks every answer bit for bit. Then

* the commands of the pool's command port (the host's, or the command fetcher's) get golden's
  answer in hardware order (:meth:`PoolMirror.host_answer`; the fetcher's lookups are
  replayed and checked but not queued: no program command is a lookup);
* a unit the installer committed is announced with its slot (:meth:`PoolMirror.installed`);
* an allocation the installer could not make (``FULL``, ``OUT_OF_RANGE``, ``EXISTS`` in a state
  other than ``INSTALLING``) is an error: the unit's packets were dropped and counted, nobody
  would ever finish waiting for it.
"""
from __future__ import annotations

import collections

from mcf_fpga.golden.kvpool import EventMismatch
from mcf_fpga.spec.kvpool import Opcode, Source, State, Status
from mcf_fpga.spec.meta import DEFAULT_PARAMS

__all__ = ["PoolMirror"]

_COMMITS = (Opcode.COMMIT_INSTALL, getattr(Opcode, "COMMIT_OWNER", None))


class PoolMirror:
    """``pool``: the golden pool (same slots, budget and directory range as the node's);
    ``widths``: ``(kv_id_width, n_slots, max_readers)`` of the node's event layout
    (``hdl.kvpool.event_layout``); ``node``: for messages."""

    def __init__(self, pool, widths: tuple, node: int):
        self.pool, self.widths, self.node = pool, widths, node
        self.host = collections.deque()          # golden answers of the host's commands, in order
        self.commits = collections.defaultdict(collections.deque)   # (layer, unit) -> slots
        self.count = collections.Counter()       # (Source, opcode name) -> events

    @staticmethod
    def unit(kv_id: int) -> tuple:
        lb = DEFAULT_PARAMS.layer_bits
        return kv_id & ((1 << lb) - 1), kv_id >> lb

    def feed(self, frame: bytes):
        """One ``m_axis_kvevent`` frame: replay it into golden (the answer must match), route it."""
        from mcf_fpga.hdl.kvpool import unpack_event
        from .runtime import ExecError
        ev = unpack_event(int.from_bytes(frame, "little"), *self.widths)
        try:
            (gold,) = self.pool.replay([ev])
        except EventMismatch as e:
            raise ExecError(f"node {self.node}: {self.unit(ev.kv_id)}: {e}") from None
        op = ev.opcode
        self.count[(ev.src, _name(op))] += 1
        if ev.src == Source.CMD:
            if op != Opcode.LOOKUP:      # the command fetcher's lookups (slot patches, WAIT_KV polls)
                self.host.append(gold)
        elif ev.src == Source.ICMD:
            if op == Opcode.BEGIN_INSTALL and not (
                    gold.status == Status.OK
                    or (gold.status == Status.EXISTS and gold.state == State.INSTALLING)):
                raise ExecError(f"node {self.node}: the KV installer could not allocate a slot for "
                                f"{self.unit(ev.kv_id)}: {gold.status.name} (slots in use "
                                f"{self.pool.used_slots} of budget {self.pool.budget}); the unit's "
                                f"packets are dropped (raise NodeConfig.kv_slots or the pool budget)")
            if op in _COMMITS:
                if gold.status != Status.OK:
                    raise ExecError(f"node {self.node}: the KV installer's {_name(op)} of "
                                    f"{self.unit(ev.kv_id)} answered {gold.status.name}")
                self.commits[self.unit(ev.kv_id)].append(gold.slot)

    def commits_counted(self) -> int:
        """Commits the installer made (its ``COMMIT_*`` events)."""
        return sum(v for (src, name), v in self.count.items()
                   if src == Source.ICMD and name.startswith("COMMIT"))

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
