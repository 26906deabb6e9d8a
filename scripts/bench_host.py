#!/usr/bin/env python
"""What the host costs at paper scale: TTFT with a realistic host against an ideal one.

Builds the paper's prefill (Qwen2.5-1.5B, a 16K-token prompt, 16 nodes, MARS, chunk 256, the
KR260 node with K/V in DDR: ``perfmodel.kr260_setup``), compiles it with the one compiler
(``host.compiler``) and times it with the performance model twice, in one run: with an ideal host
(no time of its own, ``chunk=1``) and with a host that spends ``--host-us`` per interaction
(``perfmodel.with_host``; default 1 us: one Linux user-space MMIO round trip, see
``perfmodel.HOST_INTERACTION_S``). A host interaction is every record of a node's stream the host
serves today (``host.compiler.host_interactions``): a push of instructions, a directory command,
a feed of weights or rows, a wait, a read. The script also prints the interactions per prefill
chunk and per decode token (from the compiled streams).

Assumptions, named: the KR260 engine at 200 MHz, SFP+ 10 Gb/s links, the calibrated costs of
``results/perf_calibration.json``, and a host whose interactions cost a fixed time each (no
caches, no batching of pushes, one CPU per node serving them in order).

``--quick``: the micro model on the simulated node's parameters (seconds; a smoke test).
The last line prints the TTFT difference in percent first (target: within 2 %).
"""
from __future__ import annotations

import argparse
import collections
import time


from mcf_fpga.golden.config import get_config  # noqa: E402
from mcf_fpga.host import perfmodel as pm  # noqa: E402
from mcf_fpga.host.compiler import compile_program, host_interaction_rates  # noqa: E402

CLOCK = 200e6


def interactions(program, P) -> tuple:
    """(host interactions per KV unit of the prompt, per decode token), over the whole cluster."""
    rid = collections.defaultdict(int)
    comps = compile_program(program, pm.model_node_config(program, P), rid_max=rid, rid_sum=rid)
    return host_interaction_rates(program, [c.stream for c in comps])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host-us", type=float, default=pm.HOST_INTERACTION_S * 1e6,
                    help="host time per interaction in microseconds (default 1)")
    ap.add_argument("--quick", action="store_true", help="micro model on the simulated node (smoke test)")
    ap.add_argument("--calibration", default=None, help="calibration JSON (default results/perf_calibration.json)")
    a = ap.parse_args(argv)
    if not a.host_us >= 0:
        ap.error(f"--host-us={a.host_us} must be >= 0")
    from bench_paper import build
    base = pm.load_params(a.calibration)
    if a.quick:
        from mcf_fpga.host.executors.rtl import SIM_ENGINE
        from mcf_fpga.host.config import HardwareConfig
        cfg = get_config("micro").replace(num_layers=1)
        hw = HardwareConfig.kr260(link="sfp10g", clock_hz=CLOCK, macs_per_cycle=SIM_ENGINE["pn"] * SIM_ENGINE["pk"],
                                  kv_buffer_bytes=1 << 28)
        P = pm.kv_in_ddr(pm.engine_params(base, dict(SIM_ENGINE), link_bytes_per_cycle=hw.link_bytes_per_cycle,
                                          link_latency=hw.link_latency_cycles,
                                          ddr_bytes_per_cycle=hw.ddr_bytes_per_cycle,
                                          port_bytes_per_cycle=hw.port_bytes_per_cycle))
        nodes, S, K, B, blk = 4, 128, 3, 16, 16
    else:
        cfg = get_config("qwen2.5-1.5b")
        hw, P, _engine = pm.kr260_setup("sfp10g", CLOCK, base, kv="ddr")
        nodes, S, K, B, blk = 16, 16384, 2, 256, 256
    t0 = time.time()
    prog = build(cfg, hw, nodes=nodes, prompt_len=S, max_new_tokens=K, schedules=("mars",), chunk=B, block=blk)["mars"]
    print(f"bench_host: {cfg.name}, {S}-token prompt, {nodes} nodes, MARS chunk {B}, {K - 1} decode step(s); "
          f"engine pn={P['engine']['pn']} pk={P['engine']['pk']} at {CLOCK / 1e6:.0f} MHz, SFP+ links, K/V in DDR; "
          f"host {a.host_us:g} us per interaction",
          flush=True)
    per_chunk, per_token = interactions(prog, P)
    print(f"host interactions: {per_chunk:.1f} per prefill chunk (KV unit), {per_token:.1f} per decode token "
          f"(cluster-wide)", flush=True)
    ideal = pm.predict(prog, P, chunk=1)
    print(f"ideal host:      TTFT {ideal.ttft_cycles / CLOCK:.4f} s, decode {((ideal.decode_cycles or 0) / CLOCK):.4f} s "
          f"({time.time() - t0:.0f} s)", flush=True)
    real = pm.predict(prog, pm.with_host(P, a.host_us * 1e-6, CLOCK), chunk=1)
    print(f"realistic host:  TTFT {real.ttft_cycles / CLOCK:.4f} s, decode {((real.decode_cycles or 0) / CLOCK):.4f} s, "
          f"{sum(real.host_interactions)} interactions in all ({time.time() - t0:.0f} s)", flush=True)
    fet = pm.predict(prog, pm.with_host(P, a.host_us * 1e-6, CLOCK, fetched=True), chunk=1)
    ideal_f = ideal      # the fetching node's ideal host: its weights on one lane (with_host(fetched=True))
    if P.get("ddr", {}).get("weight_lanes", 1) > 1:
        ideal_f = pm.predict(prog, pm.with_host(P, 0.0, CLOCK, fetched=True), chunk=1)
        print(f"ideal host, fetching node (weights on HP2 alone, not striped): TTFT "
              f"{ideal_f.ttft_cycles / CLOCK:.4f} s, decode {((ideal_f.decode_cycles or 0) / CLOCK):.4f} s; "
              f"the fetched rows below are against it ({time.time() - t0:.0f} s)", flush=True)
    f_ttft = 100 * (fet.ttft_cycles / ideal_f.ttft_cycles - 1)
    f_dec = 100 * ((fet.decode_cycles or 0) / ideal_f.decode_cycles - 1) if ideal_f.decode_cycles else 0.0
    print(f"node fetches its stream (NodeConfig.fetcher), same host: TTFT {fet.ttft_cycles / CLOCK:.4f} s "
          f"({f_ttft:+.3f} %), decode {((fet.decode_cycles or 0) / CLOCK):.4f} s ({f_dec:+.2f} %), "
          f"{sum(fet.host_interactions)} interactions in all ({time.time() - t0:.0f} s)", flush=True)
    rxp = pm.predict(prog, pm.with_host(P, a.host_us * 1e-6, CLOCK, fetched=True, rx=True), chunk=1)
    pk = pm.predict(prog, pm.with_host(P, a.host_us * 1e-6, CLOCK, fetched=True, rx=True, pick_slots=4), chunk=1)
    r_ttft = 100 * (rxp.ttft_cycles / ideal_f.ttft_cycles - 1)
    r_dec = 100 * ((rxp.decode_cycles or 0) / ideal_f.decode_cycles - 1) if ideal_f.decode_cycles else 0.0
    print(f"... and lands received payloads itself (NodeConfig.rx_entries): TTFT {rxp.ttft_cycles / CLOCK:.4f} s "
          f"({r_ttft:+.3f} %), decode {((rxp.decode_cycles or 0) / CLOCK):.4f} s ({r_dec:+.2f} %), "
          f"{sum(rxp.host_interactions)} interactions in all ({time.time() - t0:.0f} s)", flush=True)
    p_ttft = 100 * (pk.ttft_cycles / ideal_f.ttft_cycles - 1)
    p_dec = 100 * ((pk.decode_cycles or 0) / ideal_f.decode_cycles - 1) if ideal_f.decode_cycles else 0.0
    print(f"... and picks its tokens (NodeConfig.pick_slots): TTFT {pk.ttft_cycles / CLOCK:.4f} s "
          f"({p_ttft:+.3f} %), decode {((pk.decode_cycles or 0) / CLOCK):.4f} s ({p_dec:+.2f} %), "
          f"{sum(pk.host_interactions)} interactions in all ({time.time() - t0:.0f} s)", flush=True)
    d_ttft = 100 * (real.ttft_cycles / ideal.ttft_cycles - 1)
    d_dec = 100 * ((real.decode_cycles or 0) / ideal.decode_cycles - 1) if ideal.decode_cycles else 0.0
    print(f"{d_ttft:.3f} % TTFT with a {a.host_us:g} us host per interaction against an ideal host "
          f"(decode per token {d_dec:+.2f} %; {cfg.name}, {S} tokens, {nodes} nodes, MARS; target within 2 %)")


if __name__ == "__main__":
    main()
