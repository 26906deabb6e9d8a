"""GEMM MAC pipeline: chunk dot products, group partials and the scaled 48-bit accumulation."""
from amaranth import Cat, Const, Module, Mux, ResetSignal, Signal, signed
from amaranth.hdl import Value
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.numerics import ACC_BITS
from ..dsp48e2 import X_M, Y_M, Z_P, dsp48e2, opmode

__all__ = ["GemmMacPipeline", "PACK_SHIFT", "chunk_flags_layout"]

PACK_SHIFT = 18
#: the DSP48E2 multiplier's A operand (signed, UG579): a group partial must fit it
DSP_A_BITS = 27
#: terms summed per stage of the pipelined dot products' adder tree
TREE_ARITY = 8


def chunk_flags_layout():
    """What the issuer says about the chunk it issues: ``v`` valid, ``gf``/``gl`` first/last chunk
    of its group, ``fg`` in the row's first group, ``rl`` the row's (token's) last chunk, ``tl``
    the tile's last chunk, ``buf`` the tile's header/scale bank."""
    return data.StructLayout({"v": 1, "gf": 1, "gl": 1, "fg": 1, "rl": 1, "tl": 1, "buf": 1})


class GemmMacPipeline(wiring.Component):
    """Four stages, all advancing only while ``en`` (the array's global enable; the stage
    registers hold otherwise).

    * Stage 1: ``chunk`` (the flags of the chunk whose memory reads are issued this cycle) is
      registered; the next cycle ``w`` (``pn`` rows of ``pk`` INT4 weights, row n lane k at bits
      ``4(n*pk + k)``), ``x`` (``pk`` int8 activations), ``ws`` (the group's ``pn`` uint8 scales)
      and ``xe`` (the token's exponent) are that chunk's read data.
    * ``psum[n] = sum_k q[n, k] * x[k]`` (with ``pack2``, rows 2j and 2j+1 share one multiply per
      k, split exactly); ``gp[n]`` sums the psums of a group; ``acc[n] += ws[n] * gp[n]`` at the
      group's last chunk (cleared at the row's first group).
    * ``row``: ``v`` for one enabled cycle per finished row (its last chunk), with ``acc`` (48-bit),
      ``xe``, ``tl`` and ``buf`` of that row, four enabled cycles after its last chunk was issued
      (``acc`` is the accumulator itself: it is the row's only while ``v``).

    ``pipelined``: the dot products in stages for the clock -- the products (or packed pairs)
    registered, then the adder tree ``tree_arity`` (default ``TREE_ARITY``) terms per stage,
    before ``psum`` -- so ``row`` comes ``extra_stages`` enabled cycles later; same values.

    ``group``: the inputs of a group (at most): ``gp`` is :attr:`gp_bits` wide, so that each
    row's scaled accumulation is one DSP48E2 (:mod:`hdl.dsp48e2`; the primitive on the XCK26
    target, its model elsewhere): ``gp`` and ``ws`` in its A and B registers, ``fg`` in its OPMODE
    register (Z = P, or 0 in the row's first group), ``acc`` its P register (multiplier and adder
    inside the primitive: no fabric adder, no second copy of ``acc`` for ``row``).
    """

    def __init__(self, pn: int, pk: int, pack2: bool, pipelined: bool = False, *, group: int,
                 tree_arity: int = TREE_ARITY):
        self.pn, self.pk, self.pack2, self.pipelined, self.group = pn, pk, pack2, pipelined, group
        if tree_arity < 2:
            raise ValueError(f"GemmMacPipeline: tree_arity={tree_arity} must be at least 2")
        self.tree_arity = tree_arity
        if self.gp_bits > DSP_A_BITS:
            raise ValueError(f"GemmMacPipeline: group={group} inputs: a group partial needs {self.gp_bits} "
                             f"bits, the DSP48E2 multiplier takes {DSP_A_BITS} (group <= {(1 << (DSP_A_BITS - 1)) // 1024 - 1})")
        super().__init__({
            "en": In(1),
            "chunk": In(chunk_flags_layout()),
            "w": In(pn * pk * 4), "x": In(pk * 8), "ws": In(pn * 8), "xe": In(signed(8)),
            "row": Out(data.StructLayout({"v": 1, "tl": 1, "buf": 1, "xe": signed(8),
                                          "acc": data.ArrayLayout(signed(ACC_BITS), pn)})),
        })

    def elaborate(self, platform):
        m = Module()
        pn, pk, en = self.pn, self.pk, self.en

        def stage(name, shape=1):
            return Signal(shape, name=name)

        # stage 1 (memory data valid)
        s1 = {k: stage(f"s1_{k}") for k in ("v", "gf", "gl", "fg", "rl", "tl", "buf")}
        with m.If(en):
            m.d.sync += [s1[k].eq(self.chunk[k]) for k in s1]

        # dot products
        wv, xv = self.w, self.x
        xs = [xv[8 * k:8 * k + 8].as_signed() for k in range(pk)]

        def wq(n, k):
            return wv[4 * (n * pk + k):4 * (n * pk + k) + 4].as_signed()

        sum_w = signed(PACK_SHIFT + 4 + 8 + (pk - 1).bit_length() + 2)
        if self.pack2:                  # (weight operand, activation) of each product
            ops = [[(wq(2 * j + 1, k).shift_left(PACK_SHIFT) + wq(2 * j, k), xs[k]) for k in range(pk)]
                   for j in range(pn // 2)]
        else:
            ops = [[(wq(n, k), xs[k]) for k in range(pk)] for n in range(pn)]
        s1x = {"ws": self.ws, "xe": self.xe}
        if self.pipelined:
            sums, s1, s1x = self._staged_sums(m, platform, ops, s1, s1x)
        else:
            sums = [[a * b for a, b in row] for row in ops]
        dots = []
        if self.pack2:
            for j, terms in enumerate(sums):
                ssum = Signal(sum_w, name=f"pk_sum{j}")
                m.d.comb += ssum.eq(sum(terms))
                lo = ssum[:PACK_SHIFT].as_signed()
                hi = (ssum - lo) >> PACK_SHIFT
                dots += [lo, hi]
        else:
            dots = [sum(terms) for terms in sums]

        s2 = dict(v=stage("s2_v"), gf=stage("s2_gf"), gl=stage("s2_gl"), fg=stage("s2_fg"),
                  rl=stage("s2_rl"), tl=stage("s2_tl"), buf=stage("s2_buf"),
                  ws=stage("s2_ws", pn * 8), xe=stage("s2_xe", signed(8)))
        s2_ps = [Signal(signed(32), name=f"s2_ps{n}") for n in range(pn)]
        with m.If(en):
            m.d.sync += [s2[k].eq(s1[k]) for k in s1]
            m.d.sync += [s2["ws"].eq(s1x["ws"]), s2["xe"].eq(s1x["xe"])]
            m.d.sync += [s2_ps[n].eq(dots[n]) for n in range(pn)]

        # stage 2: group partials
        gp = [Signal(signed(self.gp_bits), name=f"gp{n}") for n in range(pn)]
        gp_next = [Mux(s2["gf"], 0, gp[n]) + s2_ps[n] for n in range(pn)]
        s3 = dict(v=stage("s3_v"), rl=stage("s3_rl"), tl=stage("s3_tl"), buf=stage("s3_buf"),
                  xe=stage("s3_xe", signed(8)))
        with m.If(en):
            with m.If(s2["v"]):
                m.d.sync += [gp[n].eq(gp_next[n]) for n in range(pn)]
            m.d.sync += s3["v"].eq(s2["v"] & s2["gl"])
            m.d.sync += [s3[k].eq(s2[k]) for k in ("rl", "tl", "buf", "xe")]

        # stage 3: acc[n] = (0 if fg else acc[n]) + gp[n] * ws[n], 48-bit, in one DSP48E2 per row:
        # its A, B and OPMODE registers are stage 3's gp, ws and fg (loaded when en), P is acc
        # (loaded when en and s3.v); OPMODE X = Y = M (the product), Z = P or 0, W = 0
        s4 = self.row
        rst = ResetSignal()
        z_p = Mux(s2["fg"], Const(0, 3), Const(Z_P, 3))
        params = {"AREG": 1, "BREG": 1, "ACASCREG": 1, "BCASCREG": 1, "OPMODEREG": 1, "CARRYINREG": 1,
                  "CREG": 0, "MREG": 0, "PREG": 1, "USE_MULT": "MULTIPLY"}
        for n in range(pn):
            a_in = Signal(signed(30), name=f"dsp_a{n}")      # |gp| < 2**26: its low 30 bits, exact
            m.d.comb += a_in.eq(gp_next[n])
            acc = Signal(signed(ACC_BITS), name=f"acc{n}")
            inputs = {"A": a_in, "B": Cat(s2["ws"][8 * n:8 * n + 8], Const(0, 10)),
                      "OPMODE": opmode(x=X_M, y=Y_M, z=z_p),
                      "CEA2": en, "CEB2": en, "CECTRL": en, "CEP": en & s3["v"],
                      **{r: rst for r in ("RSTA", "RSTB", "RSTCTRL", "RSTALLCARRYIN", "RSTP")}}
            m.submodules[f"dsp{n}"] = dsp48e2(platform, params, inputs, acc)
            m.d.comb += s4.acc[n].eq(acc)
        with m.If(en):
            m.d.sync += s4.v.eq(s3["v"] & s3["rl"])
            m.d.sync += [s4.tl.eq(s3["tl"]), s4.buf.eq(s3["buf"]), s4.xe.eq(s3["xe"])]
        return m

    @property
    def gp_bits(self) -> int:
        """A group partial's width: |q * x| <= 8 * 128 per input (INT4 x INT8), so |gp| <= 1024 * group."""
        return (1024 * self.group).bit_length() + 1

    @property
    def extra_stages(self):
        """Enabled cycles the pipelined dot products add (0 unpipelined)."""
        if not self.pipelined:
            return 0
        n, k = self.pk, 1                 # the products, then tree stages until one stage's sum is left
        while n > self.tree_arity:
            n, k = -(-n // self.tree_arity), k + 1
        return k

    def _staged_sums(self, m, platform, ops, s1, s1x):
        """The terms of each dot registered -- each product a DSP48E2's multiplier into its P
        register (:func:`_product`) --, then summed ``tree_arity`` at a time a stage apart until at
        most ``tree_arity`` are left (their sum is the stage-1 sum's); the chunk flags, ``ws`` and
        ``xe`` travel beside them. All registers advance with ``en``."""
        en = self.en
        lvl = 0

        def carry(s1, s1x):
            f = {k: Signal(name=f"p{lvl}_{k}") for k in s1}
            x = {k: Signal.like(Value.cast(v), name=f"p{lvl}_{k}") for k, v in s1x.items()}
            with m.If(en):
                m.d.sync += [f[k].eq(s1[k]) for k in s1] + [x[k].eq(s1x[k]) for k in s1x]
            return f, x
        regs = [[_product(m, platform, a, b, en, f"p0_{j}_{k}") for k, (a, b) in enumerate(row)]
                for j, row in enumerate(ops)]
        s1, s1x = carry(s1, s1x)
        sums = regs
        arity = self.tree_arity
        while len(sums[0]) > arity:
            lvl += 1
            nxt = []
            for j, terms in enumerate(sums):
                parts = [sum(terms[i:i + arity]) for i in range(0, len(terms), arity)]
                r = [Signal.like(Value.cast(t), name=f"p{lvl}_{j}_{k}") for k, t in enumerate(parts)]
                with m.If(en):
                    m.d.sync += [r[k].eq(t) for k, t in enumerate(parts)]
                nxt.append(r)
            sums = nxt
            s1, s1x = carry(s1, s1x)
        return sums, s1, s1x


#: a DSP48E2 as a registered multiplier: P <= A[26:0] * B when CEP (OPMODE X = Y = M, Z = W = 0)
_PRODUCT = {"AREG": 0, "BREG": 0, "ACASCREG": 0, "BCASCREG": 0, "OPMODEREG": 0, "CARRYINREG": 0,
            "CREG": 0, "MREG": 0, "PREG": 1, "USE_MULT": "MULTIPLY"}


def _product(m, platform, a, b, en, name):
    """``a * b`` (signed, ``a`` at most 27 bits, ``b`` at most 18) registered when ``en``, in one
    DSP48E2's P register (:mod:`hdl.dsp48e2`: the primitive on the XCK26 target -- Yosys maps a
    multiply there but packs no register into it --, its model elsewhere); the domain's reset
    clears it. Returns the product's signal."""
    a, b = Value.cast(a), Value.cast(b)
    assert len(a) <= DSP_A_BITS and len(b) <= 18, (len(a), len(b))
    a30, b18, p = Signal(signed(30), name=f"{name}_a"), Signal(signed(18), name=f"{name}_b"), Signal(48, name=f"{name}_p")
    m.d.comb += [a30.eq(a), b18.eq(b)]
    m.submodules[f"{name}_dsp"] = dsp48e2(platform, _PRODUCT, {"A": a30, "B": b18, "OPMODE": opmode(x=X_M, y=Y_M),
                                                               "CEP": en, "RSTP": ResetSignal()}, p)
    out = Signal(signed(len(a) + len(b)), name=name)
    m.d.comb += out.eq(p[:len(out)])
    return out
