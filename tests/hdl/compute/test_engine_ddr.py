"""ComputeEngine with K/V in DDR (docs/memory.md "KV in DDR", docs/compute.md):
KVW rows go to the KV region through the streamer, KVL loads a slot's rows into a staging window
without blocking the sequencer, ATT waits for its window and releases it on request.

Golden first: every ATT output of a short engine program equals golden attention
(``block_partial`` / ``finalize`` over the rows golden ``KVStore`` holds) bit for bit, and after the
program the DDR image (``AXI4Memory``, random latency up to 130 cycles, random ready stalls) equals
``KVStore`` with the program's KVW rows applied, with the bytes around the region unchanged.
Bad KVL/KVW/ATT shapes halt with ERR_SHAPE before any bus transaction; SLVERR/DECERR halt with
ERR_KV and the streamer's address in KV_ERR/KV_ERR_ADDR; CTRL resumes; nothing hangs.
"""
import pytest
import random

import torch
from hypothesis import given, settings, strategies as st

from mcf_fpga.spec.kvregion import KVRegion
from mcf_fpga.golden.kvstore import KVStore
from mcf_fpga.hdl.bus import Resp
from mcf_fpga.hdl.compute.engine import ComputeEngine, ERR_OPCODE, ERR_SHAPE, ERR_KV
from mcf_fpga.spec.instr import AttFlags, EngineOpcode, KvwFlags, SpwFlags
from mcf_fpga.spec.partial import PartialRow
from mcf_fpga.hdl.compute.program import instr, partial_words, words_partial
from mcf_fpga.spec.dma import DmaStatus
from mcf_fpga.sim import AXI4Memory
from mcf_fpga.sim.kit import StreamSource, StreamSink, AXI4LiteMaster, run_simulation

from .test_attention import golden_rows, rand_partial_row

D = 16                     # head_dim = the region's d
WIN = 16                   # staging window rows (= blk_max, the default)
N_SLOTS, SLOT_ROWS = 3, 24
BASE = 0x4000              # region base; the memory has MARGIN bytes on either side
MARGIN = 64
PW = PartialRow(D).words   # words of one partial row
HALTED = 1 << 1
STATUS, RETIRED, CTRL, KV_ERR, KV_ERR_LO, KV_ERR_HI = 0x0, 0x4, 0x8, 0xC, 0x10, 0x14


def region():
    return KVRegion(BASE, N_SLOTS, SLOT_ROWS, D, 8, 16)


def make_engine(reg=None, **extra):
    kw = dict(pn=4, pk=16, group=32, kc_max=8, x_depth=64, t_max=8, d_max=128, head_dim=D, nq_max=8,
              kv_depth=32, nb_max=4, z_max=16, blk_max=16, sp_depth=8192, em_depth=256, **extra)
    if reg is None:
        return ComputeEngine(**kw)
    return ComputeEngine(**kw, kv_region=reg, kv_n_win=2,
                         kv_dma=dict(addr_width=32, max_burst=4, max_outstanding=4))


def signed32(v):
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >> 31 else v


def _int8_row(rng, reg):
    return [rng.randint(-127, 127) for _ in range(D)], rng.randint(0, 11)


def make_memory(reg, *, latency, ready_seed, seed, error_ranges=(), size=None, row=_int8_row):
    """AXI4Memory over the region plus margins; the region holds random rows (golden ``KVStore``;
    ``row(rng, reg)`` -> (values, e) draws one), the margins random bytes. Returns (mem, store,
    image of the whole memory)."""
    rng = random.Random(seed)
    store = KVStore(reg)
    for s in range(reg.n_slots):
        for sel in (0, 1):
            for r in range(reg.slot_rows):
                store.write_row(s, sel, r, *row(rng, reg))
    size = reg.size + 2 * MARGIN if size is None else size
    image = bytearray(rng.randbytes(size))
    n = min(reg.size, size - MARGIN)
    image[MARGIN:MARGIN + n] = store.image[:n]
    mem = AXI4Memory(size, data_width=128, base=BASE - MARGIN, latency=latency, max_outstanding=4,
                     error_ranges=error_ranges, ready_seed=ready_seed)
    mem.load(BASE - MARGIN, bytes(image))
    return mem, store, image


# ------------------------------------------------------------------ program cases

@st.composite
def kvw_case(draw):
    n0 = draw(st.integers(1, 4))
    n1 = draw(st.integers(1, 2))
    kvs = draw(st.integers(0, 8)) if n1 > 1 else 0
    kvb = draw(st.integers(0, SLOT_ROWS - ((n1 - 1) * kvs + n0)))
    return dict(sel=draw(st.integers(0, 1)), slot=draw(st.integers(0, N_SLOTS - 1)), kvb=kvb, kvs=kvs,
                n0=n0, n1=n1)


@st.composite
def tile_case(draw):
    n0, n1 = draw(st.sampled_from([(1, 1), (2, 1), (1, 2)]))       # <= 2 query rows: finalize costs
    return dict(n0=n0, n1=n1, causal=draw(st.booleans()),                # d divisions of ~36 cycles a row
                final=draw(st.booleans()), dpos=draw(st.integers(0, 20)), acc=draw(st.booleans()))


@st.composite
def job_case(draw):
    """One block: KVL rows row..row+n-1 of slot into the job's window, ATT over its rows k0..k0+nt-1
    in one or two query tiles (the last one releases the window)."""
    n = draw(st.integers(1, WIN))
    row = draw(st.integers(0, SLOT_ROWS - n))
    k0 = draw(st.integers(0, n - 1))
    nt = draw(st.integers(1, n - k0))
    return dict(slot=draw(st.integers(0, N_SLOTS - 1)), row=row, n=n, k0=k0, nt=nt,
                kpos=draw(st.integers(0, 40)), tiles=draw(st.lists(tile_case(), min_size=1, max_size=2)))


def build_program(kvws, jobs, seed):
    """-> (cmds, sp_in words, expected output words, golden store updater, kvl count).

    Layout: SP[0..) the KVW source rows then the query rows, EM[0..) their exponents, the
    outputs from OUT on. Jobs use window j % 2; KVL of job j+2 follows ATT of job j (which
    released that window), so the load of job j+1 runs while job j computes."""
    g = torch.Generator().manual_seed(seed)
    words, ewords, cmds = [], [], []
    writes = []                                     # (slot, sel, row, values, e) in program order
    for w in kvws:
        a, ea = len(words), len(ewords)
        nr = w["n0"] * w["n1"]
        vals = torch.randint(-127, 128, (nr, D), generator=g)
        es = torch.randint(0, 12, (nr,), generator=g)
        words += vals.flatten().tolist()
        ewords += es.tolist()
        # rows (o, i): SP[a + o*so + i*d], EM[ea + o*eo + i*ei] -> row kvb + i*kvs + o
        for o in range(w["n0"]):
            for i in range(w["n1"]):
                r = o * w["n1"] + i
                writes.append((w["slot"], w["sel"], w["kvb"] + i * w["kvs"] + o, vals[r].tolist(), int(es[r])))
        cmds.append(instr(EngineOpcode.KVW, flags=KvwFlags(v=w["sel"] == 1), a=a, so=w["n1"] * D, len=D, n0=w["n0"], n1=w["n1"], ea=ea,
                          eo=w["n1"], ei=1, b=w["slot"], kvb=w["kvb"], kvs=w["kvs"]))
    OUT = 4096
    out_at = OUT
    att = []                                        # per job: list of ATT instrs with their expectations
    for j, job in enumerate(jobs):
        win = j % 2
        tiles = []
        for t, tl in enumerate(job["tiles"]):
            nq = tl["n0"] * tl["n1"]
            q = torch.randint(-127, 128, (nq, D), generator=g)
            eq = torch.randint(4, 12, (nq,), generator=g)
            a, ea = len(words), len(ewords)
            words += q.flatten().tolist()
            ewords += eq.tolist()
            pos0 = job["kpos"] + tl["dpos"] if tl["causal"] else tl["dpos"]
            last = t == len(job["tiles"]) - 1
            acc, b = None, 0                        # acc: the rows' partials (ATT sub bit1) at SP[b..]
            if tl.get("acc"):
                acc = [rand_partial_row(g, d=D) for _ in range(nq)]
                b = len(words)
                words += [w for pt in acc for w in partial_words(*pt)]
            ins = instr(EngineOpcode.ATT, sub=int(last) | 2 * bool(tl.get("acc")),
                        flags=AttFlags(causal=bool(tl["causal"]), final=bool(tl["final"])), a=a,
                        so=tl["n1"] * D, len=D, n0=tl["n0"], n1=tl["n1"], ea=ea, eo=tl["n1"], ei=1, pos0=pos0,
                        kvb=win * WIN + job["k0"], nblk=1, bs=job["nt"], ntok=job["nt"], kpos=job["kpos"],
                        b=b, dst=out_at)
            nw = nq * (D if tl["final"] else PW)
            tiles.append(dict(ins=ins, q=q, eq=eq, pos=[pos0 + r // tl["n1"] for r in range(nq)], tl=tl,
                              at=out_at - OUT, nw=nw, acc=acc))
            out_at += nw
        att.append(tiles)
    assert len(words) < OUT and out_at < 8192 and len(ewords) < 256

    def kvl(j):
        jb = jobs[j]
        return instr(EngineOpcode.KVL, b=jb["slot"], kvb=jb["row"], ntok=jb["n"], dst=j % 2)

    head = [instr(EngineOpcode.SPW, dst=0, n0=len(words)), instr(EngineOpcode.SPW, flags=SpwFlags(em=True), dst=0, n0=len(ewords))]
    prog = head + cmds + [kvl(j) for j in range(min(2, len(jobs)))]
    for j in range(len(jobs)):
        prog += [t["ins"] for t in att[j]]
        if j + 2 < len(jobs):
            prog.append(kvl(j + 2))
    prog.append(instr(EngineOpcode.SPR, a=OUT, n0=out_at - OUT))
    sp_words = [w & 0xFFFFFFFF for w in words + ewords]
    return prog, sp_words, att, writes, out_at - OUT


def expected_words(store, jobs, att):
    """Golden attention over the rows ``store`` holds (after the KVW rows): the output words."""
    exp = {}
    for job, tiles in zip(jobs, att):
        rows = range(job["row"] + job["k0"], job["row"] + job["k0"] + job["nt"])
        kv = {sel: [store.read_row(job["slot"], sel, r) for r in rows] for sel in (0, 1)}
        K = torch.tensor([v for v, _ in kv[0]])
        V = torch.tensor([v for v, _ in kv[1]])
        ek = torch.tensor([e for _, e in kv[0]])
        ev = torch.tensor([e for _, e in kv[1]])
        for t in tiles:
            tl = t["tl"]
            res = golden_rows(t["q"], t["eq"], t["pos"], K, ek, V, ev, [(0, job["nt"], job["kpos"])],
                              tl["causal"], False, tl["final"], acc=t["acc"])
            exp[t["at"]] = res
    return exp


def check_outputs(got_words, att, exp):
    for tiles in att:
        for t in tiles:
            w = got_words[t["at"]:t["at"] + t["nw"]]
            if t["tl"]["final"]:
                got = [w[r * D:(r + 1) * D] for r in range(len(w) // D)]
                assert got == [o for _, _, o in exp[t["at"]]], f"final tile at {t['at']}"
            else:
                got = [words_partial(w[r * PW:(r + 1) * PW], D) for r in range(len(w) // PW)]
                assert got == exp[t["at"]], f"partial tile at {t['at']}"


#: the KR260 preset's output path: ATT's rows two words a cycle through the pipelined unit's FIFO
ATT_PAIRS = dict(sp_pairs=True, vec_pipelined=True, att_pipelined=True, att_pairs=True)


def run_program(prog, sp_words, n_out, *, mem, seed, sink_prob=1.0, max_cycles=40_000, check_pipelined=False,
                pairs=False):
    dut = make_engine(region(), check_pipelined=check_pipelined, **(ATT_PAIRS if pairs else {}))
    out = {}
    axi = AXI4LiteMaster(dut.bus)

    async def tb_cmd(ctx):
        await StreamSource(dut.cmd, seed=seed).send(ctx, prog)

    async def tb_sp(ctx):
        await StreamSource(dut.sp_in, seed=seed + 1, valid_prob=0.8).send(ctx, [{"data": w} for w in sp_words])

    async def rx(ctx):
        beats = await StreamSink(dut.sp_out, seed=seed + 2, ready_prob=sink_prob).collect(ctx, n_out)
        out["words"] = [signed32(b["data"]) for b in beats]
        while ctx.get(dut.busy):
            await ctx.tick()
        out["status"], _ = await axi.read(ctx, STATUS)
        out["retired"], _ = await axi.read(ctx, RETIRED)
    async def no_halt(ctx):                 # a halt would leave rx waiting: fail at once instead
        async for _, _, h, e in ctx.tick().sample(dut.halted, dut.error):
            assert not h, f"engine halted, error {e:#x}"
    run_simulation(dut, [tb_cmd, tb_sp, rx], background=[mem.testbench(dut.m_axi_kv), no_halt], vcd=False,
                   max_cycles=max_cycles)
    return out


def check_program(kvws, jobs, latency, ready_seed, seed, sink_prob=1.0, check_pipelined=False, pairs=False):
    reg = region()
    mem, store, image = make_memory(reg, latency=latency, ready_seed=ready_seed, seed=seed)
    prog, sp_words, att, writes, n_out = build_program(kvws, jobs, seed)
    out = run_program(prog, sp_words, n_out, mem=mem, seed=seed, sink_prob=sink_prob, check_pipelined=check_pipelined,
                      pairs=pairs)
    for slot, sel, row, vals, e in writes:              # golden: the rows in program order
        store.write_row(slot, sel, row, vals, e)
    assert out["status"] == 0, f"STATUS {out['status']:#x}"
    assert out["retired"] == len(prog)
    check_outputs(out["words"], att, expected_words(store, jobs, att))
    image[MARGIN:MARGIN + reg.size] = store.image
    assert mem.dump(BASE - MARGIN, len(image)) == bytes(image), "DDR image differs from golden KVStore"
    n_writes = sum(1 for e in mem.log if e[1] == "W")
    assert n_writes == len(writes) * -(-reg.row_beats // 4)    # one burst per row (2 beats, bursts of 4)
    return out


# ------------------------------------------------------------------ properties

@settings(max_examples=5, deadline=None)
@given(kvws=st.lists(kvw_case(), max_size=3), jobs=st.lists(job_case(), min_size=1, max_size=3),
       latency=st.one_of(st.integers(1, 30), st.integers(100, 130)),
       ready_seed=st.one_of(st.none(), st.integers(0, 2 ** 16)), seed=st.integers(0, 2 ** 16),
       sink_prob=st.sampled_from([1.0, 0.4]), check_pipelined=st.booleans(), pairs=st.booleans())
def test_engine_ddr_program_matches_golden(kvws, jobs, latency, ready_seed, seed, sink_prob, check_pipelined, pairs):
    """KVW to random slots/rows, KVL, ATT (causal or not, final or partial, acc or not, one or two
    query tiles on one window, release after the last): outputs = golden attention over golden KVStore's rows,
    DDR image = KVStore with the KVW rows; with the instruction check's products registered or not;
    ``pairs``: the KR260 preset's output path (``att_pairs``, the pipelined attention unit: the
    rows, at even addresses, go two words a cycle once the window's ATT starts)."""
    check_program(kvws, jobs, latency, ready_seed, seed, sink_prob, check_pipelined, pairs)


@pytest.mark.parametrize("pairs", [False, True])
def test_engine_ddr_writes_then_loads_at_long_latency(pairs):
    """Latency 120 with ready stalls: a KVW right before the KVL that reads its rows (the load waits
    for the writes' B responses), three jobs on two windows (job 2 reuses window 0 after job 0's
    release), two query tiles on one window, an acc tile; ``pairs``: on the ``att_pairs`` engine."""
    kvws = [dict(sel=0, slot=1, kvb=2, kvs=5, n0=4, n1=2), dict(sel=1, slot=1, kvb=2, kvs=5, n0=4, n1=2),
            dict(sel=0, slot=2, kvb=20, kvs=0, n0=4, n1=1)]
    t = dict(n0=2, n1=2, causal=True, final=True, dpos=3)
    jobs = [dict(slot=1, row=0, n=16, k0=0, nt=16, kpos=0, tiles=[t, dict(t, final=False, dpos=9)]),
            dict(slot=2, row=8, n=16, k0=3, nt=13, kpos=5, tiles=[dict(t, causal=False, acc=True)]),
            dict(slot=1, row=4, n=8, k0=0, nt=8, kpos=2, tiles=[dict(t, n1=1, final=False)])]
    check_program(kvws, jobs, latency=120, ready_seed=7, seed=3, sink_prob=0.5, pairs=pairs)


# ------------------------------------------------------------------ errors

def run_with_status(dut, mem, cmds, sp_words, steps, *, max_cycles=20_000, background=()):
    """Feed ``cmds`` (background); for each step: wait until the engine is idle or halted, read
    STATUS/RETIRED/KV_ERR/KV_ERR_ADDR, then write CTRL=1 if the step says so. ``background``:
    more background testbenches (e.g. a receiver on meta_out/emit_out)."""
    axi = AXI4LiteMaster(dut.bus)
    got = []

    async def tb_cmd(ctx):
        await StreamSource(dut.cmd).send(ctx, cmds)

    async def tb_sp(ctx):
        await StreamSource(dut.sp_in).send(ctx, [{"data": w & 0xFFFFFFFF} for w in sp_words])

    async def ctl(ctx):
        for resume in steps:
            for _ in range(60):
                await ctx.tick()
            while ctx.get(dut.busy) and not ctx.get(dut.halted):
                await ctx.tick()
            while ctx.get(dut.halted) and ctx.get(dut.busy):       # halted: in-flight work drains
                await ctx.tick()
            regs = [(await axi.read(ctx, a))[0] for a in (STATUS, RETIRED)]
            if mem is not None:
                regs += [(await axi.read(ctx, a))[0] for a in (KV_ERR, KV_ERR_LO, KV_ERR_HI)]
            got.append(regs)
            if resume:
                await axi.write(ctx, CTRL, 1)
    bg = [tb_cmd, *background] + ([mem.testbench(dut.m_axi_kv)] if mem is not None else [])
    run_simulation(dut, [tb_sp, ctl], background=bg, vcd=False, max_cycles=max_cycles)
    return got


@pytest.mark.parametrize("check_pipelined", [False, True])
def test_bad_kv_shapes_halt_without_bus_transactions(check_pipelined):
    """Each refused KVL/KVW/ATT -> ERR_SHAPE, halted, nothing retired and no AXI transaction; CTRL
    resumes with the next. Then a good KVL claims window 0: a second KVL to it and an ATT on window 1
    (never loaded) are refused too, and the bus saw only the first load's two reads. Also with the
    check's products registered (``check_pipelined``: the check ready 2 cycles after the head)."""
    reg = region()
    mem, _, image = make_memory(reg, latency=20, ready_seed=1, seed=4)
    dut = make_engine(reg, check_pipelined=check_pipelined)
    rows = [instr(EngineOpcode.SPW, dst=0, n0=D), instr(EngineOpcode.SPW, flags=SpwFlags(em=True), dst=0, n0=1)]
    kvw = dict(a=0, so=D, len=D, n0=1, n1=1, ea=0, eo=1, ei=0)
    att = dict(flags=AttFlags(final=True), a=0, so=D, len=D, n0=1, n1=1, ea=0, nblk=1, dst=1000)
    bad = [instr(EngineOpcode.KVL, b=0, kvb=0, ntok=0, dst=0),                    # n = 0
           instr(EngineOpcode.KVL, b=0, kvb=0, ntok=WIN + 1, dst=0),              # n > win_rows
           instr(EngineOpcode.KVL, b=0, kvb=0, ntok=4, dst=2),                    # window beyond n_win
           instr(EngineOpcode.KVL, b=N_SLOTS, kvb=0, ntok=4, dst=0),              # slot beyond the region
           instr(EngineOpcode.KVL, b=1, kvb=SLOT_ROWS - 3, ntok=4, dst=0),        # rows beyond the slot
           instr(EngineOpcode.KVW, **kvw, b=N_SLOTS, kvb=0),                      # slot beyond the region
           instr(EngineOpcode.KVW, **kvw, b=0, kvb=SLOT_ROWS),                    # row beyond the slot
           instr(EngineOpcode.KVW, **dict(kvw, n1=2, ei=1), b=0, kvb=SLOT_ROWS - 5, kvs=5),   # 2nd row beyond
           instr(EngineOpcode.ATT, **att, kvb=0, bs=4, ntok=4),                   # window 0 never loaded
           instr(EngineOpcode.ATT, **att, kvb=WIN - 2, bs=4, ntok=4)]             # rows in two windows
    good = instr(EngineOpcode.KVL, b=1, kvb=2, ntok=8, dst=0)
    bad2 = [instr(EngineOpcode.KVL, b=2, kvb=0, ntok=8, dst=0),                   # window 0 is claimed
            instr(EngineOpcode.ATT, **att, kvb=WIN, bs=4, ntok=4)]                 # window 1 never loaded
    steps = [True] * (len(bad) + len(bad2)) + [False]
    cmds = rows + bad + [good] + bad2 + [instr(EngineOpcode.NOP)]
    got = run_with_status(dut, mem, cmds, list(range(D)) + [3], steps)
    for k in range(len(bad)):
        assert got[k][:3] == [HALTED | (ERR_SHAPE << 8), 2, 0], f"bad instruction {k}: {got[k]}"
    for k in range(len(bad2)):                                       # the good KVL retired
        assert got[len(bad) + k][:3] == [HALTED | (ERR_SHAPE << 8), 3, 0], f"bad2 {k}: {got[len(bad) + k]}"
    assert got[-1][:3] == [0, 4, 0]
    # the good KVL only: 8 rows of 2 beats = 16 beats per descriptor, bursts of 4, K then V
    assert [(e[1], e[2]) for e in mem.log] == [("R", reg.row_addr(1, sel, 2) + 64 * k)
                                               for sel in (0, 1) for k in range(4)]
    assert mem.dump(BASE - MARGIN, len(image)) == bytes(image)


def test_kvl_is_an_unknown_opcode_on_the_default_engine():
    dut = make_engine()
    got = run_with_status(dut, None, [instr(EngineOpcode.KVL, b=0, kvb=0, ntok=4, dst=0), instr(EngineOpcode.NOP)], [], [True, False])
    assert got[0] == [HALTED | (ERR_OPCODE << 8), 0]
    assert got[1] == [0, 1]
    assert "m_axi_kv" not in dut.signature.members


def _err_program(kind):
    """A KVW to slot 0 (fine), then the failing access, then ATT on window 0 and a NOP."""
    rows = [instr(EngineOpcode.SPW, dst=0, n0=2 * D), instr(EngineOpcode.SPW, flags=SpwFlags(em=True), dst=0, n0=2)]
    kvw = dict(a=0, so=D, len=D, n0=2, n1=1, ea=0, eo=1, ei=0)
    att = instr(EngineOpcode.ATT, sub=1, flags=AttFlags(final=True), a=0, so=D, len=D, n0=1, n1=1, ea=0, kvb=0, nblk=1, bs=4, ntok=4,
                dst=1000)
    if kind == "read":      # KVL of slot 2 fails; ATT waits for window 0 and gives up
        return rows + [instr(EngineOpcode.KVW, **kvw, b=0, kvb=0), instr(EngineOpcode.KVL, b=2, kvb=1, ntok=4, dst=0), att,
                       instr(EngineOpcode.NOP)]
    # write: the one-row KVW to slot 2 row 5 retires (handed to the streamer) and fails; the KVL
    # after it waits for that write's B response, sees the error and gives up
    return rows + [instr(EngineOpcode.KVW, **kvw, b=0, kvb=0), instr(EngineOpcode.KVW, **dict(kvw, n0=1), b=2, kvb=5),
                   instr(EngineOpcode.KVL, b=0, kvb=0, ntok=4, dst=0), instr(EngineOpcode.NOP)]


def test_bus_errors_halt_with_address_and_resume():
    """SLVERR (an error range over slot 2) and DECERR (slot 2 beyond the memory's end), on a load and
    on a write: ERR_KV, halted, KV_ERR = the code, KV_ERR_ADDR = the streamer's address (reads: the
    first failing beat; writes: the row), the waiting ATT gives up, ``busy`` falls, nothing hangs;
    slot 0's row landed; CTRL clears everything and the NOP after it retires."""
    reg = region()
    s2 = reg.slot_addr(2)
    for resp, code in ((Resp.SLVERR, DmaStatus.SLVERR), (Resp.DECERR, DmaStatus.DECERR)):
        for kind in ("read", "write"):
            if resp == Resp.SLVERR:
                mem, store, image = make_memory(reg, latency=100, ready_seed=5, seed=6,
                                                error_ranges=[(s2, reg.end, Resp.SLVERR)])
            else:                              # the memory ends where slot 2 begins
                mem, store, image = make_memory(reg, latency=100, ready_seed=5, seed=6,
                                                size=s2 - (BASE - MARGIN))
            dut = make_engine(reg)
            prog = _err_program(kind)
            vals = [[(7 * i + 3 * r) % 200 - 100 for i in range(D)] for r in range(2)]
            got = run_with_status(dut, mem, prog, [v for r in vals for v in r] + [1, 2], [True, False])
            # retired: SPW, SPW, KVW, then the KVL (read; the ATT gave up) or the failing KVW (write;
            # the KVL gave up); after CTRL only the NOP
            addr = reg.row_addr(2, 0, 1) if kind == "read" else reg.row_addr(2, 0, 5)
            assert got[0] == [HALTED | (ERR_KV << 8), 4, code, addr, 0], (resp, kind, got[0])
            assert got[1][:3] == [0, 5, 0], (resp, kind, got[1])
            for r in range(2):
                store.write_row(0, 0, r, vals[r], r + 1)
            n = min(reg.size, len(image) - MARGIN)
            image[MARGIN:MARGIN + n] = store.image[:n]
            assert mem.dump(BASE - MARGIN, len(image)) == bytes(image), (resp, kind)
