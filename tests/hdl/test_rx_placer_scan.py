"""RxKeyScan (hdl/rx_placer_scan.py) against golden.rx_placer's ``match`` (the lowest valid entry
whose key equals the packet's, any layer where the entry says so): random tables of 1..9 entries
from a small key pool (shared keys, any-layer entries, invalid entries), 1, 2 or 4 lanes, random
``accept`` stalls and ``restart`` pulses; the verdict comes within ``rows`` cycles of the last
restart or stall."""
import random

from hypothesis import given, settings, strategies as st

from mcf_fpga.golden.rx_placer import RxPlacer as GoldenPlacer
from mcf_fpga.spec.meta import DEFAULT_PARAMS as MP
from mcf_fpga.hdl.rx_placer_receiver import key_width
from mcf_fpga.hdl.rx_placer_scan import RxKeyScan
from mcf_fpga.sim.kit import run_simulation


def pack(key):
    """A key's bits (kind, src, layer, block), as the receiver packs it."""
    kind, src, layer, block = key
    lo = 3 + MP.node_bits
    return int(kind) | src << 3 | (layer or 0) << lo | block << (lo + MP.layer_bits)


@settings(max_examples=25, deadline=None)
@given(entries=st.integers(1, 9), lanes=st.sampled_from([1, 2, 4]), seed=st.integers(0, 2**32 - 1),
       p=st.sampled_from([1.0, 0.6]))
def test_scan_finds_golden_match(entries, lanes, seed, p):
    rng = random.Random(seed)
    lanes = min(lanes, 1 << (entries - 1).bit_length())
    dut = RxKeyScan(entries=entries, lanes=lanes, key_width=key_width(MP),
                    layer=(3 + MP.node_bits, 3 + MP.node_bits + MP.layer_bits))
    pool = [(rng.randrange(6), rng.randrange(4), rng.randrange(3), rng.choice([0, 1, 0xFFFFFF])) for _ in range(4)]
    gold = GoldenPlacer(entries, 64)
    table = []
    for e in range(entries):
        kind, src, layer, block = rng.choice(pool)
        key = (kind, src, None if rng.random() < 0.3 else layer, block)
        table.append((e, key))
        gold.program(e, key, 0, 0)
        if rng.random() < 0.2:
            gold.invalidate(e)
    queries = [rng.choice(pool) if rng.random() < 0.8 else (rng.randrange(6), 3, 2, 5) for _ in range(12)]
    got = []

    async def bench(ctx):
        for e, key in table:
            ctx.set(dut.write, 1)
            ctx.set(dut.sel, e)
            ctx.set(dut.wkey, pack(key) | int(key[2] is None) << key_width(MP))
            await ctx.tick()
        ctx.set(dut.write, 0)
        ctx.set(dut.valid, sum(gold.valid[e] << e for e in range(entries)))
        for q in queries:
            ctx.set(dut.start, 1)
            ctx.set(dut.key, pack(q))
            await ctx.tick()
            ctx.set(dut.start, 0)
            waited = 0
            while True:
                stall = rng.random() >= p
                ctx.set(dut.accept, not stall)
                restart = rng.random() < 0.1
                ctx.set(dut.restart, restart)
                assert ctx.get(dut.scanning)
                if ctx.get(dut.resolve):
                    got.append(ctx.get(dut.found) if ctx.get(dut.hit) else None)
                    assert not stall and not restart
                    await ctx.tick()
                    assert not ctx.get(dut.scanning)
                    break
                waited = 0 if stall or restart else waited + 1
                assert waited < dut.rows, "no verdict within rows cycles"
                await ctx.tick()
            ctx.set(dut.accept, 0)
            ctx.set(dut.restart, 0)

    run_simulation(dut, [bench], vcd=False)
    assert got == [gold.match(q) for q in queries]
