"""RX placer (issue #19 "RX placement"): the NIC's locally delivered packets land in DDR at
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
from amaranth.lib import data, fifo, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.rx_placer import RxKind, check_params
from mcf_fpga.hdl.bus import AXI4LiteRegisterFile, AXI4LiteSignature, AXI4Signature, Access, Burst, PacketSignature, Register, Resp
from mcf_fpga.spec.dma import DmaParams, DmaStatus
from mcf_fpga.spec.meta import DEFAULT_PARAMS, MetaParams, MetaOp, ReduceOp, Stage
from mcf_fpga.hdl.meta import meta_layout

__all__ = ["RxPlacer", "registers", "REGISTERS", "CTRL_PROGRAM", "CTRL_INVALIDATE", "CTRL_CLEAR"]

CTRL_PROGRAM, CTRL_INVALIDATE, CTRL_CLEAR = 1, 2, 4   #: ``ctrl`` bits
_M32 = (1 << 32) - 1
_PASS, _DROP, _WRITE = 0, 1, 2                          # a packet's verdict in the info queue


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
    """The RX placer (module docstring: contract).

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
        mp, E, L, D = self.meta, self.entries, self.scan_lanes, self.scan_rows
        hw = mp.header_bytes // 8                  # header words (beats)
        max_words = self.max_words
        k = self.bus_bytes // 8                    # 64-bit words per bus beat
        kw = 3 + mp.node_bits + mp.layer_bits + mp.block_bits
        ab = (self.align - 1).bit_length()         # base bits below the alignment (not stored)
        ea = max(1, (E - 1).bit_length())          # entry index bits
        lb = (L - 1).bit_length()                  # lane bits of an entry index
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
        ctrl_act = ctrl.any()                      # restarts a scan: the match sees the new table

        # ================= the table ===============================================================
        # valid (flip-flops: one write clears them all); keys + key_any_layer in LUT-RAM, lane l of
        # the scan holding entries l, L + l, 2L + l, ...; base and limit in LUT-RAM; offset and
        # landed in LUT-RAM, read as 0 while their entry's *_zero flag is set (program, clear)
        valid = Signal(D * L)
        keymem = []
        for l in range(L):
            km = Memory(shape=unsigned(kw + 1), depth=D, init=[])
            m.submodules[f"keys{l}"] = km
            kwp = km.write_port()
            m.d.comb += [kwp.addr.eq(sel[lb:lb + max(1, (D - 1).bit_length())]),
                         kwp.data.eq(Cat(regs.key_kind, regs.key_src, regs.key_layer, regs.key_block,
                                         regs.key_any_layer)),
                         kwp.en.eq(prog & (sel[:lb] == l))]
            keymem.append(km)
        m.submodules.tab = tab = Memory(shape=unsigned(self.addr_width - ab + 32), depth=E, init=[])
        tab_w = tab.write_port()
        m.d.comb += [tab_w.addr.eq(sel_e), tab_w.en.eq(prog),
                     tab_w.data.eq(Cat(Cat(regs.base_lo, regs.base_hi)[ab:self.addr_width], regs.limit))]
        m.submodules.offs = offs = Memory(shape=unsigned(32), depth=E, init=[])
        m.submodules.lands = lands = Memory(shape=unsigned(32), depth=E, init=[])
        off_zero = Signal(E, init=(1 << E) - 1)
        land_zero = Signal(E, init=(1 << E) - 1)
        landed = [self.landed[i] for i in range(E)]

        # ================= receive: buffer every beat until the verdict ============================
        beat_lay = data.StructLayout({"data": 64, "keep": 8, "last": 1})
        fifo_depth = 2 * (hw + max_words)
        info_lay = data.StructLayout({"verdict": 2, "e": range(max(E, 2)), "length": mp.length_bits,
                                      "count": range(fifo_depth + 1)})
        m.submodules.beats = beats = fifo.SyncFIFOBuffered(width=beat_lay.size, depth=fifo_depth)
        m.submodules.info = info = fifo.SyncFIFOBuffered(width=info_lay.size, depth=4)
        s = self.s_axis
        beat = s.payload
        fire = s.valid & s.ready
        top = hw + max_words + 1
        widx = Signal(range(top + 1))             # beat index in the packet (saturating)
        in_pkt = Signal()
        matched = Signal()                        # the verdict was a match, the packet still arriving
        irregular = Signal()                      # a beat before the last with keep != 0xFF
        meta_bits = Signal(64 * max(1, hw - 1))
        hdr_bits = Cat(meta_bits[:64 * (hw - 1)], beat.data)
        hdr = data.View(meta_layout(mp), hdr_bits[:meta_layout(mp).size])

        kind = Signal(3)
        with m.If(hdr.stage == Stage.PREFILL):
            m.d.comb += kind.eq(RxKind.KV)
        with m.Elif(hdr.reduce_op == ReduceOp.MAX):
            m.d.comb += kind.eq(RxKind.MAX)
        with m.Elif((hdr.reduce_op == ReduceOp.SUM) | (hdr.reduce_op == ReduceOp.SOFTMAX_MERGE)):
            m.d.comb += kind.eq(RxKind.SUM)
        with m.Elif(hdr.op == MetaOp.QUERY):
            m.d.comb += kind.eq(RxKind.Q)
        with m.Elif(hdr.op == MetaOp.DATA):
            m.d.comb += kind.eq(RxKind.DATA)
        with m.Else():
            m.d.comb += kind.eq(RxKind.OTHER)
        pkey = Cat(kind, hdr.src, hdr.kv_id.layer, hdr.kv_id.block)

        # ---- the scan: row r compares entries r*L .. r*L + L-1 with the packet's key ----
        skey = Signal(kw)                         # the key and length of the packet being matched
        slen = Signal(mp.length_bits)
        scanning = Signal()                       # from the header's last beat to the verdict
        row = Signal(range(max(D, 2)))
        hits = Signal(L)
        lo, hi = 3 + mp.node_bits, 3 + mp.node_bits + mp.layer_bits     # the layer's bits in a key
        for l in range(L):
            rp = keymem[l].read_port(domain="comb")
            key, anyl = rp.data[:kw], rp.data[kw]
            vl = Cat(valid[d * L + l] for d in range(D))
            m.d.comb += [rp.addr.eq(row),
                         hits[l].eq(vl.bit_select(row, 1) & (key[:lo] == skey[:lo]) & (key[hi:] == skey[hi:])
                                    & (anyl | (key[lo:hi] == skey[lo:hi])))]
        hit_lane = Signal(range(max(L, 2)))
        for l in reversed(range(L)):
            with m.If(hits[l]):
                m.d.comb += hit_lane.eq(l)
        found = Signal(range(max(E, 2)))          # lowest matching entry of the row
        m.d.comb += found.eq(row * L + hit_lane)
        resolve = Signal()                        # the verdict, this cycle (s_axis waits a cycle)
        m.d.comb += resolve.eq(scanning & (hits.any() | (row == D - 1)) & ~ctrl_act & info.w_rdy)
        with m.If(scanning & ~resolve):
            with m.If(ctrl_act):
                m.d.sync += row.eq(0)
            with m.Elif(~hits.any() & (row != D - 1)):
                m.d.sync += row.eq(row + 1)

        cur = Signal(info_lay)                    # the matched packet's entry and length
        exp_words = Signal(range(max_words + 1))  # payload words to store (0 if length is bad)
        last_keep = Signal(8)
        stored = Signal(range(fifo_depth + 1))    # the packet's beats in the buffer
        ended = Signal()                          # its last beat came before the verdict
        end_widx = Signal(range(top + 1))
        end_keep = Signal(8)
        len_ok = (slen != 0) & (slen <= self.max_payload)
        exp_c = Signal(range(max_words + 1))
        lk_c = Signal(8)
        m.d.comb += [exp_c.eq(Mux(len_ok, (slen + 7) >> 3, 0)),
                     lk_c.eq((Const(1, 9) << ((slen - 1)[:3] + 1)) - 1)]
        at_hend = widx == hw - 1
        full_hdr = Signal()                       # this beat completes a header: scan it
        m.d.comb += full_hdr.eq(at_hend & ~(beat.last & (beat.keep != 0xFF)))
        runt = Signal()                           # a frame shorter than a header: pass it
        m.d.comb += runt.eq((widx < hw) & beat.last & ~full_hdr)
        push_beat = Signal()
        m.d.comb += push_beat.eq(~matched | (widx < hw + exp_words))
        push_end = Signal()                       # the matched packet's last beat
        m.d.comb += push_end.eq(matched & beat.last)
        good = Signal()                           # (a packet of the header alone is malformed)
        m.d.comb += good.eq(matched & (widx == hw + exp_words - 1) & (exp_words != 0) & ~irregular
                            & (beat.keep == last_keep))
        good_end = Signal()                       # the same for a packet that ended before its verdict
        m.d.comb += good_end.eq((end_widx == hw + exp_c - 1) & (exp_c != 0) & ~irregular & (end_keep == lk_c))
        ipush = data.View(info_lay, info.w_data)
        bpush = data.View(beat_lay, beats.w_data)
        hold = resolve | (~in_pkt & scanning)     # a new packet waits for the previous one's verdict
        m.d.comb += [s.ready.eq(~hold & (~push_beat | beats.w_rdy) & (~(runt | push_end) | info.w_rdy)),
                     bpush.eq(beat), beats.w_en.eq(fire & push_beat)]
        inc_malformed = Signal()
        with m.If(fire):
            m.d.sync += in_pkt.eq(~beat.last)
            for i in range(hw - 1):
                with m.If(widx == i):
                    m.d.sync += meta_bits[64 * i:64 * (i + 1)].eq(beat.data)
            with m.If(push_beat):
                m.d.sync += stored.eq(stored + 1)
            with m.If(~beat.last & (beat.keep != 0xFF)):
                m.d.sync += irregular.eq(1)
            with m.If(full_hdr):
                m.d.sync += [scanning.eq(1), row.eq(0), skey.eq(pkey), slen.eq(hdr.length)]
            with m.If(runt):
                m.d.comb += [info.w_en.eq(1), ipush.verdict.eq(_PASS)]
            with m.If(push_end):
                m.d.comb += [info.w_en.eq(1), ipush.e.eq(cur.e), ipush.length.eq(cur.length),
                             ipush.count.eq(stored + push_beat), ipush.verdict.eq(Mux(good, _WRITE, _DROP)),
                             inc_malformed.eq(~good)]
            with m.If(beat.last):
                m.d.sync += widx.eq(0)
                with m.If(full_hdr | scanning):   # the verdict will need how the packet ended
                    m.d.sync += [ended.eq(1), end_widx.eq(widx), end_keep.eq(beat.keep)]
                with m.Else():
                    m.d.sync += [matched.eq(0), irregular.eq(0), stored.eq(0)]
            with m.Elif(widx != top):
                m.d.sync += widx.eq(widx + 1)
        with m.If(resolve):                       # (no beat is taken this cycle)
            m.d.sync += scanning.eq(0)
            with m.If(hits.any() & ended):
                m.d.comb += [info.w_en.eq(1), ipush.e.eq(found), ipush.length.eq(slen), ipush.count.eq(stored),
                             ipush.verdict.eq(Mux(good_end, _WRITE, _DROP)), inc_malformed.eq(~good_end)]
            with m.Elif(hits.any()):
                m.d.sync += [matched.eq(1), cur.e.eq(found), cur.length.eq(slen), exp_words.eq(exp_c),
                             last_keep.eq(lk_c)]
            with m.Else():
                m.d.comb += [info.w_en.eq(1), ipush.verdict.eq(_PASS)]
            with m.If(ended):
                m.d.sync += [ended.eq(0), irregular.eq(0), stored.eq(0)]

        # ================= send: pass on, drain, or write the payload in bursts ===============
        ih = data.View(info_lay, info.r_data)
        bh = data.View(beat_lay, beats.r_data)
        pk = Signal(info_lay)
        cnt = Signal(range(fifo_depth + 1))
        round_up = lambda v, a, w: ((v + (a - 1)) & Const(((1 << w) - 1) & ~(a - 1), w))  # noqa: E731
        land = Signal(max(mp.length_bits, self.align.bit_length()) + 1)
        m.d.comb += land.eq(round_up(pk.length, self.align, len(land)))
        tab_r = tab.read_port(domain="comb")
        off_r = offs.read_port(domain="comb")
        m.d.comb += [tab_r.addr.eq(pk.e), off_r.addr.eq(pk.e)]
        base_e, lim_e = tab_r.data[:self.addr_width - ab], tab_r.data[self.addr_width - ab:]
        off_e = Signal(32)
        m.d.comb += off_e.eq(Mux(off_zero.bit_select(pk.e, 1), 0, off_r.data))
        set_off, new_off = Signal(), Signal(33)
        m.d.comb += new_off.eq(off_e + land)
        off_w = offs.write_port()
        m.d.comb += [off_w.addr.eq(pk.e), off_w.data.eq(new_off), off_w.en.eq(set_off)]
        inc_passed, inc_overrun = Signal(), Signal()

        # the write: INCR bursts of at most max_burst beats, never across 4 KB (plan_bursts), each
        # AW then its W beats; k 64-bit words make a bus beat (the last word or words of a packet:
        # a final beat whose bytes past ``length`` have WSTRB 0)
        bb, lg = self.bus_bytes, (self.bus_bytes - 1).bit_length()
        mb, mob = self._dma["max_burst"], self._dma["max_outstanding"]
        bus = self.m_axi
        cur = Signal(self.addr_width - lg)        # the next burst's address, in bus beats
        rem_beats = Signal(range(max_words + 1))  # bus beats of the packet not yet in a burst
        rem_words = Signal(range(max_words + 1))  # 64-bit words of the packet not yet taken
        rem_bytes = Signal(mp.length_bits)        # payload bytes from the current bus beat on
        wcnt = Signal(range(mb + 1))              # W beats left in the current burst
        nb = Signal(range(mb + 1))
        to4k = Signal(13 - lg)
        m.d.comb += [to4k.eq(Const(4096 >> lg, 13 - lg) - cur[:12 - lg]),
                     nb.eq(Mux((rem_beats <= mb) & (rem_beats <= to4k), rem_beats, Mux(to4k < mb, to4k, mb)))]
        j = Signal(range(k))                      # words of the bus beat held in acc
        acc = [Signal(64, name=f"acc{i}") for i in range(k - 1)]
        flush = Signal()                          # the packet's last word is in acc: send the beat
        bqw = data.StructLayout({"e": len(pk.e), "last": 1, "addr": self.addr_width - lg})
        m.submodules.pend = bq = fifo.SyncFIFOBuffered(width=bqw.size, depth=mob)
        bpush = data.View(bqw, bq.w_data)
        m.d.comb += [bus.aw.payload.addr.eq(Cat(Const(0, lg), cur)), bus.aw.payload.len.eq(nb - 1),
                     bus.aw.payload.size.eq(lg), bus.aw.payload.burst.eq(Burst.INCR),
                     bus.aw.payload.cache.eq(0b0011),
                     bus.w.payload.data.eq(Cat(*acc, bh.data)),
                     bus.w.payload.strb.eq(Cat(*(rem_bytes > i for i in range(bb)))),
                     bus.w.payload.last.eq(wcnt == 1),
                     bpush.e.eq(pk.e), bpush.last.eq(nb == rem_beats), bpush.addr.eq(cur),
                     bus.ar.valid.eq(0), bus.r.ready.eq(0)]
        w_fire = bus.w.valid & bus.w.ready
        with m.If(w_fire):
            m.d.sync += [wcnt.eq(wcnt - 1), rem_bytes.eq(rem_bytes - bb), j.eq(0)]
        with m.FSM(name="tx") as tx:
            with m.State("IDLE"):
                m.d.comb += info.r_en.eq(1)
                with m.If(info.r_rdy):
                    m.d.sync += [pk.eq(ih), cnt.eq(Mux(ih.verdict == _WRITE, hw, ih.count))]
                    with m.Switch(ih.verdict):
                        with m.Case(_PASS):
                            m.next = "PASS"
                        with m.Case(_DROP):
                            m.next = "DRAIN"
                        with m.Default():
                            m.next = "SKIP"
            with m.State("PASS"):
                m.d.comb += [self.m_axis.valid.eq(beats.r_rdy), self.m_axis.payload.eq(bh),
                             beats.r_en.eq(self.m_axis.ready)]
                with m.If(beats.r_rdy & self.m_axis.ready & bh.last):
                    m.d.comb += inc_passed.eq(1)
                    m.next = "IDLE"
            with m.State("DRAIN"):                # a dropped packet's stored beats (or the header)
                m.d.comb += beats.r_en.eq(1)
                with m.If(beats.r_rdy):
                    m.d.sync += cnt.eq(cnt - 1)
                    with m.If(cnt == 1):
                        m.next = "IDLE"
            with m.State("SKIP"):                 # the written packet's header beats
                m.d.comb += beats.r_en.eq(1)
                with m.If(beats.r_rdy):
                    m.d.sync += cnt.eq(cnt - 1)
                    with m.If(cnt == 1):
                        m.next = "CHECK"
            with m.State("CHECK"):
                with m.If(new_off > lim_e):
                    m.d.comb += inc_overrun.eq(1)
                    m.d.sync += cnt.eq(pk.count - hw)
                    m.next = "DRAIN"
                with m.Else():
                    m.d.comb += set_off.eq(1)
                    m.d.sync += [cur.eq((Cat(Const(0, ab), base_e) + off_e)[lg:]), rem_bytes.eq(pk.length),
                                 rem_words.eq((pk.length + 7) >> 3), rem_beats.eq((pk.length + bb - 1) >> lg),
                                 j.eq(0)]
                    m.next = "AW"
            with m.State("AW"):
                m.d.comb += [bus.aw.valid.eq(bq.w_rdy), bq.w_en.eq(bus.aw.valid & bus.aw.ready)]
                with m.If(bus.aw.valid & bus.aw.ready):
                    m.d.sync += [wcnt.eq(nb), cur.eq(cur + nb), rem_beats.eq(rem_beats - nb)]
                    m.next = "W"
            with m.State("W"):
                take = Signal()                   # this cycle's buffered word goes into acc
                with m.If(flush):                 # the final beat, all of it in acc
                    m.d.comb += bus.w.valid.eq(1)
                with m.Elif(j == k - 1):          # acc + the buffered word make the bus beat
                    m.d.comb += [bus.w.valid.eq(beats.r_rdy), beats.r_en.eq(bus.w.ready)]
                with m.Else():
                    m.d.comb += [beats.r_en.eq(1), take.eq(beats.r_rdy)]
                with m.If(beats.r_en & beats.r_rdy):
                    m.d.sync += rem_words.eq(rem_words - 1)
                with m.If(take):
                    m.d.sync += j.eq(j + 1)
                    for i in range(k - 1):
                        with m.If(j == i):
                            m.d.sync += acc[i].eq(bh.data)
                    with m.If(rem_words == 1):
                        m.d.sync += flush.eq(1)
                with m.If(w_fire):
                    m.d.sync += flush.eq(0)
                    with m.If((wcnt == 1) & (rem_beats == 0)):   # the packet's last beat
                        m.next = "IDLE"
                    with m.Elif(wcnt == 1):                      # the burst's: the next one
                        m.next = "AW"

        # ================= status: landed / placed or the error, after the last B =============
        bh_q = data.View(bqw, bq.r_data)
        resp = bus.b.payload.resp
        b_fire = bus.b.valid & bus.b.ready
        bad = (resp == Resp.SLVERR) | (resp == Resp.DECERR)
        code = Signal(4)
        m.d.comb += [bus.b.ready.eq(bq.r_rdy), bq.r_en.eq(b_fire),
                     code.eq(Mux(resp == Resp.SLVERR, DmaStatus.SLVERR, DmaStatus.DECERR))]
        perr = Signal()                           # a burst of this packet failed: its code, address
        pcode = Signal(4)
        paddr = Signal(self.addr_width - lg)
        pe = bh_q.e
        land_r = lands.read_port(domain="comb")
        land_w = lands.write_port()
        land_pe, land_new = Signal(32), Signal(32)
        m.d.comb += [land_r.addr.eq(pe), land_pe.eq(Mux(land_zero.bit_select(pe, 1), 0, land_r.data)),
                     land_new.eq(land_pe + (land_pe != _M32)), land_w.addr.eq(pe), land_w.data.eq(land_new)]
        inc_placed = Signal()
        inc_axi_err = Signal()
        err_code = Signal(4)
        err_addr = Signal(self.addr_width)
        with m.If(b_fire):
            with m.If(bad & ~perr):
                m.d.sync += [perr.eq(1), pcode.eq(code), paddr.eq(bh_q.addr)]
            with m.If(bh_q.last):
                m.d.sync += perr.eq(0)
                with m.If(~perr & ~bad):
                    m.d.comb += [inc_placed.eq(1), land_w.en.eq(1)]
                with m.Else():
                    m.d.comb += inc_axi_err.eq(1)
                    with m.If(err_code == 0):
                        m.d.sync += [err_code.eq(Mux(perr, pcode, code)),
                                     err_addr.eq(Cat(Const(0, lg), Mux(perr, paddr, bh_q.addr)))]

        # ================= table updates (control wins over the paths above) ==================
        with m.If(set_off):
            m.d.sync += off_zero.bit_select(pk.e, 1).eq(0)
        with m.If(inc_placed):
            m.d.sync += land_zero.bit_select(pe, 1).eq(0)
        for i in range(E):                        # the landed port: flip-flops loading land_new
            with m.If(clear | (prog & (sel_e == i))):
                m.d.sync += landed[i].eq(0)
            with m.Elif(inc_placed & (pe == i)):
                m.d.sync += landed[i].eq(land_new)
        with m.If(clear):
            m.d.sync += [valid.eq(0), off_zero.eq((1 << E) - 1), land_zero.eq((1 << E) - 1),
                         err_code.eq(0), err_addr.eq(0)]
        with m.Elif(prog):
            m.d.sync += [valid.bit_select(sel_e, 1).eq(1), off_zero.bit_select(sel_e, 1).eq(1),
                         land_zero.bit_select(sel_e, 1).eq(1)]
        with m.Elif(inval):
            m.d.sync += valid.bit_select(sel_e, 1).eq(0)
        inc_bad_sel = Signal()
        m.d.comb += inc_bad_sel.eq(~clear & ctrl[:2].any() & ~sel_ok)

        # ================= counters and registers =================
        for name, inc in (("passed", inc_passed), ("placed", inc_placed), ("drop_malformed", inc_malformed),
                          ("drop_overrun", inc_overrun), ("axi_err", inc_axi_err), ("bad_sel", inc_bad_sel)):
            c = Signal(32, name=f"n_{name}")
            with m.If(clear):
                m.d.sync += c.eq(0)
            with m.Elif(inc & (c != _M32)):
                m.d.sync += c.eq(c + 1)
            m.d.comb += getattr(regs, name).eq(c)
        off_c, land_c = offs.read_port(domain="comb"), lands.read_port(domain="comb")
        m.d.comb += [off_c.addr.eq(sel_e), land_c.addr.eq(sel_e)]
        busy = Signal()
        m.d.comb += busy.eq(in_pkt | scanning | (info.level != 0) | ~tx.ongoing("IDLE") | (bq.level != 0))
        m.d.comb += [self.busy.eq(busy), regs.status.eq(busy),
                     regs.landed.eq(Mux(sel_ok & ~land_zero.bit_select(sel_e, 1), land_c.data, 0)),
                     regs.offset.eq(Mux(sel_ok & ~off_zero.bit_select(sel_e, 1), off_c.data, 0)),
                     regs.err_code.eq(err_code), regs.err_addr_lo.eq(err_addr[:32]),
                     regs.err_addr_hi.eq(err_addr[32:])]
        return m
