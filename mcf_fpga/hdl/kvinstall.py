"""KV installer: KV install packets from the NIC written straight into the
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
from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.kvinstall import HEADER_BYTES as INSTALL_HEADER_BYTES
from mcf_fpga.spec.kvregion import KVRegion
from mcf_fpga.hdl.bus import AXI4LiteRegisterFile, AXI4LiteSignature, AXI4Signature, Access, PacketSignature, Register
from mcf_fpga.hdl.dma.writer import DMAWriter
from mcf_fpga.hdl.kvinstall_committer import KVInstallCommitter
from mcf_fpga.hdl.kvinstall_receiver import KVInstallReceiver
from mcf_fpga.hdl.kvinstall_writer import KVInstallWriter
from mcf_fpga.hdl.kvpool import DEFAULT_KV_ID_WIDTH, cmd_layout, resp_layout
from mcf_fpga.spec.meta import DEFAULT_PARAMS, MetaParams

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
        kvw = mp.layer_bits + mp.block_bits       # kv_id bits on the wire
        m.submodules.writer = wr = self._writer
        wiring.connect(m, wiring.flipped(self.m_axi), wr.m_axi)
        m.submodules.regs = regs = self._regs
        wiring.connect(m, wiring.flipped(self.csr), regs.bus)
        clear = Signal()
        m.d.comb += clear.eq(regs.clear_wstb & regs.clear)

        # receive: parse, check, buffer records (store and forward)
        m.submodules.receiver = rx = KVInstallReceiver(reg, mp, self.max_payload, self.max_words)
        wiring.connect(m, wiring.flipped(self.s_axis), rx.s_axis)

        # write: look up, one descriptor, the records as bus beats
        m.submodules.write_fsm = wf = KVInstallWriter(
            reg, rx.info_layout, kv_id_width=self.kv_id_width, max_readers=self.max_readers,
            addr_width=self.addr_width, len_width=wr.p.len_width)
        wiring.connect(m, rx.packets, wf.packets)
        wiring.connect(m, rx.records, wf.records)
        wiring.connect(m, wf.desc, wr.desc)
        wiring.connect(m, wf.data, wr.data)
        m.submodules.pend = pend = fifo.SyncFIFOBuffered(width=kvw + 2, depth=wr.p.max_outstanding + 2)
        m.d.comb += [pend.w_data.eq(wf.pend_data), pend.w_en.eq(wf.pend_en), wf.pend_rdy.eq(pend.w_rdy)]

        # status: count, failed-unit set, commit after the last B
        m.submodules.commit_fsm = cf = KVInstallCommitter(
            kv_bits=kvw, kv_id_width=self.kv_id_width, n_slots=reg.n_slots, max_readers=self.max_readers,
            addr_width=self.addr_width, max_failed=self.max_failed)
        wiring.connect(m, wr.status, cf.status)
        m.d.comb += [cf.pend.valid.eq(pend.r_rdy), cf.pend.payload.eq(pend.r_data), pend.r_en.eq(cf.pend.ready),
                     cf.clear.eq(clear)]
        commit_pending = Signal()                   # a unit's last packet is written, not yet committed
        m.d.comb += wf.commit_pending.eq(commit_pending)
        with m.If(wf.unit_last):
            m.d.sync += commit_pending.eq(1)
        with m.If(cf.unit_done):
            m.d.sync += commit_pending.eq(0)

        # directory port: BEGIN_INSTALL / LOOKUP (writer, per packet), COMMIT_* (committer, per unit)
        commit_req = cf.dir_cmd.valid
        m.d.comb += [self.dir_cmd.valid.eq(wf.dir_cmd.valid | commit_req),
                     self.dir_cmd.payload.eq(Mux(commit_req, cf.dir_cmd.payload, wf.dir_cmd.payload)),
                     wf.dir_cmd.ready.eq(self.dir_cmd.ready), cf.dir_cmd.ready.eq(self.dir_cmd.ready),
                     wf.dir_resp.valid.eq(self.dir_resp.valid), cf.dir_resp.valid.eq(self.dir_resp.valid),
                     wf.dir_resp.payload.eq(self.dir_resp.payload), cf.dir_resp.payload.eq(self.dir_resp.payload),
                     self.dir_resp.ready.eq(wf.dir_resp.ready | cf.dir_resp.ready)]

        # ================= counters and registers =================
        for name, inc in (("installed", cf.installed), ("committed", cf.committed),
                          ("drop_state", wf.drop_state), ("drop_malformed", rx.malformed),
                          ("axi_err", cf.axi_err), ("drop_full", wf.drop_full)):
            c = Signal(32, name=f"n_{name}")
            with m.If(clear):
                m.d.sync += c.eq(0)
            with m.Elif(inc & (c != _M32)):
                m.d.sync += c.eq(c + 1)
            m.d.comb += getattr(regs, name).eq(c)
        busy = Signal()
        m.d.comb += busy.eq(rx.busy | wf.busy | (pend.level != 0) | cf.busy | commit_pending)
        m.d.comb += [self.busy.eq(busy), regs.err_addr_lo.eq(cf.err_addr[:32]),
                     regs.err_addr_hi.eq(cf.err_addr[32:] if self.addr_width > 32 else 0),
                     regs.err_code.eq(cf.err_code), regs.status.eq(Cat(busy, cf.overflow))]
        return m
