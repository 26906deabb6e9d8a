"""One node executing its op list (host.program) with golden integer arithmetic.

``NodeRuntime.run()`` is a generator: it yields whenever it waits for a message or a
collective, so the golden executor can interleave N nodes cooperatively in one process,
while the torch.distributed executor (blocking transport) simply drains it. The arithmetic
is ``golden.int_model.IntModel``'s, split per row range and layer (every step but attention
is row-independent); attention uses ``golden.attention.tile_partials`` and the canonical
orders of docs/numerics.md, so outputs equal IntModel bit for bit.

The KV pool is ``golden.kvpool.KVPool`` (the memory engineer's golden model): its budget is
``program.n_slots`` (S_node // slot_bytes), so any over-allocation (MCF eq. 10) raises here.
A replica is read only while this node holds a reader reference on it, and its data is dropped
exactly when the pool frees the slot.
"""
from __future__ import annotations

import torch

from mcf_fpga.golden import numerics as nx
from mcf_fpga.golden.attention import IntBackend, tile_partials, expand_kv
from mcf_fpga.golden.int_model import IntModel
from mcf_fpga.golden.kvpool import KVPool
from mcf_fpga.spec.kvpool import State, Status, kv_id_from

from mcf_fpga.host.program_ops import (Acquire, AllReduce, Append, Attend, DecodeAttend, DecodeEmbed, DecodeFinish,
                                      DecodeFree, DecodeLogits, DecodePick, DecodeProject, Drain, Embed, Finish, Free,
                                      Logits, Mark, Project, Publish, Recv, Release, Send, Unstage)

from . import tp_stages as tps

__all__ = ["NodeRuntime", "ExecError", "pool_layout", "qkv_rows", "post_attention", "kv_numel", "pack_pairs", "unpack_pairs"]

I64 = torch.int64


class ExecError(RuntimeError):
    """A program violated an execution rule (missing block, pool refusal, bad message)."""


def qkv_rows(im: IntModel, layer: int, h: torch.Tensor, t0: int):
    """IntModel's per-layer projection for rows at positions t0.. (row-independent)."""
    return im.project_qkv(layer, h, t0)


def post_attention(im: IntModel, layer: int, h: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """IntModel after attention: o-projection, residual, FFN, residual."""
    return im.post_attention(layer, h, a)


def head_logits(im: IntModel, h: torch.Tensor) -> torch.Tensor:
    return im.logits(h)


def kv_numel(hk: int, d: int, tokens: int) -> int:
    """int64 words of one (K, V) pair set for ``tokens`` tokens: values and exponents."""
    return hk * tokens * (2 * d + 2)


def pack_pairs(pairs) -> torch.Tensor:
    """[(values, exps), ...] -> one flat int64 tensor (shapes known to the receiver)."""
    return torch.cat([t.reshape(-1).to(I64) for p in pairs for t in p])


def unpack_pairs(flat: torch.Tensor, shapes) -> list:
    out, i = [], 0
    for vs, es in shapes:
        nv, ne = int(torch.Size(vs).numel()), int(torch.Size(es).numel())
        out.append((flat[i:i + nv].view(vs), flat[i + nv:i + nv + ne].view(es)))
        i += nv + ne
    if i != flat.numel():
        raise ExecError(f"payload has {flat.numel()} words, expected {i}")
    return out


def pool_layout(pool: KVPool) -> dict:
    """{(layer, unit): state name} of a KV pool's entries (kv_id = layer | unit << 8)."""
    return {(kid & 0xFF, kid >> 8): state.name for kid, (_slot, state, _r) in pool.entries().items()}


class NodeRuntime:
    """State of one node: KV pool + block data, staged blocks, hidden states, partials."""

    def __init__(self, node: int, program, im: IntModel | None, prompt, transport, dry: bool = False):
        self.node, self.p, self.im, self.tr, self.dry = node, program, im, transport, dry
        self.prompts = [torch.as_tensor(p, dtype=torch.long) for p in program.prompts(prompt)]
        self.pool = KVPool(program.n_slots, program.slot_bytes, kv_id_width=32, max_readers=15)
        self.kv = {}          # (req, layer, golden block) -> (k_pair, v_pair)
        self.staged = {}      # (layer, unit) -> [(k_pair, v_pair) per golden block]
        self.h, self.q, self.parts = {}, {}, {}     # keyed by (req, rows) / (req, layer, rows)
        self.logits = {}      # (req, rows) -> int logits
        self.tokens = {}      # req -> generated tokens (leader / first-token node)
        self.picked = {}      # req -> (logit, token) of every tensor-parallel decode step (dpick)
        self.version = 0      # routing-table version: publishes passed
        self.step_versions = {}   # (req, pos, layer) -> version every decode op of that step ran under
        self.held = {}        # (layer, unit) -> references this node holds (acquire)
        self.events = []      # lifecycle log: (op index, kind, (layer, unit), state/readers, freed)
        self.marks = {}
        self.done_ops = 0
        self.max_used = 0
        self.decs = {}        # req -> decode scratch (requests interleave per layer when pipelined)
        cfg = program.model
        self.Hk, self.H, self.d = cfg.num_kv_heads, cfg.num_heads, cfg.head_dim

    # ------------------------------------------------------------------ helpers
    def kvid(self, layer, unit):
        return kv_id_from(layer, unit, 8)

    def _unit_shapes(self, unit):
        t0, t1 = self.p.units[unit]
        blk = self.p.block
        out = []
        for b in self.p.golden_blocks(unit):
            n = min((b + 1) * blk, t1) - max(b * blk, t0)
            out += [((self.Hk, n, self.d), (self.Hk, n))] * 2
        return out

    def _unit_blocks(self, layer, unit):
        """[(k, v) per golden block] of a unit from local pool data or the staging buffer."""
        if (layer, unit) in self.staged:
            return self.staged[(layer, unit)]
        r = self.p.req_of(unit)
        return [self.kv[(r, layer, b)] for b in self.p.golden_blocks(unit)]

    def _store_unit(self, layer, unit, blocks):
        r = self.p.req_of(unit)
        for b, kvb in zip(self.p.golden_blocks(unit), blocks):
            self.kv[(r, layer, b)] = kvb

    def _drop_unit(self, layer, unit):
        r = self.p.req_of(unit)
        for b in self.p.golden_blocks(unit):
            self.kv.pop((r, layer, b), None)

    def _tokens(self, req) -> list:
        return self.tokens.setdefault(req, [])

    def _pool(self, fn, layer, unit, idx, kind, ok=(Status.OK,)):
        r = fn(self.kvid(layer, unit))
        if r.status not in ok:
            raise ExecError(f"node {self.node} op {idx} {kind} ({layer},{unit}): KV pool answered "
                            f"{r.status.name}")
        if r.freed:
            self._drop_unit(layer, unit)
        self.events.append((idx, kind, (layer, unit), r.state.name, r.readers, r.freed))
        self.max_used = max(self.max_used, self.pool.used_slots)
        return r

    # ------------------------------------------------------------------ payloads
    def _payload(self, op):
        if self.dry:
            return torch.zeros(1, dtype=I64)
        if op.part:
            return self._tp_payload(op)
        if op.what == "kv":
            return pack_pairs([x for kvb in self._unit_blocks(op.layer, op.unit) for x in kvb])
        if op.what == "q":
            return pack_pairs([self.decs[op.req]["q"]])
        if op.what == "kvtok":
            return pack_pairs(list(self.decs[op.req]["kv"]))
        if op.what == "token":
            return torch.tensor([self._tokens(op.req)[-1]], dtype=I64)
        if op.what == "credit":          # host.install_credits: an order, no data
            return torch.zeros(1, dtype=I64)
        raise ExecError(f"unknown payload {op.what!r}")

    def _numel(self, op):
        if self.dry:
            return 1
        if op.what == "pm":  # m, l, o[d] of the slice's heads (on the wire: int64 as two words)
            h0, h1 = self.p.wsplit.heads(op.part[0])
            return (h1 - h0) * (self.d + 2)
        if op.part:          # tensor-parallel slices: one word per value of the wire format
            return sum(n for _f, _o, n, _b in self.p.wsplit.wire(op.what, op.part[0]))
        if op.what == "kv":
            t0, t1 = self.p.units[op.unit]
            return kv_numel(self.Hk, self.d, t1 - t0)
        if op.what == "q":
            return self.H * (self.d + 1)
        if op.what == "kvtok":
            return kv_numel(self.Hk, self.d, 1)
        return 1

    # ------------------------------------------------------------------ the interpreter
    def run(self):
        for idx, op in enumerate(self.p.ops[self.node]):
            yield from self.step(idx, op)
            self.done_ops += 1
        self.tr.finish()

    def step(self, idx, op):
        """Run op ``idx`` of the node's stream (a generator: it yields while a receive waits)."""
        im, dry = self.im, self.dry
        match op:
            case Embed():
                if not dry:
                    t0, t1 = op.rows
                    self.h[(op.req, op.rows)] = im.embed(self.prompts[op.req][t0:t1])
            case Project():
                self._project(idx, op)
            case Acquire():
                for u in op.units:
                    self._pool(self.pool.acquire, op.layer, u, idx, op.kind)
                    self.held[(op.layer, u)] = self.held.get((op.layer, u), 0) + 1
            case Release():
                for u in op.units:
                    if not self.held.get((op.layer, u)):
                        raise ExecError(f"node {self.node} op {idx}: release of ({op.layer},{u}) not held")
                    self.held[(op.layer, u)] -= 1
                    self._pool(self.pool.release, op.layer, u, idx, op.kind)
            case Drain():
                self._pool(self.pool.mark_draining, op.layer, op.unit, idx, op.kind)
            case Attend():
                self._attend(idx, op)
            case Finish():
                if not dry:
                    self._finish(idx, op)
            case Logits():
                self._logits(op)
            case Send():
                self.tr.send(op.msg, op.dsts, self._payload(op))
            case Recv():
                data = yield from self.tr.recv(op.msg, op.peer, self._numel(op))
                self._on_recv(idx, op, data)
            case Unstage():
                if self.staged.pop((op.layer, op.unit), None) is None:
                    raise ExecError(f"node {self.node} op {idx}: unstage of ({op.layer},{op.unit}) not staged")
            case Free():
                self._pool(self.pool.free_owner, op.layer, op.unit, idx, op.kind)
            case Publish():
                self.version += 1         # the holders of the next ops are in their dsts
            case DecodeFree():
                self._free_request(idx, op.req)
            case Mark():
                self.marks[op.name] = idx
                if op.name == "prefill_done":
                    self.layout_at_prefill_done = self.layout()
            case _:
                yield from self._decode(idx, op)

    def _project(self, idx, op):
        self._pool(self.pool.alloc_owner, op.layer, op.unit, idx, op.kind)
        if not self.dry:
            t0, t1 = op.rows
            q, kk, vv = qkv_rows(self.im, op.layer, self.h[(op.req, op.rows)], t0)
            self.q[(op.req, op.layer, op.rows)] = q
            blk = self.p.block
            blocks = []
            for b in self.p.golden_blocks(op.unit):
                a, z = max(b * blk, t0) - t0, min((b + 1) * blk, t1) - t0
                blocks.append(((kk[0][:, a:z], kk[1][:, a:z]), (vv[0][:, a:z], vv[1][:, a:z])))
            self._store_unit(op.layer, op.unit, blocks)
        else:
            self._store_unit(op.layer, op.unit, [None] * len(self.p.golden_blocks(op.unit)))

    def _finish(self, idx, op):
        t0, t1 = op.rows
        rk = (op.req, op.rows)
        parts = self.parts.pop((op.req, op.layer, op.rows))
        need = list(range((t1 - 1) // self.p.block + 1))
        if sorted(parts) != need:
            missing = sorted(set(need) - set(parts))
            raise ExecError(f"node {self.node} op {idx}: rows {op.rows} layer {op.layer} "
                            f"missing golden blocks {missing}")
        acc = nx.merge_partials([parts[b] for b in need])     # canonical ascending fold
        self.h[rk] = post_attention(self.im, op.layer, self.h[rk], nx.finalize(acc))
        del self.q[(op.req, op.layer, op.rows)]

    def _logits(self, op):
        rk = (op.req, op.rows)
        hr = self.p.head_rows(op.req, op.rows)        # Program.logits: every row, or the last one
        last = hr[1] == self.p.reqs[op.req][0] and hr[1] > hr[0]
        if not self.dry:
            h = self.h.pop(rk)
            if hr[1] > hr[0]:
                lg = head_logits(self.im, h[hr[0] - op.rows[0]:hr[1] - op.rows[0]])
                self.logits[(op.req, hr)] = lg
            if last:
                self._tokens(op.req).append(int(torch.argmax(lg[-1])))
        elif last:
            self._tokens(op.req).append(0)

    def _on_recv(self, idx, op, data):
        if op.part:
            if not self.dry:
                self._tp_recv(op, data)
            return
        if op.what == "kv":
            blocks = [None] * len(self.p.golden_blocks(op.unit))
            if not self.dry:
                flat = unpack_pairs(data, self._unit_shapes(op.unit))
                blocks = [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
            if op.install == "stage":
                if (op.layer, op.unit) in self.staged:
                    raise ExecError(f"node {self.node} op {idx}: ({op.layer},{op.unit}) already staged")
                self.staged[(op.layer, op.unit)] = blocks
            else:
                fn = self.pool.install_replica if op.install == "replica" else self.pool.alloc_owner
                self._pool(fn, op.layer, op.unit, idx, "install_" + op.install)
                self._store_unit(op.layer, op.unit, blocks)
        elif op.what == "q":
            self.decs.setdefault(op.req, {})["q"] = None if self.dry else unpack_pairs(data, [((self.H, 1, self.d), (self.H, 1))])[0]
        elif op.what == "kvtok":
            self.decs.setdefault(op.req, {})["kv"] = None if self.dry else tuple(unpack_pairs(
                data, [((self.Hk, 1, self.d), (self.Hk, 1))] * 2))
        elif op.what == "token":
            self._tokens(op.req).append(int(data[0]))

    def _attend(self, idx, op):
        blocks = {}
        for u in op.units:
            key = (op.layer, u)
            if key not in self.staged:
                r = self.pool.lookup(self.kvid(*key))
                if r.status != Status.OK:
                    raise ExecError(f"node {self.node} op {idx}: attend reads ({op.layer},{u}) which is "
                                    f"neither in the pool nor staged")
                if r.state != State.OWNER and not self.held.get(key):
                    raise ExecError(f"node {self.node} op {idx}: attend reads replica ({op.layer},{u}) "
                                    f"without holding it (state {r.state.name})")
            if not self.dry:
                for b, kvb in zip(self.p.golden_blocks(u), self._unit_blocks(op.layer, u)):
                    blocks[b] = kvb
        if self.dry:
            return
        rep = self.im.cfg.gqa_ratio
        exp = {b: (expand_kv(kb, rep), expand_kv(vb, rep)) for b, (kb, vb) in blocks.items()}
        got = tile_partials(IntBackend(), self.q[(op.req, op.layer, op.rows)], op.rows[0], exp, self.p.block)
        parts = self.parts.setdefault((op.req, op.layer, op.rows), {})
        for b, pt in got.items():
            if b in parts:
                raise ExecError(f"node {self.node} op {idx}: golden block {b} attended twice")
            parts[b] = pt

    def _free_request(self, idx, req):
        """``dfree``: the request finished; free its owner units in the pool and its decode blocks."""
        for (layer, unit), state in sorted(self.layout().items()):
            if self.p.req_of(unit) == req:
                if state != State.OWNER.name:
                    raise ExecError(f"node {self.node} op {idx}: dfree of request {req}: ({layer},{unit}) "
                                    f"is {state}, not an owner unit")
                self._pool(self.pool.free_owner, layer, unit, idx, "dfree")
        for key in [key for key in self.kv if key[0] == req]:
            del self.kv[key]

    # ------------------------------------------------------------------ tensor-parallel decode
    def _tp_full(self, d):
        """The token's whole q and K/V (``dproject`` and the received slices fill them)."""
        if "q" not in d or d["q"] is None or d["q"][0].shape[0] != self.H:
            z = lambda *s: torch.zeros(s, dtype=I64)  # noqa: E731
            d["q"] = (z(self.H, 1, self.d), z(self.H, 1))
            d["kv"] = ((z(self.Hk, 1, self.d), z(self.Hk, 1)), (z(self.Hk, 1, self.d), z(self.Hk, 1)))

    def _tp_payload(self, op):
        d, sp, j = self.decs[op.req], self.p.wsplit, op.part[0]
        if op.what == "q":
            h0, h1 = sp.heads(j)
            return torch.cat([d["q"][0][h0:h1].reshape(-1), d["q"][1][h0:h1].reshape(-1)])
        if op.what == "kvtok":
            g0, g1 = sp.kv_heads(j)
            return torch.cat([t[g0:g1].reshape(-1) for pair in d["kv"] for t in pair])
        if op.what == "pm":
            p = tps.merged_rows(d["merged"], sp, j)
            return torch.cat([p.m.reshape(-1), p.l.reshape(-1), p.o.reshape(-1)])
        if op.what == "best":
            return torch.tensor(d["bests"][j], dtype=I64)
        a, b = self._tp_range(op.what, j)
        return d[op.what][0, a:b].clone()

    def _tp_range(self, what, j):
        """Columns of slice j in the gathered vector ``what`` ('a' | 'h1' | 's' | 'h')."""
        sp = self.p.wsplit
        if what == "a":
            h0, h1 = sp.heads(j)
            return h0 * self.d, h1 * self.d
        return sp.inter(j) if what == "s" else sp.hidden(j)

    def _tp_recv(self, op, data):
        d, sp, j = self.decs.setdefault(op.req, {}), self.p.wsplit, op.part[0]
        if op.what == "q":
            self._tp_full(d)
            h0, h1 = sp.heads(j)
            n = (h1 - h0) * self.d
            d["q"][0][h0:h1] = data[:n].view(h1 - h0, 1, self.d)
            d["q"][1][h0:h1] = data[n:].view(h1 - h0, 1)
        elif op.what == "kvtok":
            self._tp_full(d)
            g0, g1 = sp.kv_heads(j)
            n, i = g1 - g0, 0
            for pair in d["kv"]:
                pair[0][g0:g1] = data[i:i + n * self.d].view(n, 1, self.d)
                pair[1][g0:g1] = data[i + n * self.d:i + n * self.d + n].view(n, 1)
                i += n * (self.d + 1)
        elif op.what == "pm":
            nh = sp.heads(j)[1] - sp.heads(j)[0]
            d["pm"] = nx.Partial(data[:nh].view(nh, 1), data[nh:2 * nh].view(nh, 1),
                                 data[2 * nh:].view(nh, 1, self.d))
        elif op.what == "best":
            d.setdefault("bests", {})[j] = (int(data[0]), int(data[1]))
        else:
            a, b = self._tp_range(op.what, j)
            d[op.what][0, a:b] = data

    def _tp_stage(self, op, d):
        """A W node's part of a decode op (``op.part``; host.tp, host.executors.tp_stages)."""
        im, sp, j = self.im, self.p.wsplit, op.part[0]
        if isinstance(op, DecodeProject):
            self._tp_full(d)
            q, kk, vv = tps.project_part(im, op.layer, d["h"], op.rows[0], sp, j)
            h0, h1 = sp.heads(j)
            d["q"][0][h0:h1], d["q"][1][h0:h1] = q
            if kk is not None:
                g0, g1 = sp.kv_heads(j)
                for pair, part in zip(d["kv"], (kk, vv)):
                    pair[0][g0:g1], pair[1][g0:g1] = part
        elif isinstance(op, DecodeFinish) and op.name == "attn":
            part = tps.merged_rows(d["merged"], sp, j) if j == 0 else d.pop("pm")
            d["a"] = torch.zeros((1, self.H * self.d), dtype=I64)
            a, b = self._tp_range("a", j)
            d["a"][:, a:b] = tps.attn_part(part)
        elif isinstance(op, DecodeFinish):
            a, b = sp.hidden(j)
            if op.name == "o":
                d["h1"] = torch.zeros_like(d["h"])
                d["h1"][:, a:b] = tps.o_part(im, op.layer, d["h"], d["a"], sp, j)
            elif op.name == "ffn":
                d["s"] = torch.zeros((1, self.p.model.intermediate_size), dtype=I64)
                c, e = sp.inter(j)
                d["s"][:, c:e] = tps.ffn_part(im, op.layer, d["h1"], sp, j)
            elif op.name == "down":
                h = torch.zeros_like(d["h1"])
                h[:, a:b] = tps.down_part(im, op.layer, d["h1"], d["s"], sp, j)
                d["h"] = h
            else:
                raise ExecError(f"node {self.node}: unknown dfinish stage {op.name!r}")
        elif isinstance(op, DecodeLogits):
            d.setdefault("bests", {})[j] = tps.best_part(im, d["h"], sp, j)
        else:
            raise ExecError(f"node {self.node}: op {op.kind!r} has no tensor-parallel part")

    def _decode(self, idx, op):
        im, dry = self.im, self.dry
        d = self.decs.setdefault(op.req, {})
        if isinstance(op, (DecodeProject, DecodeAttend)):
            self.step_versions[(op.req, op.rows[0], op.layer)] = self.version
        if isinstance(op, (DecodeProject, DecodeFinish, DecodeLogits)) and op.part:
            if not dry:
                self._tp_stage(op, d)
            return
        if isinstance(op, DecodeEmbed):
            if not dry:
                d["h"] = im.embed(torch.tensor([self._tokens(op.req)[-1]]))
        elif isinstance(op, DecodeProject):
            if not dry:
                q, kk, vv = qkv_rows(im, op.layer, d["h"], op.rows[0])
                d["q"], d["kv"] = q, (kk, vv)
        elif isinstance(op, Append):
            if not dry:
                b = op.rows[0] // self.p.block
                kk, vv = d["kv"]
                key = (op.req, op.layer, b)
                if key in self.kv:
                    (k0, v0) = self.kv[key]
                    cat = lambda a, x: (torch.cat([a[0], x[0]], 1), torch.cat([a[1], x[1]], 1))  # noqa: E731
                    self.kv[key] = (cat(k0, kk), cat(v0, vv))
                else:
                    if op.rows[0] % self.p.block:
                        raise ExecError(f"node {self.node}: token {op.rows[0]} appended to a block it "
                                        f"does not hold")
                    # copies: a W group assembles the token's K/V in place, slice by slice
                    self.kv[key] = tuple((x[0].clone(), x[1].clone()) for x in (kk, vv))
        elif isinstance(op, DecodeAttend):
            if not dry:
                rep = im.cfg.gqa_ratio
                mine = {b: (expand_kv(kb, rep), expand_kv(vb, rep))
                        for (r, layer, b), (kb, vb) in self.kv.items() if (r, layer) == (op.req, op.layer)}
                got = tile_partials(IntBackend(), d["q"], op.rows[0], mine, self.p.block)
                d["parts"] = [got[b] for b in sorted(got)]
        elif isinstance(op, AllReduce):
            if op.name == "max":
                if dry:
                    t = torch.zeros(1, dtype=I64)
                else:
                    t = torch.full((self.H, 1), nx.M_EMPTY, dtype=I64)
                    for pt in d.get("parts", ()):
                        t = torch.maximum(t, pt.m)
                M = yield from self.tr.allreduce(op.msg, op.dsts, t, "max")
                d["M"] = M
            else:
                if dry:
                    t = torch.zeros(1, dtype=I64)
                else:
                    # a W node without KV (not in the max all-reduce) adds the empty partial
                    M = d.setdefault("M", torch.full((self.H, 1), nx.M_EMPTY, dtype=I64))
                    l = torch.zeros((self.H, 1), dtype=I64)
                    o = torch.zeros((self.H, 1, self.d), dtype=I64)
                    for pt in d.get("parts", ()):
                        r = nx.rescale_to(pt, M)
                        l, o = l + r.l, o + r.o
                    t = torch.cat([l.reshape(-1), o.reshape(-1)])
                s = yield from self.tr.allreduce(op.msg, op.dsts, t, "sum")
                if not dry:
                    n = self.H
                    d["merged"] = nx.Partial(d["M"], s[:n].view(self.H, 1), s[n:].view(self.H, 1, self.d))
        elif isinstance(op, DecodeFinish):
            if not dry:
                a = nx.finalize(d["merged"])
                d["h"] = post_attention(im, op.layer, d["h"], a)
        elif isinstance(op, DecodeLogits):
            if not dry:
                lg = head_logits(im, d["h"])
                self._tokens(op.req).append(int(torch.argmax(lg[-1])))
            else:
                self._tokens(op.req).append(0)
        elif isinstance(op, DecodePick):
            bests = d.pop("bests", {})
            if not dry:
                if sorted(bests) != list(range(self.p.wsplit.W)):
                    raise ExecError(f"node {self.node}: dpick with the best of slices {sorted(bests)}, "
                                    f"expected all {self.p.wsplit.W}")
                tok = tps.pick(bests.values())
                self._tokens(op.req).append(tok)
                self.picked.setdefault(op.req, []).append(next(vi for vi in bests.values() if vi[1] == tok))
            else:
                self._tokens(op.req).append(0)
        else:
            raise ExecError(f"unknown op {type(op).__name__}")

    # ------------------------------------------------------------------ results
    def layout(self) -> dict:
        return pool_layout(self.pool)

    def result(self) -> dict:
        return {"node": self.node, "tokens": {r: list(t) for r, t in self.tokens.items()},
                "picked": {r: list(v) for r, v in self.picked.items()},
                "step_versions": dict(self.step_versions),
                "logits": {r: v.tolist() for r, v in self.logits.items()},
                "layout_prefill": getattr(self, "layout_at_prefill_done", None),
                "layout_end": self.layout(), "max_used_slots": self.max_used,
                "peak_slots": self.pool.peak_slots, "events": list(self.events),
                "staged_left": sorted(self.staged), "held_left": {k: v for k, v in self.held.items() if v}}
