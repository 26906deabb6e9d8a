"""ComputeEngine instruction-set extensions for the cluster executor, each checked bit-exactly
against golden (mcf_fpga/golden/numerics.py, mcf_fpga/hdl/compute/program.py twins) on random shapes and data with
random back-pressure on sp_in / sp_out / emit_out / meta_out:

* ATT ``kpos`` (key positions ``kpos + b*bs``), partials as ``2d+4`` int64 lo/hi words;
* FOLD (left fold of ``nblk`` partials per row with softmax_merge, optional finalize);
* ATT ``ext_m`` (flags bit3): the distributed two-phase flat merge over a random split of blocks;
* ATT acc (``sub`` bit1): the rows' partials from the scratchpad continue a fold, in place or not;
* EMIT from EM (flags bit0), packed (flags bit1, 8 or 4 bits) and of n1 rows at stride so (a gather),
  SPW unpack (flags bit1);
* bad shapes of the new fields -> ERR_SHAPE, halt, nothing hangs.
"""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from mcf_fpga.golden import numerics as nx
from mcf_fpga.hdl.compute.engine import ComputeEngine, ERR_SHAPE
from mcf_fpga.spec.instr import AttFlags, EmitFlags, EngineOpcode, FoldFlags, KvwFlags, SprFlags, SpwFlags
from mcf_fpga.spec.partial import PartialRow
from mcf_fpga.hdl.compute.program import instr, partial_words, words_partial, pack_words, unpack_words
from mcf_fpga.sim.kit import StreamSource, StreamSink, run_simulation

D = 8                                  # head_dim of the test engine
PW = PartialRow(D).words               # words per partial row
NQ, KV, NB, Z, BLK, SP, EM = 4, 32, 4, 32, 8, 2048, 128


def make_engine(**kw):
    """The test engine; ``kw`` adds options or overrides a size."""
    return ComputeEngine(**dict(dict(pn=4, pk=16, group=32, kc_max=2, x_depth=16, t_max=4, d_max=16, head_dim=D,
                                     nq_max=NQ, kv_depth=KV, nb_max=NB, z_max=Z, blk_max=BLK, sp_depth=SP,
                                     em_depth=EM), **kw))


DUT = make_engine()
#: FOLD reading a partial row through both scratchpad readers (``fold_ports=2``)
DUT_FOLD2 = make_engine(fold_ports=2)
#: EMIT of even-aligned SP words two a beat (``emit_pairs``, on the paired scratchpad)
DUT_EPAIRS = make_engine(sp_pairs=True, emit_pairs=True)
#: sp_in beats of one or two words, SPW of even-aligned SP words two a cycle (``spw_pairs``)
DUT_SPW2 = make_engine(sp_pairs=True, vec_pipelined=True, spw_pairs=True)
#: ATT's / FOLD's output rows two words a cycle to an even address (``att_pairs``), through the
#: pipelined attention unit's register FIFO (the KR260 engine's), FOLD on both readers
DUT_APAIRS = make_engine(sp_pairs=True, vec_pipelined=True, att_pairs=True, att_pipelined=True, fold_ports=2)
#: the same with the one-stage attention unit (no register FIFO: the serializer's pairs straight to the writer)
DUT_APAIRS1 = make_engine(sp_pairs=True, vec_pipelined=True, att_pairs=True, fold_ports=2)


def s32(v):
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >> 31 else v


def run(cmds, words=(), *, n_sp=0, n_emit=0, n_meta=0, seed=0, rp=1.0, vp=1.0, max_cycles=100_000, dut=None):
    """Push ``cmds`` and the ``sp_in`` ``words`` (or beats: dicts) into ``dut`` (default ``DUT``); collect ``n_sp``
    sp_out words, ``n_emit`` emit_out beats and ``n_meta`` meta_out beats (each sink ready with
    probability ``rp``); then wait until the engine is idle. Returns dict(sp, emit, meta, err,
    retired, halted, cycles: until idle)."""
    DUT = dut or globals()["DUT"]
    out = {"sent": False}
    csrc = StreamSource(DUT.cmd, seed=seed, valid_prob=vp)
    ssrc = StreamSource(DUT.sp_in, seed=seed + 1, valid_prob=vp)
    sp_snk = StreamSink(DUT.sp_out, seed=seed + 2, ready_prob=rp)
    e_snk = StreamSink(DUT.emit_out, seed=seed + 3, ready_prob=rp)
    m_snk = StreamSink(DUT.meta_out, seed=seed + 4, ready_prob=rp)

    async def tb_cmd(ctx):
        await csrc.send(ctx, cmds)
        out["sent"] = True

    async def tb_sp(ctx):
        await ssrc.send(ctx, [w if isinstance(w, dict) else {"data": int(w) & 0xFFFFFFFF} for w in words])

    async def rx_sp(ctx):
        out["sp"] = [s32(b["data"]) for b in await sp_snk.collect(ctx, n_sp)]

    async def rx_emit(ctx):
        out["emit"] = await e_snk.collect(ctx, n_emit)

    async def rx_meta(ctx):
        out["meta"] = await m_snk.collect(ctx, n_meta)

    async def fin(ctx):
        idle, n = 0, 0
        while idle < 4:
            await ctx.tick()
            n += 1
            idle = idle + 1 if out["sent"] and not ctx.get(DUT.busy) else 0
        out["err"], out["halted"], out["cycles"] = ctx.get(DUT.error), ctx.get(DUT.halted), n - 4
    tbs = [tb_cmd, fin] + ([tb_sp] if words else []) + ([rx_sp] if n_sp else []) + \
        ([rx_emit] if n_emit else []) + ([rx_meta] if n_meta else [])
    run_simulation(DUT, tbs, max_cycles=max_cycles, vcd=False)
    return out


# ---------------------------------------------------------------- ATT: kpos, int64 partial words

def kv_setup(K, V, ek, ev, kvb, *, ka=0, va=300, eka=0, eva=40):
    """Words + instructions that store K/V token rows at attention-memory rows kvb.."""
    n, d = K.shape
    words = K.flatten().tolist() + V.flatten().tolist() + ek.tolist() + ev.tolist()
    cmds = [instr(EngineOpcode.SPW, dst=ka, n0=n * d), instr(EngineOpcode.SPW, dst=va, n0=n * d),
            instr(EngineOpcode.SPW, flags=SpwFlags(em=True), dst=eka, n0=n), instr(EngineOpcode.SPW, flags=SpwFlags(em=True), dst=eva, n0=n)]
    for v, a, e in ((False, ka, eka), (True, va, eva)):
        cmds.append(instr(EngineOpcode.KVW, flags=KvwFlags(v=v), a=a, n0=n, n1=1, so=d, len=d, ea=e, eo=1, ei=0, kvb=kvb, kvs=0))
    return cmds, words


def golden_block_parts(q, eq, qpos, K, ek, V, ev, bs, kpos, causal):
    """Golden partial of every block of ``K``/``V`` (blocks of ``bs`` at positions kpos + b*bs) for
    each query row: list (rows) of lists (blocks) of Partial."""
    n = K.shape[0]
    rows = []
    for r in range(q.shape[0]):
        parts = []
        for k0 in range(0, n, bs):
            k1 = min(k0 + bs, n)
            kp = kpos + torch.arange(k0, k1)
            mask = (kp <= qpos[r])[None, :] if causal else torch.ones(1, k1 - k0, dtype=torch.bool)
            parts.append(nx.block_partial(q[r:r + 1], eq[r:r + 1], K[k0:k1], ek[k0:k1], V[k0:k1],
                                          ev[k0:k1], mask))
        rows.append(parts)
    return rows


def rand_kv(rng, n, kv4=False, d=D):
    lim = 7 if kv4 else 127
    K = torch.randint(-lim, lim + 1, (n, d), generator=rng)
    V = torch.randint(-lim, lim + 1, (n, d), generator=rng)
    ek = torch.randint(0, 12, (n,), generator=rng)
    ev = torch.randint(0, 12, (n,), generator=rng)
    return K, V, ek, ev


@st.composite
def att_case(draw):
    seed = draw(st.integers(0, 2 ** 31))
    n0, n1 = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    nblk, bs = draw(st.integers(1, NB)), draw(st.integers(1, BLK))
    ntok = draw(st.integers((nblk - 1) * bs + 1, nblk * bs))
    kvb = draw(st.integers(0, KV - ntok))
    kpos = draw(st.integers(0, 3000))
    pos0 = draw(st.integers(max(0, kpos - 3), kpos + ntok + 2))
    causal, flat, final = (draw(st.booleans()) for _ in range(3))
    rp = draw(st.sampled_from([1.0, 0.5]))
    return dict(seed=seed, n0=n0, n1=n1, nblk=nblk, bs=bs, ntok=ntok, kvb=kvb, kpos=kpos, pos0=pos0,
                causal=causal, flat=flat, final=final, rp=rp)


@given(c=att_case(), pairs=st.booleans(), odd=st.booleans())
@settings(max_examples=14, deadline=None)
def test_att_kpos_and_partial_words(c, pairs, odd):
    """ATT over a KV unit stored at any attention-memory row (kvb) with key positions kpos + b*bs;
    fold/flat, causal or not, partial (2d+4 int64 words) or finalized; equals golden. ``pairs``:
    on the ``att_pairs`` engine, its rows to an even (two words a cycle) or odd (one) ``dst``."""
    rng = torch.Generator().manual_seed(c["seed"])
    n0, n1, ntok, R = c["n0"], c["n1"], c["ntok"], c["n0"] * c["n1"]
    K, V, ek, ev = rand_kv(rng, ntok)
    q = torch.randint(-127, 128, (R, D), generator=rng)
    eq = torch.randint(4, 12, (R,), generator=rng)
    QA, EQ, DST = 700, 80, 900 + odd
    cmds, words = kv_setup(K, V, ek, ev, c["kvb"])
    cmds += [instr(EngineOpcode.SPW, dst=QA, n0=R * D), instr(EngineOpcode.SPW, flags=SpwFlags(em=True), dst=EQ, n0=R)]
    words += q.flatten().tolist() + eq.tolist()
    flags = AttFlags(causal=c["causal"], flat=c["flat"], final=c["final"])
    causal, flat, final = int(flags.causal), int(flags.flat), int(flags.final)
    so = n1 * D
    cmds.append(instr(EngineOpcode.ATT, flags=flags, a=QA, so=so, len=D, n0=n0, n1=n1, ea=EQ, eo=n1, ei=1,
                      pos0=c["pos0"], kvb=c["kvb"], kpos=c["kpos"], nblk=c["nblk"], bs=c["bs"], ntok=ntok,
                      dst=DST))
    nw = R * (D if final else PW)
    cmds.append(instr(EngineOpcode.SPR, a=DST, n0=nw))
    qpos = [c["pos0"] + r // n1 for r in range(R)]
    rows = golden_block_parts(q, eq, qpos, K, ek, V, ev, c["bs"], c["kpos"], causal)
    exp = []
    for parts in rows:
        p = nx.flat_merge(parts) if flat else nx.merge_partials(parts)
        exp += nx.finalize(p)[0].tolist() if final else partial_words(int(p.m[0]), int(p.l[0]), p.o[0].tolist())
    out = run(cmds, words, n_sp=nw, seed=c["seed"], rp=c["rp"], vp=0.8, dut=DUT_APAIRS if pairs else DUT)
    assert out["err"] == 0
    assert out["sp"] == exp
    if not final:                      # the layout round-trips through the host twin
        for r in range(R):
            words_partial(out["sp"][r * PW:(r + 1) * PW], D)


@given(c=att_case(), inplace=st.booleans(), ports=st.sampled_from([1, 2, "pairs"]))
@settings(max_examples=14, deadline=None)
def test_att_acc_continues_a_fold(c, inplace, ports):
    """ATT sub bit1 (acc): row r's partial at SP[b + r*W] is merged before the job's blocks = golden
    merge_partials([P_r, blocks..]), written in place (dst = b) or elsewhere, partial or
    finalized; a FOLD after it (one partial, finalized) reads through both readers again
    (``fold_ports=2``: the assembler back out of its serial mode; ``pairs``: the ``att_pairs``
    engine, with fold_ports=2, its outputs at even addresses)."""
    rng = torch.Generator().manual_seed(c["seed"])
    n0, n1, ntok, R = c["n0"], c["n1"], c["ntok"], c["n0"] * c["n1"]
    K, V, ek, ev = rand_kv(rng, ntok)
    q = torch.randint(-127, 128, (R, D), generator=rng)
    eq = torch.randint(4, 12, (R,), generator=rng)
    base = [int(x) for x in torch.randint(-2 ** 14, 2 ** 14, (R,), generator=rng)]
    acc = [rand_partial(rng, base[r]) for r in range(R)]
    QA, EQ, ACC, DST, DST2 = 700, 80, 1100, 900, 1500
    final = c["final"]
    dst = ACC if inplace and not final else DST
    cmds, words = kv_setup(K, V, ek, ev, c["kvb"])
    cmds += [instr(EngineOpcode.SPW, dst=QA, n0=R * D), instr(EngineOpcode.SPW, flags=SpwFlags(em=True), dst=EQ, n0=R),
             instr(EngineOpcode.SPW, dst=ACC, n0=R * PW)]
    words += q.flatten().tolist() + eq.tolist() + [w for pt in acc for w in partial_words(*pt)]
    so = n1 * D
    cmds.append(instr(EngineOpcode.ATT, sub=2, flags=AttFlags(causal=c["causal"], final=final), a=QA, so=so, len=D,
                      n0=n0, n1=n1, ea=EQ, eo=n1, ei=1, pos0=c["pos0"], kvb=c["kvb"], kpos=c["kpos"],
                      nblk=c["nblk"], bs=c["bs"], ntok=ntok, b=ACC, dst=dst))
    qpos = [c["pos0"] + r // n1 for r in range(R)]
    rows = golden_block_parts(q, eq, qpos, K, ek, V, ev, c["bs"], c["kpos"], c["causal"])
    ps = [nx.merge_partials([golden_fold([acc[r]])] + rows[r]) for r in range(R)]
    fin = [w for p in ps for w in nx.finalize(p)[0].tolist()]
    if final:
        cmds.append(instr(EngineOpcode.SPR, a=DST, n0=R * D))
        exp = fin
    else:
        cmds += [instr(EngineOpcode.SPR, a=dst, n0=R * PW),
                 instr(EngineOpcode.FOLD, flags=FoldFlags(final=True), a=dst, b=0, n0=n0, n1=n1, len=D, nblk=1,
                       so=so, dst=DST2),
                 instr(EngineOpcode.SPR, a=DST2, n0=R * D)]
        exp = [w for p in ps for w in partial_words(int(p.m[0]), int(p.l[0]), p.o[0].tolist())] + fin
    dut = {1: DUT, 2: DUT_FOLD2, "pairs": DUT_APAIRS}[ports]
    out = run(cmds, words, n_sp=len(exp), seed=c["seed"], rp=c["rp"], vp=0.8, dut=dut)
    assert out["err"] == 0
    assert out["sp"] == exp


# ---------------------------------------------------------------- FOLD

def rand_partial(rng, base_m):
    """A random in-range partial row (m, l, o): empty with probability 1/4, else m near base_m
    (merges scale both sides), l < 2**40, |o| < 2**44 (a fold of <= 6 stays within 48 bits)."""
    if torch.randint(0, 4, (1,), generator=rng).item() == 0:
        return nx.M_EMPTY, 0, [0] * D
    m = base_m + int(torch.randint(-20000, 20000, (1,), generator=rng))
    l = int(torch.randint(0, 2 ** 40, (1,), generator=rng)) >> int(torch.randint(0, 40, (1,), generator=rng))
    o = [int(x) >> int(torch.randint(0, 44, (1,), generator=rng))
         for x in torch.randint(-2 ** 44, 2 ** 44, (D,), generator=rng)]
    return m, l, o


def golden_fold(parts):
    """merge_partials over [(m, l, o)] of one row -> Partial with a leading row dim of 1."""
    ps = [nx.Partial(torch.tensor([m]), torch.tensor([l]), torch.tensor([o])) for m, l, o in parts]
    return nx.merge_partials(ps)


def fold_case(seed, n0, n1, nblk, gap, final, DST=1500):
    """(SP words, instructions, expected sp_out words) of a FOLD of random partials read back
    (rows to ``DST``, finalized rows at stride ``n1*d + gap``)."""
    rng = torch.Generator().manual_seed(seed)
    R = n0 * n1
    A, b = 100, R * PW + gap
    base = [int(x) for x in torch.randint(-2 ** 20, 2 ** 20, (R,), generator=rng)]
    parts = [[rand_partial(rng, base[r]) for _ in range(nblk)] for r in range(R)]
    region = [int(x) for x in torch.randint(-2 ** 31, 2 ** 31, ((nblk - 1) * b + R * PW,), generator=rng)]
    for r in range(R):
        for j in range(nblk):
            o = j * b + r * PW
            region[o:o + PW] = partial_words(*parts[r][j])
    so = n1 * D + gap
    cmds = [instr(EngineOpcode.SPW, dst=A, n0=len(region)),
            instr(EngineOpcode.FOLD, flags=FoldFlags(final=final), a=A, b=b, n0=n0, n1=n1, len=D, nblk=nblk, so=so, dst=DST)]
    exp = []
    for r in range(R):
        p = golden_fold(parts[r])
        exp += nx.finalize(p)[0].tolist() if final else partial_words(int(p.m[0]), int(p.l[0]), p.o[0].tolist())
    if final:
        cmds += [instr(EngineOpcode.SPR, a=DST + o * so, n0=n1 * D) for o in range(n0)]
    else:
        cmds.append(instr(EngineOpcode.SPR, a=DST, n0=R * PW))
    return region, cmds, exp


@given(seed=st.integers(0, 2 ** 31), n0=st.integers(1, 2), n1=st.integers(1, 2), nblk=st.integers(1, 6),
       gap=st.integers(0, 5), final=st.booleans(), rp=st.sampled_from([1.0, 0.4]),
       ports=st.sampled_from([1, 2, "pairs"]), odd=st.booleans())
@settings(max_examples=18, deadline=None)
def test_fold_matches_merge_partials(seed, n0, n1, nblk, gap, final, rp, ports, odd):
    """FOLD: nblk partials per row (stride b between the partial arrays; empties included; nblk may
    exceed nb_max) folded = golden merge_partials (ascending j), partial words or finalized; read
    through one scratchpad reader or two (``fold_ports``); ``pairs``: the ``att_pairs`` engine,
    its rows two words a cycle when dst (odd or not) and a finalized row's stride (gap) allow."""
    region, cmds, exp = fold_case(seed, n0, n1, nblk, gap, final, DST=1500 + odd)
    dut = {1: DUT, 2: DUT_FOLD2, "pairs": DUT_APAIRS}[ports]
    out = run(cmds, region, n_sp=len(exp), seed=seed, rp=rp, vp=0.8, dut=dut)
    assert out["err"] == 0
    assert out["sp"] == exp


@pytest.mark.parametrize("gap, dst, final", [(1, 1500, True), (0, 1501, True), (2, 1500, True), (0, 1500, False)])
@pytest.mark.parametrize("pipelined", [True, False])
def test_att_pairs_finalized_rows_at_any_stride(gap, dst, final, pipelined):
    """On the ``att_pairs`` engine (the attention unit pipelined or one-stage) a FOLD's finalized
    rows (2 x 2 rows) at an odd stride ``so`` (the second row group starts at an odd word) or to an
    odd ``dst`` go one word a cycle, at an even stride to an even dst two, and so do its partial
    rows to an even dst: each equals golden (a pair walk at an odd row start would write the pairs
    one word off)."""
    region, cmds, exp = fold_case(11, 2, 2, 2, gap, final, DST=dst)
    out = run(cmds, region, n_sp=len(exp), dut=DUT_APAIRS if pipelined else DUT_APAIRS1)
    assert out["err"] == 0
    assert out["sp"] == exp


def test_fold_two_ports_halve_the_read():
    """The same FOLD (2 rows x 4 partials) at full rate: with ``fold_ports=2`` it takes (about)
    d+2 fewer cycles per partial read -- the words arrive two per cycle."""
    R, nblk = 2, 4
    region, cmds, exp = fold_case(3, 1, R, nblk, 0, False)
    res = [run(cmds, region, n_sp=len(exp), dut=dut) for dut in (DUT, DUT_FOLD2)]
    assert [r["sp"] for r in res] == [exp, exp]
    saved = res[0]["cycles"] - res[1]["cycles"]
    assert R * nblk * (D + 2) - 4 <= saved <= R * nblk * (D + 2), (res[0]["cycles"], res[1]["cycles"])


def test_att_pairs_halve_the_output_words():
    """The same ATT (1 key, 4 partial rows, d = 32: the rows' output words bound the job) on an
    ``att_pairs`` engine at full rate: to an odd ``dst`` (one word a cycle) it is longer than to an
    even one (two a cycle) by the cycles the model's ``att`` feature ``rowpace`` loses with the
    pairs (perfmodel: max(row, 2d+4) -> max(row, d+2) a row), within 4."""
    from mcf_fpga.host import perfmodel as pm
    d, R, n1 = 32, 4, 2
    pw = PartialRow(d).words
    e = dict(head_dim=d, att_pipelined=True, sp_pairs=True, vec_pipelined=True, att_pairs=True)
    dut = make_engine(kv_depth=8, nb_max=1, z_max=8, blk_max=8, **e)
    rng = torch.Generator().manual_seed(5)
    K, V, ek, ev = rand_kv(rng, 1, d=d)
    q = torch.randint(-127, 128, (R, d), generator=rng)
    eq = torch.randint(4, 12, (R,), generator=rng)
    QA, EQ = 700, 80
    setup, words = kv_setup(K, V, ek, ev, 0, va=100)
    setup += [instr(EngineOpcode.SPW, dst=QA, n0=R * d), instr(EngineOpcode.SPW, flags=SpwFlags(em=True), dst=EQ, n0=R)]
    words += q.flatten().tolist() + eq.tolist()
    parts = [p[0] for p in golden_block_parts(q, eq, [0] * R, K, ek, V, ev, 1, 0, False)]
    exp = [w for p in parts for w in partial_words(int(p.m[0]), int(p.l[0]), p.o[0].tolist())]
    cycles, feats = {}, {}
    for dst in (900, 901):
        att = instr(EngineOpcode.ATT, flags=AttFlags(), a=QA, so=n1 * d, len=d, n0=R // n1, n1=n1, ea=EQ, eo=n1,
                    ei=1, kvb=0, nblk=1, bs=1, ntok=1, dst=dst)
        out = run(setup + [att, instr(EngineOpcode.SPR, a=dst, n0=R * pw)], words, n_sp=R * pw, dut=dut)
        assert out["err"] == 0 and out["sp"] == exp
        cycles[dst] = out["cycles"]
        feats[dst] = pm.feature("att", "rowpace", pm._kind_shape(dict(att), e)[1], e)
    assert feats[901] - feats[900] == R * pw // 2         # d = 32: the rows' words bound the job
    assert abs((cycles[901] - cycles[900]) - R * pw // 2) <= 4, cycles


# ---------------------------------------------------------------- EMIT / SPW variants

@given(seed=st.integers(0, 2 ** 31), em=st.booleans(), pack=st.sampled_from([0, 8, 4]),
       nw=st.integers(1, 6), rows=st.sampled_from([0, 1, 2, 3]), gap=st.integers(0, 5),
       rp=st.sampled_from([1.0, 0.4]))
@settings(max_examples=14, deadline=None)
def test_emit_from_em_and_packed(seed, em, pack, nw, rows, gap, rp):
    """EMIT of SP or EM (flags.0) words, plain or packed (flags.1, bits 8/4), one row (n1 = 0 or 1)
    or a gather of n1 rows of n0 words at stride so = n0 + gap: the Meta on meta_out carries
    length = payload bytes, the payload equals golden pack_words of the gathered words (or the
    words), `last` on the final word; random back-pressure on meta_out and emit_out."""
    from mcf_fpga.spec.meta import MetaFields, MetaOp, Stage
    from mcf_fpga.golden.header import pack_int
    rng = torch.Generator().manual_seed(seed)
    n0 = nw * (32 // pack) if pack else nw
    so = n0 + gap
    a = int(torch.randint(0, 40, (1,), generator=rng))
    limit = EM if em else SP
    rows = min(rows, (limit - a - n0) // so + 1)
    span = (max(rows, 1) - 1) * so + n0
    lim = 2 ** (pack - 1) if pack else 128 if em else 2 ** 31
    vals = [int(x) for x in torch.randint(-lim, lim, (span,), generator=rng)]
    meta = MetaFields(op=MetaOp.DATA, stage=Stage.PREFILL, src=1, dst=6, route_id=3, kv_id=(1, 4), length=0)
    cmds = [instr(EngineOpcode.SPW, flags=SpwFlags(em=em), dst=a, n0=span),
            instr(EngineOpcode.EMIT, flags=EmitFlags(em=em, packed=bool(pack)), bits=pack, a=a, n0=n0, n1=rows, so=so,
                  meta=pack_int(meta))]
    gathered = [vals[o * so + j] for o in range(max(rows, 1)) for j in range(n0)]
    exp = [s32(w) for w in pack_words(gathered, pack)] if pack else gathered
    out = run(cmds, vals, n_emit=len(exp), n_meta=1, seed=seed, rp=rp, vp=0.8)
    assert out["err"] == 0
    assert [s32(b["data"]) for b in out["emit"]] == exp
    assert [b["last"] for b in out["emit"]] == [0] * (len(exp) - 1) + [1]
    got_meta = {k: v for k, v in out["meta"][0].items() if not k.startswith("_")}   # reserved bits
    assert got_meta == meta.replace(length=4 * len(exp)).as_dict()


odd = st.sampled_from([0, 0, 0, 1])        # mostly even: the pair walks


@given(seed=st.integers(0, 2 ** 31), a=st.tuples(st.integers(0, 20), odd), n0=st.tuples(st.integers(0, 6), odd),
       rows=st.sampled_from([0, 1, 2, 3]), gap=st.tuples(st.integers(0, 3), odd), em=st.sampled_from([0, 0, 0, 1]),
       rp=st.sampled_from([1.0, 0.4]))
@settings(max_examples=16, deadline=None)
def test_emit_pairs(seed, a, n0, rows, gap, em, rp):
    """``emit_pairs``: an EMIT of SP words whose a, n0 and (n1 > 1) so are even goes two words a
    beat (``two``: ``data`` then ``data1``), every other EMIT (odd a, n0 or so; EM words) one a
    beat; either way the words, `last` on the final beat, the Meta's length as without pairs;
    random back-pressure on meta_out and emit_out."""
    from mcf_fpga.spec.meta import MetaFields, MetaOp, Stage
    from mcf_fpga.golden.header import pack_int
    a, n0, gap = 2 * a[0] + a[1], max(1, 2 * n0[0] + n0[1]), 2 * gap[0] + gap[1]
    so = n0 + gap
    rows = min(rows, ((EM if em else SP) - a - n0) // so + 1)
    span = (max(rows, 1) - 1) * so + n0
    rng = torch.Generator().manual_seed(seed)
    lim = 128 if em else 2 ** 31
    vals = [int(x) for x in torch.randint(-lim, lim, (span,), generator=rng)]
    meta = MetaFields(op=MetaOp.DATA, stage=Stage.PREFILL, src=1, dst=6, route_id=3, kv_id=(1, 4), length=0)
    cmds = [instr(EngineOpcode.SPW, flags=SpwFlags(em=em), dst=a, n0=span),
            instr(EngineOpcode.EMIT, flags=EmitFlags(em=em), a=a, n0=n0, n1=rows, so=so, meta=pack_int(meta))]
    exp = [vals[o * so + j] for o in range(max(rows, 1)) for j in range(n0)]
    two = not em and a % 2 == 0 and n0 % 2 == 0 and (so % 2 == 0 or rows <= 1)
    n_beats = len(exp) // 2 if two else len(exp)
    out = run(cmds, vals, n_emit=n_beats, n_meta=1, seed=seed, rp=rp, vp=0.8, dut=DUT_EPAIRS)
    assert out["err"] == 0
    got = [w for b in out["emit"] for w in ([b["data"], b["data1"]] if b["two"] else [b["data"]])]
    assert [s32(w) for w in got] == exp
    assert [b["two"] for b in out["emit"]] == [int(two)] * n_beats
    assert [b["last"] for b in out["emit"]] == [0] * (n_beats - 1) + [1]
    assert out["meta"][0]["length"] == 4 * len(exp)


def test_emit_pairs_halve_the_words():
    """A 96-word EMIT on the ``emit_pairs`` engine at full rate: from an even address (48 pair
    beats) it is shorter than from an odd one (96 word beats) by the words the model's ``emit``
    feature ``n0`` loses with the pairs (perfmodel: n0 / 2 for an eligible EMIT), within 4 cycles."""
    from mcf_fpga.host import perfmodel as pm
    from mcf_fpga.spec.meta import MetaFields, MetaOp, Stage
    from mcf_fpga.golden.header import pack_int
    n = 96
    meta = pack_int(MetaFields(op=MetaOp.DATA, stage=Stage.PREFILL, src=1, dst=6, route_id=3, kv_id=(1, 4), length=0))
    vals = list(range(-50, n + 1 - 50))
    cycles = {}
    for a in (8, 9):
        cmds = [instr(EngineOpcode.SPW, dst=8, n0=n + 1), instr(EngineOpcode.EMIT, a=a, n0=n, meta=meta)]
        out = run(cmds, vals, n_emit=n // 2 if a == 8 else n, n_meta=1, dut=DUT_EPAIRS)
        got = [w for b in out["emit"] for w in ([b["data"], b["data1"]] if b["two"] else [b["data"]])]
        assert [s32(w) for w in got] == vals[a - 8:a - 8 + n]
        cycles[a] = out["cycles"]
    e = {"emit_pairs": True}
    kinds = {a: pm._kind_shape(dict(instr(EngineOpcode.EMIT, a=a, n0=n, meta=meta)), e) for a in (8, 9)}
    want = pm.feature("emit", "n0", kinds[9][1], e) - pm.feature("emit", "n0", kinds[8][1], e)
    assert want == n / 2
    assert abs((cycles[9] - cycles[8]) - want) <= 4, cycles


@given(seed=st.integers(0, 2 ** 31), em=st.booleans(), bits=st.sampled_from([8, 4]), nw=st.integers(1, 5),
       rp=st.sampled_from([1.0, 0.4]))
@settings(max_examples=12, deadline=None)
def test_spw_unpack_and_emit_roundtrip(seed, em, bits, nw, rp):
    """SPW unpack (flags.1): each sp_in word -> 32/bits sign-extended values into SP or EM (flags.0)
    = golden unpack_words (read back with SPR); EMIT pack of them gives the words back."""
    rng = torch.Generator().manual_seed(seed)
    words = [int(x) for x in torch.randint(-2 ** 31, 2 ** 31, (nw,), generator=rng)]
    n = nw * (32 // bits)
    dst = int(torch.randint(0, 40, (1,), generator=rng))
    cmds = [instr(EngineOpcode.SPW, flags=SpwFlags(em=em, packed=True), bits=bits, dst=dst, n0=n),
            instr(EngineOpcode.SPR, flags=SprFlags(em=em), a=dst, n0=n),
            instr(EngineOpcode.EMIT, flags=EmitFlags(em=em, packed=True), bits=bits, a=dst, n0=n)]
    out = run(cmds, words, n_sp=n, n_emit=nw, n_meta=1, seed=seed, rp=rp, vp=0.7)
    assert out["err"] == 0
    assert out["sp"] == unpack_words(words, bits, n)
    assert [s32(b["data"]) for b in out["emit"]] == [s32(w) for w in pack_words(unpack_words(words, bits, n), bits)]
    assert [s32(b["data"]) for b in out["emit"]] == words
    assert out["meta"][0]["length"] == 4 * nw


def pair_beats(words, rng):
    """``words`` as sp_in beats of ``spw_pairs``: two words a beat (``two``) or one, at random."""
    out, i = [], 0
    while i < len(words):
        k = 2 if i + 1 < len(words) and rng.random() < 0.7 else 1
        w = [int(x) & 0xFFFFFFFF for x in words[i:i + k]]
        out.append({"data": w[0], "data1": w[-1] if k == 2 else rng.getrandbits(32), "two": k == 2})
        i += k
    return out


@given(seed=st.integers(0, 2 ** 31), spws=st.lists(st.tuples(st.sampled_from(["sp", "sp", "sp", "em", "packed"]),
                                                             st.integers(0, 24), st.integers(1, 12)),
                                                   min_size=1, max_size=4),
       rp=st.sampled_from([1.0, 0.4]), vp=st.sampled_from([1.0, 0.6]))
@settings(max_examples=14, deadline=None)
def test_spw_pairs(seed, spws, rp, vp):
    """``spw_pairs``: SPWs of SP words (any dst and n0 parity), EM words and packed values take the
    sp_in word stream in order whatever its grouping into beats of one or two words (a beat may
    straddle two SPWs); read back with SPR they are the words each SPW should have taken (a
    Python model of the stream: no golden numerics involved but unpack_words); random gaps on
    sp_in, back-pressure on sp_out."""
    import random
    rng = random.Random(seed)
    cmds, words, reads, exp = [], [], [], []
    for k, (kind, off, n) in enumerate(spws):
        # disjoint regions, any parity: SP 100 words each, EM (128 rows) 32 each
        a = 32 * k + off % 20 if kind == "em" else 100 * k + off
        if kind == "packed":
            vals = [rng.randrange(-128, 128) for _ in range(4 * n)]
            ws = pack_words(vals, 8)
            cmds.append(instr(EngineOpcode.SPW, flags=SpwFlags(packed=True), bits=8, dst=a, n0=4 * n))
            reads.append(instr(EngineOpcode.SPR, a=a, n0=4 * n))
            exp += vals
        else:
            em = kind == "em"
            ws = [rng.randrange(-128, 128) if em else rng.randrange(-2 ** 31, 2 ** 31) for _ in range(n)]
            cmds.append(instr(EngineOpcode.SPW, flags=SpwFlags(em=em), dst=a, n0=n))
            reads.append(instr(EngineOpcode.SPR, flags=SprFlags(em=em), a=a, n0=n))
            exp += ws
        words += ws
    out = run(cmds + reads, pair_beats(words, rng), n_sp=len(exp), seed=seed, rp=rp, vp=vp, dut=DUT_SPW2)
    assert out["err"] == 0 and not out["halted"]
    assert out["sp"] == [s32(w) for w in exp]


def test_spw_pairs_halve_the_words():
    """A 96-word SPW on the ``spw_pairs`` engine fed pair beats at full rate: to an even address
    (48 pair writes) it is shorter than to an odd one (96 word writes) by the words the model's
    ``spw`` feature ``n0`` loses with the pairs (n0 / 2), within 4 cycles; the words read back
    (SPR) the same."""
    n = 96
    vals = list(range(-50, n - 50))
    cycles = {}
    for a in (8, 9):
        beats = [{"data": vals[i] & 0xFFFFFFFF, "data1": vals[i + 1] & 0xFFFFFFFF, "two": 1} for i in range(0, n, 2)]
        out = run([instr(EngineOpcode.SPW, dst=a, n0=n), instr(EngineOpcode.SPR, a=a, n0=n)], beats, n_sp=n,
                  dut=DUT_SPW2)
        assert out["err"] == 0 and out["sp"] == vals
        cycles[a] = out["cycles"]           # the SPR (one word a cycle) the same for both
    from mcf_fpga.host import perfmodel as pm
    e = {"spw_pairs": True}
    kinds = {a: pm._kind_shape(dict(instr(EngineOpcode.SPW, dst=a, n0=n)), e) for a in (8, 9)}
    want = pm.feature("spw", "n0", kinds[9][1], e) - pm.feature("spw", "n0", kinds[8][1], e)
    assert want == n / 2
    assert abs((cycles[9] - cycles[8]) - want) <= 4, cycles


def test_pack_twins_reject_bad_input():
    """The host twins name the field and the limit."""
    import pytest
    with pytest.raises(ValueError, match="bits=5"):
        pack_words([1], 5)
    with pytest.raises(ValueError, match="multiple of 32/bits=4"):
        pack_words([1, 2, 3], 8)
    with pytest.raises(ValueError, match=r"outside \[-8, 7\]"):
        pack_words([8] + [0] * 7, 4)
    with pytest.raises(ValueError, match="n=6 is not a multiple"):
        unpack_words([0, 0], 8, 6)
    with pytest.raises(ValueError, match="need n=24"):
        unpack_words([0, 0], 4, 24)
    with pytest.raises(ValueError, match="a partial of d=8 has 20"):
        words_partial([0] * 19, 8)
    assert words_partial(partial_words(-5, 2 ** 47 - 1, [-(2 ** 47)] * D), D) == (-5, 2 ** 47 - 1, [-(2 ** 47)] * D)


# ---------------------------------------------------------------- ATT ext_m: distributed flat merge

@given(seed=st.integers(0, 2 ** 31), n0=st.integers(1, 2), n1=st.integers(1, 2), nblk=st.integers(1, NB),
       bs=st.integers(1, BLK), nodes=st.integers(1, 3), causal=st.booleans(), kpos=st.integers(0, 500),
       rp=st.sampled_from([1.0, 0.5]), data=st.data())
@settings(max_examples=10, deadline=None)
def test_att_ext_m_distributed_flat_merge(seed, n0, n1, nblk, bs, nodes, causal, kpos, rp, data):
    """Blocks split at random across `nodes`; each node's ATT jobs (flat + ext_m, one per run of
    consecutive blocks it holds, M = the all-reduced max from SP[b + r]) give partials whose (l, o)
    sum over all jobs equals golden flat_merge of all blocks bit for bit (m = M everywhere); FOLD
    nblk=1 + final of that sum equals golden finalize."""
    rng = torch.Generator().manual_seed(seed)
    R = n0 * n1
    ntok = data.draw(st.integers((nblk - 1) * bs + 1, nblk * bs))
    owner = [data.draw(st.integers(0, nodes - 1)) for _ in range(nblk)]
    K, V, ek, ev = rand_kv(rng, ntok)
    q = torch.randint(-127, 128, (R, D), generator=rng)
    eq = torch.randint(4, 12, (R,), generator=rng)
    pos0 = kpos + data.draw(st.integers(0, ntok + 1)) - 2
    pos0 = max(pos0, 0)
    qpos = [pos0 + r // n1 for r in range(R)]
    rows = golden_block_parts(q, eq, qpos, K, ek, V, ev, bs, kpos, causal)
    gold = [nx.flat_merge(parts) for parts in rows]
    M = [int(g.m[0]) for g in gold]                       # phase 1: all-reduce max (golden)
    QA, EQ, MB, DST = 700, 80, 780, 900
    cmds, words = kv_setup(K, V, ek, ev, 0)
    cmds += [instr(EngineOpcode.SPW, dst=QA, n0=R * D), instr(EngineOpcode.SPW, flags=SpwFlags(em=True), dst=EQ, n0=R), instr(EngineOpcode.SPW, dst=MB, n0=R)]
    words += q.flatten().tolist() + eq.tolist() + M
    jobs, b0 = [], 0
    while b0 < nblk:                                      # runs of consecutive blocks of one node
        b1 = b0 + 1
        while b1 < nblk and owner[b1] == owner[b0]:
            b1 += 1
        jobs.append((b0, b1))
        b0 = b1
    for k, (b0, b1) in enumerate(jobs):
        cmds.append(instr(EngineOpcode.ATT, flags=AttFlags(causal=bool(causal), flat=True, ext_m=True), a=QA, so=n1 * D, len=D, n0=n0, n1=n1, ea=EQ,
                          eo=n1, ei=1, pos0=pos0, kvb=b0 * bs, kpos=kpos + b0 * bs, nblk=b1 - b0, bs=bs,
                          ntok=min(b1 * bs, ntok) - b0 * bs, b=MB, dst=DST + k * R * PW))
    cmds.append(instr(EngineOpcode.SPR, a=DST, n0=len(jobs) * R * PW))
    out = run(cmds, words, n_sp=len(jobs) * R * PW, seed=seed, rp=rp, vp=0.8)
    assert out["err"] == 0
    summed = []
    for r in range(R):                                    # phase 2: all-reduce sum of (l, o)
        ps = [words_partial(out["sp"][(k * R + r) * PW:(k * R + r + 1) * PW], D) for k in range(len(jobs))]
        assert all(p[0] == M[r] for p in ps)
        l = sum(p[1] for p in ps)
        o = [sum(p[2][i] for p in ps) for i in range(D)]
        assert (M[r], l, o) == (M[r], int(gold[r].l[0]), gold[r].o[0].tolist())
        summed += partial_words(M[r], l, o)
    so = n1 * D
    out2 = run([instr(EngineOpcode.SPW, dst=0, n0=len(summed)),
                instr(EngineOpcode.FOLD, flags=FoldFlags(final=True), a=0, b=0, n0=n0, n1=n1, len=D, nblk=1, so=so, dst=500),
                instr(EngineOpcode.SPR, a=500, n0=R * D)], summed, n_sp=R * D, seed=seed + 7, rp=rp)
    assert out2["err"] == 0
    assert out2["sp"] == [y for g in gold for y in nx.finalize(g)[0].tolist()]


# ---------------------------------------------------------------- bad shapes of the new fields

def _limit_pairs():
    """(accepted instruction at a limit, the same one just beyond it) for every new check."""
    att = dict(flags=AttFlags(ext_m=True), a=0, so=D, len=D, n0=1, n1=1, nblk=1, bs=4, ntok=4, kpos=0, b=100, dst=200)
    fold = dict(a=0, b=PW, n0=1, n1=2, len=D, nblk=3, so=2 * D, dst=500)
    P = lambda op, base, **kw: instr(op, **{**base, **kw})
    return [
        (P(EngineOpcode.ATT, att, kpos=2 ** 16 - 4), P(EngineOpcode.ATT, att, kpos=2 ** 16 - 3)),        # kpos + ntok <= 2**16
        (P(EngineOpcode.ATT, att, b=SP - 1), P(EngineOpcode.ATT, att, b=SP)),                          # ext_m: b + rows <= SP
        (P(EngineOpcode.ATT, att, sub=2, flags=AttFlags(), b=SP - PW),                                   # acc: b + rows*W
         P(EngineOpcode.ATT, att, sub=2, flags=AttFlags(), b=SP - PW + 1)),                              # <= SP
        (P(EngineOpcode.ATT, att, sub=2, flags=AttFlags(causal=True), b=0),                              # acc: not with
         P(EngineOpcode.ATT, att, sub=2, flags=AttFlags(flat=True), b=0)),                               # flat,
        (P(EngineOpcode.ATT, att, sub=2, flags=AttFlags(final=True), b=0),                               # nor ext_m
         P(EngineOpcode.ATT, att, sub=2, flags=AttFlags(ext_m=True), b=0)),                              # (reader B)
        (P(EngineOpcode.FOLD, fold), P(EngineOpcode.FOLD, fold, len=D + 1)),                           # len == d
        (P(EngineOpcode.FOLD, fold, n0=2), P(EngineOpcode.FOLD, fold, n0=3)),                          # rows <= nq_max
        (P(EngineOpcode.FOLD, fold, nblk=1), P(EngineOpcode.FOLD, fold, nblk=0)),                      # nblk >= 1
        (P(EngineOpcode.FOLD, fold, a=SP - 4 * PW), P(EngineOpcode.FOLD, fold, a=SP - 4 * PW + 1)),    # partial inputs in SP
        (P(EngineOpcode.FOLD, fold, dst=SP - 2 * PW), P(EngineOpcode.FOLD, fold, dst=SP - 2 * PW + 1)),            # partial out
        (P(EngineOpcode.FOLD, fold, flags=FoldFlags(final=True), dst=SP - 2 * D), P(EngineOpcode.FOLD, fold, flags=FoldFlags(final=True), dst=SP - 2 * D + 1)),  # final out
        (instr(EngineOpcode.EMIT, flags=EmitFlags(packed=True), bits=8, a=0, n0=8), instr(EngineOpcode.EMIT, flags=EmitFlags(packed=True), bits=5, a=0, n0=8)),   # bits 4/8
        (instr(EngineOpcode.EMIT, flags=EmitFlags(packed=True), bits=4, a=0, n0=8), instr(EngineOpcode.EMIT, flags=EmitFlags(packed=True), bits=4, a=0, n0=4)),   # n0 % 8
        (instr(EngineOpcode.EMIT, flags=EmitFlags(em=True), a=EM - 8, n0=8), instr(EngineOpcode.EMIT, flags=EmitFlags(em=True), a=EM - 7, n0=8)),         # EM bound
        (instr(EngineOpcode.EMIT, a=SP - 2 * 7 - 2, n0=2, n1=3, so=7),                                         # rows: the
         instr(EngineOpcode.EMIT, a=SP - 2 * 7 - 1, n0=2, n1=3, so=7)),                                        # span in SP
        (instr(EngineOpcode.EMIT, a=0, n0=129, n1=127, so=0), instr(EngineOpcode.EMIT, a=0, n0=128, n1=128, so=0)),     # 2**16 B
        (instr(EngineOpcode.SPW, flags=SpwFlags(packed=True), bits=4, dst=0, n0=16), instr(EngineOpcode.SPW, flags=SpwFlags(packed=True), bits=4, dst=0, n0=12)),  # n0 % 8
        (instr(EngineOpcode.SPW, flags=SpwFlags(em=True, packed=True), bits=8, dst=EM - 4, n0=4), instr(EngineOpcode.SPW, flags=SpwFlags(em=True, packed=True), bits=2, dst=EM - 4, n0=4)),
    ]


def test_new_fields_at_limits_accepted():
    """Every instruction of _limit_pairs at its limit runs to completion without an error."""
    good = [g for g, _ in _limit_pairs()]
    out = run(good, [0x12345678] * (2 + 1), n_emit=2 + 1 + 8 + 6 + 129 * 127, n_meta=5,
              rp=0.6)   # SPW unpack: 16/8 + 4/4 words
    assert out["err"] == 0 and not out["halted"]


def test_new_fields_beyond_limits_halt():
    """Just beyond each limit: ERR_SHAPE, halt before touching any state (no sp_in word consumed, no
    Meta emitted, no unit started); CTRL resumes; the SPW/SPR after them still see the right words."""
    from mcf_fpga.sim.kit import AXI4LiteMaster
    bad = [b for _, b in _limit_pairs()]
    out = {"st": [], "ret": []}
    csrc, ssrc = StreamSource(DUT.cmd), StreamSource(DUT.sp_in)
    snk = StreamSink(DUT.sp_out)
    msnk = StreamSink(DUT.meta_out)
    axi = AXI4LiteMaster(DUT.bus)

    async def tb(ctx):
        await csrc.send(ctx, bad + [instr(EngineOpcode.SPW, dst=0, n0=2), instr(EngineOpcode.SPR, a=0, n0=2)])

    async def tb_sp(ctx):
        await ssrc.send(ctx, [{"data": 11}, {"data": 22}])

    async def ctl(ctx):
        for _ in bad:
            for _ in range(30):
                await ctx.tick()
            st_, _ = await axi.read(ctx, 0x0)
            rt, _ = await axi.read(ctx, 0x4)
            out["st"].append(st_)
            out["ret"].append(rt)
            await axi.write(ctx, 0x8, 1)
        out["words"] = await snk.collect(ctx, 2)
        out["meta_seen"] = len(msnk.beats)
    run_simulation(DUT, [tb_sp, ctl], background=[tb, msnk.run], max_cycles=20000, vcd=False)
    assert out["st"] == [(1 << 1) | (ERR_SHAPE << 8)] * len(bad)
    assert out["ret"] == [0] * len(bad)
    assert [b["data"] for b in out["words"]] == [11, 22]
    assert out["meta_seen"] == 0


# ---------------------------------------------------------------- the registered instruction check

#: the instruction check's products registered (``check_pipelined``)
DUT_CK = make_engine(check_pipelined=True)


@pytest.mark.parametrize("nop_rows,rope,refused", [
    ((0xFFFF, 0xFFFF), dict(n0=2, n1=4, a=0, dst=512, b=1024), False),    # in bounds
    ((1, 1), dict(n0=32, n1=4, a=1, dst=0, b=0), True)])                   # 128 rows x 16 from a = 1: beyond SP
def test_registered_check_waits_for_its_products(nop_rows, rope, refused):
    """``check_pipelined``: FETCH takes the FIFO's head only once the check's registered products
    are its own (2 cycles). A NOP (its n0, n1 unused) retires at once, so the ROPE queued behind it
    is fetched 2 cycles after it reached the head; its rows x len bound is n0 * n1 * len, whose
    second stage still holds the NOP's n0 * n1 times the ROPE's len a cycle earlier: taken then, an
    in-bounds ROPE behind a NOP of n0 = n1 = 0xFFFF would be refused, and one beyond the
    scratchpad behind a NOP of n0 = n1 = 1 would run."""
    from mcf_fpga.hdl.compute.vector import VecOp
    nop = instr(EngineOpcode.NOP, n0=nop_rows[0], n1=nop_rows[1])
    r = instr(EngineOpcode.VEC, sub=VecOp.ROPE, len=16, bits=8, frac=0, ed=0, **rope)
    out = run([nop, r], dut=DUT_CK)
    assert (out["err"], out["halted"]) == ((ERR_SHAPE, 1) if refused else (0, 0)), out
