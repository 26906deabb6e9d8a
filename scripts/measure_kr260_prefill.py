#!/usr/bin/env python
"""Prefill at full Qwen2.5-1.5B dimensions on a Verilated cluster of KR260-sized nodes, measured
next to the performance model.

Builds ``hdl.node.Node`` with the KR260 engine (``hdl.compute.engine.KR260``), the node the RTL
executor uses otherwise (``sim_node_config``). The Verilator build is long (about 40 min on a
loaded 2-core machine; cached by source hash), so this is a script, not a test. Runs MARS
prefill of a short prompt for 1 and 2 layers: hidden 1536, 12/2 heads, head_dim 128,
intermediate 8960; the vocabulary is cut to 512, which only touches the embedding and the head.
It uses ``host.executors.rtl.run_rtl``, checks the logits and first token against ``IntModel``,
and prints TTFT, the difference between the two runs (one decoder layer, measured) and
``host.perfmodel.predict`` for the same programs. The model uses the KR260 parameters as in
``kr260_setup``, with weights fed one beat per cycle as in the simulation.

Chunks are one row each: the engine's 64K-word scratchpad holds the 8960-wide MLP of only a
single row (docs/perfmodel.md). Decode is not run here. Its merge now fits the node's NIC (one
max all-reduce of the 12 m words plus 7 sum packets of the partial rows: 8 reduce-pool contexts,
``hdl.node.NODE_REDUCE_CONTEXTS``), but a full-size decode run has not been attempted. The
last line prints the measured cycles of one prefill layer and the model's error.
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

torch.set_num_threads(1)
NODE = sim_node_config("ring", kv_slots=48, engine=dict(KR260))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompt", type=int, default=4)
    ap.add_argument("--nodes", type=int, default=4)
    a = ap.parse_args(argv)
    t0 = time.time()
    P = pm.engine_params(pm.load_params(), dict(KR260))
    _hw, Pk, _e = pm.kr260_setup("sfp10g", 200e6, pm.load_params())
    P["instr"] = Pk["instr"]                      # the KR260 refit where measured; 1 beat/cycle weights
    out = {}
    for L in (1, 2):
        cfg = get_config("qwen2.5-1.5b").replace(num_layers=L, vocab_size=512)
        im = IntModel(quantize_model(random_weights(cfg, seed=1), block=1))
        prog = build_programs(cfg, nodes=a.nodes, topology="ring", prompt_len=a.prompt, max_new_tokens=1,
                              schedules=["mars"], chunk=1, block=1)[0]["mars"]
        prompt = torch.randint(0, cfg.vocab_size, (a.prompt,), generator=torch.Generator().manual_seed(2)).tolist()
        print(f"{L} layer(s): running on {a.nodes} KR260-sized nodes (first run builds the node) ...", flush=True)
        r = run_rtl(prog, im, prompt, node_cfg=NODE)
        ok = torch.equal(r.logits, im.forward(torch.tensor(prompt))) and r.tokens == im.generate(prompt, 1)
        pr = pm.predict(prog, P)
        out[L] = (r.ttft_cycles, pr.ttft_cycles)
        print(f"{L} layer(s): equals IntModel {ok}; TTFT {r.ttft_cycles} cycles measured, {pr.ttft_cycles:.0f} "
              f"predicted ({100 * (pr.ttft_cycles - r.ttft_cycles) / r.ttft_cycles:+.2f}%); {r.seconds:.0f} s",
              flush=True)
        if not ok:
            raise SystemExit("the cluster's output differs from IntModel")
    meas = out[2][0] - out[1][0]
    pred = out[2][1] - out[1][1]
    print(f"run time {time.time() - t0:.0f} s")
    print(f"one Qwen2.5-1.5B prefill layer ({a.prompt} one-row chunks on {a.nodes} KR260-sized nodes): {meas:.0f} "
          f"cycles measured, {pred:.0f} predicted "
          f"({100 * (pred - meas) / meas:+.2f}%)")


if __name__ == "__main__":
    main()
