"""One MCF node: compute engine, packetizer, NIC, reliable links and KV pool wired together.

Block diagram (docs/node.md has the register map and the board view)::

    s_axis_cmd ─► ComputeEngine ─sp_out──────────────────────────────► m_axis_sp
    s_axis_w   ─►   (cmd, w_in,  ─meta_out─► Packetizer ─► NIC s_axis
    s_axis_sp  ─►    sp_in)      ─emit_out─► 32→64 packer ─┘   │
                                                  NIC m_axis ──┴──────► m_axis_rx
                                             NIC m_axis_inval ─► KVPool.nic
    s_axis_kvcmd ─► KVPool.cmd      KVPool.resp ──────────────────────► m_axis_kvresp
    per p = 1..n_net:  NIC m_axis_net<p> ─► ReliableLink<p> ─tx─► m_axis_eth<p>
                       NIC s_axis_net<p> ◄─ ReliableLink<p> ◄rx── s_axis_eth<p>
    s_axi ─► AXI4LiteDecoder ─► 0x0000 engine │ 0x1000 NIC │ 0x2000 KV pool │ 0x3000 node
                                [│ 0x4000 KV installer]

  with ``kv_install`` (K/V in DDR; docs/memory.md "Node wiring")::

    NIC m_axis ─► OpSteer ─op == KV_REPLICA─► KVInstaller ─m_axi─► m_axi_kvin (AW/W/B)
                     └──── any other op ──────► m_axis_rx     │ dir_cmd/dir_resp
                                                              ▼
                                               KVPool.icmd / iresp; KVPool.events ─► m_axis_kvevent

Ports (AMBA names; every stream follows the ``lib.stream`` contract and tolerates any
back-pressure; the link ``rx`` inputs are always ready):

* ``s_axi``: AXI4-Lite slave, 16-bit address, see :data:`WINDOWS`; unmapped -> DECERR.
* ``s_axis_cmd``: ``tdata`` = one ``hdl.compute.engine.INSTR`` (bit 0 = first field),
  zero-padded to whole bytes. ``s_axis_w``: one weight beat (``tdata`` pn*pk*4 bits,
  ``tlast`` = the beat's ``last``). ``s_axis_sp``: 32-bit words for ``SPW``; with an engine
  ``spw_pairs`` one or two a beat (``hdl.host_sp``: 64-bit ``tdata``, word 0 in bits
  31..0, ``tkeep`` bit 4 says bits 63..32 are a second word; a beat always carries word 0, the
  other ``tkeep`` bits are not looked at), so an SPW of even count to an even address writes two
  words a cycle from the host's words too.
  ``m_axis_sp``: ``SPR`` words (32-bit ``tdata``, ``tlast`` on the final word).
  In simulation they stand for the node's DMA engines; on a board DMA readers sit in front
  of them (mcf_fpga/boards/node_dma.py).
* ``m_axis_rx``: packets the NIC delivers locally (64-bit ``tdata``/``tkeep``/``tlast``,
  the 16-byte Meta header first) -- what the RX DMA writes to DDR.
* ``s_axis_kvcmd`` / ``m_axis_kvresp``: the KV pool's ``cmd`` / ``resp`` (``tdata`` = the
  struct bits of ``hdl.kvpool.cmd_layout`` / ``resp_layout``, zero-padded to bytes).
* ``m_axis_eth<p>`` / ``s_axis_eth<p>``, p = 1..n_net: Ethernet II frames of the link
  (destination MAC .. FCS, ``golden.link.build_frame``); port numbering of
  ``spec.topology``.
* ``m_axi_kv`` (only with an engine ``kv_region``): the engine's AXI4 master to the KV region in
  DDR (K/V row loads and KVW writes, docs/memory.md "KV in DDR"; HP3 on the board).
* With ``NodeConfig.kv_install`` only (docs/memory.md "NIC install path", "Node wiring"):
  ``m_axi_kvin``: the KV installer's AXI4 master (a full ``AXI4Signature`` whose read channels
  are unused: ARVALID and RREADY held 0; writes of received K/V records into the pool's slots of
  the region, which the engine's ``m_axi_kv`` reads: one DDR behind both; HP2's write channels
  on the board). ``m_axis_kvevent``: the KV pool's event stream
  (``tdata`` = the struct bits of ``hdl.kvpool.event_layout``, zero-padded to bytes: one event per
  command executed from the host, the NIC or the installer; ``hdl.kvpool.unpack_event`` decodes it,
  ``golden.kvpool.KVPool.replay`` checks it). The installer's registers are the ``kvinstall``
  window (0x4000, ``hdl.kvinstall.REGISTERS``); packets with Meta ``op == KV_REPLICA`` delivered
  to this node go to the installer, never to ``m_axis_rx``.
* With ``NodeConfig.fetcher`` only (docs/cmdstream.md, docs/compiler.md):
  ``m_axi_cmd``: the command fetcher's AXI4 read master (write channels unused) from which it reads
  the node's command stream (``hdl.cmdstream``); its registers are the ``cmdfetch`` window (0x5000,
  ``hdl.cmdfetch.REGISTERS``). While the fetcher offers an instruction it has the engine's command
  input (``s_axis_cmd`` waits), and the KV pool's command port is shared: one command at a time,
  its answer going back to whoever sent it (the fetcher first when both offer one). Its counters:
  0 = the engine's retired instructions, 1 = its ``DOORBELL`` register (the host's events), the
  others 0. ``m_axi_load``: the stream loader's AXI4 read master (``hdl.dma.loader``,
  ``LOAD_DATA_WIDTH`` bits): the fetcher's ``LOAD`` records read weight tiles and scratchpad
  words from DDR into the engine's ``w_in`` / ``sp_in``, ahead of ``s_axis_w`` / ``s_axis_sp``
  (a host beat waits while the loader offers one; mixing both within one tile or feed is the
  host's error). An engine with ``spw_pairs`` gets the loader's SP words two a beat, as the
  host's.
* With ``NodeConfig.rx_entries`` only (RX placement): the RX placer
  (``hdl.rx_placer``) sits on local delivery (after the KV installer's steer): a packet whose
  (kind, src, kv_id) matches one of its entries lands in DDR over ``m_axi_rx`` (an AXI4 write
  master, ``LOAD_DATA_WIDTH`` bits, read channels unused; the loader reads the same DDR), the
  rest leave on ``m_axis_rx`` as before. Its registers are the ``rxplace`` window (0x6000,
  ``hdl.rx_placer.REGISTERS``); the fetcher's counter 3 + e is entry e's landed count.
* With ``NodeConfig.pick_slots`` only: the token picker
  (``hdl.token_picker``) between the engine's ``sp_out`` and ``m_axis_sp`` (every word passes
  unchanged): the fetcher's ``PICK`` records arm it, it picks the argmax of a logits frame (or
  the id of the best ``(value, id)`` pair: ``PickMode.PAIRS``) into a slot, the fetcher's
  ``LOADX`` records index the embedding table by a slot's token and its ``PUT`` records feed a
  slot's token or value (+ a constant) to the engine's ``sp_in`` through the loader's queue, in
  stream order with the loads' units (ahead of ``s_axis_sp``); counter 2 is its picks done; the
  fetcher's start clears it. Its errors are in the node's ``PICK_ERRORS`` register. Without the
  picker the fetcher refuses every ``PICK``/``LOADX``/``PUT`` (``pick_slots`` 0).
* ``irq``: high while the engine is halted by an error (cleared by the engine's ``CTRL``), or for
  one cycle when the fetcher stops (END, an error).

Emit path: ``EMIT`` puts one Meta (``length`` = 4*n0 bytes) and n0 32-bit words out; the
packer joins word pairs little-endian (word 2j in bits 0..31) into 64-bit payload words,
an odd word count leaving the upper half of the last word zero (not sent: ``tkeep``). An engine
with ``emit_pairs`` hands it such a pair as one beat (``two``), which passes as the word.
Replica invalidations reaching the NIC invalidate the replica in the KV pool (``final=1``).
Link CRC drops are reported to the NIC's ``CRC`` counter.
"""
from __future__ import annotations

import dataclasses
import enum
import inspect
from dataclasses import dataclass, field

from amaranth import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import AXI4LiteRegisterFile, AXI4LiteSignature, Access, PacketSignature, Register
from mcf_fpga.spec.regmap import Field
from mcf_fpga.hdl.bus.axil_decoder import AXI4LiteDecoder
from mcf_fpga.hdl.compute.engine import INSTR, ComputeEngine
from mcf_fpga.hdl.host_sp import host_sp_layout, host_sp_words
from mcf_fpga.hdl.kvinstall import KVInstaller
from mcf_fpga.hdl.kvpool import KVPool, cmd_layout, event_layout, resp_layout
from mcf_fpga.spec.meta import DEFAULT_PARAMS, MetaOp
from mcf_fpga.hdl.meta import kv_id_layout
from mcf_fpga.spec.nic import NicConfig
from mcf_fpga.hdl.nic.link import COUNTERS, LinkParams, ReliableLink
from mcf_fpga.hdl.nic.nic import Nic, nic_registers
from mcf_fpga.hdl.nic.steer import OpSteer
from mcf_fpga.hdl.packetizer import Packetizer

__all__ = ["NodeConfig", "Node", "NodeReg", "NODE_ID", "WINDOWS", "KVINSTALL_WINDOW", "CMDFETCH_WINDOW", "RXPLACE_WINDOW",
           "LOAD_DATA_WIDTH",
           "node_windows",
           "SMALL_ENGINE", "port_base",
           "counter_offset", "MAC_LOCAL_LO", "MAC_LOCAL_HI", "MAC_PEER_LO", "MAC_PEER_HI",
           "DEFAULT_MAC", "make_node", "node_registers", "pad8"]

NODE_ID = 0x4D43464F  # "MCFO"

#: AXI-Lite windows of ``s_axi``: (name, base, address bits).
WINDOWS = (("engine", 0x0000, 12), ("nic", 0x1000, 8), ("kvpool", 0x2000, 8), ("node", 0x3000, 12))
#: The KV installer's registers (``hdl.kvinstall.REGISTERS``), only with ``NodeConfig.kv_install``.
KVINSTALL_WINDOW = ("kvinstall", 0x4000, 6)
CMDFETCH_WINDOW = ("cmdfetch", 0x5000, 6)
#: The RX placer's registers (``hdl.rx_placer.REGISTERS``), only with ``NodeConfig.rx_entries``.
RXPLACE_WINDOW = ("rxplace", 0x6000, 7)
#: bus width of the stream loader's ``m_axi_load`` (an HP port's 128 bits)
LOAD_DATA_WIDTH = 128


def node_windows(cfg: "NodeConfig"):
    """The AXI-Lite windows of a node built from ``cfg``: :data:`WINDOWS`, plus
    :data:`KVINSTALL_WINDOW` with ``kv_install``, :data:`CMDFETCH_WINDOW` with ``fetcher`` and
    :data:`RXPLACE_WINDOW` with ``rx_entries``."""
    return WINDOWS + ((KVINSTALL_WINDOW,) if cfg.kv_install else ()) + ((CMDFETCH_WINDOW,) if cfg.fetcher else ()) \
        + ((RXPLACE_WINDOW,) if cfg.rx_entries else ())

#: The small engine of tests/hdl/compute/test_engine.py (``make_engine``): fast simulation.
SMALL_ENGINE = dict(pn=4, pk=16, group=32, kc_max=8, x_depth=64, t_max=8, d_max=128, head_dim=16,
                    nq_max=16, kv_depth=32, nb_max=4, z_max=16, blk_max=16, sp_depth=16384,
                    em_depth=256)

#: Reset value of every link's local and peer MAC (an unconfigured cluster still links up).
DEFAULT_MAC = 0x024D4346FFFF


class NodeReg(enum.IntEnum):
    """Node register byte offsets inside the node window (0x3000)."""
    ID = 0x00               #: RO NODE_ID
    N_NET = 0x04            #: RO network ports
    ENGINE_PN = 0x08        #: RO GEMM output lanes
    ENGINE_PK = 0x0C        #: RO GEMM input lanes
    ENGINE_HEAD_DIM = 0x10  #: RO attention head dimension
    ENGINE_SP_DEPTH = 0x14  #: RO scratchpad words
    KV_SLOTS = 0x18         #: RO KV-pool slots
    MAX_PAYLOAD = 0x1C      #: RO largest packet payload (bytes) the NIC accepts
    STATUS = 0x20           #: RO bit0 irq, bit1 engine halted, bit2 engine busy, bit3 KV installer busy,
                            #: bits 8..15 engine error
    PICKS = 0x24            #: RO the token picker's picks since the fetcher's start (with pick_slots only)
    PICK_ERRORS = 0x28      #: RO its failed picks (bits 0..29, saturating) | first cause << 30
                            #: (spec.token_picker.PickError)


#: Per link port p: counter k of ``hdl.nic.link.COUNTERS`` at ``port_base(p) + 4*k``; MACs below.
MAC_LOCAL_LO, MAC_LOCAL_HI, MAC_PEER_LO, MAC_PEER_HI = 0x80, 0x84, 0x88, 0x8C


def port_base(p: int) -> int:
    """Offset (in the node window) of link port ``p``'s register block."""
    return 0x100 * p


def counter_offset(p: int, name: str) -> int:
    """Offset (in the node window) of link counter ``name`` (e.g. ``"drop_crc"``) of port ``p``."""
    return port_base(p) + 4 * COUNTERS.index(name)


def pad8(bits: int) -> int:
    return -(-bits // 8) * 8


#: Reduction pools of a node: decode's flat merge is one max all-reduce plus SUM groups of the
#: partial rows packed into max_payload packets (mcf_fpga/host/executors/rtl.py): 8 reduce-pool
#: contexts cover Qwen2.5-1.5B (1 + 7 at 2 KB); SOFTMAX_MERGE is not used by the executors, one
#: merge-pool context keeps it available (docs/nic.md).
NODE_REDUCE_CONTEXTS, NODE_MERGE_CONTEXTS = 8, 1


def node_nic(n_net: int = 2, max_payload: int = 2048) -> NicConfig:
    """The node's NIC: ``n_net`` network ports, ``max_payload`` bytes, the node's reduction pools."""
    return NicConfig(n_net=n_net, max_payload=max_payload, reduce_contexts=NODE_REDUCE_CONTEXTS,
                     merge_contexts=NODE_MERGE_CONTEXTS)


def _default_link():
    return LinkParams(max_packet=DEFAULT_PARAMS.header_bytes + 2048)


@dataclass(frozen=True)
class NodeConfig:
    """Sizes of one node.

    Parameters
    ----------
    engine : dict
        ``ComputeEngine`` keyword parameters (default :data:`SMALL_ENGINE`;
        ``hdl.compute.engine.KR260`` for boards).
    nic : NicConfig
        ``n_net`` 2 = ring, 4 = 2-D mesh; ``max_payload`` bounds the engine's packets.
    link : LinkParams
        One per network port; ``max_packet`` >= Meta header + ``nic.max_payload``.
    kv_slots, kv_block_bytes : int
        KV pool slots and bytes per slot.
    kv_directory : ``"cam"`` or ``"table"``
        The KV pool's directory (``hdl.kvpool.KVPool``): the register CAM (``kv_slots`` <= 4096)
        or the BRAM table (``kv_slots`` <= 65536) over ``kv_layers`` x ``kv_blocks`` kv_ids
        (both required with ``"table"``, unused with ``"cam"``).
    kv_install : bool
        Build the NIC install path (docs/memory.md "Node wiring"): the KV installer on the
        engine's ``kv_region`` (required), the pool's install port and event stream, and the ports
        ``m_axi_kvin`` / ``m_axis_kvevent`` and the ``kvinstall`` register window. ``kv_slots``
        must not exceed the region's ``n_slots`` (pool slot s is region slot s).
    pkt_payload_depth, pkt_meta_depth : int
        Packetizer FIFO depths (64-bit words, Meta descriptors).
    fetcher : bool
        Build the command fetcher (``hdl.cmdfetch.CommandFetcher``): the node reads
        its command stream from DDR over ``m_axi_cmd``; needs an engine with a ``kv_region`` (the
        fetcher patches a unit's DDR slot into ``b``).
    rx_entries : int
        0, or build the RX placer (``hdl.rx_placer.RxPlacer``) with this many entries
        (1..253; needs ``fetcher``): packets the NIC delivers locally whose (kind, src, kv_id)
        match an entry land in DDR over ``m_axi_rx`` instead of leaving on ``m_axis_rx``; the
        fetcher's counter 3 + e is entry e's landed count.
    pick_slots : int
        0, or build the token picker (``hdl.token_picker.TokenPicker``) with this many
        slots (1..16; needs ``fetcher``) on the engine's ``sp_out``: the fetcher's ``PICK``
        records arm it (the argmax of a logits frame, or the best ``(value, id)`` pair, into a
        slot), its ``LOADX`` records read the row of a slot's token, its ``PUT`` records write a
        slot's token or value into the scratchpad (``sp_in``); counter 2 is the picks done.
        0: no picker, the fetcher refuses those records.
    """
    engine: dict = field(default_factory=lambda: dict(SMALL_ENGINE))
    nic: NicConfig = field(default_factory=node_nic)
    link: LinkParams = field(default_factory=_default_link)
    kv_slots: int = 16
    kv_block_bytes: int = 4096
    pkt_payload_depth: int = 64
    pkt_meta_depth: int = 4
    kv_directory: str = "cam"
    kv_layers: int | None = None
    kv_blocks: int | None = None
    kv_install: bool = False
    fetcher: bool = False
    rx_entries: int = 0
    pick_slots: int = 0

    def __post_init__(self):
        known = set(inspect.signature(ComputeEngine.__init__).parameters) - {"self"}
        if not isinstance(self.engine, dict):
            raise ValueError(f"NodeConfig.engine must be a dict of ComputeEngine parameters, "
                             f"got {type(self.engine).__name__}")
        bad = set(self.engine) - known
        if bad:
            raise ValueError(f"NodeConfig.engine has unknown parameter(s) {sorted(bad)} "
                             f"(known: {', '.join(sorted(known))})")
        p = dict(inspect.signature(ComputeEngine.__init__).parameters)
        pn = self.engine.get("pn", p["pn"].default)
        pk = self.engine.get("pk", p["pk"].default)
        if (pn * pk * 4) % 8:
            raise ValueError(f"NodeConfig.engine: pn*pk must be even (s_axis_w carries whole bytes), "
                             f"got pn={pn}, pk={pk}")
        if not isinstance(self.nic, NicConfig):
            raise ValueError(f"NodeConfig.nic must be a NicConfig, got {type(self.nic).__name__}")
        if self.nic.n_net not in (2, 4):
            raise ValueError(f"NodeConfig.nic.n_net must be 2 (ring) or 4 (mesh), got {self.nic.n_net}")
        if self.nic.meta != DEFAULT_PARAMS:
            raise ValueError("NodeConfig.nic.meta must be spec.meta.DEFAULT_PARAMS (the engine's "
                             "EMIT Meta uses the default layout)")
        if not isinstance(self.link, LinkParams):
            raise ValueError(f"NodeConfig.link must be a LinkParams, got {type(self.link).__name__}")
        if self.link.data_width != self.nic.data_width:
            raise ValueError(f"NodeConfig.link.data_width must be {self.nic.data_width} "
                             f"(the NIC's), got {self.link.data_width}")
        need = self.nic.meta.header_bytes + self.nic.max_payload
        if self.link.max_packet < need:
            raise ValueError(f"NodeConfig.link.max_packet must be at least {need} (Meta header + "
                             f"nic.max_payload), got {self.link.max_packet}")
        if self.kv_directory not in ("cam", "table"):
            raise ValueError(f"NodeConfig.kv_directory must be 'cam' or 'table', got {self.kv_directory!r}")
        top = KVPool.MAX_CAM_SLOTS if self.kv_directory == "cam" else KVPool.MAX_TABLE_SLOTS
        if not 1 <= self.kv_slots <= top:
            raise ValueError(f"NodeConfig.kv_slots must be in 1..{top} with kv_directory="
                             f"{self.kv_directory!r}, got {self.kv_slots}")
        if self.kv_directory == "table":
            for name in ("kv_layers", "kv_blocks"):
                if not isinstance(getattr(self, name), int):
                    raise ValueError(f"NodeConfig.{name} is required with kv_directory='table' "
                                     f"(the table's kv_id range), got {getattr(self, name)!r}")
        elif self.kv_layers is not None or self.kv_blocks is not None:
            raise ValueError("NodeConfig.kv_layers / kv_blocks are parameters of kv_directory='table' only")
        if not isinstance(self.kv_install, bool):
            raise ValueError(f"NodeConfig.kv_install must be a bool, got {self.kv_install!r}")
        if self.kv_install:
            region = self.engine.get("kv_region")
            if region is None:
                raise ValueError("NodeConfig.kv_install needs an engine that keeps K/V in DDR "
                                 "(NodeConfig.engine['kv_region']): the installer writes into that region")
            if self.kv_slots > region.n_slots:
                raise ValueError(f"NodeConfig.kv_slots={self.kv_slots} must not exceed the engine's "
                                 f"kv_region.n_slots={region.n_slots} with kv_install (pool slot s is region slot s)")
        if not isinstance(self.fetcher, bool):
            raise ValueError(f"NodeConfig.fetcher must be a bool, got {self.fetcher!r}")
        if self.fetcher and self.engine.get("kv_region") is None:
            raise ValueError("NodeConfig.fetcher needs an engine that keeps K/V in DDR (NodeConfig.engine['kv_region']): "
                             "the fetcher patches a KV unit's DDR slot into the instruction")
        if isinstance(self.rx_entries, bool) or not isinstance(self.rx_entries, int) or not 0 <= self.rx_entries <= 253:
            raise ValueError(f"NodeConfig.rx_entries must be an int in 0..253 (fetcher counters 3 + e), "
                             f"got {self.rx_entries!r}")
        if self.rx_entries and not self.fetcher:
            raise ValueError("NodeConfig.rx_entries needs fetcher=True: the node's stream waits for the "
                             "placer's landed counts and loads the payloads")
        if isinstance(self.pick_slots, bool) or not isinstance(self.pick_slots, int) or not 0 <= self.pick_slots <= 16:
            raise ValueError(f"NodeConfig.pick_slots must be an int in 0..16, got {self.pick_slots!r}")
        if self.pick_slots and not self.fetcher:
            raise ValueError("NodeConfig.pick_slots needs fetcher=True: the fetcher arms the picker and "
                             "loads the picked token's embedding")
        if not 1 <= self.kv_block_bytes < 2 ** 32:
            raise ValueError(f"NodeConfig.kv_block_bytes must be in 1..2**32-1, got {self.kv_block_bytes}")
        if not 2 <= self.pkt_payload_depth <= 4096:
            raise ValueError(f"NodeConfig.pkt_payload_depth must be in 2..4096, got {self.pkt_payload_depth}")
        if not 2 <= self.pkt_meta_depth <= 256:
            raise ValueError(f"NodeConfig.pkt_meta_depth must be in 2..256, got {self.pkt_meta_depth}")

    def __hash__(self):
        # engine values may be dicts (kv_dma): hashed as their sorted items
        frozen = tuple(sorted((k, tuple(sorted(v.items())) if isinstance(v, dict) else v)
                              for k, v in self.engine.items()))
        return hash((frozen, self.nic, self.link, self.kv_slots,
                     self.kv_block_bytes, self.pkt_payload_depth, self.pkt_meta_depth,
                     self.kv_directory, self.kv_layers, self.kv_blocks, self.kv_install, self.fetcher,
                     self.rx_entries, self.pick_slots))


def node_registers(cfg: NodeConfig):
    regs = [Register("id", NodeReg.ID, Access.RO, doc="NODE_ID"),
            Register("n_net", NodeReg.N_NET, Access.RO),
            Register("engine_pn", NodeReg.ENGINE_PN, Access.RO),
            Register("engine_pk", NodeReg.ENGINE_PK, Access.RO),
            Register("engine_head_dim", NodeReg.ENGINE_HEAD_DIM, Access.RO),
            Register("engine_sp_depth", NodeReg.ENGINE_SP_DEPTH, Access.RO),
            Register("kv_slots", NodeReg.KV_SLOTS, Access.RO),
            Register("max_payload", NodeReg.MAX_PAYLOAD, Access.RO),
            Register("status", NodeReg.STATUS, Access.RO,
                     fields=(Field("irq", 0), Field("engine_halted", 1), Field("engine_busy", 2),
                             Field("kvinstall_busy", 3), Field("engine_error", 8, 8)))]
    if cfg.pick_slots:
        regs += [Register("picks", NodeReg.PICKS, Access.RO),
                 Register("pick_errors", NodeReg.PICK_ERRORS, Access.RO)]
    lo, hi = DEFAULT_MAC & 0xFFFFFFFF, DEFAULT_MAC >> 32
    for p in range(1, cfg.nic.n_net + 1):
        b = port_base(p)
        regs += [Register(f"p{p}_{c}", b + 4 * k, Access.RO) for k, c in enumerate(COUNTERS)]
        regs += [Register(f"p{p}_local_mac_lo", b + MAC_LOCAL_LO, reset=lo),
                 Register(f"p{p}_local_mac_hi", b + MAC_LOCAL_HI, width=16, reset=hi),
                 Register(f"p{p}_peer_mac_lo", b + MAC_PEER_LO, reset=lo),
                 Register(f"p{p}_peer_mac_hi", b + MAC_PEER_HI, width=16, reset=hi)]
    return regs


class Node(wiring.Component):
    """One node (see the module docstring for ports and behaviour). ``cfg``: :class:`NodeConfig`."""

    def __init__(self, cfg: NodeConfig = NodeConfig()):
        if not isinstance(cfg, NodeConfig):
            raise ValueError(f"Node needs a NodeConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        self.engine = ComputeEngine(**cfg.engine)
        pn, pk = self.engine.gemm.pn, self.engine.gemm.pk
        dw = cfg.nic.data_width
        kvw = kv_id_layout(cfg.nic.meta).size
        self.kv_cmd_layout = cmd_layout(kvw)
        self.kv_resp_layout = resp_layout(cfg.kv_slots, 15)
        table = dict(directory="table", layers=cfg.kv_layers, blocks=cfg.kv_blocks) \
            if cfg.kv_directory == "table" else {}
        self.kvpool = KVPool(cfg.kv_slots, cfg.kv_block_bytes, kv_id_width=kvw, **table,
                             install_port=cfg.kv_install, events=cfg.kv_install)
        self.kvinstall = None
        if cfg.kv_install:
            kvs = self.engine.signature.members["m_axi_kv"].signature
            dma = {k: v for k, v in (cfg.engine.get("kv_dma") or {}).items()
                   if k in ("max_burst", "max_outstanding", "id_width")}
            self.kvinstall = KVInstaller(dataclasses.replace(cfg.engine["kv_region"], n_slots=cfg.kv_slots),
                                         kv_id_width=kvw, max_readers=15, max_payload=cfg.nic.max_payload,
                                         addr_width=kvs.addr_width, meta=cfg.nic.meta, **dma)
            self.kv_event_layout = event_layout(kvw, cfg.kv_slots, 15)
        self.fetcher = None
        if cfg.fetcher:
            from mcf_fpga.hdl.cmdfetch import CommandFetcher
            from mcf_fpga.hdl.dma.loader import StreamLoader
            self.fetcher = CommandFetcher(n_slots=cfg.kv_slots, max_readers=15, kv_id_width=kvw,
                                          slot_rows=cfg.engine["kv_region"].slot_rows,
                                          n_counters=max(8, 3 + cfg.rx_entries),
                                          pick_slots=cfg.pick_slots)
            # an engine with spw_pairs takes the loader's SP words two a beat
            self.loader = StreamLoader(data_width=LOAD_DATA_WIDTH, max_burst=16, max_outstanding=4,
                                       w_bits=pn * pk * 4, sp_pairs=bool(cfg.engine.get("spw_pairs")))
        self.picker = None
        if cfg.pick_slots:
            from mcf_fpga.hdl.token_picker import TokenPicker
            self.picker = TokenPicker(slots=cfg.pick_slots)
        self.rxplace = None
        if cfg.rx_entries:
            from mcf_fpga.hdl.rx_placer import RxPlacer
            self.rxplace = RxPlacer(entries=cfg.rx_entries, data_width=LOAD_DATA_WIDTH,
                                    max_payload=cfg.nic.max_payload, max_burst=16, max_outstanding=4,
                                    meta=cfg.nic.meta)
        members = {
            "s_axi": In(AXI4LiteSignature(16, 32)),
            "s_axis_cmd": In(stream.Signature(pad8(INSTR.size))),
            "s_axis_w": In(stream.Signature(data.StructLayout({"data": pn * pk * 4, "last": 1}))),
            "s_axis_sp": In(stream.Signature(host_sp_layout(self.engine.spw_pairs))),
            "m_axis_sp": Out(stream.Signature(data.StructLayout({"data": 32, "last": 1}))),
            "m_axis_rx": Out(PacketSignature(dw)),
            "s_axis_kvcmd": In(stream.Signature(pad8(self.kv_cmd_layout.size))),
            "m_axis_kvresp": Out(stream.Signature(pad8(self.kv_resp_layout.size))),
        }
        for p in range(1, cfg.nic.n_net + 1):
            members[f"s_axis_eth{p}"] = In(PacketSignature(dw))
            members[f"m_axis_eth{p}"] = Out(PacketSignature(dw))
        if "m_axi_kv" in self.engine.signature.members:       # K/V in DDR (engine kv_region)
            members["m_axi_kv"] = self.engine.signature.members["m_axi_kv"]
        if cfg.kv_install:                                     # the NIC install path
            members["m_axi_kvin"] = self.kvinstall.signature.members["m_axi"]
            members["m_axis_kvevent"] = Out(stream.Signature(pad8(self.kv_event_layout.size)))
        if cfg.fetcher:
            members["m_axi_cmd"] = self.fetcher.signature.members["m_axi"]
            members["m_axi_load"] = self.loader.signature.members["m_axi"]
        if cfg.rx_entries:
            members["m_axi_rx"] = self.rxplace.signature.members["m_axi"]
        members["irq"] = Out(1)
        super().__init__(members)

    #: what each window of :func:`node_windows` holds (the register map's descriptions)
    WINDOW_DOCS = {"engine": "compute engine: status, retired instructions, control",
                   "nic": "NIC: node id, membership, route table, error flags and counters",
                   "kvpool": "KV pool: usage counters, slot budget",
                   "node": "node: identity, configuration, status, per-link counters and MACs",
                   "kvinstall": "KV installer: install counters and errors",
                   "cmdfetch": "command fetcher: start/abort, stream address, watchdog, errors",
                   "rxplace": "RX placer: the receive table and its counters"}

    def register_map(self, name="node"):
        """The node's AXI-Lite map (``spec.regmap.RegisterMap``, 16 address bits): each window
        of :func:`node_windows` with the ``Register`` list the register file behind it decodes
        (the same definitions ``elaborate`` builds the hardware from)."""
        from mcf_fpga.spec.regmap import RegisterMap, Window
        cfg = self.cfg
        regs = {"engine": self.engine.csr_registers, "nic": nic_registers(cfg.nic),
                "kvpool": self.kvpool.csr_registers, "node": node_registers(cfg)}
        if self.kvinstall is not None:
            regs["kvinstall"] = self.kvinstall.csr_registers
        if self.fetcher is not None:
            regs["cmdfetch"] = self.fetcher.csr_registers
        if self.rxplace is not None:
            regs["rxplace"] = self.rxplace.csr_registers
        return RegisterMap(name, 16, [Window(w, base, bits, regs[w], doc=self.WINDOW_DOCS[w])
                                      for w, base, bits in node_windows(cfg)])

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        m.submodules.engine = eng = self.engine
        m.submodules.decoder = dec = AXI4LiteDecoder(16, node_windows(cfg))
        m.submodules.regs = regs = AXI4LiteRegisterFile(node_registers(cfg), addr_width=12)
        m.submodules.nic = nic = Nic(cfg.nic)
        m.submodules.kvpool = kv = self.kvpool
        m.submodules.packetizer = pz = Packetizer(cfg.nic.meta, cfg.nic.data_width,
                                                  cfg.pkt_payload_depth, cfg.pkt_meta_depth)

        # ---- register buses
        wiring.connect(m, wiring.flipped(self.s_axi), dec.bus)
        wiring.connect(m, dec.engine, eng.bus)
        wiring.connect(m, dec.nic, nic.s_axi)
        wiring.connect(m, dec.kvpool, kv.csr)
        wiring.connect(m, dec.node, regs.bus)

        # ---- engine streams
        cmd = self.s_axis_cmd
        if cfg.fetcher:
            self._fetcher(m, dec, eng)
        else:
            m.d.comb += [eng.cmd.payload.eq(cmd.payload[:INSTR.size]), eng.cmd.valid.eq(cmd.valid),
                         cmd.ready.eq(eng.cmd.ready)]
        if not cfg.fetcher:
            wiring.connect(m, wiring.flipped(self.s_axis_w), eng.w_in)
            sp = self.s_axis_sp
            m.d.comb += [*host_sp_words(sp.payload, eng.sp_in.payload), eng.sp_in.valid.eq(sp.valid),
                         sp.ready.eq(eng.sp_in.ready)]
        if self.picker is not None:             # the greedy pick watches the engine's SPR words
            m.submodules.picker = pk = self.picker
            wiring.connect(m, eng.sp_out, pk.s_axis)
            wiring.connect(m, pk.m_axis, wiring.flipped(self.m_axis_sp))
        else:
            wiring.connect(m, eng.sp_out, wiring.flipped(self.m_axis_sp))
        if "m_axi_kv" in self.signature.members:
            wiring.connect(m, eng.m_axi_kv, wiring.flipped(self.m_axi_kv))

        # ---- emit path: meta -> packetizer; 32-bit words -> 64-bit words -> packetizer
        wiring.connect(m, eng.meta_out, pz.meta)
        e, w = eng.emit_out, pz.payload
        lo = Signal(32)
        have = Signal()
        # an engine with emit_pairs sends a pair beat (``two``) only at an even word of a packet
        # (``have`` clear): it is the 64-bit word
        if eng.emit_pairs:
            with m.If(e.payload.two):
                m.d.comb += [w.valid.eq(e.valid), w.payload.eq(e.payload.data1 << 32 | e.payload.data),
                             e.ready.eq(w.ready)]
        with m.Elif(have) if eng.emit_pairs else m.If(have):
            m.d.comb += [w.valid.eq(e.valid), w.payload.eq(e.payload.data << 32 | lo),
                         e.ready.eq(w.ready)]
            with m.If(e.valid & w.ready):
                m.d.sync += have.eq(0)
        with m.Elif(e.payload.last):
            m.d.comb += [w.valid.eq(e.valid), w.payload.eq(e.payload.data), e.ready.eq(w.ready)]
        with m.Else():
            m.d.comb += e.ready.eq(1)
            with m.If(e.valid):
                m.d.sync += [lo.eq(e.payload.data), have.eq(1)]
        wiring.connect(m, pz.packet, nic.s_axis)
        rx_out = wiring.flipped(self.m_axis_rx)          # where local delivery goes (m_other)
        if cfg.rx_entries:
            m.submodules.rxplace = rp = self.rxplace
            wiring.connect(m, rp.m_axis, rx_out)
            wiring.connect(m, rp.m_axi, wiring.flipped(self.m_axi_rx))
            wiring.connect(m, dec.rxplace, rp.csr)
            rx_out = rp.s_axis
        if cfg.kv_install:
            self._install_path(m, dec, nic, kv, rx_out)
        else:
            wiring.connect(m, nic.m_axis, rx_out)

        # ---- KV pool
        kc, kr = self.s_axis_kvcmd, self.m_axis_kvresp
        if cfg.fetcher:
            self._shared_pool_port(m, kv)
            m.d.comb += [kv.nic.payload.kv_id.eq(nic.m_axis_inval.payload), kv.nic.payload.final.eq(1),
                         kv.nic.valid.eq(nic.m_axis_inval.valid), nic.m_axis_inval.ready.eq(kv.nic.ready)]
        else:
            m.d.comb += [kv.cmd.payload.eq(kc.payload[:self.kv_cmd_layout.size]), kv.cmd.valid.eq(kc.valid),
                         kc.ready.eq(kv.cmd.ready),
                         kr.payload.eq(kv.resp.payload), kr.valid.eq(kv.resp.valid), kv.resp.ready.eq(kr.ready),
                         kv.nic.payload.kv_id.eq(nic.m_axis_inval.payload), kv.nic.payload.final.eq(1),
                         kv.nic.valid.eq(nic.m_axis_inval.valid), nic.m_axis_inval.ready.eq(kv.nic.ready)]

        # ---- links
        for p in range(1, cfg.nic.n_net + 1):
            link = ReliableLink(cfg.link, mac_ports=True)
            m.submodules[f"link{p}"] = link
            wiring.connect(m, getattr(nic, f"m_axis_net{p}"), link.s_axis)
            wiring.connect(m, link.m_axis, getattr(nic, f"s_axis_net{p}"))
            wiring.connect(m, link.tx, wiring.flipped(getattr(self, f"m_axis_eth{p}")))
            wiring.connect(m, wiring.flipped(getattr(self, f"s_axis_eth{p}")), link.rx)
            r = lambda n: getattr(regs, f"p{p}_{n}")
            m.d.comb += [link.local_mac.eq(r("local_mac_hi") << 32 | r("local_mac_lo")),
                         link.peer_mac.eq(r("peer_mac_hi") << 32 | r("peer_mac_lo"))]
            for c in COUNTERS:
                m.d.comb += r(c).eq(getattr(link, c)[:32])
            prev = Signal(cfg.link.counter_width, name=f"link{p}_crc_prev")
            m.d.sync += prev.eq(link.drop_crc)
            m.d.comb += nic.crc_err[p - 1].eq(prev != link.drop_crc)

        # ---- node registers, irq
        m.d.comb += [regs.id.eq(NODE_ID), regs.n_net.eq(cfg.nic.n_net),
                     regs.engine_pn.eq(eng.gemm.pn), regs.engine_pk.eq(eng.gemm.pk),
                     regs.engine_head_dim.eq(eng.att_unit.d), regs.engine_sp_depth.eq(eng.sp_depth),
                     regs.kv_slots.eq(cfg.kv_slots), regs.max_payload.eq(cfg.nic.max_payload),
                     self.irq.eq(eng.halted | self.fetcher.irq if cfg.fetcher else eng.halted),
                     regs.status.eq(eng.halted | eng.halted << 1 | eng.busy << 2 | eng.error << 8)]
        if cfg.kv_install:
            m.d.comb += regs.status[3].eq(self.kvinstall.busy)
        if self.picker is not None:
            pk = self.picker
            sat = Signal(30)
            m.d.comb += sat.eq(Mux(pk.errors[30:] != 0, (1 << 30) - 1, pk.errors[:30]))
            m.d.comb += [regs.picks.eq(pk.picks), regs.pick_errors.eq(sat | pk.error_cause << 30)]
        return m

    def _fetcher(self, m, dec, eng):
        """The command fetcher: its registers, AXI master and counters; the engine's command input
        from the fetcher while it offers an instruction, else from ``s_axis_cmd``."""
        m.submodules.cmdfetch = f = self.fetcher
        wiring.connect(m, dec.cmdfetch, f.csr)
        wiring.connect(m, f.m_axi, wiring.flipped(self.m_axi_cmd))
        m.d.comb += [f.counters[0].eq(eng.retired), f.counters[1].eq(f.doorbell)]
        if self.picker is not None:                     # PICK arms it, LOADX and PUT read its results
            pk = self.picker
            wiring.connect(m, f.pick, pk.arm)
            m.d.comb += [f.tokens.eq(pk.tokens), f.values.eq(pk.values), f.counters[2].eq(pk.picks),
                         pk.clear.eq(f.started)]
        for e in range(self.cfg.rx_entries):            # 3 + e: the RX placer's entry e landed
            m.d.comb += f.counters[3 + e].eq(self.rxplace.landed[e])
        # the stream loader: the fetcher's LOAD records; its units feed the engine's data inputs,
        # ahead of the host's s_axis_w / s_axis_sp (whose beats wait while the loader offers one).
        # A PUT's word joins the loader's queue behind the descriptors issued before it, so it
        # reaches sp_in in stream order (hdl.dma.loader.StreamLoader.put)
        m.submodules.loader = ld = self.loader
        wiring.connect(m, f.load, ld.desc)
        wiring.connect(m, f.put, ld.put)
        wiring.connect(m, ld.status, f.load_status)
        wiring.connect(m, ld.m_axi, wiring.flipped(self.m_axi_load))
        for src, host, dst in ((ld.w, self.s_axis_w, eng.w_in), (ld.sp, self.s_axis_sp, eng.sp_in)):
            with m.If(src.valid):
                m.d.comb += [dst.payload.eq(src.payload), dst.valid.eq(1), src.ready.eq(dst.ready)]
            with m.Else():
                fields = host_sp_words(host.payload, dst.payload) if dst is eng.sp_in else [dst.payload.eq(host.payload)]
                m.d.comb += fields + [dst.valid.eq(host.valid), host.ready.eq(dst.ready)]
        cmd, fc = self.s_axis_cmd, f.engine_cmd
        with m.If(fc.valid):
            m.d.comb += [eng.cmd.payload.eq(fc.payload), eng.cmd.valid.eq(1), fc.ready.eq(eng.cmd.ready)]
        with m.Else():
            m.d.comb += [eng.cmd.payload.eq(cmd.payload[:INSTR.size]), eng.cmd.valid.eq(cmd.valid),
                         cmd.ready.eq(eng.cmd.ready)]

    def _shared_pool_port(self, m, kv):
        """The KV pool's command port shared by the fetcher and ``s_axis_kvcmd``: one command at a
        time (a new one only after the last one's answer was taken), the fetcher's first; the
        answer goes to the sender."""
        f, kc, kr = self.fetcher, self.s_axis_kvcmd, self.m_axis_kvresp
        pending, by_fetcher = Signal(), Signal()
        fk = f.kv_cmd
        with m.If(~pending):
            with m.If(fk.valid):
                m.d.comb += [kv.cmd.payload.eq(fk.payload), kv.cmd.valid.eq(1), fk.ready.eq(kv.cmd.ready)]
            with m.Else():
                m.d.comb += [kv.cmd.payload.eq(kc.payload[:self.kv_cmd_layout.size]), kv.cmd.valid.eq(kc.valid),
                             kc.ready.eq(kv.cmd.ready)]
            with m.If(kv.cmd.valid & kv.cmd.ready):
                m.d.sync += [pending.eq(1), by_fetcher.eq(fk.valid)]
        with m.If(by_fetcher):
            m.d.comb += [f.kv_resp.payload.eq(kv.resp.payload), f.kv_resp.valid.eq(kv.resp.valid),
                         kv.resp.ready.eq(f.kv_resp.ready)]
        with m.Else():
            m.d.comb += [kr.payload.eq(kv.resp.payload), kr.valid.eq(kv.resp.valid), kv.resp.ready.eq(kr.ready)]
        with m.If(kv.resp.valid & kv.resp.ready):
            m.d.sync += pending.eq(0)

    def _install_path(self, m, dec, nic, kv, rx_out):
        """NIC local delivery -> OpSteer -> KV installer (op KV_REPLICA) / ``rx_out`` (the rest:
        ``m_axis_rx``, or the RX placer); installer <-> the pool's install port, its AXI master
        and registers; pool events."""
        m.submodules.kv_steer = steer = OpSteer([MetaOp.KV_REPLICA], self.cfg.nic.data_width, self.cfg.nic.meta)
        m.submodules.kvinstall = ins = self.kvinstall
        wiring.connect(m, nic.m_axis, steer.s_axis)
        wiring.connect(m, steer.m_other, rx_out)
        wiring.connect(m, steer.m_match, ins.s_axis)
        wiring.connect(m, ins.dir_cmd, kv.icmd)
        wiring.connect(m, kv.iresp, ins.dir_resp)
        wiring.connect(m, ins.m_axi, wiring.flipped(self.m_axi_kvin))
        wiring.connect(m, dec.kvinstall, ins.csr)
        ev = self.m_axis_kvevent
        m.d.comb += [ev.payload.eq(kv.events.payload), ev.valid.eq(kv.events.valid),
                     kv.events.ready.eq(ev.ready)]


def make_node(n_net: int = 2, max_payload: int = 2048, kr260: bool = False, kv_slots: int = 16) -> Node:
    """Block-registry factory (``mcf verilog node``)."""
    from mcf_fpga.hdl.compute.engine import KR260
    nic = node_nic(n_net, max_payload)
    link = LinkParams(max_packet=DEFAULT_PARAMS.header_bytes + max_payload)
    return Node(NodeConfig(engine=dict(KR260) if kr260 else dict(SMALL_ENGINE), nic=nic, link=link,
                           kv_slots=kv_slots))
