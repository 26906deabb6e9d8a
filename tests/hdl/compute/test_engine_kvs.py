"""ComputeEngine KVS: a KV unit's records sent straight from DDR as
KV install packets (mcf_fpga/spec/kvinstall.py), no scratchpad copy.

Golden first: after KVW rows to random slots (golden ``KVStore`` updated in program order), every
KVS of a random record run (K runs, V runs, across K/V, split anywhere; random ``last``, ``first``
and ``owner`` header bits from flags 0..2) puts the instruction's Meta
with ``length = 8 + n * row_bytes`` on ``meta_out`` and on ``emit_out`` exactly golden's payload
(``install_payload``: the install header + ``KVStore.read_records``), as little-endian 32-bit words
with ``last`` on the final one, under AXI4Memory latency up to 130 cycles, AXI ready stalls and
random back-pressure on meta_out/emit_out, INT8 and INT4, with a KVL's load sharing the reader.
Bad shapes -> ERR_SHAPE with no bus transaction; SLVERR/DECERR in a KVS's run -> ERR_KV with the
address, the packet still completes, halt, CTRL resumes; KVS on the default engine -> ERR_OPCODE.
"""
import random

import pytest
from hypothesis import given, settings, strategies as st

from mcf_fpga.spec.kvregion import KVRegion
from mcf_fpga.golden.kvstore import KVStore
from mcf_fpga.hdl.bus import Resp
from mcf_fpga.hdl.compute.engine import ComputeEngine, ERR_OPCODE, ERR_SHAPE, ERR_KV
from mcf_fpga.spec.instr import EngineOpcode, KvsFlags, KvwFlags, SpwFlags
from mcf_fpga.hdl.compute.program import instr
from mcf_fpga.spec.dma import DmaStatus
from mcf_fpga.golden.kvinstall import install_payload
from mcf_fpga.spec.kvinstall import install_length, unpack_install_header
from mcf_fpga.spec.meta import MetaFields, MetaOp, Stage
from mcf_fpga.golden.header import pack_int, unpack_int
from mcf_fpga.sim import AXI4Memory
from mcf_fpga.sim.kit import StreamSource, AXI4LiteMaster, run_simulation

from .test_engine_ddr import make_memory as ddr_memory, make_engine, run_with_status, HALTED, STATUS, RETIRED, CTRL, KV_ERR, KV_ERR_LO, \
    KV_ERR_HI

D = 16
N_SLOTS, SLOT_ROWS = 3, 12
BASE, MARGIN = 0x4000, 64


def region(kv_bits=8):
    return KVRegion(BASE, N_SLOTS, SLOT_ROWS, D, kv_bits, 16)


def rand_row(rng, kv_bits):
    lo, hi = -(1 << (kv_bits - 1)), (1 << (kv_bits - 1)) - 1
    return [rng.randint(lo, hi) for _ in range(D)], rng.randint(-128, 127)


def make_memory(reg, **kw):
    """test_engine_ddr's memory with rows of the region's ``kv_bits``."""
    return ddr_memory(reg, row=lambda rng, reg: rand_row(rng, reg.kv_bits), **kw)


def meta_for(k):
    return MetaFields(op=MetaOp.KV_REPLICA, stage=Stage.PREFILL, src=k % 4, dst=(k + 1) % 4, route_id=k,
                      kv_id=(k % 3, 7 + k), length=0)


def words_bytes(words):
    return b"".join((w & 0xFFFFFFFF).to_bytes(4, "little") for w in words)


def split_packets(beats):
    """emit_out beats -> packets (lists of words), split at ``last``."""
    pkts, cur = [], []
    for b in beats:
        cur.append(b["data"])
        if b["last"]:
            pkts.append(cur)
            cur = []
    assert cur == [], "words after the last packet's last"
    return pkts


# ------------------------------------------------------------------ program

@st.composite
def kvs_case(draw):
    """A KVS of a contiguous record run: a K run, a V run or one across, split anywhere."""
    nrec = 2 * SLOT_ROWS
    kind = draw(st.sampled_from(["k", "v", "any"]))
    lo, hi = {"k": (0, SLOT_ROWS), "v": (SLOT_ROWS, nrec), "any": (0, nrec)}[kind]
    rec0 = draw(st.integers(lo, hi - 1))
    return dict(slot=draw(st.integers(0, N_SLOTS - 1)), rec0=rec0, n=draw(st.integers(1, hi - rec0)),
                last=draw(st.booleans()), first=draw(st.booleans()), owner=draw(st.booleans()))


@st.composite
def kvw_case(draw):
    n0 = draw(st.integers(1, 3))
    return dict(sel=draw(st.integers(0, 1)), slot=draw(st.integers(0, N_SLOTS - 1)),
                kvb=draw(st.integers(0, SLOT_ROWS - n0)), n0=n0)


def kvs_flags(c):
    """KVS flags of a case: its install header's ``last``, ``first``, ``owner``."""
    return KvsFlags(last=bool(c["last"]), first=bool(c.get("first", False)), owner=bool(c.get("owner", False)))


def build(steps, kv_bits, seed, aim=True):
    """``steps``: [("kvw", case) | ("kvs", case) | ("kvl", (slot, row, n))] in program order ->
    (program, sp words, writes, sends, follows): a KVW's rows come from SP/EM, a KVS right after a
    KVW is aimed at the rows it wrote (``follows``: those KVS indices)."""
    rng = random.Random(seed)
    words, ewords, body, writes, sends, follows = [], [], [], [], [], []
    last_w = None
    for kind, c in steps:
        if kind == "kvw":
            a, ea = len(words), len(ewords)
            rows = [rand_row(rng, kv_bits) for _ in range(c["n0"])]
            for vals, e in rows:
                words += vals
                ewords.append(e)
            writes.append([(c["slot"], c["sel"], c["kvb"] + o, *rows[o]) for o in range(c["n0"])])
            body.append(("ins", instr(EngineOpcode.KVW, flags=KvwFlags(v=c["sel"] == 1), a=a, so=D, len=D, n0=c["n0"], n1=1, ea=ea, eo=1,
                                     ei=0, b=c["slot"], kvb=c["kvb"]), ("w", len(writes) - 1)))
            last_w = c
        elif kind == "kvs":
            if aim and last_w is not None and rng.random() < 0.5:       # aim at the rows just written
                rec0 = last_w["sel"] * SLOT_ROWS + last_w["kvb"]
                c = dict(c, slot=last_w["slot"], rec0=rec0, n=rng.randint(1, 2 * SLOT_ROWS - rec0))
                follows.append(len(sends))
            k = len(sends)
            sends.append(dict(c, meta=meta_for(k)))
            body.append(("ins", instr(EngineOpcode.KVS, b=c["slot"], kvb=c["rec0"], ntok=c["n"], flags=kvs_flags(c),
                                      meta=pack_int(meta_for(k))), ("s", k)))
            last_w = None
        else:
            slot, row, n = c
            body.append(("ins", instr(EngineOpcode.KVL, b=slot, kvb=row, ntok=n, dst=0), None))
            last_w = None
    head = [instr(EngineOpcode.SPW, dst=0, n0=len(words))] if words else []
    head += [instr(EngineOpcode.SPW, flags=SpwFlags(em=True), dst=0, n0=len(ewords))] if ewords else []
    prog = head + [ins for _, ins, _ in body]
    return prog, [w & 0xFFFFFFFF for w in words + ewords], body, writes, sends, follows


def run_kvs(prog, sp_words, n_pkts, *, reg, mem, seed, out_prob=1.0, max_cycles=60_000):
    dut = make_engine(reg)
    out = {"meta": [], "emit": []}
    axi = AXI4LiteMaster(dut.bus)
    rng = random.Random(seed + 9)

    async def tb_cmd(ctx):
        await StreamSource(dut.cmd, seed=seed).send(ctx, prog)

    async def tb_sp(ctx):
        await StreamSource(dut.sp_in, seed=seed + 1, valid_prob=0.8).send(ctx, [{"data": w} for w in sp_words])

    async def rx(ctx):                       # meta_out and emit_out, each with random ready
        n_last = 0
        while len(out["meta"]) < n_pkts or n_last < n_pkts:
            ctx.set(dut.meta_out.ready, rng.random() < out_prob)
            ctx.set(dut.emit_out.ready, rng.random() < out_prob)
            _, _, mv, mr, mp, ev, er, ep = await ctx.tick().sample(
                dut.meta_out.valid, dut.meta_out.ready, dut.meta_out.payload,
                dut.emit_out.valid, dut.emit_out.ready, dut.emit_out.payload)
            if mv and mr:
                out["meta"].append(unpack_int(mp.as_value().value).as_dict())
            if ev and er:
                assert len(out["meta"]) > n_last, "payload word before its Meta"
                out["emit"].append({"data": ep.data, "last": ep.last})
                n_last += ep.last
        ctx.set(dut.meta_out.ready, 0)
        ctx.set(dut.emit_out.ready, 0)
        for _ in range(5):
            await ctx.tick()
        while ctx.get(dut.busy):
            await ctx.tick()
        out["status"], _ = await axi.read(ctx, STATUS)
        out["retired"], _ = await axi.read(ctx, RETIRED)

    async def no_halt(ctx):
        async for _, _, h, e in ctx.tick().sample(dut.halted, dut.error):
            assert not h, f"engine halted, error {e:#x}"
    bus = dut.m_axi_kv
    out["ar"], out["b"] = [], []

    async def handshakes(ctx):               # cycles of AR and B handshakes
        cycle = 0
        async for _, _, av, ar, bv, br in ctx.tick().sample(bus.ar.valid, bus.ar.ready, bus.b.valid, bus.b.ready):
            if av and ar:
                out["ar"].append(cycle)
            if bv and br:
                out["b"].append(cycle)
            cycle += 1
    run_simulation(dut, [tb_cmd, tb_sp, rx], background=[mem.testbench(dut.m_axi_kv), no_halt, handshakes],
                   vcd=False, max_cycles=max_cycles)
    return out


def check_kvs(steps, kv_bits, latency, ready_seed, seed, out_prob, aim=True):
    reg = region(kv_bits)
    mem, store, image = make_memory(reg, latency=latency, ready_seed=ready_seed, seed=seed)
    prog, sp_words, body, writes, sends, follows = build(steps, kv_bits, seed, aim)
    exp = []                                  # golden payloads, in program order
    for _, _, tag in body:
        if tag and tag[0] == "w":
            for slot, sel, row, vals, e in writes[tag[1]]:
                store.write_row(slot, sel, row, vals, e)
        elif tag and tag[0] == "s":
            c = sends[tag[1]]
            exp.append(install_payload(store, c["slot"], c["rec0"], c["n"], c["last"], first=c.get("first", False),
                                       owner=c.get("owner", False)))
    out = run_kvs(prog, sp_words, len(sends), reg=reg, mem=mem, seed=seed, out_prob=out_prob)
    assert out["status"] == 0 and out["retired"] == len(prog), (out["status"], out["retired"])
    pkts = split_packets(out["emit"])
    assert len(pkts) == len(sends) == len(out["meta"])
    for k, (c, pkt, e) in enumerate(zip(sends, pkts, exp)):
        assert out["meta"][k] == c["meta"].replace(length=install_length(reg, c["n"])).as_dict(), f"KVS {k} Meta"
        got = words_bytes(pkt)
        assert unpack_install_header(got[:8]) == (c["rec0"], c["n"], c["last"], c.get("first", False),
                                                  c.get("owner", False)), f"KVS {k} header"
        assert got == e, f"KVS {k}: slot {c['slot']} records {c['rec0']}..{c['rec0'] + c['n'] - 1}"
    image[MARGIN:MARGIN + reg.size] = store.image
    assert mem.dump(BASE - MARGIN, len(image)) == bytes(image), "DDR image differs from golden KVStore"
    # reads on the bus: exactly the KVS runs and the KVL's rows, nothing else
    r_beats = sum(ln + 1 for _, k, _, ln, _ in mem.log if k == "R")
    n_kvl = sum(2 * c[2] for kind, c in steps if kind == "kvl")
    assert r_beats == (sum(c["n"] for c in sends) + n_kvl) * reg.row_beats
    return follows, out


@st.composite
def program(draw):
    steps = []
    kvl_at = draw(st.integers(0, 6))
    for i in range(draw(st.integers(1, 6))):
        if i == kvl_at:
            row = draw(st.integers(0, SLOT_ROWS - 1))
            steps.append(("kvl", (draw(st.integers(0, N_SLOTS - 1)), row, draw(st.integers(1, SLOT_ROWS - row)))))
        steps.append(draw(st.one_of(st.tuples(st.just("kvw"), kvw_case()), st.tuples(st.just("kvs"), kvs_case()))))
    steps.append(("kvs", draw(kvs_case())))                   # at least one send
    return steps


@settings(max_examples=8, deadline=None)
@given(steps=program(), kv_bits=st.sampled_from([8, 4]),
       latency=st.one_of(st.integers(1, 30), st.integers(100, 130)),
       ready_seed=st.one_of(st.none(), st.integers(0, 2 ** 16)), seed=st.integers(0, 2 ** 16),
       out_prob=st.sampled_from([1.0, 0.5, 0.2]))
def test_kvs_packets_match_golden(steps, kv_bits, latency, ready_seed, seed, out_prob):
    """KVW random rows to random slots, KVS of random record runs (and a KVL sharing the reader):
    Meta = the instruction's with length 8 + n*row_bytes; payload = golden install header + records."""
    check_kvs(steps, kv_bits, latency, ready_seed, seed, out_prob)


@pytest.mark.parametrize("kv_bits", [8, 4])
def test_kvs_right_after_kvw_reads_the_new_rows(kv_bits):
    """Latency 120, ready stalls, back-pressure: a KVS right behind the KVWs that write its K and V
    rows (a whole owner unit as a K run, `first`, and a V run, `last` and `owner`) sends the new bytes."""
    steps = [("kvw", dict(sel=0, slot=1, kvb=3, n0=3)), ("kvw", dict(sel=1, slot=1, kvb=3, n0=3)),
             ("kvs", dict(slot=1, rec0=0, n=SLOT_ROWS, last=False, first=True)),
             ("kvs", dict(slot=1, rec0=SLOT_ROWS, n=SLOT_ROWS, last=True, owner=True)),
             ("kvw", dict(sel=1, slot=2, kvb=0, n0=2)), ("kvs", dict(slot=2, rec0=SLOT_ROWS - 1, n=3, last=True))]
    _, out = check_kvs(steps, kv_bits, latency=120, ready_seed=7, seed=3, out_prob=0.5, aim=False)
    # the first KVS's reads went out after the B responses of the six rows written before it
    assert len(out["b"]) == 8 and min(out["ar"]) > max(out["b"][:6]), "KVS read before its rows landed"


# ------------------------------------------------------------------ errors

def test_bad_kvs_shapes_halt_without_bus_transactions():
    """n = 0, records beyond the slot, slot beyond the region, Meta length overflow -> ERR_SHAPE,
    halted, nothing on meta_out/emit_out, no AXI transaction; CTRL resumes with the next."""
    big = KVRegion(BASE, 2, 2100, D, 8, 16)                  # 4200 records of 32 B: 8 + n*32 >= 2**16 at n = 2048
    for reg, bad in ((region(), [instr(EngineOpcode.KVS, b=0, kvb=0, ntok=0),
                                 instr(EngineOpcode.KVS, b=0, kvb=2 * SLOT_ROWS - 2, ntok=3),
                                 instr(EngineOpcode.KVS, b=0, kvb=2 * SLOT_ROWS, ntok=1),
                                 instr(EngineOpcode.KVS, b=N_SLOTS, kvb=0, ntok=1)]),
                     (big, [instr(EngineOpcode.KVS, b=0, kvb=0, ntok=2048)])):
        mem = AXI4Memory(256, data_width=128, base=BASE, latency=5)
        dut = make_engine(reg)
        emitted = []

        async def watch(ctx):
            ctx.set(dut.meta_out.ready, 1)
            ctx.set(dut.emit_out.ready, 1)
            async for _, _, mv, ev in ctx.tick().sample(dut.meta_out.valid, dut.emit_out.valid):
                if mv or ev:
                    emitted.append(1)
        got = _run_status_with_rx(dut, mem, bad + [instr(EngineOpcode.NOP)], watch, [True] * len(bad) + [False])
        for k in range(len(bad)):
            assert got[k][:3] == [HALTED | (ERR_SHAPE << 8), 0, 0], f"bad KVS {k}: {got[k]}"
        assert got[-1][:3] == [0, 1, 0]
        assert mem.log == [] and emitted == []
    # the largest legal packet of that region is accepted at decode (8 + 2047*32 < 2**16)
    assert install_length(big, 2047) < 2 ** 16 <= install_length(big, 2048)


def test_kvs_is_an_unknown_opcode_on_the_default_engine():
    dut = make_engine()
    got = run_with_status(dut, None, [instr(EngineOpcode.KVS, b=0, kvb=0, ntok=4), instr(EngineOpcode.NOP)], [], [True, False])
    assert got[0] == [HALTED | (ERR_OPCODE << 8), 0]
    assert got[1] == [0, 1]


@pytest.mark.parametrize("resp", [Resp.SLVERR, Resp.DECERR])
def test_bus_error_in_kvs_completes_packet_halts_and_resumes(resp):
    """A KVS whose run hits SLVERR (one record) / DECERR (the memory ends inside the run): the
    packet still completes (Meta, header, every record word, `last`), ERR_KV with KV_ERR = the
    code and KV_ERR_ADDR = the first failing beat, halted, the KVS not retired, the KVS behind it
    not started; CTRL clears it, and the next KVS (of good records) sends its packet and retires."""
    reg = region()
    bad_addr = reg.record_addr(2, 5)                        # record 5 of slot 2: the run's 5th beat
    if resp == Resp.SLVERR:
        mem, store, _ = make_memory(reg, latency=100, ready_seed=5, seed=6,
                                    error_ranges=[(bad_addr, bad_addr + 16, Resp.SLVERR)])
        code = DmaStatus.SLVERR
    else:
        mem, store, _ = make_memory(reg, latency=100, ready_seed=5, seed=6, size=bad_addr - (BASE - MARGIN))
        code = DmaStatus.DECERR
    dut = make_engine(reg)
    m0 = meta_for(0)
    cmds = [instr(EngineOpcode.KVS, b=2, kvb=3, ntok=4, flags=KvsFlags(last=True), meta=pack_int(m0)),
            instr(EngineOpcode.KVS, b=0, kvb=1, ntok=2, meta=pack_int(meta_for(1))), instr(EngineOpcode.NOP)]
    emit, metas = [], []

    async def rx(ctx):
        rng = random.Random(2)
        while True:
            ctx.set(dut.emit_out.ready, rng.random() < 0.6)
            ctx.set(dut.meta_out.ready, 1)
            _, _, mv, ev, er, ep = await ctx.tick().sample(dut.meta_out.valid, dut.emit_out.valid,
                                                           dut.emit_out.ready, dut.emit_out.payload)
            metas.extend([1] if mv else [])
            if ev and er:
                emit.append((ep.data, ep.last))
    got = _run_status_with_rx(dut, mem, cmds, rx, [True, False])
    n_words = 2 + 4 * reg.row_bytes // 4
    assert [l for _, l in emit[:n_words]] == [0] * (n_words - 1) + [1], "the failing packet did not complete"
    assert got[0] == [HALTED | (ERR_KV << 8), 0, code, bad_addr, 0], got[0]
    assert got[1][:3] == [0, 2, 0], got[1]                   # after CTRL: the second KVS and the NOP
    second = words_bytes([w for w, _ in emit[n_words:]])
    assert second == install_payload(store, 0, 1, 2, False)
    assert len(metas) == 2


def _run_status_with_rx(dut, mem, cmds, rx, steps, max_cycles=20_000):
    """``run_with_status`` with a background receiver on meta_out/emit_out."""
    return run_with_status(dut, mem, cmds, [], steps, max_cycles=max_cycles, background=[rx])
