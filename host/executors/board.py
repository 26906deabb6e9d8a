"""Board executor: a ``host.program.Program`` on node boards (boards/node_top.py) through their DMA
front-ends, with the RTL executor's host side (``host.executors.rtl.NodeDriver``, one per node)
talking to each board through ``host.board.node_hw.NodeHw`` instead of the simulator's streams.

``run_board(program, im, prompt, cluster=...)`` takes a cluster of boards: ``configure(routes)``
(NIC identity, routes, MACs), ``step(n)`` (let ``n`` cycles pass), ``n``, and per board
``window(i)`` / ``memory(i)`` / ``clock(i)`` (register window, DMA buffer allocator, clock).
``boards.sim_board.SimBoardCluster`` is one (``cluster="sim"`` builds it): Verilated board tops
with C++ DDR models on their HP ports. A cluster with ``hw(i, **NodeHw parameters)`` supplies
each board's ``hw`` itself: ``host.board.remote.RemoteBoardCluster``, boards served by
``mcf serve-board`` over TCP (real ones, each on its own host, or simulated ones). Without
``cluster`` it opens the board this process runs on (``open_local_board``): a clear error when
no node board is there, and a refusal when there is one (a run needs every board of the cluster:
serve them and pass a ``RemoteBoardCluster``).
"""
from __future__ import annotations

import time

import torch

from hdl.cluster import KV_BASE
from hdl.kvpool import resp_layout
from hdl.node import pad8
from .rtl import (NodeDriver, RtlResult, sim_node_config, _collect, _decode_routes, _drain, _idle,
                  _kv_widths, _nic_counters, _publish, _topo_name, _INPUTS)
from .runtime import ExecError

__all__ = ["run_board", "open_local_board"]


def open_local_board(program):
    """The board this process runs on: its UIO register window (the ``mcf`` overlay), checked by
    ``host.board.node_hw.identify``. Raises OSError naming what is missing; a found board is
    refused too, because a run needs every board of the cluster (``mcf serve-board`` on each,
    ``mcf run --boards``)."""
    from host.board.driver import AXIL_BASE, AXIL_SIZE
    from host.board.mmio import open_window
    from host.board.node_hw import BoardError, identify
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
    from host.board.node_hw import NodeHw
    return NodeHw(cluster.window(i), cluster.memory(i), cluster.clock(i), **params)


def run_board(program, im, prompt, *, cluster=None, node_cfg=None, chunk: int = 64, progress=None,
              max_cycles: int = 50_000_000, stall_cycles: int = 200_000, hw_options=None) -> RtlResult:
    """Run ``program`` on the boards of ``cluster`` (module docstring; ``hw_options``: more
    ``NodeHw`` parameters, e.g. ``ring_bytes``, ``rx_slots``); returns an ``RtlResult``
    with the RTL executor's fields that a board can measure: ``logits``, ``tokens``, ``layout``,
    ``layout_states``, ``peak_slots``, ``events``, ``ttft_cycles``, ``prefill_cycles``,
    ``decode_cycles``, ``cycles_simulated``, ``nic_counters``, ``publishes``, ``issued``,
    ``seconds`` (``wire_bytes`` is None: board links are not tapped)."""
    if len(prompt) != program.prompt_len:
        raise ValueError(f"prompt has {len(prompt)} tokens, the program was compiled for {program.prompt_len}")
    if im.qm.block != program.block or im.qm.kv_bits != program.kv_bits:
        raise ValueError(f"the model was quantised with block={im.qm.block}, kv_bits={im.qm.kv_bits}; the "
                         f"program expects block={program.block}, kv_bits={program.kv_bits}")
    ncfg = node_cfg or sim_node_config(_topo_name(program.topo))
    if cluster is None:
        cluster = open_local_board(program)
    elif cluster == "sim":
        from boards.sim_board import SimBoardCluster
        cluster = SimBoardCluster(program.nodes, program.topo, ncfg, chunk=chunk)
    if cluster.n != program.nodes:
        raise ValueError(f"the cluster has {cluster.n} boards, the program runs on {program.nodes} nodes")
    t_start = time.time()
    routes, rid_max, rid_sum = _decode_routes(program)
    drivers = []
    kv_cmd_bytes, slot_bits, reader_bits = _kv_widths(ncfg)
    for n in range(program.nodes):
        drv = NodeDriver(n, program, im, prompt, None, ncfg, ncfg.engine)
        drv.kv_cmd_bytes, drv.kv_slot_bits, drv.kv_reader_bits = kv_cmd_bytes, slot_bits, reader_bits
        drv.rid_max, drv.rid_sum = rid_max, rid_sum
        drivers.append(drv)
    cluster.configure(routes)
    resp_bits = pad8(resp_layout(ncfg.kv_slots, 15).size)      # hdl.node.Node's m_axis_kvresp
    for drv in drivers:
        drv.hw = _make_hw(cluster, drv.n, engine=ncfg.engine, kv_cmd_bits=8 * kv_cmd_bytes,
                          kv_resp_bits=resp_bits, **(hw_options or {}))
        drv.hw.axil_write(KV_BASE + 0x1C, program.n_slots)     # KV-pool budget = the program's S_node
    base = max(drv.hw.cycle for drv in drivers)
    for drv in drivers:
        if drv.hw.cycle < base:
            drv.hw.step(base - drv.hw.cycle)
    gens = {drv.n: drv.run() for drv in drivers}
    publishes, total = [], sum(len(ops) for ops in program.ops)
    cycles, last_progress, last_state = 0, 0, None
    while gens:
        for n in list(gens):
            try:
                next(gens[n])
            except StopIteration:
                del gens[n]
        if not gens:
            break
        if all(d.waiting_publish is not None for d in drivers if d.n in gens):
            steps = {d.waiting_publish for d in drivers if d.n in gens}
            if len(steps) != 1:
                raise ExecError(f"nodes wait to publish different decode steps {sorted(steps)}")
            _drain(cluster, drivers, chunk, stall_cycles)
            s_ = steps.pop()
            group = next(op.dsts for op in program.ops[drivers[0].n] if op.kind == "publish" and op.step == s_)
            publishes.append({"step": s_, "group": tuple(group), "cycles": _publish(cluster, drivers, program, group)})
            for d in drivers:
                d.waiting_publish = None
            continue
        cluster.step(chunk)
        cycles += chunk
        for drv in drivers:
            _collect(drv)
        state = (sum(d.done_ops for d in drivers), sum(d.hw.pending(p) for d in drivers for p in _INPUTS))
        if state != last_state:
            last_state, last_progress = state, cycles
            if progress:
                progress(state[0], total)
        if cycles - last_progress > stall_cycles or cycles > max_cycles:
            where = {d.n: (d.done_ops, program.ops[d.n][d.done_ops].kind if d.done_ops < len(program.ops[d.n])
                           else "end") for d in drivers if d.n in gens}
            status = {d.n: (hex(d.hw.axil_read(0x0000)[0]), d.hw.axil_read(0x0004)[0], d.cmd_count,
                            {p: d.hw.pending(p) for p in _INPUTS}) for d in drivers}
            raise ExecError(f"boards made no progress for {cycles - last_progress} cycles; nodes at (op index, "
                            f"kind) {where}; engine (STATUS, retired, queued, bytes pending on its inputs) "
                            f"{status}; NIC counters { {d.n: _nic_counters(d.hw) for d in drivers} }")
    for _ in range(max_cycles // chunk):             # drain: every engine finishes its queue
        if all(_idle(d) for d in drivers):
            break
        cluster.step(chunk)
        for drv in drivers:
            _collect(drv)
    nic = {d.n: _nic_counters(d.hw) for d in drivers}
    for drv in drivers:
        st, _ = drv.hw.axil_read(0x0000)
        if (st >> 8) & 0xFF:
            raise ExecError(f"node {drv.n}: engine error flags {(st >> 8) & 0xFF:#x} (STATUS {st:#x})")
    rows = {}
    for d in drivers:
        rows.update(d.logits)
    first = [d for d in drivers if d.t_logits is not None]
    lead = drivers[program.leader]
    return RtlResult(
        logits=torch.cat([rows[k] for k in sorted(rows)]), tokens=lead.tokens[:program.max_new_tokens],
        decode_cycles=(lead.t_tokens[-1] - first[0].t_logits) if lead.t_tokens and first else None,
        layout={d.n: sorted(d.layout_prefill) for d in drivers},
        layout_states={d.n: d.layout_prefill for d in drivers},
        ttft_cycles=(first[0].t_logits - base) if first else None,
        prefill_cycles=max(d.marks.get("prefill_done", 0) for d in drivers) - base,
        wire_bytes=None, peak_slots=[d.pool.peak_slots for d in drivers],
        events=[d.events for d in drivers], seconds=time.time() - t_start,
        cycles_simulated=max(d.hw.cycle for d in drivers) - base, publishes=publishes, nic_counters=nic,
        issued=[d.issued for d in drivers])
