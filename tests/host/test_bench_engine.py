"""scripts/bench_engine.py: the compute-only bound split per instruction kind adds up to the bound,
the smoke run (``--quick``) prints the bound first on its last line and per-kind shares that sum
to ~100 %, and the resource record says per unit whether this tree still generates its Verilog."""
import importlib.util
import json
import re
from pathlib import Path

import pytest

from mcf_fpga.golden.config import get_config
from mcf_fpga.host import perfmodel as pm
from mcf_fpga.host.scenario import build_programs

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("bench_engine", ROOT / "scripts" / "bench_engine.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def be():
    return _script()


@pytest.mark.parametrize("kv", [False, True])
def test_kinds_add_up_to_the_compute_only_bound(be, kv):
    P = pm.load_params()
    if kv:
        P = pm.kv_in_ddr(P)
    cfg = get_config("micro").replace(num_layers=1)
    prog = build_programs(cfg, nodes=2, topology="ring", prompt_len=32, max_new_tokens=1, schedules=["mars"],
                          chunk=16, block=16)[0]["mars"]
    pr = pm.predict(prog, P, chunk=1)
    kinds = be.kind_breakdown(pr, P)
    assert sum(v["cycles"] for v in kinds.values()) == pytest.approx(pm.compute_only(pr), rel=1e-9)
    assert "emit" not in kinds                        # communication is not in the bound
    assert set(kinds) >= {"gemm", "att"}
    # counted instructions: every compute instruction of every node, none of the communication
    assert sum(v["count"] for v in kinds.values()) * 2 == pytest.approx(
        sum(n for shapes in pr.instr_shapes for (_k, _s, comm), n in shapes.items() if not comm))
    for k, v in kinds.items():                        # a unit never beats its own peak
        assert v["floor"] <= v["cycles"] * 1.001, k
        if v["split"]:                                # the model's features add up to the kind's cycles
            assert sum(v["split"].values()) <= v["cycles"] * (1 + 1e-9), k


def test_quick_run_last_line_and_shares(be, tmp_path, capsys):
    be.main(["--quick", "--resources", str(tmp_path / "none.json")])
    out = capsys.readouterr().out.strip().splitlines()
    m = re.fullmatch(r"([0-9.e-]+) s compute-only bound, 64-token prefill on 4 simulated-engine nodes "
                     r"\((mars|ring|zigzag), the least of .*\)", out[-1])
    assert m, out[-1]
    total = next(line for line in out if line.startswith("total "))
    assert float(total.split()[2]) == pytest.approx(100.0, abs=0.2)
    table = out[out.index(next(line for line in out if line.startswith("kind "))) + 1:out.index(total)]
    assert sum(float(line.split()[2]) for line in table) == pytest.approx(100.0, abs=0.5)
    bound = next(line for line in out if line.startswith("Where the engine's time goes"))
    assert f"{m.group(2)}, compute-only bound" in bound
    assert sum(line.startswith("target: ") for line in out) == 5
    assert any("not measured" in line for line in out)


def test_resource_record_current_stale_not_measured(be, tmp_path, capsys):
    path = tmp_path / "rec.json"
    _mod, text = be.unit_verilog("vector")
    sha = be.verilog_sha256(text)
    used = {"LUT": 1000, "FF": 2000, "DSP": 3, "BRAM36": 1.5, "URAM": 0}
    be.save_unit(path, "vector", dict(measured=True, used=used, verilog_sha256=sha, commit="abc", date="d", seconds=1))
    be.save_unit(path, "engine", dict(measured=False, reason="did not finish", verilog_sha256=sha))
    rec = json.loads(path.read_text())
    assert set(rec["units"]) == {"vector", "engine"}
    assert be.unit_status("vector", rec["units"]["vector"]) == ("current", sha)
    assert be.unit_status("vector", dict(rec["units"]["vector"], verilog_sha256="0" * 64))[0] == "stale"
    assert be.unit_status("engine", rec["units"]["engine"])[0] == "not measured"
    assert be.unit_status("attention", None)[0] == "not measured"
    assert be.print_resources(rec, False, print) is None          # no measured engine: no node estimate
    measured = dict(measured=True, used=used, commit="abc", date="d", seconds=1)
    rec["units"]["engine"] = dict(measured, comparable=False, note="another Yosys")
    capsys.readouterr()
    assert be.print_resources(rec, False, print) is None          # measured, but not comparable: none either
    assert "not used for the node estimate (another Yosys than the units'): another Yosys" in capsys.readouterr().out
    rec["units"]["engine"] = measured
    assert be.print_resources(rec, False, print) == measured
    assert be.node_fits(None)[0] is False
    big = dict(used, LUT=80_000)
    assert be.node_fits(be.node_estimate(big))[0] is False         # 107k LUT: over 90 %
    assert be.node_fits(be.node_estimate(used))[0] is True


def test_pair_spw_floor_is_two_words_a_cycle(be):
    """An SPW the model halves (``spw_pairs``, an even count to an even address) has a floor of
    two words a cycle, so its utilisation stays at most 100 %; the others one."""
    e = {"spw_pairs": True}
    assert be.floor_cycles("spw", {"n0": 96, "pair": 1}, e) == (48, "2 words/cycle")
    assert be.floor_cycles("spw", {"n0": 96, "pair": 0}, e) == (96, "1 word/cycle")
    assert be.floor_cycles("spw", {"n0": 96, "pair": 1}, {}) == (96, "1 word/cycle")


def test_fold_ports_halve_the_partial_reads(be):
    """The model of ``ComputeEngine(fold_ports=2)`` (the KR260 preset's FOLD): FOLD's
    read feature and floor are half of one reader's; the halving stands on the calibration's ~1
    cycle per partial word read (the RTL's two-reader saving is checked in test_engine_isa)."""
    e = dict(head_dim=128)
    s = {"rows": 4, "parts": 24, "final": 0}
    one = pm.feature("fold", "partw", s, e)
    two = pm.feature("fold", "partw", s, dict(e, fold_ports=2))
    assert one == 24 * 260 and two == one / 2
    assert be.floor_cycles("fold", s, dict(e, fold_ports=2))[0] == two
    assert 0.9 < pm.load_params()["instr"]["fold"]["partw"] < 1.1
    g = {"T": 8, "K": 64, "N": 64, "reuse": 0}
    e = dict(pn=4, pk=16, group=32)
    assert pm.feature("gemm", "loadx", g, dict(e, loadx_ports=2)) == pm.feature("gemm", "loadx", g, e) / 2 == 8 * 68 / 2


def test_att_rows_of_the_pipelined_unit(be):
    """The model of ``AttentionUnit(pipelined=True)`` (the KR260 preset's): a row paces at the
    longer of the unit's row (``attention.row_cycles``, checked against the RTL in test_attention)
    and its 2d+4 output words. By hand at d = 128 (d/L = 16, the scorer's latency 1 one-stage, 9
    pipelined; 260 partial words): 256 keys -> S's row max(256 + 1 + 3, 16 + 7) = 260 one-stage,
    max(256 + 9 + 5, 16 + 7 + 11) = 270 pipelined; 64 keys -> 260 both (the output words); acc at
    256 keys -> 260, 270 (S still bounds); acc at 4 keys -> the chain 23 + 18 = 41, 34 + 24 = 58
    < 260: 260 both; two keys per cycle at 256 keys -> 128 + 14 = 142 < 260: 260."""
    e = dict(head_dim=128)
    p = dict(e, att_pipelined=True)
    row = lambda s, eng: pm.feature("att", "rowpace", dict(s, rows=1), eng)
    assert (row({"keys": 256}, e), row({"keys": 256}, p)) == (260, 270)
    assert (row({"keys": 64}, e), row({"keys": 64}, p)) == (260, 260)
    assert (row({"keys": 256, "acc": 1}, e), row({"keys": 256, "acc": 1}, p)) == (260, 270)
    assert (row({"keys": 4, "acc": 1}, e), row({"keys": 4, "acc": 1}, p)) == (260, 260)
    assert row({"keys": 256}, dict(p, att_keys=2)) == 260
    assert pm.feature("att", "rowpace", {"rows": 96, "keys": 256}, p) == 96 * 270
    from mcf_fpga.hdl.compute.attention import row_cycles
    assert (row_cycles(128, 4, acc=True), row_cycles(128, 4, pipelined=True, acc=True)) == (41, 58)
    assert row_cycles(128, 256, keys_per_cycle=2, pipelined=True) == 142
    # two rows per cycle: a pair of 256-key rows computes in 271 cycles (S's row + its second q
    # read) but emits 2 x 260 words: 520 a pair, 260 a row; at 1024 keys the pair's 1039 bound it
    pr = dict(p, att_rows=2)
    assert row_cycles(128, 256, pipelined=True, rows_per_cycle=2) == 271
    assert pm.feature("att", "rowpace", {"rows": 96, "keys": 256}, pr) == 48 * 520
    assert pm.feature("att", "rowpace", {"rows": 95, "keys": 1024}, pr) == 48 * 1039
    assert pm.feature("att", "accfirst", {"rows": 2, "keys": 256, "acc": 1}, pr) == 2 * 260 - 256
    assert be.floor_cycles("att", {"rows": 96, "keys": 256}, pr)[0] == 96 * 256 / 2


def test_engine_figure_whole_flattened_else_by_parts(be, capsys):
    """The node estimate's engine: the whole engine if it was synthesized flattened; else glue +
    attention + GEMM + vector (each flattened alone) when all four are measured, the hierarchical
    whole said as the upper bound; else the hierarchical whole; None without any."""
    R = ("LUT", "FF", "DSP", "BRAM36", "URAM")
    u = lambda *v: dict(zip(R, v))                                    # noqa: E731
    parts = {"glue": u(4_000, 9_000, 0, 2, 0), "attention": u(40_000, 30_000, 320, 23.5, 30),
             "gemm": u(20_000, 7_000, 289, 30.5, 11), "vector": u(9_000, 900, 24, 40.5, 0)}
    hier = dict(measured=True, hierarchical=True, used=u(95_000, 53_000, 653, 96.5, 41))
    rec = {"units": {n: dict(measured=True, used=v) for n, v in parts.items() if n != "glue"}}
    assert be.engine_figure(rec, None, False, print) is None
    assert be.engine_figure(rec, hier, False, print) == hier["used"]          # parts incomplete: the whole
    rec["units"]["glue"] = dict(measured=True, used=parts["glue"])
    capsys.readouterr()
    got = be.engine_figure(rec, hier, False, print)
    assert got == {r: sum(p[r] for p in parts.values()) for r in R} and got["LUT"] == 73_000
    out = capsys.readouterr().out
    assert "engine by parts" in out and "upper bound: LUT 95000" in out
    flat = dict(hier, hierarchical=False)
    assert be.engine_figure(rec, flat, False, print) == flat["used"]          # a flattened whole wins
    rec["units"]["gemm"]["measured"] = False
    assert be.engine_by_parts(rec, False) is None


def test_kr260_program_moves_pairs_at_even_addresses(be):
    """The paired scratchpad (``sp_pairs``) moves two words a cycle only at even addresses (else
    one): in the KR260 program (Qwen2.5-1.5B, 2 layers, 4 nodes, 1,024 tokens, MARS, K/V in DDR)
    every LOAD_X (its activations ``a``, ``len``), every ADD / SWIGLU (``a``, ``b``, ``dst``,
    ``len``), every QUANT (``a``, ``dst``, ``len``: ``quant_pairs``) and every RMSNORM (the same:
    ``rms_pairs``) is even, so the model's
    halved ``loadx`` / ``elems`` describe what the engine does."""
    import argparse
    import collections
    from mcf_fpga.hdl.compute.vector import VecOp
    from mcf_fpga.host.compiler import Ins, compile_program
    from mcf_fpga.spec.instr import EngineOpcode
    bp = be.bench_paper()
    cfg, _engine, hw, P, _z = bp.setup(argparse.Namespace(quick=False, link="sfp10g", kv="ddr"), pm.load_params(None))
    prog = bp.build(cfg.replace(num_layers=2), hw, nodes=4, prompt_len=1024, max_new_tokens=2, schedules=("mars",),
                    chunk=256, block=256)["mars"]
    comps = compile_program(prog, pm.model_node_config(prog, P), rid_max=collections.defaultdict(int),
                            rid_sum=collections.defaultdict(int))
    seen = collections.Counter()
    for comp in comps:
        for ins in comp.stream:
            if not isinstance(ins, Ins):
                continue
            f = ins.fields
            if f["op"] == EngineOpcode.GEMM and not f["flags"] & 1:
                keys = ("a", "len")
            elif f["op"] == EngineOpcode.VEC and f["sub"] in (VecOp.ADD, VecOp.SWIGLU):
                keys = ("a", "b", "dst", "len")
            elif f["op"] == EngineOpcode.VEC and f["sub"] in (VecOp.QUANT, VecOp.RMSNORM):
                keys = ("a", "dst", "len")
            else:
                continue
            seen[(f["op"], f["sub"] if f["op"] == EngineOpcode.VEC else 0)] += 1
            assert all(f[k] % 2 == 0 for k in keys), {k: f[k] for k in keys}
    assert seen[(EngineOpcode.GEMM, 0)] >= 20, seen
    assert all(seen[(EngineOpcode.VEC, v)] >= 4 for v in (VecOp.ADD, VecOp.SWIGLU, VecOp.QUANT, VecOp.RMSNORM)), seen


def test_clock_line_scales_the_figures_to_the_timing_estimate(be, tmp_path):
    """At the whole engine's estimated clock (its slowest path: 8 ns, 125 MHz) the bound grows and
    decode shrinks by 200/125; a path faster than 5 ns does not raise the figures above 200 MHz;
    without a record the line says so."""
    rec = tmp_path / "t.json"
    rec.write_text(json.dumps({"kr260": {"engine": {"commit": "abc1234" + "0" * 33, "verilog_sha256": "x",
                                                    "paths": [{"delay_ns": 8.0}, {"delay_ns": 7.0}]}}}))
    line = be.clock_line(2e9, 40.0, False, rec)
    assert "8 ns, ~125 MHz" in line and "abc1234, not checked" in line
    assert "the bound is 16 s" in line and "decode 25.00 tokens/s" in line
    rec.write_text(json.dumps({"kr260": {"engine": {"commit": "c", "paths": [{"delay_ns": 4.0}]}}}))
    assert "the bound is 10 s" in be.clock_line(2e9, 40.0, False, rec)
    assert "no timing estimate" in be.clock_line(2e9, 40.0, False, tmp_path / "none.json")
