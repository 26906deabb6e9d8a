"""Board executor: a ``host.program.Program`` on node boards (mcf_fpga/boards/node_top.py) through their DMA
front-ends, with the RTL executor's host side (``host.executors.rtl.NodeDriver``, one per node)
talking to each board through ``host.board.node_hw.NodeHw`` instead of the simulator's streams.

``run_board(program, im, prompt, cluster=...)`` takes a cluster of boards: ``configure(routes)``
(NIC identity, routes, MACs), ``step(n)`` (let ``n`` cycles pass), ``n``, and per board
``window(i)`` / ``memory(i)`` / ``clock(i)`` (register window, DMA buffer allocator, clock).
``sim.boards.SimBoardCluster`` is one (``cluster="sim"`` builds it): Verilated board tops
with C++ DDR models on their HP ports. A cluster with ``hw(i, **NodeHw parameters)`` supplies
each board's ``hw`` itself: ``host.board.remote.RemoteBoardCluster``, boards served by
``mcf serve-board`` over TCP (real ones, each on its own host, or simulated ones). Without
``cluster`` it opens the board this process runs on (``open_local_board``): a clear error when
no node board is there, and a refusal when there is one (a run needs every board of the cluster:
serve them and pass a ``RemoteBoardCluster``).
"""
from __future__ import annotations

from mcf_fpga.hdl.kvpool import resp_layout
from mcf_fpga.hdl.node import pad8
from .rtl import RtlResult, run_rtl, sim_node_config, _kv_widths, _topo_name

__all__ = ["run_board", "open_local_board"]


def open_local_board(program):
    """The board this process runs on: its UIO register window (the ``mcf`` overlay), checked by
    ``host.board.node_hw.identify``. Raises OSError naming what is missing; a found board is
    refused too, because a run needs every board of the cluster (``mcf serve-board`` on each,
    ``mcf run --boards``)."""
    from mcf_fpga.host.board.driver import AXIL_BASE, AXIL_SIZE
    from mcf_fpga.host.board.mmio import open_window
    from mcf_fpga.host.board.node_hw import BoardError, identify
    # UIO only: the device exists only while the overlay is loaded, so no access can reach an
    # unprogrammed PL (which stalls the AXI bus instead of answering)
    window = open_window(AXIL_BASE, AXIL_SIZE, prefer=("uio",))
    try:
        info = identify(window)
    except BoardError as exc:
        raise OSError(f"the register window is not a node board: {exc}") from None
    finally:
        window.close()
    raise OSError(f"found a node board ({info}), but a {program.nodes}-node program needs every board: "
                  f"run `mcf serve-board` on each and pass --boards host:port,... (node k = the k-th)")


def _make_hw(cluster, i, **params):
    """Board ``i``'s ``hw``: the cluster's own (``hw(i, **params)``, e.g. a served board,
    ``host.board.remote``), else a ``NodeHw`` on its window, memory and clock."""
    if hasattr(cluster, "hw"):
        return cluster.hw(i, **params)
    from mcf_fpga.host.board.node_hw import NodeHw
    return NodeHw(cluster.window(i), cluster.memory(i), cluster.clock(i), **params)


def _kv_event_bits(ncfg) -> int:
    """Width of a kv_install node's ``m_axis_kvevent`` frames (``hdl.node.Node.kv_event_layout``)."""
    from mcf_fpga.hdl.kvpool import event_layout
    from mcf_fpga.hdl.meta import kv_id_layout
    return pad8(event_layout(kv_id_layout(ncfg.nic.meta).size, ncfg.kv_slots, 15).size)


def run_board(program, im, prompt, *, cluster=None, node_cfg=None, hw_options=None, **kw) -> RtlResult:
    """Run ``program`` on the boards of ``cluster`` (module docstring; ``hw_options``: more
    ``NodeHw`` parameters, e.g. ``ring_bytes``, ``rx_slots``): ``host.executors.rtl.run_rtl``'s
    loop and result (``kw``: its ``chunk``, ``progress``, ``max_cycles``, ``stall_cycles``,
    ``query_first``) with one ``NodeHw`` per board; ``wire_bytes`` is None (board links are not
    tapped). With ``NodeConfig.fetcher`` each node runs its fetched stream from DMA buffers
    ``NodeHw.memory`` allocates (``_start_fetcher``; on a served board through ``RemoteHw.memory``); with
    ``NodeConfig.rx_entries`` its RX placer is programmed through the node's window as on the
    simulated node (``_program_rx_placer``: ``memory("m_axi_rx", share="m_axi_load")`` is the
    image's buffer, where the landing zones are); a board whose engine keeps
    K/V in DDR has its KV rows compared with IntModel after the run when the cluster has
    ``kv_memory(i)`` (``SimBoardCluster``: the HP3 models)."""
    program.prompts(prompt)          # refused before any work: wrong count or length
    ncfg = node_cfg or sim_node_config(_topo_name(program.topo))
    if cluster is None:
        cluster = open_local_board(program)
    elif cluster == "sim":
        from mcf_fpga.sim.boards import SimBoardCluster
        cluster = SimBoardCluster(program.nodes, program.topo, ncfg, chunk=kw.get("chunk", 64))
    if cluster.n != program.nodes:
        raise ValueError(f"the cluster has {cluster.n} boards, the program runs on {program.nodes} nodes")

    kv_cmd_bytes, _slot_bits, _reader_bits = _kv_widths(ncfg)
    resp_bits = pad8(resp_layout(ncfg.kv_slots, 15).size)      # hdl.node.Node's m_axis_kvresp
    # NIC installs: NodeHw queues the pool's events (m_axis_kvevent) for the host's PoolMirror
    events = {"kv_event_bits": _kv_event_bits(ncfg)} if ncfg.kv_install else {}

    def make_hw(cl, n):
        return _make_hw(cl, n, engine=ncfg.engine, kv_cmd_bits=8 * kv_cmd_bytes, kv_resp_bits=resp_bits,
                        **events, **(hw_options or {}))
    return run_rtl(program, im, prompt, node_cfg=ncfg, cluster=cluster, make_hw=make_hw, **kw)
