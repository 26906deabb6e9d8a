"""Write figures as PNG.

``fig4``: per-node KV memory and the mean replica factor over the prefill steps of one MARS
plan (MCF Fig. 4): replicas fill the headroom early and drain until every block lives only on
its owner. ``fig3``: TTFT against prompt length for MARS, ring, zigzag ring and PD
disaggregation (MCF Fig. 3), predicted by the RTL-calibrated performance model
(``host.perfmodel``: instruction, link and NIC costs measured on the Verilated nodes, re-evaluated
for the KR260 node with K/V in DDR, ``kr260_setup``; TTFT within 1 % of the cluster simulation
where both run), with the
compute-only bound of MARS. Ring and zigzag split ``N x B`` / ``2N x B`` token chunks, PD
``N/2 x B``, B = MARS's chunk (``host.scenario``).
"""
from __future__ import annotations

import os
import sys

from mcf_fpga.host.commands.run import _max_nodes
from mcf_fpga.host.model_source import model_config
from mcf_fpga.host.errors import UsageError, finite_float, int_in, positive_int

NAME = "plot"
HELP = "write figures (MARS memory/replica factor, TTFT vs prompt length) as PNG"


def add_arguments(p):
    p.add_argument("figures", nargs="*",
                   metavar="FIGURE", help="fig4 and/or fig3 (default: both)")
    p.add_argument("--model", default="tiny", help="model shape (default tiny)")
    p.add_argument("--nodes", type=int_in(2, _max_nodes()), default=8,
                   help=f"cluster nodes, 2..{_max_nodes()} (default 8)")
    p.add_argument("--topology", default="ring", choices=["ring", "mesh"])
    p.add_argument("--link", default="sfp10g", help="link preset: sfp10g or rgmii1g (default sfp10g)")
    p.add_argument("--prompt-len", type=positive_int, default=4096,
                   help="fig4 prompt length (default 4096), at most the model's max_position")
    p.add_argument("--kv-mib-per-node", type=finite_float(lo=1 / 1024, hi=float(1 << 30)), default=None,
                   help="KV memory per node S_node in MiB (default: 1.5x the owner-only share)")
    p.add_argument("--seq-lens", default="256,512,1024,2048,4096",
                   help="fig3 prompt lengths, comma-separated")
    p.add_argument("-o", "--out-dir", default="results/plots", help="output folder")


def _cluster(args, model, prompt_len):
    from mcf_fpga.host.config import ClusterConfig
    from mcf_fpga.host.mars import m_token
    if args.kv_mib_per_node:
        s_node = int(args.kv_mib_per_node * 2 ** 20)
    else:
        s_node = int(1.5 * m_token(model) * prompt_len / args.nodes) + (1 << 20)
    return ClusterConfig(nodes=args.nodes, topology=args.topology, kv_bytes_per_node=s_node)


def _seq_lens(text, model) -> list:
    """``--seq-lens``: comma-separated positive integers, each at most the model's max_position."""
    try:
        lens = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        lens = []
    if not lens or min(lens) <= 0:
        raise UsageError(f"--seq-lens={text[:80]!r} must be comma-separated positive integers")
    if max(lens) > model.max_position:
        raise UsageError(f"--seq-lens: {max(lens)} exceeds model {model.name}'s max_position={model.max_position}")
    return lens


def fig4(args, plt, model, hw) -> str:
    from mcf_fpga.host import mars
    cluster = _cluster(args, model, args.prompt_len)
    print(f"[mcf plot] fig4: planning MARS for {args.prompt_len} tokens on {args.nodes} nodes ...",
          file=sys.stderr, flush=True)
    mp = mars.plan(model, cluster, hw, args.prompt_len).stats["plan"]
    steps = range(len(mp.step_mem))
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for n in range(args.nodes):
        a.plot(steps, [m[n] / 2 ** 20 for m in mp.step_mem], lw=1, label=f"node {n}" if args.nodes <= 8 else None)
    a.plot(range(len(mp.owner_mem)), [max(o) / 2 ** 20 for o in mp.owner_mem], "k--", lw=1.5,
           label="owner only (max node)")
    a.axhline(cluster.kv_bytes_per_node / 2 ** 20, color="r", ls=":", label="S_node")
    a.set(xlabel="prefill step (chunk)", ylabel="KV memory per node (MiB)",
          title=f"(a) per-node KV memory, N={args.nodes}")
    a.legend(fontsize=7)
    b.plot(range(len(mp.step_replica)), mp.step_replica, "o-", ms=3)
    b.set(xlabel="prefill step (chunk)", ylabel="mean replica factor", ylim=(0, args.nodes + 0.5),
          title="(b) mean replica factor (ends at 1: owner-only)")
    fig.suptitle(f"MARS on {model.name}, {args.prompt_len}-token prompt, chunk B={mp.B}, {args.topology}")
    fig.tight_layout()
    path = os.path.join(args.out_dir, "fig4_memory_replica.png")
    fig.savefig(path, dpi=120)
    return path


def fig3(args, plt, model, hw) -> str:
    from mcf_fpga.host import baselines, mars, perfmodel as pm
    lens = _seq_lens(args.seq_lens, model)
    hw, P, _engine = pm.kr260_setup(args.link, hw.clock_hz)
    ms = lambda cycles: cycles / hw.clock_hz * 1e3  # noqa: E731
    series = {"MARS": [], "ring": [], "zigzag": [], "PD": []}
    bound = []
    N = args.nodes
    for L in lens:
        cluster = _cluster(args, model, L)
        print(f"[mcf plot] fig3: {L} tokens ...", file=sys.stderr, flush=True)
        prog = mars.plan(model, cluster, hw, L)
        B = prog.stats["plan"].B
        pr = pm.predict(prog, P, chunk=1)
        series["MARS"].append(ms(pr.ttft_cycles))
        bound.append(ms(pm.compute_only(pr)))
        for name, fn, share in (("ring", baselines.ring, N), ("zigzag", baselines.zigzag, 2 * N),
                                ("PD", baselines.pd, max(1, N // 2))):
            series[name].append(ms(pm.predict(fn(model, cluster, hw, L, 0, chunk=B * share), P, chunk=1).ttft_cycles))
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, ys in series.items():
        ax.plot(lens, ys, "o-", label=name)
    ax.plot(lens, bound, "k:", label="MARS compute-only bound")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(lens, [str(L) for L in lens])
    ax.set_xlabel("prompt length (tokens)")
    ax.set_ylabel("TTFT (ms)")
    ax.set_title(f"TTFT vs prompt length, {model.name}, N={N} ({args.link}), KR260 node, K/V in DDR\n"
                 "RTL-calibrated performance model (mcf_fpga/host/perfmodel.py)", fontsize=9)
    ax.legend()
    fig.tight_layout()
    path = os.path.join(args.out_dir, "fig3_ttft.png")
    fig.savefig(path, dpi=120)
    return path


def run(args) -> int:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mcf_fpga.host.config import HardwareConfig

    model = model_config(args.model)
    figures = args.figures or ["fig4", "fig3"]
    bad = [f for f in figures if f not in ("fig4", "fig3")]
    if bad:
        raise UsageError(f"figure {bad[0]!r} unknown, expected fig4 or fig3")
    if "fig4" in figures and args.prompt_len > model.max_position:
        raise UsageError(f"--prompt-len={args.prompt_len} exceeds model {model.name}'s "
                         f"max_position={model.max_position}")
    if "fig3" in figures:
        _seq_lens(args.seq_lens, model)
    try:
        hw = HardwareConfig.kr260(link=args.link)
    except ValueError as exc:
        raise UsageError(f"--link={args.link!r}: {exc}") from None
    try:
        os.makedirs(args.out_dir, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"-o {args.out_dir}: cannot create ({exc.strerror or exc})") from None
    for f in figures:
        print(f"wrote {(fig4 if f == 'fig4' else fig3)(args, plt, model, hw)}")
    return 0
