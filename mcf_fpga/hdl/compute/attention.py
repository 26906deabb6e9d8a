"""Attention unit: one query tile against KV blocks in local memory, bit-exact to golden
``block_partial`` + ``merge_partials`` (left fold, prefill) or ``flat_merge`` (decode), then
optionally ``finalize``.

Local KV memory (``kv_in`` stream, any time the unit is idle): beat ``{sel (0 K, 1 V), addr,
data (d int8 lanes, lane i at bits 8i..8i+7; INT4 KV is sign-extended into the lanes), e}``
writes one token row of K or V and its exponent.

Job (``cmd`` ``{nq, nblk, causal, flat, final, ext_m, fold, acc}``), then, each stream at its own pace,
``nq`` query rows on ``q_in`` ``{data (d int8), e, pos, m_ext}`` and ``nblk`` block descriptors on
``blk_in`` ``{addr, len, pos}`` (keys ``addr .. addr+len-1`` at absolute positions ``pos ..``, in
the merge order). The q rows are taken as they come, beside the blocks and the earlier rows' S and
P: S starts row r once all blocks and q row r are in (so only row 0's q load is serial). Every row
of the tile attends to the same KV blocks (GQA: the rows are the query heads sharing one KV head,
times tokens; K/V are fetched from local memory once per row, never from DDR again).

Per query row (rows are independent; phase S of row r+1 overlaps phase P of row r, and P of row
r+1 row r's last merge and emit, below):

  phase S  for every key: s = q.k (d lanes), z = sat30(rshift_round(s*C, eq+ek+SC-FZ)),
           masked (causal: kpos > qpos) keys excluded; z stored, block maxima m_b kept,
           M = max_b m_b (with ``ext_m``: M = max(M, m_ext), the all-reduced global max of a
           distributed flat merge, so the rescaled sums add up exactly across nodes);
  phase P  for every key: p = exp2_fixed(z - m_b) (EXP2 ROM), l_b += p,
           o_b[i] += rshift_round(p * v[i], 15 - FO + ev)  (per-term rounding, d lanes);
           at each block end merge (m_b, l_b, o_b) into the row state:
           fold (``flat=0``): softmax_merge(state, block)    -- ascending list order
           flat (``flat=1``): state.l += rshift_round(l_b * exp2_fixed(m_b - M), 15), o likewise.
  emit     ``o_out`` one beat per row ``{m, l, o[d], last}``: the partial (m, l, o), or with
           ``final=1`` o[i] = finalize (sat32(round_div(o << 11, l))) via L = ``merge_lanes``
           restoring dividers side by side (d/L rounds of 36 cycles per row).

Row overlap: S reads only the K memory and P only the V memory, each side walks the blocks with
its own key counters and block-table read port, and z (with the key's mask bit) and m_b are
stored in two banks (bank = row parity). When S has finished row r+1 and P has issued row r's
last key, P takes row r+1 (latching its M, with m_ext included) and S starts row r+2 in the bank
P is done with. P issues row r+1's keys while row r's last block goes through P's stages and the
merge and the row is finalized and emitted: the row state (m_run, l_run, o_run) is then reset for
row r+1 (or takes its acc partial), and only then may row r+1's first block's last key issue
(its merge needs the state). A tile of nq rows x n keys (one block) takes ~n + nq * (n + 4)
cycles (+ finalize): the first row's phase S, then phase S's row, one cycle per key plus the
q read, the scorer's latency and the handoff; rows so short that the row state's chain (open,
the last key through P, the merge's d/L steps, emit) is longer pace at it (:func:`row_cycles`).

Two keys per cycle (``keys_per_cycle=2``): S and P each issue keys j, j+1 of one block per cycle
(a block of odd length ends with its last key alone; blocks never share a cycle, so the merge is
unchanged): S takes two dot products (two K read ports), writes both z into the z buffer, which is
two memories by key parity (key z at index z >> 1 of memory z % 2: no extra depth), and takes the
block maximum over both; P reads two z and two V rows, computes two p (two more EXP2 ROM ports)
and adds both keys' p and rounded terms to l_b, o_b in the same cycle (integer adds: exact, as
golden's sums). ~n/2 + nq * (n/2 + d/L + 7) cycles per tile (odd blocks: ceil(len/2) per block),
4*d MACs per cycle on long rows. K/V: two read ports per memory (``kv_ports``: ``k_rd1``/``v_rd1``
as well, :class:`hdl.dma.kvstream.KVStreamer` ``read_ports=2``).

Pipelined (``pipelined=True``): for the clock, phases S and P and the merge run in register stages
with no stall inside (a key issued is finished a fixed number of cycles later): S's score path is
:class:`AttentionScorer`'s pipelined form (products, the adder tree in stages of 8 terms, the
multiply by C, the rounding shift in two steps, the clamp, the pair's, block's and row's maxima:
``latency`` = 6 + tree stages cycles from the issue to the z write, and S waits for its ``busy``
to fall before handing a row over); P reads the EXP2 ROM through registered ports and takes
p = exp2_fixed(z - m_b), the term shift, the lanes' products and the window select each a cycle
apart (``P_EXTRA`` = 5 cycles more than the one-stage P; the V rows are read ``P_V_DELAY``
cycles after the issue, so that they arrive at the shift stage); the merge computes M, the EXP2
addresses, the ROM reads and alpha/beta a cycle each, then sends the o lanes round a ring of o_run
and ``MERGE_STAGES`` pipeline segments (:meth:`_merge_ring`); the key issuers are look-ahead ones
(:class:`KeyIssuer` ``lookahead``), ``nq - 1`` / ``nblk - 1`` are stored with the command, and
the finalize dividers' results are registered (a cycle more per round). The cost: S takes
``latency`` + 1 more cycles per row (n + 14 at d = 128), P 5 more, a merge d/L + 7 instead of
d/L + 1 (a block's last key waits for the previous block's merge: blocks shorter than that pace
at it). Results are bit for bit those of the one-stage unit.

Acc job (``cmd.acc=1``, not with ``flat``: ERR_SHAPE): the rows continue a fold. Row r's state
starts as its partial from ``p_in`` (one beat per row, taken when the row state opens for the row; the beat goes
through the merge from m = -2**31, l = 0, o = 0, which gives it back exactly, beside P's first
keys: a block's last key waits for that merge as for any), then the blocks merge into it as in a
fold job: the row is golden ``merge_partials([P_r, block_0, .., block_nblk-1])``. The engine's
ATT ``sub`` bit1 feeds ``p_in`` from the scratchpad so that a running fold takes one more block
in place (``host.prefill_fold``).

Fold job (``cmd.fold=1``; ``causal``, ``flat``, ``ext_m`` ignored): no q / blocks; for each of
``nq`` rows the unit takes ``nblk`` partial beats on ``p_in`` ``{m, l, o[d]}`` and folds them into
the row state exactly as golden ``merge_partials`` (the row state starts as m = -2**31, l = 0,
o = 0, which softmax_merge with the first partial turns into that partial exactly; every partial
goes through the same merge datapath, d/L cycles each), then emits the row as above (partial,
or ``final=1``: finalize through the same dividers). ``nblk`` is not limited by ``nb_max`` (nothing
is stored per partial). The engine's FOLD instruction feeds ``p_in`` from the scratchpad.

``o_out`` is a register: P computes row r+1 while row r waits there (the engine's
serializer takes it one word per cycle, 2d+4 words partial), so a row paces at the longer of
:func:`row_cycles` and its output; back-pressure on ``o_out`` holds the emit of row r+1, so the
row state stays closed and P holds at row r+2's first block's last key (S completes at most the
row after and waits); ``p_in`` is taken one beat per cycle while a fold row is open (an acc row:
its one beat when the row state opens for it, after the previous row's emit). Errors (sticky,
``error_clr``): ERR_OPCODE never (no opcodes), ERR_SHAPE nq/nblk outside [1, limit] or acc with
flat (command refused; fold jobs: nq in [1, nq_max], nblk >= 1) or a block outside the KV memory / longer than
``blk_max`` / empty (that block is treated as fully masked).
"""
from types import SimpleNamespace

from amaranth import Module, Signal, Cat, Const, Mux, signed, unsigned
from amaranth.hdl import Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory, ReadPort
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.numerics import (EXP2_LUT, FZ, FO, SC, P_BITS, M_EMPTY, FA, ACC_BITS,
                             score_multiplier)
from .fixed import (rshift_round, rshift_round_lanes, rshift_round_lanes_shift, rshift_round_lanes_lane,
                    rshift_round_lanes_select)
from .attention_divider import FinalizeDividers, QB
from .attention_key_issuer import KeyIssuer
from .attention_scorer import AttentionScorer
from .dsp_accumulator import DSPAccumulator
from .stage_chain import StageChain

URAM = {"ram_style": "ultra"}    # Yosys memory_libmap -> URAM288 (XCK26: 64 blocks of 4K x 72)

__all__ = ["AttentionUnit", "ERR_SHAPE", "kv_beat", "q_beat", "p_beat", "default_merge_lanes", "row_cycles"]

ERR_SHAPE = 2
#: the pipelined phase P's extra stages (P_EXTRA) and the cycles from the issue to its V read
#: (P_V_DELAY)
P_EXTRA, P_V_DELAY = 5, 3
#: the pipelined merge's ring stages (products, joined, rounded sum) and its stages before the
#: ring (the EXP2 addresses, the ROM read, alpha / beta): a merge takes MERGE_EXTRA more cycles
MERGE_STAGES, MERGE_PRE = 3, 3
MERGE_EXTRA = MERGE_PRE + MERGE_STAGES
#: cycles a row's chain (below) takes in a pipelined unit beyond the one-stage unit's: P's extra
#: stages and the last merge's
ROW_EXTRA_PIPELINED = P_EXTRA + MERGE_EXTRA
#: S's cycles per row beyond its keys and the scorer's latency: the q read, the row's start and the
#: handoff (+2 pipelined: the block and row maxima registered); the row state's chain beyond its
#: d/L merge steps: its opening, the last key's issue and P stages, the merge's start, the emit
S_ROW_EXTRA, CHAIN_EXTRA = 3, 7


def row_cycles(d, keys, *, keys_per_cycle=1, pipelined=False, acc=False, merge_lanes=None,
               rows_per_cycle=1) -> int:
    """Cycles one row of a many-row job of one block of ``keys`` keys takes with ``o_out`` always
    ready (the performance model's ``rowpace``; ``test_attention`` checks it against the RTL). P
    starts row r+1's keys while row r drains, so a row paces at the longer of phase S's row (its
    keys, the scorer's latency, S_ROW_EXTRA) and the row state's chain (open, an acc row's partial
    merge, the row's last key through P and the merge, emit), which P's other keys hide behind.
    ``rows_per_cycle=2``: the cycles a pair of rows takes (its second q read, its second emit; an
    acc pair's second partial beat)."""
    L = merge_lanes or default_merge_lanes(d)
    lat = AttentionScorer.pipeline_latency(d) if pipelined else 1
    h1 = rows_per_cycle - 1
    s_row = -(-keys // keys_per_cycle) + lat + S_ROW_EXTRA + 2 * pipelined + h1
    merge = d // L + 2 + pipelined * MERGE_EXTRA            # an acc row's partial: p_in -> p3 -> ring
    chain = d // L + CHAIN_EXTRA + pipelined * ROW_EXTRA_PIPELINED + acc * (merge + h1) + h1
    return max(s_row, chain)


def default_merge_lanes(d: int) -> int:
    """The merge / finalize width L of an ``AttentionUnit`` built without ``merge_lanes``: d/16."""
    return max(1, d // 16)


def _sfx(i: int, sep: str = "") -> str:
    """The name suffix of key / row ``i`` of a cycle: none for the first (its names are those of
    the one-key, one-row unit), else ``i`` and ``sep``."""
    return f"{i}{sep}" if i else ""


def _exp2_fixed(m, port, x):
    """golden exp2_fixed(x) for x <= 0 (signed 33-bit expression) via a comb ROM port."""
    nx_ = Signal(33)
    m.d.comb += nx_.eq(-x)
    m.d.comb += port.addr.eq(nx_[:FZ])
    n = nx_[FZ:]
    return Mux(n >= 16, 0, port.data >> n[:4])


def _lanes(vals, w=8):
    d = 0
    for i, x in enumerate(vals):
        d |= (int(x) & ((1 << w) - 1)) << (w * i)
    return d


def kv_beat(sel, addr, row, e):
    return {"sel": sel, "addr": addr, "data": _lanes(row), "e": int(e)}


def q_beat(row, e, pos, m_ext=M_EMPTY):
    return {"data": _lanes(row), "e": int(e), "pos": int(pos), "m_ext": int(m_ext)}


def p_beat(m, l, o):
    """A ``p_in`` beat (fold jobs) from one partial row."""
    return {"m": int(m), "l": int(l), "o": [int(x) for x in o]}


class AttentionUnit(wiring.Component):
    """See module docstring. Parameters: d head_dim, nq_max rows per tile, kv_depth local KV
    tokens, nb_max blocks per job, z_max keys per job (sum of block lengths), blk_max keys/block,
    merge_lanes o lanes rescaled per cycle by the merge (default d/16; d/merge_lanes cycles per merge),
    kv_ports (default False): the K/V rows are not held here: instead of ``kv_in`` and its own K/V
    memories the unit has ``k_rd``/``v_rd`` (``lib.memory`` read-port signatures, kv_depth words of
    d*8+8 bits, data one cycle after the address, as its own memories) for an external staging
    buffer such as :class:`hdl.dma.kvstream.KVStreamer`'s; the job's rows must stay there (the
    streamer's ``full`` window) until the job's last row is out. keys_per_cycle (1 or 2, default
    1): keys per cycle in phases S and P (2: also ``k_rd1``/``v_rd1`` with ``kv_ports``).
    pipelined (default False): phases S and P in register stages for the clock (module docstring,
    "Pipelined"): the same results, a few cycles more per row and per block. emit_on_empty
    (default False): EMIT loads ``o_out`` only once it is empty, not in the cycle its last row is
    taken, so nothing but ``o_out.valid`` hangs off ``o_out.ready`` (timing: the consumer's
    handshake no longer reaches the row state); the same results, ``o_out`` refilled a cycle after
    it empties: a cycle more per job for a consumer that copies each row (``o_out`` holds the next
    row while it works), a cycle more per output-paced row for one that takes the row with its
    last word (the engine's ``AttentionRowSerializer``; measured in the KR260 refit)."""

    def __init__(self, d=16, nq_max=8, kv_depth=64, nb_max=8, z_max=64, blk_max=64, pos_bits=16,
                 merge_lanes=None, kv_ports=False, keys_per_cycle=1, pipelined=False, rows_per_cycle=1,
                 emit_on_empty=False):
        if keys_per_cycle not in (1, 2):
            self._MustUse__silence = True      # a refused unit is not an unused one
            raise ValueError(f"keys_per_cycle={keys_per_cycle} must be 1 or 2")
        if rows_per_cycle not in (1, 2) or (rows_per_cycle == 2 and (keys_per_cycle != 1 or not pipelined)):
            self._MustUse__silence = True
            raise ValueError(f"rows_per_cycle={rows_per_cycle} must be 1, or 2 with keys_per_cycle=1 and "
                             f"pipelined=True (got keys_per_cycle={keys_per_cycle}, pipelined={pipelined})")
        if merge_lanes is None:
            merge_lanes = default_merge_lanes(d)
        if not (1 <= merge_lanes <= d and d % merge_lanes == 0):
            self._MustUse__silence = True
            raise ValueError(f"merge_lanes={merge_lanes} must divide d={d}")
        self.merge_lanes = merge_lanes
        self.d, self.nq_max, self.kv_depth, self.nb_max, self.z_max = d, nq_max, kv_depth, nb_max, z_max
        self.blk_max, self.pos_bits = blk_max, pos_bits
        self.kv_ports, self.keys_per_cycle, self.pipelined = kv_ports, keys_per_cycle, pipelined
        self.rows_per_cycle, self.emit_on_empty = rows_per_cycle, bool(emit_on_empty)
        self.C = score_multiplier(d)
        aw = max(1, (kv_depth - 1).bit_length())
        self.aw = aw
        self.cmd_layout = data.StructLayout({"nq": 16, "nblk": 16, "causal": 1, "flat": 1,
                                             "final": 1, "ext_m": 1, "fold": 1, "acc": 1})
        if kv_ports:
            rp = ReadPort.Signature(addr_width=aw, shape=unsigned(d * 8 + 8))
            kv = {"k_rd": In(rp), "v_rd": In(rp)}
            if keys_per_cycle == 2:
                kv.update({"k_rd1": In(rp), "v_rd1": In(rp)})
        else:
            kv = {"kv_in": In(stream.Signature(data.StructLayout({"sel": 1, "addr": aw, "data": d * 8,
                                                                  "e": signed(8)})))}
        super().__init__({
            **kv,
            "cmd": In(stream.Signature(self.cmd_layout)),
            "q_in": In(stream.Signature(data.StructLayout({"data": d * 8, "e": signed(8),
                                                           "pos": pos_bits, "m_ext": signed(32)}))),
            "blk_in": In(stream.Signature(data.StructLayout({"addr": aw + 1, "len": 16,
                                                             "pos": pos_bits}))),
            "p_in": In(stream.Signature(data.StructLayout({
                "m": signed(32), "l": unsigned(ACC_BITS), "o": data.ArrayLayout(signed(ACC_BITS), d)}))),
            "o_out": Out(stream.Signature(data.StructLayout({
                "m": signed(32), "l": unsigned(ACC_BITS), "o": data.ArrayLayout(signed(ACC_BITS), d),
                "last": 1}))),
            "error": Out(2),
            "error_clr": In(1),
            "busy": Out(1),
        })

    def _phase_p(self, m, pi, v_rps, z_rps, zhw, mb_rp, bw, row, ex):
        """Phase P up to the block accumulators: the keys ``pi`` issues (one per V read port / z
        memory / EXP2 port ``ex``): p = exp2_fixed(z - m_b) and the rounded terms p * v[i], one
        register stage (p2) per key. -> p1_v, p1_last, p2_v, p2_first, p2_last, p2_mb, p2_p[k], p2_t[k] = (floors, round bits) by lane."""
        d, kpc = self.d, self.keys_per_cycle
        self._p_reads(m, pi, z_rps, zhw, mb_rp, bw, row)
        p1_v, p1_first, p1_last = Signal(name="p1_v"), Signal(name="p1_first"), Signal(name="p1_last")
        p1_two, p1_par = Signal(name="p1_two"), Signal(name="p1_par")
        p1_mb = Signal(signed(32))
        m.d.sync += [p1_v.eq(pi.go), p1_first.eq(pi.first), p1_last.eq(pi.last), p1_mb.eq(mb_rp.data),
                     p1_two.eq(pi.two), p1_par.eq(pi.z[0])]
        p2_v, p2_first, p2_last = Signal(name="p2_v"), Signal(name="p2_first"), Signal(name="p2_last")
        p2_mb = Signal(signed(32))
        m.d.sync += [p2_v.eq(p1_v), p2_first.eq(p1_first), p2_last.eq(p1_last), p2_mb.eq(p1_mb)]
        p2_p, p2_t = [], []
        for k in range(kpc):
            sfx = _sfx(k)
            if kpc == 2:           # key z + k came from z memory (z + k) % 2
                zd = Mux(p1_par ^ k, z_rps[1].data, z_rps[0].data)
                p1_on = zd[32] & (p1_two if k else 1)
            else:
                zd = z_rps[0].data
                p1_on = zd[32]
            pz = Signal(signed(33), name="pz" + sfx)
            m.d.comb += pz.eq(zd[:32].as_signed() - p1_mb)
            p = Signal(P_BITS + 1, name="p" + sfx)
            m.d.comb += p.eq(Mux(p1_on, _exp2_fixed(m, ex[k], Mux(pz > 0, 0, pz)), 0))
            vd = v_rps[k].data
            tsh = Signal(signed(10), name="tsh" + sfx)
            m.d.comb += tsh.eq(vd[8 * d:8 * d + 8].as_signed() + (P_BITS - FO))
            # rshift_round(p * v[i], tsh, max_left=24): the shift is shared by the d lanes of a key;
            # each term as its floor and round bit (the bit is the accumulator's carry-in, _merge)
            terms = rshift_round_lanes(p, [vd[8 * i:8 * i + 8].as_signed() for i in range(d)], tsh,
                                       p_max=1 << P_BITS, max_left=24, width=ACC_BITS, split=True)
            pp = Signal(P_BITS + 1, name="p2_p" + sfx)
            tt = [Signal(signed(ACC_BITS), name=f"p2_t{sfx}_{i}" if k else f"p2_t{i}") for i in range(d)]
            tb = [Signal(name=f"p2_b{sfx}_{i}" if k else f"p2_b{i}") for i in range(d)]
            m.d.sync += [pp.eq(p)] + [tt[i].eq(terms[i][0]) for i in range(d)] + [tb[i].eq(terms[i][1]) for i in range(d)]
            p2_p.append(pp)
            p2_t.append((tt, tb))
        return p1_v, p1_last, p2_v, p2_first, p2_last, p2_mb, p2_p, p2_t

    def _p_reads(self, m, pi, z_rps, zhw, mb_rp, bw, row):
        """P's reads at the issue: the z of keys z, z + 1 (memory (z + k) % kpc, bank = row parity,
        two rows per cycle: pair parity) and the block's m_b."""
        bank = row[self.rows_per_cycle - 1]
        for zb, rp in enumerate(z_rps):
            idx = (pi.z + (zb ^ pi.z[0])) >> 1 if self.keys_per_cycle == 2 else pi.z
            m.d.comb += rp.addr.eq(Cat(idx[:zhw], bank))
        m.d.comb += mb_rp.addr.eq(Cat(pi.b[:bw], bank))

    def _phase_p_pipelined(self, m, pi, v_rps, z_rps, zhw, mb_rp, bw, row, ex):
        """Phase P in stages (``pipelined``), no stall: issue (z, m_b read) | p1 z - m_b, the EXP2
        address | pa the ROM read (``ex``: registered ports) | pb p = ROM >> n | pc the V row
        arrives (its read ``P_V_DELAY`` cycles after the issue): the term shift ``p << lo`` and
        window ``hi`` (:func:`fixed.rshift_round_lanes_shift`, ``lane_bits=1``), the lanes registered
        as ``v`` or ``v << 8`` by the shift's bit 3 | pd the lanes' products | the window select
        (:func:`fixed.rshift_round_lanes_select`, one of 3 windows of 16 bits) into p2, as
        :meth:`_phase_p`'s p2, ``P_EXTRA`` cycles later. A path per key of the cycle (``kpc``) or
        per row of the pair (``rows_per_cycle``; the V row, its shift and window shared). ->
        p_last_flight (a block's last key in a stage), p2_v, p2_first, p2_last, p2_mb[path],
        p2_p[path], p2_t[path] (two keys per cycle only; else empty), (pe_t[path], pe_first): the
        terms before p2's registers, for the DSP accumulators."""
        d, kpc, H = self.d, self.keys_per_cycle, self.rows_per_cycle
        npath = max(kpc, H)
        self._p_reads(m, pi, z_rps, zhw, mb_rp, bw, row)
        mbl = signed(32) if H == 1 else data.ArrayLayout(signed(32), H)
        ctl = data.StructLayout({"v": 1, "first": 1, "last": 1, "two": 1, "par": 1, "mb": mbl})
        stage = StageChain(m, ctl, "pc{}", first=1)
        c0 = Signal(ctl)
        m.d.comb += [c0.v.eq(pi.go), c0.first.eq(pi.first), c0.last.eq(pi.last), c0.two.eq(pi.two),
                     c0.par.eq(pi.z[0])]
        c1 = stage(c0)                         # p1: the z words are on the z ports
        if H == 1:
            p1_mb = Signal(signed(32), name="p1_mb")     # the key's m_b (comb read at the issue)
            m.d.sync += p1_mb.eq(mb_rp.data)
            p1_mbs = [p1_mb]
        else:
            p1_mb = Signal(32 * H, name="p1_mb")
            m.d.sync += p1_mb.eq(mb_rp.data)
            p1_mbs = [p1_mb[32 * h:32 * h + 32].as_signed() for h in range(H)]
        ca = Signal(ctl, name="pca")
        m.d.sync += [ca.eq(c1), ca.mb.eq(p1_mb)]     # m_b travels with the key from here
        stage.append(ca)
        nx_a, on_a = [], []
        for k in range(npath):
            sfx = _sfx(k)
            if kpc == 2:
                zd = Mux(c1.par ^ k, z_rps[1].data, z_rps[0].data)
                on = zd[32] & (c1.two if k else 1)
            elif H > 1:
                zd = z_rps[0].data[33 * k:33 * k + 33]
                on = zd[32]
            else:
                zd = z_rps[0].data
                on = zd[32]
            # nx = -min(z - m_b, 0) = max(m_b - z, 0): one subtractor and its sign bit (not a
            # subtract, a compare and a negation in a row: zbuf -> pa_nx, 14 levels on c017f77)
            dz = Signal(signed(33), name="pdz" + sfx)
            m.d.comb += dz.eq(p1_mbs[k if H > 1 else 0] - zd[:32].as_signed())
            nx_ = Signal(33, name="pa_nx" + sfx)
            ona = Signal(name="pa_on" + sfx)
            m.d.sync += [nx_.eq(Mux(dz[-1], 0, dz)), ona.eq(on)]
            nx_a.append(nx_)
            on_a.append(ona)
        cb = stage(ca)
        big_b, n_b, on_b = [], [], []
        for k in range(npath):
            sfx = _sfx(k)
            m.d.comb += ex[k].addr.eq(nx_a[k][:FZ])
            n = nx_a[k][FZ:]
            big, nb, onb = Signal(name="pb_big" + sfx), Signal(4, name="pb_n" + sfx), Signal(name="pb_on" + sfx)
            m.d.sync += [big.eq(n >= 16), nb.eq(n[:4]), onb.eq(on_a[k])]
            big_b.append(big)
            n_b.append(nb)
            on_b.append(onb)
        cc = stage(cb)
        p_c = []
        for k in range(npath):
            p = Signal(P_BITS + 1, name="pc_p" + _sfx(k))
            m.d.sync += p.eq(Mux(on_b[k] & ~big_b[k], ex[k].data >> n_b[k], 0))
            p_c.append(p)
        cd = stage(cc)                         # the V rows are on v_rps[k].data during cc
        st_d, v_d, p_d = [], [], []
        for k in range(npath):
            sfx = _sfx(k)
            vd = v_rps[k if kpc > 1 else 0].data
            tsh = vd[8 * d:8 * d + 8].as_signed() + (P_BITS - FO)
            # bit 3 of the term shift is taken by the lanes (v << 8 on the DSP's wide port), so the
            # window select after the products picks one of 3 windows (one LUT per bit), not 6
            st = rshift_round_lanes_shift(p_c[k], tsh, p_max=1 << P_BITS, wv=8, max_left=24, lane_bits=1)
            ps = Signal.like(Value.cast(st["ps"]), name="pd_ps" + sfx)
            pp = Signal(P_BITS + 1, name="pd_p" + sfx)
            if k == 0 or kpc > 1:              # the window and the lanes: per V row
                hi = Signal.like(Value.cast(st["hi"]), name="pd_hi" + sfx)
                vl = [Signal(signed(16), name=f"pd_v{sfx}_{i}") for i in range(d)]
                m.d.sync += [ps.eq(st["ps"]), hi.eq(st["hi"]), pp.eq(p_c[k])]
                m.d.sync += [vl[i].eq(rshift_round_lanes_lane(vd[8 * i:8 * i + 8].as_signed(), st["vs"]))
                             for i in range(d)]
            else:
                m.d.sync += [ps.eq(st["ps"]), pp.eq(p_c[k])]
            st_d.append((ps, hi, st["K"]))
            v_d.append(vl)
            p_d.append(pp)
        ce = stage(cd)
        u_e, hi_e, p_e = [], [], []
        for k in range(npath):
            sfx = _sfx(k)
            ps, hi, K = st_d[k]
            us = []
            for i in range(d):
                prod = ps * v_d[k][i]
                u = Signal(Value.cast(prod).shape(), name=f"pe_u{sfx}_{i}")
                m.d.sync += u.eq(prod)
                us.append(u)
            pe = Signal(P_BITS + 1, name="pe_p" + sfx)
            if k == 0 or kpc > 1:
                hie = Signal.like(hi, name="pe_hi" + sfx)
                m.d.sync += [hie.eq(hi), pe.eq(p_d[k])]
            else:
                m.d.sync += pe.eq(p_d[k])
            u_e.append((us, K))
            hi_e.append(hie)
            p_e.append(pe)
        c2 = stage(ce)
        p2_p, p2_t, pe_t = [], [], []
        for k in range(npath):
            sfx = _sfx(k)
            us, K = u_e[k]
            pp = Signal(P_BITS + 1, name="p2_p" + sfx)
            terms = [rshift_round_lanes_select(u, hi_e[k], K=K, max_left=24, width=ACC_BITS, step_bits=4)
                     for u in us]
            m.d.sync += pp.eq(p_e[k])
            p2_p.append(pp)
            pe_t.append(terms)
            if kpc > 1:   # two keys' terms are summed in LUTs (_merge); one key's enter the DSP accumulators
                tt = [Signal(signed(ACC_BITS), name=f"p2_t{sfx}_{i}" if k else f"p2_t{i}") for i in range(d)]
                tb = [Signal(name=f"p2_b{sfx}_{i}" if k else f"p2_b{i}") for i in range(d)]
                m.d.sync += [tt[i].eq(terms[i][0]) for i in range(d)] + [tb[i].eq(terms[i][1]) for i in range(d)]
                p2_t.append((tt, tb))
        last_flight = stage.any("v", "last")
        p2_mb = [c2.mb] if H == 1 else [c2.mb[h] for h in range(H)]
        return last_flight, c2.v, c2.first, c2.last, p2_mb, p2_p, p2_t, (pe_t, ce.first)

    def elaborate(self, platform):
        m = Module()
        # the nets the sections share (the K/V write ports and kv_in payload: None with kv_ports)
        s = SimpleNamespace(k_wp=None, v_wp=None, kvp=None)
        self._memories(m, s)
        self._job_inputs(m, s)
        self._phase_s(m, s)
        self._merge(m, s)
        self._finalize(m, s)
        self._s_control(m, s)
        self._p_fsm(m, s)
        self._job_fsm(m, s)
        return m

    def _memories(self, m, s):
        """K/V (or the ``kv_ports``), q, block-table, z, m_b and EXP2 memories and their ports; ``error``."""
        d, aw, pb = self.d, self.aw, self.pos_bits
        nq_max, nb_max, z_max = self.nq_max, self.nb_max, self.z_max

        kpc, H = self.keys_per_cycle, self.rows_per_cycle
        if self.kv_ports:
            k_rps, v_rps = ([self.k_rd, self.k_rd1], [self.v_rd, self.v_rd1]) if kpc == 2 else ([self.k_rd], [self.v_rd])
            m.d.comb += [rp.en.eq(1) for rp in k_rps + v_rps]
        else:
            m.submodules.kmem = kmem = Memory(shape=unsigned(d * 8 + 8), depth=self.kv_depth, init=[], attrs=URAM)
            m.submodules.vmem = vmem = Memory(shape=unsigned(d * 8 + 8), depth=self.kv_depth, init=[], attrs=URAM)
            k_wp, k_rps = kmem.write_port(), [kmem.read_port() for _ in range(kpc)]
            v_wp, v_rps = vmem.write_port(), [vmem.read_port() for _ in range(kpc)]
            vars(s).update(k_wp=k_wp, v_wp=v_wp)
        m.submodules.qmem = qmem = Memory(shape=unsigned(d * 8 + 8 + pb + 32), depth=nq_max, init=[])
        m.submodules.btab = btab = Memory(shape=unsigned(aw + 16 + pb + 1), depth=nb_max, init=[])
        # z buffer {on, z} and block maxima, two banks (bank = row parity): S of row r+1 fills one
        # while P of row r reads the other; address Cat(index, bank). keys_per_cycle 2: the z
        # buffer is two memories (key parity), key z at index z >> 1 of memory z % 2. Two rows per
        # cycle: a word holds both rows' z (row h at bits 33h..), a block maximum word both rows' m_b;
        # the bank is the pair's parity
        bw = (nb_max - 1).bit_length()
        zhw = ((z_max - 1) // kpc).bit_length()
        zattrs = {"attrs": URAM} if H > 1 else {}
        zbufs = [Memory(shape=unsigned(33 * H), depth=2 << zhw, init=[], **zattrs) for _ in range(kpc)]
        for i, zb in enumerate(zbufs):
            m.submodules[f"zbuf{i}" if kpc > 1 else "zbuf"] = zb
        m.submodules.mbuf = mbuf = Memory(shape=signed(32) if H == 1 else unsigned(32 * H), depth=2 << bw, init=[])
        # pipelined: registered reads, the ROM in block RAM (H * (2 + kpc) ports: one RAMB18E2 per
        # two ports; in LUTs ~350 LUT a port and 10 LUT levels from the address, the whole
        # engine's slowest path)
        m.submodules.exp2 = exp2 = Memory(shape=unsigned(P_BITS + 1), depth=2 ** FZ, init=list(EXP2_LUT),
                                          attrs={"rom_style": "block"} if self.pipelined else None)
        q_wp, q_rp = qmem.write_port(), qmem.read_port()
        b_wp = btab.write_port()
        z_wps, z_rps = [zb.write_port() for zb in zbufs], [zb.read_port() for zb in zbufs]
        mb_wp, mb_rp = mbuf.write_port(), mbuf.read_port(domain="comb")
        ex = [exp2.read_port(domain="comb") for _ in range(2 + kpc)] if not self.pipelined else \
            [exp2.read_port() for _ in range(H * (2 + kpc))]
        # merge alpha, beta (row h of a pair: ex[2h], ex[2h + 1]); P's p (ex[2H + k + h]; pipelined:
        # registered reads)

        err = Signal(2)
        m.d.comb += self.error.eq(err)
        with m.If(self.error_clr):
            m.d.sync += err.eq(0)
        vars(s).update(d=d, aw=aw, pb=pb, nq_max=nq_max, nb_max=nb_max, z_max=z_max, kpc=kpc, H=H, k_rps=k_rps,
                       v_rps=v_rps, btab=btab, bw=bw, zhw=zhw, q_wp=q_wp, q_rp=q_rp, b_wp=b_wp, z_wps=z_wps,
                       z_rps=z_rps, mb_wp=mb_wp, mb_rp=mb_rp, ex=ex, err=err)

    def _job_inputs(self, m, s):
        """The job registers, the KV / q / block-table writes, the S row's q and the S and P key
        issuers."""
        d, aw, pb, z_max, kpc, k_rps, v_rps, k_wp = s.d, s.aw, s.pb, s.z_max, s.kpc, s.k_rps, s.v_rps, s.k_wp
        v_wp, btab, q_wp, q_rp, b_wp = s.v_wp, s.btab, s.q_wp, s.q_rp, s.b_wp
        nq = Signal(16)
        nblk = Signal(16)
        causal = Signal()
        flat = Signal()
        final = Signal()
        ext_m = Signal()
        fold = Signal()
        acc = Signal()
        acc_in = Signal()                    # an acc row's p_in beat is next (state ACC_IN)
        row = Signal(16)                     # the row state's row (merge, finalize, emit; fold rows)
        prow = Signal(16)                    # P side's issue (its z / m_b bank)
        srow = Signal(16)                    # S side
        cnt = Signal(16)
        qcnt, q_open = Signal(16), Signal()  # q rows in; q_in open (a job's rows, beside LOADB and S/P)

        # KV writes (idle only)
        if not self.kv_ports:
            kvp = self.kv_in.payload
            m.d.comb += [k_wp.addr.eq(kvp.addr), k_wp.data.eq(Cat(kvp.data, kvp.e)),
                         v_wp.addr.eq(kvp.addr), v_wp.data.eq(Cat(kvp.data, kvp.e))]
            vars(s).update(kvp=kvp)
            kv_busy = self.kv_in.valid
        else:
            kv_busy = Const(0)
        m.d.comb += [q_wp.addr.eq(qcnt), q_wp.en.eq(q_open & self.q_in.valid), self.q_in.ready.eq(q_open),
                     q_wp.data.eq(Cat(self.q_in.payload.data, self.q_in.payload.e,
                                                         self.q_in.payload.pos, self.q_in.payload.m_ext))]
        # nq - 1 and nblk - 1: registers set with nq and nblk when pipelined (no subtract before
        # the compares), else the expressions
        nq_m1, nblk_m1 = (Signal(16, name="nq_m1"), Signal(16, name="nblk_m1")) if self.pipelined else (nq - 1, nblk - 1)
        with m.If(q_open & self.q_in.valid):
            m.d.sync += [qcnt.eq(qcnt + 1), q_open.eq(qcnt != nq_m1)]
        bp = self.blk_in.payload
        b_void = (bp.len == 0) | (bp.len > self.blk_max) | ((bp.addr + bp.len) > self.kv_depth)
        m.d.comb += [b_wp.addr.eq(cnt),
                     b_wp.data.eq(Cat(bp.addr[:aw], Mux(b_void, 1, bp.len), bp.pos, b_void))]

        # S row (two rows per cycle: the pair's rows srow, srow + 1, read one after the other)
        H = self.rows_per_cycle
        q_cur = [Signal(d * 8, name="q_cur" + _sfx(h)) for h in range(H)]
        eq_cur = [Signal(signed(8), name="eq_cur" + _sfx(h)) for h in range(H)]
        pos_cur = [Signal(pb, name="pos_cur" + _sfx(h)) for h in range(H)]
        mext_cur = [Signal(signed(32), name="mext_cur" + _sfx(h)) for h in range(H)]
        s_qh = Signal(name="s_qh")           # two rows per cycle: the pair's second q row is read
        m.d.comb += q_rp.addr.eq(srow if H == 1 else srow + s_qh)

        # key issue counters of the S and P sides, each through its own comb block-table port
        la = self.pipelined                  # look-ahead issuers: their flags from registers
        si, pi = KeyIssuer(aw, pb, z_max, step=kpc, lookahead=la), KeyIssuer(aw, pb, z_max, step=kpc, lookahead=la)
        m.submodules.s_issuer, m.submodules.p_issuer = si, pi
        for iss in (si, pi):
            rp = btab.read_port(domain="comb")
            m.d.comb += [rp.addr.eq(iss.b), iss.entry.eq(rp.data),
                         iss.nblk_m1.eq(nblk_m1) if la else iss.nblk.eq(nblk)]
        if la:                               # the next block's row; block 0's length, kept at LOADB
            len0 = Signal(16, name="len0")
            with m.If(self.blk_in.valid & self.blk_in.ready & (cnt == 0)):
                m.d.sync += len0.eq(Mux(b_void, 1, bp.len))
            for iss in (si, pi):
                rp = btab.read_port(domain="comb")
                m.d.comb += [rp.addr.eq(iss.b_next), iss.entry_next.eq(rp.data), iss.len0.eq(len0)]
        s_clear, p_clear = Signal(), Signal()
        m.d.comb += [si.clear.eq(s_clear), pi.clear.eq(p_clear)]
        m.d.comb += [k_rps[k].addr.eq(si.entry.addr + si.j + k) for k in range(kpc)]
        if self.pipelined:     # V rows read P_V_DELAY cycles after the issue, for phase P's product stage
            va = [pi.entry.addr + pi.j + k for k in range(kpc)]
            for st in range(P_V_DELAY):
                nxt = [Signal(aw, name=f"va{st}_{k}") for k in range(kpc)]
                m.d.sync += [nxt[k].eq(va[k]) for k in range(kpc)]
                va = nxt
            m.d.comb += [v_rps[k].addr.eq(va[k]) for k in range(kpc)]
        else:
            m.d.comb += [v_rps[k].addr.eq(pi.entry.addr + pi.j + k) for k in range(kpc)]
        vars(s).update(nq_m1=nq_m1, nblk_m1=nblk_m1)
        vars(s).update(row=row, prow=prow, nq=nq, nblk=nblk, causal=causal, flat=flat, final=final, ext_m=ext_m,
                       fold=fold, acc=acc, acc_in=acc_in, srow=srow, cnt=cnt, qcnt=qcnt, q_open=q_open, kv_busy=kv_busy,
                       bp=bp, b_void=b_void, q_cur=q_cur, eq_cur=eq_cur, pos_cur=pos_cur, mext_cur=mext_cur,
                       si=si, pi=pi, s_clear=s_clear, p_clear=p_clear, s_qh=s_qh)

    def _phase_s(self, m, s):
        """Phase S: the scorer (``AttentionScorer``) between the S issuer, K rows and the z / m_b
        buffers."""
        d, aw, pb, z_max, kpc, k_rps, bw, zhw = s.d, s.aw, s.pb, s.z_max, s.kpc, s.k_rps, s.bw, s.zhw
        z_wps, mb_wp, causal, srow, q_cur, eq_cur = s.z_wps, s.mb_wp, s.causal, s.srow, s.q_cur, s.eq_cur
        pos_cur, si = s.pos_cur, s.si
        H = s.H
        bank = srow[H - 1]                   # the z / m_b bank: the row's (pair's) parity
        scs = []
        for h in range(H):                   # a scorer per row of the pair, on the same K rows
            sc = AttentionScorer(d, kpc, aw, pb, z_max, pipelined=self.pipelined)
            m.submodules["scorer" + _sfx(h)] = sc
            scs.append(sc)
            m.d.comb += [getattr(sc, n).eq(getattr(si, n)) for n in ("go", "first", "last", "two", "b", "j", "z", "entry")]
            m.d.comb += [sc.q.eq(q_cur[h]), sc.eq.eq(eq_cur[h]), sc.qpos.eq(pos_cur[h]), sc.causal.eq(causal)]
            if H == 1:
                m.d.comb += [mb_wp.addr.eq(Cat(sc.mb_b[:bw], bank)), mb_wp.data.eq(sc.mb_data), mb_wp.en.eq(sc.mb_en)]
            for k in range(kpc):
                m.d.comb += sc.kd[k].eq(k_rps[k].data)
                if H == 1:
                    m.d.comb += [z_wps[k].addr.eq(Cat(sc.zw[k].idx[:zhw], bank)),
                                 z_wps[k].data.eq(sc.zw[k].data), z_wps[k].en.eq(sc.zw[k].en)]
        sc = scs[0]
        if H > 1:        # the scorers run in lock step: scorer 0's addresses and enables for both rows
            m.d.comb += [mb_wp.addr.eq(Cat(sc.mb_b[:bw], bank)), mb_wp.data.eq(Cat(*(c.mb_data for c in scs))),
                         mb_wp.en.eq(sc.mb_en),
                         z_wps[0].addr.eq(Cat(sc.zw[0].idx[:zhw], bank)),
                         z_wps[0].data.eq(Cat(*(c.zw[0].data for c in scs))), z_wps[0].en.eq(sc.zw[0].en)]
        s1_v = sc.busy if self.pipelined else sc.valid   # a key in the scorer
        Mrow_s = [c.row_max for c in scs]    # Mrow_s: max_b m_b of the S row so far
        # M of the P row (latched at the S -> P handoff); M of the row state's row (from Mrow_p when
        # it opens)
        Mrow_p = [Signal(signed(32), name="Mrow_p" + _sfx(h)) for h in range(H)]
        Mrow = [Signal(signed(32), name="Mrow" + _sfx(h)) for h in range(H)]
        vars(s).update(scs=scs, s1_v=s1_v, Mrow_s=Mrow_s, Mrow_p=Mrow_p, Mrow=Mrow)

    def _merge(self, m, s):
        """Phase P (``_phase_p``), the block accumulators l_b, o_b, and the merge (L lanes per
        cycle) into the row state m_run, l_run, o_run; fold jobs' partials enter at p3."""
        d, v_rps, row, bw, zhw, z_rps, mb_rp, ex = s.d, s.v_rps, s.prow, s.bw, s.zhw, s.z_rps, s.mb_rp, s.ex
        flat, fold, pi, Mrow = s.flat, s.fold, s.pi, s.Mrow
        from_pin = fold | s.acc_in           # p3 takes a p_in beat (fold rows, an acc row's start)
        H = s.H
        if self.pipelined:
            pl = self._phase_p_pipelined(m, pi, v_rps, z_rps, zhw, mb_rp, bw, row, ex[2 * H:])
            p_last_flight, p2_v, p2_first, p2_last, p2_mbs, p2_p, p2_t, (pe_t, pe_first) = pl
        else:
            pl = self._phase_p(m, pi, v_rps, z_rps, zhw, mb_rp, bw, row, ex[2:])
            p1_v, p1_last, p2_v, p2_first, p2_last, p2_mb, p2_p, p2_t = pl
            p2_mbs = [p2_mb]
            p_last_flight = (p1_v & p1_last) | (p2_v & p2_last)
        pin = self.p_in.payload
        pin_take = Signal()
        acc_h = Signal(name="acc_h")         # two rows per cycle: an acc pair's p_in beat is row h's
        L = self.merge_lanes
        nsteps = d // L
        fin_rot = Signal()                   # finalize: rotate o_run by L lanes (see below)
        halves = []                          # row h of the pair: its accumulators, p3 and row state
        for h in range(H):
            sf, lf = _sfx(h), _sfx(h, "_")   # names: row 0's as with one row per cycle
            lb = Signal(ACC_BITS, name="lb" + sf)
            # the keys of one cycle are summed here (integer adds: exact, as golden's sums)
            lb_n = sum(p2_p if H == 1 else [p2_p[h]], Mux(p2_first, 0, lb))
            with m.If(p2_v):
                m.d.sync += lb.eq(lb_n)
            ob_n = None
            if p2_t:
                ob = [Signal(signed(ACC_BITS), name=f"ob{i}") for i in range(d)]
                ob_n = [sum((t[i] for t, _ in p2_t), Mux(p2_first, 0, ob[i])) + sum(c[i] for _, c in p2_t)
                        for i in range(d)]
                with m.If(p2_v):
                    m.d.sync += [ob[i].eq(ob_n[i]) for i in range(d)]
            else:
                # one key per cycle (pipelined): o_b on DSP48E2 accumulators, the term's floor on A:B
                # and its round bit on CARRYIN, registered in the DSP as p2's (hdl.dsp48e2)
                ob = []
                for i, (f, b) in enumerate(pe_t[h]):
                    m.submodules[f"ob_acc{lf}{i}"] = acc = DSPAccumulator()
                    m.d.comb += [acc.x.eq(f), acc.ci.eq(b), acc.load.eq(pe_first), acc.en.eq(p2_v)]
                    ob.append(acc.p)
            p3_v = Signal(name="p3_v" + sf)
            p3_mb = Signal(signed(32), name="p3_mb" + sf)
            p3_l = Signal(ACC_BITS, name="p3_l" + sf)
            p3_o = [Signal(signed(ACC_BITS), name=f"p3_o{lf}{i}") for i in range(d)]
            if h == 0:
                m.d.comb += pin_take.eq(self.p_in.valid & self.p_in.ready)
            p3_ld = Mux(from_pin, pin_take if H == 1 else pin_take & (acc_h == h), p2_v & p2_last)
            m.d.sync += [p3_v.eq(p3_ld),
                         p3_mb.eq(Mux(from_pin, pin.m, p2_mbs[h])), p3_l.eq(Mux(from_pin, pin.l, lb_n))]
            # the o lanes of a merge are processed L per cycle (mg_busy, d/L cycles): o_run and p3_o
            # rotate down by L lanes per step, the merged lanes enter at the top. p3 is only loaded
            # when no merge is pending (issue of a block's last key / p_in.ready wait for mg_idle).
            mg_busy = Signal(name="mg_busy" + sf)
            mg_idle = Signal(name="mg_idle" + sf)
            m.d.comb += mg_idle.eq(~mg_busy & ~p3_v)
            m_run = Signal(signed(32), name="m_run" + sf)
            l_run = Signal(ACC_BITS, name="l_run" + sf)
            o_run = [Signal(signed(ACC_BITS), name=f"o_run{lf}{i}") for i in range(d)]
            yv = [Signal(signed(32), name=f"dv_y{lf}{j}") for j in range(L)]     # finalize results (below)
            halves.append(SimpleNamespace(ob=ob, ob_n=ob_n, lb_n=lb_n, p3_v=p3_v, p3_mb=p3_mb, p3_l=p3_l,
                                          p3_o=p3_o, p3_ld=p3_ld, mg_busy=mg_busy, mg_idle=mg_idle,
                                          m_run=m_run, l_run=l_run, o_run=o_run, yv=yv, Mrow=Mrow[h],
                                          ex=ex[2 * h:2 * h + 2], sfx=sf, sfx_=lf))
        if H == 1:
            mg_busy, mg_idle = halves[0].mg_busy, halves[0].mg_idle
        else:                                # the pair's merges: any busy / all idle
            mg_busy, mg_idle = Signal(name="mg_busy_any"), Signal(name="mg_idle_all")
            m.d.comb += [mg_busy.eq(Cat(*(x.mg_busy for x in halves)).any()),
                         mg_idle.eq(Cat(*(x.mg_idle for x in halves)).all())]
        x = halves[0]
        vars(s).update(p_last_flight=p_last_flight, p2_v=p2_v, p2_last=p2_last, pin_take=pin_take, L=L,
                       mg_busy=mg_busy, o_run=x.o_run, mg_idle=mg_idle, fin_rot=fin_rot, m_run=x.m_run,
                       l_run=x.l_run, yv=x.yv, halves=halves, acc_h=acc_h)
        if self.pipelined:
            # a block's o_b enters p3 from the accumulators the cycle after its last key's add
            # (the merge ring reads p3_o from MERGE_PRE cycles after p3_v); a fold row's from p_in
            assert MERGE_PRE >= 1, "the ring must not read p3_o in the cycle o_b is loaded"
            ob_ld = Signal(name="p3_ob_ld")
            m.d.sync += ob_ld.eq(p2_v & p2_last & ~from_pin)
            for x in halves:
                self._merge_ring(m, s, x, [(x.p3_ld & from_pin, pin.o), (ob_ld, x.ob)])
            return
        p3_v, p3_mb, p3_l, p3_o, p3_ld, ob_n = x.p3_v, x.p3_mb, x.p3_l, x.p3_o, x.p3_ld, x.ob_n
        m_run, l_run, o_run, yv, Mrow = x.m_run, x.l_run, x.o_run, x.yv, Mrow[0]
        mg_cnt = Signal(range(nsteps))
        with m.If(p3_ld):
            m.d.sync += [p3_o[i].eq(Mux(from_pin, pin.o[i], ob_n[i])) for i in range(d)]
        with m.Elif(mg_busy):
            m.d.sync += [p3_o[i].eq(p3_o[i + L]) for i in range(d - L)]

        # merge into the row state
        Mf = Mux(flat, Mrow, Mux(m_run > p3_mb, m_run, p3_mb))
        al = Signal(P_BITS + 1)
        be = Signal(P_BITS + 1)
        m.d.comb += [al.eq(_exp2_fixed(m, ex[0], m_run - Mf)), be.eq(_exp2_fixed(m, ex[1], p3_mb - Mf))]

        al_r = Signal(P_BITS + 1)
        be_r = Signal(P_BITS + 1)

        def mrg(run, blk, al, be):
            a_part = Mux(flat, run, rshift_round(run * al, P_BITS))
            return a_part + rshift_round(blk * be, P_BITS)
        with m.If(p3_v):
            m.d.sync += [m_run.eq(Mf), l_run.eq(mrg(l_run, p3_l, al, be)), al_r.eq(al), be_r.eq(be),
                         mg_busy.eq(1), mg_cnt.eq(0)]
        with m.Elif(mg_busy | fin_rot):
            # merge step, or (finalize) a plain rotation by L lanes
            m.d.sync += [o_run[i].eq(o_run[i + L]) for i in range(d - L)]
            m.d.sync += [o_run[d - L + j].eq(Mux(fin_rot, yv[j], mrg(o_run[j], p3_o[j], al_r, be_r)))
                         for j in range(L)]
        with m.If(mg_busy):
            m.d.sync += mg_cnt.eq(mg_cnt + 1)
            with m.If(mg_cnt == nsteps - 1):
                m.d.sync += mg_busy.eq(0)

    def _merge_ring(self, m, s, x, p3_o_loads):
        """The merge in stages (``pipelined``) of one row (``x``: row h of the pair's p3, row state,
        EXP2 ports and name suffix): p3_v M = max(m_run, m_b) (or the row's M, flat) |
        the EXP2 addresses M - m_run, M - m_b | the registered ROM reads | alpha, beta (alpha =
        2**15 for flat: rshift_round(x * 2**15, 15) == x) | then the o lanes go round a ring of
        o_run (d/L segments of L lanes) and MERGE_STAGES segments of pipeline -- the products of
        the lanes' halves, their sums, the rounding and the add -- so that after d/L +
        MERGE_STAGES rotations every segment has passed the pipeline once and is back in place
        (l_run the same way beside it). ``mg_busy`` from the cycle after p3_v to the last rotation."""
        d, L, flat, fin_rot = s.d, s.L, s.flat, s.fin_rot
        p3_v, p3_mb, p3_l, p3_o, Mrow, ex = x.p3_v, x.p3_mb, x.p3_l, x.p3_o, x.Mrow, x.ex
        mg_busy, o_run, m_run, l_run, yv, sf = x.mg_busy, x.o_run, x.m_run, x.l_run, x.yv, x.sfx_
        nsteps = d // L
        pre = MERGE_PRE                           # addresses, ROM read, alpha / beta
        total = pre + nsteps + MERGE_STAGES
        mg_cnt = Signal(range(total), name="mg_cnt" + x.sfx)
        ring = Signal(name="mg_ring" + x.sfx)             # a rotation step this cycle
        m.d.comb += ring.eq(mg_busy & (mg_cnt >= pre))
        for k, (when, vals) in enumerate(p3_o_loads):    # (when, the d lanes): p3_o's loads, first wins
            with (m.Elif if k else m.If)(when):
                m.d.sync += [p3_o[i].eq(vals[i]) for i in range(d)]
        with m.Elif(ring):
            m.d.sync += [p3_o[i].eq(p3_o[i + L]) for i in range(d - L)]
        mf, ma = Signal(signed(32), name=f"mg_{sf}mf"), Signal(signed(32), name=f"mg_{sf}ma")
        mb_h, l_h = Signal(signed(32), name=f"mg_{sf}mb"), Signal(ACC_BITS, name=f"mg_{sf}l")   # p3's, held
        nxa, nxb = Signal(33, name=f"mg_{sf}nxa"), Signal(33, name=f"mg_{sf}nxb")
        big = [Signal(name=f"mg_{sf}big{k}") for k in range(2)]
        sh = [Signal(4, name=f"mg_{sf}n{k}") for k in range(2)]
        al_r, be_r = Signal(P_BITS + 1, name="al_r" + x.sfx), Signal(P_BITS + 1, name="be_r" + x.sfx)
        with m.If(p3_v):
            Mf = Mux(flat, Mrow, Mux(m_run > p3_mb, m_run, p3_mb))
            m.d.sync += [mf.eq(Mf), ma.eq(m_run), mb_h.eq(p3_mb), l_h.eq(p3_l), m_run.eq(Mf), mg_busy.eq(1),
                         mg_cnt.eq(0)]
        m.d.sync += [nxa.eq(mf - ma), nxb.eq(mf - mb_h)]          # -(m_run - M), -(m_b - M): >= 0
        m.d.comb += [ex[0].addr.eq(nxa[:FZ]), ex[1].addr.eq(nxb[:FZ])]
        m.d.sync += [big[0].eq(nxa[FZ:] >= 16), big[1].eq(nxb[FZ:] >= 16), sh[0].eq(nxa[FZ:FZ + 4]),
                     sh[1].eq(nxb[FZ:FZ + 4])]
        with m.If(mg_busy & (mg_cnt == pre - 1)):
            m.d.sync += [al_r.eq(Mux(flat, 1 << P_BITS, Mux(big[0], 0, ex[0].data >> sh[0]))),
                         be_r.eq(Mux(big[1], 0, ex[1].data >> sh[1]))]
        with m.If(mg_busy):
            m.d.sync += mg_cnt.eq(mg_cnt + 1)
            with m.If(mg_cnt == total - 1):
                m.d.sync += mg_busy.eq(0)

        def halves(x, a, name):
            """x * a as two registered products of x's 24-bit halves (each one DSP48E2); x signed
            (o) or unsigned (l), as its shape says."""
            top = x[24:].as_signed() if x.shape().signed else x[24:]
            lo, hi = Signal(40, name=name + "_lo"), Signal(signed(42), name=name + "_hi")
            m.d.sync += [lo.eq(x[:24] * a), hi.eq(top * a)]
            return lo, hi

        def joined(h, name):
            x = Signal(signed(ACC_BITS + P_BITS + 2), name=name)
            m.d.sync += x.eq((h[1] << 24) + h[0])
            return x

        def rounded_sum(xa, xb):
            """rshift_round(xa, 15) + rshift_round(xb, 15): floor + bit 14 of each."""
            return (xa >> P_BITS) + (xb >> P_BITS) + (xa[P_BITS - 1] + xb[P_BITS - 1])
        # the ring: o_run[0:L] -> halves' products -> joined -> rounded sum -> o_run top
        seg_a = [(halves(o_run[j], al_r, f"mg_a{sf}{j}"), halves(p3_o[j], be_r, f"mg_b{sf}{j}")) for j in range(L)]
        seg_b = [(joined(a, f"mg_ja{sf}{j}"), joined(b, f"mg_jb{sf}{j}")) for j, (a, b) in enumerate(seg_a)]
        seg_c = [Signal(signed(ACC_BITS), name=f"mg_y{sf}{j}") for j in range(L)]
        m.d.sync += [seg_c[j].eq(rounded_sum(a, b)) for j, (a, b) in enumerate(seg_b)]
        # l_run beside it: its products at the first rotation, joined, summed at the third
        la, lb_ = halves(l_run, al_r, f"mg_{sf}la"), halves(l_h, be_r, f"mg_{sf}lb")
        lja, ljb = joined(la, f"mg_{sf}lja"), joined(lb_, f"mg_{sf}ljb")
        with m.If(mg_busy & (mg_cnt == pre + MERGE_STAGES - 1)):
            m.d.sync += l_run.eq(rounded_sum(lja, ljb))
        with m.If(ring | fin_rot):
            m.d.sync += [o_run[i].eq(o_run[i + L]) for i in range(d - L)]
            m.d.sync += [o_run[d - L + j].eq(Mux(fin_rot, yv[j], seg_c[j])) for j in range(L)]

    def _finalize(self, m, s):
        """The L finalize dividers on o_run[:L]."""
        d, L = s.d, s.L
        # L restoring dividers, one per lane of o_run[:L], run side by side (QB cycles for L
        # elements); their results enter o_run at the top through the merge's rotation by L lanes,
        # so after d/L rounds o_run holds the results in order and EMIT always sends o_run (no
        # d-way mux or demux, no second d-word result register).
        fi = Signal(range(d + 1))
        dv_cnt = Signal(range(QB + 1))
        dv_start = Signal()                        # load the L dividers from o_run[:L]
        dv_step = Signal()
        for h, x in enumerate(s.halves):         # two rows per cycle: the pair's rows side by side
            # pipelined: the results a cycle after the last step (DIV_Y), the dividers' registers
            # and the remainder's test registered there, rounded and saturated into o_run at DIV_DONE
            m.submodules["dividers" + _sfx(h)] = dv = FinalizeDividers(L, registered=self.pipelined)
            o_run, l_run, yv = x.o_run, x.l_run, x.yv
            m.d.comb += [dv.l.eq(l_run), dv.start.eq(dv_start), dv.step.eq(dv_step)]
            m.d.comb += [dv.o[j].eq(o_run[j]) for j in range(L)]
            m.d.comb += [yv[j].eq(dv.y[j]) for j in range(L)]
        vars(s).update(fi=fi, dv_cnt=dv_cnt, dv_start=dv_start, dv_step=dv_step)

    def _s_control(self, m, s):
        """The job FSM's shared control signals and the S side's row FSM."""
        d, pb, q_rp, nq, srow, qcnt, q_cur, eq_cur = s.d, s.pb, s.q_rp, s.nq, s.srow, s.qcnt, s.q_cur, s.eq_cur
        pos_cur, mext_cur, si, s_clear, s1_v = s.pos_cur, s.mext_cur, s.si, s.s_clear, s.s1_v
        H = s.H
        # a fold row starts from (m = -2**31, l = 0, o = 0): softmax_merge of that with any partial P
        # is P exactly (M = m_P, beta = 2**15, the zero state contributes 0), so every partial,
        # the first included, goes through the merge: golden merge_partials
        fold_row_init = sum(([x.m_run.eq(-2 ** 31), x.l_run.eq(0)] + [x.o_run[i].eq(0) for i in range(d)]
                             for x in s.halves), [])
        o = self.o_out
        with m.If(o.ready):
            m.d.sync += o.valid.eq(0)
        c = self.cmd.payload
        drain = Signal()                     # a fold row's last partial is in p3
        ztot = Signal(32)
        s_start = Signal()                   # the job's blocks are loaded: S starts row 0
        s_ready = Signal()                   # S row srow complete (z, m_b written, Mrow_s final)
        handoff = Signal()                   # P takes the S row: P row = srow, S moves on
        # S side: S of row r+1 runs while P of row r reads the other bank; it starts row r+2 only
        # after the handoff of r+1, i.e. after P has finished row r.
        with m.FSM(name="s"):
            with m.State("S_IDLE"):
                m.d.sync += srow.eq(0)
                with m.If(s_start):
                    m.next = "S_ROW_WAIT"
            with m.State("S_ROW_WAIT"):      # q_rp.addr = srow; its q row written an edge before
                # two rows per cycle: the pair's second row too, unless srow is the job's last
                with m.If(qcnt > srow if H == 1 else (qcnt > srow + 1) | ((qcnt > srow) & (srow == s.nq_m1))):
                    m.next = "S_ROW"
            for h in range(H):               # the pair's q rows, one read each
                with m.State("S_ROW" + _sfx(h)):
                    qd = q_rp.data
                    m.d.sync += [q_cur[h].eq(qd[:8 * d]), eq_cur[h].eq(qd[8 * d:8 * d + 8].as_signed()),
                                 pos_cur[h].eq(qd[8 * d + 8:8 * d + 8 + pb]),
                                 mext_cur[h].eq(qd[8 * d + 8 + pb:].as_signed())]
                    if h == H - 1:
                        m.d.comb += [s_clear.eq(1)] + [c.row_clear.eq(1) for c in s.scs]
                        m.next = "S_RUN"
                    else:
                        m.d.comb += s.s_qh.eq(1)
                        m.next = f"S_ROW{h + 1}"
            with m.State("S_RUN"):
                m.d.comb += si.go.eq(1)
                with m.If(si.last & si.blk_last):
                    m.next = "S_DONE"
            with m.State("S_DONE"):          # last key in s1 for one cycle, then ready
                m.d.comb += s_ready.eq(~s1_v)
                with m.If(handoff):
                    m.d.sync += srow.eq(srow + H)
                    with m.If(srow == s.nq_m1 if H == 1 else srow + 1 >= s.nq_m1):
                        m.next = "S_IDLE"
                    with m.Else():
                        m.next = "S_ROW_WAIT"
        vars(s).update(handoff=handoff, o=o, fold_row_init=fold_row_init, c=c, drain=drain, ztot=ztot,
                       s_start=s_start, s_ready=s_ready)

    def _p_fsm(self, m, s):
        """The P side's row FSM: takes row ``prow`` from S (the handoff, when S has completed it) and
        issues its keys; a block's last key waits for the previous block's merge (p3 free) and for
        the row state to be open for this row (``st_open``: the job FSM has emitted the previous
        row and reset the state, or merged an acc row's partial into it). So P starts row r+1's
        keys right after row r's last one while row r's last merge, finalize and emit run."""
        pi, p_clear, handoff, s_ready, prow = s.pi, s.p_clear, s.handoff, s.s_ready, s.prow
        st_open, p_taken = Signal(), Signal()     # the row state takes merges; P has a row not yet opened
        with m.FSM(name="p"):
            with m.State("P_IDLE"):
                with m.If(s.s_start):
                    m.d.sync += prow.eq(0)
                    m.next = "P_WAIT"
            with m.State("P_WAIT"):          # for S to complete row prow
                m.d.comb += handoff.eq(s_ready)
                with m.If(s_ready):
                    m.d.sync += [mp.eq(Mux(s.ext_m & (me > ms), me, ms))
                                 for mp, me, ms in zip(s.Mrow_p, s.mext_cur, s.Mrow_s)] + [p_taken.eq(1)]
                    m.d.comb += p_clear.eq(1)
                    m.next = "P"
            with m.State("P"):
                hold = pi.last & (s.p_last_flight | ~s.mg_idle | ~st_open)
                m.d.comb += pi.go.eq(~hold)
                with m.If(pi.last & pi.blk_last & ~hold):
                    m.d.sync += [st_open.eq(0), prow.eq(prow + s.H)]
                    with m.If(prow == s.nq_m1 if s.H == 1 else prow + 1 >= s.nq_m1):
                        m.next = "P_IDLE"
                    with m.Else():
                        m.next = "P_WAIT"
        vars(s).update(st_open=st_open, p_taken=p_taken)

    def _job_fsm(self, m, s):
        """The job FSM (idle / KV writes, block load, P, drain, fold rows, finalize, emit) and
        ``busy``."""
        d, nq_max, nb_max, z_max, k_wp, v_wp, row = s.d, s.nq_max, s.nb_max, s.z_max, s.k_wp, s.v_wp, s.row
        b_wp, err, nq, nblk, causal, flat, final = s.b_wp, s.err, s.nq, s.nblk, s.causal, s.flat, s.final
        ext_m, fold, cnt, qcnt, q_open, kvp = s.ext_m, s.fold, s.cnt, s.qcnt, s.q_open, s.kvp
        acc, acc_in = s.acc, s.acc_in
        kv_busy, bp, b_void = s.kv_busy, s.bp, s.b_void
        Mrow, p_last_flight, st_open, p_taken = s.Mrow, s.p_last_flight, s.st_open, s.p_taken
        pin_take, o, L, mg_busy, o_run = s.pin_take, s.o, s.L, s.mg_busy, s.o_run
        mg_idle, fin_rot, m_run, l_run, fi, dv_cnt = s.mg_idle, s.fin_rot, s.m_run, s.l_run, s.fi, s.dv_cnt
        dv_start, dv_step, fold_row_init, c, drain = s.dv_start, s.dv_step, s.fold_row_init, s.c, s.drain
        ztot, s_start, H, acc_h = s.ztot, s.s_start, s.H, s.acc_h
        eh = Signal(name="emit_h")           # two rows per cycle: EMIT sends the pair's row eh
        with m.FSM(name="att") as fsm:
            with m.State("IDLE"):
                if not self.kv_ports:
                    m.d.comb += [self.kv_in.ready.eq(1), k_wp.en.eq(self.kv_in.valid & ~kvp.sel),
                                 v_wp.en.eq(self.kv_in.valid & kvp.sel)]
                m.d.comb += self.cmd.ready.eq(~kv_busy)
                with m.If(self.cmd.valid & ~kv_busy):
                    with m.If((c.nq == 0) | (c.nq > nq_max) | (c.nblk == 0)
                              | (~c.fold & ((c.nblk > nb_max) | (c.acc & c.flat)))):
                        m.d.sync += err.eq(err | ERR_SHAPE)
                    with m.Elif(c.fold):
                        if self.pipelined:
                            m.d.sync += [s.nq_m1.eq(c.nq - 1), s.nblk_m1.eq(c.nblk - 1)]
                        m.d.sync += [nq.eq(c.nq), nblk.eq(c.nblk), causal.eq(0), flat.eq(0), final.eq(c.final),
                                     ext_m.eq(0), fold.eq(1), acc.eq(0), cnt.eq(0), row.eq(0)] + fold_row_init
                        m.next = "FOLD_IN"
                    with m.Else():
                        if self.pipelined:
                            m.d.sync += [s.nq_m1.eq(c.nq - 1), s.nblk_m1.eq(c.nblk - 1)]
                        m.d.sync += [nq.eq(c.nq), nblk.eq(c.nblk), causal.eq(c.causal), flat.eq(c.flat),
                                     final.eq(c.final), ext_m.eq(c.ext_m), fold.eq(0), acc.eq(c.acc), cnt.eq(0),
                                     ztot.eq(0),
                                     qcnt.eq(0), q_open.eq(1)]
                        m.next = "LOADB"
            with m.State("LOADB"):
                m.d.comb += [self.blk_in.ready.eq(1), b_wp.en.eq(self.blk_in.valid)]
                with m.If(self.blk_in.valid):
                    m.d.sync += cnt.eq(cnt + 1)
                    with m.If(b_void):
                        m.d.sync += err.eq(err | ERR_SHAPE)
                    ztot_n = ztot + Mux(b_void, 1, bp.len)
                    m.d.sync += ztot.eq(ztot_n)
                    with m.If(ztot_n > z_max):
                        m.d.sync += err.eq(err | ERR_SHAPE)
                    with m.If(cnt == s.nblk_m1):
                        m.d.comb += s_start.eq(1)
                        m.d.sync += row.eq(0)
                        m.next = "OPEN"
            with m.State("OPEN"):            # for P to take row `row` from S, then the state is reset
                with m.If(p_taken):
                    m.d.sync += [p_taken.eq(0)] + [mr.eq(mp) for mr, mp in zip(Mrow, s.Mrow_p)]
                    with m.If(acc):          # the row state starts as the row's p_in partial
                        m.d.sync += [acc_in.eq(1)] + fold_row_init
                        m.next = "ACC_IN"
                    with m.Else():
                        for h, x in enumerate(s.halves):
                            m.d.sync += [x.m_run.eq(M_EMPTY), x.l_run.eq(0)] + ([st_open.eq(1)] if h == 0 else []) + \
                                [x.o_run[i].eq(0) for i in range(d)]
                        m.next = "ROW"
            with m.State("ACC_IN"):          # the row's partial into p3 (merged beside P's keys)
                if H == 1:
                    m.d.comb += self.p_in.ready.eq(mg_idle)
                    with m.If(pin_take):
                        m.d.sync += [acc_in.eq(0), st_open.eq(1)]
                        m.next = "ROW"
                else:                        # the pair's partials, row by row (acc_h)
                    m.d.comb += self.p_in.ready.eq(Mux(acc_h, s.halves[1].mg_idle, s.halves[0].mg_idle))
                    with m.If(pin_take):
                        with m.If(~acc_h & (row != s.nq_m1)):
                            m.d.sync += acc_h.eq(1)
                        with m.Else():
                            m.d.sync += [acc_h.eq(0), acc_in.eq(0), st_open.eq(1)]
                            m.next = "ROW"
            with m.State("ROW"):
                # P issues the row's keys and has issued its last one (st_open falls a cycle after,
                # when the key is in P's first stage); then its last merge is done
                with m.If(~st_open & ~p_last_flight & mg_idle):
                    m.d.sync += fi.eq(0)
                    with m.If(final):
                        m.next = "DIV_START"
                    with m.Else():
                        m.next = "EMIT"
            with m.State("FOLD_IN"):         # nblk partials of row `row` on p_in
                m.d.comb += self.p_in.ready.eq(mg_idle)
                with m.If(pin_take):
                    m.d.sync += cnt.eq(cnt + 1)
                    with m.If(cnt == s.nblk_m1):
                        m.d.sync += [cnt.eq(0), drain.eq(0)]
                        m.next = "FOLD_DRAIN"
            with m.State("FOLD_DRAIN"):      # last partial in p3 (1 cycle), merged (d/L cycles)
                with m.If(drain != 1):
                    m.d.sync += drain.eq(drain + 1)
                with m.If((drain == 1) & ~mg_busy):
                    m.d.sync += fi.eq(0)
                    with m.If(final):
                        m.next = "DIV_START"
                    with m.Else():
                        m.next = "EMIT"
            with m.State("DIV_START"):       # L elements into the dividers
                with m.If(fi == d):
                    m.next = "EMIT"
                with m.Else():
                    m.d.comb += dv_start.eq(1)
                    m.d.sync += dv_cnt.eq(0)
                    m.next = "DIV"
            with m.State("DIV"):
                m.d.comb += dv_step.eq(1)
                m.d.sync += dv_cnt.eq(dv_cnt + 1)
                with m.If(dv_cnt == QB - 1):
                    m.next = "DIV_Y" if self.pipelined else "DIV_DONE"
            if self.pipelined:
                with m.State("DIV_Y"):       # the dividers hold; their results into yv
                    m.next = "DIV_DONE"
            with m.State("DIV_DONE"):        # L results in at the top, the next L to o_run[:L]
                m.d.comb += fin_rot.eq(1)
                m.d.sync += fi.eq(fi + L)
                m.next = "DIV_START"
            with m.State("EMIT"):            # two rows per cycle: row eh of the pair (a fold row: 0)
                with m.If(~o.valid if self.emit_on_empty else ~o.valid | o.ready):
                    if H == 1:
                        m.d.sync += [o.valid.eq(1), o.payload.m.eq(m_run), o.payload.l.eq(l_run),
                                     o.payload.last.eq(row == s.nq_m1)]
                        m.d.sync += [o.payload.o[i].eq(o_run[i]) for i in range(d)]
                    else:
                        x0, x1 = s.halves
                        m.d.sync += [o.valid.eq(1), o.payload.m.eq(Mux(eh, x1.m_run, x0.m_run)),
                                     o.payload.l.eq(Mux(eh, x1.l_run, x0.l_run)), o.payload.last.eq(row == s.nq_m1),
                                     eh.eq(~eh & ~fold & (row != s.nq_m1))]
                        m.d.sync += [o.payload.o[i].eq(Mux(eh, x1.o_run[i], x0.o_run[i])) for i in range(d)]
                    m.d.sync += row.eq(row + 1)
                    with m.If(row == s.nq_m1):
                        m.next = "IDLE"
                    with m.Elif(fold):
                        m.d.sync += fold_row_init
                        m.next = "FOLD_IN"
                    with (m.Elif(eh) if H > 1 else m.Else()):
                        m.next = "OPEN"
        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE"))
