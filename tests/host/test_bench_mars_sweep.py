"""scripts/bench_mars_sweep.py's bookkeeping on the micro model (``--quick``, one point): a
resumed run computes nothing it already has, a row of another stamp is recomputed and the file
as it was is kept in ``.bak``, and ``--table`` prints the CSV's ratios without computing."""
import csv
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POINT = ["--quick", "--nodes", "2", "--prompts", "64", "--speedups", "1", "--links", "sfp10g"]


def _script():
    spec = importlib.util.spec_from_file_location("bench_mars_sweep", ROOT / "scripts" / "bench_mars_sweep.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rows(path):
    """The CSV's rows without their wall-clock columns."""
    with open(path, newline="") as f:
        return [{k: v for k, v in r.items() if k not in ("search_s", "point_s")} for r in csv.DictReader(f)]


def test_resume_backup_and_table(tmp_path, capsys):
    ms = _script()
    out = ["--out", str(tmp_path)]
    path = tmp_path / "mars_sweep_quick.csv"
    ms.main(POINT + out)
    first = _rows(path)
    assert len(first) == 1 and first[0]["stamp"] == ms.sweep_stamp()
    assert float(first[0]["best_baseline_over_mars"]) >= 1.0
    assert (tmp_path / "mars_sweep_quick.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    capsys.readouterr()

    ms.main(POINT + out + ["--resume"])
    assert "1 already in" in capsys.readouterr().out
    assert _rows(path) == first and not (tmp_path / "mars_sweep_quick.csv.bak").exists()

    # a row of another stamp is stale: recomputed, and the old file kept
    stale = dict(first[0], stamp="0" * 16, mars_cycles="1", search_s="0", point_s="0")
    ms.write_rows(str(path), {ms.key(stale): stale})
    ms.main(POINT + out + ["--resume"])
    text = capsys.readouterr().out
    assert "0 already in" in text and ".bak" in text
    assert _rows(path) == first
    assert _rows(tmp_path / "mars_sweep_quick.csv.bak") == [dict(first[0], stamp="0" * 16, mars_cycles="1")]

    ms.main(POINT + out + ["--table"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| link | speed-up | prompt | N=2 |"
    assert lines[2].startswith("| 10 Gb/s | x1 | 64 | " + f"{float(first[0]['best_baseline_over_mars']):.3f}")
    assert lines[-1].startswith("worst best-baseline/MARS")


def test_stamp_follows_the_refit_figures_not_its_provenance(tmp_path, monkeypatch):
    """A KR260 refit re-measured on a structurally changed node (new commit, Verilog hash, time;
    least-squares noise in the last bits) keeps the sweep's stamp; a changed coefficient does not."""
    import copy
    import json
    ms = _script()
    src = json.loads(Path(ms.pm.KR260_CALIBRATION).read_text())
    path = tmp_path / "perf_kr260.json"
    monkeypatch.setattr(ms.pm, "KR260_CALIBRATION", str(path))

    def stamp(d):
        path.write_text(json.dumps(d))
        return ms.sweep_stamp()
    base = stamp(src)
    assert stamp(dict(src, rtl_commit="0" * 7, seconds=1, source_key="x", verilog_sha256="0" * 64)) == base
    noisy, moved = copy.deepcopy(src), copy.deepcopy(src)
    one = src["instr"]["gemm"]["one"]
    noisy["instr"]["gemm"]["one"] = one * (1 + 1e-14)
    moved["instr"]["gemm"]["one"] = one + 1.0
    assert stamp(noisy) == base
    assert stamp(moved) != base
    assert stamp(dict(src, node_config=src["node_config"] + " ")) != base
