"""AXI4Memory against its contract, driven cycle by cycle by a random Python master.

The checks are written from the contract in mcf_fpga/sim/axi4_memory.py (golden memory image,
per-beat responses, latency bound, token-bucket bound, outstanding limits), not from the
model's code."""
import random

import pytest
from hypothesis import given, strategies as st

from mcf_fpga.hdl.bus import Burst, Resp
from mcf_fpga.sim import AXI4Memory


def golden_beat_resp(mem, addr, size, burst, i):
    nb = 1 << size
    a = addr if i == 0 else (addr & ~(nb - 1)) + i * nb
    if burst != Burst.INCR or nb > mem.bytes_per_beat:
        return a, Resp.SLVERR
    lo, hi = a, (a & ~(nb - 1)) + nb
    if lo < mem.base or hi > mem.base + mem.size:
        return a, Resp.DECERR
    for s, e, r in mem.error_ranges:
        if lo < e and s < hi:
            return a, r
    return a, Resp.OKAY


def drive(mem, cmds, wdata, seed, rready_p, bready_p, max_cycles=5000):
    """Random master. cmds: [(kind, addr, len, size, burst)]; wdata: per write a list of
    (data, strb) beats. Returns the events seen on the bus."""
    rng = random.Random(seed)
    ars = [c for c in cmds if c[0] == "R"]
    aws = [c for c in cmds if c[0] == "W"]
    wbeats = [b for w in wdata for b in w]
    ev = {"ar": [], "aw": [], "r": [], "b": [], "w": [], "inflight": []}
    ai = wi = bi = 0
    n_r = sum(c[2] + 1 for c in ars)
    while len(ev["r"]) < n_r or len(ev["b"]) < len(aws):
        c = mem.cycle
        assert c < max_cycles, "memory model hung"
        out = mem.outputs()
        ar_ready, aw_ready, w_ready, r, b = out
        ar = ars[ai][1:] if ai < len(ars) else None
        aw = aws[wi][1:] if wi < len(aws) else None
        ar = (ai % 4,) + ar if ar else None
        aw = (wi % 4,) + aw if aw else None
        w = wbeats[bi] if bi < len(wbeats) else None
        rr, br = rng.random() < rready_p, rng.random() < bready_p
        if ar and ar_ready:
            ev["ar"].append((c, ar)); ai += 1
        if aw and aw_ready:
            ev["aw"].append((c, aw)); wi += 1
        if w and w_ready:
            ev["w"].append(c); bi += 1
        if r and rr:
            ev["r"].append((c, r))
        if b and br:
            ev["b"].append((c, b))
        mem.edge(out, ar, aw, w, rr, br)
    return ev


cmd_st = st.tuples(st.sampled_from("RW"), st.integers(0x0F80, 0x2080), st.integers(0, 5),
                   st.sampled_from([0, 2, 3, 3, 3]),
                   st.sampled_from([Burst.INCR] * 6 + [Burst.FIXED, Burst.WRAP]))


@given(cmds=st.lists(cmd_st, min_size=1, max_size=10), latency=st.integers(1, 9),
       bpc=st.sampled_from([1, 3, 8, 16]), max_out=st.integers(1, 4),
       ready_seed=st.one_of(st.none(), st.integers(0, 2**64 - 1)), seed=st.integers(0, 999),
       rready_p=st.sampled_from([1.0, 0.5]), bready_p=st.sampled_from([1.0, 0.4]))
def test_memory_follows_contract(cmds, latency, bpc, max_out, ready_seed, seed, rready_p, bready_p):
    base, size = 0x1000, 0x1000
    errs = [(0x1800, 0x1810, Resp.SLVERR), (0x1C00, 0x1C04, Resp.DECERR)]
    mem = AXI4Memory(size, data_width=64, base=base, latency=latency, bytes_per_cycle=bpc,
                     max_outstanding=max_out, error_ranges=errs, ready_seed=ready_seed)
    rng = random.Random(seed)
    init = bytes(rng.randrange(256) for _ in range(size))
    mem.load(base, init)
    cmds = [(k, a & ~((1 << s) - 1), n, s, int(b)) for k, a, n, s, b in cmds]
    wdata = [[(rng.getrandbits(64), rng.getrandbits(8)) for _ in range(c[2] + 1)]
             for c in cmds if c[0] == "W"]
    ev = drive(mem, cmds, wdata, seed, rready_p, bready_p)

    bpb, cap = 8, max(bpc, 8)
    gm = bytearray(init)
    # ---- writes: B responses in order, memory image
    aws = [c for c in cmds if c[0] == "W"]
    w_cycles = iter(ev["w"])
    commits = []        # (cycle of last W beat, write index)
    for i, c in enumerate(aws):
        last = [next(w_cycles) for _ in range(c[2] + 1)][-1]
        commits.append((last, i))
        assert last > ev["aw"][i][0]                     # W only for an accepted AW
    wresp = []
    for i, (_, a, n, s, bu) in enumerate(aws):
        beats = [golden_beat_resp(mem, a, s, bu, j) for j in range(n + 1)]
        wresp.append(max(r for _, r in beats))
    assert [b for _, b in ev["b"]] == [(i % 4, int(r)) for i, r in enumerate(wresp)]
    for (bc, _), (lc, _) in zip(ev["b"], commits):
        assert bc > lc                                   # B only after the last W beat
    # ---- reads: per beat data/resp against the golden image at that cycle
    ars = [c for c in cmds if c[0] == "R"]
    pending = sorted(commits)
    r_iter = iter(ev["r"])
    inflight_r = []
    for i, (_, a, n, s, bu) in enumerate(ars):
        acc = ev["ar"][i][0]
        for j in range(n + 1):
            rc, (rid, rdata, rresp, rlast) = next(r_iter)
            while pending and pending[0][0] < rc:        # apply writes committed before rc
                _, wi = pending.pop(0)
                if wresp[wi] == Resp.OKAY:
                    _, wa, wn, ws, _ = aws[wi]
                    for k, (d, strb) in enumerate(wdata[wi]):
                        ba, _ = golden_beat_resp(mem, wa, ws, Burst.INCR, k)
                        off = (ba & ~7) - base
                        for lane in range(8):
                            if (strb >> lane) & 1:
                                gm[off + lane] = (d >> (8 * lane)) & 0xFF
            ba, resp = golden_beat_resp(mem, a, s, bu, j)
            exp = 0 if resp != Resp.OKAY else int.from_bytes(gm[(ba & ~7) - base:][:8], "little")
            assert (rid, rresp, rlast) == (i % 4, int(resp), int(j == n))
            assert rdata == exp, f"read {i} beat {j} at cycle {rc}"
            if j == 0:
                assert rc >= acc + latency                # latency bound
        inflight_r.append((acc, rc))
    # the final image (all writes applied)
    for _, wi in pending:
        if wresp[wi] == Resp.OKAY:
            _, wa, wn, ws, _ = aws[wi]
            for k, (d, strb) in enumerate(wdata[wi]):
                ba, _ = golden_beat_resp(mem, wa, ws, Burst.INCR, k)
                for lane in range(8):
                    if (strb >> lane) & 1:
                        gm[(ba & ~7) - base + lane] = (d >> (8 * lane)) & 0xFF
    assert mem.dump(base, size) == bytes(gm)
    # ---- token bucket: beats up to cycle c never exceed the bucket
    for n_beats, (rc, _) in enumerate(ev["r"], start=1):
        assert n_beats * bpb <= cap + bpc * rc
    # ---- outstanding limits (reads: AR accept .. last beat; writes: AW accept .. B)
    for c in range(mem.cycle):
        assert sum(a <= c <= e for a, e in inflight_r) <= max_out
        assert sum(ev["aw"][i][0] <= c <= ev["b"][i][0] for i in range(len(aws))) <= max_out
    # ---- the log lists every accepted transaction
    got_kinds = [(c, k, a, n) for c, k, a, n, _ in mem.log]
    exp_kinds = sorted([(c, "R", x[1], x[2]) for c, x in ev["ar"]] +
                       [(c, "W", x[1], x[2]) for c, x in ev["aw"]], key=lambda t: (t[0], t[1] == "W"))
    assert got_kinds == exp_kinds


def test_latency_and_bandwidth_exact_when_idle():
    for bpc, gap in ((8, 1), (4, 2), (2, 4)):
        mem = AXI4Memory(4096, data_width=64, latency=10, bytes_per_cycle=bpc)
        ev = drive(mem, [("R", 0x100, 7, 3, Burst.INCR)], [], 0, 1.0, 1.0)
        acc = ev["ar"][0][0]
        cycles = [c for c, _ in ev["r"]]
        assert cycles[0] == acc + 10
        # the bucket starts full: the first beat is free, then one beat per `gap` cycles
        assert [b - a for a, b in zip(cycles, cycles[1:])] == [gap] * 7


def test_ready_seed_stalls_and_repeats():
    def run(seed):
        mem = AXI4Memory(4096, data_width=64, latency=2, ready_seed=seed)
        cmds = [("R", 8 * i, 0, 3, Burst.INCR) for i in range(20)]
        drive(mem, cmds, [], 1, 1.0, 1.0)
        return mem.log
    free, a, b, c = run(None), run(7), run(7), run(8)
    assert a == b and a != c
    assert [x[0] for x in free] == list(range(8)) + [x[0] for x in free][8:]
    assert a[-1][0] > free[-1][0]         # stalls slow the address channel


def test_bad_parameters_name_the_field():
    with pytest.raises(ValueError, match="data_width"):
        AXI4Memory(4096, data_width=48)
    with pytest.raises(ValueError, match="latency"):
        AXI4Memory(4096, latency=0)
    with pytest.raises(ValueError, match="max_outstanding"):
        AXI4Memory(4096, max_outstanding=0)
    with pytest.raises(ValueError, match="bytes_per_cycle"):
        AXI4Memory(4096, bytes_per_cycle=0)
    with pytest.raises(ValueError, match="error range"):
        AXI4Memory(4096, error_ranges=[(10, 5, Resp.SLVERR)])
    with pytest.raises(ValueError, match="size must be a multiple"):
        AXI4Memory(100)
    mem = AXI4Memory(4096, base=0x1000)
    with pytest.raises(ValueError, match="outside memory"):
        mem.load(0xFFF, b"ab")
    with pytest.raises(ValueError, match="outside memory"):
        mem.dump(0x1FFF, 2)
