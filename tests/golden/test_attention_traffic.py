"""golden.attention's Traffic accounting, counted independently from the layouts' definitions
(mutants of the zigzag and integer-payload byte counts survived, because only the
float ring and an all-replicated layout were counted).

Bytes are the KV payload a node receives: float tensors at 4 bytes per element; integer pairs
(values, exponents) at one byte per value and one per exponent (docs/numerics.md). Shapes mix
the boundary values (1 node, 1 head) with larger ones.
"""
import torch
from hypothesis import given, strategies as st

from mcf_fpga.golden import attention as A
from mcf_fpga.golden import numerics as nx


def qkv(hq, hkv, L, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(hq, L, d, generator=g), torch.randn(hkv, L, d, generator=g),
            torch.randn(hkv, L, d, generator=g))


def quant(x):
    return nx.quantize_pow2(nx.to_fixed(x), nx.FA, 8)


def kv_bytes(hq, tokens, d, integer):
    """K and V of ``tokens`` tokens as sent (after the GQA expansion to hq heads)."""
    per = hq * tokens * d + hq * tokens if integer else 4 * hq * tokens * d
    return 2 * per


shape = st.tuples(st.sampled_from([1, 2, 3, 4]),          # nodes
                  st.sampled_from([1, 2]),                # hkv
                  st.sampled_from([1, 2]),                # rep
                  st.sampled_from([4, 8]),                # block
                  st.sampled_from([1, 2]),                # units per chunk
                  st.booleans())                          # integer backend


@given(shape)
def test_ring_and_zigzag_traffic(s):
    nodes, hkv, rep, block, units, integer = s
    d, hq = 8, hkv * rep
    L = 2 * nodes * block * units
    q, k, v = qkv(hq, hkv, L, d)
    be = A.IntBackend() if integer else A.FloatBackend()
    if integer:
        q, k, v = quant(q), quant(k), quant(v)
    t = A.Traffic()
    A.ring(be, q, k, v, block, nodes, traffic=t)
    shard = kv_bytes(hq, L // nodes, d, integer)
    assert t.messages == nodes * (nodes - 1)
    assert t.bytes == nodes * (nodes - 1) * shard
    assert t.per_node_recv == ({i: (nodes - 1) * shard for i in range(nodes)} if nodes > 1 else {})
    z = A.Traffic()
    A.zigzag_ring(be, q, k, v, block, nodes, traffic=z)
    chunk = kv_bytes(hq, L // (2 * nodes), d, integer)        # a node holds two chunks
    assert z.messages == 2 * nodes * (nodes - 1)
    assert z.bytes == 2 * nodes * (nodes - 1) * chunk
    assert z.per_node_recv == ({i: 2 * (nodes - 1) * chunk for i in range(nodes)} if nodes > 1 else {})


@given(shape, st.integers(0, 2 ** 16))
def test_replicated_traffic_counts_every_block_read_remotely(s, seed):
    """Every block a chunk reads that its node does not hold is one message of that block's K
    and V (a partial last block counts its real tokens)."""
    nodes, hkv, rep, block, units, integer = s
    d, hq = 8, hkv * rep
    chunk = block * units
    L = 2 * nodes * block * units - (block // 2 if seed % 2 else 0)     # sometimes a partial last block
    L -= L % block
    q, k, v = qkv(hq, hkv, L, d, seed)
    be = A.IntBackend() if integer else A.FloatBackend()
    if integer:
        q, k, v = quant(q), quant(k), quant(v)
    g = torch.Generator().manual_seed(seed)
    nchunks = -(-L // chunk)
    compute = [int(torch.randint(0, nodes, (1,), generator=g)) for _ in range(nchunks)]
    holders = {b: {int(torch.randint(0, nodes, (1,), generator=g))} for b in range(L // block)}
    t = A.Traffic()
    A.replicated(be, q, k, v, block, chunk, compute, holders, traffic=t)
    want_msgs = want_bytes = 0
    recv = {}
    for c in range(nchunks):
        end = min((c + 1) * chunk, L)
        for b in range(-(-end // block)):
            if compute[c] not in holders[b]:
                n = kv_bytes(hq, min(block, end - b * block), d, integer)
                want_msgs += 1
                want_bytes += n
                recv[compute[c]] = recv.get(compute[c], 0) + n
    assert (t.messages, t.bytes, t.per_node_recv) == (want_msgs, want_bytes, recv)


def test_decode_traffic_is_the_query_row_to_every_shard():
    q, k, v = qkv(2, 1, 16, 8)
    t = A.Traffic()
    A.kv_stationary_decode(A.FloatBackend(), q[:, -1:], k, v, 4, [[0, 2], [1], [3]], traffic=t)
    assert t.messages == 3 and t.bytes == 3 * 2 * 8 * 4
    assert t.per_node_recv == {0: 64, 1: 64, 2: 64}
