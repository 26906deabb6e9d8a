"""Build the PL design for a board: Verilog, XDC, Vivado Tcl, Yosys resource report.

Writes everything into one build directory; runs Vivado when it is on PATH, and
otherwise writes the complete build plan (build_plan.md) and prints how to run it.
The last line printed is the LUT utilisation in percent of the XCK26.

Examples:
  mcf build --board kr260
  mcf build --board kr260 --nodes 4 --node-id 2 -o build/n2
"""
from mcf_fpga.host.commands.run import _max_nodes
from mcf_fpga.host.errors import UsageError

NAME = "build"
HELP = "build the PL design for a board (Verilog, XDC, Vivado Tcl, resource report)"


def add_arguments(p):
    p.add_argument("--board", default="kr260", help="target board (known: kr260; default kr260)")
    p.add_argument("--nodes", type=int, default=1,
                   help=f"number of nodes in the cluster, 1..{_max_nodes()} (default 1)")
    p.add_argument("--node-id", type=int, default=0, help="this node's id, 0..nodes-1 (default 0)")
    p.add_argument("-o", "--out", default=None,
                   help="build directory (default build/<board>-node<K>)")
    p.add_argument("--app", default="mcf",
                   help="app (firmware folder) name: letters, digits, _ and - (default mcf)")
    p.add_argument("--top", default=None,
                   help="PL top to build (default: node, the MCF node with its DMA front-end; see boards.flow.TOPS)")
    p.add_argument("--no-vivado", action="store_true",
                   help="write the build plan only, even when vivado is on PATH")


def run(args) -> int:
    from mcf_fpga.boards.flow import build
    if args.nodes > _max_nodes():
        raise UsageError(f"--nodes={args.nodes} must be <= {_max_nodes()} (the NIC's node addresses and "
                         f"route table)")
    r = build(args.board, nodes=args.nodes, node_id=args.node_id, out=args.out, app=args.app,
              top_name=args.top, run_vivado=False if args.no_vivado else None)
    used = r.utilisation.used["LUT"]
    avail = r.utilisation.available["LUT"]
    print(f"LUT utilisation: {r.lut_percent:.2f} % of XCK26 ({used} / {avail} LUTs)")
    return 0
