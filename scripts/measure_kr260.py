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
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402

from golden.config import get_config  # noqa: E402
from golden.int_model import IntModel, quantize_model  # noqa: E402
from golden.model import random_weights  # noqa: E402
from hdl.compute.engine import KR260  # noqa: E402
from host import perfmodel as pm  # noqa: E402
from host.executors.rtl import run_rtl, sim_node_config  # noqa: E402
from host.scenario import build_programs  # noqa: E402
from host.tp import group_of_all  # noqa: E402

torch.set_num_threads(1)
NODE = sim_node_config("ring", kv_slots=48, engine=dict(KR260))


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
    a = ap.parse_args(argv)
    if a.tokens < 1:
        raise SystemExit(f"--tokens must be >= 1, got {a.tokens}")
    t0 = time.time()
    P = pm.engine_params(pm.load_params(), dict(KR260))
    _hw, Pk, _e = pm.kr260_setup("sfp10g", 200e6, pm.load_params())
    P["instr"] = Pk["instr"]                      # the KR260 refit where measured; 1 beat/cycle weights
    out = {}
    for L in (1, 2):
        cfg = get_config("qwen2.5-1.5b").replace(num_layers=L, vocab_size=512)
        im = IntModel(quantize_model(random_weights(cfg, seed=1), block=1))
        kw = dict(nodes=a.nodes, topology="ring", prompt_len=a.prompt, max_new_tokens=a.tokens,
                  schedules=["mars"], chunk=1, block=1)
        prog = build_programs(cfg, **kw)[0]["mars"]
        if a.tp:
            prog = build_programs(cfg, w_group=group_of_all(prog.leader, a.nodes), **kw)[0]["mars"]
        prompt = torch.randint(0, cfg.vocab_size, (a.prompt,), generator=torch.Generator().manual_seed(2)).tolist()
        print(f"{L} layer(s): running on {a.nodes} KR260-sized nodes (first run builds the node) ...", flush=True)
        r = run_rtl(prog, im, prompt, node_cfg=NODE)
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
        print(f"{line}; {r.seconds:.0f} s", flush=True)
        if not ok:
            raise SystemExit("the cluster's output differs from IntModel")
    print(f"run time {time.time() - t0:.0f} s")
    tm, tp = (out[2]["ttft"][i] - out[1]["ttft"][i] for i in (0, 1))
    print(f"one Qwen2.5-1.5B prefill layer ({a.prompt} one-row chunks on {a.nodes} KR260-sized nodes): {tm:.0f} "
          f"cycles measured, {tp:.0f} predicted ({pct(tp, tm)})")
    if a.tokens > 1:
        dm, dp = (out[2]["decode"][i] - out[1]["decode"][i] for i in (0, 1))
        print(f"one Qwen2.5-1.5B decode layer (per token, {a.nodes} KR260-sized nodes): {dm:.0f} cycles measured, "
              f"{dp:.0f} predicted ({pct(dp, dm)})")


if __name__ == "__main__":
    main()
