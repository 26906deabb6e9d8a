"""Fuzz on the Verilator backend: >= 10,000 malformed frames (every fault kind, spoofed srcs on
every port, random garbage) interleaved with valid traffic and with reduction groups (complete
ones and abandoned ones: a partial set of contributions, some with conflicting contributions) on
all five ports of a mesh node, random back-pressure on every output. Nothing valid is lost,
nothing invalid is delivered, every drop is counted under the cause mcf_fpga/golden/nic.py gives (CRC:
pulses on ``crc_err``), every abandoned group times out (``TIMEOUT``) and ERR_FLAGS equals
golden's.

Timing contract with the golden model (mcf_fpga/golden/nic.py, "Time"): the traffic comes in
``PHASES`` bursts, each shorter than REDUCE_TIMEOUT cycles (asserted), separated by idle gaps
longer than it (``golden.idle``): every group left open by a burst times out in the following
gap, none during a burst. A burst opens at most as many groups of a pool as it holds, so no
contribution waits for a context (that case is cycle-tested in test_nic_trust.py)."""
import random
from collections import Counter

from mcf_fpga.golden.nic import NicModel, make_frame
from mcf_fpga.spec.topology import RouteEntry
from mcf_fpga.spec.meta import Collective, MetaFields, MetaOp, ReduceOp
from mcf_fpga.golden.header import unpack_header
from mcf_fpga.spec.nic import ErrorCause, Reg
from tests.hdl.nic.frames import FAULTS, TrafficGen, allowed_on, random_src_allow, random_table
from tests.hdl.nic.nic_tb import check_interleaving, golden_outputs
from tests.hdl.nic.test_nic_collectives import random_partial, random_words
from tests.hdl.nic.vl_nic import IN, OUT, VCFG, vl_configure, vl_counters, vl_model

N_BAD = 10_000
N_GOOD = 3_000
PHASES = 40
TIMEOUT = 20_000                 # REDUCE_TIMEOUT for this test
GAP = TIMEOUT + 500
ROOTS = {12: 2, 13: 3, 14: 4}     # reduction root route ids -> fan-in


def reduction_groups(rng, cfg, gen, model, first_id):
    """Contributions of one burst's groups, {port: [frame]}: at most ``reduce_contexts`` SUM/MAX and
    ``merge_contexts`` SOFTMAX_MERGE groups, about half abandoned (fewer contributions than the
    fan-in). Contributions of a complete group are spread over ports that allow their srcs (the
    result does not depend on the arrival order); an abandoned group with a conflicting
    contribution (duplicate src or other length) keeps all of them on one port, in order, so
    that which one opens the group is the same in golden and hardware. Returns (frames,
    complete, abandoned, conflicts)."""
    out = {p: [] for p in range(cfg.n_ports)}
    stats = Counter()
    gid = first_id
    for rops, n in (([ReduceOp.SUM, ReduceOp.MAX], cfg.reduce_contexts), ([ReduceOp.SOFTMAX_MERGE], cfg.merge_contexts)):
        for _ in range(rng.randrange(n + 1)):
            gid += 1
            rop = rng.choice(rops)
            op = MetaOp.PARTIAL_STATE if rop == ReduceOp.SOFTMAX_MERGE else rng.choice([MetaOp.REDUCTION, MetaOp.PARTIAL_STATE])
            rid = rng.choice(sorted(ROOTS))
            fanin = ROOTS[rid]
            words = rng.randrange(3, 6) if rop == ReduceOp.SOFTMAX_MERGE else rng.randrange(1, 5)
            abandon = rng.random() < 0.5
            conflict = abandon and rng.random() < 0.5
            port = rng.randrange(cfg.n_ports)
            if conflict:
                srcs = [s for s in gen.allowed[port]]
                if len(srcs) < 2:
                    conflict = False
            if not conflict:
                srcs = list(gen.member_ids)
            k = rng.randrange(1, fanin) if abandon else fanin
            k = min(k, len(srcs) - conflict)
            chosen = rng.sample(srcs, k)
            meta = MetaFields(op=op, reduce_op=rop, src=0, dst=rng.randrange(256), route_id=rid,
                              collective=Collective.ALL_REDUCE, kv_id=(rng.randrange(model.num_layers), 500_000 + gid),
                              length=8 * words)
            frames = []
            for s in chosen:
                payload = random_partial(rng, words - 2) if rop == ReduceOp.SOFTMAX_MERGE else random_words(rng, op, words)
                frames.append((s, make_frame(meta.replace(src=s), payload, cfg)))
            if conflict:
                bad = meta.replace(src=chosen[0]) if rng.random() < 0.5 else \
                    meta.replace(src=rng.choice([s for s in srcs if s not in chosen] or chosen), length=meta.length + 8)
                frames.insert(rng.randrange(1, len(frames) + 1),
                              (bad.src, make_frame(bad, bytes(rng.randrange(256) for _ in range(bad.length)), cfg)))
                out[port] += [f for _, f in frames]
            else:
                for s, f in frames:
                    out[rng.choice([p for p in range(cfg.n_ports) if allowed_on(model, p, s)])].append(f)
            stats["abandoned" if k < fanin else "complete"] += 1
            stats["conflicts"] += conflict
    return out, stats, gid


def split_results(outs, node_id):
    """Local outputs that are reduction results (src = NODE_ID, reduce_op set) vs the rest."""
    res, rest = [], []
    for origin, f in outs:
        m = unpack_header(f[:VCFG.meta.header_bytes], VCFG.meta)
        (res if int(m.reduce_op) != ReduceOp.NONE and m.src == node_id else rest).append((origin, f))
    return res, rest


def test_fuzz_malformed_spoofed_and_abandoned_with_valid_traffic():
    cfg = VCFG
    rng = random.Random(2026)
    model = NicModel(cfg, node_id=3, num_nodes=12, members=0xFFFF & ~(1 << 7), num_layers=6,
                     num_blocks=1 << 20, reduce_timeout=TIMEOUT)
    model.src_allow = random_src_allow(rng, cfg, model)
    table = random_table(rng, cfg, n_used=10)
    for rid, fanin in ROOTS.items():
        table[rid] = RouteEntry(0b00001, fanin)          # reduction roots here
    gen = TrafficGen(cfg, model, table, rng)
    assert all(gen.allowed[p] and gen.spoofs[p] for p in range(cfg.n_ports))
    kinds = ["good"] * N_GOOD + [FAULTS[i % len(FAULTS)] for i in range(N_BAD - 500)] + ["garbage"] * 500
    rng.shuffle(kinds)
    golden = model.fresh()
    golden.load_table(table)

    vl = vl_model()
    vl_configure(vl, model, table)
    for p in range(cfg.n_ports):
        vl.sink_backpressure(OUT[p], seed=p + 1)
    total = Counter()
    gid = max_burst = 0
    per_phase = -(-len(kinds) // PHASES)
    for phase in range(PHASES):
        frames = {p: [] for p in range(cfg.n_ports)}
        for k in kinds[phase * per_phase:(phase + 1) * per_phase]:
            p = rng.randrange(cfg.n_ports)
            if k == "good":
                f = gen.valid(max_len=48, port=p)
            elif k == "garbage":
                f = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
            else:
                f = gen.faulty(k, p)
            frames[p].append(f)
        red, stats, gid = reduction_groups(rng, cfg, gen, model, gid)
        total.update(stats)
        for p in range(cfg.n_ports):                  # contributions among the other frames, in order
            for f in red[p]:
                frames[p].insert(rng.randrange(len(frames[p]) + 1), f)
        total["frames"] += sum(len(v) for v in frames.values())
        exp = golden_outputs(golden, frames)

        start = vl.cycle
        for p in range(cfg.n_ports):
            for f in frames[p]:
                vl.push(IN[p], f)
        got = {p: [] for p in range(cfg.n_ports)}
        inval = []
        want = {p: len(exp.get(p, [])) for p in range(cfg.n_ports)}
        for _ in range(200):
            vl.step(1000)
            for p in range(cfg.n_ports):
                got[p] += vl.pull_all(OUT[p])
            inval += [int.from_bytes(b, "little") for b in vl.pull_all("m_axis_inval")]
            if all(len(got[p]) >= want[p] for p in got) and all(vl.pending(IN[p]) == 0 for p in got):
                break
        vl.step(2000)
        for p in range(cfg.n_ports):
            got[p] += vl.pull_all(OUT[p])
        inval += [int.from_bytes(b, "little") for b in vl.pull_all("m_axis_inval")]
        burst = vl.cycle - start
        max_burst = max(burst, max_burst)
        assert burst < TIMEOUT, f"phase {phase}: burst of {burst} cycles breaks the timing contract"
        exp_res, exp_rest = split_results(exp.get(0, []), model.node_id)
        got_res, got_rest = split_results([(None, f) for f in got[0]], model.node_id)
        assert sorted(f for _, f in got_res) == sorted(f for _, f in exp_res), f"phase {phase}: reduction results"
        check_interleaving(exp_rest, [f for _, f in got_rest], 0)
        for p in range(1, cfg.n_ports):
            check_interleaving(exp.get(p, []), got[p], p)
        assert sorted(inval) == sorted(golden.invalidations[total["inval"]:]), f"phase {phase}: invalidations"
        total["inval"] = len(golden.invalidations)
        # the gap: every group this burst left open times out
        assert golden.idle(GAP) == []
        vl.step(GAP)
        assert not golden.reduce.groups

    crc_pulses = [0b0001, 0b1010, 0b1111, 0b0000, 0b0100]   # the link layers' bad-FCS pulses
    for pattern in crc_pulses:
        vl.poke("crc_err", pattern)
        vl.step(1)
    vl.poke("crc_err", 0)
    golden.count(ErrorCause.CRC, sum(bin(x).count("1") for x in crc_pulses))
    counters = vl_counters(vl)
    print(dict(total), {c.name: n for c, n in golden.errors.items()}, "max burst", max_burst)
    assert total["frames"] >= N_BAD + N_GOOD
    assert sum(golden.errors.values()) >= N_BAD        # every malformed frame is one drop
    assert golden.errors[ErrorCause.SPOOF] >= (N_BAD - 500) // len(FAULTS)
    assert golden.errors[ErrorCause.TIMEOUT] == total["abandoned"] > 50
    assert golden.errors[ErrorCause.REDUCE] >= total["conflicts"] > 20
    assert {c: counters[c] for c in ErrorCause} == golden.errors
    assert counters["rx_frames"] == golden.rx_frames
    assert counters["err_flags"] == golden.err_flags == (1 << len(ErrorCause)) - 1
    vl.axil_write(Reg.ERR_CLEAR, golden.err_flags)
    assert vl.axil_read(Reg.ERR_FLAGS)[0] == 0
