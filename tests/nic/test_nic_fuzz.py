"""Fuzz on the Verilator backend: >= 10,000 malformed frames (every fault kind plus random
garbage) interleaved with valid traffic on all five ports of a mesh node, random
back-pressure on every output. Nothing valid is lost, nothing invalid is delivered, every
drop is counted under the cause golden/nic.py gives (CRC: pulses on ``crc_err``)."""
import random

from golden.nic import NicModel
from golden.topology import RouteEntry
from hdl.nic.config import ErrorCause
from frames import FAULTS, TrafficGen, random_table
from nic_tb import check_interleaving, golden_outputs
from vl_nic import IN, OUT, VCFG, vl_configure, vl_counters, vl_model

N_BAD = 10_000
N_GOOD = 3_000


def test_fuzz_malformed_frames_with_valid_traffic():
    cfg = VCFG
    rng = random.Random(2026)
    model = NicModel(cfg, node_id=3, num_nodes=12, members=0xFFFF & ~(1 << 7), num_layers=6,
                     num_blocks=1 << 20)
    table = random_table(rng, cfg, n_used=10)
    table[12] = RouteEntry(0b00001, 2)      # a reduction root entry (sum of two)
    gen = TrafficGen(cfg, model, table, rng)
    kinds = ["good"] * N_GOOD + [FAULTS[i % len(FAULTS)] for i in range(N_BAD - 500)] + ["garbage"] * 500
    rng.shuffle(kinds)
    frames = {p: [] for p in range(cfg.n_ports)}
    for i, k in enumerate(kinds):
        if k == "good":
            f = gen.valid(max_len=48)
        elif k == "garbage":
            f = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
        else:
            f = gen.faulty(k)
        frames[rng.randrange(cfg.n_ports)].append(f)
    golden = NicModel(cfg, model.node_id, model.num_nodes, model.members, model.num_layers, model.num_blocks)
    golden.load_table(table)
    exp = golden_outputs(golden, frames)
    assert sum(golden.errors.values()) >= N_BAD        # every malformed frame is one drop

    vl = vl_model()
    vl_configure(vl, model, table)
    for p in range(cfg.n_ports):
        vl.sink_backpressure(OUT[p], seed=p + 1)
        for f in frames[p]:
            vl.push(IN[p], f)
    got = {p: [] for p in range(cfg.n_ports)}
    inval = []
    want = {p: len(exp.get(p, [])) for p in range(cfg.n_ports)}
    for _ in range(2000):
        vl.step(1000)
        for p in range(cfg.n_ports):
            got[p] += vl.pull_all(OUT[p])
        inval += [int.from_bytes(b, "little") for b in vl.pull_all("m_axis_inval")]
        if all(len(got[p]) >= want[p] for p in got) and all(vl.pending(IN[p]) == 0 for p in got):
            break
    vl.step(2000)
    for p in range(cfg.n_ports):
        got[p] += vl.pull_all(OUT[p])
        check_interleaving(exp.get(p, []), got[p], p)
    inval += [int.from_bytes(b, "little") for b in vl.pull_all("m_axis_inval")]
    assert sorted(inval) == sorted(golden.invalidations)
    crc_pulses = [0b0001, 0b1010, 0b1111, 0b0000, 0b0100]   # the link layers' bad-FCS pulses
    for pattern in crc_pulses:
        vl.poke("crc_err", pattern)
        vl.step(1)
    vl.poke("crc_err", 0)
    golden.errors[ErrorCause.CRC] += sum(bin(x).count("1") for x in crc_pulses)
    counters = vl_counters(vl)
    assert {c: counters[c] for c in ErrorCause} == golden.errors
    assert counters["rx_frames"] == golden.rx_frames
