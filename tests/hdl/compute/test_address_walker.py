"""AddressWalker vs the movers' address pattern (the engine's module docstring): for random walks,
``for o < no: for i < ni: for j < nj`` yields word ``base + o*so + i*si + j`` and EM row
``ebase + o*eo + i*ei``, ``last_j``/``last_all`` at the row / walk ends, under random stalls;
a restart wins over a step; ``pairs``: a walk with ``pair`` steps two words at a time (the pairs'
first words, the row / walk ends at their last pair)."""
import random

from hypothesis import given, settings, strategies as st

from mcf_fpga.hdl.compute.address_walker import AddressWalker
from mcf_fpga.sim.kit import run_simulation

walks = st.fixed_dictionaries(dict(
    base=st.integers(0, 2 ** 20 - 1), so=st.integers(0, 2 ** 20 - 1), si=st.integers(0, 300),
    no=st.integers(1, 3), ni=st.integers(1, 3), nj=st.integers(1, 4),
    ebase=st.integers(0, 4095), eo=st.integers(0, 4095), ei=st.integers(0, 50)))


def pattern(w, pair=0):
    out = []
    for o in range(w["no"]):
        for i in range(w["ni"]):
            for j in range(0, w["nj"], 1 + pair):
                out.append(((w["base"] + o * w["so"] + i * w["si"] + j) % 2 ** 25,
                            (w["ebase"] + o * w["eo"] + i * w["ei"]) % 2 ** 16,
                            int(j == w["nj"] - 1 - pair),
                            int(j == w["nj"] - 1 - pair and i == w["ni"] - 1 and o == w["no"] - 1)))
    return out


@given(ws=st.lists(st.tuples(walks, st.booleans()), min_size=1, max_size=3), seed=st.integers(0, 2 ** 16),
       p=st.sampled_from([1.0, 0.5]), pairs=st.booleans())
@settings(max_examples=25, deadline=None)
def test_walker_matches_pattern(ws, seed, p, pairs):
    """Random walks in a row; ``pairs``: each walk with or without ``pair`` as drawn (``nj``
    doubled: an even row)."""
    dut = AddressWalker(pairs=pairs)
    ws = [(dict(w, nj=2 * w["nj"]), pr) if pairs else (w, False) for w, pr in ws]
    rng = random.Random(seed)
    got = []

    async def tb(ctx):
        for w, pr in ws:
            if pairs:
                ctx.set(dut.pair, pr)
            ctx.set(dut.start, 1)
            for k, v in w.items():
                ctx.set(getattr(dut.cfg, k), v)
            await ctx.tick()
            ctx.set(dut.start, 0)
            seq = []
            while ctx.get(dut.active):
                step = int(rng.random() < p)
                ctx.set(dut.step, step)
                if step:
                    seq.append((ctx.get(dut.addr), ctx.get(dut.eaddr), ctx.get(dut.last_j), ctx.get(dut.last_all)))
                await ctx.tick()
            ctx.set(dut.step, 0)
            got.append(seq)
    run_simulation(dut, [tb], vcd=False, max_cycles=2000)
    assert got == [pattern(w, int(pr)) for w, pr in ws]


def test_start_wins_over_step():
    dut = AddressWalker()

    async def tb(ctx):
        for k, v in dict(base=10, no=1, ni=1, nj=3).items():
            ctx.set(getattr(dut.cfg, k), v)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.step, 1)                      # step and restart together: the restart wins
        ctx.set(dut.cfg.base, 20)
        await ctx.tick()
        ctx.set(dut.start, 0)
        assert (ctx.get(dut.addr), ctx.get(dut.active)) == (20, 1)
    run_simulation(dut, [tb], vcd=False)
