"""KVInstallCommitter (hdl/kvinstall_committer.py) against a Python model of golden.kvinstall's
rule 4 (the failed-unit set) and commit step: per (pending entry, DMA status) pair the
counters, the first error latched, the set and ``overflow``, and the COMMIT_OWNER /
COMMIT_INSTALL command of each unit that completed cleanly; random kv_ids, outcomes,
directory answers and back-pressure; ``clear`` zeroes the error and ``overflow``."""
import random

from hypothesis import given, settings, strategies as st

from mcf_fpga.spec.dma import DmaStatus
from mcf_fpga.spec.kvpool import Opcode, Status
from mcf_fpga.hdl.kvinstall_committer import KVInstallCommitter
from mcf_fpga.sim.kit import StreamSource, run_simulation

KV_BITS, KV_ID_WIDTH = 16, 12


def model(pairs, resps, max_failed):
    """Expected counters, commands, error and overflow after ``pairs`` [(pend, status)]."""
    n = dict(installed=0, axi_err=0, committed=0, unit_done=0)
    failed, overflow, err, cmds, resps = [], False, (0, 0), [], iter(resps)
    for (kv, last, owner), (code, addr) in pairs:
        if code != DmaStatus.OK:
            n["axi_err"] += 1
            err = err if err[0] else (code, addr)
            if last:
                failed = [f for f in failed if f != kv]
                n["unit_done"] += 1
            elif kv not in failed:
                if len(failed) < max_failed:
                    failed.append(kv)
                else:
                    overflow = True
            continue
        n["installed"] += 1
        if not last:
            continue
        n["unit_done"] += 1
        if kv in failed or overflow:
            failed = [f for f in failed if f != kv]
            continue
        cmds.append((Opcode.COMMIT_OWNER if owner else Opcode.COMMIT_INSTALL, kv & ((1 << KV_ID_WIDTH) - 1)))
        n["committed"] += next(resps) == Status.OK
    return n, cmds, err, overflow


@settings(max_examples=15, deadline=None)
@given(max_failed=st.sampled_from([1, 2, 4]), seed=st.integers(0, 2**32 - 1), p=st.sampled_from([0.4, 1.0]),
       err_p=st.sampled_from([0.0, 0.2, 0.5]))
def test_committer_matches_model(max_failed, seed, p, err_p):
    dut = KVInstallCommitter(kv_bits=KV_BITS, kv_id_width=KV_ID_WIDTH, n_slots=6, max_readers=3, addr_width=32,
                             max_failed=max_failed)
    rng = random.Random(seed)
    kvs = [rng.getrandbits(KV_BITS) for _ in range(6)]
    pends = [dict(kv_id=rng.choice(kvs), last=int(rng.random() < 0.4), owner=rng.randrange(2)) for _ in range(30)]
    stats = [dict(code=rng.choice([DmaStatus.SLVERR, DmaStatus.DECERR]) if rng.random() < err_p else DmaStatus.OK,
                  addr=rng.getrandbits(32)) for _ in pends]
    got = {"cmds": [], "resps": [], "installed": 0, "axi_err": 0, "committed": 0, "unit_done": 0}
    done = [False]

    async def feed_pend(ctx):
        await StreamSource(dut.pend, seed=seed + 1, valid_prob=p).send(ctx, pends)

    async def feed_status(ctx):
        await StreamSource(dut.status, seed=seed + 2, valid_prob=p).send(ctx, stats)
        while ctx.get(dut.busy):
            await ctx.tick()
        await ctx.tick()
        done[0] = True

    async def directory(ctx):
        while not done[0]:
            status = rng.choice([Status.OK, Status.OK, Status.NOT_INSTALLING, Status.UNKNOWN])
            ctx.set(dut.dir_resp.payload.status, status)
            ctx.set(dut.dir_resp.valid, rng.random() < p)
            ctx.set(dut.dir_cmd.ready, rng.random() < p)
            if ctx.get(dut.dir_cmd.valid) and ctx.get(dut.dir_cmd.ready):
                got["cmds"].append((ctx.get(dut.dir_cmd.payload.opcode), ctx.get(dut.dir_cmd.payload.kv_id)))
            if ctx.get(dut.dir_resp.valid) and ctx.get(dut.dir_resp.ready):
                got["resps"].append(status)
            for name in ("installed", "axi_err", "committed", "unit_done"):
                got[name] += ctx.get(getattr(dut, name))
            await ctx.tick()
        outcome = (ctx.get(dut.err_code), ctx.get(dut.err_addr), ctx.get(dut.overflow))
        ctx.set(dut.clear, 1)
        await ctx.tick()
        assert (ctx.get(dut.err_code), ctx.get(dut.err_addr), ctx.get(dut.overflow)) == (0, 0, 0)
        got["outcome"] = outcome

    run_simulation(dut, [feed_pend, feed_status, directory])
    n, cmds, err, overflow = model([((d["kv_id"], d["last"], d["owner"]), (s["code"], s["addr"]))
                                    for d, s in zip(pends, stats)], got["resps"], max_failed)
    assert {k: got[k] for k in n} == n
    assert got["cmds"] == [(int(o), kv) for o, kv in cmds]
    assert got["outcome"] == (int(err[0]), err[1], overflow)
