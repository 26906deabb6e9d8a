"""RX placer: the NIC's locally delivered packets land in DDR at
addresses the host programmed beforehand, counted per entry, so the node's command fetcher
can WAIT on ``landed[e]`` and LOAD the payload. Packets nobody expects pass on to the host.

The rules (key, what is dropped, what is written where, the counters, ``ctrl``) are
:mod:`golden.rx_placer`'s, bit for bit; its :class:`~spec.rx_placer.RxKind`,
:func:`~spec.rx_placer.rx_kind` and :func:`~spec.rx_placer.land_bytes` are the shared
definitions.

Contract
--------
* ``s_axis`` (64-bit ``PacketSignature``): the NIC's local delivery, the Meta header first
  (``meta.header_bytes``, 2 beats at the defaults), then ``meta.length`` payload bytes (``keep``
  partial on the last beat only, contiguous from byte 0). Every beat is taken; nothing is ever
  dropped for back-pressure.
* Key match: once the header's last beat is in, its key ``(rx_kind, src, layer, block)`` is
  compared with the valid entries, ``scan_lanes`` per cycle from entry 0 (lowest index wins);
  an entry programmed with ``key_any_layer`` matches every ``layer`` (one entry serves a message
  stream through all the model's layers: its packets land in arrival order). The packet's beats
  keep arriving into the buffer meanwhile; the verdict comes at most ``ceil(entries /
  scan_lanes)`` cycles after the header (s_axis then waits one cycle), and the next packet's
  first beat waits for it. A ``ctrl`` write restarts a scan, so a verdict sees the table as it
  was at one instant.
* ``m_axis`` (64-bit ``PacketSignature``): a packet matching no valid entry (or shorter than the
  header) is passed on unchanged -- same beats, ``keep`` and ``last`` -- in arrival order, cut
  through from its verdict (its beats flow while it arrives, whatever its size).
* A matched packet is stored and forwarded: its header and up to ``max_payload`` payload bytes
  wait in a buffer of two largest packets until its last beat has been checked, so a malformed
  one (size != header + ``length``, ``length`` 0 or above ``max_payload``, a partial ``keep``
  before the last beat or a wrong ``keep`` on it) writes nothing; beyond ``max_payload`` its
  beats are drained at line rate. The overrun check (``offset + land_bytes(length, align) >
  limit``) and the offset update happen when it leaves the buffer, in arrival order.
* ``m_axi`` (AXI4 write master, ``data_width`` bits, all IDs 0, AWCACHE 0b0011; the read
  channels idle): a written packet covers ``[base + offset, + length rounded up to the bus
  width)`` in INCR bursts of at most ``max_burst`` beats that never cross 4 KB
  (:func:`spec.dma.plan_bursts`, as the DMA writer cuts a descriptor), each burst's W beats
  after its AW handshake (as :class:`hdl.dma.writer.DMAWriter`), at most ``max_outstanding``
  bursts awaiting their B; WSTRB is 0 for the bytes past ``length`` in the final beat. After the
  packet's last B response it counts ``landed[e]`` and ``placed`` (every burst OKAY) or
  ``axi_err`` (a burst answered SLVERR or DECERR: the first failing burst's code,
  ``DmaStatus`` 4 or 5, and address are the packet's error; the first error since ``clear`` is
  kept in ``err_code`` / ``err_addr``).
* ``landed`` (Out ``ArrayLayout(32, entries)``): ``landed[e]``, packets of entry ``e`` whose
  write answered OKAY (saturating). It rises only after the B response: the bytes are in DDR.
  In exported Verilog it is one flat ``32 * entries``-bit vector, entry ``e`` at bits
  ``[32e + 31 : 32e]``.
* ``csr``: AXI4-Lite registers (:func:`registers`): the entry programming port (``sel``, key,
  ``base_lo/hi``, ``limit``, ``ctrl``), entry ``sel``'s ``landed`` / ``offset``, the saturating
  counters, the first AXI error, ``status`` bit 0 busy. ``ctrl`` bit 2 clears every entry and
  counter; else bit 0 programs entry ``sel`` (valid, offset 0, landed 0), bit 1 invalidates it;
  ``sel >= entries`` is ignored and counted in ``bad_sel``. ``base`` bits below
  ``log2(align)`` are ignored (the host programs aligned bases, ``base + limit`` inside the
  address space).
* Back-pressure: ``m_axis`` and ``m_axi`` stalls fill the buffer and then hold ``s_axis``; the
  placer never drops a packet for them and never hangs while both eventually accept.
* ``busy``: a packet is being received, matched, buffered, passed, written or awaiting its status.

Resources: the write side is the placer's own (a packet is one stored, legal, exactly sized
descriptor, so the general DMA writer's checks, length-mismatch handling and wide queues are not
needed); the table is in LUT-RAM (keys and ``key_any_layer`` per scan lane, base and limit,
offset, landed: ``amaranth.lib.memory``, asynchronous reads), the valid bits and per-entry "offset
/ landed read as 0" flags in flip-flops (one ``ctrl`` write clears them all), the ``landed`` port
in flip-flops loaded from one shared incrementer.

Host rule: entries are programmed (and invalidated / cleared) while no packet for them is in
flight -- before a run -- and each entry's ``[base, base + limit)`` is its own.
"""
from amaranth import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.rx_placer import check_params
from mcf_fpga.hdl.bus import AXI4LiteRegisterFile, AXI4LiteSignature, AXI4Signature, Access, PacketSignature, Register
from mcf_fpga.spec.dma import DmaParams
from mcf_fpga.spec.meta import DEFAULT_PARAMS, MetaParams
from mcf_fpga.hdl.rx_placer_receiver import DROP, PASS, WRITE, RxReceiver, key_width
from mcf_fpga.hdl.rx_placer_scan import RxKeyScan
from mcf_fpga.hdl.rx_placer_writer import RxBurstWriter

__all__ = ["RxPlacer", "registers", "REGISTERS", "CTRL_PROGRAM", "CTRL_INVALIDATE", "CTRL_CLEAR"]

CTRL_PROGRAM, CTRL_INVALIDATE, CTRL_CLEAR = 1, 2, 4   #: ``ctrl`` bits
_M32 = (1 << 32) - 1


def registers(meta: MetaParams = DEFAULT_PARAMS, addr_width: int = 40):
    """AXI4-Lite register map (byte offsets; a 7-bit window)."""
    return [
        Register("sel", 0x00, doc="entry index for ctrl and the landed/offset reads"),
        Register("key_kind", 0x04, width=3, doc="RxKind of entry sel's key"),
        Register("key_src", 0x08, width=meta.node_bits, doc="Meta src of the key"),
        Register("key_layer", 0x0C, width=meta.layer_bits, doc="kv_id.layer of the key"),
        Register("key_block", 0x10, width=meta.block_bits, doc="kv_id.block of the key"),
        Register("base_lo", 0x14, doc="landing base [31:0] (bits below log2(align) ignored)"),
        Register("base_hi", 0x18, width=max(1, addr_width - 32), doc="landing base [addr_width-1:32]"),
        Register("limit", 0x1C, doc="bytes entry sel may use"),
        Register("ctrl", 0x20, Access.WO, width=3,
                 doc="bit 0 program entry sel, bit 1 invalidate it, bit 2 clear all entries and counters"),
        Register("landed", 0x24, Access.RO, doc="entry sel's packets landed OKAY (0 if sel >= entries)"),
        Register("offset", 0x28, Access.RO, doc="entry sel's bytes used (0 if sel >= entries)"),
        Register("passed", 0x2C, Access.RO, doc="packets passed to m_axis"),
        Register("placed", 0x30, Access.RO, doc="packets landed OKAY, all entries"),
        Register("drop_malformed", 0x34, Access.RO, doc="matched packets dropped: size, length 0 or too long"),
        Register("drop_overrun", 0x38, Access.RO, doc="matched packets dropped: offset + land > limit"),
        Register("axi_err", 0x3C, Access.RO, doc="packets whose write answered an error"),
        Register("err_code", 0x40, Access.RO, width=4, doc="first error's DmaStatus (4 SLVERR, 5 DECERR); 0 none"),
        Register("err_addr_lo", 0x44, Access.RO, doc="first error's failing burst address [31:0]"),
        Register("err_addr_hi", 0x48, Access.RO, doc="[63:32]"),
        Register("status", 0x4C, Access.RO, width=1, doc="bit 0 busy"),
        Register("bad_sel", 0x50, Access.RO, doc="ctrl program/invalidate writes with sel >= entries (ignored)"),
        Register("key_any_layer", 0x54, width=1, doc="1: entry sel's key matches every kv_id.layer (key_layer unused)"),
    ]


REGISTERS = registers()


class RxPlacer(wiring.Component):
    """The RX placer (module docstring: contract). It composes :class:`~hdl.rx_placer_receiver.RxReceiver`
    (the buffer and one verdict per packet), :class:`~hdl.rx_placer_scan.RxKeyScan` (the keys and
    the scan) and :class:`~hdl.rx_placer_writer.RxBurstWriter` (bursts and B status); it keeps the
    table's other fields, the control, the send FSM (pass, drain, overrun check) and the counters.

    Parameters
    ----------
    entries : int
        Table entries, 1..256.
    data_width : int
        The AXI master's data width, 64 or 128.
    max_payload : int
        Largest ``length`` placed (a multiple of 8, at most ``meta.max_length``); sets the buffer.
    align : int
        Landing alignment in bytes (a power of two >= data_width/8; default data_width/8).
    addr_width, max_burst, max_outstanding, id_width : int
        The AXI master's address width, largest burst (beats), bursts awaiting their B response
        and ID width (checked as :class:`spec.dma.DmaParams`).
    scan_lanes : int
        Entries the key scan compares per cycle (a power of two, 1..16; default 2; capped at
        ``entries`` rounded up to a power of two): a packet's verdict comes
        ``ceil(entries / scan_lanes)`` cycles at most after its header's last beat.
    meta : spec.meta.MetaParams
    """

    def __init__(self, entries: int = 16, *, data_width: int = 128, max_payload: int = 2048, align: int | None = None,
                 addr_width: int = 40, max_burst: int = 16, max_outstanding: int = 4, id_width: int = 4,
                 scan_lanes: int = 2, meta: MetaParams = DEFAULT_PARAMS):
        check_params(entries, max_payload, align, data_width, meta)
        if not 33 <= addr_width <= 64:
            raise ValueError(f"addr_width must be in 33..64 (base_hi holds bits 32..), got {addr_width}")
        if isinstance(scan_lanes, bool) or not isinstance(scan_lanes, int) or not 1 <= scan_lanes <= 16 \
                or scan_lanes & (scan_lanes - 1):
            raise ValueError(f"scan_lanes must be a power of two in 1..16, got {scan_lanes!r}")
        self.scan_lanes = min(scan_lanes, 1 << (entries - 1).bit_length())
        self.scan_rows = -(-entries // self.scan_lanes)
        self.entries, self.data_width, self.max_payload, self.meta = entries, data_width, max_payload, meta
        self.bus_bytes = data_width // 8
        self.align = self.bus_bytes if align is None else align
        self.addr_width = addr_width
        self.max_words = max_payload // 8
        # sub-blocks are made in elaborate() (a node built only for its signature leaves none unused)
        self._dma = dict(addr_width=addr_width, data_width=data_width, max_burst=max_burst,
                         max_outstanding=max_outstanding, id_width=id_width,
                         max_length=-(-max_payload // self.bus_bytes) * self.bus_bytes)
        DmaParams(**self._dma)                    # the checks, naming the field
        super().__init__({
            "s_axis": In(PacketSignature(64)),
            "m_axis": Out(PacketSignature(64)),
            "m_axi": Out(AXI4Signature(addr_width, data_width, id_width)),
            "landed": Out(data.ArrayLayout(32, entries)),
            "csr": In(AXI4LiteSignature(7, 32)),
            "busy": Out(1),
        })

    @property
    def csr_registers(self):
        """The ``Register`` list its AXI-Lite register file decodes (``spec.regmap``)."""
        return registers(self.meta, self.addr_width)

    def elaborate(self, platform):
        m = Module()
        mp, E = self.meta, self.entries
        hw = mp.header_bytes // 8                  # header words (beats)
        ab = (self.align - 1).bit_length()         # base bits below the alignment (not stored)
        ea = max(1, (E - 1).bit_length())          # entry index bits
        m.submodules.regs = regs = AXI4LiteRegisterFile(self.csr_registers, addr_width=7)
        wiring.connect(m, wiring.flipped(self.csr), regs.bus)

        # ================= control: program / invalidate / clear ==================================
        ctrl = Signal(3)
        m.d.comb += ctrl.eq(Mux(regs.ctrl_wstb, regs.ctrl, 0))
        clear = ctrl[2]
        sel = regs.sel
        sel_ok = sel < E
        sel_e = sel[:ea]
        prog, inval = Signal(), Signal()
        m.d.comb += [prog.eq(~clear & ctrl[0] & sel_ok), inval.eq(~clear & ~ctrl[0] & ctrl[1] & sel_ok)]

        # ================= the table ===============================================================
        # valid (flip-flops: one write clears them all); keys in the scan; base and limit in
        # LUT-RAM; offset and landed in LUT-RAM, read as 0 while their entry's *_zero flag is set
        m.submodules.scan = scan = RxKeyScan(entries=E, lanes=self.scan_lanes, key_width=key_width(mp),
                                             layer=(3 + mp.node_bits, 3 + mp.node_bits + mp.layer_bits))
        valid = scan.valid
        m.d.comb += [scan.write.eq(prog), scan.sel.eq(sel), scan.restart.eq(ctrl.any()),
                     scan.wkey.eq(Cat(regs.key_kind, regs.key_src, regs.key_layer, regs.key_block,
                                      regs.key_any_layer))]
        m.submodules.tab = tab = Memory(shape=unsigned(self.addr_width - ab + 32), depth=E, init=[])
        tab_w = tab.write_port()
        m.d.comb += [tab_w.addr.eq(sel_e), tab_w.en.eq(prog),
                     tab_w.data.eq(Cat(Cat(regs.base_lo, regs.base_hi)[ab:self.addr_width], regs.limit))]
        m.submodules.offs = offs = Memory(shape=unsigned(32), depth=E, init=[])
        m.submodules.lands = lands = Memory(shape=unsigned(32), depth=E, init=[])
        off_zero = Signal(E, init=(1 << E) - 1)
        land_zero = Signal(E, init=(1 << E) - 1)

        # ================= receive (buffer, verdicts) and write (bursts, status) ==================
        m.submodules.rx = rx = RxReceiver(entries=E, max_payload=self.max_payload, meta=mp)
        wiring.connect(m, wiring.flipped(self.s_axis), rx.s_axis)
        m.d.comb += [scan.start.eq(rx.start), scan.key.eq(rx.key), scan.accept.eq(rx.room),
                     rx.scanning.eq(scan.scanning), rx.resolve.eq(scan.resolve), rx.hit.eq(scan.hit),
                     rx.found.eq(scan.found)]
        d = self._dma
        m.submodules.wr = wr = RxBurstWriter(entries=E, addr_width=self.addr_width, data_width=self.data_width,
                                             id_width=d["id_width"], max_burst=d["max_burst"],
                                             max_outstanding=d["max_outstanding"], max_words=self.max_words,
                                             length_bits=mp.length_bits)
        wiring.connect(m, wr.bus, wiring.flipped(self.m_axi))
        ih, bh, beats = rx.info.payload, rx.beats.payload, rx.beats
        pk = Signal(rx.info_lay)
        cnt = Signal(range(rx.depth + 1))
        round_up = lambda v, a, w: ((v + (a - 1)) & Const(((1 << w) - 1) & ~(a - 1), w))  # noqa: E731
        land = Signal(max(mp.length_bits, self.align.bit_length()) + 1)
        m.d.comb += land.eq(round_up(pk.length, self.align, len(land)))
        tab_r = tab.read_port(domain="comb")
        off_r = offs.read_port(domain="comb")
        m.d.comb += [tab_r.addr.eq(pk.e), off_r.addr.eq(pk.e)]
        base_e, lim_e = tab_r.data[:self.addr_width - ab], tab_r.data[self.addr_width - ab:]
        off_e = Signal(32)
        set_off, new_off = Signal(), Signal(33)
        m.d.comb += [new_off.eq(off_e + land), off_e.eq(Mux(off_zero.bit_select(pk.e, 1), 0, off_r.data))]
        off_w = offs.write_port()
        m.d.comb += [off_w.addr.eq(pk.e), off_w.data.eq(new_off), off_w.en.eq(set_off)]
        inc_passed, inc_overrun = Signal(), Signal()
        m.d.comb += [wr.e.eq(pk.e), wr.length.eq(pk.length), wr.words.payload.eq(bh.data),
                     wr.words.valid.eq(beats.valid), wr.clear.eq(clear),
                     wr.addr.eq((Cat(Const(0, ab), base_e) + off_e)[wr.lg:])]
        with m.FSM(name="tx") as tx:
            with m.State("IDLE"):
                m.d.comb += rx.info.ready.eq(1)
                with m.If(rx.info.valid):
                    m.d.sync += [pk.eq(ih), cnt.eq(Mux(ih.verdict == WRITE, hw, ih.count))]
                    with m.Switch(ih.verdict):
                        with m.Case(PASS):
                            m.next = "PASS"
                        with m.Case(DROP):
                            m.next = "DRAIN"
                        with m.Default():
                            m.next = "SKIP"
            with m.State("PASS"):
                m.d.comb += [self.m_axis.valid.eq(beats.valid), self.m_axis.payload.eq(bh),
                             beats.ready.eq(self.m_axis.ready)]
                with m.If(beats.valid & self.m_axis.ready & bh.last):
                    m.d.comb += inc_passed.eq(1)
                    m.next = "IDLE"
            for state, after in (("DRAIN", "IDLE"), ("SKIP", "CHECK")):   # a dropped packet's beats;
                with m.State(state):                                        # a written one's header
                    m.d.comb += beats.ready.eq(1)
                    with m.If(beats.valid):
                        m.d.sync += cnt.eq(cnt - 1)
                        with m.If(cnt == 1):
                            m.next = after
            with m.State("CHECK"):
                with m.If(new_off > lim_e):
                    m.d.comb += inc_overrun.eq(1)
                    m.d.sync += cnt.eq(pk.count - hw)
                    m.next = "DRAIN"
                with m.Else():
                    m.d.comb += [set_off.eq(1), wr.start.eq(1)]
                    m.next = "WRITE"
            with m.State("WRITE"):
                m.d.comb += beats.ready.eq(wr.words.ready)
                with m.If(wr.done):
                    m.next = "IDLE"

        # ================= table updates (control wins over the paths above) ==================
        pe = wr.entry
        land_r, land_w = lands.read_port(domain="comb"), lands.write_port()
        land_pe, land_new = Signal(32), Signal(32)
        m.d.comb += [land_r.addr.eq(pe), land_pe.eq(Mux(land_zero.bit_select(pe, 1), 0, land_r.data)),
                     land_new.eq(land_pe + (land_pe != _M32)), land_w.addr.eq(pe), land_w.data.eq(land_new),
                     land_w.en.eq(wr.placed)]
        with m.If(set_off):
            m.d.sync += off_zero.bit_select(pk.e, 1).eq(0)
        with m.If(wr.placed):
            m.d.sync += land_zero.bit_select(pe, 1).eq(0)
        for i in range(E):                        # the landed port: flip-flops loading land_new
            with m.If(clear | (prog & (sel_e == i))):
                m.d.sync += self.landed[i].eq(0)
            with m.Elif(wr.placed & (pe == i)):
                m.d.sync += self.landed[i].eq(land_new)
        with m.If(clear):
            m.d.sync += [valid.eq(0), off_zero.eq((1 << E) - 1), land_zero.eq((1 << E) - 1)]
        with m.Elif(prog):
            m.d.sync += [valid.bit_select(sel_e, 1).eq(1), off_zero.bit_select(sel_e, 1).eq(1),
                         land_zero.bit_select(sel_e, 1).eq(1)]
        with m.Elif(inval):
            m.d.sync += valid.bit_select(sel_e, 1).eq(0)
        inc_bad_sel = ~clear & ctrl[:2].any() & ~sel_ok

        # ================= counters and registers =================
        for name, inc in (("passed", inc_passed), ("placed", wr.placed), ("drop_malformed", rx.malformed),
                          ("drop_overrun", inc_overrun), ("axi_err", wr.failed), ("bad_sel", inc_bad_sel)):
            c = Signal(32, name=f"n_{name}")
            with m.If(clear):
                m.d.sync += c.eq(0)
            with m.Elif(inc & (c != _M32)):
                m.d.sync += c.eq(c + 1)
            m.d.comb += getattr(regs, name).eq(c)
        off_c, land_c = offs.read_port(domain="comb"), lands.read_port(domain="comb")
        m.d.comb += [off_c.addr.eq(sel_e), land_c.addr.eq(sel_e)]
        busy = rx.busy | scan.scanning | ~tx.ongoing("IDLE") | wr.busy
        m.d.comb += [self.busy.eq(busy), regs.status.eq(busy),
                     regs.landed.eq(Mux(sel_ok & ~land_zero.bit_select(sel_e, 1), land_c.data, 0)),
                     regs.offset.eq(Mux(sel_ok & ~off_zero.bit_select(sel_e, 1), off_c.data, 0)),
                     regs.err_code.eq(wr.err_code), regs.err_addr_lo.eq(wr.err_addr[:32]),
                     regs.err_addr_hi.eq(wr.err_addr[32:])]
        return m
