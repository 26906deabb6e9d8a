#!/usr/bin/env python3
"""Attention cycles per key with K/V from DDR while the weights stream from the same DDR, against
the same layer with K/V on chip. Amaranth simulator, small shapes.

Both sides run the same decode step of one decoder layer as the one compiler emits it
(``host.compiler``: node 0's stream of a one-node program, ``mcf_fpga/host/executors/bare_engine.py``
``solo_program``, prompt of ``cap - 1`` tokens in chunks of one block, the step's records served
by its ``EngineHost``): RMSNorm, the Q/K/V GEMMs, RoPE, KVW of the new token into the prompt's
last block, the two-phase flat merge (ATT per (KV head, block) and FOLD for the local max, its
EMIT and the all-reduced max back -- a one-member all-reduce returns the node's own words --,
the same jobs rescaled to that max for the sum, EMIT and back), the final FOLD, the
O/gate/up/down GEMMs and the head's logits (SPR). The memory is one
:class:`sim.SharedAXI4Memory` (the PS DDR controller: one image, one shared budget
``--shared`` B/cycle, round-robin grant):

* port A (both sides): the weight tiles, read by a ``hdl.dma.DMAReader`` (128-bit, bursts of 16,
  8 outstanding, one descriptor per tile, all posted when the step starts) whose HP beats are
  gathered two by two into the engine's 256-bit ``w_in`` -- how ``mcf_fpga/boards/node_dma.py`` feeds
  ``w_in`` from HP2. The weights take the same path on both sides, so the GEMMs see the same
  latency and rate, and only the K/V location differs; feeding ``w_in`` from a testbench at a
  fixed rate would leave out exactly the contention this bench is about.
* port B (DDR side only): the engine's ``m_axi_kv`` (``ComputeEngine(kv_region=...)``); the K/V of
  the earlier positions are in the KV region (in the slots golden's directory gave the prompt's
  units, at the compiler's rows), the new token's K/V row is written by the step's KVW; the KVLs
  are the compiler's (``host.executors.kv_ddr.DdrKV``: each job's window loaded ahead of its ATT).
* on chip: the same engine without the region; the earlier K/V are written to its K/V memories
  (the compiler's rows) by KVW before the timed step (not counted); port B is idle.

Counted, the same way on both sides, from the cycle the setup is done (the step's first
instruction is sent) -- "attention cycles": the cycles in which the engine's RETIRED count equals
the index of an ATT or KVL instruction of the step (that instruction is being fetched, waits for
its window or the streamer, computes, or writes its last output); "keys": the keys of all ATT jobs
(KV heads x blocks x block length, in both merge phases). "Step": until the last instruction (the
SPR of the logits) retired. Checked: the logits of both sides equal golden ``IntModel``'s decode
step bit for bit.

The last line prints the DDR/on-chip attention percentage first (for the last ``--shared``).
"""
import argparse


import torch                                                          # noqa: E402
from amaranth import Module, Signal                                   # noqa: E402
from amaranth.lib import wiring                                       # noqa: E402

from mcf_fpga.golden.config import get_config                                  # noqa: E402
from mcf_fpga.golden.int_model import IntModel, quantize_model                 # noqa: E402
from mcf_fpga.spec.kvregion import KVRegion  # noqa: E402
from mcf_fpga.golden.kvstore import KVStore  # noqa: E402
from mcf_fpga.golden.model import random_weights                               # noqa: E402
from mcf_fpga.hdl.compute.engine import ComputeEngine  # noqa: E402
from mcf_fpga.spec.instr import EngineOpcode, KvwFlags, SpwFlags  # noqa: E402
from mcf_fpga.hdl.compute.program import instr                                 # noqa: E402
from mcf_fpga.hdl.dma import DMAReader  # noqa: E402
from mcf_fpga.sim import SharedAXI4Memory                                  # noqa: E402
from mcf_fpga.sim.kit import StreamSource, StreamSink, run_simulation      # noqa: E402
from mcf_fpga.host import compiler as C                                        # noqa: E402
from mcf_fpga.host.executors.bare_engine import EngineHost, compile_solo, golden_logits, solo_program  # noqa: E402

PN, PK = 4, 16
W_BEAT = PN * PK * 4 // 8          # bytes of one w_in beat (32: two HP beats)
HP = 16


# ------------------------------------------------------------------ the step

def make_step(a):
    """Model, golden, the program (prompt of cap - 1 tokens, one decode step at position cap - 1:
    every block full) and the index of the step's first record."""
    cfg = get_config("micro").replace(num_layers=1, num_heads=a.heads, num_kv_heads=a.kv_heads)
    d, Hk, rep = cfg.head_dim, cfg.num_kv_heads, cfg.gqa_ratio
    cap = a.blocks * a.block
    S = cap - 1
    qm = quantize_model(random_weights(cfg, seed=a.seed), kv_bits=8, block=a.block)
    im = IntModel(qm)
    prompt = torch.randint(0, cfg.vocab_size, (S,), generator=torch.Generator().manual_seed(a.seed)).tolist()
    cache = im.new_cache()
    im.forward(prompt, cache)
    kv = (cache.k[0][0].clone(), cache.k[0][1].clone(), cache.v[0][0].clone(), cache.v[0][1].clone())
    exp = golden_logits(im, prompt, a.block, 2)
    prog = solo_program(cfg, S, 2, chunk=a.block, block=a.block, kv_bits=8)
    return dict(cfg=cfg, d=d, Hk=Hk, rep=rep, cap=cap, S=S, kv=kv, im=im, prompt=prompt, prog=prog,
                token=int(torch.argmax(exp[0][-1])), exp=exp[1], D=cfg.hidden_size)


def step_start(stream) -> int:
    """Index of the decode step's first record (after the ``prefill_done`` mark)."""
    return next(i for i, r in enumerate(stream) if type(r) is C.Mark) + 1


def held_rows(comp, slots):
    """(flat row of the unit's first row, head stride, t0, t1) of every prompt unit, with the
    slots golden's directory gave them."""
    out = []
    for (layer, unit), u in sorted(comp.units.items()):
        row = u["row"]
        out.append(((slots[(row.layer, row.unit)] * comp.slot_rows + row.off), u["stride"], u["t0"], u["t1"]))
    return out


def onchip_setup(st, rows, base):
    """SPW (unpacked) of the earlier K/V and their exponents at scratchpad ``base``, KVW of them to
    the K/V memories at the compiler's rows."""
    d, Hk = st["d"], st["Hk"]
    ebase = 0x800                                          # EM rows above the step's
    kvals, kexp, vvals, vexp = st["kv"]
    cmds, words = [], []
    for row0, stride, t0, t1 in rows:
        n = t1 - t0
        for v, (vals, exps) in ((False, (kvals, kexp)), (True, (vvals, vexp))):
            flat = vals[:, t0:t1].transpose(0, 1).reshape(-1).tolist()      # token-major: (t, g) rows
            packed = [sum((v & 0xFF) << (8 * k) for k, v in enumerate(flat[i:i + 4])) for i in range(0, len(flat), 4)]
            cmds.append(instr(EngineOpcode.SPW, flags=SpwFlags(packed=True), bits=8, dst=base, n0=len(flat)))
            words += packed
            es = exps[:, t0:t1].transpose(0, 1).reshape(-1).tolist()
            cmds.append(instr(EngineOpcode.SPW, flags=SpwFlags(em=True), dst=ebase, n0=len(es)))
            words += es
            cmds.append(instr(EngineOpcode.KVW, flags=KvwFlags(v=v), a=base, so=Hk * d, len=d, n0=n, n1=Hk, ea=ebase, eo=Hk, ei=1,
                              kvb=row0, kvs=stride))
    return cmds, words


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
    """The engine both sides are built with and the whole program is compiled for: the prompt's
    chunks of one block (``t_max``, ``nq_max``; their scratch and exponents need the large
    scratchpad and exponent memory, though only the decode step runs), the prompt's units and a
    decode block in the KV memory (on chip)."""
    return dict(pn=PN, pk=PK, group=32, kc_max=12, x_depth=64, t_max=a.block, d_max=256, head_dim=st["d"],
                nq_max=a.block * st["rep"], kv_depth=st["Hk"] * (st["cap"] + a.block), nb_max=max(8, a.blocks),
                z_max=256, blk_max=a.block, sp_depth=1 << 19, em_depth=1 << 13)


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
    region = KVRegion(0, a.blocks + 2, Hk * a.block, d, 8, HP)      # the prompt's units + staging
    kw = engine_kw(st, a)
    if ddr:
        kw.update(kv_region=region, kv_win_rows=a.block, kv_n_win=a.windows,
                  kv_dma=dict(addr_width=32, max_burst=16, max_outstanding=8))
    comp, ncfg = compile_solo(st["prog"], kw)
    first = step_start(comp.stream)
    eng = ComputeEngine(**kw)
    res = {"count": {}, "go": False}
    host = EngineHost(eng, comp, st["im"], st["prompt"], ncfg, seed=a.seed, ready=1.0, first=first,
                      weights=False, hold=lambda: not res["go"])
    host.drv.req_tokens(0).append(st["token"])         # token 1, from the prefill's logits (golden's)
    wbeats = [bt for r in comp.stream[first:] if type(r) is C.Weights
              for tile in host.drv.weight_tiles((r.layer, r.name, r.rows)) for bt in tile]
    w_base = -(-region.size // 4096) * 4096
    wimg, descs = weight_image(wbeats, w_base)
    mem = SharedAXI4Memory(w_base + len(wimg) + 4096,
                           ports=[dict(latency=a.latency, max_outstanding=8)] * 2,
                           bytes_per_cycle=shared)
    mem.load(w_base, wimg)
    rows = held_rows(comp, host.drv.slots)
    kvals, kexp, vvals, vexp = st["kv"]
    if ddr:
        store = KVStore(region)
        R = region.slot_rows
        for row0, stride, t0, t1 in rows:
            for g in range(Hk):
                for t in range(t0, t1):
                    f = row0 + g * stride + t - t0
                    store.write_row(f // R, 0, f % R, kvals[g, t].tolist(), int(kexp[g, t]))
                    store.write_row(f // R, 1, f % R, vvals[g, t].tolist(), int(vexp[g, t]))
        mem.load(0, bytes(store.image))
        setup, setup_words = [], []
    else:
        setup, setup_words = onchip_setup(st, rows, 1 << 16)
    host.cmd.extend(setup)
    host.sp.extend({"data": w & 0xFFFFFFFF} for w in setup_words)
    prog = [r.fields for r in comp.stream[first:] if type(r) is C.Ins]
    dut = Bench(eng, max(x["length"] for x in descs))
    n_setup = len(setup)
    fg, bg = host.testbenches()

    async def tb_w(ctx):
        while not res["go"]:
            await ctx.tick()
        await StreamSource(dut.rd_w.desc).send(ctx, descs)

    async def tb_wstat(ctx):
        got = await StreamSink(dut.rd_w.status).collect(ctx, len(descs))
        assert all(s["code"] == 0 for s in got), "weight DMA error"

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
                return
            op = prog[i]["op"]
            res["count"][op] = res["count"].get(op, 0) + 1

    bg += [mem.testbench(dut.rd_w.m_axi, eng.m_axi_kv if ddr else None), tb_wstat]
    run_simulation(dut, fg + [tb_w, monitor], background=bg, vcd=False, max_cycles=3_000_000)
    assert host.error == 0, f"engine error {host.error:#x}"
    c = res["count"]
    res["out"] = host.decode[0].flatten().tolist()
    res["att"] = c.get(EngineOpcode.ATT, 0) + c.get(EngineOpcode.KVL, 0)
    res["att_only"] = c.get(EngineOpcode.ATT, 0)
    res["kvl"] = c.get(EngineOpcode.KVL, 0)
    res["gemm"] = c.get(EngineOpcode.GEMM, 0)
    res["fold"] = c.get(EngineOpcode.FOLD, 0)
    res["jobs"] = sum(1 for f in prog if f["op"] == EngineOpcode.ATT)
    res["wbytes"] = len(wimg)
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
    jobs = 2 * st["Hk"] * a.blocks                 # ATT jobs: (KV head, block), in both merge phases
    keys = jobs * a.block
    print(f"decode step of one layer: micro model with {a.heads} heads / {a.kv_heads} KV heads, d = {st['d']}, "
          f"hidden {st['D']}, context {st['cap']} ({a.blocks} blocks of {a.block}); {jobs} ATT jobs of "
          f"{st['rep']} query rows x {a.block} keys ({keys} keys); "
          f"DDR latency {a.latency} cycles, {a.windows} windows")
    print(f"{'side':<8}{'shared B/c':>11}{'step':>8}{'attn':>8}{'/key':>7}{'ATT':>7}{'KVL':>6}{'GEMM':>7}"
          f"{'FOLD':>6}{'w B':>8}{'kv B rd':>9}{'kv B wr':>8}{'attn %':>8}{'step %':>8}")
    ref_cache = {}
    line = None
    for shared in a.shared:
        key = shared if shared < HP else None      # the on-chip side only sees the weight port
        if key not in ref_cache:
            ref = run(st, a, shared, ddr=False)
            if ref["out"] != st["exp"].flatten().tolist():
                raise SystemExit("on-chip logits differ from golden IntModel")
            if ref["jobs"] != jobs:
                raise SystemExit(f"the compiled step has {ref['jobs']} ATT jobs, expected {jobs}")
            ref_cache[key] = ref
            print(f"{'on chip':<8}{shared:>11}{ref['cycles']:>8}{ref['att']:>8}{ref['att'] / keys:>7.2f}"
                  f"{ref['att_only']:>7}{ref['kvl']:>6}{ref['gemm']:>7}{ref['fold']:>6}{ref['bytes_read'][0]:>8}"
                  f"{ref['bytes_read'][1]:>9}{ref['bytes_written'][1]:>8}{'':>8}{'':>8}", flush=True)
        ref = ref_cache[key]
        got = run(st, a, shared, ddr=True)
        if got["out"] != st["exp"].flatten().tolist():
            raise SystemExit("DDR logits differ from golden IntModel")
        pct = 100.0 * ref["att"] / got["att"]
        spct = 100.0 * ref["cycles"] / got["cycles"]
        print(f"{'DDR':<8}{shared:>11}{got['cycles']:>8}{got['att']:>8}{got['att'] / keys:>7.2f}"
              f"{got['att_only']:>7}{got['kvl']:>6}{got['gemm']:>7}{got['fold']:>6}{got['bytes_read'][0]:>8}"
              f"{got['bytes_read'][1]:>9}{got['bytes_written'][1]:>8}{pct:>8.1f}{spct:>8.1f}", flush=True)
        line = (f"{pct:.1f} % attention speed (cycles per key, ATT+KVL) with K/V from DDR vs on chip, weights "
                f"streaming from the same DDR (shared {shared} B/cycle, {a.latency}-cycle latency, {a.windows} "
                f"windows, d={st['d']}, {st['rep']} rows x {a.block} keys per job, {jobs} jobs); "
                f"whole step {spct:.1f} %; outputs equal golden")
    print(line)


if __name__ == "__main__":
    main()
