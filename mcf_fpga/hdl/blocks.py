"""Block registry: every block that can be exported on its own (``mcf verilog <block>``).

Add a block with one line::

    register("my_block", MyBlock, "what it is", data_width=64, depth=16)

``factory(**params)`` must return a ``wiring.Component``; each keyword after the doc string
is a parameter with its typed default (int, bool, str or float: ``--param k=v`` is parsed
with the default's type). ``rename`` maps member names to AMBA prefixes (``{"bus": "s_axi"}``).
"""
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["Block", "BLOCKS", "register", "parse_params", "build"]


@dataclass(frozen=True)
class Block:
    name: str
    factory: Callable[..., Any]
    doc: str
    params: dict = field(default_factory=dict)
    rename: dict = field(default_factory=dict)


BLOCKS: dict[str, Block] = {}


def _amba(component, rename=None):
    """Export wrapper for blocks whose streams carry command/struct payloads (hdl.bus.amba_top)."""
    from mcf_fpga.hdl.bus.amba_top import AmbaTop
    return AmbaTop.auto(component, rename)


def register(name: str, factory: Callable[..., Any], doc: str, *, rename=None, **params):
    """Register ``factory`` under ``name`` with typed default ``params``."""
    if name in BLOCKS:
        raise ValueError(f"block {name!r} is already registered")
    for k, v in params.items():
        if not isinstance(v, (int, bool, str, float)):
            raise ValueError(f"block {name!r}: parameter {k!r} default must be int, bool, str or "
                             f"float, got {type(v).__name__}")
    BLOCKS[name] = Block(name, factory, doc, dict(params), dict(rename or {}))


def _convert(block, key, text, default):
    if isinstance(default, bool):
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"block {block!r}: parameter {key!r} must be a bool, got {text!r}")
    try:
        return type(default)(int(text, 0) if isinstance(default, int) else text)
    except ValueError:
        raise ValueError(f"block {block!r}: parameter {key!r} must be "
                         f"{type(default).__name__}, got {text!r}") from None


def parse_params(name: str, items) -> dict:
    """Parse ``["k=v", ...]`` for block ``name`` into typed keyword arguments."""
    block = get(name)
    out = {}
    for item in items or ():
        if "=" not in item:
            raise ValueError(f"parameter {item!r} must be written key=value")
        k, v = item.split("=", 1)
        if k not in block.params:
            raise ValueError(f"block {name!r} has no parameter {k!r} "
                             f"(parameters: {', '.join(block.params) or 'none'})")
        out[k] = _convert(name, k, v, block.params[k])
    return out


def get(name: str) -> Block:
    if name not in BLOCKS:
        raise ValueError(f"unknown block {name!r} (known: {', '.join(sorted(BLOCKS))})")
    return BLOCKS[name]


def build(name: str, **params):
    """Instantiate block ``name``: returns ``(component, rename)``."""
    block = get(name)
    bad = set(params) - set(block.params)
    if bad:
        raise ValueError(f"block {name!r} has no parameter(s) {sorted(bad)}")
    return block.factory(**{**block.params, **params}), block.rename


# ---------------------------------------------------------------- factories
def _axis_register_slice(data_width, user_width):
    from mcf_fpga.hdl.bus.axis_register_slice import AXISRegisterSlice
    return AXISRegisterSlice(data_width, user_width)


def _axil_regfile(n_rw, n_ro, addr_width):
    from mcf_fpga.hdl.bus import AXI4LiteRegisterFile, Register, Access
    regs = [Register(f"rw{i}", 4 * i) for i in range(n_rw)]
    regs += [Register(f"ro{i}", 4 * (n_rw + i), Access.RO) for i in range(n_ro)]
    return AXI4LiteRegisterFile(regs, addr_width)


# ---------------------------------------------------------------- registry (one line per block)
register("axis_register_slice", _axis_register_slice,
         "AXI-Stream register slice (3-beat buffer, registered valid and ready)", data_width=64, user_width=0)
register("axil_regfile", _axil_regfile,
         "AXI4-Lite register file with n_rw RW then n_ro RO registers", rename={"bus": "s_axi"},
         n_rw=4, n_ro=2, addr_width=12)
register("reliable_link", lambda **kw: __import__("mcf_fpga.hdl.nic.link", fromlist=["make_reliable_link"]).make_reliable_link(**kw), "Reliable Ethernet link endpoint: Ethernet II + CRC-32 framing, go-back-N ARQ, per-cause drop counters", data_width=64, window=8, max_packet=1536, timeout=2048, rx_slots=2, local_node=0, peer_node=1)
register("rgmii_mac", lambda: __import__("mcf_fpga.hdl.eth", fromlist=["RGMIIMac"]).RGMIIMac(), "1 Gb/s RGMII Ethernet MAC (behavioural DDR; domains tx and rx = rxc)", rename={"i": "s_axis", "o": "m_axis"})
register("eth_tx", lambda: __import__("mcf_fpga.hdl.eth", fromlist=["EthernetTx"]).EthernetTx(), "GMII transmit MAC: preamble/SFD, padding, FCS, inter-frame gap", rename={"i": "s_axis"})
register("eth_rx", lambda: __import__("mcf_fpga.hdl.eth", fromlist=["EthernetRx"]).EthernetRx(), "GMII receive MAC: FCS check and strip, bad-frame flag in tuser", rename={"o": "m_axis"})
register("kr260_standin", lambda **kw: __import__("mcf_fpga.boards.standin", fromlist=["StandInTop"]).StandInTop(**kw), "KR260 stand-in PL top: AXI-Lite registers (ID, scratch, LED, IRQ), blinky, link echo", addr_width=16, blink_bits=26, nodes=1, node_id=0)
register("dma_reader", lambda **kw: __import__("mcf_fpga.hdl.dma.top", fromlist=["DMAReaderTop"]).DMAReaderTop(**kw), "AXI4 read DMA: descriptors (s_axis_desc) -> bursts (<= max_burst, no 4 KB crossing) -> m_axis packets + m_axis_status", addr_width=40, data_width=128, len_width=32, max_burst=256, max_outstanding=4)
register("dma_writer", lambda **kw: __import__("mcf_fpga.hdl.dma.top", fromlist=["DMAWriterTop"]).DMAWriterTop(**kw), "AXI4 write DMA: descriptors (s_axis_desc) + s_axis packets -> bursts; m_axis_status per descriptor", addr_width=40, data_width=128, len_width=32, max_burst=256, max_outstanding=4)
register("pingpong_loader", lambda **kw: __import__("mcf_fpga.hdl.dma.top", fromlist=["PingPongLoaderTop"]).PingPongLoaderTop(**kw), "Ping-pong DMA loader: two on-chip buffers, one fills from DDR while the consumer drains the other", depth=256, addr_width=40, data_width=128, max_burst=16, max_outstanding=4)
register("stream_loader", lambda **kw: _amba(__import__("mcf_fpga.hdl.dma.loader", fromlist=["StreamLoader"]).StreamLoader(**kw)), "Stream loader: load descriptors (s_axis_desc {dest, addr, count}) -> AXI4 reads -> the engine's weight beats (m_axis_w, tlast on a load's final unit) and scratchpad words (m_axis_sp); m_axis_status per descriptor", addr_width=40, data_width=128, max_burst=16, max_outstanding=4, w_bits=2048)
register("command_fetcher", lambda **kw: _amba(__import__("mcf_fpga.hdl.cmdfetch", fromlist=["CommandFetcher"]).CommandFetcher(**kw), {"csr": "s_axi"}), "Command fetcher: reads the node's command stream (hdl.cmdstream) from DDR over AXI4 and runs it: engine instructions (kv_id slots patched from a directory LOOKUP), KV-pool commands, waits on counters and kv_ids, loads (also indexed by a picked token), token-picker commands; watchdog, error registers", addr_width=40, data_width=128, max_burst=16, n_counters=8, slot_rows=16, fifo_depth=64, poll_gap=16, n_slots=16, pick_slots=4)
register("kv_pool", lambda **kw: __import__("mcf_fpga.hdl.kvpool", fromlist=["KVPoolTop"]).KVPoolTop(**kw), "KV pool: slot directory (owner/replica valid/draining/invalid, reader counts), budget, AXI-Lite usage counters", n_slots=16, block_bytes=4096, kv_id_width=32, max_readers=15)
register("nic", lambda **kw: __import__("mcf_fpga.hdl.nic.nic", fromlist=["make_nic"]).make_nic(**kw), "NIC: parser/validator, two-bank route table, multicast switch, all-to-all, reduction engine, AXI-Lite registers and error counters", n_net=4, n_routes=64, max_nodes=16, max_payload=512, reduce_contexts=2)
register("packetizer", lambda **kw: __import__("mcf_fpga.hdl.packetizer", fromlist=["PacketizerTop"]).PacketizerTop(**kw), "Packetizer: meta FIFO (s_axis_meta) + payload FIFO (s_axis) -> packets {Meta header, payload} (m_axis)", data_width=64, payload_depth=64, meta_depth=8)
register("compute_engine", lambda **kw: _amba(__import__("mcf_fpga.hdl.compute.engine", fromlist=["ComputeEngine"]).ComputeEngine(**kw), {"bus": "s_axi"}), "Compute engine: layer sequencer (command FIFO, scratchpad movers) + INT4xINT8 GEMM array + vector unit + attention unit; AXI-Lite status", **__import__("mcf_fpga.hdl.compute.engine", fromlist=["KR260"]).KR260)
register("gemm_array", lambda **kw: _amba(__import__("mcf_fpga.hdl.compute.gemm", fromlist=["GemmArray"]).GemmArray(**kw)), "INT4xINT8 GEMM array: ping-pong weight tiles, group scales, 48-bit accumulation, QuantLinear requantize", pn=16, pk=32, group=128, kc_max=280, x_depth=12288, t_max=256, pack2=True, fifo_depth=4)
register("attention_unit", lambda **kw: _amba(__import__("mcf_fpga.hdl.compute.attention", fromlist=["AttentionUnit"]).AttentionUnit(**kw)), "Attention unit: query tile x local KV blocks, online-softmax fold/flat merge, partial (m, l, o) or finalized output", d=128, nq_max=96, kv_depth=4096, nb_max=256, z_max=4096, blk_max=256, pos_bits=16)
register("vector_unit", lambda **kw: _amba(__import__("mcf_fpga.hdl.compute.vector", fromlist=["VectorUnit"]).VectorUnit(**kw)), "Vector unit: saturating add, SwiGLU, quantize_pow2, RMSNorm, RoPE (golden integer definitions)", d_max=8960)
register("node", lambda **kw: __import__("mcf_fpga.hdl.node", fromlist=["make_node"]).make_node(**kw), "One MCF node: compute engine, emit packer + packetizer, NIC, a reliable link per network port (s_axis_eth<p>/m_axis_eth<p>), KV pool; one AXI-Lite slave (0x0000 engine, 0x1000 NIC, 0x2000 KV pool, 0x3000 node)", n_net=2, max_payload=2048, kr260=False, kv_slots=16)
register("rx_placer", lambda **kw: __import__("mcf_fpga.hdl.rx_placer", fromlist=["RxPlacer"]).RxPlacer(**kw), "RX placer: the NIC's local delivery (s_axis) keyed by (kind, src, layer, block) against a table of entries; matched payloads written to DDR (m_axi) at base + offset and counted (landed[e]); unmatched packets passed on (m_axis); AXI-Lite table and counters (s_axi)", rename={"csr": "s_axi"}, entries=16, data_width=128, max_payload=2048, addr_width=40, max_burst=16, max_outstanding=4, scan_lanes=2)
register("axi_write_arbiter", lambda **kw: __import__("mcf_fpga.hdl.bus.axi_write_arbiter", fromlist=["AXI4WriteArbiter"]).AXI4WriteArbiter(**kw), "AXI4 write arbiter: the AW/W/B channels of n masters (s_axi0..) onto one slave port (m_axi), round robin per burst, whole bursts, IDs 0 on the slave and restored on B", n=2, addr_width=40, data_width=128, id_width=4, max_outstanding=8)
register("token_picker", lambda **kw: _amba(__import__("mcf_fpga.hdl.token_picker", fromlist=["TokenPicker"]).TokenPicker(**kw)), "Token picker: the engine's sp_out words pass s_axis -> m_axis unchanged; picks armed on s_axis_arm {frame, skip, n, slot} take the first signed argmax of words [skip, skip+n) of a frame into tokens[slot]/values[slot]; picks, errors, error_cause counters; clear pulse", slots=4, arm_depth=4)
