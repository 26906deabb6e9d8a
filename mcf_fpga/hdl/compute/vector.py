"""Vector unit: golden's integer element-wise and row operations, one element per cycle.

Command (``cmd`` stream, taken when idle): ``op, len, rows, frac, bits, eps_q``; the unit then
processes ``rows`` rows of ``len`` elements from ``a_in`` (int32) and, for binary ops, ``b_in``.
``o_out`` carries one result per element (``data`` signed 40 bits, ``e`` the row exponent for
the quantizing ops, ``last`` on each row's final element). Back-pressure on ``o_out`` stalls the
unit without loss: element-wise inputs are only taken when the result can be stored, row-op inputs
while the row buffer has room.

=========  ===========================================================  ====================
op         result (mcf_fpga/golden/numerics.py)                                  inputs per row
=========  ===========================================================  ====================
ADD    0   sat32(a + b)  (residual add)                                 a: len, b: len
SWIGLU 1   swiglu_fixed(a=gate, b=up, frac)                             a: len, b: len
QUANT  2   quantize_pow2(a, frac, bits) -> (q, e)                       a: len
RMSNORM 3  rmsnorm_quant(a, eps, bits), eps_q = round(eps * 2**(2FA))   a: len
ROPE   4   rope_fixed(a, cos, sin) over one head row (pairs i, i+len/2), sat32 a: len, b: len/2
           b = cos (Q14, bits 0..15) | sin (Q14, bits 16..31)
=========  ===========================================================  ====================

Row operations (QUANT, RMSNORM, ROPE) run in three concurrent stages over a ring buffer of
``depth`` int32 words (default ``2 * d_max``) holding up to three rows: *load* takes row r+1 from
``a_in`` (one element per cycle, computing max|a|) while *scale* (RMSNORM only: RmsNormScale's
shifted sum of squares over the buffered row, the 48-cycle divider and the RSQRT ROM) works on
row r and *emit* outputs row r-1 (ROPE: two half-row passes taking ``b_in`` in the first). A row
is loaded once a slot and ``len`` ring words are free, so two rows of any length and three of up
to ``depth / 3`` are in flight. Busy cycles of a command at full-rate streams: QUANT and ROPE
``rows * (len + 1) + len``, RMSNORM ``rows * (len + 53) + 2 * len + 1`` when three rows fit
(one row alone: 2 and 3 passes, as before). Outputs come in row order; ``o_out`` back-pressure
stalls only the emit stage (the others go on until the ring is full).

``pipelined=True``: the result path runs in registered stages (``VectorResultPipe``, the logic
after the row buffer and the input streams cut into ``LATENCY`` = 8 steps for timing) and so does
RMSNORM's scale stage (``RmsNormScale(pipelined=True)``, ``PIPE_EXTRA`` = 10 more cycles per row):
the same results in the same order, one per cycle, each ``LATENCY - 1`` cycles later; ``busy``
stays high until the last result has left. A row's max|a| is kept as its bit length, registered
the cycle after its load ends (the scale and emit stages see the row loaded a cycle later: one
more cycle for a row they waited for). Default off (the presets' Verilog as before).

``pairs=True`` (with ``pipelined``): the command's ``pair`` bit makes ADD and SWIGLU take two
elements a beat (``a_in`` / ``b_in`` ``data`` and ``data1``: elements i and i + 1, i even) and emit
two results a beat (``o_out`` ``data``, ``data1``; ``last`` on the beat of the row's last element)
through a second result pipe: ``len`` even, ``rows * len / 2`` cycles. ``pair`` with another op or
an odd ``len``: ERR_SHAPE. The row ops take one element a beat.

``quant_pairs=True`` (with ``pairs``): QUANT takes ``pair`` too. The ring is then a
:class:`PairedScratchpad` (rows of two words, the same memory); the load stage writes a beat's two
elements as one even-aligned pair and takes the max over both, the emit stage reads a pair and sends
its elements through the two result pipes: ``rows * (len / 2 + 1) + len / 2`` busy cycles. ROPE
still takes one element a beat (``pair``: ERR_SHAPE).

``rms_pairs=True`` (with ``quant_pairs``): RMSNORM takes ``pair`` too: the load and emit stages as
QUANT's, the scale stage reads a pair a cycle and RmsNormScale(pairs=True) rounds and squares
both and sums the squares: ``rows * (len / 2 + 54) + len + 1`` busy cycles
when three rows fit.

Errors (sticky ``error`` bits, cleared by ``error_clr``; a refused command consumes nothing):
ERR_OPCODE unknown op; ERR_SHAPE len == 0, len > d_max, rows == 0, odd len for ROPE,
bits outside [2, 8] or frac > 30.
"""
from types import SimpleNamespace

from amaranth import Module, Signal, Const, Mux, Array, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.numerics import FR, SIG_STEP_BITS
from .fixed import rshift_round, bitlen, bitlen_of_range, bitlen_of_range_parts, bitlen_plus, sat, abs_u
from .paired_scratchpad import PairedScratchpad
from .rmsnorm_scale import RmsNormScale
from .rope_rotator import RopeRotator
from .swiglu import SwiGluLane
from .vector_result_pipe import ResultKind, VectorResultPipe, qclamp

__all__ = ["VectorUnit", "VecOp", "ERR_OPCODE", "ERR_SHAPE"]

ERR_OPCODE, ERR_SHAPE = 1, 2
#: rows in flight in the row path (loaded or loading, not yet emitted): one per stage
ROW_SLOTS = 3


class VecOp:
    ADD = 0
    SWIGLU = 1
    QUANT = 2
    RMSNORM = 3
    ROPE = 4


class _RowEnd:
    """A stage's place in its row as two registers: ``left``, the beats after this one, and
    ``end``, this beat is the row's last -- so that a stage's end is a flip-flop, not a compare of
    its index against the row's length (the whole engine's slowest path ran through that compare).
    ``start(m1, one)``: statements for a row of ``m1 + 1`` beats about to begin (``one``: it has
    one beat, a compare of the command's length itself, not of ``m1`` -- timing); ``advance(m1)``:
    for a beat taken (the next beat's, or the next row's first when this was the last)."""

    def __init__(self, name):
        self.left, self.end = Signal(16, name=f"{name}_left"), Signal(name=f"{name}_end")

    def start(self, m1, one):
        return [self.left.eq(m1), self.end.eq(one)]

    def advance(self, m1):
        return [self.left.eq(Mux(self.end, m1, self.left - 1)),
                self.end.eq(Mux(self.end, m1 == 0, self.left == 1))]


class _Rows:
    """The row path's shared state: the command; per stage (load ``a``, scale ``b``, emit ``c``) its
    finished-row count, metadata slot and the ring address of its row's first element; per slot
    the row's max|a| and (from the scale stage) its RMSNorm exponent and reciprocal RMS; ``occ``,
    the ring words held by rows loaded and not yet emitted. The beats of a row less one
    (``beats_m1``: ``len - 1``, a pair command ``len / 2 - 1``; ``emit_m1``: the same, ROPE's half
    rows ``len / 2 - 1``) are registers set with the command and each stage (and ELEM) counts its
    row down in a :class:`_RowEnd`. ``fast``: the last row (``rows - 1``) and the op's decode
    (``is_rms``, ``is_rope``) are registers too, not logic on every use (the pipelined unit's
    timing)."""

    def __init__(self, cfg, depth, slots, fast=False, pairs=False, bitlen_stages=1):
        self.cfg, self.ln, self.depth, self.slots, self.fast = cfg, cfg.len, depth, slots, fast
        self.bitlen_stages = bitlen_stages
        self.pairs = pairs
        self.beats_m1, self.emit_m1 = Signal(16, name="beats_m1"), Signal(16, name="emit_m1")
        self.ends = {st: _RowEnd(f"{st}_row") for st in ("elem", "load", "scale", "emit")}
        self.on = Signal()                  # a row command runs
        self.is_rms = cfg.op == VecOp.RMSNORM
        self.is_rope = cfg.op == VecOp.ROPE
        self.rows_m1 = cfg.rows - 1
        if fast:
            self.is_rms, self.is_rope = Signal(name="is_rms"), Signal(name="is_rope")
            self.rows_m1 = Signal(16, name="rows_m1")
        self.half = Signal(15)
        aw = max(1, (depth - 1).bit_length())
        for st in "abc":
            setattr(self, "n" + st, Signal(16, name="rows_" + st))
            setattr(self, "slot_" + st, Signal(range(slots), name="slot_" + st))
            setattr(self, "base_" + st, Signal(aw, name="base_" + st))
        self.occ = Signal(range(depth + 1))
        self.a_end, self.c_end = Signal(), Signal()
        if fast:
            self.room_q = Signal(name="load_room")
            # per slot the bit length of the row's max|a| (all the later stages use of it), set
            # the cycle after the row's load ends; ``na_d``: rows loaded as the later stages see
            # them (``na`` a cycle late, when that row's ``bl`` is in)
            # (bitlen_stages=2: two cycles late, ``bl`` computed in two)
            self.bl = Array(Signal(6, name=f"bl{k}") for k in range(slots))
            self.na_d = Signal(16, name="rows_a_d")
            if bitlen_stages == 2:
                self.na_d0 = Signal(16, name="rows_a_d0")     # ``na`` a cycle late, na_d two
            # ring(base_c + half), ROPE's partner of the emit row's element 0: stepped beside
            # base_c (set from the command's len, base_c 0), not added and wrapped from it
            self.h0_c = Signal(aw, name="emit_h0")
        else:
            self.mx = Array(Signal(33, name=f"mx{k}") for k in range(slots))
        self.e = Array(Signal(signed(8), name=f"e{k}") for k in range(slots))
        self.r = Array(Signal(FR + 1, name=f"r{k}") for k in range(slots))

    def ring(self, x):
        """Ring address of ``x`` < 2 * depth."""
        return Mux(x >= self.depth, x - self.depth, x)[:len(self.base_a)]

    def next_row(self, st):
        """Statements: stage ``st`` finished a row (count it, move to the next slot and row)."""
        n, slot, base = (getattr(self, x + st) for x in ("n", "slot_", "base_"))
        wrap = slot == self.slots - 1
        stmts = [n.eq(n + 1), slot.eq(Mux(wrap, 0, slot + 1)), base.eq(self.ring(base + self.ln))]
        if self.fast and st == "c":
            stmts.append(self.h0_c.eq(self.ring(self.h0_c + self.ln)))
        return stmts

    def load(self, c):
        """Statements for a new command ``c``: the beat counts, each stage's row start (and the
        ``fast`` registers)."""
        half_m1, len_m1 = ((c.len >> 1) - 1)[:16], (c.len - 1)[:16]
        half_one, len_one = (c.len >> 1) == 1, c.len == 1      # the m1 above is 0
        pair = c.pair if self.pairs else 0
        halves = pair | (c.op == VecOp.ROPE)
        beats_m1, beats_one = Mux(pair, half_m1, len_m1), Mux(pair, half_one, len_one)
        emit_m1, emit_one = Mux(halves, half_m1, len_m1), Mux(halves, half_one, len_one)
        stmts = [self.beats_m1.eq(beats_m1), self.emit_m1.eq(emit_m1)]
        for st, end in self.ends.items():
            stmts += end.start(*((emit_m1, emit_one) if st == "emit" else (beats_m1, beats_one)))
        if not self.fast:
            return stmts
        return stmts + [self.rows_m1.eq(c.rows - 1), self.h0_c.eq(c.len >> 1),
                        self.is_rms.eq(c.op == VecOp.RMSNORM), self.is_rope.eq(c.op == VecOp.ROPE),
                        self.room_q.eq(self.occ + c.len <= self.depth)]      # no rows held (reset)

    def row_end(self, st):
        """Stage ``st``'s beat is its row's last (ROPE's emit: its half row's)."""
        return self.ends[st].end

    def advance(self, st):
        """Statements: stage ``st`` took a beat."""
        return self.ends[st].advance(self.emit_m1 if st == "emit" else self.beats_m1)

    def reset(self):
        return [getattr(self, x + st).eq(0) for st in "abc" for x in ("n", "slot_", "base_")] + (
            [self.na_d.eq(0)] if self.fast else []) + ([self.na_d0.eq(0)] if self.bitlen_stages == 2 else [])

    def loaded(self):
        """Rows whose load is complete as the scale and emit stages may use them."""
        return self.na_d if self.fast else self.na

    def max_bitlen(self, slot):
        """bitlen(max|a|) of the row in ``slot`` (``fast``: a register)."""
        return self.bl[slot] if self.fast else bitlen(self.mx[slot])

    def ring_room(self):
        """A slot free and ``len`` ring words free, from this cycle's counts."""
        return ((self.na - self.nc)[:16] < self.slots) & (self.occ + self.ln <= self.depth)

    def room(self):
        """The load stage may start a row: :meth:`ring_room` (``fast``: a register that equals it,
        see :meth:`track`)."""
        return self.room_q if self.fast else self.ring_room()

    def track(self, m):
        """``occ`` follows rows loaded (``a_end``) and emitted (``c_end``). ``fast``: ``occ +/- len``
        come from registers alone and the two ends only select (they are late in the cycle); so
        does ``room_q``, :meth:`room` of the next cycle's rows held and ``occ`` (the load stage's
        start was the whole engine's slowest path into reader A)."""
        if not self.fast:
            m.d.sync += self.occ.eq(self.occ + Mux(self.a_end, self.ln, 0) - Mux(self.c_end, self.ln, 0))
            return
        up, down = Signal.like(self.occ, name="occ_up"), Signal.like(self.occ, name="occ_down")
        m.d.comb += [up.eq(self.occ + self.ln), down.eq(self.occ - self.ln)]
        held = (self.na - self.nc)[:16]                 # rows loaded, not yet emitted
        with m.If(self.a_end & ~self.c_end):
            m.d.sync += [self.occ.eq(up), self.room_q.eq((held < self.slots - 1) & (self.occ + self.ln + self.ln <= self.depth))]
        with m.Elif(self.c_end & ~self.a_end):     # (down + len = occ <= depth)
            m.d.sync += [self.occ.eq(down), self.room_q.eq(held <= self.slots)]
        with m.Else():
            m.d.sync += self.room_q.eq((held < self.slots) & (self.occ + self.ln <= self.depth))


class VectorUnit(wiring.Component):
    """See the module docstring. ``d_max``: longest row (elements); ``depth``: the row ring
    buffer's words (default ``2 * d_max``: two rows of any length in flight, three up to
    ``depth / 3``); ``pipelined``: the staged result path; ``pairs``, ``quant_pairs``,
    ``rms_pairs``: two elements a beat (module docstring); ``bitlen_stages`` (1 or 2, 2 with
    ``pipelined``): the cycles a row's max|a| bit length takes after its load (2: the scale and
    emit stages see each row a cycle later, the same results; timing); ``cmd_stage``: the command
    is taken into a register (``cmd.ready`` while it is empty) and checked and started from it a
    cycle later, the check's field compares registered beside it (timing: the accept no longer
    reaches the row state's enables through the checks; a cycle more per command)."""

    def __init__(self, d_max=256, depth=None, pipelined=False, pairs=False, quant_pairs=False, rms_pairs=False,
                 bitlen_stages=1, cmd_stage=False):
        self.cmd_stage = bool(cmd_stage)
        if bitlen_stages not in (1, 2) or (bitlen_stages == 2 and not pipelined):
            self._MustUse__silence = True
            raise ValueError(f"bitlen_stages={bitlen_stages} must be 1, or 2 with pipelined=True")
        self.bitlen_stages = bitlen_stages
        if pairs and not pipelined:
            self._MustUse__silence = True
            raise ValueError("pairs=True needs pipelined=True (a second result pipe)")
        if quant_pairs and not pairs:
            self._MustUse__silence = True
            raise ValueError("quant_pairs=True needs pairs=True")
        self.d_max, self.depth, self.pipelined, self.pairs = d_max, depth or 2 * d_max, pipelined, pairs
        if rms_pairs and not quant_pairs:
            self._MustUse__silence = True
            raise ValueError("rms_pairs=True needs quant_pairs=True")
        self.quant_pairs, self.rms_pairs = quant_pairs, rms_pairs
        if quant_pairs and self.depth % 2:
            self._MustUse__silence = True
            raise ValueError(f"depth={self.depth} must be even with quant_pairs (rows of two words)")
        assert self.depth >= d_max
        self.cmd_layout = data.StructLayout({"op": 3, "len": 16, "rows": 16, "frac": 6, "bits": 4,
                                             "eps_q": 32, **({"pair": 1} if pairs else {})})
        w1 = {"data1": signed(32)} if pairs else {}
        super().__init__({
            "cmd": In(stream.Signature(self.cmd_layout)),
            "a_in": In(stream.Signature(data.StructLayout({"data": signed(32), **w1}))),
            "b_in": In(stream.Signature(data.StructLayout({"data": signed(32), **w1}))),
            "o_out": Out(stream.Signature(data.StructLayout({"data": signed(40), "e": signed(8),
                                                             "last": 1,
                                                             **({"data1": signed(40)} if pairs else {})}))),
            "error": Out(2),
            "error_clr": In(1),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        d_max = self.d_max
        if self.quant_pairs:         # the ring in rows of two words: QUANT's pair beats
            m.submodules.buf = buf = PairedScratchpad(self.depth)
        else:
            m.submodules.buf = buf = Memory(shape=signed(32), depth=self.depth, init=[])
        m.submodules.csbuf = csbuf = Memory(shape=unsigned(32), depth=max(1, d_max // 2), init=[])
        pipe = pipe1 = None
        if self.pairs:               # the second element of a pair beat (ADD / SWIGLU with ``pair``)
            m.submodules.pipe1 = pipe1 = VectorResultPipe()
        if self.pipelined:
            m.submodules.pipe = pipe = VectorResultPipe()
        else:
            m.submodules.swiglu = swiglu = SwiGluLane()
        m.submodules.rms = rms = RmsNormScale(pipelined=self.pipelined, pairs=self.rms_pairs)
        rope = None
        if not self.pipelined:
            m.submodules.rope = rope = RopeRotator()
        # port c: the emit stage; port q: the scale stage (RMSNORM) or the emit stage's a[i + len/2] (ROPE)
        if self.quant_pairs:
            wp, rp_c, rp_q = buf.w, buf.ra, buf.rb
        else:
            wp, rp_c, rp_q = buf.write_port(), buf.read_port(), buf.read_port()
        cs_wp = csbuf.write_port()
        cs_rp = csbuf.read_port(transparent_for=(cs_wp,))

        cfg = Signal(self.cmd_layout)     # the command being executed
        op, ln, rows, frac = cfg.op, cfg.len, cfg.rows, cfg.frac
        s = _Rows(cfg, self.depth, ROW_SLOTS, fast=self.pipelined, pairs=self.pairs, bitlen_stages=self.bitlen_stages)
        s.track(m)
        m.d.comb += s.half.eq(ln >> 1)
        err = Signal(2)
        m.d.comb += self.error.eq(err)
        with m.If(self.error_clr):
            m.d.sync += err.eq(0)

        o = self.o_out           # output register: loaded by _emit (or the pipe's last stage), emptied by ready
        if pipe is None:
            with m.If(o.ready):
                m.d.sync += o.valid.eq(0)
        else:
            m.d.comb += [pipe.adv.eq(~o.valid | o.ready), o.valid.eq(pipe.o_valid)]
            if pipe1 is None:
                m.d.comb += o.payload.eq(pipe.o)
            else:
                m.d.comb += [o.payload.data.eq(pipe.o.data), o.payload.e.eq(pipe.o.e), o.payload.last.eq(pipe.o.last),
                             o.payload.data1.eq(pipe1.o.data), pipe1.adv.eq(~o.valid | o.ready)]

        a, b = self.a_in, self.b_in
        ad, bd = a.payload.data, b.payload.data
        # one 32-bit rounding shifter serves the sigmoid index (ELEM) and the scale stage's
        # RMSNorm pre-shift hp (row ops): never at once
        in_elem, sh_b = Signal(), Signal(5)
        sh32 = Signal(signed(40))
        m.d.comb += sh32.eq(rshift_round(Mux(in_elem, ad, rp_q.data),
                                         Mux(in_elem, frac.as_signed() - SIG_STEP_BITS, sh_b),
                                         max_left=SIG_STEP_BITS))
        if pipe is None:
            m.d.comb += [swiglu.gate.eq(ad), swiglu.up.eq(bd), swiglu.frac.eq(frac), swiglu.g_idx.eq(sh32)]
        m.d.comb += [rms.len.eq(ln), rms.eps_q.eq(cfg.eps_q), rms.sh.eq(sh_b), rms.bits.eq(cfg.bits)]

        # the row path (QUANT, RMSNORM, ROPE): three concurrent stages over the ring
        rpair = cfg.pair if self.quant_pairs else None      # a row op (QUANT) in pair beats
        _load_stage(m, s, a, wp, rpair)
        if self.rms_pairs:           # the scale stage's second element of a pair
            m.d.comb += [rms.x1.eq(rp_q.data1), rms.pair.eq(rpair)]
        addr_b = _scale_stage(m, s, rms, sh32, sh_b, rpair if self.rms_pairs else None, rp_q.data)
        addr_c, addr_x1, done_rows = _emit_stage(m, s, o, b, rp_c, rope, cs_wp, cs_rp, pipe, rp_q.data,
                                                 pipe1 if self.quant_pairs else None, rpair, self.rms_pairs)
        m.d.comb += [rp_c.addr.eq(addr_c), rp_q.addr.eq(Mux(s.is_rms, addr_b, addr_x1))]
        if rope is not None:
            m.d.comb += rope.x1.eq(rp_q.data)

        c, c_valid, c_bad_op, c_bad_shape = self._command(m, self.cmd.payload)
        row = Signal(16)                     # ELEM: the row (its end: the "elem" _RowEnd; a pair
        last_el = s.row_end("elem")          # beat: two elements, the row ends with its last pair)
        with m.FSM(name="vec") as fsm:
            with m.State("IDLE"):
                if self.cmd_stage:
                    with m.If(c_valid):
                        m.d.sync += c_valid.eq(0)
                else:
                    m.d.comb += self.cmd.ready.eq(1)
                with m.If(c_valid):
                    with m.If(c_bad_op):
                        m.d.sync += err.eq(err | ERR_OPCODE)
                    with m.Elif(c_bad_shape):
                        m.d.sync += err.eq(err | ERR_SHAPE)
                    with m.Else():
                        m.d.sync += [cfg.eq(c), row.eq(0)] + s.reset() + s.load(c)
                        with m.If((c.op == VecOp.ADD) | (c.op == VecOp.SWIGLU)):
                            m.next = "ELEM"
                        with m.Else():
                            m.next = "ROWS"

            with m.State("ELEM"):
                m.d.comb += in_elem.eq(pipe is None)
                go = a.valid & b.valid & (~o.valid | o.ready)
                m.d.comb += [a.ready.eq(go), b.ready.eq(go)]
                with m.If(go):
                    if pipe is None:
                        m.d.sync += _emit(o, Mux(op == VecOp.ADD, sat(ad + bd, 32), swiglu.y), 0, last_el)
                    else:
                        m.d.comb += [pipe.i_valid.eq(1), pipe.i.x.eq(ad), pipe.i.y.eq(bd), pipe.i.frac.eq(frac),
                                     pipe.i.last.eq(last_el),
                                     pipe.i.kind.eq(Mux(op == VecOp.ADD, ResultKind.ADD, ResultKind.SWIGLU))]
                    if pipe1 is not None:
                        m.d.comb += [pipe1.i_valid.eq(cfg.pair), pipe1.i.x.eq(a.payload.data1),
                                     pipe1.i.y.eq(b.payload.data1), pipe1.i.frac.eq(frac), pipe1.i.last.eq(last_el),
                                     pipe1.i.kind.eq(Mux(op == VecOp.ADD, ResultKind.ADD, ResultKind.SWIGLU))]
                    m.d.sync += s.advance("elem")
                    with m.If(last_el):
                        m.d.sync += row.eq(row + 1)
                        with m.If(row == s.rows_m1):
                            m.next = "IDLE"

            with m.State("ROWS"):
                with m.If(done_rows):
                    m.next = "IDLE"
        busy = ~fsm.ongoing("IDLE")
        if self.cmd_stage:           # a command waiting in its register
            busy = busy | c_valid
        for p in (pipe, pipe1):
            if p is not None:
                busy = busy | p.busy
        m.d.comb += [s.on.eq(fsm.ongoing("ROWS")), self.busy.eq(busy)]
        return m

    def _command(self, m, c):
        """(command, valid, bad op, bad shape) as the IDLE state sees them: the ``cmd`` stream's
        payload and checks, or (``cmd_stage``) a register of them taken while it is empty."""
        bad_op = c.op > VecOp.ROPE
        bad_shape = _bad_shape(c, self.d_max)
        if self.pairs:
            bad_shape = bad_shape | _bad_pair(c, self.quant_pairs, self.rms_pairs)
        if not self.cmd_stage:
            return c, self.cmd.valid, bad_op, bad_shape
        cq = Signal(self.cmd_layout, name="cmd_q")
        cq_valid, cq_bad_op, cq_bad_shape = Signal(name="cmd_q_valid"), Signal(name="cmd_q_bad_op"), \
            Signal(name="cmd_q_bad_shape")
        m.d.comb += self.cmd.ready.eq(~cq_valid)
        with m.If(self.cmd.valid & ~cq_valid):
            m.d.sync += [cq.eq(c), cq_valid.eq(1), cq_bad_op.eq(bad_op), cq_bad_shape.eq(bad_shape)]
        return cq, cq_valid, cq_bad_op, cq_bad_shape


def _load_stage(m, s, a, wp, pair=None):
    """Stage 1 of every row op: row ``na`` streams from ``a_in`` into the ring (started once a
    slot and ``len`` words are free) while max|a| accumulates into its slot's ``mx``. ``pair``
    (the command's bit; the ring a PairedScratchpad): a beat is elements i, i + 1 (i even, the
    row's base even), written as one pair. ``fast``: the row's largest and smallest element
    accumulate instead (compares of the elements themselves, side by side: no |a| adder before
    them), registered at the row's end, and its max|a|'s bit length a cycle later,
    max(bitlen(max), bitlen(-min)) by :func:`bitlen_of_range`, without negating the min (the adders
    and compares of |a| in a row were the whole engine's slowest path)."""
    i = Signal(16, name="load_i")
    can = s.on & (s.na < s.cfg.rows) & ((i != 0) | s.room())
    take = can & a.valid
    m.d.comb += [a.ready.eq(can), wp.addr.eq(s.ring(s.base_a + i)), wp.data.eq(a.payload.data), wp.en.eq(take)]
    last = s.row_end("load")
    if pair is not None:
        m.d.comb += [wp.data1.eq(a.payload.data1), wp.pair.eq(pair)]
    if s.fast:
        x, x1 = a.payload.data.as_signed(), (a.payload.data1.as_signed() if pair is not None else None)
        hi, lo = Signal(signed(32), name="load_hi"), Signal(signed(32), name="load_lo")     # 0 at a row's start
        hin, lon = _extreme(hi, x, x1, pair, lambda u, v: u > v), _extreme(lo, x, x1, pair, lambda u, v: u < v)
        fin, fin_slot = Signal(name="load_fin"), Signal.like(s.slot_a)
        fin_hi, fin_lo = Signal(signed(32), name="load_fin_hi"), Signal(signed(32), name="load_fin_lo")
        m.d.sync += [fin.eq(take & last), fin_hi.eq(hin), fin_lo.eq(lon), fin_slot.eq(s.slot_a)]
        if s.bitlen_stages == 1:
            m.d.sync += s.na_d.eq(s.na)
            with m.If(fin):
                m.d.sync += s.bl[fin_slot].eq(bitlen_of_range(fin_hi, fin_lo))
        else:                   # hi | u and the +1 registered, then the priority encoder (timing)
            v, carry = bitlen_of_range_parts(fin_hi, fin_lo)
            fin2, slot2 = Signal(name="load_fin2"), Signal.like(s.slot_a)
            v2, carry2 = Signal(len(v), name="load_bl_v"), Signal(name="load_bl_carry")
            m.d.sync += [fin2.eq(fin), slot2.eq(fin_slot), v2.eq(v), carry2.eq(carry),
                         s.na_d0.eq(s.na), s.na_d.eq(s.na_d0)]
            with m.If(fin2):
                m.d.sync += s.bl[slot2].eq(bitlen_plus(v2, carry2, len(fin_lo).bit_length()))
        upd, clear, keep = [hi.eq(hin), lo.eq(lon)], [hi.eq(0), lo.eq(0)], []
    else:
        mx = Signal(33, name="load_mx")
        am = abs_u(a.payload.data.as_signed())
        if pair is not None:
            am1 = abs_u(a.payload.data1.as_signed())
            am = Mux(pair & (am1 > am), am1, am)
        mxn = Mux(am > mx, am, mx)
        upd, clear, keep = [mx.eq(mxn)], [mx.eq(0)], [s.mx[s.slot_a].eq(mxn)]
    with m.If(take):
        m.d.sync += [i.eq(i + 1 + pair if pair is not None else i + 1)] + upd + s.advance("load")
        with m.If(last):
            m.d.sync += [i.eq(0)] + clear + keep + s.next_row("a")
            m.d.comb += s.a_end.eq(1)


def _extreme(r, x, x1, pair, beats):
    """The running extreme ``r`` after a beat ``x`` (and ``x1`` with ``pair``), ``beats(u, v)``:
    ``u`` beats ``v`` (``>`` for the max, ``<`` for the min); the compares side by side, then a select."""
    x_r = beats(x, r)
    if x1 is None:
        return Mux(x_r, x, r)
    x1_r, x1_x = beats(x1, r), beats(x1, x)
    return Mux(pair & x1_r & (x1_x | ~x_r), x1, Mux(x_r, x, r))


def _pre_shift(bl):
    """RMSNorm's pre-shift for a row of max|a| of bit length ``bl``: hp = rshift_round(a, sh) fits
    16 bits."""
    return Mux(bl > 15, (bl - 15)[:5], 0)


def _scale_stage(m, s, rms, hp, sh, pair=None, raw=None):
    """Stage 2 of RMSNORM (a loaded row ``nb``): ``rms`` (RmsNormScale) takes the row's
    hp = rshift_round(a, sh) from the ring (``hp`` from the returned read address, one cycle
    later), then its slot's ``e`` and ``r`` hold the row exponent and reciprocal RMS. ``pair``
    (the command's bit; ``rms`` with pairs): a read is elements ptr, ptr + 1 (ptr even)."""
    ptr, nxt = Signal(16, name="scale_ptr"), Signal(16, name="scale_nxt")
    last = s.row_end("scale")
    # the pipelined scale rounds the raw element itself, after a register (timing)
    m.d.comb += [nxt.eq(ptr), rms.x.eq(raw) if s.fast else rms.hp.eq(hp), rms.last.eq(last)]
    # this cycle's ptr update, for the address registers of the fast unit (_ring_address)
    st = SimpleNamespace(**{k: Signal(name=f"scale_{k}") for k in ("wait", "step", "to0")}) if s.fast else None
    with m.FSM(name="scale"):
        with m.State("WAIT"):       # ptr == 0: the read address is the row's first element
            if st:
                m.d.comb += st.wait.eq(1)
            with m.If(s.on & s.is_rms & (s.nb < s.loaded())):
                m.d.sync += sh.eq(_pre_shift(s.max_bitlen(s.slot_b)))
                m.next = "START"
        with m.State("START"):
            m.d.comb += rms.start.eq(1)
            m.next = "RUN"
        with m.State("RUN"):
            with m.If(rms.reading):
                m.d.comb += nxt.eq(Mux(rms.last, 0, ptr + 1 if pair is None else ptr + 1 + pair))
                if st:
                    m.d.comb += [st.step.eq(~rms.last), st.to0.eq(rms.last)]
                m.d.sync += [ptr.eq(nxt)] + s.advance("scale")
            with m.If(rms.done):
                m.d.sync += [s.e[s.slot_b].eq(rms.e), s.r[s.slot_b].eq(rms.r)] + s.next_row("b")
                m.next = "WAIT"
    if not s.fast:
        return s.ring(s.base_b + nxt)
    # the registers load in WAIT (ptr 0, the row's base set): a row is read once, WAIT follows
    return _ring_address(m, s, s.base_b, st.wait, st.step, st.wait | st.to0, "scale", pair)


def _emit_stage(m, s, o, b, rp, rope, cs_wp, cs_rp, pipe=None, x1=None, pipe1=None, pair=None, rms_pair=False):
    """Last stage of every row op: row ``nc`` (loaded; for RMSNORM also scaled) emitted from its
    ring into the output register ``o``, one element per cycle while ``o`` is free. ROPE takes
    ``b_in`` (cos|sin) during the first half and stores it for the second. Returns the read
    addresses of element ptr (``rp``) and ptr + len/2 (ROPE's x1), data one cycle later, and a
    signal that is high as the final row ends. With ``pipe`` (``VectorResultPipe``; ``rope`` is then
    None) the element's operands (``x1``: ROPE's partner) go into it instead of the results into ``o``.
    ``pair`` (QUANT; RMSNORM with ``rms_pair``): elements ptr, ptr + 1 a beat (``rp.data1``), the
    second into ``pipe1``."""
    cfg, ln, half = s.cfg, s.ln, s.half
    ptr, nxt = Signal(16, name="emit_ptr"), Signal(16, name="emit_nxt")
    second = Signal()        # ROPE: emitting the second half of the row
    e, sh, r = Signal(signed(8), name="emit_e"), Signal(5, name="emit_sh"), Signal(FR + 1, name="emit_r")
    done = Signal()
    m.d.comb += nxt.eq(ptr)
    is_rms, is_rope = s.is_rms, s.is_rope
    # this cycle's ptr update, for the address registers of the fast unit (_emit_addresses)
    st = SimpleNamespace(**{k: Signal(name=f"emit_{k}") for k in ("wait", "step", "to0", "restart")}) \
        if s.fast else None
    with m.FSM(name="emit"):
        with m.State("WAIT"):       # ptr == 0: the read address is the row's first element
            if st:
                m.d.comb += st.wait.eq(1)
            with m.If(s.on & (s.nc < Mux(is_rms, s.nb, s.loaded()))):
                bl = s.max_bitlen(s.slot_c)
                zero = bl == 0 if s.fast else s.mx[s.slot_c] == 0
                eq = Mux(zero, 0, (cfg.bits - 1) + cfg.frac - bl)
                m.d.sync += [e.eq(Mux(is_rms, s.e[s.slot_c], eq)), r.eq(s.r[s.slot_c]), sh.eq(_pre_shift(bl))]
                m.next = "EMIT"
        with m.State("EMIT"):
            v = rp.data
            if pipe is None:
                hp = Signal(signed(33))
                u = Signal(signed(50))
                m.d.comb += [hp.eq(rshift_round(v, sh)), u.eq(hp * r)]
                # QUANT and RMSNORM share one rounding shifter and clamp (one op per command)
                q_qr = qclamp(m, rshift_round(Mux(is_rms, u, v), Mux(is_rms, FR, cfg.frac.as_signed()) - e,
                                              max_left=8), cfg.bits)
            # ROPE: the first half uses (a[i], a[i+half]) with b beat i (stored for the second
            # half); the second half restarts at ptr 0 and yields rb[i] = b*cos + a*sin.
            need_b = is_rope & ~second
            go = (~o.valid | o.ready) & (~need_b | b.valid)
            cs = Mux(second, cs_rp.data, b.payload.data)
            if rope is not None:
                m.d.comb += [b.ready.eq(go & need_b), cs_wp.addr.eq(ptr), cs_wp.data.eq(b.payload.data),
                             cs_wp.en.eq(go & need_b), rope.x0.eq(v), rope.cs.eq(cs)]
            else:
                m.d.comb += [b.ready.eq(go & need_b), cs_wp.addr.eq(ptr), cs_wp.data.eq(b.payload.data),
                             cs_wp.en.eq(go & need_b)]
            if pipe is None:
                val = Mux(is_rope, Mux(second, rope.y1, rope.y0), q_qr)
            endp = s.row_end("emit")
            step = 1 if pair is None else 1 + pair
            with m.If(go):
                m.d.comb += nxt.eq(Mux(endp, 0, ptr + step))
                if st:
                    m.d.comb += [st.step.eq(~endp), st.to0.eq(endp), st.restart.eq(endp & need_b)]
                m.d.sync += s.advance("emit")
                if pipe is None:
                    m.d.sync += [ptr.eq(nxt)] + _emit(o, val, Mux(is_rope, 0, e), endp & (~is_rope | second))
                else:
                    p = pipe.i
                    m.d.sync += ptr.eq(nxt)
                    m.d.comb += [pipe.i_valid.eq(1), p.kind.eq(Mux(is_rope, ResultKind.ROPE, ResultKind.QR)),
                                 p.x.eq(v), p.y.eq(x1), p.z.eq(Mux(is_rope, cs, r)), p.sh.eq(sh),
                                 p.qs.eq(Mux(is_rms, FR, cfg.frac.as_signed()) - e), p.rms.eq(is_rms),
                                 p.bits.eq(cfg.bits), p.second.eq(second), p.e.eq(Mux(is_rope, 0, e)),
                                 p.last.eq(endp & (~is_rope | second))]
                    if pipe1 is not None:       # QUANT's (RMSNORM's) second element of a pair beat
                        q = pipe1.i
                        qs, rms = (p.qs, is_rms) if rms_pair else (cfg.frac.as_signed() - e, 0)
                        m.d.comb += [pipe1.i_valid.eq(pair), q.kind.eq(ResultKind.QR), q.x.eq(rp.data1),
                                     q.sh.eq(sh), q.qs.eq(qs), q.rms.eq(rms),
                                     q.bits.eq(cfg.bits), q.e.eq(e), q.last.eq(endp)]
                        if rms_pair:                # RMSNORM's second element: the row's reciprocal RMS
                            m.d.comb += q.z.eq(r)
                with m.If(endp & need_b):
                    m.d.sync += second.eq(1)
                with m.Elif(endp):
                    m.d.sync += [second.eq(0)] + s.next_row("c")
                    m.d.comb += s.c_end.eq(1)
                    m.d.comb += done.eq(s.nc == s.rows_m1)
                    m.next = "WAIT"
    m.d.comb += cs_rp.addr.eq(nxt)
    if not s.fast:
        return s.ring(s.base_c + nxt), s.ring(s.base_c + (nxt + half)), done
    return _emit_addresses(m, s, st, pair) + (done,)


def _emit_addresses(m, s, st, pair=None):
    """The emit stage's ring read addresses, ring(base_c + nxt) and ring(base_c + nxt + half),
    from registers (:func:`_ring_address`). ``st``: this cycle's ptr update (``step``: ptr + 1;
    ``to0``: back to 0, ``restart`` in the same row, ROPE's second half, else the row's end) and
    ``wait`` (WAIT: ptr 0, the row's base set); the registers are loaded from the row's base in
    WAIT and at a restart (at the row's end WAIT follows, with the next row's base). ``pair``: a
    step is ptr + 2."""
    load, zero = st.wait | st.restart, st.wait | st.to0
    return (_ring_address(m, s, s.base_c, load, st.step, zero, "emit_a", pair),
            _ring_address(m, s, s.h0_c, load, st.step, zero, "emit_h", pair))


def _ring_address(m, s, base, load, step, zero, name, pair=None):
    """ring(base + nxt) for a stage's pointer ``ptr`` (``fast``), from two registers kept beside
    it, ring(base + ptr) and ring(base + ptr + 1), so that the stage's element and end compares
    only choose among ready addresses instead of feeding an add and a wrap. This cycle's
    update: ``step`` (nxt = ptr + 1), ``zero`` (nxt = 0, ``base``), else nxt = ptr; ``load``
    sets the registers to ptr 0 of ``base``. ``pair``: a step is 2 (``base`` even; ``depth``
    even)."""
    depth = s.depth

    def wrap1(x):
        nx1 = Mux(x == depth - 1, 0, x + 1)[:len(x)]
        if pair is None:
            return nx1
        return Mux(pair, Mux(x == depth - 2, 0, x + 2)[:len(x)], nx1)
    cur, inc = Signal(len(base), name=name), Signal(len(base), name=name + "1")
    with m.If(load):
        m.d.sync += [cur.eq(base), inc.eq(wrap1(base))]
    with m.Elif(step):
        m.d.sync += [cur.eq(inc), inc.eq(wrap1(inc))]
    return Mux(step, inc, Mux(zero, base, cur))


def _emit(o, value, e, last):
    """Statements loading the output register ``o`` with one result."""
    return [o.valid.eq(1), o.payload.data.eq(value), o.payload.e.eq(e), o.payload.last.eq(last)]


def _bad_pair(c, quant=False, rms=False):
    """``pair`` on an op other than ADD / SWIGLU (and QUANT with ``quant``, RMSNORM with ``rms``)
    or an odd ``len`` (ERR_SHAPE)."""
    other = (c.op != VecOp.ADD) & (c.op != VecOp.SWIGLU)
    if quant:
        other = other & (c.op != VecOp.QUANT)
    if rms:
        other = other & (c.op != VecOp.RMSNORM)
    return c.pair & (c.len[0] | other)


def _bad_shape(c, d_max):
    """The command ``c`` has a shape the unit refuses (ERR_SHAPE)."""
    return ((c.len == 0) | (c.len > d_max) | (c.rows == 0) | (c.bits < 2) | (c.bits > 8)
            | (c.frac > 30) | ((c.op == VecOp.ROPE) & c.len[0]))
