"""What the ``mcf`` command shows while a Verilator model is built (the first run of a node
configuration takes minutes; later runs load it from the cache).

``BuildProgress(command)`` is a reporter for ``sim.build_report``: it prints
one line when a Verilog export starts and one when Verilator starts (naming the cache), then a
progress bar of its own over the C++ objects compiled, closed when the build ends. Thread safe
(a cluster may build node models from several threads). Use as a context manager; on a terminal
the bar is tqdm's, elsewhere (a log, ``--no-progress``) only the lines are printed.
"""
from __future__ import annotations

import sys
import threading

from mcf_fpga.sim.build_report import set_build_reporter

__all__ = ["BuildProgress"]


class BuildProgress:
    def __init__(self, command: str, *, bar: bool = True, stream=None):
        self.command, self.want_bar = command, bar
        self.stream = stream if stream is not None else sys.stderr
        self._lock = threading.Lock()
        self._bar = None
        self._prev = None

    def _say(self, text):
        print(f"mcf {self.command}: {text}", file=self.stream, flush=True)

    def __call__(self, phase: str, done: int, total: int):
        from mcf_fpga.sim.verilator import cache_root
        with self._lock:
            if phase == "export":
                self._say("exporting Verilog for a Verilator model not built yet (tens of seconds)")
            elif phase == "verilate":
                self._say(f"building the Verilator model: the first run of this configuration takes "
                          f"minutes; it is cached under {cache_root()}")
            elif phase == "compile" and self.want_bar:
                if self._bar is None:
                    from tqdm import tqdm
                    self._bar = tqdm(total=total, desc="verilator C++", unit="obj", file=self.stream,
                                     leave=False)
                self._bar.total = max(self._bar.total or 0, total)
                self._bar.update(done - self._bar.n)
            elif phase == "done":
                if self._bar is not None:
                    self._bar.close()
                    self._bar = None
                self._say("Verilator model built")

    def __enter__(self):
        self._prev = set_build_reporter(self)
        return self

    def __exit__(self, *exc):
        set_build_reporter(self._prev)
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None
        return False
