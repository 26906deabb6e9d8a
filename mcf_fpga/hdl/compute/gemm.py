"""GEMM array: INT4 group-scaled weights x INT8 activations, bit-exact to ``QuantLinear.__call__``.

Dataflow (weight-stationary, double-buffered weight tiles in a ring)::

    x_in  --LOAD_X-->  activation buffer  x[t, k] (int8) + xe[t]
    w_in  --RUN----->  weight ring + header/scale banks A|B  (one *tile* = ``pn`` output rows x K)
                        compute: for each tile, for t in tokens, for k-chunk c:
                           psum[n]  = sum_{k in chunk} q[n, k] * x[t, k]      (pk lanes per row)
                           gp[n]   += psum[n]           (group partial, exact in gp_bits; reset per group)
                           acc[n]  += ws[n, g] * gp[n]  (48-bit, at the end of each group: a DSP48E2 MACC)
                        requantize: y = sat32(rshift_round(acc, we[n] + xe[t] - FA) + bias[n])
    y_out <-- one beat per (tile, token): ``pn`` int32 values; ``last`` on the tile's last token.

The loader fills the next tile while the array computes the current one, so a tile's load is
hidden behind the previous tile's ``t * K / pk`` compute cycles. Headers and scales have two banks
(ping-pong); the weight rows are a ring of ``w_rows`` rows (kc_max..2*kc_max), tiles back to back,
the one loading right after the one issuing. Hazard rule: the next tile's row ``l`` lands on row
``kc + l - w_rows`` of the issued tile when ``kc + l >= w_rows``; the loader holds it (``w_in``
not ready) until the array's last token has read that row. Those are the loader's last rows
against the first rows of the last pass: at one weight beat per cycle w_rows > kc costs no cycles
and w_rows = kc at most one per tile (tested); a weight stream that needs r cycles per beat (no
buffer ahead of ``w_in``) loses at most r*(2*kc - w_rows) - kc per tile, +1 at w_rows = kc
(KR260: kc <= 280, 512 rows: none for r <= 5.8; DDR at 64 B/cycle is r = 4).

Commands (``cmd`` stream, one at a time; a command is taken only when the array is idle):

* ``op=LOAD_X, kc, t``: take ``t * kc`` beats from ``x_in`` (token-major, chunk-minor; every beat
  of a token carries the token's exponent ``e``; the last one is kept);
* ``op=RUN, tiles``: take ``tiles`` weight tiles from ``w_in`` (format below) and emit
  ``tiles * t`` beats on ``y_out`` using the shape of the last LOAD_X.

Weight-tile stream format (``w_in``, beat = ``pn * pk`` INT4 lanes = ``pn*pk*4`` bits)::

    beat 0 (header):   row n at bits [40n, 40n+40): bias[n] int32 (low 32), we[n] int8 (high 8)
    ceil(G / spb) scale beats (G = K/group groups, spb = pk/2 groups per beat):
                       ws[n, g] uint8 at bits [8(pn*j + n), 8(pn*j + n) + 8), g = b*spb + j
    K/pk weight beats: chunk c = g*group/pk + i: q[n, c*pk + k] int4 at bits [4(n*pk + k), ...+4)
    ``last`` is set on the final beat of the tile (checked: a mismatch sets ERR_FRAMING).

The loader writes one group's scales per cycle (it holds a scale beat on ``w_in``, not ready,
until its last group is written), so it takes 1 + G + K/pk cycles per tile as before, but the
tile is 1 + ceil(G/spb) + K/pk beats (K = 1536, pk = 32: 50 instead of 61), which is what a
DDR-fed weight stream pays for.

Back-pressure: ``y_out`` not ready stalls the whole array (global enable); the loader keeps
filling the next tile (up to the hazard rule). Nothing is dropped.

Errors (``error`` sticky bits, cleared by ``error_clr``): a refused command changes no state.
ERR_OPCODE unknown op; ERR_SHAPE kc/t/tiles outside [1, limit], kc not a multiple of
group/pk or t*kc > x_depth; ERR_FRAMING a tile's ``last`` misplaced; ERR_NO_X RUN before LOAD_X.

DSP packing (``pack2``): two rows n=2j, 2j+1 share each activation: the product
``(q[2j+1] * 2**18 + q[2j]) * x`` is one 23x8-bit multiply (fits the DSP48E2 27x18 port); the
chunk sum of packed products is split into the low (signed 18-bit) and high halves exactly,
because |sum_k q*x| <= 7*128*pk < 2**17 for pk <= 128.
"""
from amaranth import Module, Signal, Mux, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .gemm_mac import GemmMacPipeline, PACK_SHIFT  # noqa: F401 (gemm.PACK_SHIFT, as before)
from .gemm_requant import GemmRequantizer
from .gemm_weight_loader import GemmWeightLoader

__all__ = ["GemmArray", "GemmOp", "ERR_OPCODE", "ERR_SHAPE", "ERR_FRAMING", "ERR_NO_X",
           "pack_weight_tile", "tile_beats", "tile_load_cycles"]

ERR_OPCODE, ERR_SHAPE, ERR_FRAMING, ERR_NO_X = 1, 2, 4, 8


class GemmOp:
    LOAD_X = 0
    RUN = 1


def tile_beats(kc: int, cpg: int, pk: int) -> int:
    """Beats of one weight tile of ``kc`` chunks: header + the scale beats (pk/2 groups each) +
    ``kc`` weight beats."""
    return 1 + -(-(kc // cpg) // (pk // 2)) + kc


def tile_load_cycles(kc: int, cpg: int) -> int:
    """Cycles the loader takes for one tile at one beat per cycle: header + one per group's
    scales + ``kc`` weight beats."""
    return 1 + kc // cpg + kc


def pack_weight_tile(q, ws, we, bias, pk: int, group: int):
    """Host-side packer (also used by tests): rows of one tile -> list of (data, last) beats.

    q [pn, K] int in [-7, 7]; ws [pn, K/group] in [1, 255]; we [pn]; bias [pn] int32 (or None).
    """
    pn, K = len(q), len(q[0])
    beats = []
    h = 0
    for n in range(pn):
        b = 0 if bias is None else int(bias[n])
        h |= ((b & 0xFFFFFFFF) | ((int(we[n]) & 0xFF) << 32)) << (40 * n)
    beats.append(h)
    G, spb = K // group, pk // 2
    for b0 in range(0, G, spb):
        s = 0
        for j, g in enumerate(range(b0, min(b0 + spb, G))):
            for n in range(pn):
                s |= (int(ws[n][g]) & 0xFF) << (8 * (pn * j + n))
        beats.append(s)
    for g in range(G):
        for c in range(group // pk):
            w = 0
            for n in range(pn):
                for k in range(pk):
                    w |= (int(q[n][g * group + c * pk + k]) & 0xF) << (4 * (n * pk + k))
            beats.append(w)
    return [(b, int(i == len(beats) - 1)) for i, b in enumerate(beats)]


class GemmArray(wiring.Component):
    """INT4 x INT8 GEMM array with ``pn * pk`` MACs/cycle (see module docstring for the contract).

    Parameters: pn output rows per tile, pk input lanes, group (QuantLinear group size, a
    multiple of pk), kc_max (max K/pk), x_depth (activation buffer words of pk bytes),
    t_max (max tokens), pack2 (two INT4 products per multiplier), fifo_depth (output FIFO),
    rq_lanes (columns requantized per cycle; default: the fewest that keep up with full rate),
    rq_stages (the requantizer's pipeline: 1 or 4, ``GemmRequantizer``), mac_pipelined (the MAC
    pipeline's dot products in stages: ``GemmMacPipeline(pipelined=True)``; ``mac_tree_arity``
    terms summed per stage of its adder tree, ``GemmMacPipeline(tree_arity=...)``), check_pipelined
    (a LOAD_X is checked a cycle after it is taken, from its registered fields and ``kc * t``:
    one cycle more per LOAD_X, no multiply between the command port and the control state),
    w_rows (weight ring rows of ``pn*pk*4`` bits, kc_max <= w_rows <= 2*kc_max; default
    2*kc_max: the loader never waits for the array's reads; fewer rows hold a late weight beat
    of the next tile until the current tile's last token has read the row it overwrites).
    """

    def __init__(self, pn=4, pk=16, group=32, kc_max=16, x_depth=256, t_max=16, pack2=True,
                 fifo_depth=4, rq_lanes=None, w_rows=None, rq_stages=1, mac_pipelined=False, mac_tree_arity=8,
                 check_pipelined=False):
        if pk < 10:
            raise ValueError(f"GemmArray: pk={pk} must be >= 10 (the tile header packs 40 bits per row)")
        if pk > 128:
            raise ValueError(f"GemmArray: pk={pk} must be <= 128 (exact DSP packing bound)")
        if group % pk:
            raise ValueError(f"GemmArray: group={group} must be a multiple of pk={pk}")
        if pack2 and pn % 2:
            raise ValueError(f"GemmArray: pn={pn} must be even with pack2")
        self.pn, self.pk, self.group = pn, pk, group
        self.cpg = group // pk
        if kc_max % self.cpg:
            raise ValueError(f"GemmArray: kc_max={kc_max} must be a multiple of group/pk={self.cpg}")
        self.kc_max, self.x_depth, self.t_max = kc_max, x_depth, t_max
        self.gmax = kc_max // self.cpg
        self.pack2, self.fifo_depth = pack2, fifo_depth
        if rq_lanes is None:       # fewest lanes that keep up: pn / rq_lanes <= group/pk cycles per row
            rq_lanes = min(L for L in range(1, pn + 1) if pn % L == 0 and pn // L <= self.cpg)
        if not (1 <= rq_lanes <= pn and pn % rq_lanes == 0):
            raise ValueError(f"GemmArray: rq_lanes={rq_lanes} must divide pn={pn}")
        self.rq_lanes = rq_lanes
        if rq_stages not in (1, 4):
            raise ValueError(f"GemmArray: rq_stages={rq_stages!r} must be 1 or 4")
        self.rq_stages, self.mac_pipelined, self.check_pipelined = rq_stages, mac_pipelined, check_pipelined
        self.mac_tree_arity = mac_tree_arity
        if w_rows is None:
            w_rows = 2 * kc_max
        if not kc_max <= w_rows <= 2 * kc_max:
            raise ValueError(f"GemmArray: w_rows={w_rows} must be in [kc_max={kc_max}, 2*kc_max={2 * kc_max}]")
        self.w_rows = w_rows
        self.peak_macs = pn * pk
        self.cmd_layout = data.StructLayout({"op": 2, "kc": 16, "t": 16, "tiles": 16})
        super().__init__({
            "cmd": In(stream.Signature(self.cmd_layout)),
            "x_in": In(stream.Signature(data.StructLayout({"data": pk * 8, "e": signed(8)}))),
            "w_in": In(stream.Signature(data.StructLayout({"data": pn * pk * 4, "last": 1}))),
            "y_out": Out(stream.Signature(data.StructLayout({
                "data": data.ArrayLayout(signed(32), pn), "last": 1}))),
            "error": Out(4),
            "error_clr": In(1),
            "busy": Out(1),
        })

    def _refusals(self, c):
        """(unknown op, bad LOAD_X fields, bad RUN shape) of the command payload ``c``; a LOAD_X is
        refused for its fields or for :meth:`_too_long`."""
        bad_fields_x = (c.kc == 0) | (c.kc > self.kc_max) | (c.t == 0) | (c.t > self.t_max)
        if self.cpg > 1:
            bad_fields_x = bad_fields_x | (c.kc % self.cpg != 0)
        return c.op > GemmOp.RUN, bad_fields_x, c.tiles == 0

    def _too_long(self, kct):
        """kc * t = ``kct`` beyond the activation memory: the bits above x_depth's ORed beside a
        compare of the rest (no carry chain the product's width)."""
        n = self.x_depth.bit_length()
        return kct[n:].any() | (kct[:n] > self.x_depth)

    @staticmethod
    def _load_x(m, c, bad, err, regs):
        """A LOAD_X of fields ``c``: refused (ERR_SHAPE, nothing changes) or started (LOADX)."""
        kc, nt, kc_m1, nt_m1, have_x, lx_cnt, lx_tok, lx_c = regs
        with m.If(bad):
            m.d.sync += err.eq(err | ERR_SHAPE)
        with m.Else():
            m.d.sync += [kc.eq(c.kc), nt.eq(c.t), kc_m1.eq(c.kc - 1), nt_m1.eq(c.t - 1), have_x.eq(0),
                         lx_cnt.eq(0), lx_tok.eq(0), lx_c.eq(0)]
            m.next = "LOADX"

    def _memories(self, m):
        """The activation, exponent, weight-ring and scale memories: (wmem, wsmem, the ports the
        array uses: x and xe write, x, xe, w and ws read)."""
        pn, pk = self.pn, self.pk
        m.submodules.xmem = xmem = Memory(shape=unsigned(pk * 8), depth=self.x_depth, init=[], attrs={"ram_style": "ultra"})
        m.submodules.xemem = xemem = Memory(shape=signed(8), depth=self.t_max, init=[])
        m.submodules.wmem = wmem = Memory(shape=unsigned(pn * pk * 4), depth=self.w_rows, init=[])
        m.submodules.wsmem = wsmem = Memory(shape=unsigned(pn * 8), depth=2 * self.gmax, init=[])
        x_wp, xe_wp = xmem.write_port(), xemem.write_port()
        return wmem, wsmem, (x_wp, xe_wp, xmem.read_port(), xemem.read_port(), wmem.read_port(), wsmem.read_port())

    def elaborate(self, platform):
        m = Module()
        pn, pk, cpg, kc_max, gmax, w_rows = self.pn, self.pk, self.cpg, self.kc_max, self.gmax, self.w_rows

        wmem, wsmem, (x_wp, xe_wp, x_rp, xe_rp, w_rp, ws_rp) = self._memories(m)
        full = Signal(2)                 # header/scale bank b holds a loaded tile not yet retired
        # ... and one the array has not finished issuing (issue waits for this, not for `full`: a
        # short tile's bank can still be full with the tile two back, in flight in the MAC pipeline)
        unissued = Signal(2)

        # ---------------------------------------------------------------- command / control
        # kc - 1 and nt - 1 are set with kc and nt (compares against registers)
        kc, nt, kc_m1, nt_m1, tiles = (Signal(16, name=n) for n in ("kc", "nt", "kc_m1", "nt_m1", "tiles"))
        have_x = Signal()
        err = Signal(4)
        m.d.comb += self.error.eq(err)
        with m.If(self.error_clr):
            m.d.sync += err.eq(0)

        c = self.cmd.payload
        bad_op, bad_fields_x, bad_shape_r = self._refusals(c)
        if self.check_pipelined:
            # LOAD_X: its fields, their checks and kc * t registered as it is taken, checked in LXCHK
            cx = Signal(self.cmd_layout, name="cx")
            cx_kct = Signal(32, name="cx_kct")
            cx_bad = Signal(name="cx_bad_fields")
            bad_shape_x = cx_bad | self._too_long(cx_kct)
        else:
            bad_shape_x = bad_fields_x | self._too_long(c.kc * c.t)

        lx_cnt = Signal(range(self.x_depth + 1))
        lx_tok = Signal(range(self.t_max + 1))
        lx_c = Signal(16)
        i_tiles = Signal(16)     # tiles fully issued
        i_more, tiles_m1 = Signal(name="i_more"), Signal(16, name="tiles_m1")    # i_tiles != tiles, a register
        o_tiles = Signal(16)     # tiles fully emitted
        r_addr = Signal(range(w_rows))   # ring row the array reads next
        r_base = Signal(range(w_rows))   # ring row 0 of the tile being issued
        run_start = Signal()

        def ring_next(a):
            return Mux(a == w_rows - 1, 0, a + 1)

        with m.FSM(name="ctl") as fsm:
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(self.cmd.valid):
                    with m.If(bad_op):
                        m.d.sync += err.eq(err | ERR_OPCODE)
                    with m.Elif(c.op == GemmOp.LOAD_X):
                        if self.check_pipelined:
                            m.d.sync += [cx.eq(c), cx_kct.eq(c.kc * c.t), cx_bad.eq(bad_fields_x)]
                            m.next = "LXCHK"
                        else:
                            self._load_x(m, c, bad_shape_x, err, (kc, nt, kc_m1, nt_m1, have_x, lx_cnt, lx_tok, lx_c))
                    with m.Else():
                        with m.If(bad_shape_r):
                            m.d.sync += err.eq(err | ERR_SHAPE)
                        with m.Elif(~have_x):
                            m.d.sync += err.eq(err | ERR_NO_X)
                        with m.Else():
                            # all earlier tiles are emitted (RUN left only at o_tiles == tiles):
                            # the ring is empty, start it at row 0 (the loader's too: run_start)
                            m.d.comb += run_start.eq(1)
                            m.d.sync += [tiles.eq(c.tiles), tiles_m1.eq(c.tiles - 1), i_more.eq(1),
                                         i_tiles.eq(0), o_tiles.eq(0),
                                         r_addr.eq(0), r_base.eq(0)]
                            m.next = "RUN"
            if self.check_pipelined:
                with m.State("LXCHK"):
                    self._load_x(m, cx, bad_shape_x, err, (kc, nt, kc_m1, nt_m1, have_x, lx_cnt, lx_tok, lx_c))
                    with m.If(bad_shape_x):
                        m.next = "IDLE"
            with m.State("LOADX"):
                m.d.comb += [self.x_in.ready.eq(1),
                             x_wp.addr.eq(lx_cnt), x_wp.data.eq(self.x_in.payload.data),
                             x_wp.en.eq(self.x_in.valid),
                             xe_wp.addr.eq(lx_tok), xe_wp.data.eq(self.x_in.payload.e),
                             xe_wp.en.eq(self.x_in.valid & (lx_c == kc_m1))]
                with m.If(self.x_in.valid):
                    m.d.sync += lx_cnt.eq(lx_cnt + 1)
                    with m.If(lx_c == kc_m1):
                        m.d.sync += [lx_c.eq(0), lx_tok.eq(lx_tok + 1)]
                        with m.If(lx_tok == nt_m1):
                            m.d.sync += have_x.eq(1)
                            m.next = "IDLE"
                    with m.Else():
                        m.d.sync += lx_c.eq(lx_c + 1)
            with m.State("RUN"):
                with m.If(o_tiles == tiles):
                    m.next = "IDLE"
        running = fsm.ongoing("RUN")
        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE"))

        # issue state (the loader's hazard rule reads it; updated in the issue section)
        rd_buf = Signal()
        i_t = Signal(16)
        i_c = Signal(16)

        # ---------------------------------------------------------------- weight loader
        m.submodules.loader = ld = GemmWeightLoader(pn, pk, cpg, kc_max, w_rows)
        wiring.connect(m, wiring.flipped(self.w_in), ld.w_in)
        wiring.connect(m, ld.w_wr, wmem.write_port())
        wiring.connect(m, ld.ws_wr, wsmem.write_port())
        m.d.comb += [ld.start.eq(run_start), ld.running.eq(running), ld.tiles.eq(tiles), ld.kc.eq(kc),
                     ld.kc_m1.eq(kc_m1), ld.full.eq(full), ld.rd_buf.eq(rd_buf), ld.rd_last_token.eq(i_t == nt_m1),
                     ld.rd_chunk.eq(i_c)]
        with m.If(ld.framing):
            m.d.sync += err.eq(err | ERR_FRAMING)
        with m.If(ld.tile_loaded):
            m.d.sync += [full.bit_select(ld.wr_buf, 1).eq(1), unissued.bit_select(ld.wr_buf, 1).eq(1)]

        # ---------------------------------------------------------------- issue
        en = Signal()
        i_g = Signal(16)
        i_cg = Signal(range(cpg + 1))
        i_x = Signal(range(self.x_depth + 1))
        issue = Signal()
        m.d.comb += issue.eq(running & i_more & unissued.bit_select(rd_buf, 1))
        m.d.comb += [
            x_rp.addr.eq(i_x), xe_rp.addr.eq(i_t),
            w_rp.addr.eq(r_addr), ws_rp.addr.eq(i_g + Mux(rd_buf, gmax, 0)),
            x_rp.en.eq(en), xe_rp.en.eq(en), w_rp.en.eq(en), ws_rp.en.eq(en),
        ]
        row_last0 = i_c == kc_m1
        tile_last0 = row_last0 & (i_t == nt_m1)
        with m.If(en & issue):
            m.d.sync += [i_x.eq(i_x + 1), i_c.eq(i_c + 1), i_cg.eq(i_cg + 1), r_addr.eq(ring_next(r_addr))]
            with m.If(i_cg == cpg - 1):
                m.d.sync += [i_cg.eq(0), i_g.eq(i_g + 1)]
            with m.If(row_last0):
                # next token: back to the tile's first ring row
                m.d.sync += [i_c.eq(0), i_g.eq(0), i_cg.eq(0), i_t.eq(i_t + 1), r_addr.eq(r_base)]
                with m.If(tile_last0):
                    # next tile: the ring row after this one's last
                    m.d.sync += [i_t.eq(0), i_x.eq(0), rd_buf.eq(~rd_buf), i_tiles.eq(i_tiles + 1),
                                 i_more.eq(i_tiles != tiles_m1),
                                 r_addr.eq(ring_next(r_addr)), r_base.eq(ring_next(r_addr)),
                                 unissued.bit_select(rd_buf, 1).eq(0)]

        # ---------------------------------------------------------------- MAC pipeline (stages 1-4)
        m.submodules.mac = mac = GemmMacPipeline(pn, pk, self.pack2, pipelined=self.mac_pipelined, group=self.group,
                                                    tree_arity=self.mac_tree_arity)
        ch = mac.chunk
        m.d.comb += [mac.en.eq(en), ch.v.eq(issue), ch.gf.eq(i_cg == 0), ch.gl.eq(i_cg == cpg - 1),
                     ch.fg.eq(i_g == 0), ch.rl.eq(row_last0), ch.tl.eq(tile_last0), ch.buf.eq(rd_buf),
                     mac.w.eq(w_rp.data), mac.x.eq(x_rp.data), mac.ws.eq(ws_rp.data), mac.xe.eq(xe_rp.data)]

        self._requantize(m, mac, ld, en, o_tiles, full)
        return m

    def _requantize(self, m, mac, ld, en, o_tiles, full):
        """Stage 5: a stage-4 row is taken with copies of its tile's exponents and biases (the bank
        is freed at once); pn / rq_lanes <= group/pk cycles per row: at full rate the array never
        waits. ``en``: the array's enable (the requantizer takes the row); ``o_tiles`` counts."""
        pn = self.pn
        m.submodules.requant = rq = GemmRequantizer(pn, self.rq_lanes, self.fifo_depth, stages=self.rq_stages)
        s4, r = mac.row, rq.row.payload
        m.d.comb += [rq.row.valid.eq(s4.v), en.eq(~s4.v | rq.row.ready),
                     r.acc.eq(s4.acc), r.xe.eq(s4.xe), r.tl.eq(s4.tl)]
        m.d.comb += [r.we[n].eq(Mux(s4.buf, ld.we[1][n], ld.we[0][n])) for n in range(pn)]
        m.d.comb += [r.bias[n].eq(Mux(s4.buf, ld.bias[1][n], ld.bias[0][n])) for n in range(pn)]
        with m.If(rq.tile_done):
            m.d.sync += o_tiles.eq(o_tiles + 1)
        with m.If(rq.row.valid & rq.row.ready & s4.tl):
            m.d.sync += full.bit_select(s4.buf, 1).eq(0)
        wiring.connect(m, rq.y, wiring.flipped(self.y_out))
