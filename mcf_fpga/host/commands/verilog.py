"""Export a registered block as Verilog with AMBA port names (s_axis_tdata, s_axi_awaddr ...).

With --ip DIR the block is packaged as a Vivado IP instead: DIR/component.xml (IP-XACT, with
its AXI4, AXI4-Lite, AXI4-Stream, clock, reset and interrupt interfaces and the register map),
DIR/hdl/<name>.v (the export) and DIR/hdl/<name>_ip.v (a wrapper whose ports carry
X_INTERFACE_INFO attributes), and for a block with registers (node) DIR/regmap.md, regmap.h and
regmap.json. --regmap md|h|json prints only the register map (no Yosys run). docs/ip.md.

Examples:
  mcf verilog --list
  mcf verilog axis_register_slice --param data_width=128 -o slice.v
  mcf verilog node --ip ip/node
  mcf verilog node --regmap h -o node_regs.h
"""
import os
import re
import sys

from mcf_fpga.host.errors import RuntimeFailure, UsageError

NAME = "verilog"
HELP = "write a block's Verilog with AMBA port names"

# IEEE 1364-2005 reserved words: not usable as a module name
VERILOG_KEYWORDS = frozenset("""
always and assign automatic begin buf bufif0 bufif1 case casex casez cell cmos config deassign
default defparam design disable edge else end endcase endconfig endfunction endgenerate endmodule
endprimitive endspecify endtable endtask event for force forever fork function generate genvar
highz0 highz1 if ifnone incdir include initial inout input instance integer join large liblist
library localparam macromodule medium module nand negedge nmos nor noshowcancelled not notif0
notif1 or output parameter pmos posedge primitive pull0 pull1 pulldown pullup pulsestyle_onevent
pulsestyle_ondetect rcmos real realtime reg release repeat rnmos rpmos rtran rtranif0 rtranif1
scalared showcancelled signed small specify specparam strong0 strong1 supply0 supply1 table task
time tran tranif0 tranif1 tri tri0 tri1 triand trior trireg unsigned use uwire vectored wait wand
weak0 weak1 while wire wor xnor xor
""".split())
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,1023}")
MAX_PARAM = 1 << 20      # integer --param values: a typo must not make a block too large to elaborate


def check_module_name(name: str) -> str:
    """``name`` if it is a plain (unescaped) Verilog identifier (a letter or _, then letters,
    digits or _; at most 1024 characters; not a reserved word), else a UsageError naming --name
    and the rule."""
    if not _IDENT.fullmatch(name) or name in VERILOG_KEYWORDS:
        why = "a Verilog reserved word" if name in VERILOG_KEYWORDS else "not a Verilog identifier"
        raise UsageError(f"--name {name[:80]!r} is {why}: use a letter or _ followed by letters, digits "
                         f"or _ (at most 1024 characters), not a reserved word")
    return name


def add_arguments(p):
    p.add_argument("block", nargs="?", help="block name (see --list)")
    p.add_argument("--param", action="append", default=[], metavar="K=V",
                   help=f"override a block parameter (repeatable); integers in 0..{MAX_PARAM}")
    p.add_argument("-o", "--output", default="-", help="output file (default: stdout)")
    p.add_argument("--name", default=None,
                   help="Verilog module name (default: the block name): a letter or _, then letters, "
                        "digits or _; not a reserved word")
    p.add_argument("--list", action="store_true", help="list blocks and their parameters")
    p.add_argument("--json", action="store_true",
                   help="with --list: one JSON object {block: {doc, params}} on stdout")
    p.add_argument("--ip", default=None, metavar="DIR",
                   help="package the block as a Vivado IP in DIR (component.xml, hdl/, and for a "
                        "block with registers regmap.md/.h/.json); not with -o")
    p.add_argument("--regmap", choices=("md", "h", "json"), default=None,
                   help="write the block's register map (Markdown, C header or JSON) to -o "
                        "instead of its Verilog (blocks with registers: node)")


def _emit(output, text) -> int:
    """``text`` to stdout (``-o -``) or to the file ``output``, saying so on stderr."""
    if output == "-":
        sys.stdout.write(text)
    else:
        _write(output, text)
        print(f"wrote {output}", file=sys.stderr)
    return 0


def _write(path, text):
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise UsageError(f"-o {path}: cannot write ({exc.strerror or exc})") from None


def run(args) -> int:
    from mcf_fpga.hdl import blocks
    from mcf_fpga.hdl.verilog import to_verilog
    if args.json and not args.list:
        raise UsageError("--json goes with --list (a block's Verilog is written as text)")
    if args.list and args.json:
        import json
        print(json.dumps({b.name: {"doc": b.doc, "params": b.params} for b in blocks.BLOCKS.values()},
                         sort_keys=True, default=repr))
        return 0
    if args.list or not args.block:
        for b in sorted(blocks.BLOCKS.values(), key=lambda b: b.name):
            params = " ".join(f"{k}={v!r}" for k, v in b.params.items())
            print(f"{b.name:24s} {b.doc}  [{params}]")
        if not args.list:
            print("mcf verilog: error: name a block from the list above (or use --list)", file=sys.stderr)
        return 0 if args.list else 2
    if args.block not in blocks.BLOCKS:
        raise UsageError(f"unknown block {args.block[:80]!r} (known: {', '.join(sorted(blocks.BLOCKS))})")
    name = check_module_name(args.name if args.name is not None else args.block)
    params = blocks.parse_params(args.block, args.param)
    for k, v in params.items():
        if isinstance(v, int) and not isinstance(v, bool) and not 0 <= v <= MAX_PARAM:
            raise UsageError(f"--param {k}={v}: integer parameters must be in 0..{MAX_PARAM}")
    if args.ip is not None and args.output != "-":
        raise UsageError("--ip DIR writes its own files: leave out -o")
    if args.ip is not None and args.regmap is not None:
        raise UsageError("--ip DIR already writes the register map: leave out --regmap")
    if args.ip is not None and os.path.exists(args.ip) and not os.path.isdir(args.ip):
        raise UsageError(f"--ip {args.ip}: exists and is not a directory")
    given = ", ".join(f"{k}={v!r}" for k, v in params.items())
    try:
        comp, rename = blocks.build(args.block, **params)
    except (KeyboardInterrupt, MemoryError):
        raise
    except Exception as exc:
        if not params:
            raise
        # the block's own constructor refused the parameters given (assertion, type, range)
        msg = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"block {args.block!r} with --param {given}: {msg}") from None
    if args.regmap is not None:
        return _regmap(args, comp, name)
    try:
        if args.ip is not None:
            from mcf_fpga.boards.ip.package_ip import write_ip
            files = write_ip(args.ip, comp, name, rename=rename)
            print(f"wrote IP {name}_ip to {args.ip}: {', '.join(files)}", file=sys.stderr)
            return 0
        text = to_verilog(comp, name, rename=rename)
    except (KeyboardInterrupt, MemoryError, ValueError):
        raise
    except Exception as exc:
        if type(exc).__name__ != "YosysError":
            raise
        lines = [l for l in str(exc).splitlines() if l.strip()]
        raise RuntimeFailure(f"Yosys failed to export block {args.block!r} as module {name!r}: "
                             + (lines[-1][:300] if lines else type(exc).__name__)) from None
    return _emit(args.output, text)


def _regmap(args, comp, name) -> int:
    """Write ``comp``'s register map in the format ``args.regmap`` to ``args.output``."""
    import warnings
    from amaranth.hdl import UnusedElaboratable
    from mcf_fpga.boards.ip.package_ip import register_map_of, regmap_files
    warnings.simplefilter("ignore", UnusedElaboratable)   # the block is read, never elaborated
    regmap = register_map_of(comp, name)
    if regmap is None:
        raise UsageError(f"--regmap: block {args.block!r} has no register map (blocks with one: node)")
    text = regmap_files(regmap)[f"regmap.{args.regmap}"]
    return _emit(args.output, text)
