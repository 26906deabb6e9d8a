"""Golden model of the command fetcher: a command stream (:mod:`hdl.cmdstream`) run
against an engine sink, a KV pool (:class:`golden.kvpool.KVPool`) and event counters. The
hardware twin is :class:`hdl.cmdfetch.CommandFetcher`; both produce the same engine
instructions (after patching), the same KV-pool commands and the same final registers.

The model is timing-free. What it assumes about time:

* ``counters`` are the counters' **final** values. A ``WAIT`` is satisfied iff the final value
  satisfies it (``(counter - target) mod 2**32 < 2**31``): the test's counters move only toward
  their final values and reach them before any wait could time out (``watchdog`` longer than the
  counters' schedule and than any back-pressure). An unsatisfiable wait ends the run with
  ``WATCHDOG`` (``watchdog != 0``), or leaves it running for ever (``watchdog == 0``).
* The pool changes only by the stream's own commands, so a ``WAIT_KV`` is satisfied by its first
  lookup or never; never means ``WATCHDOG`` after one or more identical lookups: the hardware
  polls every ``poll_gap`` cycles, so the count depends on time -- :attr:`Result.poll_tail`.
* No output blocks for ``watchdog`` cycles (the consumers take every beat eventually and soon).
* ``word_resp`` maps stream word indices to the RRESP (2 SLVERR, 3 DECERR) their bus beat came
  back with; a word the parser needs that carries one stops the run (``AXI``). Words it never
  needs (after ``END``, a prefetched tail) do not matter.
* Loads: ``load_status[i]`` is the status code (``spec.dma.DmaStatus``; 0 OK) of the
  run's ``i``-th issued ``LOAD`` (missing entries: the status never comes); statuses arrive in
  order. ``status_at[i]`` is ``RECORDS`` when status ``i`` arrives (the environment's timing;
  default: while ``END`` waits, after every other record). The model takes a status at the start
  of record ``status_at[i]``: a failing one stops the run there with ``LOAD_STATUS`` before
  that record produces anything. The hardware acts on it at once, so a record already under
  way may have output part of its beats (a prefix of what the same run with the status one
  record later produces). ``END`` completes iff every issued load's status has come, else
  ``WATCHDOG`` (``ERR_INFO`` 0, the kind of ``END``) or running for ever (``watchdog == 0``).
* Picks: ``PICK`` beats are taken (soon) by the token picker; ``tokens[s]``/``values[s]`` are
  the values of the fetcher's ``tokens``/``values`` inputs for slot ``s``, fixed during the run
  (the picker's answer to an earlier PICK is the environment's business: a test sets it before
  the start). A ``LOADX`` is a ``LOAD`` from ``addr + tokens[slot] * stride``: it joins
  :attr:`Result.loads`, the load statuses and ``END``'s wait exactly as a ``LOAD``.
* ``PUT``'s word joins :attr:`Result.puts` (the ``put`` beats, taken soon by the stream
  loader); :attr:`Result.put_after` says how many loads were issued before it (the loader queues
  the word behind them: after their units, before any later load's). It is not a load: not in
  ``loads``, no status, not numbered, not awaited by ``END``.
"""
from dataclasses import dataclass, field

from mcf_fpga.golden.kvpool import KVPool
from mcf_fpga.spec.kvpool import Opcode, Status
from mcf_fpga.spec.cmdstream import (Cause, KID_BITS, Kind, LOAD_COUNT_BITS, LOAD_DEST_BITS, LOAD_SEQ_BITS,
                            LOADX_STRIDE_BITS, NWORDS, PICK_MODE_BIT, PICK_SLOT_BITS, PUT_ADD_BITS, Patch,
                            unpack_header)
from mcf_fpga.spec.instr import INSTR_BITS, field_bits, instr_fields
from mcf_fpga.spec.token_picker import PickMode
from mcf_fpga.spec.dma import DmaStatus
from mcf_fpga.spec.loader import Dest

__all__ = ["Result", "run", "run_for", "check_start", "check_load", "check_loadx", "check_pick", "check_put", "put_word", "patch"]


@dataclass
class Result:
    """What a run produced, and the fetcher's registers afterwards."""
    engine: list = field(default_factory=list)   #: instruction values (``spec.instr``) pushed to the engine, in order
    kv: list = field(default_factory=list)       #: (opcode, kid) sent to the pool, in order
    loads: list = field(default_factory=list)    #: (dest, addr, count) handed to the loader, in order (LOADX: computed addr)
    picks: list = field(default_factory=list)    #: (frame, skip, n, slot, mode) offered on ``pick``, in order
    puts: list = field(default_factory=list)     #: the words offered on ``put``, in order
    put_after: list = field(default_factory=list)  #: for each put: the loads issued before it
    poll_tail: bool = False                      #: the last ``kv`` entry repeats >= 1 times (WAIT_KV timed out)
    running: bool = False
    done: bool = False
    error: bool = False
    records: int = 0
    err_cause: int = Cause.NONE
    err_index: int = 0
    err_info: int = 0
    mark: int = 0
    irqs: int = 0

    def status(self) -> int:
        """The STATUS register: bit 0 running, 1 done, 2 error."""
        return int(self.running) | int(self.done) << 1 | int(self.error) << 2


class _Stop(Exception):
    pass


def check_start(base: int, length: int, window_base: int, window_size: int) -> int:
    """The BAD_ADDR ERR_INFO of a start (0: accepted): 1 BASE not 8-byte aligned, 2 LEN = 0,
    3 ``[BASE, BASE + 8*LEN)`` leaves the window -- checked in this order."""
    if base % 8:
        return 1
    if length == 0:
        return 2
    if base < window_base or base + 8 * length > window_base + window_size:
        return 3
    return 0


def check_load(dest: int, count: int, addr: int, addr_width: int) -> int:
    """The BAD_LOAD ERR_INFO of a LOAD (0: issued): 1 ``dest`` not a :class:`spec.loader.Dest`,
    2 ``count`` = 0, 3 ``addr`` has bits at or above ``addr_width`` -- checked in this order."""
    if dest not in Dest._value2member_map_:
        return 1
    if count == 0:
        return 2
    if addr >> addr_width:
        return 3
    return 0


def check_loadx(dest: int, count: int, addr: int, stride: int, slot: int, tokens, pick_slots: int,
                addr_width: int) -> tuple[int, int]:
    """``(ERR_INFO, address)`` of a LOADX: ERR_INFO 0 (issued from ``address``) or BAD_LOAD's
    1 ``dest`` not a ``Dest``, 2 ``count`` = 0, 4 ``slot`` >= ``pick_slots``, 3 ``addr +
    tokens[slot] * stride`` (no wrap) has bits at or above ``addr_width`` -- in this order (the
    address needs a slot that exists)."""
    if dest not in Dest._value2member_map_:
        return 1, 0
    if count == 0:
        return 2, 0
    if slot >= pick_slots:
        return 4, 0
    a = addr + tokens[slot] * stride
    return (3 if a >> addr_width else 0), a


def check_pick(n: int, slot: int, pick_slots: int, mode: int = 0) -> int:
    """The BAD_PICK ERR_INFO of a PICK (0: offered): 1 ``slot`` >= ``pick_slots``, 2 ``n`` = 0,
    3 ``mode`` PAIRS (1) with an odd ``n`` -- checked in this order."""
    if slot >= pick_slots:
        return 1
    if n == 0:
        return 2
    if mode == PickMode.PAIRS and n % 2:
        return 3
    return 0


def check_put(slot: int, pick_slots: int) -> int:
    """The BAD_PICK ERR_INFO of a PUT (0: accepted): 1 ``slot`` >= ``pick_slots``."""
    return 1 if slot >= pick_slots else 0


def put_word(slot: int, src: int, add: int, tokens, values) -> int:
    """A PUT's scratchpad word: ``(values if src else tokens)[slot] + add`` mod 2**32."""
    return ((values if src else tokens)[slot] + add) & 0xFFFFFFFF


def run(stream: bytes, *, pool: KVPool, counters, n_counters: int = 8, slot_rows: int = 1,
        watchdog: int = 0, word_resp=None, base: int = 0, length: int | None = None,
        window_base: int = 0, window_size: int = 1 << 40, addr_width: int = 40, load_status=None,
        status_at=None, tokens=None, values=None, pick_slots: int = 4) -> Result:
    """Run ``stream`` (bytes at ``base``; ``length`` words, default all of it) as the fetcher
    would after a start; ``pool`` is changed by the stream's KV commands. ``load_status``: the
    code of each issued load's status in order (default: every load OK); ``status_at``: when each
    arrives, as ``RECORDS`` then (default: while END waits). ``tokens``, ``values``: the
    ``tokens``/``values`` inputs, one 32-bit value per slot (``pick_slots`` of them; default all
    0). See the module docstring for the timing assumptions."""
    tokens = [0] * pick_slots if tokens is None else list(tokens)
    values = [0] * pick_slots if values is None else list(values)
    for name, v in (("tokens", tokens), ("values", values)):
        if len(v) != pick_slots or any(not 0 <= t < 1 << 32 for t in v):
            raise ValueError(f"{name} must be {pick_slots} (pick_slots) 32-bit values, got {v!r}")
    words = [int.from_bytes(stream[i:i + 8], "little") for i in range(0, len(stream) - 7, 8)]
    n = len(words) if length is None else length
    word_resp = word_resp or {}
    res = Result()
    bad = check_start(base, n, window_base, window_size)
    if bad:
        res.error, res.err_cause, res.err_info, res.irqs = True, Cause.BAD_ADDR, bad, 1
        return res
    if n > len(words):
        raise ValueError(f"length={n} words but the stream has {len(words)}")

    def fail(cause, info):
        res.error, res.err_cause, res.err_index, res.err_info = True, cause, res.records, info
        raise _Stop

    def word(i):
        if i in word_resp:
            fail(Cause.AXI, int(word_resp[i]))
        return words[i]

    def kv(opcode, kid):
        res.kv.append((opcode, kid))
        return pool.execute(opcode, kid)

    def block(kind):          # a wait that can never be satisfied
        if watchdog:
            fail(Cause.WATCHDOG, kind)
        res.running = True    # the hardware waits for ever
        raise _Stop

    got = 0                   # load statuses taken

    def take_statuses(until):
        """Take the statuses that arrived by RECORDS = ``until`` (None: all that ever come)."""
        nonlocal got
        while got < len(res.loads):
            code = DmaStatus.OK if load_status is None else \
                (load_status[got] if got < len(load_status) else None)
            at = None if status_at is None or got >= len(status_at) else status_at[got]
            if code is None or (until is not None and (at is None or at > until)):
                return
            if code != DmaStatus.OK:
                fail(Cause.LOAD_STATUS, int(code) | (got & ((1 << LOAD_SEQ_BITS) - 1)) << 8)
            got += 1

    w = 0
    try:
        while True:
            take_statuses(res.records)
            if w == n:
                fail(Cause.NO_END, 0)
            kind, nw, arg = unpack_header(word(w))
            if kind not in Kind._value2member_map_:
                fail(Cause.ILLEGAL_KIND, kind)
            if nw != NWORDS[Kind(kind)] or w + 1 + nw > n:
                fail(Cause.BAD_LENGTH, kind | nw << 8)
            pay = [word(w + 1 + j) for j in range(nw)]
            kid = arg & ((1 << KID_BITS) - 1)
            if kind == Kind.END:
                take_statuses(None)
                if got < len(res.loads):
                    block(kind)
                res.done = True
                res.records += 1
                break
            if kind in (Kind.ENGINE, Kind.ENGINE_KV):
                v = sum(x << (64 * j) for j, x in enumerate(pay)) & ((1 << INSTR_BITS) - 1)
                if kind == Kind.ENGINE_KV:
                    mode, mask = (arg >> 32) & 0xF, (arg >> 36) & 0xFF
                    r = kv(Opcode.LOOKUP, kid)
                    if r.status != Status.OK or not mask >> int(r.state) & 1:
                        fail(Cause.KV_STATE, int(r.status) | int(r.state) << 4)
                    v = patch(v, mode, r.slot, slot_rows, fail)
                res.engine.append(v)
            elif kind == Kind.KVCMD:
                r = kv((arg >> 32) & 0xF, kid)
                if r.status != (arg >> 36) & 0xF:
                    fail(Cause.KV_STATUS, int(r.status) | int(r.state) << 4)
            elif kind == Kind.WAIT:
                idx, target = arg & 0xFF, (arg >> 8) & 0xFFFFFFFF
                if idx >= n_counters:
                    fail(Cause.BAD_COUNTER, idx)
                if (counters[idx] - target) % (1 << 32) >= 1 << 31:
                    block(kind)
            elif kind == Kind.WAIT_KV:
                mask = (arg >> 32) & 0xFF
                r = kv(Opcode.LOOKUP, kid)
                if r.status != Status.OK or not mask >> int(r.state) & 1:
                    res.poll_tail = True
                    block(kind)
            elif kind == Kind.MARK:
                res.mark = arg & 0xFFFFFFFF
                res.irqs += arg >> 32 & 1
            elif kind == Kind.LOAD:
                dest, count = arg & ((1 << LOAD_DEST_BITS) - 1), (arg >> LOAD_DEST_BITS) & ((1 << LOAD_COUNT_BITS) - 1)
                bad = check_load(dest, count, pay[0], addr_width)
                if bad:
                    fail(Cause.BAD_LOAD, bad)
                res.loads.append((dest, pay[0], count))
            elif kind == Kind.PICK:
                slot, n_ = arg & ((1 << PICK_SLOT_BITS) - 1), (arg >> PICK_SLOT_BITS) & 0xFFFFFFFF
                mode = (arg >> PICK_MODE_BIT) & 1
                bad = check_pick(n_, slot, pick_slots, mode)
                if bad:
                    fail(Cause.BAD_PICK, bad)
                res.picks.append((pay[0] & 0xFFFFFFFF, pay[0] >> 32, n_, slot, mode))
            elif kind == Kind.PUT:
                slot, src = arg & ((1 << PICK_SLOT_BITS) - 1), (arg >> PICK_SLOT_BITS) & 1
                add = (arg >> (PICK_SLOT_BITS + 1)) & ((1 << PUT_ADD_BITS) - 1)
                bad = check_put(slot, pick_slots)
                if bad:
                    fail(Cause.BAD_PICK, bad)
                res.puts.append(put_word(slot, src, add, tokens, values))
                res.put_after.append(len(res.loads))
            elif kind == Kind.LOADX:
                dest, count = arg & ((1 << LOAD_DEST_BITS) - 1), (arg >> LOAD_DEST_BITS) & ((1 << LOAD_COUNT_BITS) - 1)
                slot = (arg >> (LOAD_DEST_BITS + LOAD_COUNT_BITS)) & ((1 << PICK_SLOT_BITS) - 1)
                stride = pay[1] & ((1 << LOADX_STRIDE_BITS) - 1)
                bad, a = check_loadx(dest, count, pay[0], stride, slot, tokens, pick_slots, addr_width)
                if bad:
                    fail(Cause.BAD_LOAD, bad)
                res.loads.append((dest, a, count))
            res.records += 1
            w += 1 + nw
    except _Stop:
        pass
    if not res.running:
        res.irqs += 1       # the run ended (done or error)
    return res


def run_for(fetcher, stream_bytes, **kw) -> Result:
    """:func:`run` with the parameters of hardware fetcher ``fetcher`` (an
    ``hdl.cmdfetch.CommandFetcher``); ``kw``: pool, counters, ..."""
    return run(stream_bytes, n_counters=fetcher.n_counters, slot_rows=fetcher.slot_rows,
               window_base=fetcher.dma.window_base, window_size=fetcher.dma.window_size,
               addr_width=fetcher.dma.addr_width, pick_slots=fetcher.pick_slots, **kw)


def patch(v: int, mode: int, slot: int, slot_rows: int, fail=None) -> int:
    """ENGINE_KV's patch of instruction bits ``v`` with ``slot`` (:class:`spec.cmdstream.Patch`);
    calls ``fail(Cause.BAD_PATCH, info)`` (or raises ValueError) on a bad mode / kvb overflow."""
    def bad(info):
        if fail is None:
            raise ValueError(f"ENGINE_KV patch: mode {mode}, ERR_INFO {info:#x}")
        fail(Cause.BAD_PATCH, info)
    offset, width = field_bits("b" if mode == Patch.SLOT_B else "kvb")
    if mode == Patch.SLOT_B:
        new = slot
    elif mode == Patch.KVB_ROWS:
        new = instr_fields(v)["kvb"] + slot * slot_rows
        if new >= 1 << width:
            bad(mode | 1 << 4)
    else:
        bad(mode)
    return v & ~(((1 << width) - 1) << offset) | new << offset
