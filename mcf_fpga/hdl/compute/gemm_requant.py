"""GEMM requantizer: 48-bit row accumulators to int32 outputs (QuantLinear), into the output FIFO."""
from amaranth import Module, Signal, Cat, Array, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.numerics import FA, ACC_BITS
from .fixed import rshift_round, rshift_round_coarse, rshift_round_fine, sat

__all__ = ["GemmRequantizer"]


class GemmRequantizer(wiring.Component):
    """``y[n] = sat32(rshift_round(acc[n], we[n] + xe - FA) + bias[n])``, ``lanes`` columns per cycle.

    * ``row`` ``{acc[pn], we[pn], bias[pn], xe, tl}`` is taken (ready) when the requantizer is
      free: idle, or in its last step with the FIFO able to take the result. A row takes
      ``pn / lanes`` cycles; it is copied in, so its sources may change at once.
    * ``y`` ``{data[pn], last = tl}``: the rows in order, through a ``fifo_depth`` buffered FIFO;
      back-pressure on ``y`` fills the FIFO, then holds the last step (and ``row``).
    * ``tile_done`` pulses when a row with ``tl`` enters the FIFO.
    * ``stages``: 1 -- a column group's select, shift, round, bias and clamp in one cycle (27 logic
      levels at KR260 size, docs/compute.md "Timing estimate"); 4 -- registers after the select
      and the shift amount, after the shift by whole bytes, and after the rest of the shift and
      the rounding (``fixed.rshift_round_coarse`` / ``_fine``): the same rows, three cycles later,
      at the same rate; FIFO back-pressure holds the whole pipeline.
    """

    def __init__(self, pn: int, lanes: int, fifo_depth: int, stages: int = 1):
        if stages not in (1, 4):
            raise ValueError(f"GemmRequantizer stages must be 1 or 4, got {stages!r}")
        self.pn, self.lanes, self.fifo_depth, self.stages = pn, lanes, fifo_depth, stages
        arr = data.ArrayLayout
        super().__init__({
            "row": In(stream.Signature(data.StructLayout({
                "acc": arr(signed(ACC_BITS), pn), "we": arr(signed(8), pn), "bias": arr(signed(32), pn),
                "xe": signed(8), "tl": 1}))),
            "y": Out(stream.Signature(data.StructLayout({"data": arr(signed(32), pn), "last": 1}))),
            "tile_done": Out(1),
        })

    def elaborate(self, platform):
        return self._one_stage() if self.stages == 1 else self._pipelined()

    def _row_regs(self):
        """(module, output FIFO, groups per row, the row being issued a column group (``lanes``
        columns) per cycle: busy, group, tl, xe, acc[], we[], bias[], the groups done (y[]), last
        group)."""
        m = Module()
        pn, Lr = self.pn, self.lanes
        m.submodules.ofifo = ofifo = SyncFIFOBuffered(width=pn * 32 + 1, depth=self.fifo_depth)
        R = pn // Lr
        rq_busy = Signal()
        rq_c = Signal(range(R))
        rq_tl = Signal()
        rq_xe = Signal(signed(8))
        rq_acc = [Signal(signed(ACC_BITS), name=f"rq_acc{n}") for n in range(pn)]
        rq_we = [Signal(signed(8), name=f"rq_we{n}") for n in range(pn)]
        rq_b = [Signal(signed(32), name=f"rq_b{n}") for n in range(pn)]
        rq_y = [Signal(signed(32), name=f"rq_y{n}") for n in range(pn - Lr)]   # columns done
        rq_last = rq_c == R - 1
        return m, ofifo, R, (rq_busy, rq_c, rq_tl, rq_xe, rq_acc, rq_we, rq_b, rq_y, rq_last)

    def _take(self, m, ofifo, take, g, w_data, w_en):
        """A row taken into the registers ``g`` (``_row_regs``); the FIFO's input and output."""
        rq_busy, rq_c, rq_tl, rq_xe, rq_acc, rq_we, rq_b, _y, _last = g
        pn = self.pn
        r = self.row.payload
        with m.If(take):
            m.d.sync += [rq_busy.eq(1), rq_c.eq(0), rq_tl.eq(r.tl), rq_xe.eq(r.xe)]
            m.d.sync += [rq_acc[n].eq(r.acc[n]) for n in range(pn)]
            m.d.sync += [rq_we[n].eq(r.we[n]) for n in range(pn)]
            m.d.sync += [rq_b[n].eq(r.bias[n]) for n in range(pn)]
        m.d.comb += [ofifo.w_data.eq(w_data), ofifo.w_en.eq(w_en)]
        m.d.comb += [self.y.valid.eq(ofifo.r_rdy), self.y.payload.eq(ofifo.r_data),
                     ofifo.r_en.eq(self.y.ready)]

    def _one_stage(self):
        m, ofifo, R, g = self._row_regs()
        Lr = self.lanes
        rq_busy, rq_c, rq_tl, rq_xe, rq_acc, rq_we, rq_b, rq_y, rq_last = g
        m.d.comb += self.row.ready.eq(~rq_busy | (rq_last & ofifo.w_rdy))
        take = self.row.valid & self.row.ready
        ys = []
        for j in range(Lr):
            col = [c * Lr + j for c in range(R)]
            sh = Signal(signed(10), name=f"rq_sh{j}")
            m.d.comb += sh.eq(Array(rq_we[n] for n in col)[rq_c] + rq_xe - FA)
            ys.append(sat(rshift_round(Array(rq_acc[n] for n in col)[rq_c], sh, max_left=33)
                          + Array(rq_b[n] for n in col)[rq_c], 32))
        with m.If(rq_busy & ~rq_last):
            m.d.sync += rq_c.eq(rq_c + 1)
            with m.Switch(rq_c):
                for c in range(R - 1):
                    with m.Case(c):
                        m.d.sync += [rq_y[c * Lr + j].eq(ys[j]) for j in range(Lr)]
        with m.If(rq_busy & rq_last & ofifo.w_rdy):
            m.d.sync += rq_busy.eq(0)
            m.d.comb += self.tile_done.eq(rq_tl)
        self._take(m, ofifo, take, g, Cat(*rq_y, *ys, rq_tl), rq_busy & rq_last)
        return m

    def _pipelined(self):
        m, ofifo, R, g = self._row_regs()
        Lr = self.lanes
        rq_busy, rq_c, rq_tl, rq_xe, rq_acc, rq_we, rq_b, rq_y, rq_last = g
        # three register stages: 1 the group's accumulators, shifts and biases; 2 shifted by whole
        # bytes; 3 shifted and rounded; then bias and clamp into rq_y / the FIFO
        S = 3
        v = [Signal(name=f"s{i}_v") for i in range(1, S + 1)]
        last = [Signal(name=f"s{i}_last") for i in range(1, S + 1)]
        tl = [Signal(name=f"s{i}_tl") for i in range(1, S + 1)]
        cc = [Signal(range(R), name=f"s{i}_c") for i in range(1, S + 1)]
        bias = [[Signal(signed(32), name=f"s{i}_b{j}") for j in range(Lr)] for i in range(1, S + 1)]
        s1_acc = [Signal(signed(ACC_BITS), name=f"s1_acc{j}") for j in range(Lr)]
        s1_sh = [Signal(signed(10), name=f"s1_sh{j}") for j in range(Lr)]
        coarse = [rshift_round_coarse(s1_acc[j], s1_sh[j], max_left=33) for j in range(Lr)]
        s2 = [{k: Signal.like(e, name=f"s2_{k}{j}") for k, e in c.items()} for j, c in enumerate(coarse)]
        fine = [rshift_round_fine(s2[j], max_left=33) for j in range(Lr)]
        s3_r = [Signal(signed(len(fine[j])), name=f"s3_r{j}") for j in range(Lr)]
        ys = [sat(s3_r[j] + bias[2][j], 32) for j in range(Lr)]
        # the pipeline moves unless its row's last group waits for room in the FIFO
        adv = ~(v[-1] & last[-1] & ~ofifo.w_rdy)
        m.d.comb += self.row.ready.eq(~rq_busy | (rq_last & adv))
        take = self.row.valid & self.row.ready
        with m.If(adv):
            m.d.sync += [v[0].eq(rq_busy), cc[0].eq(rq_c), last[0].eq(rq_last), tl[0].eq(rq_tl)]
            m.d.sync += [x.eq(y) for sig in (v, cc, last, tl) for x, y in zip(sig[1:], sig[:-1])]
            for j in range(Lr):
                col = [c * Lr + j for c in range(R)]
                m.d.sync += [s1_acc[j].eq(Array(rq_acc[n] for n in col)[rq_c]),
                             s1_sh[j].eq(Array(rq_we[n] for n in col)[rq_c] + rq_xe - FA),
                             bias[0][j].eq(Array(rq_b[n] for n in col)[rq_c]),
                             bias[1][j].eq(bias[0][j]), bias[2][j].eq(bias[1][j]), s3_r[j].eq(fine[j])]
                m.d.sync += [s2[j][k].eq(coarse[j][k]) for k in coarse[j]]
            with m.If(rq_busy):
                m.d.sync += rq_c.eq(rq_c + 1)
                with m.If(rq_last):
                    m.d.sync += [rq_busy.eq(0), rq_c.eq(0)]
            with m.If(v[-1] & ~last[-1]):
                with m.Switch(cc[-1]):
                    for c in range(R - 1):
                        with m.Case(c):
                            m.d.sync += [rq_y[c * Lr + j].eq(ys[j]) for j in range(Lr)]
        m.d.comb += self.tile_done.eq(v[-1] & last[-1] & tl[-1] & ofifo.w_rdy)
        self._take(m, ofifo, take, g, Cat(*rq_y, *ys, tl[-1]), v[-1] & last[-1])
        return m
