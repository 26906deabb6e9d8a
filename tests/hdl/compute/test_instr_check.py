"""InstrCheck vs a Python model of the engine's instruction rules (the engine's module docstring,
spec.instr): random instructions of every opcode near its valid region with up to two fields moved
to or past a limit, on-chip K/V and K/V in DDR; ``bad_op``, ``bad`` and the derived shapes equal
the model's, and both accepted and refused instructions occur."""
import random
from types import SimpleNamespace

from amaranth import Value
from amaranth.sim import Simulator
from hypothesis import given, settings, strategies as st

from mcf_fpga.hdl.compute.instr_check import InstrCheck
from mcf_fpga.hdl.compute.vector import VecOp
from mcf_fpga.spec.instr import FIELDS, EngineOpcode as Op, instr_value
from mcf_fpga.spec.kvregion import KVRegion
from mcf_fpga.spec.meta import DEFAULT_PARAMS
from mcf_fpga.spec.partial import PartialRow

GEMM = SimpleNamespace(pn=4, pk=16, group=32, kc_max=4, t_max=4, x_depth=14)
ATT = SimpleNamespace(d=8, nq_max=4, nb_max=2, blk_max=8, z_max=12, kv_depth=16, pos_bits=8)
LIM = dict(sp_depth=300, em_depth=40, gemm=GEMM, vec_d_max=16, att=ATT)
REGION = KVRegion(0x4000, 3, 12, 8, 8, 16)
WIN, NWIN = 8, 2
LEN_BITS = DEFAULT_PARAMS.length_bits


def model(f, claimed=None):
    """(bad_op, bad, rows_att, emit_rows, emit_len, kvs_len, att_w) of instruction fields ``f``."""
    ddr = claimed is not None
    g, au, sp, em = GEMM, ATT, LIM["sp_depth"], LIM["em_depth"]
    op, K, n0, n1, fl = f["op"], f["len"], f["n0"], f["n1"], f["flags"]
    bit = lambda i: fl >> i & 1
    rows = n0 * n1
    PW = PartialRow(au.d).words
    bits = f["bits"]
    bad_pack = (n0 % 4 != 0) if bits == 8 else (n0 % 8 != 0) if bits == 4 else True
    emit_rows = n1 or 1
    words = n0 if n1 == 0 else rows
    emit_len = (words // 2 if bits == 4 else words) if bit(1) else words * 4
    kvs_len = 8 + f["ntok"] * REGION.row_bytes
    att_w = min(f["kvb"] // WIN, NWIN - 1)
    max_addr = lambda base: base + (n0 - 1) * f["so"] + (n1 - 1) * K + K - 1
    erow_max = f["ea"] + (n0 - 1) * f["eo"] + (n1 - 1) * f["ei"]
    a, b, dst, kvb, ntok, nblk, bs = f["a"], f["b"], f["dst"], f["kvb"], f["ntok"], f["nblk"], f["bs"]
    out_bad = (max_addr(dst) >= sp) if bit(2) else (dst + rows * PW > sp)
    if op == Op.NOP:
        bad = False
    elif op == Op.SPW:
        bad = n0 == 0 or dst + n0 > (em if bit(0) else sp) or (bit(1) and bad_pack)
    elif op == Op.SPR:
        bad = n0 == 0 or a + n0 > (em if bit(0) else sp)
    elif op == Op.EMIT:
        bad = (n0 == 0 or a + (emit_rows - 1) * f["so"] + n0 > (em if bit(0) else sp)
               or emit_len >= 2 ** LEN_BITS or (bit(1) and bad_pack))
    elif op == Op.GEMM:
        kc = K // g.pk
        bad = (K == 0 or K % g.group or kc > g.kc_max or n0 == 0 or n0 > g.t_max or n0 * kc > g.x_depth
               or n1 == 0 or n1 % g.pn or a + n0 * K > sp or dst + n0 * n1 > sp or f["ea"] + n0 > em)
    elif op == Op.VEC:
        rope, binop = f["sub"] == 4, f["sub"] in (0, 1)
        vrows = rows if rope else n0
        blen = K // 2 if rope else K
        bad = (f["sub"] > 4 or K == 0 or K > LIM["vec_d_max"] or n0 == 0 or not 2 <= bits <= 8 or f["frac"] > 30
               or (rope and (K % 2 or n1 == 0)) or vrows > 0xFFFF or a + vrows * K > sp or dst + vrows * K > sp
               or ((binop or rope) and b + n0 * blen > sp) or f["ed"] + vrows > em)
    elif op == Op.KVW:
        kv_rows = REGION.slot_rows if ddr else au.kv_depth
        bad = (K != au.d or rows == 0 or max_addr(a) >= sp or erow_max >= em
               or kvb + (n1 - 1) * f["kvs"] + n0 > kv_rows or (ddr and b >= REGION.n_slots))
    elif op == Op.ATT:
        bad = (K != au.d or rows == 0 or rows > au.nq_max or nblk == 0 or nblk > au.nb_max or bs == 0
               or bs > au.blk_max or ntok > nblk * bs or ntok == 0 or ntok <= (nblk - 1) * bs or ntok > au.z_max
               or kvb + ntok > au.kv_depth or f["kpos"] + ntok > 2 ** au.pos_bits or max_addr(a) >= sp
               or out_bad or (bit(3) and b + rows > sp) or erow_max >= em
               or (f["sub"] & 2 and (bit(1) or bit(3) or b + rows * PW > sp))     # acc
               or (ddr and (kvb + ntok > (att_w + 1) * WIN or not claimed >> att_w & 1)))
    elif op == Op.FOLD:
        bad = (K != au.d or rows == 0 or rows > au.nq_max or nblk == 0
               or a + (nblk - 1) * b + rows * PW > sp or out_bad)
    elif ddr and op == Op.KVS:
        bad = (ntok == 0 or b >= REGION.n_slots or kvb + ntok > 2 * REGION.slot_rows or kvs_len >= 2 ** LEN_BITS)
    elif ddr and op == Op.KVL:
        bad = (ntok == 0 or ntok > WIN or dst >= NWIN or b >= REGION.n_slots or kvb + ntok > REGION.slot_rows
               or claimed >> (dst & 1) & 1)
    else:
        return (1, 0, rows, emit_rows, emit_len) + ((kvs_len, att_w) if ddr else ())
    return (0, int(bool(bad)), rows, emit_rows, emit_len) + ((kvs_len, att_w) if ddr else ())


def near_valid(rng):
    """Fields of a random opcode near its valid region, up to two fields then moved by a little or a lot."""
    r, ch = rng.randint, rng.choice
    op = r(0, 15)
    n0, n1 = r(1, 2), r(1, 2)
    f = dict(op=op, sub=r(0, 4), flags=r(0, 15), a=r(0, 150), b=r(0, 150), dst=r(0, 150), ea=r(0, 30),
             ed=r(0, 30), n0=n0, n1=n1, len=8, so=ch([8, 16]), eo=r(0, 2), ei=r(0, 2), frac=r(0, 30),
             bits=ch([2, 4, 8]), kvb=r(0, 4), kvs=r(1, 3), nblk=1, bs=8, ntok=r(1, 8), kpos=r(0, 200))
    if op in (Op.SPW, Op.SPR, Op.EMIT):
        f.update(n0=ch([4, 8, 12, 16]), n1=r(0, 3), bits=ch([4, 8]), a=r(0, 40), dst=r(0, 40))
    elif op == Op.GEMM:
        f.update(len=ch([32, 64]), n0=r(1, 4), n1=ch([4, 8]))
    elif op == Op.VEC:
        f.update(len=ch([2, 4, 8, 16]), n0=r(1, 3))
    elif op in (Op.ATT, Op.FOLD):
        nblk = r(1, 2)
        bs = r(1, 8)
        f.update(nblk=nblk, bs=bs, ntok=r((nblk - 1) * bs + 1, nblk * bs), kvb=ch([0, 8, r(0, 8)]), so=8)
    elif op in (Op.KVL, Op.KVS):
        f.update(ntok=r(1, 8), dst=r(0, 1), b=r(0, 2))
    for k in rng.sample(list(f)[1:], r(0, 2)):
        f[k] = max(0, f[k] + ch([-1, 1, 1, 2, 8, 100, 300, 2 ** 12])) if rng.random() < 0.8 else 0
    widths = dict((n, w) for n, w in FIELDS)
    return {n: v & (2 ** widths[n] - 1) for n, v in f.items()}


def run_check(dut, fields, set_more=lambda ctx, k: None, outs=()):
    """The outputs ``outs`` of ``dut`` for each instruction of ``fields`` (``set_more(ctx, k)`` sets
    the other inputs of case k); a pipelined check is read ``latency`` cycles after its input."""
    got = []

    async def tb(ctx):
        for k, f in enumerate(fields):
            ctx.set(Value.cast(dut.ins), instr_value(f))
            set_more(ctx, k)
            if dut.latency:
                await ctx.tick().repeat(dut.latency)
            got.append({o: ctx.get(getattr(dut, o)) for o in outs})
    sim = Simulator(dut)          # combinational (no clock) unless pipelined
    if dut.latency:
        sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()
    return got


@given(seed=st.integers(0, 2 ** 32), ddr=st.booleans(), pipelined=st.booleans())
@settings(max_examples=40, deadline=None)
def test_instr_check_matches_model(seed, ddr, pipelined):
    """The check (combinational, or ``pipelined``: read 2 cycles after its instruction) against the
    model on instructions near the limits."""
    rng = random.Random(seed)
    cases = [(near_valid(rng), rng.randint(0, 3)) for _ in range(60)]
    dut = InstrCheck(**LIM, **(dict(region=REGION, win_rows=WIN, n_win=NWIN) if ddr else {}), pipelined=pipelined)
    outs = ("bad_op", "bad", "rows_att", "emit_rows", "emit_len") + (("kvs_len", "att_w") if ddr else ())
    res = run_check(dut, [f for f, _ in cases], (lambda ctx, k: ctx.set(dut.claimed, cases[k][1])) if ddr else
                    (lambda ctx, k: None), outs)
    got = [tuple(r[o] for o in outs) for r in res]
    exp = [model(f, claimed if ddr else None) for f, claimed in cases]
    assert got == exp
    assert any(e[:2] == (0, 0) and f["op"] for e, (f, _) in zip(exp, cases))


@given(seed=st.integers(0, 2 ** 32), pipelined=st.booleans())
@settings(max_examples=30, deadline=None)
def test_instr_check_window_terms(seed, pipelined):
    """K/V in DDR: ``bad_shape`` is the check with every window as the instruction needs it (ATT's
    claimed, KVL's free) and the window terms say which window and what it needs, so that the
    engine can register ``bad_shape`` a cycle before it knows ``claimed``: the model with the window
    as needed gives ``bad_shape``; with it the other way, an ATT or KVL valid in shape is refused."""
    rng = random.Random(seed)
    cases = [near_valid(rng) for _ in range(60)]
    dut = InstrCheck(**LIM, region=REGION, win_rows=WIN, n_win=NWIN, pipelined=pipelined)
    got = run_check(dut, cases, outs=("bad_shape", "win", "win_claim", "win_free"))
    all_claimed = 2 ** NWIN - 1
    for f, g in zip(cases, got):
        kvl = f["op"] == Op.KVL
        assert (g["win_claim"], g["win_free"]) == (int(f["op"] == Op.ATT), int(kvl))
        as_needed = 0 if kvl else all_claimed
        assert g["bad_shape"] == model(f, as_needed)[1]
        if g["win_claim"] or g["win_free"]:
            flipped = as_needed ^ (1 << g["win"])
            assert model(f, flipped)[1] == 1
    assert any(g["win_claim"] or g["win_free"] for g in got)


def test_pipelined_check_needs_its_two_cycles():
    """The pipelined check read one cycle after its instruction still holds a product of the one
    before (the second stage of a ROPE's n0 * n1 * len): an in-bounds ROPE after a ROPE of 0xFFFF
    x 0xFFFF rows reads as bad a cycle early, and as good after ``latency`` cycles."""
    dut = InstrCheck(**LIM, pipelined=True)
    big = dict(near_valid(random.Random(1)), op=Op.VEC, sub=VecOp.ROPE, len=4, n0=0xFFFF, n1=0xFFFF, a=0, b=0,
               dst=0, ed=0, bits=8, frac=0)
    good = dict(big, n0=1, n1=2)
    seen = []

    async def tb(ctx):
        ctx.set(Value.cast(dut.ins), instr_value(big))
        await ctx.tick().repeat(2)
        ctx.set(Value.cast(dut.ins), instr_value(good))
        for _ in range(dut.latency):
            await ctx.tick()
            seen.append(ctx.get(dut.bad))
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()
    assert model(good)[1] == 0 and model(big)[1] == 1
    assert seen == [1, 0], seen
