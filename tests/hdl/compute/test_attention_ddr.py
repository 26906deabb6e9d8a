"""StreamedAttention: AttentionUnit(kv_ports=True) fed by the KVStreamer from AXI4Memory (100-cycle latency, random
stalls): every job bit-exact to golden, with job j+1's K/V loading into the other window while job
j computes (docs/memory.md, "KV in DDR"); with keys_per_cycle=2 too (two rows per cycle through the
streamer's second read ports) and with two query rows per cycle (rows_per_cycle=2: a pair shares
each K / V read)."""
import random

import pytest
import torch
from hypothesis import given, settings, strategies as st

from mcf_fpga.golden import numerics as nx
from mcf_fpga.spec.kvregion import KVRegion
from mcf_fpga.golden.kvstore import KVStore
from mcf_fpga.hdl.compute.attention import q_beat
from mcf_fpga.hdl.compute.streamed import StreamedAttention
from mcf_fpga.sim import AXI4Memory
from mcf_fpga.sim.kit import StreamSink, StreamSource, run_simulation

from .test_attention import D, att_case, golden_rows

WIN = 32                   # rows per staging window (att_case jobs have at most 24 keys)
BASE = 0x2000


def run_jobs(cases, *, latency, seed, kpc=1, pipelined=False, rpc=1):
    """Job j: its K/V rows are slot j's rows 0..n-1 in DDR, loaded into window j % 2; the loads
    are queued ahead, so job j+1 loads while job j computes (attention at ``kpc`` keys per
    cycle; ``pipelined``: the staged unit, its V rows read a few cycles after the issue; ``rpc``
    its rows per cycle). Returns
    the output rows per job."""
    region = KVRegion(BASE, len(cases), WIN, D, 8, 16)
    store = KVStore(region)
    for j, (c, _) in enumerate(cases):
        for i in range(c["K"].shape[0]):
            store.write_row(j, 0, i, c["K"][i].tolist(), int(c["ek"][i]))
            store.write_row(j, 1, i, c["V"][i].tolist(), int(c["ev"][i]))
    mem = AXI4Memory(region.size, data_width=128, base=BASE, latency=latency, ready_seed=seed)
    mem.load(BASE, bytes(store.image))
    top = StreamedAttention(region, win_rows=WIN, n_win=2, dma=dict(addr_width=32, max_burst=8),
                            att=dict(nq_max=4, nb_max=4, z_max=32, blk_max=16, keys_per_cycle=kpc,
                                     pipelined=pipelined, rows_per_cycle=rpc))
    kv = att = top
    out = {"rows": [], "overlap": 0}
    state = {"job": None}

    async def tb_loads(ctx):
        await StreamSource(kv.load, seed=seed).send(
            ctx, [{"slot": j, "row": 0, "n": c["K"].shape[0], "win": j % 2} for j, (c, _) in enumerate(cases)])

    async def tb_jobs(ctx):
        rng = random.Random(seed)
        for j, (c, _) in enumerate(cases):
            w = j % 2
            while not (ctx.get(kv.full) >> w) & 1:
                assert not ctx.get(kv.kv_error)
                await ctx.tick()
            state["job"] = w
            nq = c["q"].shape[0]
            cmd = {"nq": nq, "nblk": len(c["blocks"]), "causal": int(c["causal"]), "flat": int(c["flat"]),
                   "final": int(c["final"]), "ext_m": int(c["m_ext"] is not None)}
            qb = [q_beat(c["q"][r].tolist(), c["eq"][r], c["pos"][r],
                         nx.M_EMPTY if c["m_ext"] is None else c["m_ext"][r]) for r in range(nq)]
            bb = [{"addr": w * WIN + a, "len": ln, "pos": kp} for a, ln, kp in c["blocks"]]
            await StreamSource(att.cmd, seed=seed + j).send(ctx, [cmd])
            await StreamSource(att.q_in, seed=seed + j, valid_prob=0.7).send(ctx, qb)
            await StreamSource(att.blk_in, seed=seed + j).send(ctx, bb)
            beats = await StreamSink(att.o_out, seed=seed + j, ready_prob=rng.choice([1.0, 0.3])).collect(ctx, nq)
            state["job"] = None
            ctx.set(kv.release.payload.win, w)
            ctx.set(kv.release.valid, 1)
            await ctx.tick()
            ctx.set(kv.release.valid, 0)
            res = []
            for b in beats:
                o = [(b["o"] >> (48 * i)) & ((1 << 48) - 1) for i in range(D)]
                res.append((b["m"], b["l"], [x - (1 << 48) if x >> 47 else x for x in o]))
            out["rows"].append(res)
        assert ctx.get(att.error) == 0 and ctx.get(kv.kv_error) == 0

    async def overlap(ctx):
        fill = top.kv._reader.data
        async for _, _, fv, fr in ctx.tick().sample(fill.valid, fill.ready):
            if fv and fr and state["job"] is not None:
                out["overlap"] += 1

    run_simulation(top, [tb_loads, tb_jobs], background=[mem.testbench(kv.m_axi), overlap], vcd=False,
                   max_cycles=100_000)
    return out


@settings(max_examples=8)
@given(cases=st.lists(att_case(), min_size=2, max_size=3), latency=st.integers(100, 130),
       seed=st.integers(0, 2 ** 16), form=st.sampled_from([(1, False, 1), (2, False, 1), (1, True, 1), (2, True, 1),
                                                           (1, True, 2)]))
def test_attention_from_ddr_matches_golden(cases, latency, seed, form):
    """(keys per cycle, pipelined, rows per cycle) as drawn."""
    kpc, pipelined, rpc = form
    got = run_jobs(cases, latency=latency, seed=seed, kpc=kpc, pipelined=pipelined, rpc=rpc)
    for j, (c, _) in enumerate(cases):
        assert got["rows"][j] == golden_rows(**c), f"job {j}"


@pytest.mark.parametrize("kpc", [1, 2])
def test_next_job_loads_while_job_computes(kpc):
    """Three jobs of 24 keys: the K/V of jobs 1 and 2 arrive while jobs 0 and 1 compute."""
    cases = []
    for s in range(3):
        g = torch.Generator().manual_seed(s)
        K, V = torch.randint(-127, 128, (24, D), generator=g), torch.randint(-127, 128, (24, D), generator=g)
        ek, ev = torch.randint(0, 12, (24,), generator=g), torch.randint(0, 12, (24,), generator=g)
        c = dict(q=torch.randint(-127, 128, (3, D), generator=g), eq=torch.randint(0, 12, (3,), generator=g),
                 pos=torch.tensor([30, 30, 30]), K=K, ek=ek, V=V, ev=ev, blocks=[(0, 12, 0), (12, 12, 12)],
                 causal=False, flat=False, final=True, m_ext=None)
        cases.append((c, s))
    got = run_jobs(cases, latency=100, seed=1, kpc=kpc)
    for j, (c, _) in enumerate(cases):
        assert got["rows"][j] == golden_rows(**c)
    assert got["overlap"] >= 24, f"only {got['overlap']} fill beats while a job computed"
