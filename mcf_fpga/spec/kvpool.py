"""The KV pool's command interface: opcodes, directory states, response statuses and events.

What the hardware pool (:class:`hdl.kvpool.KVPool`), its golden model (:class:`golden.kvpool.KVPool`,
whose docstring states the lifecycle and the rules both follow) and the host's command streams
agree on: every command is answered with the same :class:`Response`, bit for bit, and the
hardware's event stream reports each command it executed as an :class:`Event`.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["State", "Status", "Opcode", "Source", "Response", "Event", "kv_id_from"]


class State(enum.IntEnum):
    """Directory state of a slot (3 bits in hardware). ``FREE`` = no entry."""
    FREE = 0
    OWNER = 1
    REPLICA_VALID = 2
    REPLICA_DRAINING = 3
    INVALID = 4     # invalidated, freed by the last release (hardware: 3 bits)
    INSTALLING = 5  # allocated by BEGIN_INSTALL, bytes still arriving: not readable


class Status(enum.IntEnum):
    """Response status (4 bits in hardware)."""
    OK = 0
    FULL = 1          #: allocation refused: slots in use reached the budget
    EXISTS = 2        #: allocation refused: kv_id already in the directory
    UNKNOWN = 3       #: kv_id not in the directory
    NOT_READABLE = 4  #: acquire refused: replica is draining or invalidated
    IS_OWNER = 5      #: drain/invalidate refused: owner blocks are never dropped
    NOT_OWNER = 6     #: free_owner refused: the entry is a replica
    NO_READERS = 7    #: release refused: reader count is already zero
    READERS_FULL = 8  #: acquire refused: reader count at max_readers
    BUSY = 9          #: free_owner refused: the block still has readers
    BAD_OPCODE = 10   #: unknown opcode
    OUT_OF_RANGE = 11  #: allocation refused: kv_id outside the table directory's (layers, blocks)
    NOT_INSTALLING = 12  #: commit_install / commit_owner refused: the entry is not INSTALLING


class Opcode(enum.IntEnum):
    """Command opcodes (4 bits in hardware)."""
    LOOKUP = 0
    ALLOC_OWNER = 1
    INSTALL_REPLICA = 2
    MARK_DRAINING = 3
    ACQUIRE = 4
    RELEASE = 5
    INVALIDATE = 6
    FREE_OWNER = 7
    BEGIN_INSTALL = 8
    COMMIT_INSTALL = 9
    COMMIT_OWNER = 10


class Source(enum.IntEnum):
    """Where a command the pool executed came from (the ``src`` of an event, 2 bits)."""
    CMD = 0   #: the host's command port ``cmd``
    NIC = 1   #: a NIC replica-invalidation message (acts as MARK_DRAINING / INVALIDATE)
    ICMD = 2  #: the install port ``icmd`` (the NIC's KV installer)


@dataclass(frozen=True)
class Response:
    """Answer to one command. ``slot``/``state``/``readers`` describe the entry after the
    command (all 0 / ``FREE`` when the kv_id has no entry, or on ``FULL``/``UNKNOWN``/
    ``OUT_OF_RANGE``);
    ``freed`` is 1 when this command returned a slot to the free pool."""
    status: Status
    slot: int = 0
    state: State = State.FREE
    readers: int = 0
    freed: bool = False


@dataclass(frozen=True)
class Event:
    """One command the hardware pool executed, as its event stream reports it: ``src``
    (:class:`Source`), the command ``opcode``/``kv_id`` (a NIC message as the opcode it acts as)
    and the answer the pool computed (also for NIC messages, which get no answer otherwise)."""
    src: Source
    opcode: int
    kv_id: int
    resp: Response


def kv_id_from(layer: int, block: int, layer_bits: int = 8) -> int:
    """Flat kv_id as the hardware sees it: ``layer`` in the low bits, ``block`` above
    (the bit order of ``hdl.meta.kv_id_layout``; ``layer_bits`` is ``spec.meta.MetaParams.layer_bits``)."""
    return layer | (block << layer_bits)
