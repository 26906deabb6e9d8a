"""Random NIC traffic: valid frames and frames with one chosen fault (shared by tests, fuzz
and the benchmark). Every valid frame carries a unique tag in kv_id.block so that outputs
can be traced back to their input."""
from __future__ import annotations

import random

from golden.nic import NicModel, make_frame, encode_i32, encode_partial
from golden.topology import RouteEntry
from hdl.meta import Collective, MetaFields, Op, ReduceOp, Stage
from hdl.nic.config import ErrorCause, NicConfig

PLAIN_OPS = [Op.KV_REPLICA, Op.QUERY, Op.PARTIAL_STATE, Op.DATA, Op.REDUCTION]
FAULTS = ["op", "src", "dst", "route", "empty_route", "kv", "len_hdr", "short", "long", "runt"]
FAULT_CAUSE = {"op": ErrorCause.OP, "src": ErrorCause.SRC, "dst": ErrorCause.DST,
               "route": ErrorCause.ROUTE, "empty_route": ErrorCause.ROUTE, "kv": ErrorCause.KV,
               "len_hdr": ErrorCause.LENGTH, "short": ErrorCause.LENGTH, "long": ErrorCause.LENGTH,
               "runt": ErrorCause.LENGTH}


def random_table(rng: random.Random, cfg: NicConfig, n_used: int, local_ok=True) -> dict:
    """route_id 0..n_used-1 -> random non-empty masks (no reduction roots)."""
    full = (1 << cfg.n_ports) - 1
    t = {}
    for rid in range(n_used):
        mask = rng.randrange(1, full + 1)
        if not local_ok:
            mask &= ~1
            mask = mask or 2
        t[rid] = RouteEntry(mask, 0)
    return t


class TrafficGen:
    def __init__(self, cfg: NicConfig, model: NicModel, table: dict, rng: random.Random):
        self.cfg, self.model, self.table, self.rng = cfg, model, table, rng
        self.tag = 0
        self.used_routes = sorted(r for r, e in table.items() if e.mask and not e.fanin)
        self.empty_routes = [r for r in range(cfg.n_routes) if r not in table or table[r].mask == 0]
        self.member_ids = [i for i in range(cfg.max_nodes) if (model.members >> i) & 1]

    def valid(self, max_len=None, **over) -> bytes:
        rng, cfg = self.rng, self.cfg
        self.tag += 1
        n = rng.randrange(0, (max_len or cfg.max_payload) + 1)
        op = rng.choice(PLAIN_OPS)
        meta = MetaFields(op=op, stage=rng.choice(list(Stage)), src=rng.choice(self.member_ids),
                          dst=rng.randrange(self.model.num_nodes),
                          kv_id=(rng.randrange(self.model.num_layers), self.tag % self.model.num_blocks),
                          route_id=rng.choice(self.used_routes),
                          collective=rng.choice([Collective.P2P, Collective.MULTICAST, Collective.ALL_REDUCE]),
                          reduce_op=ReduceOp.NONE, length=n)
        meta = meta.replace(**over)
        return make_frame(meta, bytes(rng.randrange(256) for _ in range(meta.length)), cfg)

    def faulty(self, fault: str) -> bytes:
        rng, cfg, model = self.rng, self.cfg, self.model
        good = self.valid(max_len=min(cfg.max_payload, 40))
        from hdl.meta import unpack_header
        hb = cfg.meta.header_bytes
        meta = unpack_header(good[:hb], cfg.meta)
        payload = good[hb:]
        if fault == "op":
            choice = rng.randrange(3)
            if choice == 0:
                meta = meta.replace(op=rng.randrange(8, 16))
            elif choice == 1:
                meta = meta.replace(op=rng.choice([Op.ACK, Op.NAK]))
            elif rng.random() < 0.5:
                meta = meta.replace(op=Op.DATA, reduce_op=rng.choice([ReduceOp.SUM, ReduceOp.SOFTMAX_MERGE]))
            else:       # softmax merge of int32 vectors: the one bad pair of the reduction ops
                meta = meta.replace(op=Op.REDUCTION, reduce_op=ReduceOp.SOFTMAX_MERGE)
        elif fault == "src":
            bad = [i for i in range(1 << cfg.meta.node_bits) if i >= cfg.max_nodes or not (model.members >> i) & 1]
            meta = meta.replace(src=rng.choice(bad))
        elif fault == "dst":
            meta = meta.replace(collective=Collective.P2P,
                                dst=rng.randrange(model.num_nodes, 1 << cfg.meta.node_bits))
        elif fault == "route":
            meta = meta.replace(route_id=rng.randrange(cfg.n_routes, 1 << cfg.meta.route_bits))
        elif fault == "empty_route":
            if not self.empty_routes:
                return self.faulty("route")
            meta = meta.replace(route_id=rng.choice(self.empty_routes))
        elif fault == "kv":
            meta = meta.replace(op=rng.choice([Op.KV_REPLICA, Op.REPLICA_INVALIDATE]),
                                kv_id=(rng.randrange(model.num_layers, 1 << cfg.meta.layer_bits),
                                       rng.randrange(1 << cfg.meta.block_bits))
                                if rng.random() < 0.5 else
                                (0, rng.randrange(model.num_blocks, 1 << cfg.meta.block_bits)))
        elif fault == "len_hdr":
            meta = meta.replace(length=rng.randrange(cfg.max_payload + 1, cfg.meta.max_length + 1))
            payload = payload[:8]
        elif fault == "short":
            if not payload:
                payload = b""
                meta = meta.replace(length=rng.randrange(1, 9))
            else:
                payload = payload[:rng.randrange(len(payload))]
        elif fault == "long":
            payload = payload + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 17)))
        elif fault == "runt":
            return good[:rng.randrange(1, hb)]
        else:
            raise ValueError(fault)
        from golden.nic import make_frame as mk
        from hdl.meta import pack_int
        header = pack_int(meta, cfg.meta).to_bytes(hb, "little")
        return header + payload
