"""K/V streamer (MCF §5): the attention unit's K/V rows come from the KV region in DDR
through a double-buffered on-chip staging buffer, and the engine's own K/V rows go back to DDR.

The region's layout (slot -> DDR address, row records) is :class:`spec.kvregion.KVRegion`; this
block computes the same addresses in logic. See docs/memory.md, "KV in DDR".

Contract
--------
* Staging buffer: ``n_win`` windows (a power of two >= 2) of ``win_rows`` rows, one K memory and
  one V memory of ``n_win * win_rows`` words; window ``w`` row ``r`` is word ``w * win_rows + r``.
  A word is the attention unit's K/V memory word: d int8 lanes (INT4 rows sign-extended), lane i
  at bits ``8i..8i+7``, the row exponent at ``8d..8d+7`` (:func:`spec.kvregion.staging_word`).
* ``k_rd`` / ``v_rd``: read ports of those memories with the ``lib.memory`` read-port
  signature (``addr``, ``en``; ``data`` one cycle after the address, as a synchronous
  ``Memory`` read port): the row-read interface the attention unit uses on its own memories.
  Only a window whose ``full`` bit is set holds defined data. With ``read_ports=2`` a second
  pair ``k_rd1`` / ``v_rd1`` reads the same memories independently (two rows per cycle, for an
  attention unit with ``keys_per_cycle=2``; Yosys maps a memory with two read ports and a write
  port as two copies, doubling the staging buffer's URAM).
* ``load`` ``{slot, row, n, win}``: fill window ``win`` rows ``0..n-1`` with rows ``row ..
  row+n-1`` of slot ``slot``'s K rows (K memory) and V rows (V memory): two AXI4 read
  descriptors (K then V), each ``n * row_bytes`` contiguous bytes. A load is taken when ``win``
  is neither loading nor full, no error is pending, and every ``kv_wr`` row taken before it has
  landed (its B response seen): loads never read stale rows of this block's own writes. While a
  load fills one window the consumer reads the others (block b+1 loads while block b computes).
  When both descriptors' last beats are written and both answered OKAY, ``full[win]`` rises.
  ``loading[win]`` is set from the cycle after the load is taken until both of its descriptors
  are answered (then ``full[win]`` rises, or on an error the window is free again): a window is
  claimed exactly while ``full | loading``.
* ``release`` ``{win}``: the consumer is done with ``win``: ``full[win]`` falls and the window can
  be loaded again (always ready; releasing a window that is not full changes nothing).
* ``kv_wr`` ``{sel, slot, row, data, e}``: one row (the attention unit's ``kv_in`` beat with a
  slot/row destination instead of a memory address) is packed into its record and written to
  ``row_addr(slot, sel, row)`` by an AXI4 write DMA (one descriptor of ``row_bytes`` per row).
  With ``kv_bits`` 4 only the low 4 bits of each lane are stored.
* Errors (``error`` code, ``error_addr``; the first one wins, ``error_clr`` clears): a load
  with ``n = 0`` (``ZERO_LENGTH``), ``n > win_rows`` (``TOO_LONG``), or rows outside the
  slot / a slot outside the region (``OUT_OF_WINDOW``), or a ``kv_wr`` row outside them
  (``OUT_OF_WINDOW``), is consumed without any bus transaction, ``error_addr`` = the address it
  would have touched. A read beat answered SLVERR/DECERR: that code, the first failing beat's
  address, and the window stays not full (it is free again). A write answered SLVERR/DECERR:
  that code and the row's address (the memory keeps its old bytes). While ``error`` is set the
  streamer halts: ``load``, ``raw`` and ``kv_wr`` are not ready; transactions already issued
  complete (raw runs included) and ``busy`` falls; nothing waits for ever. A consumer waits for ``full[w] | (error != 0)``; a
  load that failed leaves its window free and is not retried (the controller reissues it after
  ``error_clr`` if it wants to).
* ``raw`` ``{slot, rec0, n}``: read records ``rec0 .. rec0+n-1`` of slot ``slot`` (a slot is
  ``2 * slot_rows`` records, K rows then V rows: :meth:`spec.kvregion.KVRegion.record_addr`) as
  they lie in DDR: one read descriptor of ``n * row_bytes`` contiguous bytes at ``base +
  slot * slot_bytes + rec0 * row_bytes``, whose bus beats come out on ``raw_out`` ``{data, last}``
  (``data`` bus-width, little-endian: byte i of the run at ``data[8i+7:8i]`` of its beat; ``last``
  on the run's final beat) instead of going through the row assembler: a KV unit sent from DDR
  (the engine's KVS, :mod:`hdl.kvinstall_header`). Back-pressure on ``raw_out`` stalls RREADY
  (and with it every read queued behind the run). A raw read is taken under the same conditions
  as a load (no error pending, every ``kv_wr`` row taken before it has its B response), from
  its second cycle of valid on (its check is registered from the payload the stream holds), and
  checked the same way: ``n = 0`` (``ZERO_LENGTH``), a slot outside the region or ``rec0 + n >
  2 * slot_rows`` (``OUT_OF_WINDOW``) is consumed without any bus transaction and without any
  ``raw_out`` beat, ``error_addr`` = the address it would have read. SLVERR/DECERR: that code and
  the first failing beat's address; every beat of the run is still delivered on ``raw_out`` (with
  the data the slave sent), so its consumer never waits for a missing beat; then the streamer
  halts as for loads. ``raw_busy`` is set from the cycle after a raw read is taken until its
  status is seen and its error, if any, is in ``error`` (an error reaches ``error`` two cycles
  after its cause, through a register per source; intake halts from the first). **Loads and raw reads share the one
  DMAReader in command order**: their descriptors go out in the order the commands were taken
  (a load and a raw read offered in the same cycle: the load first) and their beats come back in
  that order, load beats to the staging windows, raw beats to ``raw_out``; a raw read behind a
  load waits for the load's beats (which never wait for anything), a load behind a raw read
  waits until ``raw_out`` has taken the run. There is no read -> write fence: a ``kv_wr`` taken
  after a load or raw read may land before that read's beats are read (the engine never does
  that: its KVS retires only after its whole run).
* ``m_axi``: one AXI4 master: the read channels of a :class:`~hdl.dma.reader.DMAReader`, the
  write channels of a :class:`~hdl.dma.writer.DMAWriter` (AXI4's read and write channels are
  independent, so one HP port carries both; all IDs 0).

Why not :class:`~hdl.dma.pingpong.PingPongLoader`: its buffers are bus-width words consumed once,
in order, as a packet; the attention unit reads whole rows (8d + 8 bits) at random addresses, each
row once per query row of the tile, from two memories at once (K in phase S, V in phase P). The
streamer keeps the loader's discipline (a window is refilled only when its consumer released it,
fills overlap consumption) around the same reader, with a row assembler in front of row-wide
memories.
"""
from amaranth import Module, Signal, Cat, Const, Mux, signed, unsigned
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory, ReadPort
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.kvregion import KVRegion
from mcf_fpga.hdl.bus import AXI4Signature
from mcf_fpga.spec.dma import DmaStatus
from .reader import DMAReader
from .writer import DMAWriter
from .kv_row_writer import KVRowWriter
from .kv_row_assembler import KVRowAssembler
from .kvregion_addr import row_addr, record_addr
from .kvstream_layouts import SLOT_BITS, ROW_BITS, load_layout, raw_layout, kv_wr_layout

__all__ = ["KVStreamer", "load_layout", "kv_wr_layout", "raw_layout"]

URAM = {"ram_style": "ultra"}


def _check_params(region, win_rows, n_win, addr_width):
    if n_win < 2 or n_win & (n_win - 1):
        raise ValueError(f"n_win must be a power of two >= 2, got {n_win}")
    if not 1 <= win_rows < 2 ** ROW_BITS:
        raise ValueError(f"win_rows must be in 1..{2 ** ROW_BITS - 1}, got {win_rows}")
    if region.slot_rows >= 2 ** ROW_BITS:
        raise ValueError(f"region.slot_rows={region.slot_rows} exceeds the {ROW_BITS}-bit row field")
    if region.n_slots > 2 ** SLOT_BITS:
        raise ValueError(f"region.n_slots={region.n_slots} exceeds the {SLOT_BITS}-bit slot field")
    if region.end > 2 ** addr_width:
        raise ValueError(f"the region [{region.base:#x}, {region.end:#x}) exceeds the "
                 f"{addr_width}-bit address space")


class KVStreamer(wiring.Component):
    """See the module docstring.

    Parameters
    ----------
    region : spec.kvregion.KVRegion
        The KV region (base, slots, rows per slot, d, kv_bits, bus width).
    win_rows : int
        Rows per staging window (>= the longest block one attention job reads).
    n_win : int
        Windows (a power of two >= 2): the staging buffer is ``n_win * win_rows`` rows.
    addr_width, max_burst, max_outstanding, id_width
        AXI4 parameters of the DMA engines (:class:`spec.dma.DmaParams`).
    read_ports : int
        1 (``k_rd``/``v_rd``) or 2 (also ``k_rd1``/``v_rd1``).
    """

    def __init__(self, region: KVRegion, *, win_rows: int = 16, n_win: int = 2, addr_width: int = 40,
                 max_burst: int = 16, max_outstanding: int = 4, id_width: int = 4, read_ports: int = 1):
        try:
            _check_params(region, win_rows, n_win, addr_width)
            if read_ports not in (1, 2):
                raise ValueError(f"read_ports must be 1 or 2, got {read_ports}")
        except ValueError:
            self._MustUse__silence = True      # a refused streamer is not an unused one
            raise
        self.region, self.win_rows, self.n_win, self.read_ports = region, win_rows, n_win, read_ports
        self.d = region.d
        dw = region.bus_bytes * 8
        dma = dict(addr_width=addr_width, data_width=dw, max_burst=max_burst,
                   max_outstanding=max_outstanding, id_width=id_width,
                   window_base=region.base, window_size=region.size)
        self._reader = DMAReader(**dma, max_length=max(win_rows, 2 * region.slot_rows) * region.row_bytes)
        self._writer = DMAWriter(**dma, max_length=region.row_bytes)
        self.addr_width, self.data_width = addr_width, dw
        self.word_bits = self.d * 8 + 8
        self.depth = n_win * win_rows
        self.rd_addr_width = max(1, (self.depth - 1).bit_length())
        self.win_width = max(1, (n_win - 1).bit_length())
        rp = ReadPort.Signature(addr_width=self.rd_addr_width, shape=unsigned(self.word_bits))
        rd1 = {"k_rd1": Out(rp), "v_rd1": Out(rp)} if read_ports == 2 else {}
        super().__init__({
            **rd1,
            "load": In(stream.Signature(load_layout(n_win))),
            "release": In(stream.Signature(data.StructLayout({"win": self.win_width}))),
            "full": Out(n_win),
            "loading": Out(n_win),
            "kv_wr": In(stream.Signature(kv_wr_layout(self.d))),
            "raw": In(stream.Signature(raw_layout())),
            "raw_out": Out(stream.Signature(data.StructLayout({"data": dw, "last": 1}))),
            "raw_busy": Out(1),
            "k_rd": Out(rp),
            "v_rd": Out(rp),
            "m_axi": Out(AXI4Signature(addr_width, dw, id_width)),
            "error": Out(4),
            "error_addr": Out(addr_width),
            "error_clr": In(1),
            "busy": Out(1),
        })

    def _checked(self, m, p, addr, n, faults):
        """``(address, length, check code)`` of a read of ``n`` records at ``addr``, registered
        every cycle (as ``{p}_addr``, ``{p}_len``, ``{p}_code``): the code is the first of
        ``faults`` [(condition, code)] that holds, else OK."""
        r_addr = Signal(self.addr_width + 24, name=f"{p}_addr")
        r_len = Signal(32, name=f"{p}_len")
        r_code = Signal(4, name=f"{p}_code")
        m.d.sync += [r_addr.eq(addr), r_len.eq(n * self.region.row_bytes), r_code.eq(DmaStatus.OK)]
        with m.If(faults[0][0]):
            m.d.sync += r_code.eq(faults[0][1])
        for cond, code in faults[1:]:
            with m.Elif(cond):
                m.d.sync += r_code.eq(code)
        return r_addr, r_len, r_code

    @staticmethod
    def _seen(m, s, name):
        """High from a command's second cycle of valid on (it was offered and not taken the cycle
        before): its payload, held by the stream, is the one the registered check was made of."""
        seen = Signal(name=name)
        m.d.sync += seen.eq(s.valid & ~s.ready)
        return seen

    def _load_check(self, m, reg, ld, win_rows):
        """The load ``ld``'s (address, length, check code), registered from its payload every cycle:
        a load is taken from its second cycle of valid on (``ld_seen``; the stream holds the
        payload until taken), one cycle per load, so the row-address multiply and the bounds
        compare stay off the ready path (timing)."""
        return self._checked(m, "l", row_addr(reg, ld.slot, 0, ld.row), ld.n, [
            (ld.n == 0, DmaStatus.ZERO_LENGTH), (ld.n > win_rows, DmaStatus.TOO_LONG),
            ((ld.slot >= reg.n_slots) | (ld.row + ld.n > reg.slot_rows), DmaStatus.OUT_OF_WINDOW)])

    def _raw_check(self, m, reg, rw):
        """The raw read ``rw``'s (address, length, check code), registered from its payload every
        cycle: as a load, a raw read is taken from its second cycle of valid on (``r_seen``; the
        stream holds the payload until taken), so the record-address multiply and the bounds
        compare stay off the ready path, and ``ready`` starts from flip-flops (timing); the engine
        offers KVS's read from its DECODE, a cycle before its KVS_RAW, so none waits."""
        return self._checked(m, "r", record_addr(reg, rw.slot, rw.rec0), rw.n, [
            (rw.n == 0, DmaStatus.ZERO_LENGTH),
            ((rw.slot >= reg.n_slots) | (rw.rec0 + rw.n > 2 * reg.slot_rows), DmaStatus.OUT_OF_WINDOW)])

    def elaborate(self, platform):
        m = Module()
        reg = self.region
        n_win, win_rows = self.n_win, self.win_rows
        m.submodules.reader = rd = self._reader
        m.submodules.writer = wr = self._writer
        self._connect_axi(m, rd, wr)

        # ---- staging memories, read ports exported ----
        ports = {}
        for name in ("k", "v"):
            mem = Memory(shape=unsigned(self.word_bits), depth=self.depth, init=[], attrs=URAM)
            m.submodules[f"{name}mem"] = mem
            for rport in [getattr(self, f"{name}_rd")] + ([getattr(self, f"{name}_rd1")] if self.read_ports == 2 else []):
                rp = mem.read_port()
                m.d.comb += [rp.addr.eq(rport.addr), rp.en.eq(rport.en), rport.data.eq(rp.data)]
            ports[name] = mem.write_port()

        # ---- error register: the first error wins; halts intake ----
        err_code = Signal(4)
        err_addr = Signal(self.addr_width)
        m.d.comb += [self.error.eq(err_code), self.error_addr.eq(err_addr)]
        # each source's error is registered first (err_pend) and the first listed of them takes the
        # register a cycle later: the commands' checks end at a flip-flop, not at the priority
        # mux (timing). Intake halts from the first register on (``halted``); ``busy`` and
        # ``raw_busy`` stay up until the error is in ``error``. ``halted`` and ``err_pend`` are
        # flip-flops of their own (set with the sources' registers), not ORs of them (timing).
        err_pend = Signal(name="err_pend")
        halted = Signal(name="halted")
        errs = []                        # (condition, code, addr) in priority order

        # ---- window state ----
        full = Signal(n_win)
        loading = Signal(n_win)
        set_full, clr_full = Signal(n_win), Signal(n_win)
        set_loading, clr_loading = Signal(n_win), Signal(n_win)
        m.d.sync += [full.eq((full | set_full) & ~clr_full),
                     loading.eq((loading | set_loading) & ~clr_loading)]
        m.d.comb += [self.full.eq(full), self.loading.eq(loading)]
        m.d.comb += self.release.ready.eq(1)
        with m.If(self.release.valid):
            m.d.comb += clr_full.eq(Const(1, n_win) << self.release.payload.win)

        # ---- write path: one row at a time, descriptor + its beats into the writer ----
        m.submodules.row_writer = rw_ = KVRowWriter(reg, self.addr_width, len(wr.desc.payload.length))
        wiring.connect(m, wiring.flipped(self.kv_wr), rw_.row)
        wiring.connect(m, rw_.desc, wr.desc)
        wiring.connect(m, rw_.data, wr.data)
        wiring.connect(m, wr.status, rw_.status)
        m.d.comb += rw_.halt.eq(halted)
        errs.append((rw_.refused, DmaStatus.OUT_OF_WINDOW, rw_.refused_addr))
        errs.append((wr.status.valid & (wr.status.payload.code != DmaStatus.OK), wr.status.payload.code,
                     wr.status.payload.addr))
        wr_idle = rw_.idle

        # ---- load intake: check, claim the window, two reader descriptors (K, V) ----
        ld = self.load.payload
        # one entry per load (two descriptors) or raw read (one), in descriptor order: {win, n - 1, raw};
        # its head registered (the assembler's row logic starts at a flip-flop, not a LUTRAM read:
        # the entry is written ~100 cycles of bus latency before its first beat is due)
        m.submodules.fills = fills = fifo.SyncFIFOBuffered(width=self.win_width + ROW_BITS + 1, depth=n_win + 1)
        m.submodules.sts = sts = fifo.SyncFIFO(width=self.win_width + 1, depth=n_win + 1)
        l_addr, l_len, l_code = self._load_check(m, reg, ld, win_rows)
        ld_seen = self._seen(m, self.load, "ld_seen")
        issuing = Signal(2)              # 0 idle, 1 K descriptor due, 2 V descriptor due
        i_addr = Signal(self.addr_width)
        i_len = Signal(32)
        win_busy = (full | loading).bit_select(ld.win, 1)
        can = (~halted & (issuing == 0) & wr_idle & fills.w_rdy & sts.w_rdy)
        m.d.comb += self.load.ready.eq(ld_seen & can & ((l_code != DmaStatus.OK) | ~win_busy))
        l_take = self.load.valid & self.load.ready
        l_good = l_take & (l_code == DmaStatus.OK)
        errs.append((l_take & (l_code != DmaStatus.OK), l_code, l_addr))
        with m.If(l_good):
            m.d.sync += [issuing.eq(1), i_addr.eq(l_addr), i_len.eq(l_len)]
            m.d.comb += [set_loading.eq(Const(1, n_win) << ld.win), fills.w_en.eq(1),
                         fills.w_data.eq(Cat(ld.win, (ld.n - 1)[:ROW_BITS], Const(0, 1))),
                         sts.w_en.eq(1), sts.w_data.eq(Cat(ld.win, Const(0, 1)))]

        # ---- raw intake: check, one reader descriptor (issued as the "V" step: then idle) ----
        r_addr, r_len, r_code = self._raw_check(m, reg, self.raw.payload)
        r_seen = self._seen(m, self.raw, "r_seen")
        m.d.comb += self.raw.ready.eq(can & ~l_take & r_seen)    # a load offered at once goes first
        r_take = self.raw.valid & self.raw.ready
        r_good = r_take & (r_code == DmaStatus.OK)
        errs.append((r_take & (r_code != DmaStatus.OK), r_code, r_addr))
        raw_pend = Signal(range(n_win + 2))                   # raw reads whose status is due
        r_done = Signal()
        m.d.sync += raw_pend.eq(raw_pend + r_good - r_done)
        with m.If(r_good):
            m.d.sync += [issuing.eq(2), i_addr.eq(r_addr), i_len.eq(r_len)]
            m.d.comb += [fills.w_en.eq(1), fills.w_data.eq(Cat(Const(0, self.win_width + ROW_BITS), Const(1, 1))),
                         sts.w_en.eq(1), sts.w_data.eq(Cat(Const(0, self.win_width), Const(1, 1)))]
        m.d.comb += [rd.desc.valid.eq(issuing != 0), rd.desc.payload.addr.eq(i_addr),
                     rd.desc.payload.length.eq(i_len)]
        with m.If(rd.desc.valid & rd.desc.ready):
            m.d.sync += issuing.eq(Mux(issuing == 1, 2, 0))
            with m.If(issuing == 1):
                m.d.sync += i_addr.eq(i_addr + reg.slot_rows * reg.row_bytes)

        # ---- fill: reader beats -> row records -> staging words (or raw_out) ----
        m.submodules.assembler = asm = KVRowAssembler(reg, win_rows, self.win_width, self.rd_addr_width)
        m.d.comb += [asm.fill.valid.eq(fills.r_rdy), asm.fill.payload.eq(fills.r_data),
                     fills.r_en.eq(asm.fill.ready)]
        wiring.connect(m, rd.data, asm.beats)
        wiring.connect(m, asm.raw_out, wiring.flipped(self.raw_out))
        wiring.connect(m, asm.k_wr, ports["k"])
        wiring.connect(m, asm.v_wr, ports["v"])

        # ---- reader statuses: two per load; the window turns full when both are OK ----
        s_half = Signal()
        s_bad = Signal()
        s_win = sts.r_data[:self.win_width]
        s_raw = sts.r_data[-1]
        m.d.comb += rd.status.ready.eq(sts.r_rdy)
        s_fire = rd.status.valid & rd.status.ready
        bad = rd.status.payload.code != DmaStatus.OK
        errs.append((s_fire & bad, rd.status.payload.code, rd.status.payload.addr))
        with m.If(s_fire & s_raw):           # a raw read: one status, no window
            m.d.comb += [sts.r_en.eq(1), r_done.eq(1)]
        with m.Elif(s_fire):
            m.d.sync += s_half.eq(~s_half)
            with m.If(~s_half):
                m.d.sync += s_bad.eq(bad)
            with m.Else():
                m.d.comb += [sts.r_en.eq(1), clr_loading.eq(Const(1, n_win) << s_win)]
                with m.If(~s_bad & ~bad):
                    m.d.comb += set_full.eq(Const(1, n_win) << s_win)

        # ---- error register ----
        self._latch_errors(m, errs, halted, err_pend, err_code, err_addr)

        m.d.comb += self.busy.eq(loading.any() | (issuing != 0) | ~wr_idle | (raw_pend != 0) | err_pend)
        m.d.comb += self.raw_busy.eq((raw_pend != 0) | err_pend)
        return m

    def _latch_errors(self, m, errs, halted, err_pend, err_code, err_addr):
        """``errs`` [(condition, code, addr)], the first listed winning: each into its own register
        (while not ``halted``), ``err_pend`` their OR (a register set with them); the next cycle the
        first pending one into ``err_code`` / ``err_addr``. ``halted`` (a register: ``err_code``
        != 0 or ``err_pend``) is set with ``err_pend``; ``error_clr`` clears every stage."""
        pend = [(Signal(name=f"err_pend{i}"), Signal(4, name=f"err_pend{i}_code"),
                 Signal(self.addr_width, name=f"err_pend{i}_addr")) for i in range(len(errs))]
        new = Cat(cond for cond, _, _ in errs).any() & ~halted & ~self.error_clr
        m.d.sync += [err_pend.eq(new), halted.eq((halted | new) & ~self.error_clr)]
        for (p, p_code, p_addr), (cond, code, addr) in zip(pend, errs):
            m.d.sync += [p.eq(cond & ~halted & ~self.error_clr), p_code.eq(code), p_addr.eq(addr)]
        with m.If(self.error_clr):
            m.d.sync += err_code.eq(0)
        with m.Elif(err_pend):
            for p, p_code, p_addr in reversed(pend):      # the first listed wins
                with m.If(p):
                    m.d.sync += [err_code.eq(p_code), err_addr.eq(p_addr)]

    def _connect_axi(self, m, rd, wr):
        """The reader's AR/R and the writer's AW/W/B on the one exported AXI4 master."""
        bus = self.m_axi
        for src, dst in ((rd.m_axi.ar, bus.ar), (wr.m_axi.aw, bus.aw), (wr.m_axi.w, bus.w)):
            m.d.comb += [dst.valid.eq(src.valid), dst.payload.eq(src.payload), src.ready.eq(dst.ready)]
        for dst, src in ((rd.m_axi.r, bus.r), (wr.m_axi.b, bus.b)):
            m.d.comb += [dst.valid.eq(src.valid), dst.payload.eq(src.payload), src.ready.eq(dst.ready)]
