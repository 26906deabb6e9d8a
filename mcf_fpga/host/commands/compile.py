"""``mcf compile``: print the per-node instruction streams the compiler makes of a schedule.

The program is built exactly as ``mcf run`` builds it (same options and defaults), then compiled
by ``host.compiler`` for the simulated node ``mcf run`` uses: one record per line -- engine
instructions with their fields (``kvb=row(L,U)+k`` / ``b=slot(L,U)``: a KV unit's rows / DDR
slot, resolved from the node's directory when it runs), directory commands, waits, the data the
host still feeds, and ``# op N kind done`` after every program op. The text is the same for the
same options, so two configurations can be diffed. ``--summary`` prints only the counts per
node: records, engine instructions, directory commands and host interactions per op kind.
"""
from __future__ import annotations

import collections

from mcf_fpga.host.errors import UsageError, finite_float, int_in, positive_int
from mcf_fpga.host.scenario import SCHEDULES

NAME = "compile"
HELP = "print the per-node instruction streams of a schedule (the compiler's listing)"


def add_arguments(p):
    from mcf_fpga.host.commands.run import _max_nodes
    p.add_argument("--nodes", type=int_in(2, _max_nodes()), default=4, help="cluster nodes (default 4)")
    p.add_argument("--topology", default="ring", choices=("ring", "mesh"), help="default ring")
    p.add_argument("--model", default="micro", help="model shape (default micro)")
    p.add_argument("--layers", type=positive_int, help="use only the first N decoder layers")
    p.add_argument("--prompt-len", type=positive_int, default=256, help="prompt tokens (default 256)")
    p.add_argument("--max-new-tokens", type=positive_int, default=4, help="tokens to generate (default 4)")
    p.add_argument("--schedule", default="mars", choices=SCHEDULES, help="default mars")
    p.add_argument("--chunk", type=positive_int, default=16, help="prefill piece in tokens (default 16)")
    p.add_argument("--block", type=positive_int, default=16, help="golden KV block in tokens (default 16)")
    p.add_argument("--kv-headroom", type=finite_float(1.0), default=2.0,
                   help="S_node as a multiple of the owner-only KV minimum (default 2.0)")
    p.add_argument("--node", type=int_in(0, _max_nodes() - 1), help="only this node's stream")
    p.add_argument("--summary", action="store_true", help="counts per node only, no listing")


def run(args) -> int:
    from mcf_fpga.host.model_source import check_lengths, model_config
    from mcf_fpga.host.compiler import Ins, KvCmd, compile_program, host_interactions, listing
    from mcf_fpga.host.executors.rtl import _decode_routes, _topo_name, sim_node_config
    from mcf_fpga.host.scenario import build_programs

    if args.node is not None and args.node >= args.nodes:
        raise UsageError(f"--node={args.node} must be in 0..{args.nodes - 1} (--nodes={args.nodes})")
    cfg = check_lengths(model_config(args.model), args)
    progs, _cluster = build_programs(cfg, nodes=args.nodes, topology=args.topology, prompt_len=args.prompt_len,
                                     max_new_tokens=args.max_new_tokens, schedules=[args.schedule],
                                     chunk=args.chunk, block=args.block, kv_headroom=args.kv_headroom)
    prog = progs[args.schedule]
    _routes, rid_max, rid_sum = _decode_routes(prog)
    comps = compile_program(prog, sim_node_config(_topo_name(prog.topo)), rid_max=rid_max, rid_sum=rid_sum)
    for c in comps:
        if args.node is not None and c.node != args.node:
            continue
        kinds = collections.Counter(type(r).__name__ for r in c.stream)
        host = host_interactions(c.stream)
        print(f"# node {c.node}: {len(c.program.ops[c.node])} program ops, {len(c.stream)} records, "
              f"{kinds[Ins.__name__]} engine instructions, {kinds[KvCmd.__name__]} directory commands, "
              f"{sum(host.values())} host interactions "
              f"({', '.join(f'{k} {v}' for k, v in sorted(host.items())) or 'none'})")
        if not args.summary:
            print(listing(c.stream), end="")
    return 0
