"""Errors the ``mcf`` command line turns into one line and an exit code (``host.cli.main``).

* ``UsageError`` (a ``ValueError``): the user's input is wrong — an option value, a file named
  by an option (checkpoint, token list, manifest), a config field. Exit code 2.
* ``RuntimeFailure`` (a ``RuntimeError``): the input was fine but the work failed — a toolchain
  (Yosys, Verilator, dtc, ssh), a board, a simulation. Exit code 1.

Other exceptions are classified by ``exit_code``: any ``ValueError`` is a usage error (the
library code raises ValueError naming the parameter and the limit), any other ``OSError`` or
``RuntimeError`` a runtime failure, anything else an internal error (exit 1, printed as
"internal error"). Ctrl-C exits 130.

The argparse ``type=`` helpers below (``positive_int``, ``int_in``, ``finite_float``) reject a
value with the option's name and the limit before any work starts.
"""
from __future__ import annotations

import argparse
import math
from decimal import Decimal, InvalidOperation

__all__ = ["UsageError", "RuntimeFailure", "EXIT_USAGE", "EXIT_RUNTIME", "EXIT_INTERRUPT",
           "exit_code", "int_in", "positive_int", "nonneg_int", "finite_float", "read_text"]

EXIT_RUNTIME = 1
EXIT_USAGE = 2
EXIT_INTERRUPT = 130


class UsageError(ValueError):
    """Bad user input (an option, a file it names, a config field): exit code 2."""


class RuntimeFailure(RuntimeError):
    """The work itself failed (toolchain, board, simulation): exit code 1."""


def exit_code(exc: BaseException) -> int | None:
    """2 for usage errors, 1 for runtime failures, None for anything unexpected (internal)."""
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPT
    if isinstance(exc, UsageError):
        return EXIT_USAGE
    if isinstance(exc, RuntimeFailure):
        return EXIT_RUNTIME
    if isinstance(exc, ValueError):          # library checks: parameter out of range, bad file
        return EXIT_USAGE
    if isinstance(exc, (OSError, RuntimeError, MemoryError)):
        return EXIT_RUNTIME
    if type(exc).__name__ == "YosysError":    # amaranth's toolchain error (an Exception)
        return EXIT_RUNTIME
    return None


# ---------------------------------------------------------------- argparse types

def _parse_int(text: str) -> int:
    """An integer from ``text``; scientific notation is accepted when it is a whole number
    (``1e9``), so a huge length is refused by its limit rather than by its spelling."""
    s = str(text).strip()
    try:
        return int(s, 10)
    except ValueError:
        pass
    try:
        d = Decimal(s)
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not d.is_finite() or d != d.to_integral_value() or abs(d) > Decimal(10) ** 30:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer")
    return int(d)


def int_in(lo: int | None = None, hi: int | None = None):
    """argparse type: an integer in ``lo..hi`` (either bound may be None)."""
    def parse(text):
        v = _parse_int(text)
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            if hi is None:
                raise argparse.ArgumentTypeError(f"{v} must be >= {lo}")
            if lo is None:
                raise argparse.ArgumentTypeError(f"{v} must be <= {hi}")
            raise argparse.ArgumentTypeError(f"{v} must be in {lo}..{hi}")
        return v
    parse.__name__ = "integer"
    return parse


positive_int = int_in(1)
nonneg_int = int_in(0)


def finite_float(lo: float | None = None, hi: float | None = None):
    """argparse type: a finite number in ``[lo, hi]`` (no nan, no inf)."""
    def parse(text):
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"{text!r} must be a finite number")
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            lim = f">= {lo:g}" if hi is None else f"<= {hi:g}" if lo is None else f"in [{lo:g}, {hi:g}]"
            raise argparse.ArgumentTypeError(f"{v:g} must be {lim}")
        return v
    parse.__name__ = "number"
    return parse


def read_text(path, what: str, limit: int = 64 << 20) -> str:
    """The text of a user-named file, or a UsageError naming ``what`` (e.g. ``--prompt-tokens``)
    and the file: missing, a directory, unreadable, not UTF-8, or larger than ``limit`` bytes."""
    import os
    try:
        size = os.path.getsize(path)
        if size > limit:
            raise UsageError(f"{what} {path}: {size} bytes, more than the {limit} allowed")
        with open(path, "rb") as f:
            return f.read().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{what} {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise UsageError(f"{what} {path}: {exc.strerror or exc}") from None
