"""``mcf run``: the main job — prefill and decode on a simulated MCF cluster.

A small Qwen2-shaped model (random weights from --seed) and a prompt run on N Verilated nodes
(``hdl.node.Node``: compute engine, packetizer, NIC, Ethernet links, KV-pool directory) under
each requested schedule — MARS and ring attention by default — compiled by the host scheduler
(``host.mars``, ``host.baselines``) and executed by ``host.executors.rtl``. For each schedule it
prints the time to first token in cycles, the bytes the links carried, the per-node peak KV
memory, the generated tokens, and whether logits and tokens equal golden's integer model
(``golden.int_model.IntModel``) bit for bit. ``--backend golden`` runs the same programs on the
golden executor instead (no cycles; a quick check of a configuration), ``--backend dist`` on
torch.distributed ranks, one gloo process per node (``host.executors.dist``): forked here, or,
when ``torchrun`` started this command (``torchrun --nnodes H --nproc-per-node P -m
mcf_fpga.host.cli run --backend dist --nodes H*P ...``), one rank per process over H hosts, rank 0
printing the result. ``--backend board`` runs
them on node boards through their DMA front-ends (``host.executors.board``): with
``--boards host:port,...`` on boards served by ``mcf serve-board`` (node k on the k-th; with
``mcf serve-board --simulate-boards N`` they are simulated), with ``--simulate-boards`` on
Verilated board tops in this process (mcf_fpga/sim/boards.py), otherwise on the board this runs on,
which fails with a clear error (a run needs every board: use ``--boards``).

``--checkpoint DIR`` replaces the random weights with a Hugging Face Qwen2 checkpoint, read as
``mcf accuracy`` reads it (``host.model_source``: the shape is its config.json's, so ``--model`` is
refused with it; every tensor is checked by ``golden.model.load_hf``); ``--prompt-tokens FILE``
gives the prompt. ``--numerics int`` (default) quantises the weights as ``mcf accuracy`` does and
runs the integer model on every backend (rtl and board: the node's engine must fit the shape,
``host.engine_fit``); ``--numerics float`` runs golden's float model (``golden.model.FloatModel``,
equal to transformers in fp32) on ``--backend golden`` only, in one process, without a cluster.

The node's KV memory (S_node, MCF eq. 10) defaults to --kv-headroom times the owner-only
minimum, so MARS has room for some replicas but not for all.
"""
from __future__ import annotations

import json
import sys
import time

from mcf_fpga.host.errors import UsageError, finite_float, int_in, positive_int
from mcf_fpga.host.model_source import MAX_SEED, model_source, weights_and_prompt
from mcf_fpga.host.scenario import SCHEDULES

NAME = "run"
HELP = "run the main job: MARS vs ring prefill + decode on a simulated 4-node cluster"

#: ``--node`` choices: the simulated node the rtl backend builds (``node_config``)
NODES = ("chip", "ddr", "fetch")
#: ``--numerics`` choices: ``int`` runs on every backend, ``float`` on golden only
NUMERICS = ("int", "float")


def node_config(kind: str, topology: str):
    """The ``hdl.node.NodeConfig`` of ``--node kind`` for a ``ring`` or ``mesh`` cluster."""
    from mcf_fpga.host.executors.rtl import sim_ddr_node_config, sim_fetch_node_config, sim_node_config
    if kind == "chip":
        return sim_node_config(topology)
    return sim_fetch_node_config(topology) if kind == "fetch" else sim_ddr_node_config(topology)


def _max_nodes() -> int:
    """The largest cluster the NIC addresses: Meta's node-id width and one route per node."""
    from mcf_fpga.host.config import ClusterConfig
    c = ClusterConfig()
    return min(c.meta.max_nodes, c.route_table_size)


def add_arguments(p):
    p.add_argument("--nodes", type=int_in(2, _max_nodes()), default=4,
                   help=f"cluster nodes, 2..{_max_nodes()} (default 4)")
    p.add_argument("--topology", default="ring", choices=("ring", "mesh"), help="default ring")
    p.add_argument("--model", help="model shape with random weights from --seed (default micro; the "
                   "simulated node is sized for it); not with --checkpoint")
    p.add_argument("--checkpoint", metavar="DIR",
                   help="a Hugging Face Qwen2 directory (config.json + *.safetensors), read as mcf accuracy "
                        "reads it: the model shape is its config.json's, its tensors must be exactly those "
                        "config.json implies; on rtl and board the node's engine must fit the shape")
    p.add_argument("--numerics", default="int", choices=NUMERICS,
                   help="int: golden's integer model, the arithmetic the hardware performs, run by every "
                        "backend (default); float: the float model (fp32, equal to transformers), "
                        "--backend golden only, one process (the cluster options do not apply)")
    p.add_argument("--layers", type=positive_int,
                   help="use only the first N decoder layers (1..the model's num_layers)")
    p.add_argument("--seed", type=int_in(0, MAX_SEED), default=0,
                   help="seed for weights and prompt (default 0)")
    p.add_argument("--prompt-len", type=positive_int, default=256,
                   help="prompt tokens (default 256); prompt + new tokens at most the model's max_position")
    p.add_argument("--prompt-tokens", metavar="FILE",
                   help="the prompt: token ids in [0, vocab), whitespace-separated or a JSON list of "
                        "integers (as mcf accuracy takes them), instead of --prompt-len random ones")
    p.add_argument("--max-new-tokens", type=positive_int, default=4,
                   help="tokens to generate, >= 1 (default 4)")
    p.add_argument("--schedules", default="mars,ring",
                   help=f"comma-separated, from {', '.join(SCHEDULES)} (default mars,ring)")
    p.add_argument("--chunk", type=positive_int, default=16,
                   help="prefill piece in tokens (default 16): the MARS chunk; ring splits chunks of nodes x "
                        "this across the ring, zigzag 2 x nodes x this into 2N pieces, PD nodes/2 x this")
    p.add_argument("--block", type=positive_int, default=16, help="golden KV block in tokens (default 16)")
    p.add_argument("--mars-search", action="store_true",
                   help="plan MARS by search (host.mars_search: chunk size x placement x replica cap x eq. 14, "
                        "each candidate timed by the performance model of the simulated node); --json reports "
                        "the chosen plan and its predicted figures under mars_search")
    p.add_argument("--mars-screen", action="store_true",
                   help="with --mars-search: screen the candidates with the coarse model and re-time the best "
                        "few exactly (host.mars_search screen=True; for large prompts)")
    p.add_argument("--kv-headroom", type=finite_float(1.0), default=2.0,
                   help="S_node as a multiple of the owner-only KV minimum, 1..nodes (default 2.0; at "
                        "nodes x every node has room for every block)")
    p.add_argument("--logits", default="all", choices=("all", "last"),
                   help="prompt rows the head runs on: all (default; every row's logits checked against golden) "
                        "or last (the first token's row only, as an inference server runs it)")
    p.add_argument("--backend", default="rtl", choices=("rtl", "golden", "dist", "board"),
                   help="rtl: the Verilated cluster (default); golden: the golden executor in one process; "
                        "dist: golden on torch.distributed ranks (forked, or torchrun's); board: node boards")
    p.add_argument("--simulate-boards", action="store_true",
                   help="with --backend board: simulated node boards (Verilated board top + DDR model)")
    p.add_argument("--boards", metavar="HOST:PORT,...",
                   help="with --backend board: the boards' servers (mcf serve-board), node k on the k-th; "
                        "as many as --nodes")
    p.add_argument("--node", default="chip", choices=NODES,
                   help="the simulated node (rtl backend): chip = K/V in on-chip memory, the host feeds "
                        "every instruction (default); ddr = K/V in DDR; fetch = K/V in DDR and the node "
                        "fetches its instruction stream, loads its weights and rows, lands received "
                        "payloads and picks its tokens itself (docs/compiler.md)")
    p.add_argument("--sim-threads", type=positive_int, metavar="K",
                   help="with --backend rtl: threads that step the simulated nodes, 1..--nodes (default 1); "
                        "the results are the same for every K, only the wall time changes")
    p.add_argument("--sim-workers", type=positive_int, metavar="K",
                   help="with --backend rtl: split the simulated cluster over K local processes "
                        "(torch.distributed ranks, gloo), 1..--nodes; the same results as one process. "
                        "Over several hosts: torchrun --nnodes H --nproc-per-node P -m mcf_fpga.host.cli "
                        "run --backend rtl (one rank per process, rank 0 prints)")
    p.add_argument("--rank-timeout", type=finite_float(lo=1.0, hi=86400.0), default=300.0, metavar="SECONDS",
                   help="--sim-workers, torchrun and --backend dist: how long a rank waits for the others in "
                        "one exchange before the run ends with an error (default 300; a rank that dies ends "
                        "the run on every rank within it)")
    p.add_argument("--trace", metavar="DIR",
                   help="with --backend rtl: FST waveforms of every node, DIR/<schedule>/node<i>.fst "
                        "(the tracing Verilator build; docs/harness.md, \"Waveforms\")")
    p.add_argument("--trace-window", metavar="A:B", type=_window, default=(0, None),
                   help="with --trace: cycles [A, B) since the nodes' configuration (default 0: the "
                        "whole run; A: or :B leave that end open)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _programs(args, cfg):
    from mcf_fpga.host.scenario import build_programs
    names = [x.strip() for x in args.schedules.split(",") if x.strip()]
    try:
        progs, cluster = build_programs(cfg, nodes=args.nodes, topology=args.topology, prompt_len=args.prompt_len,
                                        max_new_tokens=args.max_new_tokens, schedules=names, chunk=args.chunk,
                                        block=args.block, kv_headroom=args.kv_headroom, logits=args.logits)
    except ValueError as exc:
        if "schedules=" in str(exc) or "kv_headroom=" in str(exc):
            raise ValueError(f"--{str(exc).replace('_', '-', 1)}") from None
        raise
    if getattr(args, "mars_search", False) and "mars" in progs:
        progs["mars"] = _searched_mars(args, cfg, cluster)
    return progs, cluster


def _searched_mars(args, cfg, cluster):
    """``--mars-search``: the MARS Program chosen by ``host.mars_search`` for the simulated node
    (``mars_search.search_sim_node``); the search's summary is in ``stats["search"]``."""
    from mcf_fpga.host import mars_search
    return mars_search.search_sim_node(cfg, cluster, args.prompt_len, args.max_new_tokens, base_chunk=args.chunk,
                                       block=args.block, logits=args.logits,
                                       screen=getattr(args, "mars_screen", False)).program


def run(args) -> int:
    from mcf_fpga.golden.int_model import IntModel, quantize_model
    from mcf_fpga.host.engine_fit import check_engine_fits

    if args.simulate_boards and args.backend != "board":
        raise UsageError(f"--simulate-boards needs --backend board, got --backend {args.backend}")
    if args.boards is not None:
        from mcf_fpga.host.board.remote import parse_boards
        if args.backend != "board" or args.simulate_boards:
            raise UsageError("--boards needs --backend board and no --simulate-boards")
        args.board_addresses = parse_boards(args.boards, args.nodes)
    if args.node != "chip" and args.backend != "rtl":
        raise UsageError(f"--node {args.node} needs --backend rtl (the board top and golden run the default node)")
    if args.numerics == "float" and args.backend != "golden":
        node = {"rtl": "the simulated node", "dist": "the golden executor's ranks"}.get(args.backend,
                                                                                      "a board's node")
        raise UsageError(f"--numerics float needs --backend golden: {node} (--backend {args.backend}) computes "
                         f"in integer arithmetic only (--numerics int)")
    rank0 = _check_torchrun(args)
    if args.checkpoint and args.model is not None:
        raise UsageError(f"--model={args.model} with --checkpoint: the checkpoint's config.json gives the "
                         f"model shape, drop --model")
    for opt, val in (("--sim-workers", args.sim_workers), ("--trace", args.trace)):
        if val is not None and args.backend != "rtl":
            raise UsageError(f"{opt} needs --backend rtl, got --backend {args.backend}")
    if args.sim_workers is not None and args.sim_workers > args.nodes:
        raise UsageError(f"--sim-workers={args.sim_workers} must be in 1..{args.nodes} (--nodes): one node per "
                         f"process at most")
    if args.trace_window != (0, None) and args.trace is None:
        raise UsageError("--trace-window needs --trace DIR")
    if args.sim_threads is not None:
        if args.backend != "rtl":
            raise UsageError(f"--sim-threads needs --backend rtl, got --backend {args.backend}")
        if args.sim_threads > args.nodes:
            raise UsageError(f"--sim-threads={args.sim_threads} must be in 1..{args.nodes} (--nodes): one node "
                             f"per thread at most")
    if args.kv_headroom > args.nodes:
        raise UsageError(f"--kv-headroom={args.kv_headroom:g} must be in [1, --nodes={args.nodes}]: at "
                         f"--nodes x the owner-only minimum every node already has room for every block")
    # the config (a checkpoint's config.json only) and the prompt file first: every limit is
    # checked before a weight is read or generated
    cfg, prompt, source = model_source(args, default_model="micro")
    t0 = time.time()
    if args.numerics == "float":
        return _run_float(args, cfg, prompt, source, t0)
    progs, cluster = _programs(args, cfg)
    if args.backend not in ("golden", "dist"):
        node = f"--node {args.node}" if args.backend == "rtl" else "the board's node"
        check_engine_fits(cfg, node_config(args.node, args.topology).engine, node=node)
        _check_node_memory(progs, args.node)
    w, cfg, prompt = weights_and_prompt(args, cfg, prompt)
    im = IntModel(quantize_model(w, block=args.block))
    say = (lambda *a: None) if args.json or not rank0 else (lambda *a: print(*a, file=sys.stderr))
    say(f"[mcf run] {cluster.nodes}-node {cluster.topology}, {source} ({cfg.num_layers} layers, "
        f"hidden {cfg.hidden_size}, heads {cfg.num_heads}/{cfg.num_kv_heads}), prompt {len(prompt)} tokens, "
        f"{args.max_new_tokens} new; S_node {cluster.kv_bytes_per_node} B; numerics int; backend {args.backend}"
        + (f", node {args.node}" if args.backend == "rtl" else ""))
    # golden reference: IntModel prefill logits and greedy tokens
    ref_logits, ref_tokens = _reference(im, prompt, args.max_new_tokens)
    runs = {}
    for name, prog in progs.items():
        runs[name] = _run_one(name, prog, im, prompt, args, ref_logits, ref_tokens, say)
    if _torchrun():
        _end_torchrun()
    if not rank0:                   # a torchrun rank other than 0: rank 0 reports
        return 0
    out = {"prompt": prompt, "numerics": "int", "checkpoint": args.checkpoint, "model": cfg.name,
           "nodes": cluster.nodes, "topology": cluster.topology,
           "backend": args.backend, "node": args.node, "logits": args.logits, "runs": runs,
           "seconds": round(time.time() - t0, 1)}
    first = runs[next(iter(runs))]
    out.update({k: first[k] for k in ("tokens", "ttft_cycles", "bytes_moved", "peak_kv_bytes",
                                      "matches_golden")})
    if "mars" in progs and "search" in progs["mars"].stats:
        out["mars_search"] = progs["mars"].stats["search"]
    if "mars" in runs and "ring" in runs and runs["mars"]["ttft_cycles"] and runs["ring"]["ttft_cycles"]:
        out["mars_speedup_over_ring"] = round(runs["ring"]["ttft_cycles"] / runs["mars"]["ttft_cycles"], 3)
    if args.json:
        print(json.dumps(out))
    else:
        _table(out)
    return 0 if all(r["matches_golden"] for r in runs.values()) else 1


def _run_float(args, cfg, prompt, source, t0) -> int:
    """``--numerics float`` (``--backend golden``): golden's float model (``golden.model.FloatModel``,
    fp32, equal to transformers' Qwen2ForCausalLM) generates greedily in this process. There is no
    cluster and no reference to compare with: ``ttft_cycles``, ``bytes_moved``, ``peak_kv_bytes``
    and ``matches_golden`` are null, ``runs`` is empty."""
    import torch

    from mcf_fpga.golden.model import FloatModel
    w, cfg, prompt = weights_and_prompt(args, cfg, prompt, float_prefill=True)
    if not args.json:
        print(f"[mcf run] {source} ({cfg.num_layers} layers, hidden {cfg.hidden_size}, heads "
              f"{cfg.num_heads}/{cfg.num_kv_heads}), prompt {len(prompt)} tokens, {args.max_new_tokens} new; "
              f"numerics float; backend golden", file=sys.stderr)
    tokens = FloatModel(w).generate(torch.tensor(prompt), args.max_new_tokens)
    out = {"prompt": prompt, "numerics": "float", "checkpoint": args.checkpoint, "model": cfg.name,
           "backend": "golden", "tokens": tokens, "ttft_cycles": None, "bytes_moved": None,
           "peak_kv_bytes": None, "matches_golden": None, "runs": {}, "seconds": round(time.time() - t0, 1)}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"MCF golden float model (fp32): {source}, prompt {len(prompt)} tokens, "
              f"numerics float, backend golden")
        print(f"tokens {tokens}")
    return 0


def _torchrun() -> bool:
    from mcf_fpga.host.executors.dist import launched_by_torchrun
    return launched_by_torchrun()


def _check_torchrun(args) -> bool:
    """Whether this process reports the run: False only on a torchrun rank other than 0. Under
    torchrun ``--backend dist`` runs one node per rank, ``--backend rtl`` a group of nodes per
    rank (at most --nodes ranks)."""
    import os
    if "WORLD_SIZE" not in os.environ or "RANK" not in os.environ:
        return True
    world = int(os.environ["WORLD_SIZE"])
    if args.backend == "dist":
        if world != args.nodes:
            raise UsageError(f"--nodes={args.nodes} must equal torchrun's WORLD_SIZE={world} (one rank per node)")
    elif args.backend == "rtl":
        if world > args.nodes:
            raise UsageError(f"torchrun's WORLD_SIZE={world} must be in 1..{args.nodes} (--nodes): each rank "
                             f"simulates at least one node")
        if args.sim_workers is not None:
            raise UsageError("--sim-workers with torchrun: torchrun's processes are the workers")
    else:
        raise UsageError(f"torchrun started mcf run with --backend {args.backend}: under torchrun only "
                         f"--backend dist (one rank per node) and --backend rtl (a node group per rank) run")
    return int(os.environ["RANK"]) == 0


def _init_torchrun(timeout: float):
    """The gloo process group of a torchrun job (``init_method=env://``, waits of at most
    ``timeout`` s), once."""
    import datetime

    import torch.distributed as dist
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=timeout))


def _end_torchrun():
    """Every rank is done: leave the process group together, so no rank exits while gloo still
    has work in flight for it (its threads would abort the process at exit)."""
    import torch.distributed as dist
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def _window(text: str) -> tuple:
    """``A:B`` -> (A, B) cycles, B > A >= 0; an empty end is open (A defaults to 0)."""
    import argparse
    a, sep, b = text.partition(":")
    try:
        lo = int(a) if a else 0
        hi = int(b) if b else None
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not A:B (two cycle counts, e.g. 1000:5000)") from None
    if not sep or lo < 0 or (hi is not None and hi <= lo):
        raise argparse.ArgumentTypeError(f"{text!r} must be A:B with 0 <= A < B (cycles)")
    return lo, hi


def _check_node_memory(progs, node="chip"):
    """Every program's KV pool fits the simulated node's (``node_config``: the node the rtl and
    board backends build), checked before any build or run."""
    from mcf_fpga.host.executors.rtl import _topo_name
    for name, prog in progs.items():
        have = node_config(node, _topo_name(prog.topo)).kv_slots
        if prog.n_slots > have:
            raise UsageError(f"schedule {name}: the KV pool needs {prog.n_slots} slots per node, the simulated "
                             f"node has {have}: lower --prompt-len, --layers or --kv-headroom, or raise --chunk "
                             f"or --nodes")


def _reference(im, prompt, k):
    """Golden's integer model: logits of every prompt row and the greedy tokens."""
    import torch
    return im.forward(torch.tensor(prompt)), im.generate(prompt, k)


def _run_one(name, prog, im, prompt, args, ref_logits, ref_tokens, say):
    from mcf_fpga.host.executors import run as run_exec
    bar = None
    total = sum(len(o) for o in prog.ops)
    if args.backend in ("rtl", "board") and not args.no_progress and not args.json:
        from tqdm import tqdm

        def progress(done, _total):
            nonlocal bar
            if bar is None:       # opened at the first op, after any Verilator build's own bar
                bar = tqdm(total=total, desc=f"{name:6s}", unit="op", file=sys.stderr, leave=True)
            bar.update(done - bar.n)
    else:
        progress = None
    kw = {"progress": progress} if progress else {}
    if args.backend == "dist" and _torchrun():
        from mcf_fpga.host.executors.dist import run_dist_rank
        _init_torchrun(args.rank_timeout)
        res = run_dist_rank(prog, im, prompt, timeout=args.rank_timeout)
        if res is None:
            return None
    elif args.backend == "board" and args.boards is not None:
        from mcf_fpga.host.board.remote import RemoteBoardCluster
        from mcf_fpga.host.executors.rtl import sim_node_config, _topo_name
        with RemoteBoardCluster(args.board_addresses, prog.topo, sim_node_config(_topo_name(prog.topo))) as cl:
            res = run_exec(prog, im, prompt, backend="board", cluster=cl, **kw)
    else:
        if args.backend == "board":
            kw["cluster"] = "sim" if args.simulate_boards else None
        if args.backend == "rtl" and args.node != "chip":
            from mcf_fpga.host.executors.rtl import _topo_name
            kw["node_cfg"] = node_config(args.node, _topo_name(prog.topo))
        if args.sim_threads is not None:
            kw["threads"] = args.sim_threads
        if args.sim_workers is not None:
            kw["ranks"] = args.sim_workers
            kw["rank_timeout"] = args.rank_timeout
        if args.trace is not None:
            import os
            kw["trace"] = (os.path.join(args.trace, name), *args.trace_window)
        if args.backend == "rtl" and _torchrun():
            from mcf_fpga.sim.ranks import RankGroup
            _init_torchrun(args.rank_timeout)
            kw["group"] = RankGroup(prog.nodes)
            if kw["group"].rank != 0:
                kw.pop("progress", None)
        if args.backend == "dist":
            kw["timeout"] = args.rank_timeout
        res = run_exec(prog, im, prompt, backend=args.backend, **kw)
        if res is None:                 # a torchrun rank other than 0
            return None
    if bar is not None:
        bar.update(total - bar.n)
        bar.close()
    ref = ref_logits if prog.logits == "all" else ref_logits[-1:]     # --logits last: the last row's
    logits_ok = bool(res.logits is not None and res.logits.shape == ref.shape and bool((res.logits == ref).all()))
    tokens = list(res.tokens)
    slot = prog.slot_bytes
    rec = {"schedule": name, "tokens": tokens, "golden_tokens": ref_tokens,
           "matches_golden": logits_ok and tokens == ref_tokens, "logits_match": logits_ok,
           "ttft_cycles": getattr(res, "ttft_cycles", None),
           "decode_cycles": getattr(res, "decode_cycles", None),
           "bytes_moved": getattr(res, "wire_bytes", None),
           "kv_payload_bytes": prog.traffic().prefill_payload,
           "hop_bytes_planned": prog.traffic().prefill_bytes,
           "peak_kv_bytes": [s * slot for s in res.peak_slots],
           "unit_tokens": prog.units[0][1] - prog.units[0][0], "units": len(prog.units),
           "sim_seconds": round(getattr(res, "seconds", 0.0), 1)}
    rates = getattr(res, "host_rates", None)
    if rates is not None:           # rtl and board: what the host did (host.compiler)
        rec["host_interactions_per_unit"] = round(rates[0], 1)
        rec["host_interactions_per_token"] = None if rates[1] is None else round(rates[1], 1)
    return rec


def _table(out):
    runs = out["runs"]
    model = f"checkpoint {out['checkpoint']}" if out["checkpoint"] else f"model {out['model']}"
    print(f"MCF simulated cluster: {out['nodes']} nodes ({out['topology']}), {model}, "
          f"prompt {len(out['prompt'])} tokens, numerics {out['numerics']}, backend {out['backend']}")
    print(f"{'schedule':9s} {'TTFT cycles':>12s} {'TTFT us@200MHz':>15s} {'wire bytes':>11s} "
          f"{'peak KV/node (KiB)':>22s}  golden")
    for name, r in runs.items():
        tt = r["ttft_cycles"]
        peak = "/".join(f"{b / 1024:.0f}" for b in r["peak_kv_bytes"])
        print(f"{name:9s} {tt if tt is not None else '-':>12} "
              f"{(f'{tt / 200:.1f}' if tt else '-'):>15s} {r['bytes_moved'] if r['bytes_moved'] is not None else '-':>11} "
              f"{peak:>22s}  {'equal' if r['matches_golden'] else 'DIFFERENT'}")
    for name, r in runs.items():
        print(f"{name:9s} tokens {r['tokens']}  (golden {r['golden_tokens']})")
    for name, r in runs.items():
        if r.get("host_interactions_per_unit") is not None:
            tok = r["host_interactions_per_token"]
            print(f"{name:9s} host interactions: {r['host_interactions_per_unit']} per prompt KV unit, "
                  f"{'-' if tok is None else tok} per decode token (cluster-wide; docs/compiler.md)")
    if "mars_speedup_over_ring" in out:
        print(f"MARS TTFT speedup over ring: {out['mars_speedup_over_ring']:.2f}x")
