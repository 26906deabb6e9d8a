"""Routing table: one snapshot per step under random publish timing, range invariants,
new KV only to the tail, NIC route encoding delivers to exactly the holders."""
import pytest
from hypothesis import given, settings, strategies as st

from mcf_fpga.spec.topology import LOCAL, Mesh, Ring
from mcf_fpga.host.elastic.golden_run import ANode
from mcf_fpga.host.elastic.routing import Range, RoutingError, RoutingTable, nic_tables
from mcf_fpga.host.elastic.scaling import balanced_layout

ALIGN = 4


class RefTable:
    """Independent reference: per request a list of (start, node); owner = last start <= pos."""

    def __init__(self):
        self.shadow = {}
        self.published = {}
        self.pending = None

    @staticmethod
    def owner(tbl, req, pos):
        return [n for s, n in tbl[req] if s <= pos][-1]

    def extend(self, req, node, at):
        cut = -(-at // ALIGN) * ALIGN
        rs = self.shadow[req]
        if rs[-1][1] == node:
            return
        if rs[-1][0] == cut:
            rs[-1] = (cut, node)
        else:
            rs.append((cut, node))


ops = st.lists(st.tuples(st.sampled_from(["new", "extend", "remove", "publish", "begin", "lookup",
                                          "end"]),
                         st.integers(0, 5), st.integers(0, 5), st.integers(0, 200)),
               min_size=1, max_size=60)


@settings(max_examples=60)
@given(ops)
def test_no_step_sees_a_half_updated_route(seq):
    """Random interleavings of shadow edits, publishes and (overlapping) steps: every lookup of
    a step answers from the snapshot installed when the step began; staged edits are never
    visible before publish; a publish during a step lands at the token boundary."""
    tbl, ref = RoutingTable(ALIGN), RefTable()
    for n in range(6):
        tbl.stage_activate(n)
    tbl.publish()
    steps = []                     # (view, expected published copy)
    next_req = 0
    for op, a, b, c in seq:
        if op == "new":
            tbl.stage_request(next_req, [Range(0, None, a)])
            ref.shadow[next_req] = [(0, a)]
            next_req += 1
        elif op == "extend" and ref.shadow:
            req = sorted(ref.shadow)[a % len(ref.shadow)]
            at = max(c, ref.shadow[req][-1][0])
            tbl.stage_extend(req, b, at)
            ref.extend(req, b, at)
        elif op == "remove" and ref.shadow:
            req = sorted(ref.shadow)[a % len(ref.shadow)]
            tbl.stage_remove_request(req)
            del ref.shadow[req]
        elif op == "publish":
            copy = {r: list(v) for r, v in ref.shadow.items()}
            tbl.publish()
            if any(v.open for v, _ in steps):
                ref.pending = copy
            else:
                ref.published = copy
        elif op == "begin":
            steps.append((tbl.begin_step(), {r: list(v) for r, v in ref.published.items()}))
        elif op == "lookup" and steps:
            open_steps = [s for s in steps if s[0].open]
            if open_steps:
                view, exp = open_steps[a % len(open_steps)]
                v0 = view.version
                for req in exp:
                    assert view.owner(req, c) == ref.owner(exp, req, c)
                    assert view.holders(req) == sorted({n for _, n in exp[req]})
                assert set(view.snapshot.ranges) == set(exp)
                assert view.version == v0
        elif op == "end":
            open_steps = [s for s in steps if s[0].open]
            if open_steps:
                tbl.end_step(open_steps[a % len(open_steps)][0])
                if not any(s[0].open for s in steps) and ref.pending is not None:
                    ref.published, ref.pending = ref.pending, None
        # the installed snapshot always equals the reference and is internally consistent
        snap = tbl.published
        snap.check()
        assert {r: [(x.start, x.node) for x in v] for r, v in snap.ranges.items()} == ref.published
        assert all(snap.version >= old.version for old in tbl.history)


@settings(max_examples=40)
@given(st.dictionaries(st.integers(0, 9), st.integers(1, 90), min_size=1, max_size=5),
       st.integers(1, 4), st.lists(st.tuples(st.integers(0, 9), st.integers(0, 5), st.integers(0, 60)),
                                   max_size=8))
def test_every_token_maps_to_exactly_one_node(lengths, n_nodes, extends):
    tbl = RoutingTable(ALIGN)
    for n in range(6):
        tbl.stage_activate(n)
    for req, rs in balanced_layout(lengths, list(range(n_nodes)), ALIGN).items():
        tbl.stage_request(req, rs)
    lens = dict(lengths)
    for req, node, grow in extends:
        if req in lens:
            tbl.stage_extend(req, node, lens[req])
            lens[req] += grow
    snap = tbl.publish()
    for req, L in lens.items():
        for pos in range(L + ALIGN):
            covering = [r for r in snap.ranges[req] if r.start <= pos and (r.end is None or pos < r.end)]
            assert len(covering) == 1
            assert snap.owner(req, pos) == covering[0].node
    # each node's token count sums to the total
    assert sum(snap.tokens_on(n, lens) for n in range(6)) == sum(lens.values())


def test_balanced_layout_hand_derived():
    """96 tokens in 16-token blocks over 3 nodes: 32 tokens each; b's range is its own."""
    lay = balanced_layout({"a": 64, "b": 32}, [7, 8, 9], 16)
    assert lay["a"] == [Range(0, 32, 7), Range(32, None, 8)]
    assert lay["b"] == [Range(0, None, 9)]


def test_staged_edits_invisible_until_publish_and_deferred_during_a_step():
    tbl = RoutingTable(ALIGN)
    tbl.stage_activate(1)
    tbl.stage_activate(2)
    tbl.stage_request("r", [(0, None, 1)])
    v1 = tbl.publish()
    tbl.stage_extend("r", 2, 9)                     # cut at 12
    assert tbl.published.owner("r", 20) == 1        # staged, not published
    view = tbl.begin_step()
    v2 = tbl.publish()
    assert v2.version == v1.version + 1 and tbl.pending is v2
    assert tbl.published is v1 and view.owner("r", 20) == 1
    tbl.end_step(view)                              # token boundary: the flip
    assert tbl.published is v2 and tbl.published.owner("r", 12) == 2 and tbl.published.owner("r", 11) == 1
    with pytest.raises(RoutingError, match="already ended"):
        view.owner("r", 0)


def test_refused_edits_leave_state_unchanged():
    tbl = RoutingTable(ALIGN)
    tbl.stage_activate(1)
    tbl.stage_request("r", [(0, None, 1)])
    tbl.publish()
    before = tbl.shadow_ranges("r")
    with pytest.raises(RoutingError, match="still holds a range"):
        tbl.stage_retire(1)
    with pytest.raises(RoutingError, match="not active"):
        tbl.stage_extend("r", 5, 3)
    with pytest.raises(RoutingError, match="multiple of align"):
        tbl.stage_request("q", [(0, 6, 1), (6, None, 1)])
    assert tbl.shadow_ranges("r") == before and tbl.shadow_requests() == ["r"]
    assert 1 in tbl.shadow_active()


def test_new_kv_only_to_the_tail():
    tbl = RoutingTable(ALIGN)
    for n in (1, 2):
        tbl.stage_activate(n)
    tbl.stage_request("r", [(0, 8, 1), (8, None, 2)])
    tbl.publish()
    view = tbl.begin_step()
    a1, a2 = ANode(1), ANode(2)
    import torch
    k = (torch.zeros(2, 1, 4, dtype=torch.long), torch.zeros(2, 1, dtype=torch.long))
    a2.append(view, "r", 0, 8, k, k)
    with pytest.raises(RoutingError, match="wrong node"):
        a1.append(view, "r", 0, 8, k, k)
    assert ("r", 0) not in a1.kv and list(a2.kv[("r", 0)]) == [8]


def _walk(topo, tables, rid, start):
    """Follow the port masks of route ``rid`` from ``start``; return the set of local deliveries."""
    got, frontier, seen = set(), [start], set()
    while frontier:
        node = frontier.pop()
        assert node not in seen, "a multicast tree visits each node once"
        seen.add(node)
        e = tables[node].get(rid)
        assert e is not None and e.mask, f"node {node} has no entry for route {rid}"
        for p in range(8):
            if e.mask >> p & 1:
                if p == LOCAL:
                    got.add(node)
                else:
                    frontier.append(topo.neighbor(node, p))
    return got


@settings(max_examples=25)
@given(st.sampled_from(["ring", "mesh"]),
       st.dictionaries(st.integers(0, 5), st.integers(1, 60), min_size=1, max_size=6),
       st.integers(1, 5))
def test_nic_tables_deliver_q_to_holders_kv_to_tail_partials_to_w(kind, lengths, n_a):
    topo = Ring(6) if kind == "ring" else Mesh(2, 3)
    w = 0
    a_nodes = list(range(1, 1 + n_a))
    tbl = RoutingTable(ALIGN)
    for n in a_nodes:
        tbl.stage_activate(n)
    for req, rs in balanced_layout(lengths, a_nodes, ALIGN).items():
        tbl.stage_request(req, rs)
    snap = tbl.publish()
    tables = nic_tables(snap, topo, w, lengths)
    for req, slot in snap.slots.items():
        holders = set(snap.holders(req))
        assert _walk(topo, tables, 3 * slot, w) == holders
        assert _walk(topo, tables, 3 * slot + 1, w) == {snap.owner(req, lengths[req])}
        for h in holders:
            assert _walk(topo, tables, 3 * slot + 2, h) == {w}
        assert tables[w][3 * slot + 2].fanin == len(holders)
        for node in range(topo.n):
            if node != w and 3 * slot + 2 in tables[node]:
                assert tables[node][3 * slot + 2].fanin == 0
        for t in tables:
            for e in t.values():
                assert 0 <= e.encode() < 1 << 16


def test_nic_tables_refuse_too_many_requests_and_w_as_holder():
    tbl = RoutingTable(ALIGN)
    tbl.stage_activate(1)
    for r in range(3):
        tbl.stage_request(r, [(0, None, 1)])
    snap = tbl.publish()
    with pytest.raises(RoutingError, match="n_routes=6"):
        nic_tables(snap, Ring(4), 0, n_routes=6)
    with pytest.raises(RoutingError, match="W node 1 cannot hold"):
        nic_tables(snap, Ring(4), 1)


def test_route_update_through_the_golden_nic_banks():
    """Encoded snapshots loaded into golden NIC models (mcf_fpga/hdl/nic's twin): Q reaches exactly the
    holders and K/V exactly the tail; a new version written to the shadow bank changes nothing
    until the flip (the token boundary), then the new A node receives them."""
    from mcf_fpga.golden.nic import NicModel, make_frame
    from mcf_fpga.spec.topology import RouteEntry
    from mcf_fpga.spec.meta import Collective, MetaFields, MetaOp, Stage
    from mcf_fpga.spec.nic import NicConfig

    topo, w = Ring(6), 0
    cfg = NicConfig(n_net=2)
    nics = [NicModel(cfg, node_id=n, num_nodes=6) for n in range(6)]
    tbl = RoutingTable(ALIGN)
    for n in (1, 2, 3):
        tbl.stage_activate(n)
    tbl.stage_request("r", [(0, 8, 1), (8, None, 2)])
    v1 = tbl.publish()
    for nic, t in zip(nics, nic_tables(v1, topo, w, {"r": 10})):
        nic.load_table(t)                      # shadow bank, then flip

    def send(route_id, coll, dst):
        meta = MetaFields(op=MetaOp.QUERY if coll == Collective.MULTICAST else MetaOp.DATA,
                          stage=Stage.DECODE, src=w, dst=dst, route_id=route_id,
                          collective=coll, length=8)
        got, todo = set(), [(w, 0, make_frame(meta, bytes(8), cfg))]
        while todo:
            node, port, f = todo.pop()
            for out, g in nics[node].receive(port, f):
                if out == 0:
                    got.add(node)
                else:
                    nb = topo.neighbor(node, out)
                    todo.append((nb, topo.in_port(nb, node), g))
        return got

    slot = v1.slots["r"]
    assert send(3 * slot, Collective.MULTICAST, 0) == {1, 2}
    assert send(3 * slot + 1, Collective.P2P, 2) == {2}
    tbl.stage_extend("r", 3, 10)               # cut at 12
    v2 = tbl.publish()
    new = nic_tables(v2, topo, w, {"r": 12})
    for nic, t in zip(nics, new):              # host writes the shadow bank only
        for rid in range(cfg.n_routes):
            nic.write_route(rid, t.get(rid, RouteEntry()))
    assert send(3 * slot, Collective.MULTICAST, 0) == {1, 2}        # still v1
    for nic in nics:
        nic.flip()
    assert send(3 * slot, Collective.MULTICAST, 0) == {1, 2, 3}
    assert send(3 * slot + 1, Collective.P2P, 3) == {3}
    assert all(not any(nic.errors.values()) for nic in nics)
