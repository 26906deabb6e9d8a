"""A simulator built once for a design and run again from reset with new testbenches.

Building an Amaranth ``Simulator`` elaborates and compiles the whole design: about a second for
an engine unit, often more than the run itself (a Hypothesis test runs one per example). A
:class:`ReusedSimulator` is built once with a fixed number of foreground and background
testbench *slots*; each :meth:`~ReusedSimulator.run` resets it (every signal and memory to its
initial value, every process restarted: ``Simulator.reset``) and runs that call's testbenches in
the slots. :func:`reused_simulator` keeps the last few per process.
"""
from collections import OrderedDict
from contextlib import nullcontext

from amaranth.sim import Simulator

__all__ = ["ReusedSimulator", "reused_simulator"]

#: simulators kept per process (each holds its design's compiled code)
KEEP = 6


class ReusedSimulator:
    """``dut`` with a clock of ``clock`` seconds, ``n_fg`` foreground and ``n_bg`` background
    slots, and ``fixed`` background testbenches (e.g. stream checkers) that run every time.
    :meth:`run` takes exactly ``n_fg`` / ``n_bg`` testbenches; ``vcd`` (a path) writes a waveform.
    ``max_cycles``: the run fails (``AssertionError``) if it has not ended by then."""

    def __init__(self, dut, *, n_fg, n_bg, clock, fixed=()):
        self.dut, self.n_fg, self.n_bg, self.clock = dut, n_fg, n_bg, clock
        self._job = None
        self._used = False
        sim = self.sim = Simulator(dut)
        sim.add_clock(clock)
        for tb in fixed:
            sim.add_testbench(tb, background=True)
        for i in range(n_bg):
            sim.add_testbench(self._slot("bg", i), background=True)
        for i in range(n_fg):
            sim.add_testbench(self._slot("fg", i))
        sim.add_testbench(self._watchdog, background=True)

    def _slot(self, kind, i):
        async def slot(ctx):
            await self._job[kind][i](ctx)
        return slot

    async def _watchdog(self, ctx):
        cycles = self._job["max_cycles"]
        await ctx.delay(cycles * self.clock)
        raise AssertionError(f"simulation did not finish within {cycles} cycles (hang?)")

    def run(self, testbenches, background=(), *, max_cycles, vcd=None):
        if (len(testbenches), len(background)) != (self.n_fg, self.n_bg):
            raise ValueError(f"this simulator has {self.n_fg} foreground and {self.n_bg} background "
                             f"slots, not {len(testbenches)} and {len(background)}")
        if self._used:
            self.sim.reset()
        self._used = True
        self._job = {"fg": list(testbenches), "bg": list(background), "max_cycles": max_cycles}
        try:
            with nullcontext() if vcd is None else self.sim.write_vcd(vcd):
                self.sim.run()
        finally:
            self._job = None


_kept = OrderedDict()


def reused_simulator(dut, *, n_fg, n_bg, clock, fixed_for, tag=None):
    """The kept :class:`ReusedSimulator` for ``dut`` with these slots, clock and ``tag`` (which
    names ``fixed_for``'s choice), or a new one (the least recently used beyond :data:`KEEP` is
    dropped). ``fixed_for(dut)`` gives the fixed background testbenches of a new one. A kept
    simulator holds its design, so the design's ``id`` in the key is not reused while it is kept."""
    key = (id(dut), n_fg, n_bg, clock, tag)
    sim = _kept.get(key)
    if sim is None:
        sim = _kept[key] = ReusedSimulator(dut, n_fg=n_fg, n_bg=n_bg, clock=clock, fixed=fixed_for(dut))
    _kept.move_to_end(key)
    while len(_kept) > KEEP:
        _kept.popitem(last=False)
    return sim
