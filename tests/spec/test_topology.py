"""mcf_fpga/spec/topology.py: on rings and 2-D meshes of 16+ nodes every route's tree delivers each
destination exactly once, touches no other node's local port and never uses an unconnected
port; the golden cluster executes it with the NIC model."""
from hypothesis import given, strategies as st

from mcf_fpga.golden.nic import ClusterModel, make_frame
from mcf_fpga.spec.topology import LOCAL, Mesh, Ring, RouteTables, make_topology, route_masks
from mcf_fpga.spec.meta import Collective, MetaFields, MetaOp
from mcf_fpga.spec.nic import NicConfig

TOPOS = [Ring(16), Ring(17), Mesh(4, 4), Mesh(3, 6), make_topology("mesh", 16), make_topology("ring", 20)]


@st.composite
def route(draw):
    topo = draw(st.sampled_from(TOPOS))
    src = draw(st.integers(0, topo.n - 1))
    dsts = draw(st.sets(st.integers(0, topo.n - 1), min_size=1, max_size=topo.n))
    return topo, src, dsts


@given(route())
def test_tree_delivers_each_destination_once(r):
    topo, src, dsts = r
    masks = route_masks(topo, src, dsts)
    received, visits = [], {}
    frontier = [src]
    while frontier:
        node = frontier.pop()
        visits[node] = visits.get(node, 0) + 1
        assert visits[node] == 1, f"node {node} entered twice: not a tree"
        m = masks.get(node, 0)
        if m & (1 << LOCAL):
            received.append(node)
        for p in range(1, topo.n_net + 1):
            if (m >> p) & 1:
                nb = topo.neighbor(node, p)
                assert nb is not None, f"node {node} forwards on unconnected port {p}"
                frontier.append(nb)
    assert sorted(received) == sorted(dsts)
    for d in dsts:
        hops = len(topo.path(src, d)) - 1
        if isinstance(topo, Ring):
            assert hops == min((d - src) % topo.n, (src - d) % topo.n)
        else:
            (sy, sx), (dy, dx) = divmod(src, topo.cols), divmod(d, topo.cols)
            assert hops == abs(sy - dy) + abs(sx - dx)


@given(st.sampled_from(TOPOS[:4]), st.data())
def test_golden_cluster_multicast_on_16_nodes(topo, data):
    cfg = NicConfig(n_net=4, n_routes=64, max_nodes=32)
    rt = RouteTables(topo, cfg.n_routes)
    flows = []
    for _ in range(data.draw(st.integers(1, 6))):
        src = data.draw(st.integers(0, topo.n - 1))
        dsts = data.draw(st.sets(st.integers(0, topo.n - 1), min_size=1, max_size=topo.n))
        flows.append((src, dsts, rt.add(src, dsts)))
    cluster = ClusterModel(topo, cfg, rt.tables)
    for i, (src, dsts, rid) in enumerate(flows):
        f = make_frame(MetaFields(op=MetaOp.KV_REPLICA, src=src, dst=0, route_id=rid, kv_id=(0, i),
                                  collective=Collective.MULTICAST, length=8), bytes(8), cfg)
        cluster.send(src, f)
    for node in range(topo.n):
        got = sorted(f[5:9] for f in cluster.delivered[node])
        want = sorted(make_frame(MetaFields(kv_id=(0, i)), b"", cfg)[5:9]
                      for i, (s, d, r) in enumerate(flows) if node in d)
        assert got == want
