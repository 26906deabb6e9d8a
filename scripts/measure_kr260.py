#!/usr/bin/env python
"""Prefill and decode at full Qwen2.5-1.5B dimensions on a Verilated cluster of KR260-sized nodes,
measured next to the performance model.

Builds ``hdl.node.Node`` with the KR260 engine (``hdl.compute.engine.KR260``), the node the RTL
executor uses otherwise (``sim_node_config``). The Verilator build is long (about 40 min on a
loaded 2-core machine; cached by source hash), so this is a script, not a test. Runs MARS
prefill of a short prompt, then ``--tokens`` decode tokens, for 1 and 2 layers: hidden 1536,
12/2 heads, head_dim 128, intermediate 8960; the vocabulary is cut to 512, which only touches the
embedding and the head. ``--tp``: decode with a tensor-parallel weight group of every node. It uses ``host.executors.rtl.run_rtl``, checks the logits and every
token against ``IntModel``, and prints TTFT and decode cycles per token, the difference between
the two runs (one decoder layer, measured) and ``host.perfmodel.predict`` for the same programs.
The model uses the KR260 parameters as in ``kr260_setup``, with weights fed one beat per cycle as
in the simulation (the DDR rate is a bench_paper parameter, not part of this check).

Prefill chunks are one row each: the engine's 64K-word scratchpad holds the 8960-wide MLP of only
a single row (docs/perfmodel.md). The last line prints the measured cycles of one decode layer
(one prefill layer with ``--tokens 1``) and the model's error.

``--kv-ddr``: the node's engine keeps K/V in DDR (``hdl.compute.engine.kr260_ddr_engine``:
the KV streamer with ``kv_win_rows`` = ``blk_max`` = 256, ``kv_n_win`` = 2, bursts of 16, 8 in
flight; the board build's engine, its ``m_axi_kv`` on HP3), not in its 4,096-row attention memory (about 73 tokens per node at 28 layers x 2 KV heads;
2 rows per token and layer). ``run_rtl`` attaches the C++ AXI4 memory model (``--kv-latency``
cycles, random ready stalls) to every node's ``m_axi_kv`` and after the run compares every K/V
row a node holds with IntModel's. The region has the real layout (``spec.kvregion.kr260_region``:
base 0x8_0000_0000, slots of 256 tokens x 2 heads, 147,456 B at INT8) but not its 1 GiB: the
memory model allocates the whole region as host RAM per node, so it holds ``host.executors.rtl.KR260_SIM_SLOTS`` slots
(the KV pool's ``KV_DDR_POOL`` plus staging for decode blocks, 349 MB per node). The node's NIC
installs received KV units itself (``NodeConfig.kv_install``, as ``mcf build --top node-kr260``)
and the prediction is ``perfmodel.kv_in_ddr(send="kvs", install="nic")``, as ``run_rtl`` runs
that node. With one-row
chunks a KV unit is one token of one layer, so the pool's CAM (``NodeConfig.kv_slots`` <= 4,096)
bounds a run at ``KV_DDR_POOL`` units per node: MARS on 2 nodes holds the whole prompt on each
node (owner + replica units), i.e. ``--prompt 80 --layers 28`` = 2,240 units = 80 tokens per node
at full depth. ``--layers`` picks the layer counts (default 1 and 2: the difference is one layer).
``--intermediate`` narrows the MLP (e.g. 512; everything else, the K/V per token included, stays
Qwen2.5-1.5B's), so that a run past the on-chip capacity at 28 layers takes tens of minutes
instead of hours; the output names the width. ``--hidden`` narrows the residual width too (the
query heads become ``hidden / head_dim``; the 2 KV heads of 128, so the K/V per token and layer,
stay Qwen2.5-1.5B's), and ``--chunk`` sets the prefill chunk (and KV block) in rows, which a
narrow model's scratchpad allows: the run past the on-chip capacity is then

    measure_kr260.py --kv-ddr --nodes 2 --prompt 148 --tokens 2 --layers 28 \
        --hidden 256 --intermediate 256 --chunk 12

(74 tokens per node, 28 layers: 4,144 K rows owned per node, up to 8,288 at MARS's peak, against
the 4,096 rows the on-chip attention memory holds; with 16-row chunks the scratchpad has no room
for the prefill fold's 2 partial slots). Measured 2026-12-03 with ``--threads 2`` (docs/memory.md):
equal to IntModel, TTFT 36,584,359 cycles (model -0.72 %), about an hour here after the 15-min
build.
"""
from __future__ import annotations

import argparse
import time


import torch  # noqa: E402

from mcf_fpga.golden.config import get_config  # noqa: E402
from mcf_fpga.golden.int_model import IntModel, quantize_model  # noqa: E402
from mcf_fpga.golden.model import random_weights  # noqa: E402
from mcf_fpga.hdl.compute.engine import KR260  # noqa: E402
from mcf_fpga.host import perfmodel as pm  # noqa: E402
from mcf_fpga.host.executors.rtl import KR260_SIM_POOL, kr260_sim_node_config, run_rtl, sim_node_config  # noqa: E402
from mcf_fpga.host.scenario import build_programs  # noqa: E402
from mcf_fpga.host.tp import group_of_all  # noqa: E402

torch.set_num_threads(1)
NODE = sim_node_config("ring", kv_slots=48, engine=dict(KR260))
#: --kv-ddr: the board build's node (the NIC installs received KV), shared with check_kr260_costs
KV_DDR_POOL = KR260_SIM_POOL
NODE_DDR = kr260_sim_node_config()
#: rows of the on-chip attention memory (KR260 kv_depth) the DDR mode replaces
ON_CHIP_ROWS = KR260["kv_depth"]


def pct(pred, meas):
    return f"{100 * (pred - meas) / meas:+.2f}%"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompt", type=int, default=4)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=3, help="tokens to generate (1: prefill only)")
    ap.add_argument("--tp", action="store_true",
                    help="decode with a tensor-parallel weight group of every node (host.tp; bench_paper's "
                         "Table 2 best row) instead of the leader alone")
    ap.add_argument("--kv-ddr", action="store_true",
                    help="K/V in DDR through the KV streamer (the KR260 board build), not in the attention memory")
    ap.add_argument("--kv-latency", type=int, default=100, help="--kv-ddr: the memory model's latency (cycles)")
    ap.add_argument("--layers", default="1,2", help="comma-separated layer counts to run (default 1,2)")
    ap.add_argument("--schedule", choices=("mars", "ring", "zigzag"), default="mars",
                    help="prefill schedule (mars: replicas, so every node holds the whole prompt at its peak; "
                         "ring/zigzag: each node holds its own share)")
    ap.add_argument("--intermediate", type=int, default=None,
                    help="narrow the MLP to this width (default Qwen2.5-1.5B's 8960): attention, hidden "
                         "size and the K/V per token stay full size; the MLP is ~88%% of a layer's cycles")
    ap.add_argument("--hidden", type=int, default=None,
                    help="narrow the residual width (default Qwen2.5-1.5B's 1536) to this multiple of head_dim; "
                         "the query heads become hidden/head_dim, the KV heads and head_dim stay")
    ap.add_argument("--chunk", type=int, default=1,
                    help="prefill chunk and KV block in rows (default 1: the full-width MLP fits the "
                         "scratchpad for one row only)")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads stepping the cluster's nodes (run_rtl's threads; default one)")
    ap.add_argument("--progress", type=float, default=300, help="print ops done every this many seconds")
    ap.add_argument("--max-cycles", type=int, default=2_000_000_000, help="run_rtl's cycle limit")
    a = ap.parse_args(argv)
    if a.tokens < 1:
        raise SystemExit(f"--tokens must be >= 1, got {a.tokens}")
    def narrowed(cfg):
        if a.intermediate is not None:
            cfg = cfg.replace(intermediate_size=a.intermediate)
        if a.hidden is not None:
            if a.hidden < 1 or a.hidden % cfg.head_dim:
                raise SystemExit(f"--hidden must be a positive multiple of head_dim={cfg.head_dim}, got {a.hidden}")
            heads = a.hidden // cfg.head_dim
            if heads % cfg.num_kv_heads:
                raise SystemExit(f"--hidden={a.hidden} gives {heads} query heads, not a multiple of the "
                                 f"{cfg.num_kv_heads} KV heads")
            cfg = cfg.replace(hidden_size=a.hidden, num_heads=heads)
        return cfg
    narrowed(get_config("qwen2.5-1.5b"))                 # ValueError names the field and its limit
    if a.chunk < 1:
        raise SystemExit(f"--chunk must be >= 1, got {a.chunk}")
    layers = [int(x) for x in a.layers.split(",")]
    if not layers or min(layers) < 1 or max(layers) > 28:
        raise SystemExit(f"--layers must be counts in 1..28, got {a.layers!r}")
    node = NODE_DDR if a.kv_ddr else NODE
    t0 = time.time()
    P = pm.engine_params(pm.load_params(), dict(KR260))
    _hw, Pk, _e = pm.kr260_setup("sfp10g", 200e6, pm.load_params())
    P["instr"] = Pk["instr"]                      # the KR260 refit where measured; 1 beat/cycle weights
    P["kv_ddr"] = Pk["kv_ddr"]                    # --kv-ddr: the DDR node's costs (ATT: the refit's, if any)
    if a.kv_ddr:                                  # as run_rtl runs it: KVS sends, NIC installs (kv_install)
        P = pm.kv_in_ddr(P, send="kvs", install="nic")
    out = {}
    for L in layers:
        cfg = narrowed(get_config("qwen2.5-1.5b").replace(num_layers=L, vocab_size=512))
        im = IntModel(quantize_model(random_weights(cfg, seed=1), block=a.chunk))
        kw = dict(nodes=a.nodes, topology="ring", prompt_len=a.prompt, max_new_tokens=a.tokens,
                  schedules=[a.schedule], chunk=a.chunk, block=a.chunk)
        prog = build_programs(cfg, **kw)[0][a.schedule]
        if a.tp:
            prog = build_programs(cfg, w_group=group_of_all(prog.leader, a.nodes), **kw)[0][a.schedule]
        prompt = torch.randint(0, cfg.vocab_size, (a.prompt,), generator=torch.Generator().manual_seed(2)).tolist()
        width = f"hidden {cfg.hidden_size}, {cfg.num_heads}/{cfg.num_kv_heads} heads of {cfg.head_dim}, " \
                f"MLP {cfg.intermediate_size}" + ("" if a.intermediate is None and a.hidden is None else " (narrowed)")
        print(f"{L} layer(s) ({width}): {a.schedule}, prompt {a.prompt}, {a.tokens} token(s) on {a.nodes} KR260-sized "
              f"nodes (first run builds the node) ...", flush=True)
        if a.kv_ddr and prog.n_slots > KV_DDR_POOL:
            raise SystemExit(f"{L} layer(s), prompt {a.prompt} on {a.nodes} nodes: the program's KV pool needs "
                             f"{prog.n_slots} units of {a.chunk} token(s) per node, the --kv-ddr node has KV_DDR_POOL={KV_DDR_POOL}")
        t1 = time.time()
        last = [t1]

        def progress(done, total, L=L):
            if time.time() - last[0] >= a.progress:      # how far a long run got, with its wall time
                last[0] = time.time()
                print(f"  {L} layer(s): {done}/{total} program ops done after {last[0] - t1:.0f} s", flush=True)
        r = run_rtl(prog, im, prompt, node_cfg=node, progress=progress, max_cycles=a.max_cycles, threads=a.threads,
                    **(dict(kv_latency=a.kv_latency) if a.kv_ddr else {}))
        ok = torch.equal(r.logits, im.forward(torch.tensor(prompt))) and r.tokens == im.generate(prompt, a.tokens)
        pr = pm.predict(prog, P)
        row = dict(ttft=(r.ttft_cycles, pr.ttft_cycles))
        line = (f"{L} layer(s): equals IntModel {ok}; TTFT {r.ttft_cycles} measured, {pr.ttft_cycles:.0f} "
                f"predicted ({pct(pr.ttft_cycles, r.ttft_cycles)})")
        if a.tokens > 1:
            dm, dp = r.decode_cycles / (a.tokens - 1), pr.decode_cycles / (a.tokens - 1)
            row["decode"] = (dm, dp)
            line += f"; decode {dm:.0f} cycles/token measured, {dp:.0f} predicted ({pct(dp, dm)})"
        out[L] = row
        if a.kv_ddr:
            held = [n // 2 for n in r.kv_rows_checked]       # K rows (= V rows) held for decode at the end
            peak = [p * cfg.num_kv_heads * a.chunk for p in r.peak_slots]  # units of a.chunk tokens x 2 heads
            line += (f"; K/V in DDR ({a.kv_latency}-cycle memory model): peak K rows per node {peak} "
                     f"{'(at most: a unit holds up to ' + str(a.chunk) + ' tokens) ' if a.chunk > 1 else ''}"
                     f"(owner + replica units; the on-chip memory holds {ON_CHIP_ROWS}), K rows held at the "
                     f"end per node {held}, {sum(r.kv_rows_checked)} K/V rows equal IntModel, "
                     f"KVL per node {r.kv_loads}, m_axi_kv bytes (read, written) per node {r.kv_bus}")
        line += (f"; peak KV slots per node {r.peak_slots}; {r.cycles_simulated} cycles simulated "
                 f"({r.cycles_simulated / max(r.seconds, 1e-9):.0f} cycles/s)")
        print(f"{line}; {r.seconds:.0f} s in run_rtl, {time.time() - t1:.0f} s with the build", flush=True)
        if not ok:
            raise SystemExit("the cluster's output differs from IntModel")
    print(f"run time {time.time() - t0:.0f} s")
    if len(layers) < 2:
        return
    l0, l1 = layers[0], layers[1]
    tm, tp = ((out[l1]["ttft"][i] - out[l0]["ttft"][i]) / (l1 - l0) for i in (0, 1))
    print(f"one Qwen2.5-1.5B prefill layer ({a.schedule}, {a.prompt} tokens in {a.chunk}-row chunks on {a.nodes} KR260-sized nodes): {tm:.0f} "
          f"cycles measured, {tp:.0f} predicted ({pct(tp, tm)})")
    if a.tokens > 1:
        dm, dp = ((out[l1]["decode"][i] - out[l0]["decode"][i]) / (l1 - l0) for i in (0, 1))
        print(f"one Qwen2.5-1.5B decode layer (per token, {a.nodes} KR260-sized nodes): {dm:.0f} cycles measured, "
              f"{dp:.0f} predicted ({pct(dp, dm)})")


if __name__ == "__main__":
    main()
