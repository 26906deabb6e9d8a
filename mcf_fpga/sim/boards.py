"""Simulated node boards: Verilated ``NodeBoardTop``s (mcf_fpga/boards/node_top.py) linked as a cluster,
each seen by the host exactly as a KR260 is: a 32-bit AXI-Lite register window
(:class:`SimWindow`, the ``host.board.mmio`` interface), DDR for DMA buffers behind the HP
ports (:class:`SimDmaMemory`, the ``host.board.buffers`` allocator interface) and a clock
(:class:`SimClock`). ``host.board.node_hw.NodeHw`` drives them as it drives a board.

:class:`SimBoardCluster` is ``sim.cluster.SimCluster`` with the board top in place of the bare
node: node i's board link ``m_axis_link<p-1>`` feeds its neighbour's ``s_axis_link<q-1>``
(``sim.cluster.link_wires``; the FCS adapters sit inside the top), and ``configure`` writes the
same NIC and MAC registers through the top's window (the node's map is unchanged at 0x0000).
A top whose engine keeps K/V in DDR (``kv_region``) also gets a memory model on ``m_axi_hp3`` over
the KV region (:meth:`SimBoardCluster.kv_memory`): on a board that region is DDR kept from Linux,
outside the DMA buffers, so it is a model of its own, not a mirror of them. A node with
``kv_install`` writes that region through ``m_axi_hp2`` too (its KV installer, ``mcf_fpga/boards/node_top.py``):
then ``m_axi_hp3``'s model spans the KV region and, right after it, the DMA buffers'
DDR (:func:`install_ddr_base`), and every HP port shares that one image (as they share the
board's DDR), so installed rows are the rows the engine's streamer reads.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from mcf_fpga.spec.topology import Ring
from mcf_fpga.hdl.bus import Resp
from mcf_fpga.sim.cluster import SimCluster
from mcf_fpga.hdl.node import NodeConfig
from mcf_fpga.host.board.buffers import Buffer, reserve
from mcf_fpga.boards import node_top
from mcf_fpga.boards.node_top import LINK_OF_PORT, NodeBoardTop

__all__ = ["SimWindow", "SimDmaMemory", "SimClock", "SimBoardCluster", "board_model", "HP_PORTS",
           "DDR_BASE", "DDR_BYTES", "install_ddr_base"]

HP_PORTS = ("m_axi_hp0", "m_axi_hp1", "m_axi_hp2")
DDR_BASE = 0x0_4000_0000       #: where the simulated DMA buffers live (any 40-bit address works)
DDR_BYTES = 1 << 19
_builds = {}


def install_ddr_base(region) -> int:
    """Where a ``kv_install`` board's DMA buffers live: the first 1 MiB boundary past its KV
    region (one DDR image holds both, see the module docstring)."""
    return -(-region.end // (1 << 20)) * (1 << 20)


def board_model(cfg: NodeConfig):
    """A fresh Verilator instance of ``NodeBoardTop(cfg)`` (one build per configuration, cached
    by a key over hdl/, golden/ and the board top's own sources)."""
    from mcf_fpga.sim.verilator import build, source_key
    if cfg not in _builds:
        here = Path(node_top.__file__).resolve().parent
        texts = [(here / f).read_text() for f in ("node_top.py", "node_dma.py")]
        _builds[cfg] = build(NodeBoardTop(1, 0, cfg), key=source_key("boards.node_top.NodeBoardTop", cfg, *texts))
        return _builds[cfg]
    return _builds[cfg].new()


class SimWindow:
    """The board's AXI-Lite window on a Verilated top: ``read``/``write`` of 32-bit registers;
    an answer other than OKAY raises (the address and the answer named)."""

    def __init__(self, model, size: int = 0x10000):
        self.model, self.size = model, size

    def _check(self, offset):
        if not isinstance(offset, int) or offset < 0 or offset % 4 or offset + 4 > self.size:
            raise ValueError(f"register offset {offset!r} must be a multiple of 4 in 0..{self.size - 4:#x}")

    def read(self, offset: int) -> int:
        self._check(offset)
        v, r = self.model.axil_read(offset)
        if r != Resp.OKAY:
            raise OSError(f"AXI-Lite read of {offset:#06x} answered {r.name}")
        return v

    def write(self, offset: int, value: int):
        self._check(offset)
        if not isinstance(value, int) or not 0 <= value < 2 ** 32:
            raise ValueError(f"register value {value!r} must be in 0..0xffffffff")
        r = self.model.axil_write(offset, value)
        if r != Resp.OKAY:
            raise OSError(f"AXI-Lite write of {value:#x} to {offset:#06x} answered {r.name}")

    def close(self):
        pass


class SimClock:
    """Cycles of one simulated board: ``cycle``, ``step(n)`` (this board only)."""

    def __init__(self, model):
        self.model = model

    @property
    def cycle(self) -> int:
        return self.model.cycle

    def step(self, n: int):
        self.model.step(n)


class SimDmaMemory:
    """One DDR behind the top's HP ports, as a DMA buffer allocator (bump, ``align`` bytes).

    Every HP port has its own C++ memory model (``Model.memory``: its own ``latency``, seeded
    AR/AW/W stalls and log), all over one byte image (``share``): what the PL writes through one
    port, another port reads, with no host in between -- the RX placer's landings (HP0's writes)
    read by the stream loader (HP2's reads), as in the board's one DDR. ``Buffer.flush()`` loads
    the bytes the host changed since the buffer was last synced into the image;
    ``Buffer.invalidate()`` takes the image's bytes (whatever port wrote them). ``latency``
    (cycles before a read answers) and ``ready_seed`` (seeded random AR/AW/W stalls, port k's
    seed ``ready_seed + k``) are the memory models'."""

    def __init__(self, model, *, ports=HP_PORTS, base: int = DDR_BASE, size: int = DDR_BYTES,
                 align: int = 4096, latency: int = 20, ready_seed: int | None = None, image: str | None = None):
        # image: an attached port whose image (covering base .. base + size) every port shares
        self.mems = []
        for k, p in enumerate(ports):
            kw = dict(latency=latency, ready_seed=None if ready_seed is None else ready_seed + k)
            if image is not None:
                self.mems.append(model.memory(p, share=image, **kw))
            else:
                self.mems.append(model.memory(p, size, base=base, **kw) if k == 0
                                 else model.memory(p, share=ports[0], **kw))
        self.base, self.size, self.align, self.used = base, size, align, 0

    def allocate(self, shape, dtype):
        start, nbytes, dtype = reserve(self, shape, dtype, f"the simulated {self.size}-byte DDR")
        arr = np.zeros(shape, dtype)
        raw = arr.view(np.uint8).reshape(-1)
        shadow = np.zeros(nbytes, np.uint8)           # the image's bytes as last synced
        addr = self.base + start
        return Buffer(arr, addr, flush=lambda: self._flush(addr, raw, shadow),
                      invalidate=lambda: self._invalidate(addr, raw, shadow))

    def _flush(self, addr, raw, shadow):
        idx = np.flatnonzero(raw != shadow)
        if idx.size:
            lo, hi = int(idx[0]), int(idx[-1]) + 1
            self.mems[0].load(addr + lo, raw[lo:hi].tobytes())
            shadow[lo:hi] = raw[lo:hi]

    def _invalidate(self, addr, raw, shadow):
        raw[:] = np.frombuffer(self.mems[0].dump(addr, raw.size), np.uint8)
        shadow[:] = raw


class SimBoardCluster(SimCluster):
    """``n`` Verilated ``NodeBoardTop``s linked per ``topology`` (see the module docstring);
    ``window(i)``, ``memory(i)``, ``clock(i)`` are board i's host-facing interfaces; ``ddr_*``
    set every board's DDR model (:class:`SimDmaMemory`); ``threads`` as ``SimCluster`` (the ports that
    share a DDR image are ports of one board's model, so boards step in parallel safely)."""

    def __init__(self, n: int, topology="ring", node_cfg: NodeConfig = None, chunk: int = 32,
                 ddr_bytes: int = DDR_BYTES, ddr_latency: int = 20, ddr_stall_seed: int | None = None,
                 threads: int | None = None):
        self._ddr_args = (ddr_bytes, ddr_latency, ddr_stall_seed)
        super().__init__(n, topology, node_cfg if node_cfg is not None else NodeConfig(), chunk, threads)

    def _new_model(self, cfg):
        return board_model(cfg)

    def _port_out(self, p: int) -> str:
        return f"m_axis_link{LINK_OF_PORT[p]}"

    def _port_in(self, q: int) -> str:
        return f"s_axis_link{LINK_OF_PORT[q]}"

    def _check_topology(self, topo, cfg):
        if not isinstance(topo, Ring):
            raise ValueError(f"SimBoardCluster: a board has {len(LINK_OF_PORT)} links, so the boards "
                             f"form a ring; got {topo.name}")

    def _attach(self):
        size, latency, seed = self._ddr_args
        region = self.cfg.engine.get("kv_region")
        self._kv = [None] * self.n
        if region is not None and self.cfg.kv_install:   # HP2 writes the region: one image (docstring)
            base = install_ddr_base(region)
            self._kv = [m.memory("m_axi_hp3", base + size - region.base, base=region.base, latency=latency,
                                 ready_seed=None if seed is None else seed + 8 * i + 7)
                        for i, m in enumerate(self.nodes)]
            self._ddr = [SimDmaMemory(m, base=base, size=size, latency=latency,
                                      ready_seed=None if seed is None else seed + 8 * i,
                                      image="m_axi_hp3") for i, m in enumerate(self.nodes)]
            return
        self._ddr = [SimDmaMemory(m, size=size, latency=latency, ready_seed=None if seed is None else seed + 8 * i)
                     for i, m in enumerate(self.nodes)]
        if region is not None:
            self._kv = [m.memory("m_axi_hp3", region.size, base=region.base, latency=latency,
                                 ready_seed=None if seed is None else seed + 8 * i + 7)
                        for i, m in enumerate(self.nodes)]

    def window(self, i: int) -> SimWindow:
        return SimWindow(self.node(i))

    def memory(self, i: int) -> SimDmaMemory:
        return self._ddr[i]

    def clock(self, i: int) -> SimClock:
        return SimClock(self.node(i))

    def kv_memory(self, i: int):
        """Board ``i``'s KV region model on ``m_axi_hp3`` (``load``/``dump``), or None without one."""
        self.node(i)
        return self._kv[i]
