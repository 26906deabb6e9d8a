"""ReduceSender (hdl/nic/reduce_sender.py) against golden: for random completed groups (reduce
pool: the accumulator words; merge pool: random partials of random srcs, folded as
golden.nic.reduce_payloads(SOFTMAX_MERGE) in ascending src order) the packet on ``m`` equals
golden.nic.make_frame of the group's header (src = node_id, route_id = 0) and that payload,
with random back-pressure; the header starts when the contract says, ``done`` marks the last
beat and names the context. The two read ports are modelled in the testbench."""
import random

from hypothesis import given, settings, strategies as st

from mcf_fpga.golden.header import pack_header
from mcf_fpga.golden.nic import encode_partial, make_frame, reduce_payloads
from mcf_fpga.spec.meta import Collective, MetaFields, MetaOp, ReduceOp, Stage
from mcf_fpga.spec.nic import NicConfig
from mcf_fpga.hdl.nic.reduce_sender import ReduceSender
from mcf_fpga.sim.kit import StreamSink, beats_to_packets, run_simulation

NODE_ID = 5


@settings(max_examples=10, deadline=None)
@given(kr=st.integers(1, 3), km=st.integers(1, 2), seed=st.integers(0, 2**32 - 1),
       ready_p=st.sampled_from([0.5, 1.0]))
def test_sender_packets_match_golden(kr, km, seed, ready_p):
    cfg = NicConfig(n_net=2, n_routes=16, max_payload=48, reduce_contexts=kr, merge_contexts=km)
    NS, W = cfg.max_nodes, cfg.max_payload_beats
    wbits, sbits = (W - 1).bit_length(), (NS - 1).bit_length()
    rbits = (kr - 1).bit_length()
    abits, sabits = wbits + rbits, wbits + sbits + (km - 1).bit_length()
    dut = ReduceSender(cfg, abits, sabits)
    rng = random.Random(seed)
    acc_mem, slot_mem = {}, {}
    groups, want = [], []
    for _ in range(4):
        merge = rng.random() < 0.5
        words = rng.randint(3 if merge else 1, W)
        rop = ReduceOp.SOFTMAX_MERGE if merge else rng.choice([ReduceOp.SUM, ReduceOp.MAX])
        meta = MetaFields(op=MetaOp.PARTIAL_STATE, reduce_op=rop, stage=Stage.DECODE, src=rng.randrange(NS),
                          dst=rng.randrange(4), route_id=rng.randrange(16), collective=Collective.ALL_REDUCE,
                          kv_id=(1, rng.randrange(8)), length=8 * words)
        k = kr + rng.randrange(km) if merge else rng.randrange(kr)
        srcs = sorted(rng.sample(range(NS), rng.randint(1, 4))) if merge else []
        groups.append((k, meta, sum(1 << s for s in srcs), merge, srcs, words))
        if merge:
            payloads = [encode_partial(rng.randrange(-2 ** 18, 2 ** 18), rng.randrange(2 ** 36),
                                       [rng.randrange(-2 ** 36, 2 ** 36) for _ in range(words - 2)]) for _ in srcs]
            payload = reduce_payloads(rop, payloads, op=meta.op)
        else:
            payloads = [bytes(rng.getrandbits(8) for _ in range(8 * words))]
            payload = payloads[0]
        want.append((make_frame(MetaFields(**{**meta.__dict__, "src": NODE_ID, "route_id": 0}), payload, cfg),
                     payloads))
    sink = StreamSink(dut.m, seed=seed, ready_prob=ready_p)

    async def memories(ctx):           # the two one-cycle read ports (data held while not enabled)
        async for _, _, ae, aa, se, sa in ctx.tick().sample(dut.acc_rd_en, dut.acc_rd_addr,
                                                           dut.slot_rd_en, dut.slot_rd_addr):
            if ae:
                ctx.set(dut.acc_rd_data, acc_mem.get(aa, 0))
            if se:
                ctx.set(dut.slot_rd_data, slot_mem.get(sa, 0))

    async def tb(ctx):
        ctx.set(dut.node_id, NODE_ID)
        for (k, meta, present, merge, srcs, words), (_, payloads) in zip(groups, want):
            for s, p in zip(srcs or [None], payloads):
                for w in range(words):
                    x = int.from_bytes(p[8 * w:8 * w + 8], "little")
                    if merge:
                        slot_mem[w | s << wbits | (k - kr) << (wbits + sbits)] = x
                    else:
                        acc_mem[w | k << wbits] = x
            hv = int.from_bytes(pack_header(meta, cfg.meta), "little") & ((1 << cfg.meta.header_bits) - 1)
            for sig, v in ((dut.start, 1), (dut.start_ctx, k), (dut.start_present, present),
                           (dut.start_merge, merge)):
                ctx.set(sig, v)
            ctx.set(dut.start_meta.as_value(), hv)
            assert not ctx.get(dut.busy)
            await ctx.tick()
            ctx.set(dut.start, 0)
            lead = 1 + (len(srcs) + 1 if merge else 0)
            for _ in range(lead):
                assert ctx.get(dut.busy) and not ctx.get(dut.m.valid)
                await ctx.tick()
            assert ctx.get(dut.m.valid)
            while True:
                done, last = ctx.get(dut.done), ctx.get(dut.m.valid) and ctx.get(dut.m.payload.last)
                taken = ctx.get(dut.m.valid) and ctx.get(dut.m.ready)
                assert done == (last and taken)
                if done:
                    assert ctx.get(dut.free_ctx) == k
                    break
                await ctx.tick()
            await ctx.tick()

    run_simulation(dut, [tb], background=[memories, sink.run])
    got = beats_to_packets([{**b, "user": 0} for b in sink.beats], 64)
    assert got == [w for w, _ in want]
    assert all(b["user"] == 1 for b in sink.beats)          # user.mask = 1: to the local port
