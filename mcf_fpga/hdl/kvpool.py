"""KV pool: fixed-size block slots and the replica directory (MCF §4, §5).

The directory maps ``kv_id`` to a slot and a lifecycle state (owner, replica-valid,
replica-draining, invalid) with a reader count per slot. Commands arrive on ``cmd``
and each gets exactly one answer on ``resp``; replica-invalidation messages from the
NIC arrive on ``nic`` and change directory state only (no data moves, no answer,
applied/dropped counters). The behaviour -- statuses, slot choice, freeing rules --
is :mod:`golden.kvpool`, bit for bit; read that module for the rules.

Contract
--------
* ``cmd``: ``{opcode, kv_id}`` (``spec.kvpool.Opcode``). One command is in flight
  at a time: the next is accepted after the answer has been taken from ``resp``, so
  back-pressure on ``resp`` stalls ``cmd`` and loses nothing.
* ``resp``: ``{status, slot, state, readers, freed}`` (``spec.kvpool.Response``).
* ``nic``: ``{kv_id, final}``: ``final=0`` marks a replica draining, ``final=1``
  invalidates it. Owners and unknown kv_ids are dropped and counted. ``cmd`` and
  ``nic`` are served alternately when both are valid.
* ``icmd`` / ``iresp`` (only with ``install_port=True``): a second command port with the
  ``cmd``/``resp`` layouts and the same rules, for the NIC's KV installer
  (:class:`hdl.kvinstall.KVInstaller`: ``LOOKUP``, ``BEGIN_INSTALL``, ``COMMIT_INSTALL``,
  ``COMMIT_OWNER``). Its answers go to
  ``iresp`` only, so the host's ``resp`` stream never carries them. ``cmd``, ``nic`` and
  ``icmd`` are served round-robin when several are valid (in that order after reset); with
  one command in flight at a time, back-pressure on ``iresp`` stalls the pool like
  back-pressure on ``resp``.
* ``events`` (only with ``events=True``): one event per command the pool executes, from every
  port, in execution order: ``{src, cmd, resp}`` (:func:`event_layout`; ``src`` is
  ``spec.kvpool.Source``: 0 ``cmd``, 1 ``nic``, 2 ``icmd``; a NIC message appears as the
  opcode it acts as, ``MARK_DRAINING`` or ``INVALIDATE``; ``resp`` is the answer computed, also
  for NIC messages). Replaying the events' commands into a fresh golden pool
  (``golden.kvpool.KVPool.replay``) reproduces every ``resp``. Lossless: the event is valid
  with the answer and a command is accepted only while no event waits (or the waiting one is
  taken that cycle), so back-pressure on ``events`` stalls every port and drops nothing. With
  ``events`` always ready the timing is unchanged.
* ``csr``: AXI4-Lite registers (see ``REGISTERS``; byte counters are 64-bit lo/hi pairs).
* Slot addresses are ``slot * block_bytes`` from the pool base: the slot number is the
  only address this block hands out, so an address never comes from the wire.

Implementation (``directory``):

* ``"cam"`` (default): a register file searched in parallel, one comparator per slot; a
  command takes 3 cycles (accept, search+update, answer). Any kv_id can be allocated. For
  pools of up to a few hundred slots (``n_slots`` <= 4096).
* ``"table"``: a direct-mapped table in block RAM over ``layers`` x ``blocks`` kv_ids and a
  free-slot bitmap with a two-level find-first-set (:mod:`hdl.kvdir_table`, which states its
  timing: 4 cycles to the answer, +2 when a slot is freed). For the KV region in DDR
  (``n_slots`` <= 65536). kv_ids outside the range: allocations answer ``OUT_OF_RANGE``,
  other commands ``UNKNOWN`` (golden: ``KVPool(..., table=(layers, blocks))``).

The rules (:func:`decide`), counters (:class:`Counters`) and front end (:func:`accept`) are
shared, so both directories answer a command stream identically (with the table's range).
"""
from amaranth import Module, Signal, Cat, Const, Mux, Shape
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.kvpool import Opcode, State, Status
from mcf_fpga.hdl.bus import AXI4LiteSignature, AXI4LiteRegisterFile, Register, Access

try:  # take the kv_id width from the shared Meta layout when it exists
    from mcf_fpga.hdl.meta import kv_id_layout as _kv_id_layout
    DEFAULT_KV_ID_WIDTH = _kv_id_layout().size
    LAYER_BITS = Shape.cast(_kv_id_layout()["layer"].shape).width
except ImportError:  # pragma: no cover
    DEFAULT_KV_ID_WIDTH, LAYER_BITS = 20, 8

__all__ = ["KVPool", "KVPoolTop", "REGISTERS", "registers", "DEFAULT_KV_ID_WIDTH", "cmd_layout", "resp_layout",
           "nic_layout", "event_layout", "unpack_event", "MAX_OPCODE"]

MAX_OPCODE = max(Opcode)   #: opcodes above it answer BAD_OPCODE

def registers(n_slots: int = 16):
    """AXI4-Lite register map (byte offsets). Byte counters are 64-bit: ``_lo`` then ``_hi``."""
    return [
        Register("owner_bytes_lo", 0x00, Access.RO, doc="bytes held by owner blocks [31:0]"),
        Register("owner_bytes_hi", 0x04, Access.RO, doc="bytes held by owner blocks [63:32]"),
        Register("replica_bytes_lo", 0x08, Access.RO, doc="bytes held by replicas (valid, draining, invalid-pending) [31:0]"),
        Register("replica_bytes_hi", 0x0C, Access.RO, doc="[63:32]"),
        Register("peak_bytes_lo", 0x10, Access.RO, doc="peak of owner+replica bytes since reset/clear [31:0]"),
        Register("peak_bytes_hi", 0x14, Access.RO, doc="[63:32]"),
        Register("used_slots", 0x18, Access.RO, doc="slots in use"),
        Register("budget", 0x1C, Access.RW, reset=n_slots, doc="slot budget (clamped to n_slots); allocation refused at it"),
        Register("n_slots", 0x20, Access.RO, doc="physical slots (constant)"),
        Register("block_bytes", 0x24, Access.RO, doc="bytes per slot (constant)"),
        Register("nic_applied", 0x28, Access.RO, doc="NIC invalidation messages applied"),
        Register("nic_dropped", 0x2C, Access.RO, doc="NIC invalidation messages dropped (unknown kv_id / owner)"),
        Register("clear_peak", 0x30, Access.WO, width=1, doc="write 1: peak := current usage"),
    ]


REGISTERS = registers()


def cmd_layout(kv_id_width):
    return data.StructLayout({"opcode": 4, "kv_id": kv_id_width})


def nic_layout(kv_id_width):
    return data.StructLayout({"kv_id": kv_id_width, "final": 1})


def resp_layout(n_slots, max_readers):
    return data.StructLayout({"status": 4, "slot": max(1, (n_slots - 1).bit_length()),
                              "state": 3, "readers": max_readers.bit_length(), "freed": 1})


def event_layout(kv_id_width, n_slots, max_readers):
    """One event of ``KVPool(events=True)``: ``{src:2, cmd, resp}`` (first field lowest)."""
    return data.StructLayout({"src": 2, "cmd": cmd_layout(kv_id_width),
                              "resp": resp_layout(n_slots, max_readers)})


def unpack_event(value: int, kv_id_width, n_slots, max_readers):
    """The ``spec.kvpool.Event`` whose :func:`event_layout` bits are ``value`` (e.g. a node's
    ``m_axis_kvevent`` tdata read as a little-endian integer)."""
    from mcf_fpga.spec.kvpool import Event, Response, Source
    v = data.Const(event_layout(kv_id_width, n_slots, max_readers), value & ((1 << event_layout(
        kv_id_width, n_slots, max_readers).size) - 1))
    r = v.resp
    return Event(Source(v.src), int(v.cmd.opcode), int(v.cmd.kv_id),
                 Response(Status(r.status), int(r.slot), State(r.state), int(r.readers), bool(r.freed)))


class KVPool(wiring.Component):
    """KV pool directory (see the module docstring for the contract).

    Parameters
    ----------
    n_slots : int
        Physical slots; the budget register resets to this.
    block_bytes : int
        Bytes per slot (for the byte counters).
    kv_id_width : int
        Width of kv_id (default: ``hdl.meta.kv_id_layout().size``).
    max_readers : int
        Reader count saturation value.
    directory : ``"cam"`` or ``"table"``
        The directory implementation (module docstring).
    layers, blocks : int
        ``"table"`` only (required there): the kv_id range held, ``layer < layers`` (at most
        ``2**layer_bits``) and ``block < blocks`` (at most ``2**(kv_id_width - layer_bits)``);
        ``layers * blocks`` <= 2**20 table entries.
    word_bits : int
        ``"table"`` only: bits per free-slot bitmap word (a power of two, 2..64).
    install_port : bool
        Add the ``icmd``/``iresp`` command port of the KV installer (module docstring).
    events : bool
        Add the ``events`` output stream (module docstring).
    """

    MAX_CAM_SLOTS = 4096
    MAX_TABLE_SLOTS = 65536
    MAX_TABLE_ENTRIES = 1 << 20

    def __init__(self, n_slots: int = 16, block_bytes: int = 4096, *,
                 kv_id_width: int = DEFAULT_KV_ID_WIDTH, max_readers: int = 15,
                 directory: str = "cam", layers: int = None, blocks: int = None, word_bits: int = 64,
                 install_port: bool = False, events: bool = False):
        if directory not in ("cam", "table"):
            raise ValueError(f"directory must be 'cam' or 'table', got {directory!r}")
        top = self.MAX_CAM_SLOTS if directory == "cam" else self.MAX_TABLE_SLOTS
        if not 1 <= n_slots <= top:
            raise ValueError(f"n_slots must be in 1..{top} for directory={directory!r}, got {n_slots}")
        if not 1 <= block_bytes < 2 ** 32:
            raise ValueError(f"block_bytes must be in 1..2**32-1, got {block_bytes}")
        if not 1 <= kv_id_width <= 64:
            raise ValueError(f"kv_id_width must be in 1..64, got {kv_id_width}")
        if not 1 <= max_readers <= 255:
            raise ValueError(f"max_readers must be in 1..255, got {max_readers}")
        self.directory, self.layer_bits = directory, LAYER_BITS
        if directory == "table":
            lb = min(LAYER_BITS, kv_id_width)
            max_layers, max_blocks = 2 ** lb, 2 ** (kv_id_width - lb)
            if layers is None or not 1 <= layers <= max_layers:
                raise ValueError(f"layers must be in 1..{max_layers} (2**layer bits of a "
                                 f"{kv_id_width}-bit kv_id) for directory='table', got {layers}")
            if blocks is None or not 1 <= blocks <= max_blocks:
                raise ValueError(f"blocks must be in 1..{max_blocks} (2**block bits of a "
                                 f"{kv_id_width}-bit kv_id) for directory='table', got {blocks}")
            if layers * blocks > self.MAX_TABLE_ENTRIES:
                raise ValueError(f"layers * blocks must be <= {self.MAX_TABLE_ENTRIES} table entries, "
                                 f"got {layers} * {blocks} = {layers * blocks}")
            if word_bits not in (2, 4, 8, 16, 32, 64):
                raise ValueError(f"word_bits must be a power of two in 2..64, got {word_bits}")
        elif layers is not None or blocks is not None:
            raise ValueError("layers and blocks are parameters of directory='table' only")
        self.layers, self.blocks, self.word_bits = layers, blocks, word_bits
        self.n_slots, self.block_bytes = n_slots, block_bytes
        self.kv_id_width, self.max_readers = kv_id_width, max_readers
        self.install_port, self.events_on = bool(install_port), bool(events)
        self._regs = AXI4LiteRegisterFile(registers(n_slots), addr_width=8)
        members = {
            "cmd": In(stream.Signature(cmd_layout(kv_id_width))),
            "resp": Out(stream.Signature(resp_layout(n_slots, max_readers))),
            "nic": In(stream.Signature(nic_layout(kv_id_width))),
            "csr": In(AXI4LiteSignature(8, 32)),
        }
        if self.install_port:
            members["icmd"] = In(stream.Signature(cmd_layout(kv_id_width)))
            members["iresp"] = Out(stream.Signature(resp_layout(n_slots, max_readers)))
        if self.events_on:
            members["events"] = Out(stream.Signature(event_layout(kv_id_width, n_slots, max_readers)))
        super().__init__(members)

    @property
    def csr_registers(self):
        """The ``Register`` list its AXI-Lite register file decodes (``spec.regmap``)."""
        return self._regs.registers

    def elaborate(self, platform):
        if self.directory == "table":
            from mcf_fpga.hdl.kvdir_table import elaborate_table
            return elaborate_table(self)
        m = Module()
        n = self.n_slots
        m.submodules.regs = regs = self._regs
        wiring.connect(m, wiring.flipped(self.csr), regs.bus)
        rd_w = self.max_readers.bit_length()
        used = [Signal(name=f"used{i}") for i in range(n)]
        kvid = [Signal(self.kv_id_width, name=f"kvid{i}") for i in range(n)]
        state = [Signal(3, name=f"state{i}") for i in range(n)]
        readers = [Signal(rd_w, name=f"readers{i}") for i in range(n)]

        # ---- accept: a command is latched (search+update next), then answered ----
        busy = Signal()
        resp_valid = Signal()
        ev = event_port(m, self)
        acc = accept(m, self, idle=~busy & ~resp_valid & ev.free)
        with m.If(acc.taken):
            m.d.sync += busy.eq(1)
        respond(m, self, acc, resp_valid)

        # ---- search ----
        match = Signal(n)
        m.d.comb += match.eq(Cat(used[i] & (kvid[i] == acc.key) for i in range(n)))
        hit_idx = Signal(range(n))
        for i in reversed(range(n)):
            with m.If(match[i]):
                m.d.comb += hit_idx.eq(i)
        free_idx = Signal(range(n))
        for i in reversed(range(n)):
            with m.If(~used[i]):
                m.d.comb += free_idx.eq(i)
        cur_state = Signal(3)
        cur_readers = Signal(rd_w)
        for i in range(n):
            with m.If(match[i]):
                m.d.comb += [cur_state.eq(state[i]), cur_readers.eq(readers[i])]

        # ---- decide (combinational), then apply on the update cycle ----
        cnt = Counters(n, self.block_bytes)
        m.submodules.counters = cnt
        d = decide(m, acc.op, hit=match.any(), in_range=Const(1), full=cnt.full,
                   cur_state=cur_state, cur_readers=cur_readers, max_readers=self.max_readers)
        apply = Signal()
        m.d.comb += apply.eq(busy)
        connect_counters(m, cnt, regs, d, apply=apply, from_nic=acc.from_nic, cur_state=cur_state)
        with m.If(busy):
            m.d.sync += busy.eq(0)
            ev.record(m, acc, d, alloc_slot=free_idx, hit_slot=hit_idx)
            with m.If(~acc.from_nic):
                m.d.sync += resp_valid.eq(1)
                answer(m, self.resp.payload, d, alloc_slot=free_idx, hit_slot=hit_idx)
            for i in range(n):
                with m.If(d.do_alloc & (free_idx == i)):
                    m.d.sync += [used[i].eq(1), kvid[i].eq(acc.key), state[i].eq(d.new_state),
                                 readers[i].eq(0)]
                with m.If(d.do_set & (hit_idx == i)):
                    m.d.sync += [state[i].eq(d.new_state), readers[i].eq(d.new_readers)]
                with m.If(d.do_free & (hit_idx == i)):
                    m.d.sync += [used[i].eq(0), state[i].eq(State.FREE), readers[i].eq(0)]
        return m


class _Accepted:
    """What :func:`accept` latched: ``op``, ``key``, ``from_nic``, ``from_icmd`` (registers) and
    ``taken`` (combinational: a command or NIC message is accepted this cycle)."""


def accept(m, pool, idle):
    """The shared front end: take one command from ``pool.cmd``, one NIC message from
    ``pool.nic`` (as ``INVALIDATE`` when ``final`` else ``MARK_DRAINING``) or, with the install
    port, one command from ``pool.icmd``, while ``idle``; round-robin between the valid ones
    (``cmd``, ``nic``, ``icmd``; command first after reset). Without the install port this is
    ``cmd`` and ``nic`` alternately."""
    a = _Accepted()
    a.op, a.key, a.from_nic, a.from_icmd = Signal(4), Signal(pool.kv_id_width), Signal(), Signal()
    a.taken = Signal()
    srcs = [pool.cmd, pool.nic] + ([pool.icmd] if getattr(pool, "install_port", False) else [])
    n = len(srcs)
    turn = Signal(range(n))               # the source with the highest priority this cycle
    grant = [Signal(name=f"grant{i}") for i in range(n)]
    with m.Switch(turn):
        for t in range(n):
            with m.Case(t):
                before = []
                for k in range(n):
                    i = (t + k) % n
                    m.d.comb += grant[i].eq(srcs[i].valid & ~any_of(before))
                    before.append(srcs[i].valid)
    for i, s in enumerate(srcs):
        m.d.comb += s.ready.eq(idle & grant[i])
    fire = [s.valid & s.ready for s in srcs]
    m.d.comb += a.taken.eq(any_of(fire))
    for i, s in enumerate(srcs):
        with m.If(fire[i]):
            m.d.sync += [turn.eq((i + 1) % n), a.from_nic.eq(i == 1), a.from_icmd.eq(i == 2),
                         a.key.eq(s.payload.kv_id)]
            if i == 1:
                m.d.sync += a.op.eq(Mux(s.payload.final, Opcode.INVALIDATE, Opcode.MARK_DRAINING))
            else:
                m.d.sync += a.op.eq(s.payload.opcode)
    return a


class _EventPort:
    """:func:`event_port`: ``free`` (a command may be accepted: no event waits, or the waiting
    one is taken this cycle) and ``record`` (latch the event of the command being decided)."""

    def __init__(self, pool):
        self.pool, self.on = pool, getattr(pool, "events_on", False)
        self.valid = Signal(name="ev_valid")
        self.free = (~self.valid | pool.events.ready) if self.on else Const(1, 1)

    def record(self, m, acc, d, *, alloc_slot, hit_slot):
        """On the cycle the pool decides a command (sync): the event ``{src, cmd, resp}``."""
        if not self.on:
            return
        p = self.pool.events.payload
        m.d.sync += [self.valid.eq(1), p.src.eq(Mux(acc.from_icmd, 2, Mux(acc.from_nic, 1, 0))),
                     p.cmd.opcode.eq(acc.op), p.cmd.kv_id.eq(acc.key)]
        answer(m, p.resp, d, alloc_slot=alloc_slot, hit_slot=hit_slot)


def event_port(m, pool):
    """The ``events`` output of ``pool`` (module docstring), shared by both directories: call
    before :func:`accept` (gate its ``idle`` with ``free``) and ``record`` where the answer is
    latched. Without ``events`` it adds nothing (``free`` is 1)."""
    ev = _EventPort(pool)
    if ev.on:
        m.d.comb += pool.events.valid.eq(ev.valid)
        with m.If(pool.events.valid & pool.events.ready):
            m.d.sync += ev.valid.eq(0)
    return ev


def any_of(values):
    """OR of a list of 1-bit values (0 when empty)."""
    out = Const(0, 1)
    for v in values:
        out = out | v
    return out


def respond(m, pool, acc, resp_valid):
    """Drive ``resp.valid`` (and with the install port ``iresp``) from ``resp_valid``: the
    answer goes to the port its command came from; ``iresp.payload`` mirrors ``resp.payload``.
    ``resp_valid`` falls when the answer is taken."""
    if getattr(pool, "install_port", False):
        m.d.comb += [pool.resp.valid.eq(resp_valid & ~acc.from_icmd),
                     pool.iresp.valid.eq(resp_valid & acc.from_icmd),
                     pool.iresp.payload.eq(pool.resp.payload)]
        with m.If((pool.resp.valid & pool.resp.ready) | (pool.iresp.valid & pool.iresp.ready)):
            m.d.sync += resp_valid.eq(0)
    else:
        m.d.comb += pool.resp.valid.eq(resp_valid)
        with m.If(pool.resp.valid & pool.resp.ready):
            m.d.sync += resp_valid.eq(0)


class _Decision:
    """Signals of :func:`decide`."""


def decide(m, op, *, hit, in_range, full, cur_state, cur_readers, max_readers):
    """The directory rules of :mod:`golden.kvpool`, combinational and shared by both
    directories. Inputs: the command ``op``; ``hit`` (kv_id has an entry, whose state and
    readers are ``cur_state``/``cur_readers``); ``in_range`` (kv_id may be allocated);
    ``full`` (slots in use >= budget). Returns ``status``, ``do_alloc`` (allocate the
    lowest free slot with ``new_state``), ``do_free`` (free the entry), ``do_set`` (write
    ``new_state``/``new_readers`` to the entry), ``to_owner`` (with ``do_set``: a replica
    slot becomes an owner slot, ``COMMIT_OWNER``) and ``shows_entry`` (the answer reports
    the entry after the command)."""
    rd_w = max_readers.bit_length()
    d = _Decision()
    d.status, d.do_alloc, d.do_free, d.do_set = Signal(4), Signal(), Signal(), Signal()
    d.to_owner = Signal()
    d.new_state, d.new_readers, d.shows_entry = Signal(3), Signal(rd_w), Signal()
    m.d.comb += [d.new_state.eq(cur_state), d.new_readers.eq(cur_readers)]
    is_alloc = (op == Opcode.ALLOC_OWNER) | (op == Opcode.INSTALL_REPLICA) | (op == Opcode.BEGIN_INSTALL)
    bad = op > MAX_OPCODE
    m.d.comb += d.shows_entry.eq(hit & ~d.do_free & ~bad)
    with m.If(bad):
        m.d.comb += d.status.eq(Status.BAD_OPCODE)
    with m.Elif(is_alloc):
        with m.If(~in_range):
            m.d.comb += d.status.eq(Status.OUT_OF_RANGE)
        with m.Elif(hit):
            m.d.comb += d.status.eq(Status.EXISTS)
        with m.Elif(full):
            m.d.comb += d.status.eq(Status.FULL)
        with m.Else():
            m.d.comb += [d.status.eq(Status.OK), d.do_alloc.eq(1), d.new_readers.eq(0)]
            with m.Switch(op):
                with m.Case(Opcode.ALLOC_OWNER):
                    m.d.comb += d.new_state.eq(State.OWNER)
                with m.Case(Opcode.INSTALL_REPLICA):
                    m.d.comb += d.new_state.eq(State.REPLICA_VALID)
                with m.Default():
                    m.d.comb += d.new_state.eq(State.INSTALLING)
    with m.Elif(~hit):
        m.d.comb += d.status.eq(Status.UNKNOWN)
    with m.Else():
        with m.Switch(op):
            with m.Case(Opcode.LOOKUP):
                m.d.comb += d.status.eq(Status.OK)
            with m.Case(Opcode.MARK_DRAINING):
                with m.If(cur_state == State.OWNER):
                    m.d.comb += d.status.eq(Status.IS_OWNER)
                with m.Elif(cur_state == State.INSTALLING):
                    m.d.comb += [d.status.eq(Status.OK), d.do_free.eq(1)]
                with m.Elif(cur_state == State.REPLICA_VALID):
                    m.d.comb += d.status.eq(Status.OK)
                    with m.If(cur_readers == 0):
                        m.d.comb += d.do_free.eq(1)
                    with m.Else():
                        m.d.comb += [d.do_set.eq(1), d.new_state.eq(State.REPLICA_DRAINING)]
                with m.Else():
                    m.d.comb += d.status.eq(Status.OK)
            with m.Case(Opcode.INVALIDATE):
                with m.If(cur_state == State.OWNER):
                    m.d.comb += d.status.eq(Status.IS_OWNER)
                with m.Else():
                    m.d.comb += d.status.eq(Status.OK)
                    with m.If(cur_readers == 0):
                        m.d.comb += d.do_free.eq(1)
                    with m.Else():
                        m.d.comb += [d.do_set.eq(1), d.new_state.eq(State.INVALID)]
            with m.Case(Opcode.ACQUIRE):
                with m.If((cur_state != State.OWNER) & (cur_state != State.REPLICA_VALID)):
                    m.d.comb += d.status.eq(Status.NOT_READABLE)
                with m.Elif(cur_readers >= max_readers):
                    m.d.comb += d.status.eq(Status.READERS_FULL)
                with m.Else():
                    m.d.comb += [d.status.eq(Status.OK), d.do_set.eq(1),
                                 d.new_readers.eq(cur_readers + 1)]
            with m.Case(Opcode.RELEASE):
                with m.If(cur_readers == 0):
                    m.d.comb += d.status.eq(Status.NO_READERS)
                with m.Else():
                    m.d.comb += d.status.eq(Status.OK)
                    with m.If((cur_readers == 1) & ((cur_state == State.REPLICA_DRAINING)
                                                    | (cur_state == State.INVALID))):
                        m.d.comb += d.do_free.eq(1)
                    with m.Else():
                        m.d.comb += [d.do_set.eq(1), d.new_readers.eq(cur_readers - 1)]
            with m.Case(Opcode.FREE_OWNER):
                with m.If(cur_state != State.OWNER):
                    m.d.comb += d.status.eq(Status.NOT_OWNER)
                with m.Elif(cur_readers != 0):
                    m.d.comb += d.status.eq(Status.BUSY)
                with m.Else():
                    m.d.comb += [d.status.eq(Status.OK), d.do_free.eq(1)]
            with m.Case(Opcode.COMMIT_INSTALL, Opcode.COMMIT_OWNER):
                with m.If(cur_state != State.INSTALLING):
                    m.d.comb += d.status.eq(Status.NOT_INSTALLING)
                with m.Elif(op == Opcode.COMMIT_OWNER):   # a replica slot becomes an owner slot
                    m.d.comb += [d.status.eq(Status.OK), d.do_set.eq(1), d.to_owner.eq(1),
                                 d.new_state.eq(State.OWNER)]
                with m.Else():
                    m.d.comb += [d.status.eq(Status.OK), d.do_set.eq(1),
                                 d.new_state.eq(State.REPLICA_VALID)]
    return d


def answer(m, resp, d, *, alloc_slot, hit_slot):
    """Latch the answer to decision ``d`` into ``resp`` (sync): the entry after the command,
    zeros / ``FREE`` when there is none."""
    m.d.sync += [resp.status.eq(d.status), resp.freed.eq(d.do_free)]
    with m.If(d.do_alloc):
        m.d.sync += [resp.slot.eq(alloc_slot), resp.state.eq(d.new_state), resp.readers.eq(0)]
    with m.Elif(d.shows_entry):
        m.d.sync += [resp.slot.eq(hit_slot), resp.state.eq(d.new_state), resp.readers.eq(d.new_readers)]
    with m.Else():
        m.d.sync += [resp.slot.eq(0), resp.state.eq(State.FREE), resp.readers.eq(0)]


class Counters(wiring.Component):
    """Slot counters shared by both directories: owner and replica slots in use (INSTALLING
    counts as replica), the peak of their sum, the run-time budget (clamped to ``n_slots``),
    NIC applied/dropped. ``full`` = slots in use >= budget. Updated on a cycle with ``apply``
    (one per command/NIC message, with its decision: at most one of ``alloc``, ``free``,
    ``to_owner``, the last moving one slot from replica to owner)."""

    def __init__(self, n_slots, block_bytes):
        self.n_slots, self.block_bytes = n_slots, block_bytes
        w = n_slots.bit_length()
        super().__init__({
            "apply": In(1), "from_nic": In(1), "ok": In(1), "alloc": In(1), "alloc_owner": In(1),
            "free": In(1), "free_owner": In(1), "to_owner": In(1), "budget_reg": In(32), "clear_peak": In(1),
            "full": Out(1), "used": Out(w + 1), "owner": Out(w), "replica": Out(w), "peak": Out(w),
            "nic_applied": Out(32), "nic_dropped": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        n, w = self.n_slots, self.n_slots.bit_length()
        budget = Signal(w)
        m.d.comb += [budget.eq(Mux(self.budget_reg > n, n, self.budget_reg)),
                     self.used.eq(self.owner + self.replica), self.full.eq(self.used >= budget)]
        owner_next, replica_next = Signal(w), Signal(w)
        m.d.comb += [owner_next.eq(self.owner), replica_next.eq(self.replica)]
        with m.If(self.apply):
            with m.If(self.from_nic):
                with m.If(self.ok):
                    m.d.sync += self.nic_applied.eq(self.nic_applied + 1)
                with m.Else():
                    m.d.sync += self.nic_dropped.eq(self.nic_dropped + 1)
            with m.If(self.alloc):
                with m.If(self.alloc_owner):
                    m.d.comb += owner_next.eq(self.owner + 1)
                with m.Else():
                    m.d.comb += replica_next.eq(self.replica + 1)
            with m.If(self.free):
                with m.If(self.free_owner):
                    m.d.comb += owner_next.eq(self.owner - 1)
                with m.Else():
                    m.d.comb += replica_next.eq(self.replica - 1)
            with m.If(self.to_owner):
                m.d.comb += [owner_next.eq(self.owner + 1), replica_next.eq(self.replica - 1)]
            m.d.sync += [self.owner.eq(owner_next), self.replica.eq(replica_next)]
            with m.If(owner_next + replica_next > self.peak):
                m.d.sync += self.peak.eq(owner_next + replica_next)
        with m.If(self.clear_peak):
            m.d.sync += self.peak.eq(self.used)
        return m


def connect_counters(m, cnt, regs, d, *, apply, from_nic, cur_state):
    """Drive :class:`Counters` ``cnt`` from decision ``d`` and the register file ``regs``, and
    the read-only registers from ``cnt``."""
    m.d.comb += [cnt.apply.eq(apply), cnt.from_nic.eq(from_nic), cnt.ok.eq(d.status == Status.OK),
                 cnt.alloc.eq(d.do_alloc), cnt.alloc_owner.eq(d.new_state == State.OWNER),
                 cnt.free.eq(d.do_free), cnt.free_owner.eq(cur_state == State.OWNER), cnt.to_owner.eq(d.to_owner),
                 cnt.budget_reg.eq(regs.budget), cnt.clear_peak.eq(regs.clear_peak_wstb & regs.clear_peak)]
    bb = Const(cnt.block_bytes, 32)
    owner_b, replica_b, peak_b = Signal(64), Signal(64), Signal(64)
    m.d.comb += [owner_b.eq(cnt.owner * bb), replica_b.eq(cnt.replica * bb), peak_b.eq(cnt.peak * bb)]
    m.d.comb += [
        regs.owner_bytes_lo.eq(owner_b[:32]), regs.owner_bytes_hi.eq(owner_b[32:]),
        regs.replica_bytes_lo.eq(replica_b[:32]), regs.replica_bytes_hi.eq(replica_b[32:]),
        regs.peak_bytes_lo.eq(peak_b[:32]), regs.peak_bytes_hi.eq(peak_b[32:]),
        regs.used_slots.eq(cnt.used), regs.n_slots.eq(cnt.n_slots), regs.block_bytes.eq(bb),
        regs.nic_applied.eq(cnt.nic_applied), regs.nic_dropped.eq(cnt.nic_dropped),
    ]


def KVPoolTop(n_slots: int = 16, block_bytes: int = 4096, kv_id_width: int = DEFAULT_KV_ID_WIDTH,
              max_readers: int = 15, **directory):
    """:class:`KVPool` with AMBA names: ``s_axis_cmd``, ``m_axis_resp``, ``s_axis_nic`` (tdata =
    the struct bits, first field lowest) and ``s_axi`` (registers). ``directory``: the
    ``directory``/``layers``/``blocks``/``word_bits``/``install_port``/``events`` keywords of
    :class:`KVPool` (the install port exports as ``s_axis_icmd``/``m_axis_iresp``, the events as
    ``m_axis_events``)."""
    from mcf_fpga.hdl.bus.amba_top import AmbaTop
    return AmbaTop(KVPool(n_slots, block_bytes, kv_id_width=kv_id_width, max_readers=max_readers,
                          **directory),
                   {"cmd": "s_axis_cmd", "resp": "m_axis_resp", "nic": "s_axis_nic", "csr": "s_axi",
                    "icmd": "s_axis_icmd", "iresp": "m_axis_iresp", "events": "m_axis_events"})
