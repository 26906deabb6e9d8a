"""KV installer (issue #18 step 4): KV install packets from the NIC written straight into the
node's KV region in DDR, the directory entry allocated by the unit's ``first`` packet (or
beforehand by the host) and committed, as a replica or as an owner block, once the unit's bytes
have landed. No host on the data path.

The wire format and the rules (what is dropped, what is written where, when a unit commits,
the failed-unit set) are :mod:`golden.kvinstall`, bit for bit; the region's addresses are
:class:`spec.kvregion.KVRegion`'s; the directory is :class:`hdl.kvpool.KVPool`'s install port.

Contract
--------
* ``s_axis`` (64-bit ``PacketSignature``, header first): the NIC's local-delivery packets that
  are KV installs (the node steers ``op == KV_REPLICA`` here; any other op is malformed). Each
  packet is consumed whole. Store and forward: a packet's records (64-bit words 3.. after the
  16-byte Meta and the 8-byte install header) wait in a buffer of two largest packets until its
  last beat has been checked, so a malformed packet -- including one whose size disagrees with
  ``length`` -- writes nothing. Malformed packets and the rest of a refused packet are drained
  at line rate. ``s_axis`` stalls only while the buffer or the packet queue is full, i.e. only
  because of back-pressure on ``m_axi`` or the directory.
* ``dir_cmd`` / ``dir_resp``: the KV pool's ``cmd_layout`` / ``resp_layout`` (connect to
  ``KVPool(install_port=True)``'s ``icmd`` / ``iresp``). Per well-formed packet one
  ``BEGIN_INSTALL`` (header bit ``first``) or ``LOOKUP`` (rule 2 of :mod:`golden.kvinstall`);
  per committing unit one ``COMMIT_OWNER`` (its last packet's ``owner`` bit) or
  ``COMMIT_INSTALL``. One command in flight at a time; back-pressure on either stream stalls
  the installer (then ``s_axis``), never loses anything.
* ``m_axi``: AXI4 write master (the write channels of a :class:`hdl.dma.writer.DMAWriter`,
  data width ``region.bus_bytes * 8``, all IDs 0): one descriptor ``{slot_addr + row0 *
  row_bytes, n * row_bytes}`` per written packet, its beats are the packet's 64-bit record words
  paired (``bus_bytes / 8`` words per beat). A packet's outcome is the DMA's status, after the
  last B response of its descriptor.
* Commit ordering: a unit's commit is issued only after the status (B responses) of its last
  packet's write; the writes of one master with ID 0 complete in order, so every earlier packet
  of the unit has landed too. After issuing a last packet the installer sends no further
  ``LOOKUP``/``BEGIN_INSTALL`` until that commit is answered, so every one of them sees the
  directory as :mod:`golden.kvinstall` (which applies packets one after another) does.
* ``csr``: AXI4-Lite registers (:func:`registers`): counters (saturating 32-bit), the first
  AXI error's code and address, ``status`` (busy, overflow), ``clear``.
* ``busy``: a packet is being received, queued, looked up, written or awaiting its status or
  commit. After the last packet, ``busy`` falls once the memory and the directory have answered.

The directory entry is made by the unit's ``first`` packet or exists (the host's
``BEGIN_INSTALL``) before a unit without ``first`` arrives; it must not be freed or re-allocated
while the unit is written (the program's rule: it invalidates a replica only after the unit
completed or was abandoned).
"""
from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.kvinstall import HEADER_BYTES as INSTALL_HEADER_BYTES
from mcf_fpga.hdl.kvinstall_header import install_header_layout
from mcf_fpga.spec.kvpool import Opcode, State, Status
from mcf_fpga.spec.kvregion import KVRegion
from mcf_fpga.hdl.bus import AXI4LiteRegisterFile, AXI4LiteSignature, AXI4Signature, Access, PacketSignature, Register
from mcf_fpga.spec.dma import DmaStatus
from mcf_fpga.hdl.dma.writer import DMAWriter
from mcf_fpga.hdl.kvpool import DEFAULT_KV_ID_WIDTH, cmd_layout, resp_layout
from mcf_fpga.spec.meta import DEFAULT_PARAMS, MetaParams, MetaOp
from mcf_fpga.hdl.meta import meta_layout

__all__ = ["KVInstaller", "registers", "REGISTERS"]

_M32 = (1 << 32) - 1


def registers():
    """AXI4-Lite register map (byte offsets)."""
    return [
        Register("installed", 0x00, Access.RO, doc="packets written whose write answered OKAY"),
        Register("committed", 0x04, Access.RO, doc="units committed (COMMIT_INSTALL or COMMIT_OWNER answered OK)"),
        Register("drop_state", 0x08, Access.RO, doc="well-formed packets dropped: no INSTALLING entry to write"),
        Register("drop_malformed", 0x0C, Access.RO, doc="malformed packets dropped"),
        Register("axi_err", 0x10, Access.RO, doc="packets whose write answered SLVERR/DECERR"),
        Register("err_addr_lo", 0x14, Access.RO, doc="first error's failing burst address [31:0]"),
        Register("err_addr_hi", 0x18, Access.RO, doc="[63:32]"),
        Register("err_code", 0x1C, Access.RO, width=4, doc="first error's DmaStatus (4 SLVERR, 5 DECERR); 0 none"),
        Register("status", 0x20, Access.RO, width=2, doc="bit 0 busy, bit 1 overflow (failed-unit set full: no commits)"),
        Register("clear", 0x24, Access.WO, width=1, doc="write 1: counters, error, failed set, overflow := 0"),
        Register("drop_full", 0x28, Access.RO, doc="first packets dropped: BEGIN_INSTALL answered FULL/OUT_OF_RANGE"),
    ]


REGISTERS = registers()


class KVInstaller(wiring.Component):
    """The KV installer (module docstring: contract).

    Parameters
    ----------
    region : spec.kvregion.KVRegion
        The node's KV region (``n_slots`` must be the KV pool's).
    kv_id_width, max_readers : int
        The KV pool's (for the directory port's layouts).
    max_payload : int
        Largest payload accepted (a multiple of 8, at least ``8 + row_bytes``); sets the buffer
        (two packets' records).
    max_burst, max_outstanding, addr_width, id_width : int
        The install DMA's (:class:`spec.dma.DmaParams`).
    max_failed : int
        Entries of the failed-unit set (:mod:`golden.kvinstall`, rule 4).
    meta : spec.meta.MetaParams
        The Meta header's widths.
    """

    def __init__(self, region: KVRegion, *, kv_id_width: int = DEFAULT_KV_ID_WIDTH, max_readers: int = 15,
                 max_payload: int = 2048, max_burst: int = 16, max_outstanding: int = 4, addr_width: int = 40,
                 id_width: int = 4, max_failed: int = 4, meta: MetaParams = DEFAULT_PARAMS):
        if region.bus_bytes < 8:
            raise ValueError(f"region.bus_bytes must be >= 8 (64-bit words pair into beats), got {region.bus_bytes}")
        if max_payload % 8 or not INSTALL_HEADER_BYTES + region.row_bytes <= max_payload <= meta.max_length:
            raise ValueError(f"max_payload must be a multiple of 8 in {INSTALL_HEADER_BYTES + region.row_bytes}.."
                             f"{meta.max_length} (one record of row_bytes={region.row_bytes} + the install header), "
                             f"got {max_payload}")
        if 2 * region.slot_rows > 0xFFFF:
            raise ValueError(f"2 * slot_rows={2 * region.slot_rows} records do not fit the 16-bit row0")
        if not 1 <= max_failed <= 64:
            raise ValueError(f"max_failed must be in 1..64, got {max_failed}")
        if region.end > 2 ** addr_width:
            raise ValueError(f"the region ends at {region.end:#x}, outside the {addr_width}-bit address space")
        self.region, self.meta = region, meta
        self.kv_id_width, self.max_readers = kv_id_width, max_readers
        self.max_payload, self.max_failed = max_payload, max_failed
        self.max_records = (max_payload - INSTALL_HEADER_BYTES) // region.row_bytes
        self.max_words = self.max_records * region.row_bytes // 8
        self.addr_width = addr_width
        self._writer = DMAWriter(addr_width=addr_width, data_width=region.bus_bytes * 8, max_burst=max_burst,
                                 max_outstanding=max_outstanding, id_width=id_width, window_base=region.base,
                                 window_size=region.size, max_length=self.max_records * region.row_bytes)
        self._regs = AXI4LiteRegisterFile(registers(), addr_width=6)
        super().__init__({
            "s_axis": In(PacketSignature(64)),
            "dir_cmd": Out(stream.Signature(cmd_layout(kv_id_width))),
            "dir_resp": In(stream.Signature(resp_layout(region.n_slots, max_readers))),
            "m_axi": Out(AXI4Signature(addr_width, region.bus_bytes * 8, id_width)),
            "csr": In(AXI4LiteSignature(6, 32)),
            "busy": Out(1),
        })

    @property
    def csr_registers(self):
        """The ``Register`` list its AXI-Lite register file decodes (``spec.regmap``)."""
        return self._regs.registers

    def elaborate(self, platform):
        m = Module()
        reg, mp = self.region, self.meta
        hw = mp.header_bytes // 8                 # Meta words; the install header is word hw
        rw = reg.row_bytes // 8                   # 64-bit words per record
        k = reg.bus_bytes // 8                    # words per bus beat
        kvw = mp.layer_bits + mp.block_bits       # kv_id bits on the wire
        max_words = self.max_words
        m.submodules.writer = wr = self._writer
        wiring.connect(m, wiring.flipped(self.m_axi), wr.m_axi)
        m.submodules.regs = regs = self._regs
        wiring.connect(m, wiring.flipped(self.csr), regs.bus)
        clear = Signal()
        m.d.comb += clear.eq(regs.clear_wstb & regs.clear)

        # ================= receive: parse, check, buffer records (store and forward) =========
        info_lay = data.StructLayout({"good": 1, "kv_id": kvw, "row0": 16, "n": 16, "last": 1, "first": 1,
                                      "owner": 1, "words": range(max_words + 1)})
        m.submodules.dbuf = dbuf = fifo.SyncFIFOBuffered(width=64, depth=2 * max_words)
        m.submodules.info = info = fifo.SyncFIFOBuffered(width=info_lay.size, depth=4)
        s = self.s_axis
        beat = s.payload
        fire = s.valid & s.ready
        widx = Signal(range(hw + max_words + 3))  # word index in the packet (saturating)
        in_pkt = Signal()                           # some beat of the packet was taken
        meta_bits = Signal(64 * hw)
        meta = data.View(meta_layout(mp), meta_bits[:meta_layout(mp).size])
        bad, long_ = Signal(), Signal()
        pushed = Signal(range(max_words + 1))
        cur = Signal(info_lay)                      # the packet's fields (from its install header)

        # the install header's verdict, valid on word hw
        h = install_header_layout()(beat.data[:64])
        v_row0, v_n, v_last, v_rsvd = h.row0, h.n, h.last, h["_rsvd"]
        v_bad = Signal()
        m.d.comb += v_bad.eq((meta.op != MetaOp.KV_REPLICA) | (meta.length > self.max_payload) | (v_rsvd != 0)
                             | (v_n == 0) | (v_row0 + v_n > 2 * reg.slot_rows)
                             | (meta.length != INSTALL_HEADER_BYTES + v_n * reg.row_bytes))
        at_hdr = widx == hw
        is_rec = widx > hw
        bad_now = Mux(at_hdr, v_bad, bad)
        expect = Signal(range(max_words + 1))
        m.d.comb += expect.eq(cur.n * rw)
        do_push = Signal()
        m.d.comb += do_push.eq(is_rec & ~bad & (pushed < expect))
        extra = is_rec & ~bad & (pushed >= expect)
        pushed_after = Signal.like(pushed)
        m.d.comb += pushed_after.eq(pushed + do_push)
        good_end = Signal()
        m.d.comb += good_end.eq(is_rec & ~bad & (pushed_after == expect) & ~long_ & ~extra & (beat.keep == 0xFF))
        m.d.comb += s.ready.eq((~do_push | dbuf.w_rdy) & (~beat.last | info.w_rdy))
        m.d.comb += [dbuf.w_data.eq(beat.data), dbuf.w_en.eq(fire & do_push)]
        ipush = data.View(info_lay, info.w_data)
        inc_malformed = Signal()
        with m.If(fire):
            m.d.sync += in_pkt.eq(~beat.last)
            for i in range(hw):
                with m.If(widx == i):
                    m.d.sync += meta_bits[64 * i:64 * (i + 1)].eq(beat.data)
            with m.If(at_hdr):
                m.d.sync += [bad.eq(v_bad), cur.kv_id.eq(meta.kv_id.as_value()), cur.row0.eq(v_row0),
                             cur.n.eq(v_n), cur.last.eq(v_last), cur.first.eq(h.first), cur.owner.eq(h.owner)]
            with m.If(do_push):
                m.d.sync += pushed.eq(pushed + 1)
            with m.If(extra):
                m.d.sync += long_.eq(1)
            with m.If(beat.last):
                m.d.sync += [widx.eq(0), pushed.eq(0), long_.eq(0), bad.eq(0)]
                with m.If(good_end):
                    m.d.comb += [info.w_en.eq(1), ipush.eq(cur), ipush.good.eq(1), ipush.words.eq(expect)]
                with m.Else():
                    m.d.comb += inc_malformed.eq(1)
                    with m.If((pushed_after != 0) & ~bad_now):
                        m.d.comb += [info.w_en.eq(1), ipush.good.eq(0), ipush.words.eq(pushed_after)]
            with m.Elif(widx != hw + max_words + 2):
                m.d.sync += widx.eq(widx + 1)

        # ===== directory port: BEGIN_INSTALL / LOOKUP (per packet), COMMIT_OWNER / COMMIT_INSTALL (per unit) =====
        c_kv, c_owner = Signal(kvw), Signal()
        pk = Signal(info_lay)                       # the packet being written (from the queue)
        lookup_req, commit_req = Signal(), Signal()
        lookup_wait, commit_wait = Signal(), Signal()
        m.d.comb += [self.dir_cmd.valid.eq(lookup_req | commit_req),
                     self.dir_cmd.payload.opcode.eq(
                         Mux(commit_req, Mux(c_owner, Opcode.COMMIT_OWNER, Opcode.COMMIT_INSTALL),
                             Mux(pk.first, Opcode.BEGIN_INSTALL, Opcode.LOOKUP))),
                     self.dir_cmd.payload.kv_id.eq(Mux(commit_req, c_kv, pk.kv_id)),
                     self.dir_resp.ready.eq(lookup_wait | commit_wait)]
        dresp = self.dir_resp.payload
        cmd_fire = self.dir_cmd.valid & self.dir_cmd.ready
        resp_fire = self.dir_resp.valid & self.dir_resp.ready

        # ================= write: look up, one descriptor, the records as bus beats =============
        ihead = data.View(info_lay, info.r_data)
        commit_pending = Signal()
        m.submodules.pend = pend = fifo.SyncFIFOBuffered(width=kvw + 2, depth=wr.p.max_outstanding + 2)
        cnt = Signal(range(max_words + 1))
        addr = Signal(self.addr_width)
        inc_drop_state, inc_drop_full = Signal(), Signal()
        kv_high = (pk.kv_id >> self.kv_id_width) != 0 if kvw > self.kv_id_width else Const(0)
        acc = Signal(64 * max(1, k - 1))
        j = Signal(range(k + 1))
        with m.FSM(name="wr") as wr_fsm:
            with m.State("IDLE"):
                with m.If(info.r_rdy & (~ihead.good | ~commit_pending)):
                    m.d.comb += info.r_en.eq(1)
                    m.d.sync += [pk.eq(ihead), cnt.eq(ihead.words)]
                    with m.If(ihead.good):
                        m.next = "CHECK"
                    with m.Else():
                        m.next = "DRAIN"
            with m.State("CHECK"):
                with m.If(kv_high):              # as the pool would answer: OUT_OF_RANGE / UNKNOWN
                    m.d.comb += [inc_drop_full.eq(pk.first), inc_drop_state.eq(~pk.first)]
                    m.next = "DRAIN"
                with m.Else():
                    m.next = "LOOKUP"
            with m.State("LOOKUP"):
                m.d.comb += lookup_req.eq(1)
                with m.If(cmd_fire):
                    m.next = "LWAIT"
            with m.State("LWAIT"):
                m.d.comb += lookup_wait.eq(1)
                with m.If(resp_fire):
                    # OK: the entry (LOOKUP) or a new one (BEGIN_INSTALL); EXISTS: BEGIN_INSTALL's entry
                    with m.If(((dresp.status == Status.OK) | (dresp.status == Status.EXISTS))
                              & (dresp.state == State.INSTALLING)):
                        m.d.sync += addr.eq(reg.base + dresp.slot * reg.slot_bytes + pk.row0 * reg.row_bytes)
                        m.next = "DESC"
                    with m.Elif(pk.first & ((dresp.status == Status.FULL) | (dresp.status == Status.OUT_OF_RANGE))):
                        m.d.comb += inc_drop_full.eq(1)
                        m.next = "DRAIN"
                    with m.Else():
                        m.d.comb += inc_drop_state.eq(1)
                        m.next = "DRAIN"
            with m.State("DRAIN"):
                m.d.comb += dbuf.r_en.eq(1)
                with m.If(dbuf.r_rdy):
                    m.d.sync += cnt.eq(cnt - 1)
                    with m.If(cnt == 1):
                        m.next = "IDLE"
            with m.State("DESC"):
                m.d.comb += [wr.desc.valid.eq(pend.w_rdy), wr.desc.payload.addr.eq(addr),
                             wr.desc.payload.length.eq(pk.n * reg.row_bytes),
                             pend.w_data.eq(Cat(pk.kv_id, pk.last, pk.owner)),
                             pend.w_en.eq(wr.desc.valid & wr.desc.ready)]
                with m.If(wr.desc.valid & wr.desc.ready):
                    m.d.sync += j.eq(0)
                    with m.If(pk.last):
                        m.d.sync += commit_pending.eq(1)
                    m.next = "DATA"
            with m.State("DATA"):
                wlast = j == k - 1
                m.d.comb += [wr.data.payload.data.eq(Cat(acc, dbuf.r_data) if k > 1 else dbuf.r_data),
                             wr.data.payload.keep.eq(-1), wr.data.payload.last.eq(cnt == 1)]
                with m.If(wlast):
                    m.d.comb += [wr.data.valid.eq(dbuf.r_rdy), dbuf.r_en.eq(wr.data.ready)]
                with m.Else():
                    m.d.comb += dbuf.r_en.eq(1)
                with m.If(dbuf.r_rdy & dbuf.r_en):
                    m.d.sync += cnt.eq(cnt - 1)
                    if k > 1:
                        m.d.sync += [acc.eq(Cat(acc[64:], dbuf.r_data)), j.eq(Mux(wlast, 0, j + 1))]
                    with m.If(cnt == 1):
                        m.next = "IDLE"

        # ================= status: count, failed-unit set, commit after the last B =============
        phead = data.View(data.StructLayout({"kv_id": kvw, "last": 1, "owner": 1}), pend.r_data)
        st = wr.status.payload
        P = self.max_failed
        f_valid = Signal(P)
        f_kv = [Signal(kvw, name=f"failed_kv{i}") for i in range(P)]
        overflow = Signal()
        hit_vec = Signal(P)
        m.d.comb += hit_vec.eq(Cat(f_valid[i] & (f_kv[i] == phead.kv_id) for i in range(P)))
        hit = hit_vec.any()
        free_idx = Signal(range(max(2, P)))
        for i in reversed(range(P)):
            with m.If(~f_valid[i]):
                m.d.comb += free_idx.eq(i)
        f_set, f_clr = Signal(P), Signal(P)
        m.d.sync += f_valid.eq(Mux(clear, 0, (f_valid | f_set) & ~f_clr))
        err_code = Signal(4)
        err_addr = Signal(self.addr_width)
        inc_installed, inc_axi_err, inc_committed = Signal(), Signal(), Signal()
        with m.FSM(name="st") as st_fsm:
            with m.State("IDLE"):
                m.d.comb += wr.status.ready.eq(pend.r_rdy)
                with m.If(wr.status.valid & wr.status.ready):
                    m.d.comb += pend.r_en.eq(1)
                    with m.If(st.code != DmaStatus.OK):
                        m.d.comb += inc_axi_err.eq(1)
                        with m.If(err_code == 0):
                            m.d.sync += [err_code.eq(st.code), err_addr.eq(st.addr)]
                        with m.If(phead.last):
                            m.d.comb += f_clr.eq(hit_vec)
                            m.d.sync += commit_pending.eq(0)
                        with m.Elif(~hit):
                            with m.If(~f_valid.all()):
                                m.d.comb += f_set.eq(Const(1, P) << free_idx)
                            with m.Else():
                                m.d.sync += overflow.eq(1)
                    with m.Else():
                        m.d.comb += inc_installed.eq(1)
                        with m.If(phead.last):
                            with m.If(hit | overflow):
                                m.d.comb += f_clr.eq(hit_vec)
                                m.d.sync += commit_pending.eq(0)
                            with m.Else():
                                m.d.sync += [c_kv.eq(phead.kv_id), c_owner.eq(phead.owner)]
                                m.next = "COMMIT"
            with m.State("COMMIT"):
                m.d.comb += commit_req.eq(1)
                with m.If(cmd_fire):
                    m.next = "CWAIT"
            with m.State("CWAIT"):
                m.d.comb += commit_wait.eq(1)
                with m.If(resp_fire):
                    m.d.comb += inc_committed.eq(dresp.status == Status.OK)
                    m.d.sync += commit_pending.eq(0)
                    m.next = "IDLE"
        for i in range(P):
            with m.If(f_set[i]):
                m.d.sync += f_kv[i].eq(phead.kv_id)

        # ================= counters and registers =================
        counters = {}
        for name, inc in (("installed", inc_installed), ("committed", inc_committed),
                          ("drop_state", inc_drop_state), ("drop_malformed", inc_malformed),
                          ("axi_err", inc_axi_err), ("drop_full", inc_drop_full)):
            c = Signal(32, name=f"n_{name}")
            with m.If(clear):
                m.d.sync += c.eq(0)
            with m.Elif(inc & (c != _M32)):
                m.d.sync += c.eq(c + 1)
            m.d.comb += getattr(regs, name).eq(c)
            counters[name] = c
        with m.If(clear):
            m.d.sync += [err_code.eq(0), err_addr.eq(0), overflow.eq(0)]
        busy = Signal()
        m.d.comb += busy.eq(in_pkt | (info.level != 0) | ~wr_fsm.ongoing("IDLE") | (pend.level != 0)
                            | ~st_fsm.ongoing("IDLE") | commit_pending)
        m.d.comb += [self.busy.eq(busy), regs.err_addr_lo.eq(err_addr[:32]),
                     regs.err_addr_hi.eq(err_addr[32:] if self.addr_width > 32 else 0),
                     regs.err_code.eq(err_code), regs.status.eq(Cat(busy, overflow))]
        return m
