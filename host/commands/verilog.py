"""Export a registered block as Verilog with AMBA port names (s_axis_tdata, s_axi_awaddr ...).

Examples:
  mcf verilog --list
  mcf verilog axis_register_slice --param data_width=128 -o slice.v
"""
import sys

NAME = "verilog"
HELP = "write a block's Verilog with AMBA port names"


def add_arguments(p):
    p.add_argument("block", nargs="?", help="block name (see --list)")
    p.add_argument("--param", action="append", default=[], metavar="K=V",
                   help="override a block parameter (repeatable)")
    p.add_argument("-o", "--output", default="-", help="output file (default: stdout)")
    p.add_argument("--name", default=None, help="Verilog module name (default: the block name)")
    p.add_argument("--list", action="store_true", help="list blocks and their parameters")


def run(args) -> int:
    from hdl import blocks
    from hdl.sim.verilog import to_verilog
    if args.list or not args.block:
        for b in sorted(blocks.BLOCKS.values(), key=lambda b: b.name):
            params = " ".join(f"{k}={v!r}" for k, v in b.params.items())
            print(f"{b.name:24s} {b.doc}  [{params}]")
        return 0 if args.list else 2
    params = blocks.parse_params(args.block, args.param)
    comp, rename = blocks.build(args.block, **params)
    text = to_verilog(comp, args.name or args.block, rename=rename)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w") as f:
            f.write(text)
        print(f"wrote {args.output}", file=sys.stderr)
    return 0
