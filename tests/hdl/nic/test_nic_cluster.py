"""Four NICs as a 2x2 mesh (Verilator backend, links between the network ports): collectives
issued back to back -- all-to-all, then all-reduce (sum), then multicast, then an
online-softmax partial merge at a root -- compared with the golden cluster
(golden.nic.ClusterModel). Every node must receive exactly golden's frames; the reduction
results must be bit-identical (a contribution leaking between consecutive collectives
changes them)."""
import random
from collections import Counter

import pytest

from mcf_fpga.golden.nic import ClusterModel, encode_i32, encode_i64, encode_partial, make_frame
from mcf_fpga.spec.topology import Mesh, Ring, RouteTables
from mcf_fpga.spec.meta import Collective, MetaFields, MetaOp, ReduceOp, Stage
from mcf_fpga.spec.nic import ErrorCause
from tests.hdl.nic.vl_nic import IN, OUT, VCFG, vl_configure, vl_counters, vl_model


def build_program(rng, topo, rounds):
    n = topo.n
    rt = RouteTables(topo, VCFG.n_routes)
    a2a = []
    for i in range(n):
        base = rt.add(i, [0])
        for j in range(1, n):
            rt.add(i, [j])
        a2a.append(base)
    allred = [rt.add(i, list(range(n)), fanin=n) for i in range(n)]
    mcast = rt.add(0, [1, 2, 3])
    merge = [rt.add(i, [0], fanin=n) for i in range(n)]
    program = []     # (node, frame) in issue order
    for r in range(rounds):
        for i in range(n):
            chunk = 8 * rng.randrange(1, 4)
            program.append((i, make_frame(MetaFields(op=MetaOp.DATA, src=i, dst=i, route_id=a2a[i],
                                                     collective=Collective.ALL_TO_ALL, kv_id=(r, i),
                                                     length=chunk * n),
                                          rng.randbytes(chunk * n), VCFG)))
        for i in range(n):
            vec = encode_i32([rng.randrange(-2 ** 31, 2 ** 31) for _ in range(6)])
            program.append((i, make_frame(MetaFields(op=MetaOp.REDUCTION, reduce_op=ReduceOp.SUM, src=i,
                                                     dst=100 + r, route_id=allred[i], kv_id=(r, 0),
                                                     collective=Collective.ALL_REDUCE, length=len(vec)),
                                          vec, VCFG)))
        kv = rng.randbytes(64)
        program.append((0, make_frame(MetaFields(op=MetaOp.KV_REPLICA, src=0, dst=200, route_id=mcast,
                                                 collective=Collective.MULTICAST, kv_id=(r, 5),
                                                 length=len(kv)), kv, VCFG)))
        for i in range(n):
            p = encode_partial(rng.randrange(-3000, 3000), rng.randrange(1, 2 ** 28),
                               [rng.randrange(-2 ** 28, 2 ** 28) for _ in range(4)])
            program.append((i, make_frame(MetaFields(op=MetaOp.PARTIAL_STATE, reduce_op=ReduceOp.SOFTMAX_MERGE,
                                                     stage=Stage.DECODE, src=i, dst=0, route_id=merge[i],
                                                     kv_id=(r, 1), length=len(p)), p, VCFG)))
        for i in range(n):      # decode's flat merge: a 64-bit-lane sum of partial words to node 0
            w = encode_i64([rng.randrange(-2 ** 63, 2 ** 63) for _ in range(5)])
            program.append((i, make_frame(MetaFields(op=MetaOp.PARTIAL_STATE, reduce_op=ReduceOp.SUM,
                                                     stage=Stage.DECODE, src=i, dst=0, route_id=merge[i],
                                                     kv_id=(r, 2), length=len(w)), w, VCFG)))
    return rt, program


def test_back_to_back_collectives_on_four_nodes():
    rng = random.Random(4)
    topo = Mesh(2, 2)
    rt, program = build_program(rng, topo, rounds=2)   # <= reduce_contexts groups open per node
    golden = ClusterModel(topo, VCFG, rt.tables)
    for node, f in program:
        golden.send(node, f)
    assert all(sum(e.values()) == 0 for e in (g.errors for g in golden.nodes))

    got, nodes = run_cluster(topo, program, rt.tables, golden, backpressure_seed=10, settle=2000)
    for i, m in enumerate(nodes):
        assert Counter(got[i]) == Counter(golden.delivered[i]), f"node {i}: delivered frames differ"
        c = vl_counters(m)
        assert all(c[e] == 0 for e in ErrorCause), f"node {i}: {c}"
    # every node computed the same all-reduce results
    sums = [sorted(f[16:] for f in got[i] if f[0] & 0xF == MetaOp.REDUCTION) for i in range(topo.n)]
    assert len(sums[0]) == 2 and all(s == sums[0] for s in sums)


def run_cluster(topo, program, tables, golden, backpressure_seed=None, settle=1000):
    """Verilator NICs wired as ``topo``, configured like ``golden``; every frame of ``program``
    issued at once (back to back); returns the frames each node delivered locally."""
    from mcf_fpga.sim.verilator import Cluster
    cluster = Cluster(chunk=16)
    nodes = [cluster.add(vl_model()) for _ in range(topo.n)]
    for i, m in enumerate(nodes):
        vl_configure(m, golden.nodes[i], tables[i])
        if backpressure_seed is not None:
            m.sink_backpressure("m_axis", seed=backpressure_seed + i)
    for i in range(topo.n):
        for p in range(1, topo.n_net + 1):
            nb = topo.neighbor(i, p)
            if nb is not None:
                cluster.link(nodes[i], OUT[p], nodes[nb], IN[topo.in_port(nb, i)])
    for node, f in program:
        nodes[node].push("s_axis", f)
    got = [[] for _ in range(topo.n)]
    for _ in range(400):
        cluster.step(500)
        for i, m in enumerate(nodes):
            got[i] += m.pull_all("m_axis")
        if all(len(got[i]) >= len(golden.delivered[i]) for i in range(topo.n)):
            break
    cluster.step(settle)
    for i, m in enumerate(nodes):
        got[i] += m.pull_all("m_axis")
    return got, nodes



@pytest.mark.parametrize("topo", [Mesh(4, 4), Ring(16)], ids=["mesh4x4", "ring16"])
def test_multicast_and_p2p_on_16_nodes(topo):
    """16 NICs: random multicast trees and unicasts from random sources, all issued at once."""
    rng = random.Random(topo.n_net)
    rt = RouteTables(topo, VCFG.n_routes)
    program = []
    for k in range(12):
        src = rng.randrange(topo.n)
        dsts = rng.sample(range(topo.n), rng.choice([1, 1, 3, 8, 16]))
        rid = rt.add(src, dsts)
        for j in range(3):
            n = rng.randrange(0, 120)
            program.append((src, make_frame(MetaFields(op=MetaOp.KV_REPLICA, src=src, dst=dsts[0], route_id=rid,
                                                       collective=Collective.MULTICAST if len(dsts) > 1
                                                       else Collective.P2P, kv_id=(k, j), length=n),
                                            rng.randbytes(n), VCFG)))
    golden = ClusterModel(topo, VCFG, rt.tables)
    for node, f in program:
        golden.send(node, f)
    got, nodes = run_cluster(topo, program, rt.tables, golden)
    for i, m in enumerate(nodes):
        assert Counter(got[i]) == Counter(golden.delivered[i]), f"node {i}: delivered frames differ"
        assert all(v == 0 for k, v in vl_counters(m).items() if k != "rx_frames")
