"""ReduceContexts: the reduction engine's open groups -- their keys, members, counts and timers.

Contract
--------
* Context ``k < cfg.reduce_contexts`` is in the reduce pool, the following
  ``cfg.merge_contexts`` in the merge pool. A context is open from ``open`` until ``free`` or
  its timeout; an open context holds its group's ``dst``, key header, ``fanin``, the srcs that
  contributed (``members``) and their count.
* Lookup (combinational, on ``hdr`` / ``fanin``, the header of a contribution): ``hit`` if an
  open context that does not expire this cycle has the same ``(dst, kv_id)``; ``ctx`` is the
  lowest such context, or else the lowest free one of the header's pool (merge pool for
  SOFTMAX_MERGE), ``can_open`` whether that pool has one. ``conflict``: the hit group's key
  (op, reduce_op, stage, collective, kv_id, length) or fanin differs, or its src already
  contributed. ``members``: the group's srcs including this one.
* ``open``: context ``ctx`` opens for ``hdr`` (no members yet). ``join``: the contribution to
  ``join_ctx`` is complete; its srcs become ``join_members``, its count one more. ``complete``
  (combinational) says it is the ``fanin``-th: then the context's timer stops; otherwise
  ``join_first`` starts it at ``timeout`` (0: never). ``free``: ``free_ctx``, a complete
  group (its timer stopped), closes once its result is sent.
* ``expire``: bit k is high in the cycle context k times out (``timeout`` cycles after the
  cycle of its ``join_first``); the context closes then.
"""
from amaranth import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.meta import ReduceOp
from mcf_fpga.spec.nic import NicConfig
from mcf_fpga.hdl.meta import meta_layout

__all__ = ["ReduceContexts", "lowest_set"]


def lowest_set(m, mask, width, name):
    """Index of the lowest set bit of ``mask`` (0 when empty), as a combinational signal."""
    idx = Signal(range(max(width, 2)), name=name)
    for b in reversed(range(width)):
        with m.If(mask[b]):
            m.d.comb += idx.eq(b)
    return idx


class ReduceContexts(wiring.Component):
    """See module docstring. ``cfg``: the NIC's ``NicConfig``."""

    def __init__(self, cfg: NicConfig):
        self.cfg = cfg
        K, NS = cfg.reduce_contexts + cfg.merge_contexts, cfg.max_nodes
        mlay = meta_layout(cfg.meta)
        super().__init__({
            "hdr": In(mlay), "fanin": In(8),
            "hit": Out(1), "ctx": Out(range(max(K, 2))), "can_open": Out(1), "conflict": Out(1),
            "members": Out(NS),
            "open": In(1),
            "join": In(1), "join_ctx": In(range(max(K, 2))), "join_members": In(NS), "join_first": In(1),
            "timeout": In(32), "complete": Out(1),
            "free": In(1), "free_ctx": In(range(max(K, 2))),
            "expire": Out(K),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, mp = self.cfg, self.cfg.meta
        KR, KM, NS = cfg.reduce_contexts, cfg.merge_contexts, cfg.max_nodes
        K, sbits = KR + KM, (NS - 1).bit_length()
        mlay, hm = meta_layout(mp), self.hdr
        c_valid = Signal(K)
        c_dst = [Signal(mp.node_bits, name=f"c_dst{k}") for k in range(K)]
        c_key = [Signal(mlay, name=f"c_key{k}") for k in range(K)]
        c_fanin = [Signal(8, name=f"c_fanin{k}") for k in range(K)]
        c_present = [Signal(NS, name=f"c_present{k}") for k in range(K)]
        c_count = [Signal(range(NS + 2), name=f"c_count{k}") for k in range(K)]

        # timeouts: c_tmr counts down from T - 1 while c_armed
        c_armed = Signal(K)
        c_tmr = [Signal(32, name=f"c_tmr{k}") for k in range(K)]
        expire = self.expire
        m.d.comb += expire.eq(Cat(*(c_armed[k] & (c_tmr[k] == 0) for k in range(K))))
        for k in range(K):
            with m.If(c_armed[k] & (c_tmr[k] != 0)):
                m.d.sync += c_tmr[k].eq(c_tmr[k] - 1)
            with m.If(expire[k]):
                m.d.sync += [c_valid[k].eq(0), c_armed[k].eq(0)]
        live = Signal(K)           # open groups a contribution may still join
        m.d.comb += live.eq(c_valid & ~expire)

        # lookup
        hit = Signal(K)
        m.d.comb += hit.eq(Cat(*(live[k] & (c_dst[k] == hm.dst)
                                   & (c_key[k].kv_id.as_value() == hm.kv_id.as_value()) for k in range(K))))
        to_merge = Value.cast(hm.reduce_op) == ReduceOp.SOFTMAX_MERGE
        free_r, free_m = Signal(KR), Signal(KM)
        m.d.comb += [free_r.eq(~c_valid[:KR]), free_m.eq(~c_valid[KR:])]
        hit_idx = lowest_set(m, hit, K, "hit_idx")
        free_r_idx = lowest_set(m, free_r, KR, "free_r_idx")
        free_m_idx = lowest_set(m, free_m, KM, "free_m_idx")
        ctx_sel = self.ctx
        m.d.comb += ctx_sel.eq(Mux(hit.any(), hit_idx, Mux(to_merge, KR + free_m_idx, free_r_idx)))
        key_of = lambda v: Cat(v.op, v.reduce_op, v.stage, v.collective, v.kv_id, v.length)
        sel_key = Signal(mlay)
        sel_fanin = Signal(8)
        sel_present = Signal(NS)
        for k in range(K):
            with m.If(ctx_sel == k):
                m.d.comb += [sel_key.eq(c_key[k]), sel_fanin.eq(c_fanin[k]), sel_present.eq(c_present[k])]
        src_idx = hm.src[:sbits]
        src_bit = Signal(NS)
        m.d.comb += src_bit.eq((Const(1, NS) << src_idx)[:NS])
        m.d.comb += [self.hit.eq(hit.any()), self.can_open.eq(Mux(to_merge, free_m.any(), free_r.any())),
                     self.conflict.eq(hit.any() & ((key_of(sel_key) != key_of(hm)) | (sel_fanin != self.fanin)
                                                   | sel_present.bit_select(src_idx, 1))),
                     self.members.eq(Mux(hit.any(), sel_present, 0) | src_bit)]

        # updates (after the timeouts: an update of the same cycle wins)
        with m.If(self.open):
            for k in range(K):
                with m.If(ctx_sel == k):
                    m.d.sync += [c_valid[k].eq(1), c_dst[k].eq(hm.dst), c_key[k].eq(hm),
                                 c_fanin[k].eq(self.fanin), c_present[k].eq(0), c_count[k].eq(0)]
        for k in range(K):
            with m.If(self.join_ctx == k):
                m.d.comb += self.complete.eq(c_count[k] + 1 == c_fanin[k])
                with m.If(self.join):
                    m.d.sync += [c_present[k].eq(self.join_members), c_count[k].eq(c_count[k] + 1)]
                    with m.If(c_count[k] + 1 == c_fanin[k]):
                        m.d.sync += c_armed[k].eq(0)
                    with m.Elif(self.join_first):     # the group's timer starts
                        m.d.sync += [c_tmr[k].eq(self.timeout - 1), c_armed[k].eq(self.timeout != 0)]
        with m.If(self.free):
            for k in range(K):
                with m.If(self.free_ctx == k):
                    m.d.sync += c_valid[k].eq(0)
        return m
