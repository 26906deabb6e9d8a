"""GEMM requantizer: 48-bit row accumulators to int32 outputs (QuantLinear), into the output FIFO."""
from amaranth import Module, Signal, Cat, Array, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.numerics import FA, ACC_BITS
from .fixed import rshift_round, sat

__all__ = ["GemmRequantizer"]


class GemmRequantizer(wiring.Component):
    """``y[n] = sat32(rshift_round(acc[n], we[n] + xe - FA) + bias[n])``, ``lanes`` columns per cycle.

    * ``row`` ``{acc[pn], we[pn], bias[pn], xe, tl}`` is taken (ready) when the requantizer is
      free: idle, or in its last step with the FIFO able to take the result. A row takes
      ``pn / lanes`` cycles; it is copied in, so its sources may change at once.
    * ``y`` ``{data[pn], last = tl}``: the rows in order, through a ``fifo_depth`` buffered FIFO;
      back-pressure on ``y`` fills the FIFO, then holds the last step (and ``row``).
    * ``tile_done`` pulses when a row with ``tl`` enters the FIFO.
    """

    def __init__(self, pn: int, lanes: int, fifo_depth: int):
        self.pn, self.lanes, self.fifo_depth = pn, lanes, fifo_depth
        arr = data.ArrayLayout
        super().__init__({
            "row": In(stream.Signature(data.StructLayout({
                "acc": arr(signed(ACC_BITS), pn), "we": arr(signed(8), pn), "bias": arr(signed(32), pn),
                "xe": signed(8), "tl": 1}))),
            "y": Out(stream.Signature(data.StructLayout({"data": arr(signed(32), pn), "last": 1}))),
            "tile_done": Out(1),
        })

    def elaborate(self, platform):
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
        r = self.row.payload
        with m.If(take):
            m.d.sync += [rq_busy.eq(1), rq_c.eq(0), rq_tl.eq(r.tl), rq_xe.eq(r.xe)]
            m.d.sync += [rq_acc[n].eq(r.acc[n]) for n in range(pn)]
            m.d.sync += [rq_we[n].eq(r.we[n]) for n in range(pn)]
            m.d.sync += [rq_b[n].eq(r.bias[n]) for n in range(pn)]
        m.d.comb += [ofifo.w_data.eq(Cat(*rq_y, *ys, rq_tl)), ofifo.w_en.eq(rq_busy & rq_last)]
        m.d.comb += [self.y.valid.eq(ofifo.r_rdy), self.y.payload.eq(ofifo.r_data),
                     ofifo.r_en.eq(self.y.ready)]
        return m
