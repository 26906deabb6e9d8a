"""The coarse link model of ``perfmodel.predict(..., coarse=True)``: a KV unit's install packets
as ONE train per link instead of one event per packet and link (a screening model for the MARS
search, ``host.mars_search``; everything else is the exact model's).

A unit's send (``_drive``'s KVS of a ``KvsRun`` to a route where each node gets one copy over one
link, with NIC installs) is timed as:

* **engine**: the first KVS as the exact model runs it (it may wait for the write fence or the
  streamer's reads); the others follow back to back (after the first nothing makes a KVS wait:
  the exact model adds the same costs one by one), summed per record count;
* **links**: on each link of the route tree the train starts when its first packet reaches the
  link and the link has served the work reserved before it (``wire_free``), and occupies it for its
  whole wire bytes (payload + framing + ACK of every packet) / rate; its last packet leaves at the
  later of that end and its own arrival at the link + its wire time (a train emitted slower than
  the link drains it); the link is then reserved up to start + the train's wire time only (the
  work it served, not the gaps: a later train's packets would have filled them). Per-hop latency,
  ``fwd(P)`` at each inner node and the host step quantization are the exact model's, applied to
  the first and the last packet;
* **arrival**: the receiver's install wait sees every packet when the last one is in (``rx(P)``
  after it leaves the last link), as the exact model's ``_Train``.

What it leaves out: packets of different trains interleaving on a link in arrival order (the
exact model serves frames FIFO; here a train takes the link as a block of work in the order
trains reach it). The error this makes is measured in docs/perfmodel.md and
tests/host/test_perfmodel_coarse.py.

At paper scale the compiler and the engine's instructions, not the links, then take most of a
prediction's time, and both grow with the layers: :func:`screen` times the program's first few
layers coarsely (every op of a later layer dropped, on every node alike) and extrapolates the
TTFT linearly in the layers (the last two layers' increment: every layer of a prefill schedule is
the same plan). Measured error in docs/perfmodel.md.
"""
from __future__ import annotations

import collections
import dataclasses
import heapq
import math

__all__ = ["screen", "send_unit", "truncate"]


def _qz(t, C):
    return math.ceil(t / C) * C if C > 1 else t


def send_unit(net, nd, ntoks, h, route, key) -> float:
    """The KVS of every install packet of a unit (``ntoks`` records each) queued at host time ``h``
    on node ``nd`` (``perfmodel._Node``), its packets sent along ``route`` (``_Net.route``) as one
    train; ``key`` the message (``_drive``'s). Returns the last KVS's retire time."""
    rb = nd.row_bytes
    t = nd.kvs(ntoks[0], h)
    t_first = t
    if len(ntoks) > 1:
        t = _kvs_rest(nd, ntoks[1:])
    tx = net.tx
    P1, Pn = 8 + ntoks[0] * rb, 8 + ntoks[-1] * rb
    payload = 8 * len(ntoks) + rb * sum(ntoks)
    train = (len(ntoks), payload, P1, Pn, key)
    net.seq += 1
    heapq.heappush(net.events, (t_first + tx["a"] + tx["b"] * P1, net.seq, _hop,
                                (net, nd.node, route[2], t + tx["a"] + tx["b"] * Pn, train)))
    return t


def _kvs_rest(nd, ntoks) -> float:
    """The KVS after a unit's first, back to back on the engine (after the first nothing makes
    a KVS wait), accounted per record count (``_Node._account``'s ``times``). Returns the last
    one's retire time."""
    for n, m in collections.Counter(ntoks).items():
        cost, skey = nd.kvs_costs.get(n) or nd.kvs_cost(n)
        nd._account("kvs", cost, skey, True, nd.eng, None, times=m)
    if nd.eng > nd.rd_free:
        nd.rd_free = nd.eng
    return nd.eng


def _hop(t, net, a, plan, t_last, train):
    """The train's first packet is at node ``a`` at ``t``, its last at ``t_last``: it crosses
    ``a``'s links of the route tree (``plan``)."""
    count, payload, P1, Pn, key = train
    wb = payload + count * (net.over + net.ack)        # every frame and its ACK on the wire
    C_ = net.chunk
    for b, ab, to_dst, inner in plan.get(a, ()):
        if net.rate:
            W = wb / net.rate
            start = max(net.wire_free.get(ab, 0.0), t)
            net.wire_free[ab] = start + W
            wn = (Pn + net.over + net.ack) / net.rate
            first = start + (P1 + net.over) / net.rate + net.lat
            last = max(start + W - wn, t_last) + (Pn + net.over) / net.rate + net.lat
        else:
            first, last = t, t_last
        if C_ > 1:
            first, last = _qz(first, C_), _qz(last, C_)
        net.wire_bytes += wb
        if to_dst:
            net.seq += 1
            heapq.heappush(net.events, (last + net.f(net.rx, Pn), net.seq, _land, (net, b, key, count)))
        if inner:
            net.seq += 1
            heapq.heappush(net.events, (first + net.f(net.fwd, P1), net.seq, _hop,
                                        (net, b, plan, last + net.f(net.fwd, Pn), train)))


def _land(t, net, d, key, count):
    """Every packet of the train is in node ``d``'s NIC."""
    net.inbox.setdefault((d,) + key, []).extend([t] * count)
    net.check(d, t)


def truncate(program, layers: int):
    """``program`` with its first ``layers`` layers only: every op of a later layer dropped on
    every node (their sends and receives alike), the model's ``num_layers`` set to ``layers``."""
    return dataclasses.replace(program, model=program.model.replace(num_layers=layers),
                               ops=[[op for op in ops if getattr(op, "layer", 0) < layers] for ops in program.ops])


def screen(program, params: dict, *, chunk: int = 1, layers: tuple = (2, 3)) -> tuple:
    """(TTFT cycles, wire bytes) of ``program`` by the coarse model (``predict(coarse=True)``):
    of the whole program when it has at most ``max(layers)`` layers, else of its first ``a`` and
    ``b`` layers (``layers``; :func:`truncate`) extrapolated linearly to all of them."""
    from mcf_fpga.host.perfmodel import predict
    L = program.model.num_layers
    a, b = layers
    if L <= b:
        pr = predict(program, params, chunk=chunk, coarse=True)
        return pr.ttft_cycles, pr.wire_bytes
    pa, pb = (predict(truncate(program, n), params, chunk=chunk, coarse=True) for n in (a, b))
    k = (L - b) / (b - a)
    return (pb.ttft_cycles + k * (pb.ttft_cycles - pa.ttft_cycles),
            pb.wire_bytes + k * (pb.wire_bytes - pa.wire_bytes))
