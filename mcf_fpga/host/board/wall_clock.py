"""A board's clock in PL cycles measured as elapsed time: ``cycle`` = seconds since the clock
was made (or ``restart``-ed) times ``hz`` (the KR260 node's 200 MHz, ``HardwareConfig.clock_hz``);
``step(n)`` sleeps until ``n`` more cycles have passed. It counts time, not PL clock edges: on a
real board the hardware runs by itself and the host only observes it."""
from __future__ import annotations

import time

from mcf_fpga.host.config import HardwareConfig

__all__ = ["WallClock"]


class WallClock:
    """See the module docstring (the ``clock`` interface of ``host.board.node_hw.NodeHw``)."""

    def __init__(self, hz: float = HardwareConfig.clock_hz):
        if not hz > 0:
            raise ValueError(f"WallClock hz must be > 0, got {hz!r}")
        self.hz = hz
        self.restart()

    def restart(self):
        self.t0 = time.monotonic()

    @property
    def cycle(self) -> int:
        return int((time.monotonic() - self.t0) * self.hz)

    def step(self, n: int):
        if not isinstance(n, int) or n < 0:
            raise ValueError(f"step takes a cycle count >= 0, got {n!r}")
        end = time.monotonic() + n / self.hz
        while (left := end - time.monotonic()) > 0:
            time.sleep(left)
