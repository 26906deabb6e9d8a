"""Attention phase S: the scores of one query row against the keys a :class:`KeyIssuer` issues."""
from amaranth import Module, Signal, Cat, Mux, signed, unsigned
from amaranth.hdl import Value
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.numerics import FZ, SC, M_EMPTY, score_multiplier
from .fixed import clamp, rshift_round, rshift_round_coarse, rshift_round_fine
from .attention_key_issuer import block_entry_layout
from .stage_chain import StageChain

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

    ``pipelined``: the score path in register stages (:meth:`_elaborate_pipelined`: the products,
    the adder tree in stages of ``tree_arity`` terms, the multiply by C, the rounding shift in two
    steps, the clamp, the pair's maximum, the block maximum and the row maximum each a register
    apart); the same writes in the same order, ``latency`` cycles after the issue instead of one.
    ``busy`` (pipelined only) is high while a key or a block maximum is in flight: ``row_max`` is
    final once it is low.
    """

    def __init__(self, d, kpc, aw, pos_bits, z_max, pipelined=False, tree_arity=8):
        self.d, self.kpc, self.z_max = d, kpc, z_max
        self.pipelined, self.tree_arity = pipelined, tree_arity
        zport = data.StructLayout({"idx": range(z_max + 1), "data": unsigned(33), "en": 1})
        extra = {"busy": Out(1)} if pipelined else {}
        super().__init__({
            **extra,
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

    @property
    def latency(self):
        """Cycles from a key's issue to its z write (1 unpipelined)."""
        return self.pipeline_latency(self.d, self.tree_arity) if self.pipelined else 1

    @staticmethod
    def pipeline_latency(d, tree_arity=8):
        """The pipelined scorer's ``latency`` for head dim ``d``: the K words, the products, the
        tree's stages, the multiply by C, the two shift steps and the clamp."""
        return 1 + 1 + len(AttentionScorer.tree_levels(d, tree_arity)) + 1 + 2 + 1

    @staticmethod
    def tree_levels(d, tree_arity):
        """The term counts after each registered stage of the dot product's adder tree."""
        n, out = d, []
        while n > 1:
            n = -(-n // tree_arity)
            out.append(n)
        return out or [1]

    def _z_writes(self, m, v, z, two, zs, on):
        """The z memory writes of an issue's keys z .. z + kpc - 1 (``v`` valid, ``two``: key z + 1
        too; ``zs[k]``, ``on[k]`` its z and mask bit): key z + k to memory (z + k) % kpc."""
        for bank, wp in enumerate(self.zw):
            if self.kpc == 2:           # this memory takes lane k = bank ^ (z % 2)
                k = bank ^ z[0]
                idx, lane_z, lane_on, lane_pr = (z + k) >> 1, Mux(k, zs[1], zs[0]), Mux(k, on[1], on[0]), Mux(k, two, 1)
            else:
                idx, lane_z, lane_on, lane_pr = z, zs[0], on[0], 1
            m.d.comb += [wp.idx.eq(idx), wp.data.eq(Cat(lane_z, lane_on)), wp.en.eq(v & lane_pr)]

    def elaborate(self, platform):
        if self.pipelined:
            return self._elaborate_pipelined()
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
        self._z_writes(m, s1_v, s1_z, s1_two, zs, s1_on)
        m.d.comb += [self.valid.eq(s1_v), self.mb_data.eq(bm_new), self.mb_en.eq(s1_v & s1_last)]
        with m.If(s1_v):
            m.d.sync += bmax.eq(bm_new)
            with m.If(s1_last & (bm_new > self.row_max)):
                m.d.sync += self.row_max.eq(bm_new)
        with m.If(self.row_clear):
            m.d.sync += self.row_max.eq(M_EMPTY)
        return m

    def _elaborate_pipelined(self):
        """Stages after the issue (s1: the K words arrive): a products and shift amount | t the adder
        tree, ``tree_arity`` terms per stage | c dot * C | r1 the shift by whole bytes | r2 the rest
        and the rounding | z the clamp (z memory written from here) | x the pair's maximum | b the
        block maximum (``mb_*`` out of registers the cycle after) | the row maximum. No stall: a key
        issued is written ``latency`` cycles later, whatever follows it."""
        m = Module()
        d, kpc, C = self.d, self.kpc, score_multiplier(self.d)
        e = self.entry
        present = [1, self.two]
        # control carried along the stages: valid, first, last, two, b, z, on[k]
        ctl_layout = data.StructLayout({"v": 1, "first": 1, "last": 1, "two": 1, "b": 16,
                                        "z": range(self.z_max + 1), "on": kpc})
        stage = StageChain(m, ctl_layout, "c{}")
        c_in = Signal(ctl_layout)
        m.d.comb += [c_in.v.eq(self.go), c_in.first.eq(self.first), c_in.last.eq(self.last),
                     c_in.two.eq(self.two), c_in.b.eq(self.b), c_in.z.eq(self.z),
                     c_in.on.eq(Cat(*[present[k] & ~e.void & (~self.causal | ((e.pos + self.j + k) <= self.qpos))
                                      for k in range(kpc)]))]
        c1 = stage(c_in)                                # s1: the K words are on kd
        ca = stage(c1)
        prods, zsh = [], []
        for k in range(kpc):
            kd = self.kd[k]
            pr = [Signal(signed(16), name=f"pr{k}_{i}") for i in range(d)]
            m.d.sync += [pr[i].eq(self.q[8 * i:8 * i + 8].as_signed() * kd[8 * i:8 * i + 8].as_signed())
                         for i in range(d)]
            sh = Signal(signed(10), name=f"zsh{k}")
            m.d.sync += sh.eq(self.eq + kd[8 * d:8 * d + 8].as_signed() + (SC - FZ))
            prods.append(pr)
            zsh.append(sh)
        ct = ca
        for lvl, n in enumerate(self.tree_levels(d, self.tree_arity)):   # the adder tree, tree_arity terms per stage
            ct = stage(ct)
            for k in range(kpc):
                terms, a = prods[k], self.tree_arity
                nxt = [Signal(signed(32), name=f"t{lvl}_{k}_{i}") for i in range(n)]
                m.d.sync += [nxt[i].eq(sum(terms[a * i:a * i + a])) for i in range(n)]
                prods[k] = nxt
                sh = Signal(signed(10), name=f"zsh{k}_t{lvl}")
                m.d.sync += sh.eq(zsh[k])
                zsh[k] = sh
        cc = stage(ct)
        dotc, sh_c = [], []
        for k in range(kpc):
            x = Signal(signed(48), name=f"dotc{k}")
            m.d.sync += x.eq(prods[k][0] * C)
            sh = Signal(signed(10), name=f"zsh{k}_c")
            m.d.sync += sh.eq(zsh[k])
            dotc.append(x)
            sh_c.append(sh)
        cr1 = stage(cc)
        coarse = []
        for k in range(kpc):
            cs = rshift_round_coarse(dotc[k], sh_c[k], max_left=32)
            regs = {n: Signal.like(v, name=f"r1_{n}{k}") for n, v in
                    ((n, Value.cast(v)) for n, v in cs.items())}
            m.d.sync += [regs[n].eq(cs[n]) for n in cs]
            coarse.append(regs)
        cr2 = stage(cr1)
        zraw = []
        for k in range(kpc):
            zr = Signal(signed(80), name=f"zraw{k}")
            m.d.sync += zr.eq(rshift_round_fine(coarse[k], max_left=32))
            zraw.append(zr)
        cz = stage(cr2)
        zs = []
        for k in range(kpc):
            z = Signal(signed(32), name=f"z{k}")
            m.d.sync += z.eq(clamp(zraw[k], -ZMAX, ZMAX))
            zs.append(z)
        self._z_writes(m, cz.v, cz.z, cz.two, zs, cz.on)      # z memory writes from the clamp stage
        cx = stage(cz)                                  # the pair's maximum over its on keys
        xz, xon = Signal(signed(32)), Signal()
        if kpc == 2:
            take1 = cz.on[1] & (~cz.on[0] | (zs[1] > zs[0]))
            m.d.sync += [xz.eq(Mux(take1, zs[1], zs[0])), xon.eq(cz.on[0] | cz.on[1])]
        else:
            m.d.sync += [xz.eq(zs[0]), xon.eq(cz.on[0])]
        bmax = Signal(signed(32))
        bm_new = Mux(cx.first, M_EMPTY, bmax)
        with m.If(cx.v):
            m.d.sync += bmax.eq(Mux(xon & (xz > bm_new), xz, bm_new))
        mb_en = Signal()
        m.d.sync += [mb_en.eq(cx.v & cx.last), self.mb_b.eq(cx.b)]
        m.d.comb += [self.mb_en.eq(mb_en), self.mb_data.eq(bmax), self.valid.eq(cz.v)]
        with m.If(mb_en & (bmax > self.row_max)):
            m.d.sync += self.row_max.eq(bmax)
        with m.If(self.row_clear):
            m.d.sync += self.row_max.eq(M_EMPTY)
        m.d.comb += self.busy.eq(stage.any("v") | mb_en)
        return m
