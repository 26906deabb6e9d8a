"""KV pool: fixed-size block slots and the replica directory (MCF §4, §5).

The directory maps ``kv_id`` to a slot and a lifecycle state (owner, replica-valid,
replica-draining, invalid) with a reader count per slot. Commands arrive on ``cmd``
and each gets exactly one answer on ``resp``; replica-invalidation messages from the
NIC arrive on ``nic`` and change directory state only (no data moves, no answer,
applied/dropped counters). The behaviour -- statuses, slot choice, freeing rules --
is :mod:`golden.kvpool`, bit for bit; read that module for the rules.

Contract
--------
* ``cmd``: ``{opcode, kv_id}`` (``golden.kvpool.Opcode``). One command is in flight
  at a time: the next is accepted after the answer has been taken from ``resp``, so
  back-pressure on ``resp`` stalls ``cmd`` and loses nothing.
* ``resp``: ``{status, slot, state, readers, freed}`` (``golden.kvpool.Response``).
* ``nic``: ``{kv_id, final}``: ``final=0`` marks a replica draining, ``final=1``
  invalidates it. Owners and unknown kv_ids are dropped and counted. ``cmd`` and
  ``nic`` are served alternately when both are valid.
* ``csr``: AXI4-Lite registers (see ``REGISTERS``; byte counters are 64-bit lo/hi pairs).
* Slot addresses are ``slot * block_bytes`` from the pool base: the slot number is the
  only address this block hands out, so an address never comes from the wire.

Implementation: the directory is a register file searched in parallel (a CAM), one
comparator per slot; a command takes 3 cycles (accept, search+update, answer). This
suits pools of up to a few hundred slots; a hashed directory in block RAM is the path
to larger pools.
"""
from amaranth import Module, Signal, Cat, Const, Mux
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from golden.kvpool import Opcode, State, Status
from hdl.bus import AXI4LiteSignature, AXI4LiteRegisterFile, Register, Access

try:  # take the kv_id width from the shared Meta layout when it exists
    from hdl.meta import kv_id_layout as _kv_id_layout
    DEFAULT_KV_ID_WIDTH = _kv_id_layout().size
except ImportError:  # pragma: no cover
    DEFAULT_KV_ID_WIDTH = 20

__all__ = ["KVPool", "KVPoolTop", "REGISTERS", "registers", "DEFAULT_KV_ID_WIDTH", "cmd_layout", "resp_layout",
           "nic_layout"]

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
    """

    def __init__(self, n_slots: int = 16, block_bytes: int = 4096, *,
                 kv_id_width: int = DEFAULT_KV_ID_WIDTH, max_readers: int = 15):
        if not 1 <= n_slots <= 4096:
            raise ValueError(f"n_slots must be in 1..4096, got {n_slots}")
        if not 1 <= block_bytes < 2 ** 32:
            raise ValueError(f"block_bytes must be in 1..2**32-1, got {block_bytes}")
        if not 1 <= kv_id_width <= 64:
            raise ValueError(f"kv_id_width must be in 1..64, got {kv_id_width}")
        if not 1 <= max_readers <= 255:
            raise ValueError(f"max_readers must be in 1..255, got {max_readers}")
        self.n_slots, self.block_bytes = n_slots, block_bytes
        self.kv_id_width, self.max_readers = kv_id_width, max_readers
        self._regs = AXI4LiteRegisterFile(registers(n_slots), addr_width=8)
        super().__init__({
            "cmd": In(stream.Signature(cmd_layout(kv_id_width))),
            "resp": Out(stream.Signature(resp_layout(n_slots, max_readers))),
            "nic": In(stream.Signature(nic_layout(kv_id_width))),
            "csr": In(AXI4LiteSignature(8, 32)),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.n_slots
        m.submodules.regs = regs = self._regs
        wiring.connect(m, wiring.flipped(self.csr), regs.bus)

        cnt_w = (n).bit_length()
        rd_w = self.max_readers.bit_length()
        used = [Signal(name=f"used{i}") for i in range(n)]
        kvid = [Signal(self.kv_id_width, name=f"kvid{i}") for i in range(n)]
        state = [Signal(3, name=f"state{i}") for i in range(n)]
        readers = [Signal(rd_w, name=f"readers{i}") for i in range(n)]
        owner_cnt = Signal(cnt_w)
        replica_cnt = Signal(cnt_w)
        peak_cnt = Signal(cnt_w)
        nic_applied = Signal(32)
        nic_dropped = Signal(32)
        budget = Signal(cnt_w)
        m.d.comb += budget.eq(Mux(regs.budget > n, n, regs.budget))

        # ---- accept (alternate between cmd and nic when both are valid) ----
        busy = Signal()          # a command is latched (search/update cycle next)
        resp_valid = Signal()
        turn_nic = Signal()
        op = Signal(4)
        key = Signal(self.kv_id_width)
        from_nic = Signal()
        idle = ~busy & ~resp_valid
        take_nic = Signal()
        m.d.comb += take_nic.eq(self.nic.valid & (turn_nic | ~self.cmd.valid))
        m.d.comb += [self.nic.ready.eq(idle & take_nic),
                     self.cmd.ready.eq(idle & ~take_nic)]
        with m.If(self.nic.valid & self.nic.ready):
            m.d.sync += [busy.eq(1), from_nic.eq(1), key.eq(self.nic.payload.kv_id),
                         op.eq(Mux(self.nic.payload.final, Opcode.INVALIDATE, Opcode.MARK_DRAINING)),
                         turn_nic.eq(0)]
        with m.Elif(self.cmd.valid & self.cmd.ready):
            m.d.sync += [busy.eq(1), from_nic.eq(0), key.eq(self.cmd.payload.kv_id),
                         op.eq(self.cmd.payload.opcode), turn_nic.eq(1)]

        # ---- search ----
        match = Signal(n)
        m.d.comb += match.eq(Cat(used[i] & (kvid[i] == key) for i in range(n)))
        hit = match.any()
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
        used_cnt = Signal(cnt_w + 1)
        m.d.comb += used_cnt.eq(owner_cnt + replica_cnt)

        # ---- decide (combinational), then apply on the update cycle ----
        status = Signal(4)
        do_alloc = Signal()        # allocate free_idx with new_state
        do_free = Signal()         # free hit_idx
        do_set = Signal()          # write new_state/new_readers to hit_idx
        new_state = Signal(3)
        new_readers = Signal(rd_w)
        m.d.comb += [new_state.eq(cur_state), new_readers.eq(cur_readers)]
        is_alloc = (op == Opcode.ALLOC_OWNER) | (op == Opcode.INSTALL_REPLICA)
        with m.If(op > Opcode.FREE_OWNER):
            m.d.comb += status.eq(Status.BAD_OPCODE)
        with m.Elif(is_alloc):
            with m.If(hit):
                m.d.comb += status.eq(Status.EXISTS)
            with m.Elif(used_cnt >= budget):
                m.d.comb += status.eq(Status.FULL)
            with m.Else():
                m.d.comb += [status.eq(Status.OK), do_alloc.eq(1),
                             new_state.eq(Mux(op == Opcode.ALLOC_OWNER, State.OWNER,
                                              State.REPLICA_VALID)),
                             new_readers.eq(0)]
        with m.Elif(~hit):
            m.d.comb += status.eq(Status.UNKNOWN)
        with m.Else():
            with m.Switch(op):
                with m.Case(Opcode.LOOKUP):
                    m.d.comb += status.eq(Status.OK)
                with m.Case(Opcode.MARK_DRAINING):
                    with m.If(cur_state == State.OWNER):
                        m.d.comb += status.eq(Status.IS_OWNER)
                    with m.Elif(cur_state == State.REPLICA_VALID):
                        m.d.comb += status.eq(Status.OK)
                        with m.If(cur_readers == 0):
                            m.d.comb += do_free.eq(1)
                        with m.Else():
                            m.d.comb += [do_set.eq(1), new_state.eq(State.REPLICA_DRAINING)]
                    with m.Else():
                        m.d.comb += status.eq(Status.OK)
                with m.Case(Opcode.INVALIDATE):
                    with m.If(cur_state == State.OWNER):
                        m.d.comb += status.eq(Status.IS_OWNER)
                    with m.Else():
                        m.d.comb += status.eq(Status.OK)
                        with m.If(cur_readers == 0):
                            m.d.comb += do_free.eq(1)
                        with m.Else():
                            m.d.comb += [do_set.eq(1), new_state.eq(State.INVALID)]
                with m.Case(Opcode.ACQUIRE):
                    with m.If((cur_state != State.OWNER) & (cur_state != State.REPLICA_VALID)):
                        m.d.comb += status.eq(Status.NOT_READABLE)
                    with m.Elif(cur_readers >= self.max_readers):
                        m.d.comb += status.eq(Status.READERS_FULL)
                    with m.Else():
                        m.d.comb += [status.eq(Status.OK), do_set.eq(1),
                                     new_readers.eq(cur_readers + 1)]
                with m.Case(Opcode.RELEASE):
                    with m.If(cur_readers == 0):
                        m.d.comb += status.eq(Status.NO_READERS)
                    with m.Else():
                        m.d.comb += status.eq(Status.OK)
                        with m.If((cur_readers == 1) & ((cur_state == State.REPLICA_DRAINING)
                                                        | (cur_state == State.INVALID))):
                            m.d.comb += do_free.eq(1)
                        with m.Else():
                            m.d.comb += [do_set.eq(1), new_readers.eq(cur_readers - 1)]
                with m.Case(Opcode.FREE_OWNER):
                    with m.If(cur_state != State.OWNER):
                        m.d.comb += status.eq(Status.NOT_OWNER)
                    with m.Elif(cur_readers != 0):
                        m.d.comb += status.eq(Status.BUSY)
                    with m.Else():
                        m.d.comb += [status.eq(Status.OK), do_free.eq(1)]

        # ---- update cycle ----
        resp = self.resp.payload
        m.d.comb += self.resp.valid.eq(resp_valid)
        with m.If(self.resp.valid & self.resp.ready):
            m.d.sync += resp_valid.eq(0)
        owner_next = Signal(cnt_w)
        replica_next = Signal(cnt_w)
        m.d.comb += [owner_next.eq(owner_cnt), replica_next.eq(replica_cnt)]
        with m.If(busy):
            m.d.sync += busy.eq(0)
            with m.If(from_nic):
                with m.If(status == Status.OK):
                    m.d.sync += nic_applied.eq(nic_applied + 1)
                with m.Else():
                    m.d.sync += nic_dropped.eq(nic_dropped + 1)
            with m.Else():
                m.d.sync += [resp_valid.eq(1), resp.status.eq(status), resp.freed.eq(do_free)]
                with m.If(do_alloc):
                    m.d.sync += [resp.slot.eq(free_idx), resp.state.eq(new_state),
                                 resp.readers.eq(0)]
                with m.Elif(hit & ~do_free & (op <= Opcode.FREE_OWNER)):
                    m.d.sync += [resp.slot.eq(hit_idx), resp.state.eq(new_state),
                                 resp.readers.eq(new_readers)]
                with m.Else():
                    m.d.sync += [resp.slot.eq(0), resp.state.eq(State.FREE), resp.readers.eq(0)]
            for i in range(n):
                with m.If(do_alloc & (free_idx == i)):
                    m.d.sync += [used[i].eq(1), kvid[i].eq(key), state[i].eq(new_state),
                                 readers[i].eq(0)]
                with m.If(do_set & (hit_idx == i)):
                    m.d.sync += [state[i].eq(new_state), readers[i].eq(new_readers)]
                with m.If(do_free & (hit_idx == i)):
                    m.d.sync += [used[i].eq(0), state[i].eq(State.FREE), readers[i].eq(0)]
            with m.If(do_alloc):
                with m.If(new_state == State.OWNER):
                    m.d.comb += owner_next.eq(owner_cnt + 1)
                with m.Else():
                    m.d.comb += replica_next.eq(replica_cnt + 1)
            with m.If(do_free):
                with m.If(cur_state == State.OWNER):
                    m.d.comb += owner_next.eq(owner_cnt - 1)
                with m.Else():
                    m.d.comb += replica_next.eq(replica_cnt - 1)
            m.d.sync += [owner_cnt.eq(owner_next), replica_cnt.eq(replica_next)]
            with m.If(owner_next + replica_next > peak_cnt):
                m.d.sync += peak_cnt.eq(owner_next + replica_next)
        with m.If(regs.clear_peak_wstb & regs.clear_peak):
            m.d.sync += peak_cnt.eq(used_cnt)

        # ---- registers ----
        bb = Const(self.block_bytes, 32)
        owner_b, replica_b, peak_b = Signal(64), Signal(64), Signal(64)
        m.d.comb += [owner_b.eq(owner_cnt * bb), replica_b.eq(replica_cnt * bb),
                     peak_b.eq(peak_cnt * bb)]
        m.d.comb += [
            regs.owner_bytes_lo.eq(owner_b[:32]), regs.owner_bytes_hi.eq(owner_b[32:]),
            regs.replica_bytes_lo.eq(replica_b[:32]), regs.replica_bytes_hi.eq(replica_b[32:]),
            regs.peak_bytes_lo.eq(peak_b[:32]), regs.peak_bytes_hi.eq(peak_b[32:]),
            regs.used_slots.eq(used_cnt), regs.n_slots.eq(n), regs.block_bytes.eq(bb),
            regs.nic_applied.eq(nic_applied), regs.nic_dropped.eq(nic_dropped),
        ]
        return m


def KVPoolTop(n_slots: int = 16, block_bytes: int = 4096, kv_id_width: int = DEFAULT_KV_ID_WIDTH,
              max_readers: int = 15):
    """:class:`KVPool` with AMBA names: ``s_axis_cmd``, ``m_axis_resp``, ``s_axis_nic`` (tdata =
    the struct bits, first field lowest) and ``s_axi`` (registers)."""
    from hdl.bus.amba_top import AmbaTop
    return AmbaTop(KVPool(n_slots, block_bytes, kv_id_width=kv_id_width, max_readers=max_readers),
                   {"cmd": "s_axis_cmd", "resp": "m_axis_resp", "nic": "s_axis_nic", "csr": "s_axi"})
