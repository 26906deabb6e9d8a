"""Packetizer vs the wire format of hdl.meta (golden: pack_header + payload bytes)."""
import random

from hypothesis import given, settings, strategies as st

from amaranth.sim import Simulator

from mcf_fpga.golden.nic import make_frame
from mcf_fpga.spec.meta import MetaFields, MetaOp, Collective, ReduceOp, Stage
from mcf_fpga.hdl.packetizer import Packetizer
from mcf_fpga.sim.kit import StreamSource, StreamSink, Scoreboard, run_simulation

DW = 64


def words_of(payload: bytes):
    return [int.from_bytes(payload[i:i + 8], "little") for i in range(0, len(payload), 8)]


@st.composite
def packets(draw, max_len=60):
    out = []
    for _ in range(draw(st.integers(1, 6))):
        n = draw(st.integers(0, max_len))
        m = MetaFields(op=draw(st.sampled_from(list(MetaOp))), stage=draw(st.sampled_from(list(Stage))),
                       src=draw(st.integers(0, 255)), dst=draw(st.integers(0, 255)),
                       kv_id=(draw(st.integers(0, 255)), draw(st.integers(0, 2 ** 24 - 1))),
                       route_id=draw(st.integers(0, 255)),
                       collective=draw(st.sampled_from(list(Collective))),
                       reduce_op=draw(st.sampled_from(list(ReduceOp))), length=n)
        out.append((m, draw(st.binary(min_size=n, max_size=n))))
    return out


@given(packets(), st.floats(0.2, 1.0), st.floats(0.2, 1.0), st.floats(0.2, 1.0), st.integers(0, 2 ** 16))
def test_packetizer_matches_wire_format(pkts, vp_meta, vp_pay, rp, seed):
    dut = Packetizer(payload_depth=4, meta_depth=2)
    msrc = StreamSource(dut.meta, seed=seed, valid_prob=vp_meta)
    psrc = StreamSource(dut.payload, seed=seed + 1, valid_prob=vp_pay)
    snk = StreamSink(dut.packet, seed=seed + 2, ready_prob=rp)
    expected = [make_frame(m, p) for m, p in pkts]

    async def tb_meta(ctx):
        await msrc.send(ctx, [m.as_dict() for m, _ in pkts])

    async def tb_pay(ctx):
        await psrc.send(ctx, [w for _, p in pkts for w in words_of(p)])

    async def rx(ctx):
        got = await snk.collect_packets(ctx, len(pkts), DW)
        Scoreboard(expected, "packetizer").check(got)
    run_simulation(dut, [tb_meta, tb_pay, rx], vcd=False, max_cycles=20_000)


def test_accepts_while_congested_and_no_idle_cycle():
    """Output stalled: payload and meta are still accepted up to the FIFO depths; once the
    output is ready, packets leave back to back with valid high every cycle."""
    rng = random.Random(5)
    pkts = [(MetaFields(src=i, length=n), bytes(rng.randrange(256) for _ in range(n)))
            for i, n in enumerate([0, 8, 13, 40, 1, 16])]
    n_words = sum(len(words_of(p)) for _, p in pkts)
    dut = Packetizer(payload_depth=n_words, meta_depth=len(pkts))
    result = {}

    async def tb(ctx):
        ctx.set(dut.packet.ready, 0)
        for m, _ in pkts:
            ctx.set(dut.meta.payload, m.as_dict())
            ctx.set(dut.meta.valid, 1)
            await ctx.tick().until(dut.meta.ready)
        ctx.set(dut.meta.valid, 0)
        for w in [w for _, p in pkts for w in words_of(p)]:
            ctx.set(dut.payload.payload, w)
            ctx.set(dut.payload.valid, 1)
            await ctx.tick().until(dut.payload.ready)
        ctx.set(dut.payload.valid, 0)
        await ctx.tick().repeat(3)
        ctx.set(dut.packet.ready, 1)
        beats, idle = [], 0
        while len([b for b in beats if b[2]]) < len(pkts):
            _, _, v, d, k, l = await ctx.tick().sample(dut.packet.valid, dut.packet.payload.data,
                                                      dut.packet.payload.keep, dut.packet.payload.last)
            if v:
                beats.append((d, k, l))
            else:
                idle += 1
        result["idle"] = idle
        from mcf_fpga.sim.kit import beats_to_packets
        result["pkts"] = beats_to_packets([{"data": d, "keep": k, "last": l} for d, k, l in beats], DW)
    run_simulation(dut, [tb], vcd=False, max_cycles=5000)
    assert result["idle"] == 0
    Scoreboard([make_frame(m, p) for m, p in pkts]).check(result["pkts"])
