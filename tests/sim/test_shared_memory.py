"""SharedAXI4Memory against its contract (mcf_fpga/sim/shared_memory.py), driven cycle by cycle by one
random Python master per port: data on every port against a golden image that applies every
port's writes at their last W beat, the shared budget in every window of cycles, each port's own
rate, round-robin fairness (no port starved, a stalled master does not hold the DRAM), and
cycle-for-cycle equality with AXI4Memory when it has one port and the shared budget cannot bind.
The checks use only what a master sees on the bus."""
import random

import pytest
from amaranth import Module
from amaranth.lib import wiring
from hypothesis import given, settings, strategies as st

from mcf_fpga.hdl.bus import Burst
from mcf_fpga.hdl.dma import DMAReader
from mcf_fpga.sim import AXI4Memory, SharedAXI4Memory
from mcf_fpga.sim.kit import StreamSource, StreamSink, run_simulation

DW = 64
B = DW // 8                     # bytes per beat
BASE, SIZE = 0x1000, 0x800


def beat_addr(addr, i):
    return (addr & ~(B - 1)) + i * B


def drive(mem, traffic, seed, rready_p, bready_p, *, max_cycles=20_000, rready_fn=None):
    """``traffic[i]``: port i's commands [(kind, addr, len)] (INCR, full-width beats) and write
    beats. Returns per port: ar/aw accept cycles, R handshakes (cycle, (id, data, resp, last)),
    first-offer cycle of every R beat, W accept cycles, B handshakes."""
    rng = random.Random(seed)
    n = len(traffic)
    st_ = []
    for cmds, wdata in traffic:
        st_.append(dict(ars=[c for c in cmds if c[0] == "R"], aws=[c for c in cmds if c[0] == "W"],
                        wbeats=[b for w in wdata for b in w], ai=0, wi=0, bi=0, offered=False,
                        ev=dict(ar=[], aw=[], r=[], first=[], w=[], b=[])))
    single = isinstance(mem, AXI4Memory)

    def done():
        return all(len(s["ev"]["r"]) == sum(c[2] + 1 for c in s["ars"]) and len(s["ev"]["b"]) == len(s["aws"])
                   for s in st_)
    while not done():
        c = mem.cycle
        assert c < max_cycles, "memory model hung"
        out = mem.outputs()
        outs = [out] if single else out["ports"]
        inputs = []
        for i, (s, o) in enumerate(zip(st_, outs)):
            ar_ready, aw_ready, w_ready, r, b = o
            ar = (s["ai"] % 4, s["ars"][s["ai"]][1], s["ars"][s["ai"]][2], 3 if DW == 64 else 4,
                  int(Burst.INCR)) if s["ai"] < len(s["ars"]) else None
            aw = (s["wi"] % 4, s["aws"][s["wi"]][1], s["aws"][s["wi"]][2], 3 if DW == 64 else 4,
                  int(Burst.INCR)) if s["wi"] < len(s["aws"]) else None
            w = s["wbeats"][s["bi"]] if s["bi"] < len(s["wbeats"]) else None
            p = rready_fn(i, c) if rready_fn else rready_p
            rr, br = rng.random() < p, rng.random() < bready_p
            ev = s["ev"]
            if ar and ar_ready:
                ev["ar"].append(c); s["ai"] += 1
            if aw and aw_ready:
                ev["aw"].append(c); s["wi"] += 1
            if w and w_ready:
                ev["w"].append(c); s["bi"] += 1
            if r is not None:
                if not s["offered"]:
                    ev["first"].append(c)
                s["offered"] = not rr
                if rr:
                    ev["r"].append((c, r))
            else:
                assert not s["offered"], f"port {i}: R VALID withdrawn at cycle {c}"
            if b and br:
                ev["b"].append((c, b))
            inputs.append((ar, aw, w, rr, br))
        if single:
            mem.edge(out, *inputs[0])
        else:
            mem.edge(out, inputs)
    return [s["ev"] for s in st_]


def random_traffic(rng, n_cmds, max_len=5):
    cmds = [(rng.choice("RW"), BASE + B * rng.randrange(SIZE // B - max_len - 1), rng.randrange(max_len + 1))
            for _ in range(n_cmds)]
    wdata = [[(rng.getrandbits(DW), rng.getrandbits(B)) for _ in range(c[2] + 1)] for c in cmds if c[0] == "W"]
    return cmds, wdata


def check_data(traffic, evs, init):
    """Every R beat on every port equals the golden image with all writes whose last W beat was
    accepted before the beat's handshake (ties across ports: port order); final image."""
    commits = []                       # (cycle of last W beat, port, write index)
    for i, ((cmds, wdata), ev) in enumerate(zip(traffic, evs)):
        it = iter(ev["w"])
        for k, c in enumerate(c for c in cmds if c[0] == "W"):
            last = [next(it) for _ in range(c[2] + 1)][-1]
            assert last > ev["aw"][k]
            commits.append((last, i, k))
    commits.sort()
    gm = bytearray(init)

    def apply(i, k):
        cmds, wdata = traffic[i]
        _, wa, _ = [c for c in cmds if c[0] == "W"][k]
        for j, (d, strb) in enumerate(wdata[k]):
            off = beat_addr(wa, j) - BASE
            for lane in range(B):
                if (strb >> lane) & 1:
                    gm[off + lane] = (d >> (8 * lane)) & 0xFF
    # replay in cycle order: at each R handshake, apply the commits before it
    reads = []
    for i, ((cmds, _), ev) in enumerate(zip(traffic, evs)):
        it = iter(ev["r"])
        for k, (_, a, ln) in enumerate(c for c in cmds if c[0] == "R"):
            for j in range(ln + 1):
                rc, r = next(it)
                reads.append((rc, i, k, a, j, ln, r))
                if j == 0:
                    assert rc >= ev["ar"][k] + 1
    reads.sort()
    ci = 0
    for rc, i, k, a, j, ln, (rid, rdata, rresp, rlast) in reads:
        while ci < len(commits) and commits[ci][0] < rc:
            apply(*commits[ci][1:]); ci += 1
        off = beat_addr(a, j) - BASE
        assert (rid, rresp, rlast) == (k % 4, 0, int(j == ln))
        assert rdata == int.from_bytes(gm[off:off + B], "little"), f"port {i} read {k} beat {j} at {rc}"
    for cm in commits[ci:]:
        apply(*cm[1:])
    return bytes(gm)


def window_excess(cycles, rate):
    """max over a <= b of (bytes of beats in cycles a..b) - rate * (b - a)."""
    per = {}
    for c in cycles:
        per[c] = per.get(c, 0) + B
    best, S, lo = 0, 0, rate              # Y(j) = S(j) - rate * j, Y(-1) = rate
    for c in range(max(cycles, default=-1) + 1):
        S += per.get(c, 0)
        y = S - rate * c
        best = max(best, y - lo + rate)
        lo = min(lo, y)
    return best


# ------------------------------------------------------------------ properties

@settings(max_examples=60, deadline=None)
@given(n_ports=st.integers(1, 3), shared=st.sampled_from([None, 2, 5, 8, 12, 16]),
       port_rates=st.lists(st.sampled_from([None, 3, 8]), min_size=3, max_size=3),
       latency=st.lists(st.integers(1, 12), min_size=3, max_size=3),
       max_out=st.integers(1, 4), ready_seed=st.one_of(st.none(), st.integers(0, 2 ** 32)),
       seed=st.integers(0, 9999), rready_p=st.sampled_from([1.0, 0.6]), bready_p=st.sampled_from([1.0, 0.5]))
def test_shared_memory_follows_contract(n_ports, shared, port_rates, latency, max_out, ready_seed, seed,
                                        rready_p, bready_p):
    rng = random.Random(seed)
    ports = [dict(latency=latency[i], max_outstanding=max_out,
                  ready_seed=None if ready_seed is None else ready_seed + i,
                  **({} if port_rates[i] is None else {"bytes_per_cycle": port_rates[i]}))
             for i in range(n_ports)]
    mem = SharedAXI4Memory(SIZE, ports=ports, data_width=DW, base=BASE, bytes_per_cycle=shared)
    init = rng.randbytes(SIZE)
    mem.load(BASE, init)
    traffic = [random_traffic(rng, rng.randrange(1, 9)) for _ in range(n_ports)]
    evs = drive(mem, traffic, seed, rready_p, bready_p)
    # data on every port, final image
    assert mem.dump(BASE, SIZE) == check_data(traffic, evs, init)
    # first R beat no earlier than the port's latency after AR
    for i, ev in enumerate(evs):
        ars = [c for c in traffic[i][0] if c[0] == "R"]
        starts, pos = [], 0
        for c in ars:
            starts.append(ev["r"][pos][0]); pos += c[2] + 1
        for acc, s in zip(ev["ar"], starts):
            assert s >= acc + latency[i]
    # shared budget: DRAM transfers (R first offers + W accepts) in every window; accepted R beats
    # may exceed it by one held beat per port
    if shared is not None:
        cap = max(shared, B)
        xfer = [c for ev in evs for c in ev["first"] + ev["w"]]
        assert window_excess(xfer, shared) <= cap
        acc = [c for ev in evs for c, _ in ev["r"]] + [c for ev in evs for c in ev["w"]]
        assert window_excess(acc, shared) <= cap + n_ports * B
    # each port's own rate (its R beats, AXI4Memory's token bucket) and at most one beat per cycle
    for i, ev in enumerate(evs):
        rate = port_rates[i] or B
        assert window_excess([c for c, _ in ev["r"]], rate) <= max(rate, B)
        assert len({c for c, _ in ev["r"]}) == len(ev["r"])
    # byte counters
    assert mem.bytes_read == [B * len(ev["r"]) for ev in evs]
    assert mem.bytes_written == [B * len(ev["w"]) for ev in evs]


@settings(max_examples=40, deadline=None)
@given(shared_kind=st.sampled_from(["none", "two_beats", "port_rate_reads"]),
       port_rate=st.sampled_from([None, 3, 8]), latency=st.integers(1, 9), max_out=st.integers(1, 4),
       ready_seed=st.one_of(st.none(), st.integers(0, 2 ** 32)), seed=st.integers(0, 9999),
       rready_p=st.sampled_from([1.0, 0.5]), bready_p=st.sampled_from([1.0, 0.4]))
def test_one_port_is_axi4memory(shared_kind, port_rate, latency, max_out, ready_seed, seed, rready_p, bready_p):
    """One port, a shared budget that cannot bind: the same outputs as AXI4Memory every cycle
    under the same master (and so the same log, data and final image)."""
    kw = dict(latency=latency, max_outstanding=max_out, ready_seed=ready_seed)
    if port_rate is not None:
        kw["bytes_per_cycle"] = port_rate
    rng = random.Random(seed)
    cmds, wdata = random_traffic(rng, rng.randrange(1, 12))
    if shared_kind == "port_rate_reads":
        cmds, wdata = [c for c in cmds if c[0] == "R"], []
    shared = {"none": None, "two_beats": 2 * B, "port_rate_reads": port_rate or B}[shared_kind]
    init = rng.randbytes(SIZE)
    one = AXI4Memory(SIZE, data_width=DW, base=BASE, **kw)
    sh = SharedAXI4Memory(SIZE, ports=[kw], data_width=DW, base=BASE, bytes_per_cycle=shared)
    one.load(BASE, init)
    sh.load(BASE, init)
    m_rng = random.Random(seed + 1)
    ars = [c for c in cmds if c[0] == "R"]
    aws = [c for c in cmds if c[0] == "W"]
    wbeats = [b for w in wdata for b in w]
    ai = wi = bi = nr = nb = 0
    n_r = sum(c[2] + 1 for c in ars)
    while nr < n_r or nb < len(aws):
        assert one.cycle < 10_000
        o1, o2 = one.outputs(), sh.outputs()
        assert o1 == o2["ports"][0], f"cycle {one.cycle}"
        ar_ready, aw_ready, w_ready, r, b = o1
        ar = (ai % 4, ars[ai][1], ars[ai][2], 3, int(Burst.INCR)) if ai < len(ars) else None
        aw = (wi % 4, aws[wi][1], aws[wi][2], 3, int(Burst.INCR)) if wi < len(aws) else None
        w = wbeats[bi] if bi < len(wbeats) else None
        rr, br = m_rng.random() < rready_p, m_rng.random() < bready_p
        ai += bool(ar and ar_ready)
        wi += bool(aw and aw_ready)
        bi += bool(w and w_ready)
        nr += bool(r is not None and rr)
        nb += bool(b is not None and br)
        one.edge(o1, ar, aw, w, rr, br)
        sh.edge(o2, [(ar, aw, w, rr, br)])
    assert one.log == sh.ports[0].log
    assert one.dump(BASE, SIZE) == sh.dump(BASE, SIZE)


# ------------------------------------------------------------------ fairness

def _saturating(n_ports, bursts=12, ln=15):
    return [([("R", BASE + B * 16 * (k % 6), ln) for k in range(bursts)], []) for _ in range(n_ports)]


@pytest.mark.parametrize("shared,n_ports", [(8, 3), (16, 3), (8, 2), (24, 4)])
def test_round_robin_shares_equally_when_all_busy(shared, n_ports):
    """Every port always has a beat ready (long bursts, 4 outstanding, latency 1): while all are
    busy each port gets an equal share (+-1 beat) and never waits more than n_ports grants."""
    mem = SharedAXI4Memory(SIZE, ports=[dict(latency=1, max_outstanding=4)] * n_ports, data_width=DW,
                           base=BASE, bytes_per_cycle=shared)
    evs = drive(mem, _saturating(n_ports), 0, 1.0, 1.0)
    end = min(ev["r"][-1][0] for ev in evs)             # all ports busy up to here
    start = max(ev["r"][0][0] for ev in evs)
    counts = [sum(start <= c <= end for c, _ in ev["r"]) for ev in evs]
    assert max(counts) - min(counts) <= 1, counts
    per_grant = -(-B // shared) if shared < B else 1    # cycles between grants at the shared rate
    for ev in evs:
        cyc = [c for c, _ in ev["r"] if start <= c <= end]
        assert max(b - a for a, b in zip(cyc, cyc[1:])) <= n_ports * per_grant + 1
    assert sum(counts) * B <= max(shared, B) + shared * (end - start)


def test_stalled_master_does_not_hold_the_dram():
    """Port 0's master holds RREADY low for 300 cycles: its one offered beat waits, and port 1
    gets the whole shared budget meanwhile (a held beat costs nothing); then both finish."""
    shared = 8
    mem = SharedAXI4Memory(SIZE, ports=[dict(latency=1, max_outstanding=4)] * 2, data_width=DW, base=BASE,
                           bytes_per_cycle=shared)
    evs = drive(mem, _saturating(2), 0, 1.0, 1.0, rready_fn=lambda i, c: 0.0 if (i == 0 and c < 300) else 1.0)
    assert evs[0]["r"][0][0] >= 300
    assert len(evs[0]["first"]) >= 1 and evs[0]["first"][0] < 10
    n1 = len(evs[1]["r"])                            # 192 beats: the whole budget is one beat a cycle
    assert evs[1]["r"][-1][0] < n1 + 10              # port 1 ran at the full shared rate meanwhile


def test_amaranth_testbench_two_readers():
    """Two DMAReaders on ports 0 and 1 of one memory (latency 30 and 5, shared 16 B/cycle on a
    128-bit bus: one beat per cycle for both): both packets carry the image's bytes, the accepted
    bytes respect the shared budget, and an unused port (None) stays idle."""
    class Two(wiring.Component):
        def __init__(self):
            self.a = DMAReader(addr_width=32, max_burst=16, max_outstanding=4)
            self.b = DMAReader(addr_width=32, max_burst=16, max_outstanding=4)
            super().__init__({})

        def elaborate(self, platform):
            m = Module()
            m.submodules.a, m.submodules.b = self.a, self.b
            return m
    dut = Two()
    mem = SharedAXI4Memory(4096, ports=[dict(latency=30), dict(latency=5), {}], data_width=128,
                           bytes_per_cycle=16)
    image = random.Random(3).randbytes(4096)
    mem.load(0, image)
    got = {}

    def reader(name, r, addr, n):
        async def tb(ctx):
            await StreamSource(r.desc).send(ctx, [{"addr": addr, "length": n}])
            beats = await StreamSink(r.data).collect(ctx, n // 16)
            got[name] = b"".join(x["data"].to_bytes(16, "little") for x in beats)
            got[name + "_cycle"] = mem.cycle
        return tb
    run_simulation(dut, [reader("a", dut.a, 0x100, 1024), reader("b", dut.b, 0x800, 1024)],
                   background=[mem.testbench(dut.a.m_axi, dut.b.m_axi, None)], vcd=False, max_cycles=5000)
    assert got["a"] == image[0x100:0x500] and got["b"] == image[0x800:0xC00]
    assert mem.bytes_read[:2] == [1024, 1024] and mem.bytes_read[2] == 0 and not mem.ports[2].log
    assert max(got["a_cycle"], got["b_cycle"]) >= 2048 // 16      # one beat per cycle for both


def test_bad_parameters_name_the_field():
    with pytest.raises(ValueError, match="ports must be >= 1"):
        SharedAXI4Memory(4096, ports=0)
    with pytest.raises(ValueError, match=r"ports\[1\]: unknown parameter\(s\) \['latncy'\]"):
        SharedAXI4Memory(4096, ports=[{}, {"latncy": 3}])
    with pytest.raises(ValueError, match="bytes_per_cycle \\(shared\\)"):
        SharedAXI4Memory(4096, ports=2, bytes_per_cycle=0)
    with pytest.raises(ValueError, match="latency"):
        SharedAXI4Memory(4096, ports=[{"latency": 0}])
    mem = SharedAXI4Memory(4096, ports=2)
    with pytest.raises(ValueError, match="1 AXI ports for a memory of 2 ports"):
        mem.testbench(None)
    with pytest.raises(ValueError, match="1 port inputs for 2 ports"):
        mem.edge(mem.outputs(), [(None, None, None, False, False)])
