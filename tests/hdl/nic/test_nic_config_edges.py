"""A whole NIC at the edges of its configuration: max_nodes = 17 and 32 (a src
index needs one bit more than 16 nodes take: src 16 must check MEMBERS bit 16, not wrap to
bit 0), every src from 0 to max_nodes + 1 with MEMBERS bits alternating, against mcf_fpga/golden/nic.py."""
import pytest

from mcf_fpga.spec.topology import RouteEntry
from mcf_fpga.spec.meta import Collective, MetaFields, MetaOp
from mcf_fpga.spec.nic import ErrorCause, NicConfig
from mcf_fpga.golden.nic import NicModel, make_frame
from tests.hdl.nic.nic_tb import NicBench, check_interleaving, golden_outputs


@pytest.mark.parametrize("max_nodes", [17, 32])
def test_src_check_at_max_nodes(max_nodes):
    cfg = NicConfig(n_net=2, n_routes=8, max_payload=64, max_nodes=max_nodes)
    members = sum(1 << i for i in range(max_nodes) if i % 2 == 0 or i == max_nodes - 1) & ~1   # bit 0 clear
    table = {0: RouteEntry(0b010), 1: RouteEntry(0b001)}
    frames = {0: [], 1: [], 2: []}
    for src in range(max_nodes + 2):
        meta = MetaFields(op=MetaOp.DATA, src=src, dst=1, kv_id=(0, src), route_id=src % 2,
                          collective=Collective.MULTICAST, length=8)
        frames[src % 3].append(make_frame(meta, bytes([src]) * 8, cfg))
    golden = NicModel(cfg, node_id=1, num_nodes=4, members=members)
    golden.load_table(table)
    exp = golden_outputs(golden, frames)
    # independently: members are accepted, every other src (incl. >= max_nodes) is a SRC drop
    accepted = [s for s in range(max_nodes + 2) if s < max_nodes and members >> s & 1]
    assert golden.errors[ErrorCause.SRC] == max_nodes + 2 - len(accepted) and max_nodes - 1 in accepted
    bench = NicBench(cfg, NicModel(cfg, node_id=1, num_nodes=4, members=members), table, frames,
                     seed=max_nodes, ready_prob=0.8).run(exp)
    for p in range(cfg.n_ports):
        check_interleaving(exp.get(p, []), bench.out[p], p)
    assert {c: bench.counters[c] for c in ErrorCause} == golden.errors
