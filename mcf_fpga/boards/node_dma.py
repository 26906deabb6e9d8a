"""DMA front-end of the node on the KR260: the node's harness streams as DMA engines on the
PS HP ports, controlled through an AXI-Lite register window (docs/boards.md, "Node top").

Engines (``hdl.dma``; 128-bit AXI4, 40-bit addresses, bursts of at most ``max_burst`` beats):

====  ==========  ======================  =====================================================
hp    channel     engine                  node stream
====  ==========  ======================  =====================================================
0     read        DMAReader ``cmd``       ``s_axis_cmd``: one instruction per ``cmd_bytes`` record
0     write       DMAWriter ``rx``        ``m_axis_rx``: received packets into the RX ring
1     read        DMAReader ``sp_in``     ``s_axis_sp``: 32-bit words, word j at bytes 4j..4j+3 (two a
                                          beat with ``sp_pairs``)
1     write       DMAWriter ``sp_out``    ``m_axis_sp``: 32-bit words, packed the same way
2     read        DMAReader ``w``         ``s_axis_w``: one weight tile per descriptor (with
                                          ``w_lanes`` > 1: lane 0 of a ``StripedReader``)
hpc0  read        ``w`` lane 1            ``w_lanes`` >= 2: weight beats 1, 1 + L, ... of a tile
hpc1  read        ``w`` lane 2            ``w_lanes`` = 3: weight beats 2, 2 + L, ...
2     write       (the node's installer)  ``kvin`` passed through (``kv_install`` only): the KV
                                          installer's AW/W/B (node ``m_axi_kvin``)
====  ==========  ======================  =====================================================

A fetching node (``fetch=True``, ``NodeConfig.fetcher``, docs/cmdstream.md) reads its command
stream and its data itself: the ``cmd``, ``sp_in`` and ``w`` readers are not built, and the read
channels of HP0 and HP2 carry the node's command fetcher (``fcmd``, node ``m_axi_cmd``) and stream
loader (``fload``, node ``m_axi_load``) instead; HP1's read channel is idle. Why not keep the
readers beside them: in a fetched run the host feeds none of those streams (instructions come from
the command stream, weights, prompt rows and run-time words from the node's image through the
loader), so they would only cost logic and an AXI read arbiter on HP0 and HP2, and a host beat
mixed into a fetched stream is an error anyway. Their register blocks keep their offsets: every
``GO`` is refused at once (``Reject.NO_ENGINE``, ``REJECTED`` += 1), nothing is posted, nothing
waits; ``ENGINES`` (bit e: engine e is built) tells the host which engines exist.

In-memory formats (all little-endian; a "word" is 16 bytes = one HP beat):

* command record: ``cmd_bytes`` = 16 * ceil(cmd_bits / 128) bytes; bit i of the instruction
  (``hdl.compute.engine.INSTR``, bit 0 = first field) is bit i of the record read as one
  little-endian integer; the bits above ``cmd_bits`` are ignored.
* weight beat: ``w_beat_bytes`` = 16 * ceil(w_bits / 128) bytes, same bit order; a descriptor
  covers exactly one tile (``hdl.compute.gemm`` format) and the tile's last beat is the
  descriptor's last beat (``last``). The reader streams straight into the engine: the GEMM's
  own ping-pong weight buffer is the node's double buffer (a second one here would only
  cost BRAM), and back-pressure from it holds RREADY. A descriptor longer than
  ``W_TILE_BYTES`` (the largest tile) is refused with ``TOO_LONG``.
* scratchpad words (in and out): int32/uint32 little-endian, 4 per HP beat. ``sp_in``:
  ``LENGTH`` is 4 * n bytes for n words (any n >= 1; the address 16-aligned); the engine
  reads ceil(n/4) beats and exactly n words enter ``s_axis_sp`` (the node's scratchpad
  stream has no framing, so a padding word would be taken by the next ``SPW``). ``sp_out``:
  an ``SPR`` of n words writes ceil(n/4) beats (bytes past 4n untouched) and needs a
  descriptor of 16 * ceil(n/4) bytes.
* RX ring record (``rx_slot_bytes`` apart, slot s at ``RX_BASE + s * rx_slot_bytes``): bytes
  0..3 packet length in bytes, 4..7 flags (bit 0: truncated to the slot), 8..11 record
  sequence number (0, 1, ... since the last ``RX_SLOTS`` write), 12..15 zero, then the
  packet bytes (16-byte Meta header first, as on ``m_axis_rx``).

Descriptor registers per engine (``ENGINES``: base ``0x100 + 0x40 * e``, offsets
:data:`ENGINE_REGS`): ``ADDR_LO/HI``, ``LENGTH`` (bytes), a write to ``GO`` posts
``{ADDR, LENGTH}`` to the engine's queue (``desc_depth`` deep). A post is *rejected* at once
(``REJECTED`` += 1, ``CODE`` bits 11..8 = the reason) when the queue is full (``QUEUE_FULL``)
or ``LENGTH`` is not a multiple of the engine's record size (``BAD_RECORD``: cmd records, weight
beats, 4-byte ``sp_in`` words; ``sp_out`` lengths are checked by its engine); otherwise
``POSTED`` += 1. The engine answers every posted descriptor in order: ``DONE`` += 1,
``CODE`` bits 3..0 = its ``spec.dma.DmaStatus`` (zero length, misaligned, out of the window,
longer than the largest weight tile, bus errors), ``ST_ADDR_LO/HI`` = its status address,
``ERRORS`` += 1 if the code is not OK. An illegal descriptor never reaches the bus; nothing
waits on it. The host waits until ``DONE == POSTED``.

RX ring (:data:`RX_REGS` at 0x200): ``RX_BASE_LO/HI``, ``RX_SLOTS`` (writing it restarts the
ring: sequence, ``RX_WP`` and the slot index go to 0), ``RX_RP`` (the host's read count),
``RX_WP`` (records completely written: B response seen). A record is written only while
``issued - RX_RP < RX_SLOTS``; a full ring back-pressures ``m_axis_rx`` (the NIC). While
``RX_SLOTS`` = 0 received packets are dropped and counted (``RX_DROPPED``). Packets are
stored and forwarded (the length goes in front): a packet longer than the slot is cut and
flagged.

KV pool (:data:`KV_REGS` at 0x280): write the command bits to ``KV_CMD_LO/HI``, then
``KV_GO`` (rejected and counted in ``KV_REJECTED`` when the 4-deep queue is full);
``KV_RESP`` reads bit 31 = valid, low bits = the ``resp_layout`` bits, and a read of a
valid response pops it.

KV pool events (:data:`KV_EV_REGS` at 0x298, ``kv_install`` only): the node's ``m_axis_kvevent``
(``hdl.kvpool.event_layout`` bits). ``KV_EV_CTRL`` bit 0 = 1 keeps them in an 8-deep queue,
losslessly (a full queue stalls the pool, hence every KV command port, until the host reads);
0 (reset) discards them (counted in ``KV_EV_DISCARDED``), so a host that does not replay events
never stalls the node. ``KV_EV_STATUS`` bit 0 = an event waits, bits 8..15 = events queued;
``KV_EV_W0..W2`` = its bits 0..31, 32..63, 64..95; a write of 1 to ``KV_EV_POP`` drops it.

Back-pressure: every node-side stream follows the ``lib.stream`` contract; the engines
stall, never drop (except RX packets while the ring is unconfigured, counted).
"""
from amaranth import Module, Signal, Cat, Mux, Const
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import AXI4LiteSignature, AXI4LiteRegisterFile, AXI4Signature, Access, PacketSignature, Register
from mcf_fpga.hdl.dma import DMAReader, DMAWriter
from mcf_fpga.spec.dma import DmaParams, DmaStatus
from mcf_fpga.hdl.dma.common import descriptor_check, descriptor_layout
from mcf_fpga.hdl.host_sp import host_sp_layout
from .striped_reader import StripedReader

__all__ = ["NodeDMA", "DMA_ID", "ENGINES", "FETCHED_ENGINES", "ENGINE_REGS", "RX_REGS", "KV_REGS", "KV_EV_REGS", "INFO_REGS",
           "Reject", "engine_offset", "rx_slot_bytes"]

DMA_ID = 0x4D434644     # "MCFD"
HP_BYTES = 16


class Reject:
    """Codes of a refused ``GO`` (``CODE`` bits 11..8); 0 = the last post was accepted."""
    NONE = 0
    QUEUE_FULL = 8      #: the engine's descriptor queue is full
    BAD_RECORD = 9      #: LENGTH is not a multiple of the engine's record size
    NO_ENGINE = 10      #: the engine is not built (a fetching node: ``NodeDMA(fetch=True)``)


#: engine name -> index e (register block at 0x100 + 0x40 * e)
ENGINES = {"cmd": 0, "sp_in": 1, "w": 2, "sp_out": 3}
#: per-engine register offsets (inside the engine block)
ENGINE_REGS = {"addr_lo": 0x00, "addr_hi": 0x04, "length": 0x08, "go": 0x0C, "posted": 0x10,
               "done": 0x14, "errors": 0x18, "code": 0x1C, "st_addr_lo": 0x20, "st_addr_hi": 0x24,
               "rejected": 0x28}
INFO_REGS = {"id": 0x00, "cmd_bytes": 0x04, "w_beat_bytes": 0x08, "rx_slot_bytes": 0x0C,
             "w_tile_bytes": 0x10, "engines": 0x14}
#: engines a fetching node's front-end does not build (the fetcher and the loader read for them)
FETCHED_ENGINES = ("cmd", "sp_in", "w")
RX_REGS = {"rx_base_lo": 0x200, "rx_base_hi": 0x204, "rx_slots": 0x208, "rx_rp": 0x20C,
           "rx_wp": 0x210, "rx_dropped": 0x214, "rx_errors": 0x218, "rx_code": 0x21C}
KV_REGS = {"kv_cmd_lo": 0x280, "kv_cmd_hi": 0x284, "kv_go": 0x288, "kv_resp": 0x28C,
           "kv_posted": 0x290, "kv_rejected": 0x294}
#: KV pool event registers (``kv_install`` only)
KV_EV_REGS = {"kv_ev_ctrl": 0x298, "kv_ev_status": 0x29C, "kv_ev_w0": 0x2A0, "kv_ev_w1": 0x2A4,
              "kv_ev_w2": 0x2A8, "kv_ev_pop": 0x2AC, "kv_ev_discarded": 0x2B0}
KV_EV_DEPTH = 8


def engine_offset(name: str, reg: str) -> int:
    """Byte offset (in the DMA window) of register ``reg`` of engine ``name``."""
    return 0x100 + 0x40 * ENGINES[name] + ENGINE_REGS[reg]


def _words(bits):
    return -(-bits // 128)


def rx_slot_bytes(max_packet: int) -> int:
    """Bytes per RX ring slot: the 16-byte record header plus the packet rounded to 16."""
    return HP_BYTES + -(-max_packet // HP_BYTES) * HP_BYTES


def _registers(addr_hi_bits, kv_cmd_bits, kv_event_bits=0):
    regs = [Register("id", INFO_REGS["id"], Access.RO),
            Register("cmd_bytes", INFO_REGS["cmd_bytes"], Access.RO),
            Register("w_beat_bytes", INFO_REGS["w_beat_bytes"], Access.RO),
            Register("rx_slot_bytes", INFO_REGS["rx_slot_bytes"], Access.RO),
            Register("w_tile_bytes", INFO_REGS["w_tile_bytes"], Access.RO),
            Register("engines", INFO_REGS["engines"], Access.RO, width=len(ENGINES))]
    for e in ENGINES:
        o = lambda r: engine_offset(e, r)
        regs += [Register(f"{e}_addr_lo", o("addr_lo")),
                 Register(f"{e}_addr_hi", o("addr_hi"), width=addr_hi_bits),
                 Register(f"{e}_length", o("length")),
                 Register(f"{e}_go", o("go"), Access.WO, width=1)]
        regs += [Register(f"{e}_{r}", o(r), Access.RO)
                 for r in ("posted", "done", "errors", "code", "st_addr_lo", "st_addr_hi", "rejected")]
    regs += [Register("rx_base_lo", RX_REGS["rx_base_lo"]),
             Register("rx_base_hi", RX_REGS["rx_base_hi"], width=addr_hi_bits),
             Register("rx_slots", RX_REGS["rx_slots"], width=16),
             Register("rx_rp", RX_REGS["rx_rp"])]
    regs += [Register(r, RX_REGS[r], Access.RO) for r in ("rx_wp", "rx_dropped", "rx_errors", "rx_code")]
    regs += [Register("kv_cmd_lo", KV_REGS["kv_cmd_lo"], width=min(32, kv_cmd_bits)),
             Register("kv_go", KV_REGS["kv_go"], Access.WO, width=1),
             Register("kv_resp", KV_REGS["kv_resp"], Access.RO),
             Register("kv_posted", KV_REGS["kv_posted"], Access.RO),
             Register("kv_rejected", KV_REGS["kv_rejected"], Access.RO)]
    if kv_cmd_bits > 32:
        regs.append(Register("kv_cmd_hi", KV_REGS["kv_cmd_hi"], width=kv_cmd_bits - 32))
    if kv_event_bits:
        regs += [Register("kv_ev_ctrl", KV_EV_REGS["kv_ev_ctrl"], width=1),
                 Register("kv_ev_pop", KV_EV_REGS["kv_ev_pop"], Access.WO, width=1)]
        regs += [Register(r, KV_EV_REGS[r], Access.RO)
                 for r in ("kv_ev_status", "kv_ev_w0", "kv_ev_w1", "kv_ev_w2", "kv_ev_discarded")]
    return regs


class NodeDMA(wiring.Component):
    """DMA front-end (see the module docstring for formats and registers).

    Parameters
    ----------
    cmd_bits, w_bits : int
        Widths of the node's ``s_axis_cmd`` and ``s_axis_w`` data.
    w_tile_words : int
        HP beats of the largest weight tile (longer ``w`` descriptors are refused).
    max_packet : int
        Largest packet on ``m_axis_rx`` in bytes (Meta header + NIC max payload).
    kv_cmd_bits, kv_resp_bits : int
        Widths of the KV pool's command / response words (``kv_resp_bits`` <= 31).
    addr_width, max_burst, max_outstanding, window_base, window_size :
        Of every engine (``spec.dma.DmaParams``); descriptors outside the window are refused.
    desc_depth : int
        Posted descriptors queued per engine.
    kv_install : bool
        The node has the NIC install path (``NodeConfig.kv_install``): add ``kvin`` (an AXI4
        slave; its write channels leave on ``m_axi_hp2``, its read channels are not served) and
        ``kvevent`` (``kv_event_bits`` wide, at most 96) with the event registers.
    fetch : bool
        The node fetches its commands and data (``NodeConfig.fetcher``): no ``cmd``, ``sp_in``,
        ``w`` readers (:data:`FETCHED_ENGINES`; their ``GO`` is refused with ``NO_ENGINE``, their
        streams never offer a beat); ``fcmd`` and ``fload`` (AXI4 slaves) pass the node's command
        fetcher's and stream loader's read channels to ``m_axi_hp0`` and ``m_axi_hp2`` (their
        write channels are not served).

    w_lanes : int
        1 (default): the ``w`` engine is one ``DMAReader`` on HP2. 2 or 3: a
        ``boards.striped_reader.StripedReader`` whose weight beat k of a tile is read on lane
        ``k mod w_lanes`` (HP2, ``m_axi_hpc0``, ``m_axi_hpc1``) and merged in order into
        ``s_axis_w``: the same tiles, statuses and registers at up to ``w_lanes`` x 16 B/cycle.
        Not with ``fetch`` (the weights come through the node's loader then).
    sp_pairs : bool
        ``sp_in`` carries one or two words a beat (``hdl.host_sp``), for a node whose engine has
        ``spw_pairs``: a descriptor's words two a beat from its first, its last beat one word when
        it holds an odd count.

    Members: ``s_axi`` (12-bit AXI-Lite slave), ``m_axi_hp0..2`` (AXI4 masters), and the
    node-side streams ``cmd``, ``w``, ``sp_in`` (out) and ``sp_out``, ``rx``, ``kvresp`` (in),
    ``kvcmd`` (out), shaped like the node's ports they connect to; with ``kv_install`` also
    ``kvin`` and ``kvevent`` (in); with ``fetch`` also ``fcmd`` and ``fload`` (in).
    """

    def __init__(self, *, cmd_bits, w_bits, w_tile_words, max_packet, kv_cmd_bits, kv_resp_bits,
                 addr_width=40, max_burst=16, max_outstanding=4, window_base=0, window_size=None,
                 desc_depth=4, kv_install=False, kv_event_bits=0, fetch=False, w_lanes=1, sp_pairs=False):
        if cmd_bits % 8 or cmd_bits < 8:
            raise ValueError(f"NodeDMA cmd_bits must be a positive multiple of 8, got {cmd_bits}")
        if w_bits % 8 or w_bits < 8:
            raise ValueError(f"NodeDMA w_bits must be a positive multiple of 8, got {w_bits}")
        ww = _words(w_bits)
        if ww & (ww - 1):
            raise ValueError(f"NodeDMA w_bits: a weight beat must be a power-of-two number of "
                             f"16-byte words, got {w_bits} bits = {ww} words")
        cw = _words(cmd_bits)
        if cw & (cw - 1):
            raise ValueError(f"NodeDMA cmd_bits: an instruction must be a power-of-two number of "
                             f"16-byte words, got {cmd_bits} bits = {cw} words")
        if not 1 <= max_packet <= 65535:
            raise ValueError(f"NodeDMA max_packet must be in 1..65535, got {max_packet}")
        if not 1 <= kv_resp_bits <= 31:
            raise ValueError(f"NodeDMA kv_resp_bits must be in 1..31, got {kv_resp_bits}")
        if not 1 <= kv_cmd_bits <= 64:
            raise ValueError(f"NodeDMA kv_cmd_bits must be in 1..64, got {kv_cmd_bits}")
        if not 2 <= desc_depth <= 256:
            raise ValueError(f"NodeDMA desc_depth must be in 2..256, got {desc_depth}")
        if not 33 <= addr_width <= 49:
            raise ValueError(f"NodeDMA addr_width must be in 33..49 (HP ports), got {addr_width}")
        if kv_install and not 1 <= kv_event_bits <= 96:
            raise ValueError(f"NodeDMA kv_event_bits must be in 1..96 with kv_install, got {kv_event_bits}")
        if not kv_install and kv_event_bits:
            raise ValueError("NodeDMA kv_event_bits is a parameter of kv_install=True only")
        if not isinstance(fetch, bool):
            raise ValueError(f"NodeDMA fetch must be a bool, got {fetch!r}")
        self.kv_install, self.kv_event_bits = bool(kv_install), kv_event_bits if kv_install else 0
        if w_lanes not in (1, 2, 3) or (fetch and w_lanes != 1):
            raise ValueError(f"NodeDMA w_lanes must be 1, 2 or 3 (HP2, HPC0, HPC1), and 1 with fetch, got {w_lanes!r}")
        if not isinstance(sp_pairs, bool):
            raise ValueError(f"NodeDMA sp_pairs must be a bool, got {sp_pairs!r}")
        self.fetch, self.w_lanes, self.sp_pairs = fetch, w_lanes, sp_pairs
        self.built = tuple(e for e in ENGINES if not (fetch and e in FETCHED_ENGINES))
        self.cmd_bits, self.w_bits, self.w_tile_words = cmd_bits, w_bits, w_tile_words
        self.w_tile_bytes = w_tile_words * HP_BYTES
        self.cmd_words, self.w_words = cw, ww
        self.max_packet, self.slot_bytes = max_packet, rx_slot_bytes(max_packet)
        self.kv_cmd_bits, self.kv_resp_bits, self.desc_depth = kv_cmd_bits, kv_resp_bits, desc_depth
        self.dma = dict(addr_width=addr_width, data_width=128, max_burst=max_burst,
                        max_outstanding=max_outstanding, window_base=window_base,
                        window_size=window_size)
        DmaParams(**self.dma, max_length=self.w_tile_bytes)      # validates the parameters
        hp = AXI4Signature(addr_width, 128, 4)
        members = {} if not kv_install else {"kvin": In(hp), "kvevent": In(stream.Signature(kv_event_bits))}
        if fetch:
            members.update(fcmd=In(hp), fload=In(hp))
        members.update({f"m_axi_hpc{i}": Out(hp) for i in range(w_lanes - 1)})
        super().__init__({
            **members,
            "s_axi": In(AXI4LiteSignature(12, 32)),
            "m_axi_hp0": Out(hp), "m_axi_hp1": Out(hp), "m_axi_hp2": Out(hp),
            "cmd": Out(stream.Signature(cmd_bits)),
            "w": Out(stream.Signature(data.StructLayout({"data": w_bits, "last": 1}))),
            "sp_in": Out(stream.Signature(host_sp_layout(self.sp_pairs))),
            "sp_out": In(stream.Signature(data.StructLayout({"data": 32, "last": 1}))),
            "rx": In(PacketSignature(64)),
            "kvcmd": Out(stream.Signature(kv_cmd_bits)),
            "kvresp": In(stream.Signature(kv_resp_bits)),
        })

    # ------------------------------------------------------------------ helpers
    def _post(self, m, regs, name, desc, status, record_bytes):
        """GO -> check -> queue -> ``desc``; ``status`` -> counters."""
        aw = self.dma["addr_width"]
        r = lambda n: getattr(regs, f"{name}_{n}")
        q = fifo.SyncFIFOBuffered(width=aw + 32, depth=self.desc_depth)
        m.submodules[f"{name}_q"] = q
        addr = Cat(r("addr_lo"), r("addr_hi"))[:aw]
        length = r("length")
        bad_rec = Const(0) if record_bytes == HP_BYTES else (length[:(record_bytes - 1).bit_length()] != 0)
        posted, rejected, done, errors = (Signal(32, name=f"{name}_{n}_cnt")
                                          for n in ("posted", "rejected", "done", "errors"))
        rej_code, st_code = Signal(4, name=f"{name}_rej"), Signal(4, name=f"{name}_st")
        st_addr = Signal(aw, name=f"{name}_st_addr")
        with m.If(r("go_wstb")):
            with m.If(bad_rec):
                m.d.sync += [rej_code.eq(Reject.BAD_RECORD), rejected.eq(rejected + 1)]
            with m.Elif(~q.w_rdy):
                m.d.sync += [rej_code.eq(Reject.QUEUE_FULL), rejected.eq(rejected + 1)]
            with m.Else():
                m.d.comb += [q.w_en.eq(1), q.w_data.eq(Cat(addr, length))]
                m.d.sync += [rej_code.eq(Reject.NONE), posted.eq(posted + 1)]
        m.d.comb += [desc.valid.eq(q.r_rdy), q.r_en.eq(desc.ready),
                     desc.payload.addr.eq(q.r_data[:aw]), desc.payload.length.eq(q.r_data[aw:])]
        m.d.comb += status.ready.eq(1)
        with m.If(status.valid):
            m.d.sync += [done.eq(done + 1), st_code.eq(status.payload.code),
                         st_addr.eq(status.payload.addr)]
            with m.If(status.payload.code != DmaStatus.OK):
                m.d.sync += errors.eq(errors + 1)
        m.d.comb += [r("posted").eq(posted), r("rejected").eq(rejected), r("done").eq(done),
                     r("errors").eq(errors), r("code").eq(st_code | rej_code << 8),
                     r("st_addr_lo").eq(st_addr[:32]), r("st_addr_hi").eq(st_addr[32:])]

    @staticmethod
    def _absent(m, regs, name):
        """Registers of an engine that is not built: every ``GO`` refused (``NO_ENGINE``)."""
        r = lambda n: getattr(regs, f"{name}_{n}")
        rejected = Signal(32, name=f"{name}_rejected_cnt")
        refused = Signal(name=f"{name}_refused")
        with m.If(r("go_wstb")):
            m.d.sync += [rejected.eq(rejected + 1), refused.eq(1)]
        m.d.comb += [r("rejected").eq(rejected), r("code").eq(Mux(refused, Reject.NO_ENGINE << 8, 0))]

    @staticmethod
    def _hp(m, hp, reader_axi=None, writer_axi=None):
        """One HP master from a reader's read channels and a writer's write channels."""
        if reader_axi is not None:
            wiring.connect(m, wiring.flipped(hp.ar), reader_axi.ar)
            wiring.connect(m, reader_axi.r, wiring.flipped(hp.r))
        else:
            m.d.comb += hp.r.ready.eq(1)
        if writer_axi is not None:
            wiring.connect(m, wiring.flipped(hp.aw), writer_axi.aw)
            wiring.connect(m, wiring.flipped(hp.w), writer_axi.w)
            wiring.connect(m, writer_axi.b, wiring.flipped(hp.b))
        else:
            m.d.comb += hp.b.ready.eq(1)

    @property
    def csr_registers(self):
        """The ``Register`` list its AXI-Lite register file decodes (``spec.regmap``)."""
        return _registers(self.dma["addr_width"] - 32, self.kv_cmd_bits, self.kv_event_bits)

    # ------------------------------------------------------------------ elaborate
    def elaborate(self, platform):
        m = Module()
        aw = self.dma["addr_width"]
        m.submodules.regs = regs = AXI4LiteRegisterFile(self.csr_registers,
                                                        addr_width=12)
        wiring.connect(m, wiring.flipped(self.s_axi), regs.bus)
        m.d.comb += [regs.id.eq(DMA_ID), regs.cmd_bytes.eq(self.cmd_words * HP_BYTES),
                     regs.w_beat_bytes.eq(self.w_words * HP_BYTES),
                     regs.rx_slot_bytes.eq(self.slot_bytes),
                     regs.w_tile_bytes.eq(self.w_tile_bytes),
                     regs.engines.eq(sum(1 << ENGINES[e] for e in self.built))]

        m.submodules.wr_sp = wr_sp = DMAWriter(**self.dma)
        m.submodules.wr_rx = wr_rx = DMAWriter(**self.dma)
        kvin = wiring.flipped(self.kvin) if self.kv_install else None
        if self.kv_install:                   # the installer's read channels are never served
            m.d.comb += [self.kvin.ar.ready.eq(0), self.kvin.r.valid.eq(0)]
        if self.fetch:                        # the fetcher and the loader read for the node
            self._hp(m, self.m_axi_hp0, wiring.flipped(self.fcmd), wr_rx.m_axi)
            self._hp(m, self.m_axi_hp1, None, wr_sp.m_axi)
            self._hp(m, self.m_axi_hp2, wiring.flipped(self.fload), kvin)
            for p in (self.fcmd, self.fload):  # their write channels are never served
                m.d.comb += [p.aw.ready.eq(0), p.w.ready.eq(0), p.b.valid.eq(0)]
            for e in FETCHED_ENGINES:
                self._absent(m, regs, e)
            m.d.comb += [self.cmd.valid.eq(0), self.w.valid.eq(0), self.sp_in.valid.eq(0)]
        else:
            m.submodules.rd_cmd = rd_cmd = DMAReader(**self.dma)
            m.submodules.rd_sp = rd_sp = DMAReader(**self.dma)
            if self.w_lanes == 1:
                m.submodules.rd_w = rd_w = DMAReader(**self.dma, max_length=self.w_tile_bytes)
                w_axi = rd_w.m_axi
            else:                              # weight beats striped over HP2, HPC0, HPC1
                m.submodules.rd_w = rd_w = StripedReader(lanes=self.w_lanes, stripe_bytes=self.w_words * HP_BYTES,
                                                         **self.dma, max_length=self.w_tile_bytes)
                w_axi = rd_w.m_axi0
                for i in range(1, self.w_lanes):
                    self._hp(m, getattr(self, f"m_axi_hpc{i - 1}"), getattr(rd_w, f"m_axi{i}"), None)
            self._hp(m, self.m_axi_hp0, rd_cmd.m_axi, wr_rx.m_axi)
            self._hp(m, self.m_axi_hp1, rd_sp.m_axi, wr_sp.m_axi)
            self._hp(m, self.m_axi_hp2, w_axi, kvin)
            self._post(m, regs, "cmd", rd_cmd.desc, rd_cmd.status, self.cmd_words * HP_BYTES)
            sp_desc = stream.Signature(descriptor_layout(aw, 32)).create(path=("sp_in_desc",))
            sp_tail = self._words_desc(m, sp_desc, rd_sp.desc)
            self._post(m, regs, "sp_in", sp_desc, rd_sp.status, 4)
            self._post(m, regs, "w", rd_w.desc, rd_w.status, self.w_words * HP_BYTES)
            # ---- commands: cmd_words HP beats -> one instruction
            self._gather(m, rd_cmd.data, self.cmd, self.cmd_words, with_last=False)
            # ---- weights: w_words HP beats -> one weight beat, last = the descriptor's last beat
            if self.w_lanes == 1:
                self._gather(m, rd_w.data, self.w, self.w_words, with_last=True)
            else:                              # the striped reader's beats are whole weight beats
                m.d.comb += [self.w.valid.eq(rd_w.data.valid), rd_w.data.ready.eq(self.w.ready),
                             self.w.payload.data.eq(rd_w.data.payload.data[:self.w_bits]),
                             self.w.payload.last.eq(rd_w.data.payload.last)]
            # ---- scratchpad in: one HP beat -> 4 words (two a beat with sp_pairs)
            self._split(m, rd_sp.data, self.sp_in, sp_tail, self.sp_pairs)
        self._post(m, regs, "sp_out", wr_sp.desc, wr_sp.status, HP_BYTES)
        # ---- scratchpad out: words -> HP beats (keep per word)
        sp_pk = self._pack(m, self.sp_out, 32, "sp_pack")
        wiring.connect(m, sp_pk, wr_sp.data)
        # ---- RX ring
        self._rx_ring(m, regs, wr_rx)
        # ---- KV pool
        self._kv(m, regs)
        if self.kv_install:
            self._kv_events(m, regs)
        return m

    def _kv_events(self, m, regs):
        """``kvevent`` -> queue (``KV_EV_CTRL`` = 1) or discarded and counted (0) -> KV_EV_* registers."""
        m.submodules.kv_evq = q = fifo.SyncFIFOBuffered(width=self.kv_event_bits, depth=KV_EV_DEPTH)
        ev, keep = self.kvevent, regs.kv_ev_ctrl[0]
        discarded = Signal(32)
        m.d.comb += [q.w_data.eq(ev.payload), q.w_en.eq(ev.valid & keep),
                     ev.ready.eq(Mux(keep, q.w_rdy, 1))]
        with m.If(ev.valid & ~keep):
            m.d.sync += discarded.eq(discarded + 1)
        bits = Cat(q.r_data, Const(0, 96 - self.kv_event_bits))
        m.d.comb += [regs.kv_ev_status.eq(Cat(q.r_rdy, Const(0, 7), q.level)),
                     regs.kv_ev_w0.eq(bits[:32]), regs.kv_ev_w1.eq(bits[32:64]), regs.kv_ev_w2.eq(bits[64:]),
                     q.r_en.eq(regs.kv_ev_pop_wstb & regs.kv_ev_pop & q.r_rdy),
                     regs.kv_ev_discarded.eq(discarded)]

    def _gather(self, m, src, dst, n, with_last):
        """``n`` HP beats of ``src`` (a packet stream) -> one ``dst`` beat (bit 0 = first byte)."""
        width = n * 128
        buf = Signal(width, name=f"gather{width}_{id(dst) & 0xffff}")
        cnt = Signal(range(n + 1))
        full, last = Signal(), Signal()
        payload = buf[:len(dst.payload.data)] if with_last else buf[:len(dst.payload)]
        if with_last:
            m.d.comb += [dst.payload.data.eq(payload), dst.payload.last.eq(last)]
        else:
            m.d.comb += dst.payload.eq(payload)
        m.d.comb += [dst.valid.eq(full), src.ready.eq(~full)]
        with m.If(dst.valid & dst.ready):
            m.d.sync += [full.eq(0), cnt.eq(0)]
        with m.If(src.valid & src.ready):
            if n == 1:
                m.d.sync += buf.eq(src.payload.data)
            else:
                with m.Switch(cnt):
                    for k in range(n):
                        with m.Case(k):
                            m.d.sync += buf[128 * k:128 * (k + 1)].eq(src.payload.data)
            m.d.sync += [cnt.eq(cnt + 1), last.eq(src.payload.last)]
            with m.If((cnt == n - 1) | src.payload.last):
                m.d.sync += full.eq(1)

    def _words_desc(self, m, src, dst):
        """A word-granular descriptor (``LENGTH`` = 4 * n) -> the reader's whole-beat descriptor
        (length rounded up to 16). Returns a FIFO of the words in the last beat (n mod 4, 0 = 4)
        of every descriptor that will produce a packet (``hdl.dma.common.descriptor_check`` OK,
        the reader's own rule), for :meth:`_split`. Refused descriptors only get a status."""
        p = DmaParams(**self.dma)
        depth = p.max_outstanding + 2         # packets the reader can be behind its descriptors
        m.submodules.sp_in_tail = tail = fifo.SyncFIFO(width=2, depth=depth)
        whole = Signal(32, name="sp_in_whole")
        m.d.comb += whole.eq(Cat(Const(0, 4), (src.payload.length + 15)[4:32]))  # 0 (refused) near 2**32
        ok = descriptor_check(m, p, src.payload.addr, whole) == DmaStatus.OK
        m.d.comb += [dst.valid.eq(src.valid & tail.w_rdy), src.ready.eq(dst.ready & tail.w_rdy),
                     dst.payload.addr.eq(src.payload.addr), dst.payload.length.eq(whole),
                     tail.w_data.eq(src.payload.length[2:4]),
                     tail.w_en.eq(dst.valid & dst.ready & ok)]
        return tail

    @staticmethod
    def _split(m, src, dst, tail, pairs):
        """One HP beat of ``src`` -> its 4 32-bit words on ``dst`` (word j = bytes 4j..4j+3), one a
        beat, or with ``pairs`` two (``hdl.host_sp``: words 2h, 2h + 1; ``keep`` 0x0f when only word
        2h is left); the packet's last beat gives only the words ``tail`` (head of the FIFO) says,
        then pops it."""
        end = Signal(2)                                    # last word of the beat
        m.d.comb += end.eq(Mux(src.payload.last, (tail.r_data - 1)[:2], 3))
        m.d.comb += dst.valid.eq(src.valid & (tail.r_rdy | ~src.payload.last))
        done = Signal()                                    # this output ends the beat
        if pairs:
            half = Signal()
            m.d.comb += [done.eq(end[1] == half),
                         dst.payload.data.eq(src.payload.data.word_select(half, 64)),
                         dst.payload.keep.eq(Mux(end >= Cat(Const(1, 1), half), 0xff, 0x0f))]
            step = half.eq(Mux(done, 0, ~half))
        else:
            idx = Signal(2)
            m.d.comb += [done.eq(idx == end), dst.payload.data.eq(src.payload.data.word_select(idx, 32))]
            step = idx.eq(Mux(done, 0, idx + 1))
        with m.If(dst.valid & dst.ready):
            m.d.sync += step
            m.d.comb += [src.ready.eq(done), tail.r_en.eq(done & src.payload.last)]

    @staticmethod
    def _pack(m, src, win, name):
        """``win``-bit beats of ``src`` (``last``; ``keep`` if it has one) -> an HP packet stream."""
        k = 128 // win
        out = PacketSignature(128).create(path=(name,))
        data_ = Signal(128, name=f"{name}_data")
        keep = Signal(16, name=f"{name}_keep")
        cnt = Signal(range(k + 1), name=f"{name}_cnt")
        full, last = Signal(name=f"{name}_full"), Signal(name=f"{name}_last")
        m.d.comb += [out.valid.eq(full), out.payload.data.eq(data_), out.payload.keep.eq(keep),
                     out.payload.last.eq(last)]
        drain = out.valid & out.ready
        m.d.comb += src.ready.eq(~full | out.ready)
        with m.If(drain):
            m.d.sync += [full.eq(0), cnt.eq(0), keep.eq(0)]
        skeep = src.payload.keep if hasattr(src.payload, "keep") else Const(2 ** (win // 8) - 1, win // 8)
        with m.If(src.valid & src.ready):
            c = Mux(drain, 0, cnt)
            kbase = Mux(drain, 0, keep)
            with m.Switch(c):
                for j in range(k):
                    with m.Case(j):
                        m.d.sync += data_[win * j:win * (j + 1)].eq(src.payload.data)
                        m.d.sync += keep.eq(kbase | (skeep << (win // 8 * j)))
            m.d.sync += [cnt.eq(c + 1), last.eq(src.payload.last)]
            with m.If(src.payload.last | (c == k - 1)):
                m.d.sync += full.eq(1)
        return out

    def _rx_ring(self, m, regs, wr):
        aw = self.dma["addr_width"]
        pk = self._pack(m, self.rx, 64, "rx_pack")
        cap = self.slot_bytes // HP_BYTES - 1                 # packet beats per slot
        depth = 1 << (cap + 1).bit_length()                   # > cap: a whole packet fits
        m.submodules.rx_fifo = dq = fifo.SyncFIFOBuffered(width=128 + 16 + 1, depth=depth)
        m.submodules.rx_len = lq = fifo.SyncFIFO(width=17, depth=4)   # length 16 bits, truncated
        # ---- intake: packet beats into dq (cut at cap beats), its length into lq at the end
        beats = Signal(range(cap + 2))
        nbytes = Signal(17)
        trunc = Signal()
        inb = sum(pk.payload.keep[j] for j in range(16))
        room = beats < cap
        last_in = pk.payload.last
        # the last beat needs lq room; every stored beat needs dq room
        m.d.comb += pk.ready.eq(lq.w_rdy & (dq.w_rdy | ~room))
        store = room & (inb != 0)          # a beat without bytes is not stored
        m.d.comb += dq.w_data.eq(Cat(pk.payload.data, pk.payload.keep, last_in))
        with m.If(pk.valid & pk.ready):
            m.d.comb += dq.w_en.eq(store)
            with m.If(~room):
                m.d.sync += trunc.eq(1)
            with m.If(last_in):
                m.d.comb += [lq.w_en.eq(1),
                             lq.w_data.eq(Cat((nbytes + Mux(store, inb, 0))[:16], trunc | ~room))]
                m.d.sync += [beats.eq(0), nbytes.eq(0), trunc.eq(0)]
            with m.Elif(store):
                m.d.sync += [beats.eq(beats + 1), nbytes.eq(nbytes + inb)]
        # a truncated packet's stored beats end without `last`: the drain stops by count
        # ---- drain: descriptor, header beat, data beats
        slots = regs.rx_slots
        issued, wp, dropped, errs, seq = (Signal(32, name=f"rx_{n}") for n in
                                          ("issued", "wp", "dropped_cnt", "errors_cnt", "seq"))
        slot = Signal(16)
        code = Signal(4)
        base = Cat(regs.rx_base_lo, regs.rx_base_hi)[:aw]
        plen = lq.r_data[:16]
        ptrunc = lq.r_data[16]
        pbeats = (plen + 15) >> 4
        sent = Signal(range(cap + 2))
        d = wr.data
        with m.FSM(name="rx_ring"):
            with m.State("IDLE"):
                with m.If(regs.rx_slots_wstb):
                    pass
                with m.Elif(lq.r_rdy & (slots == 0)):
                    m.next = "DROP"
                with m.Elif(lq.r_rdy & ((issued - regs.rx_rp)[:32] < slots)):
                    m.next = "DESC"
            with m.State("DESC"):
                m.d.comb += [wr.desc.valid.eq(1),
                             wr.desc.payload.addr.eq(base + slot * self.slot_bytes),
                             wr.desc.payload.length.eq(HP_BYTES + (pbeats << 4))]
                with m.If(wr.desc.ready):
                    m.d.sync += [issued.eq(issued + 1),
                                 slot.eq(Mux(slot + 1 >= slots, 0, slot + 1))]
                    m.next = "HEAD"
            with m.State("HEAD"):
                m.d.comb += [d.valid.eq(1), d.payload.data.eq(Cat(plen, Const(0, 16), ptrunc,
                                                                  Const(0, 31), seq)),
                             d.payload.keep.eq(0xFFFF), d.payload.last.eq(pbeats == 0)]
                with m.If(d.ready):
                    m.d.sync += [seq.eq(seq + 1), sent.eq(0)]
                    with m.If(pbeats == 0):
                        m.d.comb += lq.r_en.eq(1)
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "DATA"
            with m.State("DATA"):
                fin = sent == pbeats - 1
                m.d.comb += [d.valid.eq(dq.r_rdy), d.payload.data.eq(dq.r_data[:128]),
                             d.payload.keep.eq(dq.r_data[128:144]), d.payload.last.eq(fin),
                             dq.r_en.eq(d.ready)]
                with m.If(d.valid & d.ready):
                    m.d.sync += sent.eq(sent + 1)
                    with m.If(fin):
                        m.d.comb += lq.r_en.eq(1)
                        m.next = "IDLE"
            with m.State("DROP"):
                m.d.comb += dq.r_en.eq(1)
                with m.If(pbeats == 0):
                    m.d.comb += lq.r_en.eq(1)
                    m.d.sync += dropped.eq(dropped + 1)
                    m.next = "IDLE"
                with m.Elif(dq.r_rdy):
                    m.d.sync += sent.eq(sent + 1)
                    with m.If(sent == pbeats - 1):
                        m.d.comb += lq.r_en.eq(1)
                        m.d.sync += [dropped.eq(dropped + 1), sent.eq(0)]
                        m.next = "IDLE"
        m.d.comb += wr.status.ready.eq(1)
        with m.If(wr.status.valid):
            m.d.sync += [wp.eq(wp + 1), code.eq(wr.status.payload.code)]
            with m.If(wr.status.payload.code != DmaStatus.OK):
                m.d.sync += errs.eq(errs + 1)
        with m.If(regs.rx_slots_wstb):
            m.d.sync += [issued.eq(0), wp.eq(0), slot.eq(0), seq.eq(0)]
        m.d.comb += [regs.rx_wp.eq(wp), regs.rx_dropped.eq(dropped), regs.rx_errors.eq(errs),
                     regs.rx_code.eq(code)]

    def _kv(self, m, regs):
        m.submodules.kv_cq = cq = fifo.SyncFIFO(width=self.kv_cmd_bits, depth=4)
        m.submodules.kv_rq = rq = fifo.SyncFIFO(width=self.kv_resp_bits, depth=4)
        posted, rejected = Signal(32), Signal(32)
        hi = regs.kv_cmd_hi if self.kv_cmd_bits > 32 else Const(0, 0)
        with m.If(regs.kv_go_wstb):
            with m.If(cq.w_rdy):
                m.d.comb += [cq.w_en.eq(1), cq.w_data.eq(Cat(regs.kv_cmd_lo, hi))]
                m.d.sync += posted.eq(posted + 1)
            with m.Else():
                m.d.sync += rejected.eq(rejected + 1)
        m.d.comb += [self.kvcmd.valid.eq(cq.r_rdy), self.kvcmd.payload.eq(cq.r_data),
                     cq.r_en.eq(self.kvcmd.ready),
                     rq.w_en.eq(self.kvresp.valid), rq.w_data.eq(self.kvresp.payload),
                     self.kvresp.ready.eq(rq.w_rdy),
                     regs.kv_resp.eq(Cat(rq.r_data, Const(0, 31 - self.kv_resp_bits), rq.r_rdy)),
                     rq.r_en.eq(regs.kv_resp_rstb & rq.r_rdy),
                     regs.kv_posted.eq(posted), regs.kv_rejected.eq(rejected)]
