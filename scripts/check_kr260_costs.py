#!/usr/bin/env python
"""Check the paper-scale extrapolation of the performance model on a KR260-sized node, and refit it.

``bench_paper.py`` evaluates the instruction costs calibrated on the small simulated node
(``scripts/calibrate_perf.py``) at the KR260 engine's shapes (``perfmodel.engine_params``). This
script builds a node with the KR260 engine (``hdl.compute.engine.KR260``: pn=16, pk=32, head_dim
128, ...) on Verilator, times the instructions a Qwen2.5-1.5B layer issues (batch-1 decode and a
256-token chunk: GEMMs with streamed weights, RMSNorm/QUANT/ROPE/SwiGLU/ADD, FOLD, ...) exactly as
calibrate_perf does (batches pushed on ``s_axis_cmd``, timed by polling RETIRED), and prints each
next to the model's extrapolated cycles.

``--node ddr`` (default): the board build's node, ``mcf build --top node-kr260``
(``host.executors.rtl.kr260_sim_node_config``: ``kr260_ddr_engine``, the NIC installing received
KV; the same Verilator build as ``scripts/measure_kr260.py --kv-ddr``). Its K/V instructions
(KVW to DDR, KVL, ATT from a staging window, KVS, the block load and the write fence) are timed as
``calibrate_perf.measure_ddr`` does on the small DDR node, at KR260 shapes (``DDR_ATT_KR260``; the
AXI4 memory model on ``m_axi_kv`` at ``--kv-latency`` cycles with random ready stalls) and refitted
into the ``kv_ddr`` section. ``--node onchip``: the ``node-kr260-onchip`` engine (K/V in the
attention unit's memories), whose ATT and KVW are timed directly.

Writes ``results/perf_kr260_check.csv`` (or ``--out``). The weight stream is fed one beat per
cycle, as on the simulated cluster (``w_beat_cycles`` = 1 on both sides). For every kind
measured at enough shapes (GEMM, FOLD; ATT on the on-chip node) it refits the model's
coefficients on these KR260 measurements (``calibrate_perf.fit``) and writes them to
``results/perf_kr260.json`` with the source they were measured on (``host.rtl_source``: the git
commit, the mcf_fpga/hdl/golden source key and the SHA-256 of the node's Verilog); ``perfmodel.kr260_setup``
then uses them instead of the extrapolated ones (the other kinds and the link/NIC parameters stay
from the simulated node's calibration) and says whether the tree still generates that node. The
file is committed: the build takes about an hour on this 2-core machine (cached by source hash),
so this is a script, not a test. The last line prints the mean absolute error of the
extrapolation in percent. ``--check`` only says whether the committed refit was measured on the
node this tree generates (current / stale / unknown; exit 0 only if current), exporting the
node's Verilog to compare if its hash is not known here. ``--refit`` measures nothing: it fits the
samples the JSON holds again with this tree's model features (after a change of the features, not
of the RTL) and rewrites its coefficients and residuals, keeping the source they were measured on.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import time


from calibrate_perf import CAUSAL, FLAT, FLAT_EXT, Bench, fit, fit_ddr, measure_ddr, vec  # noqa: E402
from mcf_fpga.hdl.compute.engine import KR260  # noqa: E402
from mcf_fpga.spec.instr import EngineOpcode, FoldFlags, KvwFlags  # noqa: E402
from mcf_fpga.hdl.compute.program import instr  # noqa: E402
from mcf_fpga.hdl.compute.vector import VecOp  # noqa: E402
from mcf_fpga.host import perfmodel as pm  # noqa: E402
from mcf_fpga.host.executors.rtl import kr260_refit_node_config  # noqa: E402
from mcf_fpga.host.rtl_source import export_sha256, freshness, node_source  # noqa: E402

D, I, H, HK, DH = 1536, 8960, 12, 2, 128          # Qwen2.5-1.5B
REP = H // HK
#: ATT shapes timed on the DDR node (T query tokens, heads per KV head, keys, flags: bit0 causal,
#: bit1 flat, bit3 external max[, acc: ATT sub bit1, the running prefill fold]): decode (T = 1) and
#: prefill chunks over windows of up to 256 keys
DDR_ATT_KR260 = ((1, REP, 256, FLAT), (1, REP, 64, FLAT), (1, REP, 128, FLAT_EXT), (2, REP, 256, FLAT),
                 (4, REP, 256, CAUSAL), (8, REP, 64, CAUSAL), (16, REP, 128, CAUSAL), (16, REP, 256, CAUSAL),
                 (1, 2, 256, FLAT), (16, 2, 256, CAUSAL), (16, REP, 256, CAUSAL, 1), (8, REP, 64, CAUSAL, 1),
                 (4, REP, 128, CAUSAL, 1))
#: kinds the DDR node times with measure_ddr instead (KVW to DDR, ATT from a window)
DDR_KINDS = ("att", "kvw")


def cases(quick):
    """(kind, shape for the model, instructions, feed words, gemm (K, N) or None). Scratchpad
    (64K words): inputs from 0 (second operands from 20000), outputs from 25000/40000."""
    out = []
    gemms = [(T, K, N) for T in (1, 16) for K, N in ((D, HK * DH), (D, D))] + [(1, D, I), (4, D, I), (1, I, D)]
    for T, K, N in (gemms[:2] + gemms[4:5] if quick else gemms):
        out.append(("gemm", dict(T=T, K=K, N=N, reuse=0),
                    [instr(EngineOpcode.GEMM, a=0, ea=0, n0=T, len=K, n1=N, dst=25000)], 0, (K, N)))
    for sub, name, rows, ln in ((VecOp.RMSNORM, "rmsnorm", 1, D), (VecOp.QUANT, "quant", 1, D),
                                (VecOp.ADD, "add", 1, D), (VecOp.SWIGLU, "swiglu", 1, I),
                                (VecOp.RMSNORM, "rmsnorm", 16, D)):
        out.append(("vec_" + name, dict(rows=rows, len=ln), [vec(sub, 0, 40000, rows, ln, b=20000, ed=0)], 0, None))
    out.append(("vec_rope", dict(rows=H, len=DH), [vec(VecOp.ROPE, 0, 40000, 1, DH, b=20000, n1=H)], 0, None))
    out.append(("kvw", dict(rows=16 * HK, len=DH),
                [instr(EngineOpcode.KVW, flags=KvwFlags(v=False), a=0, n0=16, n1=HK, so=HK * DH, len=DH, ea=0, eo=HK, ei=1, kvb=0,
                       kvs=256)], 0, None))
    for T, ntok, flags in ((1, 256, FLAT), (16, 256, CAUSAL)) + (() if quick else (
            (1, 64, FLAT), (1, 128, FLAT), (2, 256, FLAT), (4, 128, CAUSAL), (8, 64, CAUSAL), (16, 128, CAUSAL))):
        ins = instr(EngineOpcode.ATT, flags=flags, a=0, so=4 * DH, len=DH, n0=T, n1=REP, ea=0, eo=4, ei=1, pos0=1000,
                    kvb=0, nblk=1, bs=256, ntok=ntok, kpos=0, b=20000, dst=40000)
        out.append(("att", dict(pm._kind_shape(dict(ins), KR260)[1], diag=0), [ins], 0, None))
    for T, ntok in ((16, 256), (8, 64)) + (() if quick else ((4, 128),)):     # acc, in place (the compiler's)
        ins = instr(EngineOpcode.ATT, sub=2, flags=CAUSAL, a=0, so=4 * DH, len=DH, n0=T, n1=REP, ea=0, eo=4, ei=1,
                    pos0=1000, kvb=0, nblk=1, bs=256, ntok=ntok, kpos=0, b=40000, dst=40000)
        out.append(("att", dict(pm._kind_shape(dict(ins), KR260)[1], diag=0), [ins], 0, None))
    for T, nblk, final in ((1, 4, 0), (1, 1, 1), (8, 2, 1)) + (() if quick else ((1, 2, 0), (4, 2, 0), (2, 1, 1),
                                                                                  (4, 3, 1))):
        ins = instr(EngineOpcode.FOLD, flags=FoldFlags(final=bool(final)), a=0, b=20000, nblk=nblk, n0=T, n1=REP,
                    so=4 * DH, len=DH, dst=50000)
        out.append(("fold", pm._kind_shape(dict(ins), KR260)[1], [ins], 0, None))
    for n in (256, 1024):          # the model's shape on the KR260 engine (spw_pairs: a pair SPW)
        ins = instr(EngineOpcode.SPW, dst=0, n0=n)
        out.append(("spw", dict(pm._kind_shape(dict(ins), KR260)[1], words=n), [ins], n, None))
    return out


def fit_and_say(samples, engine):
    """``fit`` of the GEMM / ATT / FOLD ``samples``, each kind's residual printed."""
    coefs, resid = fit(samples, engine)
    for k, r in resid.items():
        print(f"refit {k:6s} on {len(samples[k])} KR260 shapes: max rel residual {100 * r:.2f}%  {coefs[k]}")
    return coefs, resid


def fit_ddr_and_say(samples, engine):
    """``fit_ddr`` of the DDR node's ``samples``, each kind's residual printed."""
    coefs, resid = fit_ddr(samples, engine)
    for k, r in resid.items():
        print(f"refit DDR {k:8s}: max rel residual {100 * r:.2f}%  {coefs[k]}")
    return coefs, resid


def refit(path, engine):
    """``--refit``: the record at ``path`` fitted again from its own samples (``fit``; the DDR
    section with ``fit_ddr`` on the DDR node's engine), its provenance kept."""
    with open(path) as f:
        meas = json.load(f)
    samples = {k: [(sh, c) for sh, c in v] for k, v in meas["samples"].items()}
    coefs, resid = fit_and_say(samples, engine)
    meas.update(instr=coefs, fit_max_rel_residual=resid)
    if "kv_ddr" in meas:
        ds = {k: [(sh, c) for sh, c in v] for k, v in meas["kv_ddr"]["samples"].items()}
        dcoefs, dresid = fit_ddr_and_say(ds, dict(kr260_refit_node_config("ddr").engine))
        meas["kv_ddr"].update(instr=dcoefs, fit_max_rel_residual=dresid)
    with open(path, "w") as f:
        json.dump(meas, f, indent=1)
    print(f"{path}: refitted from its samples (measured on RTL {meas.get('rtl_commit')}); "
          f"worst residual {100 * max(list(resid.values()) + list(meas.get('kv_ddr', {}).get('fit_max_rel_residual', {}).values())):.2f}%")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(pm.DEFAULT_CALIBRATION), "perf_kr260_check.csv"))
    ap.add_argument("--calibration", default=None)
    ap.add_argument("--kr260-json", default=pm.KR260_CALIBRATION, help="where the KR260 refit goes")
    ap.add_argument("--node", choices=("ddr", "onchip"), default="ddr",
                    help="ddr: node-kr260 (K/V in DDR, NIC installs; default); onchip: node-kr260-onchip")
    ap.add_argument("--kv-latency", type=int, default=100, help="--node ddr: the memory model's latency (cycles)")
    ap.add_argument("--quick", action="store_true", help="fewer shapes")
    ap.add_argument("--check", action="store_true",
                    help="only say whether --kr260-json was measured on the node this tree generates (exports "
                         "the node's Verilog if this machine does not know its hash: minutes, no build)")
    ap.add_argument("--refit", action="store_true",
                    help="fit the samples in --kr260-json again with this tree's model features (no build, seconds)")
    a = ap.parse_args(argv)
    t0 = time.time()
    engine = dict(KR260)
    if a.refit:
        return refit(a.kr260_json, engine)
    if a.check:
        with open(a.kr260_json) as f:
            meas = json.load(f)
        ncfg = kr260_refit_node_config(meas.get("node", "onchip"))
        print(f"exporting the {meas.get('node', 'onchip')} node's Verilog if its hash is not known here ...", flush=True)
        export_sha256(ncfg)
        state, why = freshness(meas, ncfg)
        print(f"{a.kr260_json} (RTL {meas.get('rtl_commit')}): {state}: {why} ({time.time() - t0:.0f} s)")
        return 0 if state == "current" else 1
    ncfg = kr260_refit_node_config(a.node)
    base = pm.load_params(a.calibration)
    P = pm.engine_params(base, engine)      # w_beat_cycles = 1, like the bench
    _hw, Pk, _e = pm.kr260_setup("sfp10g", 200e6, base, kr260=None)       # extrapolated K/V-in-DDR costs
    print(f"building the KR260-engine node, {a.node} (pn={engine['pn']} pk={engine['pk']} d={engine['head_dim']}; "
          f"about an hour the first time) ...", flush=True)
    bench = Bench(engine=engine, ncfg=ncfg, kv_latency=a.kv_latency)
    print(f"built in {time.time() - t0:.0f} s", flush=True)
    # the source as built: a tree edited during the long run must not stamp the record
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    source = node_source(ncfg)
    rows = []

    def report(kind, shape, meas, pred, note=""):
        rows.append(dict(kind=kind, **{k: shape.get(k, "") for k in ("T", "K", "N", "rows", "len", "keys", "acc", "parts",
                                                                       "final", "n0", "records")},
                         measured=round(meas), extrapolated=round(pred), error_pct=round(100 * (pred - meas) / meas, 2)))
        print(f"{kind:12s} {shape}  measured {meas:10.0f}  extrapolated {pred:10.0f}  "
              f"{rows[-1]['error_pct']:+7.2f}%{note}", flush=True)
    samples = {}
    for kind, shape, ins, feed, gemm in cases(a.quick):
        if a.node == "ddr" and kind in DDR_KINDS:
            continue
        meas = bench.run(ins, feed_words=feed, gemm=gemm, poll=16, limit=20_000_000)
        report(kind, shape, meas, pm.instr_cycles(P, kind, shape))
        samples.setdefault(kind, []).append((shape, meas))
    fitted = {k: v for k, v in samples.items() if k in ("gemm", "att", "fold") and len(v) >= len(pm.FEATURES[k]) + 2}
    coefs, resid = fit_and_say(fitted, engine)
    out = {"node": a.node, "node_config": repr(ncfg), "instr": coefs, "fit_max_rel_residual": resid,
           "engine": engine, "samples": {k: [[sh, c] for sh, c in v] for k, v in fitted.items()}}
    if a.node == "ddr":
        region = bench.e["kv_region"]
        print(f"K/V in DDR: timing KVW, KVL, ATT from a window, KVS, loads and the fence ({a.kv_latency}-cycle "
              f"memory model, random ready stalls) ...", flush=True)
        ds = measure_ddr(bench, a.quick, att_shapes=DDR_ATT_KR260, kvl_keys=(16, 64, 256), q_base=0,
                         b_base=16000, out_base=34000)
        Pd = dict(P, instr=Pk["kv_ddr"]["instr"])
        for kind in ("kvw", "kvl", "att", "kvs"):
            for shape, meas in ds[kind]:
                report(kind, shape, meas, pm.instr_cycles(Pd, kind, shape), " (DDR)")
        dcoefs, dresid = fit_ddr_and_say(ds, bench.e)
        out["kv_ddr"] = {"instr": dcoefs, "fit_max_rel_residual": dresid,
                         "samples": {k: [[sh, c] for sh, c in v] for k, v in ds.items()},
                         "node": {"win_rows": bench.e["kv_win_rows"], "n_win": bench.e["kv_n_win"],
                                  "kv_dma": bench.e["kv_dma"], "row_bytes": region.row_bytes,
                                  "bus_bytes": region.bus_bytes, "kv_bits": region.kv_bits,
                                  "latency": a.kv_latency, "ready_stalls": "1/4 of cycles on AR/AW/W (seed 1)"}}
    out.update(rtl_commit=rev, **source, seconds=round(time.time() - t0))
    os.makedirs(os.path.dirname(os.path.abspath(a.kr260_json)), exist_ok=True)
    with open(a.kr260_json, "w") as f:
        json.dump(out, f, indent=1)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    mae = sum(abs(r["error_pct"]) for r in rows) / len(rows)
    worst = max(rows, key=lambda r: abs(r["error_pct"]))
    print(f"wrote {a.out} and {a.kr260_json} (RTL {rev}, Verilog sha256 {str(out['verilog_sha256'])[:16]}) in "
          f"{time.time() - t0:.0f} s; worst {worst['kind']} {worst['error_pct']:+.2f}%")
    print(f"KR260-shape instruction costs: extrapolation mean absolute error {mae:.2f}% over {len(rows)} instructions")


if __name__ == "__main__":
    raise SystemExit(main())     # --check: exit 1 unless the refit is current (main's return)
