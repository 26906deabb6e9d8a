"""ReusedSimulator: each run starts from the design's initial state (signals and memories), with
that run's testbenches, its own cycle limit, and after a failed run too; run_simulation keeps one
per design and slot count."""
import pytest
from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mcf_fpga.sim import reused_simulator as rs
from mcf_fpga.sim.kit import run_simulation


class _Counter(wiring.Component):
    """``count`` (init 7) adds one each cycle with ``en``; ``wr`` writes ``count`` to word 0 of a
    memory (init 3) that ``word`` reads (registered)."""
    def __init__(self):
        super().__init__({"en": In(1), "wr": In(1), "count": Out(8, init=7), "word": Out(8)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = Memory(shape=8, depth=2, init=[3, 0])
        w, r = mem.write_port(), mem.read_port()
        with m.If(self.en):
            m.d.sync += self.count.eq(self.count + 1)
        m.d.comb += [w.addr.eq(0), w.data.eq(self.count), w.en.eq(self.wr), r.addr.eq(0), self.word.eq(r.data)]
        return m


def _use(dut, ticks, seen):
    """A testbench: record the initial count and word, then count and write for ``ticks`` cycles."""
    async def tb(ctx):
        await ctx.tick()
        seen.append((ctx.get(dut.count), ctx.get(dut.word)))
        ctx.set(dut.en, 1)
        ctx.set(dut.wr, 1)
        await ctx.tick().repeat(ticks)
        ctx.set(dut.wr, 0)
        await ctx.tick().repeat(2)
        seen.append((ctx.get(dut.count), ctx.get(dut.word)))
    return tb


def test_each_run_starts_from_the_initial_state():
    dut = _Counter()
    sim = rs.ReusedSimulator(dut, n_fg=1, n_bg=0, clock=1e-8)
    first, second = [], []
    sim.run([_use(dut, 5, first)], max_cycles=100)
    sim.run([_use(dut, 2, second)], max_cycles=100)
    assert first == [(7, 3), (14, 11)]          # 7 counts, the last written value read back
    assert second == [(7, 3), (11, 8)]         # signals and memory back at their init


def test_each_run_has_its_own_cycle_limit_and_a_failed_run_does_not_stick():
    dut = _Counter()
    sim = rs.ReusedSimulator(dut, n_fg=1, n_bg=0, clock=1e-8)
    seen = []
    with pytest.raises(AssertionError, match="within 4 cycles"):
        sim.run([_use(dut, 20, seen)], max_cycles=4)
    seen.clear()
    sim.run([_use(dut, 20, seen)], max_cycles=40)
    assert seen == [(7, 3), (29, 26)]


def test_the_slot_counts_are_checked():
    dut = _Counter()
    sim = rs.ReusedSimulator(dut, n_fg=1, n_bg=1, clock=1e-8)
    sim.run([_use(dut, 1, [])], [_use(dut, 1, [])], max_cycles=10)
    with pytest.raises(ValueError, match="1 foreground and 1 background slots, not 2 and 1"):
        sim.run([_use(dut, 1, []), _use(dut, 1, [])], [_use(dut, 1, [])], max_cycles=10)


def test_run_simulation_keeps_one_per_design_and_slots():
    dut, other = _Counter(), _Counter()
    runs = []
    for d in (dut, dut, other, dut):
        seen = []
        run_simulation(d, [_use(d, 3, seen)], vcd=False)
        runs.append(seen)
    assert runs == [[(7, 3), (12, 9)]] * 4
    kept = [s for s in rs._kept.values() if s.dut is dut]
    assert len(kept) == 1 and kept[0].n_fg == 1
    assert rs.reused_simulator(dut, n_fg=1, n_bg=0, clock=1e-8, fixed_for=None, tag=True) is kept[0]


def test_only_the_last_few_are_kept():
    duts = [_Counter() for _ in range(rs.KEEP + 1)]
    for d in duts:
        rs.reused_simulator(d, n_fg=1, n_bg=0, clock=1e-8, fixed_for=lambda d: []).run([_use(d, 1, [])],
                                                                                     max_cycles=10)
    kept = [s.dut for s in rs._kept.values()]
    assert duts[0] not in kept and all(d in kept for d in duts[1:])
    assert len(rs._kept) == rs.KEEP
