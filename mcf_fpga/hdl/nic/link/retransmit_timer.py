"""RetransmitTimer: the go-back-N sender's timeout counter.

Contract: counts cycles while packets are outstanding (``idle`` low) and no ack makes
progress (``progress`` low); either of them clears it. After ``timeout`` such cycles in
a row ``fire`` is high for one cycle (combinationally, on the ``timeout``-th) and the
count restarts from zero.
"""
from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["RetransmitTimer"]


class RetransmitTimer(wiring.Component):
    """See module docstring. ``timeout``: cycles (>= 1)."""

    idle: In(1)
    progress: In(1)
    fire: Out(1)

    def __init__(self, timeout: int):
        self.timeout = timeout
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        timer = Signal(range(self.timeout + 1))
        with m.If(self.idle | self.progress):
            m.d.sync += timer.eq(0)
        with m.Elif(timer >= self.timeout - 1):
            m.d.sync += timer.eq(0)
            m.d.comb += self.fire.eq(1)
        with m.Else():
            m.d.sync += timer.eq(timer + 1)
        return m
