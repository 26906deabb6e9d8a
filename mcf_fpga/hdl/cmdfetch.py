"""Command fetcher: the node reads its own command stream from DDR and runs it.

The stream format (records, kinds, causes) is :mod:`hdl.cmdstream`; the golden twin is
:mod:`golden.cmdfetch` (same engine instructions, KV commands and final registers).

Contract
--------
* Start (``CTRL`` bit 0, while not running): clears STATUS.done/error, ``RECORDS``, ``ERR_*``,
  ``MARK``, ``DOORBELL`` and ``LOADS``. Refused with error ``BAD_ADDR`` (nothing fetched, no
  output; ``ERR_INFO`` 1 ``BASE`` not 8-byte aligned, 2 ``LEN`` = 0, 3 ``[BASE, BASE + 8*LEN)``
  leaves the window) --
  otherwise STATUS.running rises and the stream at ``BASE`` (``LEN`` words) is fetched in INCR
  bursts of at most ``max_burst`` beats (a :class:`hdl.dma.reader.DMAReader`; beat-aligned: a
  leading/trailing half beat is read and skipped) into a prefetch FIFO of ``fifo_depth`` words
  that runs ahead of execution (:class:`hdl.command_prefetcher.CommandPrefetcher`). A burst is
  requested only when the FIFO has room for all its beats, so the bus never waits on execution
  (the reader withholds RREADY for one cycle when a burst's last beat follows the previous
  burst's last beat directly).
* Records run in order, one at a time (:mod:`hdl.cmdstream` for their meaning). Header checks,
  in order: ``LEN`` words consumed (``NO_END``), the header's beat came back SLVERR/DECERR
  (``AXI``), unknown kind (``ILLEGAL_KIND``), ``nwords`` wrong or past ``LEN`` (``BAD_LENGTH``);
  then the payload words (``AXI``); nothing of a record is output before all its words are in.
  ``ENGINE_KV`` sends ``LOOKUP(kid)`` first: not OK or the state not in the mask -> ``KV_STATE``;
  mode 1 ``b`` := slot, mode 2 ``kvb`` += slot * ``slot_rows`` (overflow, or any other mode ->
  ``BAD_PATCH``; the lookup has been sent). ``KVCMD``'s answer must have the expected status
  (``KV_STATUS``). ``WAIT`` blocks until ``counters[i] - target`` (32 bits, signed) >= 0
  (``BAD_COUNTER`` if ``i >= n_counters``). ``WAIT_KV`` sends ``LOOKUP(kid)`` until it answers OK
  with a state in the mask, one lookup in flight, a new one at least ``poll_gap`` cycles after
  the previous one was sent. ``MARK`` sets ``MARK`` (irq if ``arg[32]``). ``LOAD``: dest not a
  :class:`spec.loader.Dest` (``BAD_LOAD`` 1), count 0 (2), address bits at or above
  ``addr_width`` (3); else the descriptor is offered on ``load`` and the record completes when
  it is taken (the status is not awaited). ``LOADX`` is a ``LOAD`` from ``addr + tokens[slot] *
  stride`` (64-bit address, 32-bit token and stride, no wrap; ``tokens[slot]`` sampled once, the
  cycle after the record's words are in): the same refusals in the order dest (1), count (2),
  ``slot >= pick_slots`` (``BAD_LOAD`` 4), the computed address at or above ``2**addr_width``
  (3); then offered on ``load``, counted in ``LOADS`` and awaited by ``END`` as a ``LOAD``.
  ``PICK``: ``slot >= pick_slots`` (``BAD_PICK`` 1), ``n`` = 0 (2), ``mode`` PAIRS with an odd
  ``n`` (3); else ``{frame, skip, n, slot, mode}`` is offered on ``pick`` and the record
  completes when it is taken. ``PUT``: ``slot >= pick_slots`` (``BAD_PICK`` 1); else one word,
  ``(src ? values[slot] : tokens[slot]) + add`` mod 2**32 (``tokens``/``values`` sampled once,
  the cycle after the header is in), is offered on ``put`` and the record completes when it is
  taken. ``put`` goes to the stream loader's ``put`` input (:class:`hdl.dma.loader.StreamLoader`,
  :class:`hdl.node.Node`), which queues the word behind the descriptors taken before it: since
  records run one at a time, the word reaches the engine's ``sp_in`` after every unit of every
  earlier ``LOAD``/``LOADX`` and before any unit of a later one, and the fetcher never waits
  for the loads' units. ``PUT`` is not a load: not counted in ``LOADS``, no status, not numbered
  for ``LOAD_STATUS``, not awaited by ``END``.
  ``END``: done once every issued load's status came.
* ``load_status`` is always ready. A status counts while the run is live (running, no error, not
  done) and a load is outstanding; others are dropped. One with a code other than
  ``DmaStatus.OK`` stops the run at once: ``LOAD_STATUS``, ``ERR_INFO`` = code | (the load's
  number in the run, from 0, low 24 bits) << 8.
* ``engine_cmd`` (one :data:`hdl.compute.engine.INSTR` per ENGINE/ENGINE_KV record),
  ``kv_cmd``, ``load``, ``pick`` and ``put`` obey the stream contract under any back-pressure (a beat offered stays offered
  until taken, also after an error); ``kv_resp`` is always ready: an answer that arrives when
  none is awaited (a late one after ``WATCHDOG``/abort) is dropped.
* Watchdog (``WATCHDOG`` != 0): a ``WAIT``/``WAIT_KV`` record (counted from its start), a beat
  offered on ``engine_cmd``/``kv_cmd``/``load``/``pick``/``put``, an awaited KV answer or ``END`` waiting for
  load statuses that blocks ``WATCHDOG`` cycles -> error ``WATCHDOG`` (fetching the stream does
  not count). Abort (``CTRL`` bit 1, while running) -> error ``ABORT`` at once. A beat being
  offered when either (or a failing load status) happens is still delivered when taken (the
  error is visible at once, ``running`` falls after).
* Stop (END or an error): no further output; the FIFO and the in-flight read beats are drained
  so the AXI bus is left idle; then STATUS.running falls and ``irq`` pulses once. ``ERR_INDEX``
  is the failing record's index (``RECORDS`` then: records completed, END included).
* ``m_axi``: AXI4 read master (the reader's; AW/W never valid, B ready never needed: write
  channels unused, as :class:`~hdl.dma.reader.DMAReader` declares them). ``irq``: 1-cycle pulse.
  ``started``: high in the cycle a start is written while not running (also one refused with
  ``BAD_ADDR``): the node clears the blocks whose counts the stream waits on (the token picker).

Registers (``csr``, AXI4-Lite, 32-bit; offsets :data:`CTRL` ...):

======  ============  ======  ================================================================
offset  name          access  meaning
======  ============  ======  ================================================================
0x00    ``ctrl``      WO      bit 0 start, bit 1 abort
0x04    ``status``    RO      bit 0 running, bit 1 done, bit 2 error
0x08    ``base_lo``   RW      stream address [31:0] (bytes, 8-byte aligned)
0x0C    ``base_hi``   RW      stream address [addr_width-1:32]
0x10    ``len``       RW      stream length in 64-bit words
0x14    ``watchdog``  RW      cycles a WAIT/WAIT_KV/output may block; 0 = no limit
0x18    ``records``   RO      records completed since start
0x1C    ``err_cause`` RO      :class:`spec.cmdstream.Cause` (4 bits)
0x20    ``err_index`` RO      index of the failing record
0x24    ``err_info``  RO      cause-specific (:class:`~spec.cmdstream.Cause`)
0x28    ``mark``      RO      the last MARK value
0x2C    ``doorbell``  RW      host doorbell, driven on the ``doorbell`` port; cleared by start
0x30    ``loads``     RO      LOAD/LOADX descriptors taken by the loader since start (not PUT)
======  ============  ======  ================================================================
"""
from types import SimpleNamespace

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.kvpool import Opcode, Status
from mcf_fpga.hdl.bus import AXI4LiteRegisterFile, AXI4LiteSignature, AXI4Signature, Access, Register, Resp
from mcf_fpga.spec.cmdstream import (KID_BITS, LOAD_COUNT_BITS, LOAD_DEST_BITS, LOAD_SEQ_BITS, LOADX_STRIDE_BITS,
                            PICK_MODE_BIT, PICK_SLOT_BITS, PUT_ADD_BITS, Cause, Kind, Patch)
from mcf_fpga.spec.cmdstream import NWORDS
from mcf_fpga.hdl.cmdstream import header_layout, pick_layout
from mcf_fpga.hdl.command_prefetcher import CommandPrefetcher
from mcf_fpga.hdl.compute.engine import INSTR
from mcf_fpga.spec.dma import DmaParams, DmaStatus
from mcf_fpga.hdl.dma.common import status_layout
from mcf_fpga.spec.loader import Dest
from mcf_fpga.hdl.dma.loader import load_layout, sp_layout
from mcf_fpga.hdl.kvpool import DEFAULT_KV_ID_WIDTH, cmd_layout, resp_layout

__all__ = ["CommandFetcher", "registers", "REGISTERS", "CTRL", "STATUS", "BASE_LO", "BASE_HI", "LEN",
           "WATCHDOG", "RECORDS", "ERR_CAUSE", "ERR_INDEX", "ERR_INFO", "MARK", "DOORBELL", "LOADS",
           "CTRL_START", "CTRL_ABORT",
           "STATUS_RUNNING", "STATUS_DONE", "STATUS_ERROR"]

CTRL, STATUS, BASE_LO, BASE_HI, LEN, WATCHDOG = 0x00, 0x04, 0x08, 0x0C, 0x10, 0x14
RECORDS, ERR_CAUSE, ERR_INDEX, ERR_INFO, MARK, DOORBELL, LOADS = 0x18, 0x1C, 0x20, 0x24, 0x28, 0x2C, 0x30
CTRL_START, CTRL_ABORT = 1, 2
STATUS_RUNNING, STATUS_DONE, STATUS_ERROR = 1, 2, 4


def registers(addr_width: int = 40):
    """The AXI4-Lite register map (byte offsets; module docstring)."""
    return [
        Register("ctrl", CTRL, Access.WO, width=2, doc="bit 0 start, bit 1 abort"),
        Register("status", STATUS, Access.RO, width=3, doc="bit 0 running, bit 1 done, bit 2 error"),
        Register("base_lo", BASE_LO, doc="stream byte address [31:0]"),
        Register("base_hi", BASE_HI, width=max(1, min(32, addr_width - 32)), doc="[addr_width-1:32]"),
        Register("len", LEN, doc="stream length in 64-bit words"),
        Register("watchdog", WATCHDOG, doc="cycles a WAIT/WAIT_KV/output may block; 0 = no limit"),
        Register("records", RECORDS, Access.RO, doc="records completed"),
        Register("err_cause", ERR_CAUSE, Access.RO, width=4, doc="spec.cmdstream.Cause"),
        Register("err_index", ERR_INDEX, Access.RO, doc="index of the failing record"),
        Register("err_info", ERR_INFO, Access.RO, doc="cause-specific"),
        Register("mark", MARK, Access.RO, doc="the last MARK value"),
        Register("doorbell", DOORBELL, clear=True, doc="host doorbell: the `doorbell` port; cleared by start"),
        Register("loads", LOADS, Access.RO, doc="LOAD/LOADX descriptors taken by the loader since start"),
    ]


REGISTERS = registers()


class CommandFetcher(wiring.Component):
    """Fetch a command stream from DDR and run it (module docstring: contract).

    Parameters
    ----------
    addr_width, data_width, max_burst, max_outstanding, id_width, window_base, window_size
        The read DMA's (:class:`spec.dma.DmaParams`); ``data_width`` >= 64, the window a
        whole number of beats. Streams must lie in the window.
    n_counters : int
        Event counters ``WAIT`` can name (1..256), 32 bits each.
    slot_rows : int
        Rows per KV slot: ``ENGINE_KV`` mode 2 adds ``slot * slot_rows`` to ``kvb``.
    fifo_depth : int
        Prefetch FIFO in 64-bit words: a multiple of the words per beat, at least one burst.
    poll_gap : int
        ``WAIT_KV``: cycles from one lookup to the next (1..65536).
    n_slots, max_readers, kv_id_width
        The KV pool's (:func:`hdl.kvpool.cmd_layout`, :func:`~hdl.kvpool.resp_layout`);
        ``kv_id_width`` must be the stream's kid width, :data:`spec.cmdstream.KID_BITS`.
    pick_slots : int
        Token slots (0..16): the ``tokens``/``values`` inputs' entries, the slots
        ``PICK``/``LOADX``/``PUT`` may name (0: no token picker, every one of them is refused).

    Members: ``m_axi`` (Out AXI4), ``engine_cmd`` (Out stream INSTR), ``kv_cmd`` (Out stream),
    ``kv_resp`` (In stream), ``load`` (Out stream ``hdl.dma.loader.load_layout(addr_width)``),
    ``load_status`` (In stream ``hdl.dma.common.status_layout(addr_width)``, always ready),
    ``counters`` (In, ``n_counters`` x 32), ``pick`` (Out stream :func:`hdl.cmdstream.pick_layout`),
    ``tokens`` (In, ``pick_slots`` x 32: the picked tokens ``LOADX`` indexes by), ``values`` (In,
    ``pick_slots`` x 32: their values), ``put`` (Out stream :func:`hdl.dma.loader.sp_layout`: a
    ``PUT``'s scratchpad word, for the stream loader's ``put``), ``doorbell`` (Out 32, the ``DOORBELL`` register),
    ``irq`` (Out), ``csr`` (In AXI4-Lite, 6 address bits).
    """

    def __init__(self, *, addr_width=40, data_width=128, max_burst=16, max_outstanding=4, id_width=4,
                 window_base=0, window_size=None, n_counters=8, slot_rows=16, fifo_depth=64, poll_gap=16,
                 n_slots=16, max_readers=15, kv_id_width=DEFAULT_KV_ID_WIDTH, pick_slots=4):
        self.dma = p = DmaParams(addr_width=addr_width, data_width=data_width, max_burst=max_burst,
                                 max_outstanding=max_outstanding, id_width=id_width, window_base=window_base,
                                 window_size=window_size)
        if data_width < 64:
            raise ValueError(f"data_width must be >= 64 (one stream word per beat at least), got {data_width}")
        if p.window_base % p.bytes_per_beat or p.window_size % p.bytes_per_beat:
            raise ValueError(f"window [{p.window_base:#x}, +{p.window_size:#x}) must be whole beats "
                             f"({p.bytes_per_beat} bytes)")
        if not 1 <= n_counters <= 256:
            raise ValueError(f"n_counters must be in 1..256 (the 8-bit index), got {n_counters}")
        if not 1 <= slot_rows <= 0xFFFF:
            raise ValueError(f"slot_rows must be in 1..65535 (kvb is 16 bits), got {slot_rows}")
        self.wpb = wpb = data_width // 64
        if fifo_depth % wpb or fifo_depth < max_burst * wpb:
            raise ValueError(f"fifo_depth must be a multiple of {wpb} words (one beat) and at least "
                             f"{max_burst * wpb} (one burst of max_burst={max_burst}), got {fifo_depth}")
        if not 1 <= poll_gap <= 65536:
            raise ValueError(f"poll_gap must be in 1..65536, got {poll_gap}")
        if kv_id_width != KID_BITS:
            raise ValueError(f"kv_id_width must be {KID_BITS} (the stream's kid), got {kv_id_width}")
        if not isinstance(pick_slots, int) or isinstance(pick_slots, bool) or not 0 <= pick_slots <= 1 << PICK_SLOT_BITS:
            raise ValueError(f"pick_slots must be in 0..{1 << PICK_SLOT_BITS} (the 4-bit slot), got {pick_slots!r}")
        self.pick_slots = pick_slots
        self.n_counters, self.slot_rows, self.fifo_depth, self.poll_gap = n_counters, slot_rows, fifo_depth, poll_gap
        self.n_slots, self.max_readers, self.kv_id_width = n_slots, max_readers, kv_id_width
        self._prefetch = CommandPrefetcher(p, fifo_depth)
        self._regs = AXI4LiteRegisterFile(registers(addr_width), addr_width=6)
        super().__init__({
            "m_axi": Out(AXI4Signature(addr_width, data_width, id_width)),
            "engine_cmd": Out(stream.Signature(INSTR)),
            "kv_cmd": Out(stream.Signature(cmd_layout(kv_id_width))),
            "kv_resp": In(stream.Signature(resp_layout(n_slots, max_readers))),
            "load": Out(stream.Signature(load_layout(addr_width))),
            "load_status": In(stream.Signature(status_layout(addr_width))),
            "counters": In(data.ArrayLayout(32, n_counters)),
            "pick": Out(stream.Signature(pick_layout())),
            "tokens": In(data.ArrayLayout(LOADX_STRIDE_BITS, pick_slots)),
            "values": In(data.ArrayLayout(32, pick_slots)),
            "put": Out(stream.Signature(sp_layout())),
            "doorbell": Out(32),
            "started": Out(1),
            "irq": Out(1),
            "csr": In(AXI4LiteSignature(6, 32)),
        })

    @property
    def csr_registers(self):
        """The ``Register`` list its AXI-Lite register file decodes (``spec.regmap``)."""
        return self._regs.registers

    def elaborate(self, platform):
        m = Module()
        c = SimpleNamespace()               # the signals the parts below share
        self._status_and_words(m, c)
        self._record_state(m, c)
        with m.FSM() as fsm:
            self._fetch_states(m, c)
            self._output_states(m, c)
            self._wait_states(m, c)
        m.d.comb += c.pf.enable.eq(~c.err_pend & ~fsm.ongoing("IDLE") & ~fsm.ongoing("DRAIN"))
        return m

    def _status_and_words(self, m, c):
        """Registers, run status, and the stream's words from the prefetcher."""
        p = self.dma
        m.submodules.prefetch = pf = self._prefetch
        wiring.connect(m, wiring.flipped(self.m_axi), pf.m_axi)
        m.submodules.regs = regs = self._regs
        wiring.connect(m, wiring.flipped(self.csr), regs.bus)
        m.d.comb += self.kv_resp.ready.eq(1)       # awaited answers are used, strays dropped
        m.d.comb += self.load_status.ready.eq(1)   # counted while running, strays dropped
        m.d.comb += self.doorbell.eq(regs.doorbell)
        m.d.sync += self.irq.eq(0)

        running, done, error = Signal(), Signal(), Signal()
        records, mark = Signal(32), Signal(32)
        err_cause, err_index, err_info = Signal(4), Signal(32), Signal(32)
        loads, loads_in = Signal(32), Signal(32)   # descriptors taken / statuses counted since start
        m.d.comb += [regs.status.eq(Cat(running, done, error)), regs.records.eq(records), regs.mark.eq(mark),
                     regs.err_cause.eq(err_cause), regs.err_index.eq(err_index), regs.err_info.eq(err_info),
                     regs.loads.eq(loads)]
        start = regs.ctrl_wstb & regs.ctrl[0] & ~running
        m.d.comb += [regs.doorbell_clr.eq(start), self.started.eq(start)]
        abort = Signal()
        m.d.comb += abort.eq(regs.ctrl_wstb & regs.ctrl[1])
        base = Signal(p.addr_width)
        m.d.comb += base.eq(Cat(regs.base_lo, regs.base_hi)[:p.addr_width])
        length = Signal(32)                        # LEN latched at start

        # ================= the stream's words (the prefetcher runs ahead of execution) ==========
        m.d.comb += [pf.base.eq(base), pf.length.eq(regs.len)]
        word, w_resp, w_bad, avail, pop = pf.word, pf.resp, pf.bad, pf.avail, pf.pop
        widx = Signal(33)                          # words consumed since start
        with m.If(pop):
            m.d.sync += widx.eq(widx + 1)
        vars(c).update(p=p, pf=pf, regs=regs, running=running, done=done, error=error,
                       records=records, mark=mark, err_cause=err_cause, err_index=err_index,
                       err_info=err_info, loads=loads, loads_in=loads_in, start=start, abort=abort, base=base,
                       length=length, word=word, w_resp=w_resp, w_bad=w_bad, avail=avail, pop=pop, widx=widx)

    def _record_state(self, m, c):
        """The record being run, load statuses, the watchdog; ``fail``/``complete``/``dispatch``."""
        # ================= record state ==========================================================
        hdr = header_layout()(c.word)
        kind, arg = Signal(8), Signal(48)           # of the record being run
        plen = Signal(8)                           # its payload words (checked against NWORDS)
        maxw = max(NWORDS.values())                # ENGINE's
        pcount = Signal(range(maxw))
        ibuf = Signal(64 * maxw)
        m.d.comb += self.engine_cmd.payload.eq(ibuf[:INSTR.size])
        kv_op = Signal(4)
        m.d.comb += [self.kv_cmd.payload.opcode.eq(kv_op), self.kv_cmd.payload.kv_id.eq(arg[:KID_BITS])]
        ld = self.load.payload                     # LOAD: arg and its address word (ibuf's first)
        m.d.comb += [ld.dest.eq(arg[:LOAD_DEST_BITS]), ld.count.eq(arg[LOAD_DEST_BITS:][:LOAD_COUNT_BITS]),
                     ld.addr.eq(ibuf[:c.p.addr_width])]
        with m.If(self.load.valid & self.load.ready):
            m.d.sync += c.loads.eq(c.loads + 1)
        pk = self.pick.payload                     # PICK: slot | n << 4 in arg, frame | skip << 32 in ibuf
        m.d.comb += [pk.slot.eq(arg[:PICK_SLOT_BITS]), pk.n.eq(arg[PICK_SLOT_BITS:][:32]),
                     pk.mode.eq(arg[PICK_MODE_BIT]), pk.frame.eq(ibuf[:32]), pk.skip.eq(ibuf[32:64])]
        put_word = Signal(32)                      # PUT: the word (latched in PUT_SEL)
        m.d.comb += self.put.payload.data.eq(put_word)
        x_slot = arg[LOAD_DEST_BITS + LOAD_COUNT_BITS:][:PICK_SLOT_BITS]   # LOADX's slot
        x_prod = Signal(64)                        # LOADX: tokens[slot] * stride, registered
        # a load's status, in order: counted while the run is live (running, no error, not done)
        # and a load is outstanding; anything else is dropped
        st = self.load_status
        st_take, st_fail = Signal(), Signal()
        m.d.comb += [st_take.eq(st.valid & c.running & ~c.error & ~c.done & (c.loads_in != c.loads)),
                     st_fail.eq(st_take & (st.payload.code != DmaStatus.OK))]
        with m.If(st_take):
            m.d.sync += c.loads_in.eq(c.loads_in + 1)
        st_info = Cat(st.payload.code, Const(0, 4), c.loads_in[:LOAD_SEQ_BITS])
        err_pend = Signal()                        # error latched while a beat is still offered
        wd = Signal(32)
        timeout = (c.regs.watchdog != 0) & (wd >= c.regs.watchdog)
        gap = Signal(range(self.poll_gap + 1))
        with m.If(gap != self.poll_gap):
            m.d.sync += gap.eq(gap + 1)

        def fail(cause, info, index=c.records):
            m.d.sync += [c.error.eq(1), c.err_cause.eq(cause), c.err_index.eq(index), c.err_info.eq(info)]
            m.next = "DRAIN"

        def complete():
            m.d.sync += c.records.eq(c.records + 1)
            m.next = "HDR"

        def dispatch(k, a, w=None):
            """The record's words are all in: start executing kind ``k`` with arg ``a`` (``w``:
            the last payload word, being popped; LOAD's address)."""
            with m.Switch(k):
                with m.Case(Kind.END):
                    m.next = "END"
                if w is not None:
                    with m.Case(Kind.LOAD, Kind.LOADX):
                        dest, count = a[:LOAD_DEST_BITS], a[LOAD_DEST_BITS:][:LOAD_COUNT_BITS]
                        with m.If(~Cat(*(dest == d for d in Dest)).any()):
                            fail(Cause.BAD_LOAD, 1)
                        with m.Elif(count == 0):
                            fail(Cause.BAD_LOAD, 2)
                        with m.Elif(k == Kind.LOADX):      # w: the stride word; the address is in ibuf
                            with m.If(a[LOAD_DEST_BITS + LOAD_COUNT_BITS:][:PICK_SLOT_BITS] >= self.pick_slots):
                                fail(Cause.BAD_LOAD, 4)
                            with m.Else():
                                m.next = "X_MUL"
                        with m.Elif(w[c.p.addr_width:].any() if c.p.addr_width < 64 else Const(0)):
                            fail(Cause.BAD_LOAD, 3)
                        with m.Else():
                            m.next = "LOAD"
                    with m.Case(Kind.PICK):
                        with m.If(a[:PICK_SLOT_BITS] >= self.pick_slots):
                            fail(Cause.BAD_PICK, 1)
                        with m.Elif(a[PICK_SLOT_BITS:][:32] == 0):
                            fail(Cause.BAD_PICK, 2)
                        with m.Elif(a[PICK_MODE_BIT] & a[PICK_SLOT_BITS]):     # PAIRS, n odd
                            fail(Cause.BAD_PICK, 3)
                        with m.Else():
                            m.next = "PICK"
                with m.Case(Kind.ENGINE):
                    m.next = "OFFER"
                with m.Case(Kind.ENGINE_KV, Kind.KVCMD, Kind.WAIT_KV):
                    m.d.sync += kv_op.eq(Mux(k == Kind.KVCMD, a[32:36], Opcode.LOOKUP))
                    m.next = "KV_SEND"
                with m.Case(Kind.WAIT):
                    with m.If(a[:8] >= self.n_counters):
                        fail(Cause.BAD_COUNTER, a[:8])
                    with m.Else():
                        m.next = "WAIT"
                with m.Case(Kind.MARK):
                    m.d.sync += [c.mark.eq(a[:32]), self.irq.eq(a[32])]
                    complete()
                with m.Case(Kind.PUT):
                    with m.If(a[:PICK_SLOT_BITS] >= self.pick_slots):
                        fail(Cause.BAD_PICK, 1)
                    with m.Else():
                        m.next = "PUT_SEL"

        blocked = Signal()                         # a state the watchdog watches
        with m.If(blocked):
            with m.If(wd != 0xFFFFFFFF):
                m.d.sync += wd.eq(wd + 1)
        with m.Else():
            m.d.sync += wd.eq(0)
        vars(c).update(hdr=hdr, kind=kind, arg=arg, plen=plen, maxw=maxw, pcount=pcount, ibuf=ibuf,
                       kv_op=kv_op, put_word=put_word, x_slot=x_slot, x_prod=x_prod, st_fail=st_fail,
                       st_info=st_info, err_pend=err_pend, wd=wd, timeout=timeout, gap=gap, fail=fail,
                       complete=complete, dispatch=dispatch, blocked=blocked)

    def _fetch_states(self, m, c):
        """IDLE (start checks), HDR (a record's header), PAY (its payload words)."""
        with m.State("IDLE"):
            with m.If(c.start):
                end = Signal(c.p.addr_width + 36)
                m.d.comb += end.eq(c.base + (c.regs.len << 3))
                bad = Signal(2)
                with m.If(c.base[:3] != 0):
                    m.d.comb += bad.eq(1)
                with m.Elif(c.regs.len == 0):
                    m.d.comb += bad.eq(2)
                with m.Elif((c.base < c.p.window_base) | (end > c.p.window_base + c.p.window_size)):
                    m.d.comb += bad.eq(3)
                m.d.sync += [c.done.eq(0), c.records.eq(0), c.mark.eq(0), c.err_cause.eq(0), c.err_index.eq(0),
                             c.err_info.eq(0), c.err_pend.eq(0), c.length.eq(c.regs.len), c.loads.eq(0),
                             c.loads_in.eq(0)]
                with m.If(bad != 0):
                    m.d.sync += [c.error.eq(1), c.err_cause.eq(Cause.BAD_ADDR), c.err_info.eq(bad),
                                 self.irq.eq(1)]
                with m.Else():
                    m.d.sync += [c.error.eq(0), c.running.eq(1), c.widx.eq(0)]
                    m.d.comb += c.pf.start.eq(1)
                    m.next = "HDR"

        with m.State("HDR"):
            with m.If(c.st_fail):
                c.fail(Cause.LOAD_STATUS, c.st_info)
            with m.Elif(c.widx == c.length):
                c.fail(Cause.NO_END, 0)
            with m.Elif(c.abort):
                c.fail(Cause.ABORT, 0)
            with m.Elif(c.avail):
                m.d.comb += c.pop.eq(1)
                m.d.sync += [c.kind.eq(c.hdr.kind), c.arg.eq(c.hdr.arg), c.pcount.eq(0), c.plen.eq(c.hdr.nwords)]
                need = Signal(8)
                with m.Switch(c.hdr.kind):
                    for k, nw in NWORDS.items():
                        with m.Case(k):
                            m.d.comb += need.eq(nw)
                with m.If(c.w_bad):
                    c.fail(Cause.AXI, c.w_resp)
                with m.Elif(c.hdr.kind > max(Kind)):
                    c.fail(Cause.ILLEGAL_KIND, c.hdr.kind)
                with m.Elif((c.hdr.nwords != need) | (c.widx + 1 + c.hdr.nwords > c.length)):
                    c.fail(Cause.BAD_LENGTH, Cat(c.hdr.kind, c.hdr.nwords))
                with m.Elif(c.hdr.nwords != 0):
                    m.next = "PAY"
                with m.Else():
                    c.dispatch(c.hdr.kind, c.hdr.arg)

        with m.State("PAY"):
            with m.If(c.st_fail):
                c.fail(Cause.LOAD_STATUS, c.st_info)
            with m.Elif(c.abort):
                c.fail(Cause.ABORT, c.kind)
            with m.Elif(c.avail):
                m.d.comb += c.pop.eq(1)
                with m.Switch(c.pcount):
                    for j in range(c.maxw):
                        with m.Case(j):
                            m.d.sync += c.ibuf[64 * j:64 * (j + 1)].eq(c.word)
                m.d.sync += c.pcount.eq(c.pcount + 1)
                with m.If(c.w_bad):
                    c.fail(Cause.AXI, c.w_resp)
                with m.Elif(c.pcount == c.plen - 1):
                    c.dispatch(c.kind, c.arg, c.word)


    def _output_states(self, m, c):
        """States offering a beat: OFFER, KV_SEND, LOAD (and LOADX's X_MUL/X_ADD), PICK, PUT."""
        def offered(strm, on_taken):
            m.d.comb += [strm.valid.eq(1), c.blocked.eq(1)]
            with m.If(strm.ready):
                with m.If(c.err_pend):
                    m.next = "DRAIN"
                with m.Elif(c.st_fail):
                    c.fail(Cause.LOAD_STATUS, c.st_info)
                with m.Else():
                    on_taken()
            with m.Elif(c.st_fail):
                m.d.sync += [c.err_pend.eq(1), c.error.eq(1), c.err_index.eq(c.records), c.err_info.eq(c.st_info),
                             c.err_cause.eq(Cause.LOAD_STATUS)]
            with m.Elif(~c.err_pend & (c.timeout | c.abort)):
                m.d.sync += [c.err_pend.eq(1), c.error.eq(1), c.err_index.eq(c.records), c.err_info.eq(c.kind),
                             c.err_cause.eq(Mux(c.abort, Cause.ABORT, Cause.WATCHDOG))]

        def stopped():
            """A failing load status or an abort ends the record (the caller continues the If chain)."""
            with m.If(c.st_fail):
                c.fail(Cause.LOAD_STATUS, c.st_info)
            with m.Elif(c.abort):
                c.fail(Cause.ABORT, c.kind)

        with m.State("OFFER"):
            offered(self.engine_cmd, c.complete)

        with m.State("KV_SEND"):
            def sent():
                m.d.sync += c.gap.eq(1)
                m.next = "KV_WAIT"
            offered(self.kv_cmd, sent)

        with m.State("LOAD"):
            offered(self.load, c.complete)

        with m.State("X_MUL"):                          # LOADX: tokens[slot] * stride (registered)
            tok = Signal(LOADX_STRIDE_BITS)
            with m.Switch(c.x_slot):
                for i in range(self.pick_slots):
                    with m.Case(i):
                        m.d.comb += tok.eq(self.tokens[i])
            m.d.sync += c.x_prod.eq(tok * c.ibuf[64:64 + LOADX_STRIDE_BITS])
            stopped()
            with m.Else():
                m.next = "X_ADD"

        with m.State("X_ADD"):                          # LOADX: addr + product, no wrap; then a LOAD
            x_sum = Signal(65)
            m.d.comb += x_sum.eq(c.ibuf[:64] + c.x_prod)
            stopped()
            with m.Elif(x_sum[c.p.addr_width:].any()):
                c.fail(Cause.BAD_LOAD, 3)
            with m.Else():
                m.d.sync += c.ibuf[:64].eq(x_sum[:64])
                m.next = "LOAD"

        with m.State("PICK"):
            offered(self.pick, c.complete)

        with m.State("PUT_SEL"):                        # PUT: (src ? values : tokens)[slot] + add
            src = Signal(32)
            with m.Switch(c.arg[:PICK_SLOT_BITS]):
                for i in range(self.pick_slots):
                    with m.Case(i):
                        m.d.comb += src.eq(Mux(c.arg[PICK_SLOT_BITS], self.values[i], self.tokens[i]))
            m.d.sync += c.put_word.eq(src + c.arg[PICK_SLOT_BITS + 1:][:PUT_ADD_BITS])
            stopped()
            with m.Else():
                m.next = "PUT"

        with m.State("PUT"):
            offered(self.put, c.complete)


    def _wait_states(self, m, c):
        """END, KV_WAIT, GAP, WAIT and DRAIN."""
        with m.State("END"):                            # every issued load's status must come
            m.d.comb += c.blocked.eq(1)
            with m.If(c.st_fail):
                c.fail(Cause.LOAD_STATUS, c.st_info)
            with m.Elif(c.loads_in == c.loads):
                m.d.sync += [c.done.eq(1), c.records.eq(c.records + 1)]
                m.next = "DRAIN"
            with m.Elif(c.timeout | c.abort):
                c.fail(Mux(c.abort, Cause.ABORT, Cause.WATCHDOG), c.kind)

        with m.State("KV_WAIT"):
            m.d.comb += c.blocked.eq(1)
            r = self.kv_resp.payload
            in_mask = Signal()
            m.d.comb += in_mask.eq((Mux(c.kind == Kind.WAIT_KV, c.arg[32:40], c.arg[36:44]) >> r.state)[0])
            with m.If(c.st_fail):
                c.fail(Cause.LOAD_STATUS, c.st_info)
            with m.Elif(self.kv_resp.valid):
                info = Cat(r.status, r.state)
                with m.Switch(c.kind):
                    with m.Case(Kind.ENGINE_KV):
                        m.d.comb += c.blocked.eq(0)          # the engine beat gets its own time
                        with m.If((r.status != Status.OK) | ~in_mask):
                            c.fail(Cause.KV_STATE, info)
                        with m.Elif(c.arg[32:36] == Patch.SLOT_B):
                            fb = INSTR["b"]
                            m.d.sync += c.ibuf[fb.offset:fb.offset + fb.width].eq(r.slot)
                            m.next = "OFFER"
                        with m.Elif(c.arg[32:36] == Patch.KVB_ROWS):
                            fk = INSTR["kvb"]
                            kvb = c.ibuf[fk.offset:fk.offset + fk.width]
                            s = Signal(fk.width + 17)
                            m.d.comb += s.eq(kvb + r.slot * self.slot_rows)
                            with m.If(s >> fk.width):
                                c.fail(Cause.BAD_PATCH, Patch.KVB_ROWS | 1 << 4)
                            with m.Else():
                                m.d.sync += kvb.eq(s)
                                m.next = "OFFER"
                        with m.Else():
                            c.fail(Cause.BAD_PATCH, c.arg[32:36])
                    with m.Case(Kind.KVCMD):
                        with m.If(r.status != c.arg[36:40]):
                            c.fail(Cause.KV_STATUS, info)
                        with m.Else():
                            c.complete()
                    with m.Default():                  # WAIT_KV
                        with m.If((r.status == Status.OK) & in_mask):
                            c.complete()
                        with m.Else():
                            m.next = "GAP"
            with m.Elif(c.timeout | c.abort):
                c.fail(Mux(c.abort, Cause.ABORT, Cause.WATCHDOG), c.kind)

        with m.State("GAP"):                            # WAIT_KV: the next lookup after poll_gap
            m.d.comb += c.blocked.eq(1)
            with m.If(c.st_fail):
                c.fail(Cause.LOAD_STATUS, c.st_info)
            with m.Elif(c.timeout | c.abort):
                c.fail(Mux(c.abort, Cause.ABORT, Cause.WATCHDOG), c.kind)
            with m.Elif(c.gap == self.poll_gap):
                m.next = "KV_SEND"

        with m.State("WAIT"):
            m.d.comb += c.blocked.eq(1)
            cur = Signal(32)
            with m.Switch(c.arg[:8]):
                for i in range(self.n_counters):
                    with m.Case(i):
                        m.d.comb += cur.eq(self.counters[i])
            diff = Signal(32)
            m.d.comb += diff.eq(cur - c.arg[8:40])
            with m.If(c.st_fail):
                c.fail(Cause.LOAD_STATUS, c.st_info)
            with m.Elif(~diff[31]):
                c.complete()
            with m.Elif(c.timeout | c.abort):
                c.fail(Mux(c.abort, Cause.ABORT, Cause.WATCHDOG), c.kind)

        with m.State("DRAIN"):
            # no output, no new burst; empty the FIFO and take the beats still in flight
            m.d.sync += c.err_pend.eq(0)
            m.d.comb += c.pf.drain.eq(1)
            with m.If(c.pf.idle):
                m.d.sync += [c.running.eq(0), self.irq.eq(1)]
                m.next = "IDLE"
