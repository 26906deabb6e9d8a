"""The ``mcf`` command line: one sub-command per module in ``host.commands``.

Each command module defines ``NAME``, ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int``. Errors are printed as one line ``mcf <command>: error: ...``, never a
traceback (``MCF_TRACEBACK=1`` shows it), with the exit code of ``host.errors``: 2 for the
user's input (``UsageError`` or any ValueError: a bad option value, a bad checkpoint, token
list or manifest), 1 for a failure of the work itself (``RuntimeFailure``, OSError,
RuntimeError: a toolchain, a board, a simulation), 130 for Ctrl-C. Anything else is printed as
``mcf <command>: internal error: ...`` with exit code 1.
"""
import argparse
import importlib
import os
import sys

from mcf_fpga import __version__
from mcf_fpga.host.build_progress import BuildProgress
from mcf_fpga.host.errors import EXIT_INTERRUPT, EXIT_RUNTIME, EXIT_USAGE, exit_code

# Add a command: create mcf_fpga/host/commands/<name>.py and list it here.
COMMANDS = [
    "mcf_fpga.host.commands.run", "mcf_fpga.host.commands.compile", "mcf_fpga.host.commands.accuracy",
    "mcf_fpga.host.commands.plot",
    "mcf_fpga.host.commands.verilog",
    "mcf_fpga.host.commands.build", "mcf_fpga.host.commands.package", "mcf_fpga.host.commands.flash",
    "mcf_fpga.host.commands.serve_board", "mcf_fpga.host.commands.bench",
]


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error: ``mcf run: error: argument --nodes: 0 must be in 2..64
    (see mcf run --help)``, exit code 2 (no usage block above it)."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="mcf",
        description="MCF: generate, simulate and run FPGA clusters for long-context LLM inference.",
        epilog="Exit codes: 0 success, 1 runtime failure (toolchain, board, simulation), 2 usage error "
               "(bad option value or input file), 130 interrupted. Errors are one line; MCF_TRACEBACK=1 "
               "shows the traceback.")
    parser.add_argument("--version", action="version", version=f"mcf {__version__} (mcf-fpga)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for modname in COMMANDS:
        mod = importlib.import_module(modname)
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.__doc__)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def _say(command, text):
    try:
        print(f"mcf {command}: {text}" if command else f"mcf: {text}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def main(argv=None) -> int:
    """Run ``mcf`` with ``argv``; returns the exit code: 0 success, 1 runtime failure, 2 usage
    error (bad option, bad file), 130 interrupted (see ``host.errors``). Never a traceback,
    unless MCF_TRACEBACK=1."""
    command = None
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:        # argparse has printed usage and the error (or --help)
            return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)
        command = args.command
        quiet = getattr(args, "json", False) or getattr(args, "no_progress", False)
        with BuildProgress(command, bar=not quiet):     # a Verilator build announces itself
            return int(args._run(args) or 0)
    except KeyboardInterrupt:
        if os.environ.get("MCF_TRACEBACK"):
            raise
        _say(command, "interrupted")
        return EXIT_INTERRUPT
    except BrokenPipeError:              # e.g. `mcf verilog BLOCK | head`: the reader left
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return EXIT_RUNTIME
    except Exception as exc:
        if os.environ.get("MCF_TRACEBACK"):
            raise
        code = exit_code(exc)
        msg = str(exc).strip() or type(exc).__name__
        if isinstance(exc, MemoryError):
            msg = f"out of memory ({msg})"
        if code is None:
            _say(command, f"internal error: {type(exc).__name__}: {msg.splitlines()[0]} "
                          f"(set MCF_TRACEBACK=1 to see the traceback)")
            return EXIT_RUNTIME
        if type(exc).__name__ == "YosysError":
            msg = f"Yosys failed: {msg}"
        _say(command, f"error: {one_line(msg)}")
        return code


def one_line(msg: str) -> str:
    """A multi-line message (a compiler's output, a per-node report) as one line: its first
    line, the first later line that names an error, and how many lines were left out."""
    lines = [l.strip() for l in msg.splitlines() if l.strip()]
    if len(lines) <= 1:
        return msg.strip()
    shown = [lines[0]]
    err = next((l for l in lines[1:] if "error" in l.lower()), None)
    if err is not None:
        shown.append(err)
    rest = len(lines) - len(shown)
    more = f" [{rest} more line{'s' * (rest != 1)}: MCF_TRACEBACK=1 shows them]" if rest else ""
    return " ".join(shown) + more


if __name__ == "__main__":
    sys.exit(main())
