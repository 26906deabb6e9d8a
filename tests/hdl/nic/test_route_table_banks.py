"""The two-bank route table alone against a two-bank model, cycle by cycle: writes go
to the shadow bank only, lookups and the read-back see the active / shadow bank, a flip swaps
them from the next cycle, and the bank index reads 0/1. Random interleavings of writes, flips and
lookups on every port, with addresses drawn from the edges (0, 1, n_routes-2, n_routes-1) and at
random, and entries with every mask/fanin bit pattern."""
from hypothesis import given, settings, strategies as st

from mcf_fpga.spec.topology import RouteEntry
from mcf_fpga.spec.nic import NicConfig
from mcf_fpga.hdl.nic.route_table import RouteTable
from mcf_fpga.sim.kit import run_simulation

CFG = NicConfig(n_net=2, n_routes=8, max_payload=64)
N = CFG.n_routes
addr = st.one_of(st.sampled_from([0, 1, N - 2, N - 1]), st.integers(0, N - 1))
entry = st.one_of(st.sampled_from([0, 0xFF, 0xFF00, 0xFFFF, 0x0101, 0x8001]), st.integers(0, 0xFFFF))
step = st.tuples(st.booleans(), addr, entry, st.booleans(), st.lists(addr, min_size=2, max_size=2), addr)


@settings(max_examples=15)
@given(st.lists(step, min_size=1, max_size=40))
def test_banks_against_a_model(steps):
    dut = RouteTable(CFG, n_lookup=2)
    banks, active = [[0] * N, [0] * N], 0
    checks = []

    async def tb(ctx):
        nonlocal active
        for w_en, w_addr, w_data, flip, looks, r_addr in steps:
            ctx.set(dut.w_en, w_en)
            ctx.set(dut.w_addr, w_addr)
            ctx.set(dut.w_data.as_value(), RouteEntry(w_data & 0xFF, w_data >> 8).encode())   # AXI-Lite bits
            ctx.set(dut.flip, flip)
            for i, a in enumerate(looks):
                ctx.set(dut.lookup[i].addr, a)
            ctx.set(dut.r_addr, r_addr)
            # combinational reads before the edge: the state so far
            got = [(ctx.get(dut.lookup[i].entry.mask), ctx.get(dut.lookup[i].entry.fanin)) for i in range(2)]
            fields = lambda w: (w & 0xFF, w >> 8)   # noqa: E731  (mask, fanin)
            checks.append((got, [fields(banks[active][a]) for a in looks],
                           (ctx.get(dut.r_data.mask), ctx.get(dut.r_data.fanin)), fields(banks[1 - active][r_addr]),
                           ctx.get(dut.active), active))
            await ctx.tick()
            if w_en:
                banks[1 - active][w_addr] = w_data
            if flip:
                active ^= 1
        ctx.set(dut.w_en, 0)
        ctx.set(dut.flip, 0)

    run_simulation(dut, [tb], vcd=False, max_cycles=1000)
    for i, (got, want, r_got, r_want, act_got, act_want) in enumerate(checks):
        assert got == want, (i, "lookup")
        assert r_got == r_want, (i, "shadow read-back")
        assert act_got == act_want, (i, "active bank")
