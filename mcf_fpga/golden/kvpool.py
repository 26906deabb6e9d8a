"""Golden model of the KV pool and its replica directory (MCF §4, Progressive Replica Convergence).

A node's KV pool is ``n_slots`` fixed-size block slots of ``block_bytes`` each. A
directory maps ``kv_id`` to a slot and a lifecycle state; every slot has a reader
count. The hardware twin is :class:`hdl.kvpool.KVPool`; both answer every command
with the same :class:`Response` (status, slot, state, readers, freed), bit for bit.

Lifecycle
---------
* ``OWNER``: the node's own shard of a block. Never dropped by replica traffic: drain
  and invalidate refuse it (``IS_OWNER``). Only :meth:`KVPool.free_owner` frees it, and
  only with no readers (``BUSY`` otherwise).
* ``REPLICA_VALID``: a temporary replica; readable, new readers may acquire it.
* ``REPLICA_DRAINING``: excluded from future scheduling: new acquires are refused
  (``NOT_READABLE``) while readers already holding it keep reading. The slot is freed by
  the release that brings its readers to zero (or at once when marked with no readers).
* ``INVALID``: an invalidated replica whose readers have not all released yet: no new
  readers, lookup answers ``INVALID`` status; freed by the last release. A replica
  invalidated with no readers is freed at once and leaves the directory.
* ``INSTALLING``: a replica slot allocated by ``BEGIN_INSTALL`` whose bytes are still
  arriving (the NIC install path). Not readable (``ACQUIRE`` answers ``NOT_READABLE``),
  so it never has readers; ``INVALIDATE`` or ``MARK_DRAINING`` frees it at once;
  ``COMMIT_INSTALL`` turns it into ``REPLICA_VALID``, ``COMMIT_OWNER`` into ``OWNER`` (a unit
  installed as the node's own block, e.g. a prefilled unit shipped to its decode owner). Its
  bytes count as replica bytes until then (``COMMIT_OWNER`` moves them to the owner bytes; the
  slots in use, hence the peak, do not change).

Rules shared with the hardware
------------------------------
* Allocation takes the lowest-numbered free slot. It is refused with ``FULL`` when the
  slots in use reach ``budget`` (a run-time value <= ``n_slots``; lowering it never
  evicts anything) and with ``EXISTS`` when ``kv_id`` is already in the directory. A
  refused command leaves the state unchanged.
* A pool built with ``table=(layers, blocks)`` (the hardware's direct-mapped table
  directory) holds only kv_ids whose ``layer`` (bits ``0..layer_bits-1``) is below
  ``layers`` and whose ``block`` (the bits above) is below ``blocks``: an allocation of
  any other kv_id is refused with ``OUT_OF_RANGE`` (checked first); every other command
  on it answers as for an unknown kv_id (``UNKNOWN``; a NIC message is dropped).
* The reader count saturates at ``max_readers``: an acquire beyond it is refused
  (``READERS_FULL``); a release at zero is refused (``NO_READERS``).
* Counters: owner bytes, replica bytes (valid + draining + invalid-pending + installing slots) and
  the peak of their sum since reset (or since :meth:`KVPool.clear_peak`).
"""
from __future__ import annotations

from dataclasses import dataclass

from mcf_fpga.spec.kvpool import Event, Opcode, Response, Source, State, Status

__all__ = ["EventMismatch", "KVPool", "twin_of"]


class EventMismatch(AssertionError):
    """:meth:`KVPool.replay`: an event's answer differs from golden's (the message names it)."""


@dataclass
class _Entry:
    slot: int
    state: State
    readers: int = 0


class KVPool:
    """Golden KV pool.

    Parameters
    ----------
    n_slots : int
        Physical block slots (the default memory budget).
    block_bytes : int
        Bytes per slot (used only for the byte counters).
    kv_id_width : int
        Width of kv_id; a kv_id outside ``[0, 2**kv_id_width)`` raises ``ValueError``.
    max_readers : int
        Largest reader count (hardware counter saturates here).
    budget : int or None
        Run-time slot budget (``None`` = ``n_slots``).
    table : (int, int) or None
        ``(layers, blocks)``: the kv_id range of a table directory (``hdl.kvpool.KVPool(
        directory="table")``); ``None`` (default): every kv_id can be allocated (the CAM).
    layer_bits : int
        Width of kv_id's ``layer`` field (``hdl.meta.kv_id_layout``: 8); used with ``table``.
    """

    def __init__(self, n_slots: int, block_bytes: int, *, kv_id_width: int = 32,
                 max_readers: int = 15, budget: int | None = None,
                 table: tuple[int, int] | None = None, layer_bits: int = 8):
        if n_slots < 1:
            raise ValueError(f"n_slots must be >= 1, got {n_slots}")
        if block_bytes < 1:
            raise ValueError(f"block_bytes must be >= 1, got {block_bytes}")
        if kv_id_width < 1:
            raise ValueError(f"kv_id_width must be >= 1, got {kv_id_width}")
        if max_readers < 1:
            raise ValueError(f"max_readers must be >= 1, got {max_readers}")
        if table is not None:
            layers, blocks = table
            if layers < 1:
                raise ValueError(f"table layers must be >= 1, got {layers}")
            if blocks < 1:
                raise ValueError(f"table blocks must be >= 1, got {blocks}")
        if layer_bits < 1:
            raise ValueError(f"layer_bits must be >= 1, got {layer_bits}")
        self.n_slots, self.block_bytes = n_slots, block_bytes
        self.kv_id_width, self.max_readers = kv_id_width, max_readers
        self.table, self.layer_bits = table, layer_bits
        self._dir: dict[int, _Entry] = {}
        self._budget = n_slots
        self.peak_slots = 0
        if budget is not None:
            self.budget = budget

    # ------------------------------------------------------------------ state queries
    @property
    def budget(self) -> int:
        return self._budget

    @budget.setter
    def budget(self, value: int):
        """Set the slot budget; values above ``n_slots`` are clamped to ``n_slots``
        (as the hardware register does). Lowering it never evicts."""
        if value < 0:
            raise ValueError(f"budget must be >= 0, got {value}")
        self._budget = min(value, self.n_slots)

    def entries(self) -> dict[int, tuple[int, State, int]]:
        """Snapshot ``{kv_id: (slot, state, readers)}``."""
        return {k: (e.slot, e.state, e.readers) for k, e in self._dir.items()}

    @property
    def used_slots(self) -> int:
        return len(self._dir)

    @property
    def owner_slots(self) -> int:
        return sum(e.state == State.OWNER for e in self._dir.values())

    @property
    def replica_slots(self) -> int:
        return self.used_slots - self.owner_slots

    @property
    def owner_bytes(self) -> int:
        return self.owner_slots * self.block_bytes

    @property
    def replica_bytes(self) -> int:
        return self.replica_slots * self.block_bytes

    @property
    def peak_bytes(self) -> int:
        return self.peak_slots * self.block_bytes

    def clear_peak(self):
        """Restart peak tracking from the current usage."""
        self.peak_slots = self.used_slots

    # ------------------------------------------------------------------ helpers
    def _check(self, kv_id: int):
        if not isinstance(kv_id, int) or not 0 <= kv_id < (1 << self.kv_id_width):
            raise ValueError(f"kv_id must be an integer in 0..{(1 << self.kv_id_width) - 1}, "
                             f"got {kv_id!r}")

    def _resp(self, status, kv_id, freed=False):
        e = self._dir.get(kv_id)
        if e is None:
            return Response(Status(status), freed=freed)
        return Response(Status(status), e.slot, e.state, e.readers, freed)

    def _free(self, kv_id) -> Response:
        del self._dir[kv_id]
        return Response(Status.OK, freed=True)

    def in_range(self, kv_id: int) -> bool:
        """Can kv_id be allocated? Always without ``table``; else its layer < layers and
        block < blocks."""
        if self.table is None:
            return True
        layers, blocks = self.table
        return (kv_id & ((1 << self.layer_bits) - 1)) < layers and (kv_id >> self.layer_bits) < blocks

    def _allocate(self, kv_id, state) -> Response:
        self._check(kv_id)
        if not self.in_range(kv_id):
            return Response(Status.OUT_OF_RANGE)
        if kv_id in self._dir:
            return self._resp(Status.EXISTS, kv_id)
        if self.used_slots >= self._budget:
            return Response(Status.FULL)
        taken = {e.slot for e in self._dir.values()}
        slot = next(s for s in range(self.n_slots) if s not in taken)
        self._dir[kv_id] = _Entry(slot, state)
        self.peak_slots = max(self.peak_slots, self.used_slots)
        return self._resp(Status.OK, kv_id)

    # ------------------------------------------------------------------ operations
    def lookup(self, kv_id: int) -> Response:
        """Where is kv_id? ``OK`` with its slot/state/readers, or ``UNKNOWN``."""
        self._check(kv_id)
        if kv_id not in self._dir:
            return Response(Status.UNKNOWN)
        return self._resp(Status.OK, kv_id)

    def alloc_owner(self, kv_id: int) -> Response:
        """Allocate a slot for the node's own shard of kv_id (state ``OWNER``)."""
        return self._allocate(kv_id, State.OWNER)

    def install_replica(self, kv_id: int) -> Response:
        """Allocate a slot for a temporary replica of kv_id (state ``REPLICA_VALID``)."""
        return self._allocate(kv_id, State.REPLICA_VALID)

    def begin_install(self, kv_id: int) -> Response:
        """Allocate a slot for a replica whose bytes are still arriving (state
        ``INSTALLING``: not readable); same refusals as :meth:`install_replica`."""
        return self._allocate(kv_id, State.INSTALLING)

    def commit_install(self, kv_id: int) -> Response:
        """The replica's bytes have all arrived: ``INSTALLING`` -> ``REPLICA_VALID``.
        Any other entry is refused (``NOT_INSTALLING``), an absent one answers ``UNKNOWN``."""
        return self._commit(kv_id, State.REPLICA_VALID)

    def commit_owner(self, kv_id: int) -> Response:
        """The unit's bytes have all arrived and it becomes the node's own block:
        ``INSTALLING`` -> ``OWNER`` (its bytes move from the replica to the owner counter).
        Refusals as :meth:`commit_install` (``NOT_INSTALLING``, ``UNKNOWN``)."""
        return self._commit(kv_id, State.OWNER)

    def _commit(self, kv_id: int, state: State) -> Response:
        self._check(kv_id)
        e = self._dir.get(kv_id)
        if e is None:
            return Response(Status.UNKNOWN)
        if e.state != State.INSTALLING:
            return self._resp(Status.NOT_INSTALLING, kv_id)
        e.state = state
        return self._resp(Status.OK, kv_id)

    def mark_draining(self, kv_id: int) -> Response:
        """Replica valid -> draining (no new readers); freed now if it has no readers,
        else by its last release. An installing replica is freed at once (it has no
        readers). Draining/invalid entries answer ``OK`` unchanged."""
        self._check(kv_id)
        e = self._dir.get(kv_id)
        if e is None:
            return Response(Status.UNKNOWN)
        if e.state == State.OWNER:
            return self._resp(Status.IS_OWNER, kv_id)
        if e.state == State.INSTALLING:
            return self._free(kv_id)
        if e.state == State.REPLICA_VALID:
            if e.readers == 0:
                return self._free(kv_id)
            e.state = State.REPLICA_DRAINING
        return self._resp(Status.OK, kv_id)

    def invalidate(self, kv_id: int) -> Response:
        """Invalidate a replica: freed now if it has no readers, else state ``INVALID``
        until its last release. Owners are refused (``IS_OWNER``)."""
        self._check(kv_id)
        e = self._dir.get(kv_id)
        if e is None:
            return Response(Status.UNKNOWN)
        if e.state == State.OWNER:
            return self._resp(Status.IS_OWNER, kv_id)
        if e.readers == 0:
            return self._free(kv_id)
        e.state = State.INVALID
        return self._resp(Status.OK, kv_id)

    def acquire(self, kv_id: int) -> Response:
        """Take a read reference on an owner or valid replica."""
        self._check(kv_id)
        e = self._dir.get(kv_id)
        if e is None:
            return Response(Status.UNKNOWN)
        if e.state not in (State.OWNER, State.REPLICA_VALID):
            return self._resp(Status.NOT_READABLE, kv_id)
        if e.readers >= self.max_readers:
            return self._resp(Status.READERS_FULL, kv_id)
        e.readers += 1
        return self._resp(Status.OK, kv_id)

    def release(self, kv_id: int) -> Response:
        """Drop a read reference; the last release of a draining/invalid replica frees it."""
        self._check(kv_id)
        e = self._dir.get(kv_id)
        if e is None:
            return Response(Status.UNKNOWN)
        if e.readers == 0:
            return self._resp(Status.NO_READERS, kv_id)
        e.readers -= 1
        if e.readers == 0 and e.state in (State.REPLICA_DRAINING, State.INVALID):
            return self._free(kv_id)
        return self._resp(Status.OK, kv_id)

    def free_owner(self, kv_id: int) -> Response:
        """Free an owner block with no readers (end of a request)."""
        self._check(kv_id)
        e = self._dir.get(kv_id)
        if e is None:
            return Response(Status.UNKNOWN)
        if e.state != State.OWNER:
            return self._resp(Status.NOT_OWNER, kv_id)
        if e.readers:
            return self._resp(Status.BUSY, kv_id)
        return self._free(kv_id)

    def nic_invalidate(self, kv_id: int, final: bool) -> bool:
        """A replica-invalidation message from the NIC: ``final=0`` marks draining,
        ``final=1`` invalidates. Returns True if applied, False if dropped (unknown
        kv_id or an owner block): the hardware counts both."""
        r = self.invalidate(kv_id) if final else self.mark_draining(kv_id)
        return r.status == Status.OK

    def replay(self, events) -> list[Response]:
        """Apply the commands of ``events`` (:class:`Event`, in the pool's execution order) one
        by one and return golden's answers; raises :class:`EventMismatch` naming the first event
        whose recorded ``resp`` differs (the pool state is then that after the event). This keeps
        a golden copy of a hardware pool exact when commands come from several ports."""
        out = []
        for i, ev in enumerate(events):
            r = self.execute(ev.opcode, ev.kv_id)
            out.append(r)
            if r != ev.resp:
                raise EventMismatch(f"event {i} ({Source(ev.src).name} opcode {ev.opcode} kv_id {ev.kv_id:#x}): "
                                    f"the pool answered {ev.resp}, golden {r}")
        return out

    def execute(self, opcode: int, kv_id: int) -> Response:
        """Run one command by opcode (what the hardware command stream carries)."""
        ops = {Opcode.LOOKUP: self.lookup, Opcode.ALLOC_OWNER: self.alloc_owner,
               Opcode.INSTALL_REPLICA: self.install_replica,
               Opcode.MARK_DRAINING: self.mark_draining, Opcode.ACQUIRE: self.acquire,
               Opcode.RELEASE: self.release, Opcode.INVALIDATE: self.invalidate,
               Opcode.FREE_OWNER: self.free_owner, Opcode.BEGIN_INSTALL: self.begin_install,
               Opcode.COMMIT_INSTALL: self.commit_install, Opcode.COMMIT_OWNER: self.commit_owner}
        try:
            op = Opcode(opcode)
        except ValueError:
            self._check(kv_id)
            return Response(Status.BAD_OPCODE)
        return ops[op](kv_id)


def twin_of(pool, **kwargs) -> KVPool:
    """The golden pool that answers hardware pool ``pool`` (an ``hdl.kvpool.KVPool``, read by its
    parameters: ``n_slots``, ``block_bytes``, ``kv_id_width``, ``max_readers``, ``directory``,
    ``layers``, ``blocks``, ``layer_bits``) bit for bit; ``kwargs``: e.g. ``budget``."""
    table = (pool.layers, pool.blocks) if pool.directory == "table" else None
    return KVPool(pool.n_slots, pool.block_bytes, kv_id_width=pool.kv_id_width,
                  max_readers=pool.max_readers, table=table,
                  layer_bits=min(pool.layer_bits, pool.kv_id_width), **kwargs)
