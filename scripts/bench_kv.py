#!/usr/bin/env python3
"""Attention cycles per key with K/V from DDR while the weights stream from the same DDR, against
the same layer with K/V on chip (issue #18). Amaranth simulator, small shapes.

Both sides run the same decode step of one decoder layer (``hdl.compute.program``
``decoder_layer_program``: RMSNorm, the Q/K/V GEMMs, RoPE, KVW of the new token, attention, the
O/gate/up/down GEMMs) on a ``ComputeEngine``, with attention as the executor runs it: one ATT job
per (KV head, block) writing a partial, then one FOLD per KV head (ascending blocks, bit-exact to
golden ``merge_partials``). The memory is one :class:`hdl.sim.SharedAXI4Memory` (the PS DDR
controller: one image, one shared budget ``--shared`` B/cycle, round-robin grant):

* port A (both sides): the weight tiles, read by a ``hdl.dma.DMAReader`` (128-bit, bursts of 16,
  8 outstanding, one descriptor per tile, all posted when the step starts) whose HP beats are
  gathered two by two into the engine's 256-bit ``w_in`` -- how ``boards/node_dma.py`` feeds
  ``w_in`` from HP2. The weights take the same path on both sides, so the GEMMs see the same
  latency and rate, and only the K/V location differs; feeding ``w_in`` from a testbench at a
  fixed rate would leave out exactly the contention this bench is about.
* port B (DDR side only): the engine's ``m_axi_kv`` (``ComputeEngine(kv_region=...)``); the K/V of
  the earlier positions are in the KV region (one slot, head g's position t at row g*cap + t), the
  new token's K/V row is written by the program's KVW. The first job's block is loaded by a KVL
  queued before the layer's first instruction (as a compiler would: it loads during the
  projections); every other job's KVL is queued before the ATT ``windows - 1`` jobs earlier (one
  job ahead with two windows), the ATT releases its window.
* on chip: the default engine; the earlier K/V are written to its K/V memories by KVW before the
  timed step (not counted); port B is idle.

Counted, the same way on both sides, from the cycle the setup is done (the step's first
instruction is sent) -- "attention cycles": the cycles in which the engine's RETIRED count equals
the index of an ATT or KVL instruction of the step (that instruction is being fetched, waits for
its window or the streamer, computes, or writes its last output); "keys": the keys of all ATT jobs
(KV heads x blocks x block length). "Step": until the last instruction (the SPR of the layer
output) retired. Checked: the layer output of both sides equals golden ``IntModel`` bit for bit.

The last line prints the DDR/on-chip attention percentage first (for the last ``--shared``).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch                                                          # noqa: E402
from amaranth import Module, Signal                                   # noqa: E402
from amaranth.lib import wiring                                       # noqa: E402

from golden import numerics as nx                                     # noqa: E402
from golden.config import get_config                                  # noqa: E402
from golden.int_model import IntModel, quantize_model                 # noqa: E402
from golden.kvstore import KVRegion, KVStore                          # noqa: E402
from golden.model import random_weights                               # noqa: E402
from hdl.compute.engine import ComputeEngine, Op                      # noqa: E402
from hdl.compute.program import decoder_layer_program, instr          # noqa: E402
from hdl.dma import DMAReader                                         # noqa: E402
from hdl.sim import SharedAXI4Memory                                  # noqa: E402
from hdl.sim.kit import StreamSource, StreamSink, run_simulation      # noqa: E402

PN, PK = 4, 16
W_BEAT = PN * PK * 4 // 8          # bytes of one w_in beat (32: two HP beats)
HP = 16


def s32(v):
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >> 31 else v


# ------------------------------------------------------------------ the step

def make_step(a):
    """Model, golden, the layer program with attention split per (KV head, block)."""
    cfg = get_config("micro").replace(num_layers=1, num_heads=a.heads, num_kv_heads=a.kv_heads)
    d, Hk, rep = cfg.head_dim, cfg.num_kv_heads, cfg.gqa_ratio
    cap = a.blocks * a.block
    S = cap - 1                                    # the new token's position: every block full
    qm = quantize_model(random_weights(cfg, seed=a.seed), kv_bits=8, block=a.block)
    model = IntModel(qm)
    g = torch.Generator().manual_seed(a.seed)
    toks = torch.randint(0, cfg.vocab_size, (S + 1,), generator=g)
    cache = model.new_cache()
    model.forward(toks[:S], cache)
    kv = (cache.k[0][0].clone(), cache.k[0][1].clone(), cache.v[0][0].clone(), cache.v[0][1].clone())
    _, hid = model.forward(toks[S:], cache, return_hidden=True, decode=False)
    prog, wbeats, lay = decoder_layer_program(cfg, qm.layers[0], 1, pn=PN, pk=PK, block=a.block, start=S,
                                              cap=cap, decode=False)
    PW = 2 * d + 4
    rows = rep                                     # query rows per job (T = 1)
    part = lay.sp_words                            # partials of one head: blocks x rows x PW
    jobs, body = [], []
    for ins in prog:
        if ins["op"] != Op.ATT:
            body.append(("I", ins))
            continue
        gi = (ins["kvb"]) // cap                   # the layer program's ATT of head gi
        for j in range(a.blocks):
            att = dict(ins, flags=0b001, nblk=1, bs=a.block, ntok=a.block, kpos=j * a.block,
                       kvb=gi * cap + j * a.block, dst=part + j * rows * PW)
            jobs.append(dict(g=gi, j=j, row=gi * cap + j * a.block))
            body.append(("ATT", att, len(jobs) - 1))
        body.append(("I", instr(Op.FOLD, flags=0b100, a=part, b=rows * PW, n0=1, n1=rep, nblk=a.blocks,
                                len=d, so=ins["so"], dst=ins["dst"])))
    sp_words = part + a.blocks * rows * PW
    cos, sin = nx.rope_tables(range(S, S + 1), d, cfg.rope_theta)
    cs = ((cos & 0xFFFF) | ((sin & 0xFFFF) << 16)).flatten().tolist()
    D = cfg.hidden_size
    head = [instr(Op.SPW, dst=lay.sp["H0"], n0=D), instr(Op.SPW, dst=lay.sp["CS"], n0=len(cs))]
    words = [int(x) for x in hid[0].flatten().tolist()] + [s32(x) for x in cs]
    return dict(cfg=cfg, d=d, Hk=Hk, rep=rep, cap=cap, S=S, kv=kv, body=body, jobs=jobs, wbeats=wbeats,
                lay=lay, head=head, words=words, sp_words=sp_words, exp=hid[1].flatten().tolist(), D=D)


def onchip_setup(st):
    """SPW (unpacked) of the earlier K/V and their exponents, KVW of them to the K/V memories."""
    d, Hk, S, cap = st["d"], st["Hk"], st["S"], st["cap"]
    base, ebase = st["sp_words"], 0x100                    # EM rows above the layer's
    kvals, kexp, vvals, vexp = st["kv"]
    cmds, words = [], []
    for sel, (vals, exps) in enumerate(((kvals, kexp), (vvals, vexp))):
        a = base + sel * Hk * S * d
        ea = ebase + sel * Hk * S
        flat = vals[:, :S].transpose(0, 1).reshape(-1).tolist()      # token-major: (t, g) rows
        packed = [sum((v & 0xFF) << (8 * k) for k, v in enumerate(flat[i:i + 4])) for i in range(0, len(flat), 4)]
        cmds.append(instr(Op.SPW, flags=0b10, bits=8, dst=a, n0=len(flat)))
        words += packed
        es = exps[:, :S].transpose(0, 1).reshape(-1).tolist()
        cmds.append(instr(Op.SPW, flags=1, dst=ea, n0=len(es)))
        words += es
        cmds.append(instr(Op.KVW, flags=sel, a=a, so=Hk * d, len=d, n0=S, n1=Hk, ea=ea, eo=Hk, ei=1,
                          kvb=0, kvs=cap))
    return cmds, words, base + 2 * Hk * S * d


def ddr_program(st, windows):
    """The step for the DDR engine: KVL of job 0..windows-2 before the first instruction, KVL of
    job q + windows - 1 before ATT q; ATT q reads window q % windows and releases it."""
    jobs, block = st["jobs"], st["block"]
    ahead = windows - 1
    kvl = lambda q: instr(Op.KVL, b=0, kvb=jobs[q]["row"], ntok=block, dst=q % windows)
    new_rows = {g * st["cap"] + st["S"] for g in range(st["Hk"])}
    out = []
    for q in range(min(ahead, len(jobs))):          # before the KVW of the new token: not its block
        assert not any(jobs[q]["row"] <= r < jobs[q]["row"] + block for r in new_rows)
        out.append(kvl(q))
    for item in st["body"]:
        if item[0] == "I":
            out.append(item[1])
            continue
        _, att, q = item
        if q + ahead < len(jobs):
            out.append(kvl(q + ahead))
        out.append(dict(att, kvb=(q % windows) * st["block"], sub=1))
    return out


def onchip_program(st):
    return [item[1] for item in st["body"]]


# ------------------------------------------------------------------ the hardware

class Bench(wiring.Component):
    """ComputeEngine + the weight DMAReader (port A) gathered into ``w_in``."""

    def __init__(self, engine, max_tile):
        self.engine = engine
        self.rd_w = DMAReader(addr_width=32, data_width=128, max_burst=16, max_outstanding=8,
                              max_length=max_tile)
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine, m.submodules.rd_w = eng, rd = self.engine, self.rd_w
        src, dst = rd.data, eng.w_in                      # two HP beats -> one w_in beat
        lo = Signal(128)
        half = Signal()
        full = Signal()
        last = Signal()
        hi = Signal(128)
        m.d.comb += [dst.valid.eq(full), dst.payload.data.eq(lo | (hi << 128)), dst.payload.last.eq(last),
                     src.ready.eq(~full)]
        with m.If(dst.valid & dst.ready):
            m.d.sync += full.eq(0)
        with m.If(src.valid & src.ready):
            with m.If(~half):
                m.d.sync += [lo.eq(src.payload.data), half.eq(1)]
            with m.Else():
                m.d.sync += [hi.eq(src.payload.data), half.eq(0), full.eq(1), last.eq(src.payload.last)]
        return m


def engine_kw(st, a):
    return dict(pn=PN, pk=PK, group=32, kc_max=12, x_depth=64, t_max=4, d_max=256, head_dim=st["d"],
                nq_max=st["rep"], kv_depth=st["Hk"] * st["cap"], nb_max=max(8, a.blocks), z_max=256,
                blk_max=a.block, sp_depth=1 << 15, em_depth=4096)


def weight_image(wbeats, base):
    """Bytes of the weight tiles at ``base`` and one descriptor per tile."""
    img, descs, start = bytearray(), [], 0
    for i, b in enumerate(wbeats):
        img += b["data"].to_bytes(W_BEAT, "little")
        if b["last"]:
            descs.append({"addr": base + start, "length": len(img) - start})
            start = len(img)
    assert start == len(img)
    return bytes(img), descs


def run(st, a, shared, ddr):
    d, Hk, cap = st["d"], st["Hk"], st["cap"]
    region = KVRegion(0, 1, Hk * cap, d, 8, HP)
    w_base = -(-region.size // 4096) * 4096
    wimg, descs = weight_image(st["wbeats"], w_base)
    mem = SharedAXI4Memory(w_base + len(wimg) + 4096,
                           ports=[dict(latency=a.latency, max_outstanding=8)] * 2,
                           bytes_per_cycle=shared)
    mem.load(w_base, wimg)
    kw = engine_kw(st, a)
    if ddr:
        store = KVStore(region)
        kvals, kexp, vvals, vexp = st["kv"]
        for g in range(Hk):
            for t in range(st["S"]):
                store.write_row(0, 0, g * cap + t, kvals[g, t].tolist(), int(kexp[g, t]))
                store.write_row(0, 1, g * cap + t, vvals[g, t].tolist(), int(vexp[g, t]))
        mem.load(0, bytes(store.image))
        eng = ComputeEngine(**kw, kv_region=region, kv_win_rows=a.block, kv_n_win=a.windows,
                            kv_dma=dict(addr_width=32, max_burst=16, max_outstanding=8))
        setup, setup_words = st["head"], st["words"]
        prog = ddr_program(st, a.windows)
    else:
        eng = ComputeEngine(**kw)
        kc, kwds, top = onchip_setup(st)
        assert top <= kw["sp_depth"]
        setup, setup_words = st["head"] + kc, st["words"] + kwds
        prog = onchip_program(st)
    prog = prog + [instr(Op.SPR, a=st["lay"].sp["H2"], n0=st["D"])]
    dut = Bench(eng, max(x["length"] for x in descs))
    res = {"count": {}, "go": False}
    n_setup = len(setup)

    async def tb_cmd(ctx):
        await StreamSource(eng.cmd).send(ctx, setup)
        while not res["go"]:
            await ctx.tick()
        await StreamSource(eng.cmd).send(ctx, prog)

    async def tb_sp(ctx):
        await StreamSource(eng.sp_in).send(ctx, [{"data": w & 0xFFFFFFFF} for w in setup_words])

    async def tb_w(ctx):
        while not res["go"]:
            await ctx.tick()
        await StreamSource(dut.rd_w.desc).send(ctx, descs)

    async def tb_wstat(ctx):
        got = await StreamSink(dut.rd_w.status).collect(ctx, len(descs))
        assert all(s["code"] == 0 for s in got), "weight DMA error"

    async def rx(ctx):
        beats = await StreamSink(eng.sp_out).collect(ctx, st["D"])
        res["out"] = [s32(b["data"]) for b in beats]
        while not res.get("done"):
            await ctx.tick()

    async def monitor(ctx):
        n, t0 = 0, None
        while True:
            await ctx.tick()
            n += 1
            assert not ctx.get(eng.halted), f"engine halted, error {ctx.get(eng.error):#x}"
            ret = ctx.get(eng.regs.retired)
            if t0 is None:
                if ret == n_setup and not ctx.get(eng.busy):
                    t0, res["go"], mem0 = n, True, (list(mem.bytes_read), list(mem.bytes_written))
                    res["setup_cycles"] = n
                continue
            i = ret - n_setup
            if i >= len(prog):
                res["cycles"] = n - t0
                res["bytes_read"] = [x - y for x, y in zip(mem.bytes_read, mem0[0])]
                res["bytes_written"] = [x - y for x, y in zip(mem.bytes_written, mem0[1])]
                res["done"] = True
                return
            op = prog[i]["op"]
            res["count"][op] = res["count"].get(op, 0) + 1

    bg = [mem.testbench(dut.rd_w.m_axi, eng.m_axi_kv if ddr else None), tb_wstat]
    run_simulation(dut, [tb_cmd, tb_sp, tb_w, rx, monitor], background=bg, vcd=False, max_cycles=3_000_000)
    c = res["count"]
    res["att"] = c.get(Op.ATT, 0) + c.get(Op.KVL, 0)
    res["att_only"] = c.get(Op.ATT, 0)
    res["kvl"] = c.get(Op.KVL, 0)
    res["gemm"] = c.get(Op.GEMM, 0)
    res["fold"] = c.get(Op.FOLD, 0)
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--heads", type=int, default=12, help="query heads (default 12: Qwen2.5-1.5B's GQA group of 6)")
    ap.add_argument("--kv-heads", type=int, default=2, help="KV heads (default 2)")
    ap.add_argument("--block", type=int, default=64, help="keys per block = per ATT job = window rows (default 64)")
    ap.add_argument("--blocks", type=int, default=4, help="blocks per KV head (default 4: context 256)")
    ap.add_argument("--latency", type=int, default=100, help="DDR read latency in cycles, both ports (default 100)")
    ap.add_argument("--shared", type=int, nargs="+", default=[32, 16],
                    help="shared DDR budgets in B/cycle to measure; each port is at most 16; the last is "
                         "the headline (default 32 16)")
    ap.add_argument("--windows", type=int, default=2, help="staging windows (default 2)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    st = make_step(a)
    st["block"] = a.block
    keys = st["Hk"] * a.blocks * a.block
    print(f"decode step of one layer: micro model with {a.heads} heads / {a.kv_heads} KV heads, d = {st['d']}, "
          f"hidden {st['D']}, context {st['cap']} ({a.blocks} blocks of {a.block}); {len(st['jobs'])} ATT jobs of "
          f"{st['rep']} query rows x {a.block} keys ({keys} keys); weights {len(st['wbeats']) * W_BEAT} B; "
          f"DDR latency {a.latency} cycles, {a.windows} windows")
    print(f"{'side':<8}{'shared B/c':>11}{'step':>8}{'attn':>8}{'/key':>7}{'ATT':>7}{'KVL':>6}{'GEMM':>7}"
          f"{'FOLD':>6}{'w B':>8}{'kv B rd':>9}{'kv B wr':>8}{'attn %':>8}{'step %':>8}")
    ref_cache = {}
    line = None
    for shared in a.shared:
        key = shared if shared < HP else None      # the on-chip side only sees the weight port
        if key not in ref_cache:
            ref = run(st, a, shared, ddr=False)
            if ref["out"] != st["exp"]:
                raise SystemExit("on-chip layer output differs from golden IntModel")
            ref_cache[key] = ref
            print(f"{'on chip':<8}{shared:>11}{ref['cycles']:>8}{ref['att']:>8}{ref['att'] / keys:>7.2f}"
                  f"{ref['att_only']:>7}{ref['kvl']:>6}{ref['gemm']:>7}{ref['fold']:>6}{ref['bytes_read'][0]:>8}"
                  f"{ref['bytes_read'][1]:>9}{ref['bytes_written'][1]:>8}{'':>8}{'':>8}", flush=True)
        ref = ref_cache[key]
        got = run(st, a, shared, ddr=True)
        if got["out"] != st["exp"]:
            raise SystemExit("DDR layer output differs from golden IntModel")
        if got["out"] != ref["out"]:
            raise SystemExit("DDR and on-chip layer outputs differ")
        pct = 100.0 * ref["att"] / got["att"]
        spct = 100.0 * ref["cycles"] / got["cycles"]
        print(f"{'DDR':<8}{shared:>11}{got['cycles']:>8}{got['att']:>8}{got['att'] / keys:>7.2f}"
              f"{got['att_only']:>7}{got['kvl']:>6}{got['gemm']:>7}{got['fold']:>6}{got['bytes_read'][0]:>8}"
              f"{got['bytes_read'][1]:>9}{got['bytes_written'][1]:>8}{pct:>8.1f}{spct:>8.1f}", flush=True)
        line = (f"{pct:.1f} % attention speed (cycles per key, ATT+KVL) with K/V from DDR vs on chip, weights "
                f"streaming from the same DDR (shared {shared} B/cycle, {a.latency}-cycle latency, {a.windows} "
                f"windows, d={st['d']}, {st['rep']} rows x {a.block} keys per job, {len(st['jobs'])} jobs); "
                f"whole step {spct:.1f} %; outputs equal golden")
    print(line)


if __name__ == "__main__":
    main()
