"""The ``mcf`` command line: one sub-command per module in ``host.commands``.

Each command module defines ``NAME``, ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int``. Errors that are the user's (bad config, bad input) are
raised as ``host.errors.UserError`` (or ValueError) and printed as one
sentence, not a traceback; ``MCF_TRACEBACK=1`` shows the traceback.
"""
import argparse
import importlib
import os
import sys

# Add a command: create host/commands/<name>.py and list it here.
COMMANDS = [
    "host.commands.run", "host.commands.accuracy",
    "host.commands.plot",
    "host.commands.verilog",
    "host.commands.build", "host.commands.package", "host.commands.flash",
    "host.commands.serve_board",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcf",
        description="MCF: generate, simulate and run FPGA clusters for long-context LLM inference.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for modname in COMMANDS:
        mod = importlib.import_module(modname)
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.__doc__)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except (ValueError, OSError) as exc:
        if os.environ.get("MCF_TRACEBACK"):
            raise
        print(f"mcf {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
