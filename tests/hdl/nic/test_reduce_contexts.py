"""ReduceContexts (hdl/nic/reduce_contexts.py) against a Python model of the reduction engine's
context pools (golden.nic "Reduction contexts"): lookup (hit, chosen context, room in the
header's pool, conflict, members) on random headers every cycle, and random opens, joins,
frees and timeouts; a model step per cycle, in the hardware's order (timers, then updates)."""
import random

from hypothesis import given, settings, strategies as st

from mcf_fpga.golden.header import pack_header
from mcf_fpga.spec.meta import Collective, MetaFields, MetaOp, ReduceOp, Stage
from mcf_fpga.spec.nic import NicConfig
from mcf_fpga.hdl.nic.reduce_contexts import ReduceContexts
from mcf_fpga.sim.kit import run_simulation


def lowest(bits):
    return next((k for k, b in enumerate(bits) if b), None)


@settings(max_examples=10, deadline=None)
@given(kr=st.integers(1, 3), km=st.integers(1, 2), timeout=st.sampled_from([0, 1, 4, 20]),
       seed=st.integers(0, 2**32 - 1))
def test_contexts_match_model(kr, km, timeout, seed):
    cfg = NicConfig(n_net=2, n_routes=16, max_payload=64, reduce_contexts=kr, merge_contexts=km)
    K, NS = kr + km, cfg.max_nodes
    dut = ReduceContexts(cfg)
    rng = random.Random(seed)
    ctxs = [None] * K                 # dst, key, fanin, present, count, armed, tmr
    seen = {"hit": 0, "conflict": 0, "complete": 0, "expire": 0}

    async def tb(ctx):
        ctx.set(dut.timeout, timeout)
        for _ in range(300):
            rop = rng.choice([ReduceOp.SUM, ReduceOp.MAX, ReduceOp.SOFTMAX_MERGE])
            meta = MetaFields(op=rng.choice([MetaOp.REDUCTION, MetaOp.PARTIAL_STATE]), reduce_op=rop,
                              stage=Stage.DECODE, src=rng.randrange(NS), dst=rng.randrange(2), route_id=0,
                              collective=Collective.ALL_REDUCE, kv_id=(1, rng.randrange(2)),
                              length=8 * rng.randint(1, 2))
            fanin = rng.randint(1, 3)
            hv = int.from_bytes(pack_header(meta, cfg.meta), "little") & ((1 << cfg.meta.header_bits) - 1)
            ctx.set(dut.hdr.as_value(), hv)
            ctx.set(dut.fanin, fanin)
            key = (int(meta.op), int(rop), meta.length)
            # model lookup
            expire = [c is not None and c["armed"] and c["tmr"] == 0 for c in ctxs]
            live = [c is not None and not e for c, e in zip(ctxs, expire)]
            hit = lowest([lv and c["dst"] == meta.dst and c["kv"] == meta.kv_id for lv, c in zip(live, ctxs)])
            pool = range(kr, K) if rop == ReduceOp.SOFTMAX_MERGE else range(kr)
            free = [k for k in pool if ctxs[k] is None]
            sel = hit if hit is not None else (free[0] if free else pool[0])
            members = (ctxs[hit]["present"] if hit is not None else 0) | 1 << meta.src
            conflict = hit is not None and (ctxs[hit]["key"] != key or ctxs[hit]["fanin"] != fanin
                                            or ctxs[hit]["present"] >> meta.src & 1)
            assert ctx.get(dut.expire) == sum(e << k for k, e in enumerate(expire))
            assert (ctx.get(dut.hit), ctx.get(dut.can_open), ctx.get(dut.conflict)) == \
                (hit is not None, bool(free), bool(conflict))
            assert ctx.get(dut.ctx) == sel
            assert ctx.get(dut.members) == members
            seen["hit"] += hit is not None
            seen["conflict"] += bool(conflict)
            seen["expire"] += any(expire)
            # a random action (the engine does at most one per cycle)
            ctx.set(dut.open, 0)
            ctx.set(dut.join, 0)
            ctx.set(dut.free, 0)
            action, jk = rng.random(), rng.randrange(K)
            ctx.set(dut.join_ctx, jk)
            if ctxs[jk] is not None and not ctxs[jk]["sending"]:
                assert ctx.get(dut.complete) == (ctxs[jk]["count"] + 1 == ctxs[jk]["fanin"])
            # timers first
            for k, c in enumerate(ctxs):
                if c is not None and c["armed"] and c["tmr"] != 0:
                    c["tmr"] -= 1
                if expire[k]:
                    ctxs[k] = None
            if action < 0.4 and hit is None and free:
                ctx.set(dut.open, 1)
                ctxs[sel] = dict(dst=meta.dst, kv=meta.kv_id, key=key, fanin=fanin, present=0, count=0,
                                 armed=False, tmr=0, sending=False)
            elif action < 0.8 and live[jk] and not ctxs[jk]["sending"]:   # a complete group is being sent
                jm, jf = rng.getrandbits(NS), rng.random() < 0.5
                for sig, v in ((dut.join, 1), (dut.join_members, jm), (dut.join_first, jf)):
                    ctx.set(sig, v)
                c = ctxs[jk]
                done = c["count"] + 1 == c["fanin"]
                seen["complete"] += done
                c["present"], c["count"] = jm, c["count"] + 1
                if done:
                    c["armed"], c["sending"] = False, True
                elif jf:
                    c["tmr"], c["armed"] = (timeout - 1) & 0xFFFFFFFF, timeout != 0
            elif action >= 0.9 and any(c is not None and c["sending"] for c in ctxs):
                fk = rng.choice([k for k, c in enumerate(ctxs) if c is not None and c["sending"]])
                ctx.set(dut.free, 1)
                ctx.set(dut.free_ctx, fk)
                ctxs[fk] = None
            await ctx.tick()

    run_simulation(dut, [tb])
    assert seen["hit"] and seen["complete"]
