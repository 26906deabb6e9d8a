"""ComputeEngine: the one compiler's stream (``host.compiler``) of a 'micro' layer -- prefill
in chunks, INT4 KV, then decode steps -- run on the bare engine gives golden's logits
(golden.int_model) bit for bit; bad instructions set an AXI-Lite-readable error, halt the
sequencer cleanly and resume on CTRL."""
import inspect

import pytest
import torch

from mcf_fpga.golden import numerics as nx
from mcf_fpga.golden.config import get_config
from mcf_fpga.golden.int_model import IntModel, quantize_model
from mcf_fpga.golden.model import random_weights
from mcf_fpga.hdl.compute.engine import ComputeEngine, ERR_OPCODE, ERR_SHAPE
from mcf_fpga.hdl.compute.vector import VecOp
from mcf_fpga.spec.instr import AttFlags, EngineOpcode, KvwFlags, SpwFlags
from mcf_fpga.spec.partial import PartialRow
from mcf_fpga.hdl.compute.program import instr, words_partial
from mcf_fpga.sim.kit import StreamSource, StreamSink, AXI4LiteMaster, run_simulation

from mcf_fpga.host.executors.bare_engine import EngineHost, compile_solo, golden_logits, solo_program

PN, PK = 4, 16
#: the engine of these tests (and the NodeConfig.engine their streams are compiled for)
ENGINE = dict(pn=PN, pk=PK, group=32, kc_max=8, x_depth=64, t_max=8, d_max=128, head_dim=16, nq_max=16,
              kv_depth=32, nb_max=4, z_max=16, blk_max=16, sp_depth=16384, em_depth=256)


def make_engine(att_keys=1, **kw):
    return ComputeEngine(**ENGINE, att_keys=att_keys, **kw)


def signed32(v):
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >> 31 else v


def run_stream(prompt_len, max_new_tokens, *, chunk, block, kv_bits, seed, ready=1.0, att_keys=1, cfg_kw=None,
               shape=None, **engine_kw):
    """Node 0's compiled stream of a one-layer micro program (``host.executors.bare_engine.solo_program``: MARS
    prefill in chunks of ``chunk``, then ``max_new_tokens - 1`` decode steps) on the bare
    engine (its attention unit at ``att_keys`` keys per cycle); returns (logits read, IntModel's,
    engine error). ``engine_kw``: more ComputeEngine options (the pipelined units); ``cfg_kw``:
    changes to the micro config, ``shape``: to the engine's shape (``ENGINE``)."""
    cfg = get_config("micro").replace(num_layers=1, vocab_size=64, **(cfg_kw or {}))   # the head: a ninth of the layer
    qm = quantize_model(random_weights(cfg, seed=seed), kv_bits=kv_bits, block=block)
    im = IntModel(qm)
    prompt = torch.randint(0, cfg.vocab_size, (prompt_len,), generator=torch.Generator().manual_seed(seed)).tolist()
    prog = solo_program(cfg, prompt_len, max_new_tokens, chunk=chunk, block=block, kv_bits=kv_bits)
    engine = dict(ENGINE, **(shape or {}))
    comp, ncfg = compile_solo(prog, engine)
    dut = ComputeEngine(**engine, att_keys=att_keys, **engine_kw)
    host = EngineHost(dut, comp, im, prompt, ncfg, seed=seed, ready=ready)
    fg, bg = host.testbenches()
    run_simulation(dut, fg, background=bg, max_cycles=600_000, vcd=False)
    return host.read_logits(), golden_logits(im, prompt, chunk, max_new_tokens), host.error


def check(got, exp, err):
    assert err == 0
    assert len(got) == len(exp)
    for i, (g, e) in enumerate(zip(got, exp)):
        assert torch.equal(g, e), f"logits {i} differ at {(g != e).nonzero()[:5].tolist()}"


def test_micro_layer_bit_exact():
    """T=6 tokens in one chunk, KV blocks of 4 (two blocks, causal fold), INT8 KV: every row's
    logits."""
    check(*run_stream(6, 1, chunk=8, block=4, kv_bits=8, seed=1, ready=0.5))


def test_micro_layer_int4_kv():
    check(*run_stream(3, 1, chunk=4, block=2, kv_bits=4, seed=2))


def test_micro_layer_prefill_then_decode():
    """Prefill 3 tokens in chunks of 2 and 1 (the second chunk folds the first's block and its
    own), then one decode step appending to the prompt's last block (flat merge of the block
    partials through a one-member all-reduce): the logits of every prompt row and of the decode
    token equal golden's, bit for bit."""
    check(*run_stream(3, 2, chunk=2, block=2, kv_bits=8, seed=5, ready=0.7))


def test_micro_layer_prefill_then_decode_two_keys_per_cycle():
    """The same stream (ATT fold and flat, FOLD) with the attention unit at two keys per cycle
    (``att_keys=2``): prompt of 5 in chunks of 3 and 2 over blocks of 3 (odd block ends), then
    one decode step; logits bit-exact."""
    check(*run_stream(5, 2, chunk=3, block=3, kv_bits=8, seed=6, ready=0.7, att_keys=2))


def test_micro_layer_pipelined_units():
    """The same kind of stream on the engine with its pipelined units -- the GEMM requantizer in
    four stages (``rq_stages=4``), the vector unit's staged result path (``vec_pipelined``), FOLD
    and LOAD_X reading through both scratchpad readers (``fold_ports=2``, ``loadx_ports=2``), the
    attention unit's phases S and P and its merge in stages (``att_pipelined``), the GEMM's dot
    products in stages (``mac_pipelined``), the instruction check's products registered
    (``check_pipelined``): prefill 5 in chunks of 3 and 2 over blocks of 3, then a decode step;
    logits bit-exact."""
    check(*run_stream(5, 2, chunk=3, block=3, kv_bits=8, seed=7, ready=0.6, rq_stages=4, vec_pipelined=True,
                      fold_ports=2, loadx_ports=2, att_pipelined=True, mac_pipelined=True, check_pipelined=True))


def test_micro_layer_attention_row_pairs():
    """The pipelined engine with the attention unit at two query rows per cycle (``att_rows=2``: a
    pair of rows shares each K and V read; ATT fold, flat, acc and FOLD jobs, odd row counts):
    prefill 5 in chunks of 3 and 2 over blocks of 3, then two decode steps; logits bit-exact."""
    check(*run_stream(5, 3, chunk=3, block=3, kv_bits=8, seed=9, ready=0.6, att_pipelined=True, att_rows=2))


@pytest.mark.parametrize("loadx_ports,vec_pipelined,quant_pairs,rms_pairs", [
    (1, False, False, False),
    pytest.param(2, True, False, False, marks=pytest.mark.extended),      # the cycle tests below run
    pytest.param(2, True, True, False, marks=pytest.mark.extended),       # these pairs' prefills bit-exact
    (2, True, True, True)])
def test_micro_layer_paired_scratchpad(loadx_ports, vec_pipelined, quant_pairs, rms_pairs):
    """The scratchpad in rows of two words (``sp_pairs``): LOAD_X reads two words a cycle per
    reader (with both readers four); with the pipelined vector unit ADD and SWIGLU take
    and write two words a cycle (its ``pairs``), with ``quant_pairs`` QUANT too, with ``rms_pairs``
    RMSNORM as well; prefill 5 in chunks of 3 and 2 over blocks of 3, then a decode step; logits
    bit-exact."""
    check(*run_stream(5, 2, chunk=3, block=3, kv_bits=8, seed=10, ready=0.7, sp_pairs=True, loadx_ports=loadx_ports,
                      vec_pipelined=vec_pipelined, quant_pairs=quant_pairs, rms_pairs=rms_pairs))


def test_micro_layer_loadx_two_ports_odd_chunks():
    """LOAD_X through both readers when a row has an odd number of pk-chunks (B one fewer than A):
    pk = 32 with hidden 96 (3 chunks: Q/K/V, gate/up, the head) and intermediate 160 (5: down);
    prefill 4 in chunks of 3 and 1, then a decode step; logits bit-exact. (One chunk per row, B
    idle, is not reached by a micro layer this engine runs.)"""
    check(*run_stream(4, 2, chunk=3, block=3, kv_bits=8, seed=8, ready=0.7, loadx_ports=2,
                      cfg_kw=dict(hidden_size=96, num_heads=6, intermediate_size=160),
                      shape=dict(pk=32, d_max=256)))


@pytest.mark.parametrize("att", [dict(att_keys=1), dict(att_keys=2), dict(att_pipelined=True, att_rows=2)])
def test_attention_partials_to_scratchpad(att):
    """ATT with final=0 writes each row's partial (m, l, o) to the scratchpad as 2d+4 words (int64
    lo/hi pairs: the NIC's SOFTMAX_MERGE payload); fold and flat merges with a causal mask equal golden
    (blocks of 3, 3 and 1 keys: with ``att_keys=2`` each block ends with one key alone; with
    ``att_rows=2`` the 4 rows go as two pairs)."""
    d, ntok, bs, n0, n1, pos0 = 16, 7, 3, 2, 2, 4
    rng = torch.Generator().manual_seed(11)
    K = torch.randint(-127, 128, (ntok, d), generator=rng)
    V = torch.randint(-127, 128, (ntok, d), generator=rng)
    ek = torch.randint(2, 12, (ntok,), generator=rng)
    ev = torch.randint(0, 12, (ntok,), generator=rng)
    q = torch.randint(-127, 128, (n0 * n1, d), generator=rng)
    eq = torch.randint(4, 12, (n0 * n1,), generator=rng)
    KA, VA, QA, DST = 0, 200, 400, 1000
    EK, EV, EQ = 0, 16, 32
    nblk = -(-ntok // bs)
    words = K.flatten().tolist() + V.flatten().tolist() + q.flatten().tolist() + \
        ek.tolist() + ev.tolist() + eq.tolist()
    cmds = [instr(EngineOpcode.SPW, dst=KA, n0=ntok * d), instr(EngineOpcode.SPW, dst=VA, n0=ntok * d),
            instr(EngineOpcode.SPW, dst=QA, n0=n0 * n1 * d),
            instr(EngineOpcode.SPW, flags=SpwFlags(em=True), dst=EK, n0=ntok), instr(EngineOpcode.SPW, flags=SpwFlags(em=True), dst=EV, n0=ntok),
            instr(EngineOpcode.SPW, flags=SpwFlags(em=True), dst=EQ, n0=n0 * n1)]
    for v, a, e in ((False, KA, EK), (True, VA, EV)):
        cmds.append(instr(EngineOpcode.KVW, flags=KvwFlags(v=v), a=a, n0=ntok, n1=1, so=d, len=d, ea=e, eo=1, ei=0, kvb=0, kvs=0))
    nw = PartialRow(d).words
    exp = []
    for flat, dst in ((0, DST), (1, DST + 200)):
        cmds.append(instr(EngineOpcode.ATT, flags=AttFlags(causal=True, flat=bool(flat)), a=QA, so=n1 * d, len=d, n0=n0, n1=n1,
                          ea=EQ, eo=n1, ei=1, pos0=pos0, kvb=0, nblk=nblk, bs=bs, ntok=ntok, dst=dst))
        cmds.append(instr(EngineOpcode.SPR, a=dst, n0=n0 * n1 * nw))
        for r in range(n0 * n1):
            parts = []
            for b in range(nblk):
                k0, k1 = b * bs, min((b + 1) * bs, ntok)
                mask = (torch.arange(k0, k1) <= pos0 + r // n1)[None, :]
                parts.append(nx.block_partial(q[r:r + 1], eq[r:r + 1], K[k0:k1], ek[k0:k1], V[k0:k1],
                                              ev[k0:k1], mask))
            p = nx.flat_merge(parts) if flat else nx.merge_partials(parts)
            exp.append((int(p.m[0]), int(p.l[0]), p.o[0].tolist()))
    dut = make_engine(**att)
    out = {}
    csrc, ssrc, snk = StreamSource(dut.cmd), StreamSource(dut.sp_in), StreamSink(dut.sp_out, seed=3, ready_prob=0.6)

    async def tb(ctx):
        await csrc.send(ctx, cmds)

    async def tb_sp(ctx):
        await ssrc.send(ctx, [{"data": int(w) & 0xFFFFFFFF} for w in words])

    async def rx(ctx):
        out["w"] = [signed32(b["data"]) for b in await snk.collect(ctx, 2 * n0 * n1 * nw)]
        out["err"] = ctx.get(dut.error)
    run_simulation(dut, [tb, tb_sp, rx], max_cycles=60000, vcd=False)
    assert out["err"] == 0
    got = []
    for r in range(2 * n0 * n1):
        got.append(words_partial(out["w"][r * nw:(r + 1) * nw], d))
    assert got == exp


def test_attention_rows_reach_the_scratchpad_a_word_a_cycle():
    """The pipelined attention unit's output rows go to the scratchpad at one word a cycle: an ATT
    of 16 rows over 2 keys (its partial rows' 16 x (2d+4) words dominate; finalized rows are bound
    by the dividers instead) retires within 1.3 x its words' cycles plus 40 (a buffer between the
    row serializer and the writer that passes a word every other cycle doubles it)."""
    d, ntok, rows = 16, 2, 16
    KA, VA, QA, DST = 0, 200, 400, 2000
    rng = torch.Generator().manual_seed(5)
    words = torch.randint(-127, 128, (2 * ntok * d + rows * d,), generator=rng).tolist() + [6] * (2 * ntok + rows)
    setup = [instr(EngineOpcode.SPW, dst=KA, n0=ntok * d), instr(EngineOpcode.SPW, dst=VA, n0=ntok * d),
             instr(EngineOpcode.SPW, dst=QA, n0=rows * d),
             instr(EngineOpcode.SPW, flags=SpwFlags(em=True), dst=0, n0=ntok),
             instr(EngineOpcode.SPW, flags=SpwFlags(em=True), dst=16, n0=ntok),
             instr(EngineOpcode.SPW, flags=SpwFlags(em=True), dst=32, n0=rows)]
    for v, a, e in ((False, KA, 0), (True, VA, 16)):
        setup.append(instr(EngineOpcode.KVW, flags=KvwFlags(v=v), a=a, n0=ntok, n1=1, so=d, len=d, ea=e, eo=1, ei=0,
                           kvb=0, kvs=0))
    att = instr(EngineOpcode.ATT, a=QA, so=d, len=d, n0=rows, n1=1, ea=32, eo=1, ei=0,
                pos0=0, kvb=0, nblk=1, bs=ntok, ntok=ntok, dst=DST)
    out_words = rows * PartialRow(d).words
    dut = make_engine(att_pipelined=True)
    csrc, ssrc = StreamSource(dut.cmd), StreamSource(dut.sp_in)
    res = {}

    async def tb(ctx):
        await csrc.send(ctx, setup)
        while ctx.get(dut.retired) != len(setup):
            await ctx.tick()
        await csrc.send(ctx, [att])
        t0 = 0
        while ctx.get(dut.retired) != len(setup) + 1:
            await ctx.tick()
            t0 += 1
        res["cycles"], res["err"] = t0, ctx.get(dut.error)

    async def tb_sp(ctx):
        await ssrc.send(ctx, [{"data": int(w) & 0xFFFFFFFF} for w in words])
    run_simulation(dut, [tb, tb_sp], max_cycles=20000, vcd=False)
    assert res["err"] == 0
    assert out_words <= res["cycles"] <= 1.3 * out_words + 40, (res["cycles"], out_words)


def test_emit_meta_and_payload():
    """EMIT: the instruction's Meta (length set to 4*n0 bytes) on meta_out, then the n0 scratchpad
    words on emit_out with `last` on the final word, under back-pressure on both."""
    from amaranth.hdl import Value
    from mcf_fpga.spec.meta import MetaFields, MetaOp, Stage
    from mcf_fpga.golden.header import pack_int, unpack_int
    meta = MetaFields(op=MetaOp.DATA, stage=Stage.DECODE, src=3, dst=5, route_id=7, kv_id=(2, 9), length=0)
    words = [5, -6, 2 ** 31 - 1, -2 ** 31, 77]
    dut = make_engine()
    out = {}
    csrc, ssrc = StreamSource(dut.cmd), StreamSource(dut.sp_in)
    wsnk = StreamSink(dut.emit_out, seed=4, ready_prob=0.5)

    async def tb(ctx):
        await csrc.send(ctx, [instr(EngineOpcode.SPW, dst=100, n0=len(words)),
                              instr(EngineOpcode.EMIT, a=100, n0=len(words), meta=pack_int(meta))])

    async def tb_sp(ctx):
        await ssrc.send(ctx, [{"data": w & 0xFFFFFFFF} for w in words])

    async def rx_meta(ctx):
        for _ in range(30):                       # hold the meta stream back for a while
            await ctx.tick()
        ctx.set(dut.meta_out.ready, 1)
        v, = await ctx.tick().sample(Value.cast(dut.meta_out.payload)).until(dut.meta_out.valid)
        ctx.set(dut.meta_out.ready, 0)
        out["meta"] = unpack_int(int(v))

    async def rx(ctx):
        out["w"] = await wsnk.collect(ctx, len(words))
    run_simulation(dut, [tb, tb_sp, rx_meta, rx], max_cycles=3000, vcd=False)
    exp = MetaFields(op=MetaOp.DATA, stage=Stage.DECODE, src=3, dst=5, route_id=7, kv_id=(2, 9),
                     length=4 * len(words))
    assert out["meta"] == exp
    assert [signed32(b["data"]) for b in out["w"]] == words
    assert [b["last"] for b in out["w"]] == [0] * (len(words) - 1) + [1]


def test_bad_instructions_halt_and_resume():
    """Unknown opcode -> ERR_OPCODE, halted, later instructions wait; CTRL resumes. Each of an
    out-of-range SPW, a GEMM with K not a whole number of groups, an ATT tile with more rows than
    nq_max and a VEC with bits=9 -> ERR_SHAPE and halt before touching any state (no unit started,
    no stream left waiting). STATUS/RETIRED are read over AXI-Lite."""
    dut = make_engine()
    out = {"st": [], "ret": []}
    csrc = StreamSource(dut.cmd)
    ssrc = StreamSource(dut.sp_in)
    snk = StreamSink(dut.sp_out)
    axi = AXI4LiteMaster(dut.bus)
    bad_shapes = [instr(EngineOpcode.SPW, dst=16383, n0=2),
                  instr(EngineOpcode.GEMM, a=0, ea=0, n0=1, len=48, n1=4, dst=100),
                  instr(EngineOpcode.ATT, flags=AttFlags(causal=True, final=True), a=0, so=16, len=16, n0=9, n1=2, nblk=1, bs=4, ntok=4, dst=200),
                  instr(EngineOpcode.VEC, sub=2, a=0, dst=10, n0=1, len=4, bits=9)]

    async def tb(ctx):
        await csrc.send(ctx, [instr(9), instr(EngineOpcode.SPW, dst=0, n0=2), instr(EngineOpcode.SPR, a=0, n0=2)]
                        + bad_shapes + [instr(EngineOpcode.NOP)])

    async def tb_sp(ctx):
        await ssrc.send(ctx, [{"data": 11}, {"data": 22}])

    async def status(ctx):
        for _ in range(40):
            await ctx.tick()
        st, _ = await axi.read(ctx, 0x0)
        rt, _ = await axi.read(ctx, 0x4)
        out["st"].append(st)
        out["ret"].append(rt)

    async def ctl(ctx):
        await status(ctx)
        await axi.write(ctx, 0x8, 1)
        out["words"] = await snk.collect(ctx, 2)
        for _ in bad_shapes:
            await status(ctx)
            await axi.write(ctx, 0x8, 1)
        await status(ctx)
    run_simulation(dut, [tb_sp, ctl], background=[tb], max_cycles=8000, vcd=False)
    halted = 1 << 1
    assert out["st"][0] == halted | (ERR_OPCODE << 8)
    assert out["ret"][0] == 0
    assert [b["data"] for b in out["words"]] == [11, 22]
    assert out["st"][1:5] == [halted | (ERR_SHAPE << 8)] * 4
    assert out["ret"][1:5] == [2] * 4
    assert out["st"][5] == 0 and out["ret"][5] == 3      # NOP retired after the last resume


#: ``_stream_cycles`` runs already measured in this process, by prompt length and the options that
#: differ from ComputeEngine's defaults (the cycle tests compare overlapping pairs of engines and
#: share the xdist group ``engine_cycles``, so each engine runs once per suite)
_CYCLES: dict = {}


def _stream_cycles(prompt_len, **engine_kw):
    """Cycles of node 0's one-layer micro prefill (one chunk, blocks of 4) on the bare engine at
    full rate, with its logits checked against IntModel."""
    defaults = {k: p.default for k, p in inspect.signature(ComputeEngine.__init__).parameters.items()}
    key = (prompt_len, tuple(sorted((k, v) for k, v in engine_kw.items() if defaults.get(k, inspect.Parameter.empty) != v)))
    if key not in _CYCLES:
        _CYCLES[key] = _measure_stream_cycles(prompt_len, **engine_kw)
    return _CYCLES[key]


def _measure_stream_cycles(prompt_len, **engine_kw):
    from mcf_fpga.sim.kit import run_simulation as run
    cfg = get_config("micro").replace(num_layers=1, vocab_size=64)
    im = IntModel(quantize_model(random_weights(cfg, seed=1), kv_bits=8, block=4))
    prompt = list(range(1, prompt_len + 1))
    comp, ncfg = compile_solo(solo_program(cfg, prompt_len, 1, chunk=prompt_len, block=4, kv_bits=8), ENGINE)
    dut = ComputeEngine(**ENGINE, **engine_kw)
    host = EngineHost(dut, comp, im, prompt, ncfg, seed=1, ready=1.0)
    fg, bg = host.testbenches()
    n = {"cycles": 0}

    async def count(ctx):
        while True:
            await ctx.tick()
            n["cycles"] += 1
    run(dut, fg, background=bg + [count], max_cycles=600_000, vcd=False)
    check(host.read_logits(), golden_logits(im, prompt, prompt_len, 1), host.error)
    return n["cycles"]


@pytest.mark.xdist_group("engine_cycles")
def test_loadx_two_ports_halve_the_activation_load():
    """The same prefill with ``loadx_ports=2`` is shorter by half of LOAD_X's one-reader time --
    the model's ``loadx`` feature, T*(K + K/pk) per loading GEMM (Q, O, gate, down, head: K = 64,
    64, 64, 128, 64) -- within 2 %."""
    T = 4
    saved = _stream_cycles(T) - _stream_cycles(T, loadx_ports=2)
    half = sum(T * (K + K // PK) for K in (64, 64, 64, 128, 64)) / 2
    assert 0.98 * half <= saved <= 1.02 * half, (saved, half)


@pytest.mark.xdist_group("engine_cycles")
def test_paired_scratchpad_halves_add_and_swiglu():
    """With the paired scratchpad and the pipelined vector unit, ADD and SWIGLU move two
    words a cycle each way: the prefill is shorter by half of their elements (the model's
    ``elems`` for vec_add / vec_swiglu: 2 residual adds of T x 64 and a SWIGLU of T x 128) besides
    LOAD_X's saving, within 5 % (measured 2026-12-05: 1,282 of 1,280 cycles)."""
    T = 4
    saved = _stream_cycles(T, vec_pipelined=True) - _stream_cycles(T, vec_pipelined=True, sp_pairs=True)
    loadx = sum(T * K for K in (64, 64, 64, 128, 64)) / 2
    vec = (2 * T * 64 + T * 128) / 2
    assert 0.95 * (loadx + vec) <= saved <= 1.05 * (loadx + vec), (saved, loadx, vec)
    from mcf_fpga.host import perfmodel as pm
    e = dict(pn=PN, pk=PK, group=32, vec_pipelined=True)
    for kind, ln, half in (("vec_add", 64, True), ("vec_swiglu", 128, True), ("vec_quant", 64, False),
                           ("vec_add", 63, False)):
        sh = {"rows": T, "len": ln}
        one, two = pm.feature(kind, "elems", sh, e), pm.feature(kind, "elems", sh, dict(e, sp_pairs=True))
        assert two == (one / 2 if half else one), (kind, ln)


@pytest.mark.xdist_group("engine_cycles")
@pytest.mark.parametrize("sub,kind,flag", [(VecOp.QUANT, "vec_quant", "quant_pairs"),
                                           (VecOp.RMSNORM, "vec_rmsnorm", "rms_pairs")])
def test_row_pairs_halve_the_row_op(sub, kind, flag):
    """With ``quant_pairs`` QUANT moves two words a cycle as well (with ``rms_pairs`` on top, RMSNORM):
    the prefill is shorter by what the model's features of the op lose (``elems`` and ``len``
    halved, ``len`` weighted by the rows' fill of the unit's busy formula, one row for QUANT, two
    for RMSNORM (VectorUnit's docstring): (rows * len + fill * len) / 2 per instruction of the
    compiled program, whose lens and addresses are all even), within 5 %."""
    from mcf_fpga.host import perfmodel as pm
    from mcf_fpga.host import compiler as C
    T = 4
    base = dict(vec_pipelined=True, sp_pairs=True, quant_pairs=flag == "rms_pairs")
    saved = _stream_cycles(T, **base) - _stream_cycles(T, **dict(base, **{flag: True}))
    cfg = get_config("micro").replace(num_layers=1, vocab_size=64)
    comp, _ = compile_solo(solo_program(cfg, T, 1, chunk=T, block=4, kv_bits=8), ENGINE)
    e = dict(ENGINE, **base)
    want = 0
    for r in comp.stream:
        if isinstance(r, C.Ins) and r.fields["op"] == EngineOpcode.VEC and r.fields["sub"] == sub:
            f = r.fields
            assert f["len"] % 2 == 0 and f["a"] % 2 == 0 and f["dst"] % 2 == 0, f
            sh = {"rows": f["n0"] * max(1, f["n1"]), "len": f["len"]}
            want += sum(w * (pm.feature(kind, n, sh, e) - pm.feature(kind, n, sh, dict(e, **{flag: True})))
                        for n, w in (("elems", 1), ("len", 2 if sub == VecOp.RMSNORM else 1)))
    assert want > 0
    assert 0.95 * want <= saved <= 1.05 * want, (saved, want)


@pytest.mark.xdist_group("engine_cycles")
@pytest.mark.parametrize("ports", [1, 2])
def test_paired_scratchpad_halves_loadx_words(ports):
    """With the scratchpad in rows of two words (``sp_pairs``) each LOAD_X reader takes two words a
    cycle: the prefill is shorter by half of LOAD_X's word time, T*K / (2 x ports) (the model's
    ``loadx`` feature, T*(K/2 + K/pk)/loadx_ports with sp_pairs), within 5 % (measured 2026-12-05: 769 of
    768 cycles with one reader, 373 of 384 with two)."""
    T = 4
    saved = _stream_cycles(T, loadx_ports=ports) - _stream_cycles(T, loadx_ports=ports, sp_pairs=True)
    want = sum(T * K for K in (64, 64, 64, 128, 64)) / (2 * ports)
    assert 0.95 * want <= saved <= 1.05 * want, (saved, want)
    from mcf_fpga.host import perfmodel as pm
    e = dict(pn=PN, pk=PK, group=32, loadx_ports=ports)
    g = {"T": T, "K": 128, "N": 64, "reuse": 0}
    assert pm.feature("gemm", "loadx", g, e) - pm.feature("gemm", "loadx", g, dict(e, sp_pairs=True)) == T * 128 / (2 * ports)
