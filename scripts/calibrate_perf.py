#!/usr/bin/env python
"""Calibrate the performance model (mcf_fpga/host/perfmodel.py) on the Verilated node.

Every parameter of ``host.perfmodel`` comes from here, measured on ``sim.cluster.SimCluster``
with ``host.executors.rtl.sim_node_config()`` (the node the RTL executor runs):

* engine instructions (SPW, SPR, GEMM, VEC per sub-op, KVW, ATT, FOLD, EMIT): batches of identical
  instructions at several shapes are pushed on ``s_axis_cmd`` (with their ``s_axis_w`` weight
  tiles / ``s_axis_sp`` words, as the executor feeds them) and timed by polling RETIRED (0x0004);
  the cycles per instruction are fitted by least squares to a linear function of shape features
  (``host.perfmodel.FEATURES``);
* links: an EMIT of n bytes from node 0 to node 1 on a cluster stepped every 4 cycles; the
  cycle each frame enters the wire and the cycle the packet leaves node 1's ``m_axis_rx`` give the
  frame size/overhead, the NIC/packetizer latency and the wire rate; the same for a 2-hop path
  (4-node ring) gives the per-hop forwarding latency;
* KV pool: cycles from a command on ``s_axis_kvcmd`` to its answer on ``m_axis_kvresp``;
* K/V in DDR (``params["kv_ddr"]``, :func:`calibrate_ddr`): the same kind of batches on
  ``sim_ddr_node_config()`` (the engine with a KV region, the memory model at 100 cycles latency
  with ready stalls on ``m_axi_kv``): KVW to DDR, KVL, ATT from a loaded window, KVL + ATT pairs,
  prefetched chains, the KVW -> KVL fence and KVS per install packet (:func:`measure_ddr`).

Writes ``results/perf_calibration.json`` (or ``--out``); prints the fit residuals and, last,
the run time. ``python scripts/calibrate_perf.py [--quick] [--validate]``: ``--validate`` then
runs the validation configurations (:data:`VALIDATION` on the on-chip node, :data:`VALIDATION_DDR`
on the DDR node) on ``run_rtl`` and next to ``host.perfmodel.predict``, writes
``results/perf_validation.csv`` and prints the mean absolute error per node;
``--validate-only onchip|ddr|both`` validates an existing calibration.
"""
from __future__ import annotations

import argparse
import json
import os
import time


import numpy as np  # noqa: E402
import torch  # noqa: E402

from mcf_fpga.golden import numerics as nx  # noqa: E402
from mcf_fpga.spec.topology import RouteTables  # noqa: E402
from mcf_fpga.hdl.compute.engine import INSTR  # noqa: E402
from mcf_fpga.spec.instr import AttFlags, EmitFlags, EngineOpcode, FoldFlags, GemmFlags, KvsFlags, KvwFlags, SpwFlags  # noqa: E402
from mcf_fpga.hdl.compute.program import gemm_weight_beats, instr  # noqa: E402
from mcf_fpga.hdl.compute.vector import VecOp  # noqa: E402
from mcf_fpga.spec.meta import Collective, MetaFields, MetaOp, ReduceOp, Stage  # noqa: E402
from mcf_fpga.golden.header import pack_int  # noqa: E402
from mcf_fpga.host import perfmodel as pm  # noqa: E402
from mcf_fpga.host.executors.kv_ddr import load_order  # noqa: E402

torch.set_num_threads(1)

#: the ATT flags timed: prefill's causal partials, decode's flat merge, and its phase 2 (the
#: external max)
CAUSAL = AttFlags(causal=True)
FLAT = AttFlags(causal=True, flat=True)
FLAT_EXT = AttFlags(causal=True, flat=True, ext_m=True)


class Bench:
    """Two (or four) Verilated nodes, routes d -> d; node 0 is the device under measurement.
    ``ncfg``: a node configuration (default ``sim_node_config`` with ``engine``); with K/V in DDR
    (an engine ``kv_region``) node 0's ``m_axi_kv`` gets the AXI4 memory model as ``run_rtl``
    attaches it (``kv_latency`` cycles, random ready stalls seeded 1)."""

    def __init__(self, n=2, chunk=4, engine=None, ncfg=None, kv_latency=100):
        from mcf_fpga.sim.cluster import SimCluster
        from mcf_fpga.host.executors.rtl import SIM_ENGINE, sim_node_config
        self.ncfg = ncfg or sim_node_config("ring", engine=dict(engine or SIM_ENGINE))
        self.e = dict(self.ncfg.engine)
        self.cl = SimCluster(n, topology="ring", node_cfg=self.ncfg, chunk=chunk)
        routes = RouteTables(self.cl.topo, self.ncfg.nic.n_routes)
        for d in range(n):
            for x in range(n):
                routes.add(x, [d], route_id=d)
        self.cl.configure(routes)
        self.hw = self.cl.node(0)
        self.wcache = {}
        region = self.e.get("kv_region")
        if region is not None:
            self.hw.memory("m_axi_kv", region.size, base=region.base, latency=kv_latency, ready_seed=1)

    # ---- queues (the same encodings as host.executors.rtl.NodeDriver)
    def cmd(self, instrs):
        nb = -(-INSTR.size // 8)
        self.hw.push("s_axis_cmd", b"".join(int(INSTR.const(i).as_value().value).to_bytes(nb, "little")
                                             for i in instrs))

    def feed(self, n):
        if n:
            self.hw.push("s_axis_sp", bytes(4 * n))

    def weights(self, K, N):
        key = (K, N)
        if key not in self.wcache:
            g = torch.Generator().manual_seed(K * 7 + N)
            lin = nx.quantize_linear(torch.randn(N, K, generator=g) * 0.05, None, group=self.e["group"])
            pn, pk = self.e["pn"], self.e["pk"]
            nb = pn * pk * 4 // 8
            frames, cur = [], b""
            for bt in gemm_weight_beats(lin, pn, pk):
                cur += int(bt["data"]).to_bytes(nb, "little")
                if bt["last"]:
                    frames.append(cur)
                    cur = b""
            self.wcache[key] = frames
        for f in self.wcache[key]:
            self.hw.push("s_axis_w", f)

    def retired(self):
        return self.hw.axil_read(0x0004)[0]

    def run(self, instrs, feed_words=0, gemm=None, poll=4, limit=2_000_000):
        """Cycles from pushing ``instrs`` until all retired (per instruction, batch mean)."""
        r0 = self.retired()
        for _ in range(len(instrs) if gemm else 0):
            self.weights(*gemm)
        t0 = self.hw.cycle
        self.cmd(instrs)
        self.feed(feed_words)
        while self.retired() < r0 + len(instrs):
            self.cl.step(poll)
            if self.hw.axil_read(0x0000)[0] >> 8 or self.hw.cycle - t0 > limit:
                raise RuntimeError(f"calibration: {instrs[0]} did not retire (STATUS "
                                   f"{self.hw.axil_read(0x0000)[0]:#x}, {self.hw.cycle - t0} cycles)")
        st = self.hw.axil_read(0x0000)[0]
        if (st >> 8) & 0xFF:
            raise RuntimeError(f"calibration: engine error {st:#x} on {instrs[0]}")
        for p in ("m_axis_sp", "m_axis_rx"):
            self.hw.pull_all(p)
        return (self.hw.cycle - t0) / len(instrs)


def vec(sub, a, dst, n0, ln, b=0, n1=0, ed=0, bits=8):
    return instr(EngineOpcode.VEC, sub=sub, a=a, b=b, dst=dst, n0=n0, n1=n1, len=ln, ed=ed, frac=nx.FA, bits=bits,
                 eps_q=1)


def measure(bench, quick=False):
    """{kind: [(shape dict, cycles per instruction)]} over the shapes the executor uses."""
    e = bench.e
    d, pn = e["head_dim"], e["pn"]
    B = 40000                                          # a far scratchpad region for outputs
    rep = 2 if quick else 3
    out = {}

    def add(kind, shape, cyc):
        out.setdefault(kind, []).append((shape, cyc))

    # SPW plain / unpack, to SP and EM
    for n in (16, 64, 256, 1024):
        add("spw", dict(n0=n, words=n), bench.run([instr(EngineOpcode.SPW, dst=0, n0=n)] * rep, feed_words=n * rep))
    for n in (64, 256, 1024):
        for bits in (8, 4):
            w = n * bits // 32
            add("spw", dict(n0=n, words=w),
                bench.run([instr(EngineOpcode.SPW, flags=SpwFlags(packed=True), bits=bits % 16, dst=0, n0=n)] * rep, feed_words=w * rep))
    for n in (8, 64):
        add("spw", dict(n0=n, words=n // 4),
            bench.run([instr(EngineOpcode.SPW, flags=SpwFlags(em=True, packed=True), bits=8, dst=0, n0=n)] * rep, feed_words=n // 4 * rep))
    for n in (16, 256, 1024):
        add("spr", dict(n0=n), bench.run([instr(EngineOpcode.SPR, a=0, n0=n)] * rep))
    # GEMM
    shapes = [(T, K, N) for T in (1, 4, 16, 32) for K, N in ((64, 16), (64, 64), (64, 256), (128, 64), (128, 16))
              if T * K // bench.e["pk"] <= bench.e["x_depth"]]
    if quick:
        shapes = shapes[::2]
    for T, K, N in shapes:
        for reuse in (0, 1):
            ins = [instr(EngineOpcode.GEMM, flags=GemmFlags(reuse=bool(reuse)), a=0, ea=0, n0=T, len=K, n1=N, dst=B)] * rep
            if reuse:                                 # the first one loads x
                ins = [instr(EngineOpcode.GEMM, a=0, ea=0, n0=T, len=K, n1=N, dst=B)] + ins
                bench.run(ins[:1], gemm=(K, N))
                ins = ins[1:]
            add("gemm", dict(T=T, K=K, N=N, reuse=reuse), bench.run(ins, gemm=(K, N)))
    # VEC
    for sub, name in ((VecOp.ADD, "add"), (VecOp.SWIGLU, "swiglu"), (VecOp.QUANT, "quant"),
                      (VecOp.RMSNORM, "rmsnorm")):
        for rows, ln in ((1, 16), (1, 64), (4, 64), (16, 64), (32, 64), (16, 128), (32, 16), (64, 16)):
            add("vec_" + name, dict(rows=rows, len=ln),
                bench.run([vec(sub, 0, B, rows, ln, b=8000, ed=0)] * rep))
    for T, heads in ((1, 2), (1, 4), (16, 2), (16, 4), (32, 4)):
        add("vec_rope", dict(rows=T * heads, len=d),
            bench.run([vec(VecOp.ROPE, 0, B, T, d, b=8000, n1=heads)] * rep))
    # KVW
    for n, hk in ((1, 2), (16, 2), (32, 2), (16, 1)):
        add("kvw", dict(rows=n * hk, len=d),
            bench.run([instr(EngineOpcode.KVW, flags=KvwFlags(v=False), a=0, n0=n, n1=hk, so=hk * d, len=d, ea=0, eo=hk, ei=1,
                             kvb=0, kvs=64)] * rep))
    # ATT (non-final partials; causal, keys all visible, and a diagonal block)
    for T, r, ntok, flags in ((16, 2, 16, CAUSAL), (16, 2, 8, CAUSAL), (1, 2, 16, FLAT), (1, 2, 4, FLAT),
                              (32, 2, 16, CAUSAL), (16, 1, 16, CAUSAL), (1, 2, 16, FLAT_EXT), (8, 2, 32, CAUSAL)):
        add("att", dict(rows=T * r, keys=ntok, diag=0),
            bench.run([instr(EngineOpcode.ATT, flags=flags, a=0, so=4 * d, len=d, n0=T, n1=r, ea=0, eo=4, ei=1,
                             pos0=100, kvb=0, nblk=1, bs=32, ntok=ntok, kpos=0, b=9000, dst=B)] * rep))
    for T, r, ntok in ((16, 2, 16), (8, 2, 32), (4, 2, 4), (32, 1, 8)):     # acc: in place, as the compiler
        add("att", dict(rows=T * r, keys=ntok, diag=0, acc=1),
            bench.run([instr(EngineOpcode.ATT, sub=2, flags=CAUSAL, a=0, so=4 * d, len=d, n0=T, n1=r, ea=0, eo=4,
                             ei=1, pos0=100, kvb=0, nblk=1, bs=32, ntok=ntok, kpos=0, b=B, dst=B)] * rep))
    for T in (16, 32):
        add("att", dict(rows=T * 2, keys=T, diag=1),
            bench.run([instr(EngineOpcode.ATT, flags=CAUSAL, a=0, so=4 * d, len=d, n0=T, n1=2, ea=0, eo=4, ei=1,
                             pos0=0, kvb=0, nblk=1, bs=32, ntok=T, kpos=0, dst=B)] * rep))
    # FOLD (partials of zeros: m = 0, l = 0)
    for T, r, nblk, final in ((16, 2, 1, 1), (16, 2, 3, 1), (16, 2, 6, 1), (1, 2, 1, 1), (1, 2, 4, 0),
                              (1, 2, 1, 0), (32, 2, 2, 1), (16, 2, 3, 0)):
        add("fold", dict(rows=T * r, parts=T * r * nblk, final=final),
            bench.run([instr(EngineOpcode.FOLD, flags=FoldFlags(final=bool(final)), a=0, b=4000, nblk=nblk, n0=T, n1=r, so=4 * d, len=d,
                             dst=B)] * rep))
    # EMIT to node 1 (plain and packed), then let the packets drain
    meta = pack_int(MetaFields(op=MetaOp.KV_REPLICA, stage=Stage.PREFILL, src=0, dst=1, kv_id=(0, 1), route_id=1,
                               collective=Collective.P2P, reduce_op=ReduceOp.NONE, length=0))
    plain, packed = EmitFlags(), EmitFlags(packed=True)
    for n, flags, bits in ((16, plain, 0), (64, plain, 0), (256, plain, 0), (64, packed, 8), (512, packed, 8),
                           (2048, packed, 8), (64, EmitFlags(em=True, packed=True), 8)):
        cyc = bench.run([instr(EngineOpcode.EMIT, flags=flags, bits=bits, a=0, n0=n, meta=meta)])
        nbytes = n * (bits or 32) // 8
        add("emit", dict(n0=n, bytes=nbytes), cyc)
        bench.cl.step(4000)
        bench.cl.node(1).pull_all("m_axis_rx")
    return out


#: ATT jobs of the K/V-in-DDR calibration: (T, heads per KV head, keys, flags[, acc]); keys <= the
#: node's 32-row staging windows; acc: ATT sub bit1 in place (the running prefill fold)
DDR_ATT = ((16, 2, 16, CAUSAL), (16, 2, 8, CAUSAL), (1, 2, 16, FLAT), (1, 2, 4, FLAT), (32, 2, 16, CAUSAL),
           (16, 1, 16, CAUSAL), (1, 2, 16, FLAT_EXT), (8, 2, 32, CAUSAL), (1, 2, 32, FLAT), (32, 2, 32, CAUSAL),
           (4, 2, 24, CAUSAL), (16, 2, 16, CAUSAL, 1), (8, 2, 32, CAUSAL, 1), (4, 2, 4, CAUSAL, 1))


def measure_ddr(bench, quick=False, att_shapes=DDR_ATT, kvl_keys=(4, 8, 16), q_base=0, b_base=9000, out_base=40000):
    """The K/V-in-DDR instructions on ``bench`` (a node with an engine ``kv_region``), timed by
    RETIRED like :func:`measure`: {kind: [(shape, cycles)]} with

    * ``kvw``: KVW to DDR (per instruction, batches of identical ones);
    * ``kvl``: two KVLs into the two empty windows (per instruction);
    * ``att``: ATT jobs from a window whose load finished long before (the batch of ``rep`` ATTs
      reuses the window, the last one releases it);
    * ``pair``: KVL then its ATT queued together (the ATT waits for the load; per pair);
    * ``chain``: m ATT jobs queued as the executor queues them (``kv_ddr.load_order``: every
      next block prefetched one job ahead; per job);
    * ``fence``: a KVW, then a KVL of other rows (the KVL waits for the KVW's B responses);
    * ``kvs``: KVS of n records (one install packet to node 1) from an idle node, and batches.

    Shapes carry what the model's features need (``rows``/``keys`` of the ATT, ``beats`` of the
    load, ``words`` of the KVS). ``att_shapes`` (T, heads per KV head, keys, flags) and
    ``kvl_keys`` are the shapes timed (``DDR_ATT`` fits the simulated node); ``q_base``,
    ``b_base``, ``out_base``: scratchpad words of the queries, the ATT's B operand, the output.
    On a node with NIC installs (``kv_install``) node 1's installer takes the KVS packets (a
    record without an INSTALLING entry: ``drop_state``), so they are counted there."""
    e = bench.e
    region = e["kv_region"]
    d, wr = e["head_dim"], e["kv_win_rows"]
    rb = region.row_bytes
    B = out_base
    rep = 2 if quick else 3
    out = {}

    def add(kind, shape, cyc):
        out.setdefault(kind, []).append((shape, cyc))

    def att(T, r, ntok, flags, w, rel=1, acc=0):
        return instr(EngineOpcode.ATT, flags=flags, sub=rel | 2 * acc, a=q_base, so=4 * d, len=d, n0=T, n1=r, ea=0,
                     eo=4, ei=1, pos0=100, kvb=w * wr, nblk=1, bs=wr, ntok=ntok, kpos=0, b=B if acc else b_base, dst=B)

    def kvl(slot, ntok, w):
        return instr(EngineOpcode.KVL, b=slot, kvb=0, ntok=ntok, dst=w)

    def settle(beats=0):                # let every load/write finish (a load of ``beats`` bus beats:
        bench.cl.step(1000 + 2 * beats)     # ~1 cycle a beat after ~105 at KR260 size, the refit's fit)

    def job(T, r, ntok):                 # (att_pairs: the model's pair of the job's ATT, its rows to B)
        return dict(pm._kind_shape(dict(att(T, r, ntok, 0, 0)), e)[1], beats=2 * ntok * rb // region.bus_bytes)
    # KVW to DDR (slot 1.., head g at row g * n)
    for n, hk in ((1, 2), (8, 2), (16, 2), (16, 1), (32, 1)):
        add("kvw", dict(rows=n * hk, len=d),
            bench.run([instr(EngineOpcode.KVW, flags=KvwFlags(v=k % 2 == 1), a=0, n0=n, n1=hk, so=hk * d, len=d, ea=0, eo=hk, ei=1, b=1 + k,
                             kvb=0, kvs=n) for k in range(rep)]))
        settle()
    # KVL alone: two loads into the two empty windows, then release them
    for ntok in kvl_keys:
        add("kvl", dict(keys=ntok), bench.run([kvl(1, ntok, 0), kvl(2, ntok, 1)]))
        settle()
        bench.run([att(1, 2, ntok, 3, 0), att(1, 2, ntok, 3, 1)])
    # ATT from a loaded window; KVL + ATT queued together; a prefetched chain
    for T, r, ntok, flags, *acc in (att_shapes[::2] if quick else att_shapes):
        bench.run([kvl(1, ntok, 0)])
        settle(job(T, r, ntok)["beats"])     # timed from a full window: no part of the load
        if acc and acc[0]:               # acc jobs: their ATT alone (the pair and chain are the loads')
            add("att", dict(job(T, r, ntok), diag=0, acc=1),
                bench.run([att(T, r, ntok, flags, 0, rel=0, acc=1)] * (rep - 1) + [att(T, r, ntok, flags, 0, acc=1)]))
            settle()
            continue
        add("att", dict(job(T, r, ntok), diag=0),
            bench.run([att(T, r, ntok, flags, 0, rel=0)] * (rep - 1) + [att(T, r, ntok, flags, 0)]))
        seq = []
        for _ in range(rep):
            seq += [kvl(1, ntok, 0), att(T, r, ntok, flags, 0)]
        add("pair", job(T, r, ntok), 2 * bench.run(seq))
        settle()
        m = 6
        chain, win = [], {}
        for what, j in load_order([EngineOpcode.ATT] * m):
            if what == "kvl":
                win[j] = len(win) % 2
                chain.append(kvl(1 + j, ntok, win[j]))
            else:
                chain.append(att(T, r, ntok, flags, win[j]))
        add("chain", dict(job(T, r, ntok), jobs=m), len(chain) * bench.run(chain) / m)
        settle()
    # the write fence: KVW (rows of slot 3) then a KVL of slot 1
    for n, hk in ((1, 2), (16, 2)):
        cyc = 2 * bench.run([instr(EngineOpcode.KVW, flags=KvwFlags(v=False), a=0, n0=n, n1=hk, so=hk * d, len=d, ea=0, eo=hk, ei=1, b=3,
                                   kvb=0, kvs=n), kvl(1, 4, 0)])
        add("fence", dict(rows=n * hk, len=d), cyc)
        settle()
        bench.run([att(1, 2, 4, 3, 0)])
    # KVS: one install packet of n records to node 1 (from idle; then batches)
    meta = pack_int(MetaFields(op=MetaOp.KV_REPLICA, stage=Stage.PREFILL, src=0, dst=1, kv_id=(0, 1), route_id=1,
                               collective=Collective.P2P, reduce_op=ReduceOp.NONE, length=0))
    per = (bench.ncfg.nic.max_payload - 8) // rb
    for n in sorted({x for x in ((1, 16) if quick else (1, 4, 16, 32)) if x < per} | {per}):   # one packet each
        for k in (1, rep):
            seen = installer_packets(bench.cl.node(1)) if bench.ncfg.kv_install else 0
            cyc = bench.run([instr(EngineOpcode.KVS, flags=KvsFlags(last=True), b=1, kvb=0, ntok=n, meta=meta)] * k)
            add("kvs", dict(records=n, words=2 + n * rb // 4, batch=k), cyc)
            bench.cl.step(2000 * k)
            if bench.ncfg.kv_install:
                got = installer_packets(bench.cl.node(1)) - seen
                if got != k:
                    raise RuntimeError(f"calibration: {k} KVS of {n} records reached node 1's installer as {got}")
                continue
            got = bench.cl.node(1).pull_all("m_axis_rx")
            if len(got) != k or any(len(g) != 16 + 8 + n * rb for g in got):
                raise RuntimeError(f"calibration: KVS of {n} records delivered {[len(g) for g in got]} bytes")
    return out


def installer_packets(hw) -> int:
    """Packets the node's KV installer (``NodeConfig.kv_install``) has taken: written or dropped."""
    from mcf_fpga.hdl.kvinstall import REGISTERS as IREGS
    from mcf_fpga.hdl.node import KVINSTALL_WINDOW
    off = {r.name: r.offset for r in IREGS}
    return sum(hw.axil_read(KVINSTALL_WINDOW[1] + off[n])[0]
               for n in ("installed", "drop_state", "drop_malformed", "drop_full"))


def fit_ddr(samples, engine):
    """Coefficients of the K/V-in-DDR kinds (``host.perfmodel.KV_DDR_KINDS``) from
    :func:`measure_ddr`'s samples: ATT, KVW, KVL, KVS fitted like :func:`fit`; the block load
    (``kvload``: from the KVL's start to the window full) from each pair minus the measured ATT
    of the same shape from a loaded window; the fence from each KVW+KVL batch minus the measured
    KVW of its shape and the mean KVL. (Differences of measurements, not of fits: the ATT fit's
    few-% residual would be as large as the load.) Returns (coefficients, max relative residual
    per kind)."""
    direct = {k: samples[k] for k in ("att", "kvw", "kvl", "kvs")}
    coefs, resid = fit(direct, engine)

    def measured(kind, s, keys):
        return next(c for t, c in samples[kind] if all(t[k] == s[k] for k in keys))
    kvl = float(np.mean([c for _s, c in samples["kvl"]]))
    loads = [(dict(beats=s["beats"]), c - measured("att", s, ("rows", "keys"))) for s, c in samples["pair"]]
    fences = [({}, max(1.0, c - measured("kvw", s, ("rows",)) - kvl)) for s, c in samples["fence"]]
    more, r2 = fit({"kvload": loads, "kvfence": fences}, engine)
    coefs.update(more)
    resid.update(r2)
    return coefs, resid


def check_ddr(params, samples, model):
    """{"pair"/"chain": [(shape, measured, predicted)]}: the model's cycles of each measured KVL+ATT
    pair and prefetched chain (``perfmodel.batch_cycles`` on ``kv_in_ddr(params, send="emit",
    install="host")``)."""
    P = pm.kv_in_ddr(params, send="emit", install="host")
    out = {}
    for kind in ("pair", "chain"):
        rows = []
        for s, c in samples[kind]:
            jobs = s.get("jobs", 1)
            att = ("att", {k: s[k] for k in ("rows", "keys", "pair") if k in s})
            rows.append((s, c, pm.batch_cycles(P, [att] * jobs, model) / jobs))
        out[kind] = rows
    return out


def fit(samples, engine):
    """Least-squares fit of cycles = sum(coef * feature) for every instruction kind, minimising the
    relative error (small and large shapes count alike)."""
    coefs, resid = {}, {}
    for kind, rows in samples.items():
        names = pm.FEATURES[kind]
        X = np.array([[pm.feature(kind, n, s, engine) for n in names] for s, _ in rows], dtype=float)
        y = np.array([c for _, c in rows], dtype=float)
        c, *_ = np.linalg.lstsq(X / y[:, None], np.ones_like(y), rcond=None)   # relative error
        pred = X @ c
        coefs[kind] = dict(zip(names, [float(v) for v in c]))
        resid[kind] = float(np.max(np.abs(pred - y) / y))
    return coefs, resid


def measure_links(quick=False):
    """Frames and latencies of one message over 1 and 2 hops, stepped every 4 cycles."""
    out = {"one_hop": [], "two_hop": []}
    for hops, n_nodes in ((1, 2), (2, 4)):
        bench = Bench(n=n_nodes, chunk=4)
        dst = hops
        wire = []

        def fate_for(i, p):
            def fate(frame):
                wire.append((bench.cl.cycle, i, p, len(frame)))
                return [frame]
            return fate
        for i, p, _j, _q in bench.cl.wires:
            bench.cl.fault(i, p, fate_for(i, p))
        meta = pack_int(MetaFields(op=MetaOp.KV_REPLICA, stage=Stage.PREFILL, src=0, dst=dst, kv_id=(0, 1),
                                   route_id=dst, collective=Collective.P2P, reduce_op=ReduceOp.NONE,
                                   length=0))
        for n in ((64, 512, 2048) if quick else (16, 64, 256, 512, 1024, 2048)):
            wire.clear()
            hw, rx = bench.hw, bench.cl.node(dst)
            t0 = hw.cycle
            bench.cmd([instr(EngineOpcode.EMIT, flags=EmitFlags(packed=True), bits=8, a=0, n0=n, meta=meta)])
            got = None
            while got is None and hw.cycle - t0 < 100_000:
                bench.cl.step(4)
                fr = rx.pull_all("m_axis_rx")
                if fr:
                    got = (hw.cycle - t0, len(fr[0]))
            bench.cl.step(2000)
            fw = [w for w in wire if w[1] == 0]
            out["one_hop" if hops == 1 else "two_hop"].append(dict(
                payload=n, arrive=got[0], rx_bytes=got[1], frames=len([w for w in fw]),
                first_wire=(fw[0][0] - t0) if fw else None, wire_bytes=sum(w[3] for w in wire),
                data_frames=[w[3] for w in fw]))
    return out


def measure_reduce(quick=False):
    """A MAX all-reduce (PARTIAL_STATE: int64 lanes, as decode's merge) of n0 words over a 2-node
    ring (route fan-in 2 to root 0, result to both): cycles from the EMITs to the result on each
    node's m_axis_rx."""
    from mcf_fpga.sim.cluster import SimCluster
    from mcf_fpga.host.executors.rtl import sim_node_config
    ncfg = sim_node_config("ring")
    cl = SimCluster(2, topology="ring", node_cfg=ncfg, chunk=4)
    routes = RouteTables(cl.topo, ncfg.nic.n_routes)
    for d in range(2):
        for x in range(2):
            routes.add(x, [d], route_id=d)
    rid = {g: routes.add(g, [0, 1], fanin=2) for g in (0, 1)}
    cl.configure(routes)
    out = []
    for layer, n0 in enumerate((36, 144, 288) if quick else (36, 72, 144, 288, 500)):
        t0 = cl.node(0).cycle
        for g in (0, 1):
            meta = pack_int(MetaFields(op=MetaOp.PARTIAL_STATE, stage=Stage.DECODE, src=g, dst=0, kv_id=(layer, 0),
                                       route_id=rid[g], collective=Collective.ALL_REDUCE, reduce_op=ReduceOp.MAX,
                                       length=0))
            nb = -(-INSTR.size // 8)
            cl.node(g).push("s_axis_cmd", int(INSTR.const(instr(EngineOpcode.EMIT, a=0, n0=n0, meta=meta)).as_value().value)
                            .to_bytes(nb, "little"))
        got = {}
        while len(got) < 2 and cl.node(0).cycle - t0 < 50_000:
            cl.step(4)
            for g in (0, 1):
                if g not in got and cl.node(g).pull_all("m_axis_rx"):
                    got[g] = cl.node(0).cycle - t0
        if len(got) < 2:
            raise RuntimeError(f"calibration: the MAX all-reduce of {n0} words did not come back ({got})")
        out.append(dict(words=n0, payload=4 * n0, root=got[0], member=got[1]))
        cl.step(1000)
    return out


def measure_kvpool(bench):
    from mcf_fpga.spec.kvpool import Opcode, kv_id_from
    from mcf_fpga.spec.meta import DEFAULT_PARAMS
    from mcf_fpga.host.executors.rtl import _kv_widths
    nbytes = _kv_widths(bench.ncfg)[0]
    hw = bench.hw
    lat = []
    for u in range(4):
        kid = kv_id_from(0, u, DEFAULT_PARAMS.layer_bits)
        t0 = hw.cycle
        hw.push("s_axis_kvcmd", (int(Opcode.ALLOC_OWNER) | (kid << 4)).to_bytes(nbytes, "little"))
        while not hw.pull_all("m_axis_kvresp"):
            hw.step(1)
        lat.append(hw.cycle - t0)
    return float(np.mean(lat))


#: (schedule, nodes, prompt tokens, new tokens, layers) of the micro model on the ring, chunk 16.
VALIDATION = [("mars", 2, 48, 1, 1), ("ring", 2, 48, 1, 1), ("zigzag", 3, 64, 1, 1), ("mars", 3, 64, 1, 2),
              ("pd", 4, 40, 3, 1), ("mars", 4, 40, 3, 1), ("ring", 4, 96, 1, 1), ("mars", 4, 96, 1, 1),
              ("zigzag", 2, 64, 3, 2)]


#: The same on the node with K/V in DDR (``sim_ddr_node_config``; ``run_rtl`` as it runs today:
#: KVL before every ATT, KV sent by EMIT of scratchpad copies, received KV by host SPW + KVW).
VALIDATION_DDR = VALIDATION


def validate(params, out_csv, configs=("onchip", "ddr")):
    """Predicted vs measured cycles on every VALIDATION configuration (``"onchip"``) and every
    VALIDATION_DDR one on the DDR node (``"ddr"``, predicted with ``kv_in_ddr(send="emit",
    install="host")``); returns the rows."""
    import csv
    from mcf_fpga.golden.config import get_config
    from mcf_fpga.golden.int_model import IntModel, quantize_model
    from mcf_fpga.golden.model import random_weights
    from mcf_fpga.host.executors.rtl import run_rtl, sim_ddr_node_config
    from mcf_fpga.host.scenario import build_programs
    rows = []
    runs = [("onchip", c) for c in (VALIDATION if "onchip" in configs else ())]
    runs += [("ddr", c) for c in (VALIDATION_DDR if "ddr" in configs else ())]
    for kv, (s, n, S, K, L) in runs:
        cfg = get_config("micro").replace(num_layers=L)
        im = IntModel(quantize_model(random_weights(cfg, seed=3), block=16))
        prog = build_programs(cfg, nodes=n, topology="ring", prompt_len=S, max_new_tokens=K, schedules=[s],
                              chunk=16, block=16)[0][s]
        prompt = torch.randint(0, cfg.vocab_size, (S,), generator=torch.Generator().manual_seed(1)).tolist()
        if kv == "ddr":
            r = run_rtl(prog, im, prompt, node_cfg=sim_ddr_node_config())
            pr = pm.predict(prog, pm.kv_in_ddr(params, send="emit", install="host"))
        else:
            r = run_rtl(prog, im, prompt)
            pr = pm.predict(prog, params)
        for what, meas, pred in (("ttft", r.ttft_cycles, pr.ttft_cycles), ("decode", r.decode_cycles,
                                                                          pr.decode_cycles)):
            if meas:
                rows.append(dict(kv=kv, schedule=s, nodes=n, prompt=S, new_tokens=K, layers=L, metric=what,
                                 measured=meas, predicted=round(pred), error_pct=round(100 * (pred - meas) / meas, 3)))
                print(f"validate {kv:6s} {s:6s} n={n} S={S:3d} K={K} L={L} {what:6s} measured {meas:8d} predicted "
                      f"{pred:10.0f} error {rows[-1]['error_pct']:+.2f}%", flush=True)
    with open(out_csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    for kv in dict.fromkeys(r["kv"] for r in rows):
        errs = [abs(r["error_pct"]) for r in rows if r["kv"] == kv]
        print(f"validation ({kv}): mean absolute error {sum(errs) / len(errs):.2f}% over {len(errs)} "
              f"measurements, max {max(errs):.2f}%")
    return rows


def calibrate_ddr(params, quick=False):
    """The ``params["kv_ddr"]`` section: :func:`measure_ddr` on the node with K/V in DDR
    (``host.executors.rtl.sim_ddr_node_config``: the memory model at 100 cycles latency with
    random ready stalls on ``m_axi_kv``), :func:`fit_ddr`, and :func:`check_ddr` of the
    mechanism with those coefficients."""
    from mcf_fpga.golden.config import get_config
    from mcf_fpga.host.executors.rtl import sim_ddr_node_config
    bench = Bench(ncfg=sim_ddr_node_config())
    e = bench.e
    region = e["kv_region"]
    samples = measure_ddr(bench, quick)
    coefs, resid = fit_ddr(samples, e)
    out = {"instr": coefs, "fit_max_rel_residual": resid,
           "samples": {k: [[s, c] for s, c in v] for k, v in samples.items()},
           "node": {"win_rows": e["kv_win_rows"], "n_win": e["kv_n_win"], "kv_dma": e["kv_dma"],
                    "row_bytes": region.row_bytes, "bus_bytes": region.bus_bytes, "kv_bits": region.kv_bits,
                    "latency": 100, "ready_stalls": "1/4 of cycles on AR/AW/W (seed 1)"}}
    chk = check_ddr(dict(params, kv_ddr=out), samples, get_config("micro"))
    out["check"] = {k: [[s, c, p] for s, c, p in rows] for k, rows in chk.items()}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=pm.DEFAULT_CALIBRATION)
    ap.add_argument("--quick", action="store_true", help="fewer shapes (CI)")
    ap.add_argument("--validate", action="store_true", help="then compare predict with run_rtl")
    ap.add_argument("--validate-only", choices=("onchip", "ddr", "both"), default=None,
                    help="validate the existing calibration (--out) on these nodes, without recalibrating")
    a = ap.parse_args(argv)
    if a.validate_only:
        which = ("onchip", "ddr") if a.validate_only == "both" else (a.validate_only,)
        validate(pm.load_params(a.out, calibrate=False),
                 os.path.join(os.path.dirname(os.path.abspath(a.out)), f"perf_validation_{a.validate_only}.csv"),
                 which)
        return
    t = time.time()
    bench = Bench()
    samples = measure(bench, a.quick)
    coefs, resid = fit(samples, bench.e)
    kv = measure_kvpool(bench)
    links = measure_links(a.quick)
    links["reduce"] = measure_reduce(a.quick)
    params = pm.params_from_measurements(coefs, links, kv, bench.e, bench.ncfg)
    params["fit_max_rel_residual"] = resid
    params["samples"] = {k: [[s, c] for s, c in v] for k, v in samples.items()}
    params["kv_ddr"] = calibrate_ddr(params, a.quick)
    params["calibration_seconds"] = round(time.time() - t, 1)
    params["source"] = pm.calibration_source()          # the RTL it was measured on (load_params: stale when changed)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    tmp = f"{a.out}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:                       # readers never see a half-written file
        json.dump(params, f, indent=1)
    os.replace(tmp, a.out)
    for k, r in resid.items():
        print(f"{k:12s} max rel residual {100 * r:5.1f}%  {coefs[k]}")
    kd = params["kv_ddr"]
    for k, r in kd["fit_max_rel_residual"].items():
        print(f"DDR {k:8s} max rel residual {100 * r:5.1f}%  {kd['instr'][k]}")
    for k, rows in kd["check"].items():
        print(f"DDR {k:8s} model vs measured: max rel error "
              f"{100 * max(abs(p - c) / c for _s, c, p in rows):5.1f}% over {len(rows)} shapes")
    print(f"links {params['link']}  kv pool {kv:.0f} cycles")
    print(f"calibration written to {a.out} in {time.time() - t:.0f} s")
    if a.validate:
        validate(pm.load_params(a.out), os.path.join(os.path.dirname(os.path.abspath(a.out)), "perf_validation.csv"))


if __name__ == "__main__":
    main()
