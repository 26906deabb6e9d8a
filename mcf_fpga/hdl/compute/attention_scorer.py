"""Attention phase S: the scores of one query row against the keys a :class:`KeyIssuer` issues."""
from amaranth import Module, Signal, Cat, Mux, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.numerics import FZ, SC, M_EMPTY, score_multiplier
from .fixed import rshift_round
from .attention_key_issuer import block_entry_layout

__all__ = ["AttentionScorer", "ZMAX"]

ZMAX = -M_EMPTY - 1


class AttentionScorer(wiring.Component):
    """Phase S of the attention unit for ``kpc`` (1 or 2) keys per cycle.

    Inputs: the issuer's ``go``, ``first``, ``last``, ``two``, ``b``, ``j``, ``z``, ``entry`` of
    the cycle a key issue leaves it; the row's ``q`` (d int8 lanes), ``eq``, ``qpos`` and
    ``causal``; ``kd[k]`` the K word (d lanes + exponent) of key j + k one cycle later (a
    synchronous read port). One cycle after the issue: ``valid``; for key z + k
    z = sat30(rshift_round(q.k * C, eq + ek + SC - FZ)) and its ``on`` bit (in the block, not
    void, causal: kpos <= qpos) go to z memory (z + k) % kpc: ``zw[bank]`` {idx = (z + k) //
    kpc, data = Cat(z, on), en}; at a block's last issue ``mb_en`` with ``mb_b`` and
    ``mb_data`` = the block maximum over its on keys (M_EMPTY if none). ``row_max``: max of the
    row's block maxima so far; ``row_clear`` sets it to M_EMPTY (wins).
    """

    def __init__(self, d, kpc, aw, pos_bits, z_max):
        self.d, self.kpc, self.z_max = d, kpc, z_max
        zport = data.StructLayout({"idx": range(z_max + 1), "data": unsigned(33), "en": 1})
        super().__init__({
            "go": In(1), "first": In(1), "last": In(1), "two": In(1), "b": In(16), "j": In(16),
            "z": In(range(z_max + 1)), "entry": In(block_entry_layout(aw, pos_bits)),
            "q": In(d * 8), "eq": In(signed(8)), "qpos": In(pos_bits), "causal": In(1),
            "kd": In(data.ArrayLayout(unsigned(d * 8 + 8), kpc)),
            "row_clear": In(1),
            "valid": Out(1),
            "zw": Out(data.ArrayLayout(zport, kpc)),
            "mb_b": Out(16), "mb_data": Out(signed(32)), "mb_en": Out(1),
            "row_max": Out(signed(32)),
        })

    def elaborate(self, platform):
        m = Module()
        d, kpc, C = self.d, self.kpc, score_multiplier(self.d)
        s1_v, s1_first, s1_last, s1_two = (Signal(name="s1_v"), Signal(name="s1_first"),
                                           Signal(name="s1_last"), Signal(name="s1_two"))
        s1_z = Signal(range(self.z_max + 1), name="s1_z")
        s1_on = [Signal(name=f"s1_on{k}" if k else "s1_on") for k in range(kpc)]
        present = [1, self.two]
        e = self.entry
        m.d.sync += [s1_v.eq(self.go), s1_first.eq(self.first), s1_last.eq(self.last), s1_two.eq(self.two),
                     self.mb_b.eq(self.b), s1_z.eq(self.z)]
        m.d.sync += [s1_on[k].eq(present[k] & ~e.void & (~self.causal | ((e.pos + self.j + k) <= self.qpos)))
                     for k in range(kpc)]
        bmax = Signal(signed(32))
        bm_new = Mux(s1_first, M_EMPTY, bmax)
        zs = []
        for k in range(kpc):
            sfx = str(k) if k else ""
            kd = self.kd[k]
            dot = Signal(signed(32), name="dot" + sfx)
            m.d.comb += dot.eq(sum(self.q[8 * i:8 * i + 8].as_signed() * kd[8 * i:8 * i + 8].as_signed()
                                   for i in range(d)))
            zsh = Signal(signed(10), name="zsh" + sfx)
            m.d.comb += zsh.eq(self.eq + kd[8 * d:8 * d + 8].as_signed() + (SC - FZ))
            zraw = Signal(signed(80), name="zraw" + sfx)
            m.d.comb += zraw.eq(rshift_round(dot * C, zsh, max_left=32))
            z = Signal(signed(32), name="z" + sfx)
            m.d.comb += z.eq(Mux(zraw > ZMAX, ZMAX, Mux(zraw < -ZMAX, -ZMAX, zraw)))
            zs.append(z)
            bm_new = Mux(s1_on[k] & (z > bm_new), z, bm_new)
        for bank, wp in enumerate(self.zw):
            if kpc == 2:           # this memory takes lane k = bank ^ (z % 2)
                k = bank ^ s1_z[0]
                idx, lane_z, lane_on, lane_pr = (s1_z + k) >> 1, Mux(k, zs[1], zs[0]), Mux(k, s1_on[1], s1_on[0]), Mux(k, s1_two, 1)
            else:
                idx, lane_z, lane_on, lane_pr = s1_z, zs[0], s1_on[0], 1
            m.d.comb += [wp.idx.eq(idx), wp.data.eq(Cat(lane_z, lane_on)), wp.en.eq(s1_v & lane_pr)]
        m.d.comb += [self.valid.eq(s1_v), self.mb_data.eq(bm_new), self.mb_en.eq(s1_v & s1_last)]
        with m.If(s1_v):
            m.d.sync += bmax.eq(bm_new)
            with m.If(s1_last & (bm_new > self.row_max)):
                m.d.sync += self.row_max.eq(bm_new)
        with m.If(self.row_clear):
            m.d.sync += self.row_max.eq(M_EMPTY)
        return m
