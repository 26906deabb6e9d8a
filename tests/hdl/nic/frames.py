"""Random NIC traffic: valid frames and frames with one chosen fault (shared by tests, fuzz
and the benchmark). Every valid frame carries a unique tag in kv_id.block so that outputs
can be traced back to their input. Given the input ``port``, a valid frame's src is one the
model allows there (``NicModel.src_allow``) and a ``spoof`` frame's src a member it does not."""
from __future__ import annotations

import random

from mcf_fpga.golden.nic import NicModel, make_frame, encode_i32, encode_partial
from mcf_fpga.spec.topology import RouteEntry
from mcf_fpga.spec.meta import Collective, MetaFields, MetaOp, ReduceOp, Stage
from mcf_fpga.spec.nic import ErrorCause, NicConfig

PLAIN_OPS = [MetaOp.KV_REPLICA, MetaOp.QUERY, MetaOp.PARTIAL_STATE, MetaOp.DATA, MetaOp.REDUCTION]
FAULTS = ["op", "src", "spoof", "dst", "route", "empty_route", "kv", "len_hdr", "short", "long", "runt"]
FAULT_CAUSE = {"op": ErrorCause.OP, "src": ErrorCause.SRC, "spoof": ErrorCause.SPOOF, "dst": ErrorCause.DST,
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


def allowed_on(model: NicModel, port: int, src: int) -> bool:
    """The source check of ``golden.nic.NicModel.classify`` (src a member assumed)."""
    return bool((model.src_allow[port] >> src) & 1 or (port == 0 and src == model.node_id))


def random_src_allow(rng: random.Random, cfg: NicConfig, model: NicModel) -> list:
    """SRC_ALLOW values like a topology's: every member but this node enters on one network
    port (a few on a second one too); port 0 allows one more src besides NODE_ID."""
    allow = [0] * cfg.n_ports
    for s in range(cfg.max_nodes):
        if s == model.node_id:
            continue
        ports = rng.sample(range(1, cfg.n_ports), min(cfg.n_net, 2 if rng.random() < 0.2 else 1))
        for p in ports:
            allow[p] |= 1 << s
    allow[0] = 1 << rng.randrange(cfg.max_nodes)
    return allow


class TrafficGen:
    def __init__(self, cfg: NicConfig, model: NicModel, table: dict, rng: random.Random):
        self.cfg, self.model, self.table, self.rng = cfg, model, table, rng
        self.tag = 0
        self.used_routes = sorted(r for r, e in table.items() if e.mask and not e.fanin)
        self.empty_routes = [r for r in range(cfg.n_routes) if r not in table or table[r].mask == 0]
        self.member_ids = [i for i in range(cfg.max_nodes) if (model.members >> i) & 1]
        self.allowed = [[s for s in self.member_ids if allowed_on(model, p, s)] for p in range(cfg.n_ports)]
        self.spoofs = [[s for s in self.member_ids if not allowed_on(model, p, s)] for p in range(cfg.n_ports)]

    def valid(self, max_len=None, port=None, **over) -> bytes:
        """A valid frame; ``port`` = where it will enter (None: any member as src, valid only
        where the model allows every member)."""
        rng, cfg = self.rng, self.cfg
        self.tag += 1
        n = rng.randrange(0, (max_len or cfg.max_payload) + 1)
        op = rng.choice(PLAIN_OPS)
        srcs = self.member_ids if port is None else self.allowed[port]
        if not srcs:
            raise ValueError(f"no member src is allowed on port {port}")
        meta = MetaFields(op=op, stage=rng.choice(list(Stage)), src=rng.choice(srcs),
                          dst=rng.randrange(self.model.num_nodes),
                          kv_id=(rng.randrange(self.model.num_layers), self.tag % self.model.num_blocks),
                          route_id=rng.choice(self.used_routes),
                          collective=rng.choice([Collective.P2P, Collective.MULTICAST, Collective.ALL_REDUCE]),
                          reduce_op=ReduceOp.NONE, length=n)
        meta = meta.replace(**over)
        return make_frame(meta, bytes(rng.randrange(256) for _ in range(meta.length)), cfg)

    def faulty(self, fault: str, port=None) -> bytes:
        """A frame with ``fault`` (one of ``FAULTS``) entering on ``port`` (see ``valid``)."""
        rng, cfg, model = self.rng, self.cfg, self.model
        if fault == "spoof" and (port is None or not self.spoofs[port]):
            fault = "src"           # every member is allowed there: the nearest fault is SRC
        good = self.valid(max_len=min(cfg.max_payload, 40), port=port)
        from mcf_fpga.golden.header import unpack_header
        hb = cfg.meta.header_bytes
        meta = unpack_header(good[:hb], cfg.meta)
        payload = good[hb:]
        if fault == "op":
            choice = rng.randrange(3)
            if choice == 0:
                meta = meta.replace(op=rng.randrange(8, 16))
            elif choice == 1:
                meta = meta.replace(op=rng.choice([MetaOp.ACK, MetaOp.NAK]))
            elif rng.random() < 0.5:
                meta = meta.replace(op=MetaOp.DATA, reduce_op=rng.choice([ReduceOp.SUM, ReduceOp.SOFTMAX_MERGE]))
            else:       # softmax merge of int32 vectors: the one bad pair of the reduction ops
                meta = meta.replace(op=MetaOp.REDUCTION, reduce_op=ReduceOp.SOFTMAX_MERGE)
        elif fault == "src":
            bad = [i for i in range(1 << cfg.meta.node_bits) if i >= cfg.max_nodes or not (model.members >> i) & 1]
            meta = meta.replace(src=rng.choice(bad))
        elif fault == "spoof":
            meta = meta.replace(src=rng.choice(self.spoofs[port]))
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
            meta = meta.replace(op=rng.choice([MetaOp.KV_REPLICA, MetaOp.REPLICA_INVALIDATE]),
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
        from mcf_fpga.golden.nic import make_frame as mk
        from mcf_fpga.golden.header import pack_int
        header = pack_int(meta, cfg.meta).to_bytes(hb, "little")
        return header + payload
