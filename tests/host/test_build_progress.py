"""host.build_progress and the Verilator build's reports (sim.build_report): a build that is
not cached says so in a line, shows its own bar over the C++ objects, and says when it is done;
a cached build says nothing. Verilator is replaced by a script that writes the objects slowly."""
import io

import pytest

import mcf_fpga.sim.verilator as vl
from mcf_fpga.sim.build_report import set_build_reporter
from mcf_fpga.host.build_progress import BuildProgress
from mcf_fpga.host.cli import main
from tests.sim.fake_verilator import install

# writes 4 generated C++ files, then their objects (and the runtime's) one by one, then the library
FAKE = """#!/bin/sh
mdir=""
while [ $# -gt 0 ]; do [ "$1" = "--Mdir" ] && mdir="$2"; shift; done
mkdir -p "$mdir"
for i in 1 2 3 4; do echo "// gen" > "$mdir/Vtop_$i.cpp"; done
for i in 1 2 3 4 5 6 7; do sleep 0.4; echo o > "$mdir/obj$i.o"; done
echo lib > "$mdir/libmcfsim.so"
"""


@pytest.fixture
def fake_verilator(tmp_path, monkeypatch):
    install(tmp_path, monkeypatch, FAKE)


def test_uncached_build_reports_its_phases_in_order(fake_verilator):
    seen = []
    prev = set_build_reporter(lambda phase, done, total: seen.append((phase, done, total)))
    try:
        vl.build_from_sources("module top(); endmodule\n", "// harness\n")
        n_first = len(seen)
        vl.build_from_sources("module top(); endmodule\n", "// harness\n")      # now cached
    finally:
        set_build_reporter(prev)
    assert len(seen) == n_first, "a cached build must not report"
    phases = [p for p, _, _ in seen]
    assert phases[0] == "verilate" and phases[-1] == "done"
    compile_ = [(d, t) for p, d, t in seen if p == "compile"]
    assert compile_, seen
    assert all(0 <= d <= t for d, t in compile_) and all(t >= 4 + 3 for _, t in compile_)
    assert [d for d, _ in compile_] == sorted(d for d, _ in compile_)        # never goes backwards


def test_build_progress_prints_lines_and_restores_the_reporter(fake_verilator):
    out = io.StringIO()
    with BuildProgress("run", bar=True, stream=out) as bp:
        vl.build_from_sources("module top(); endmodule // 2\n", "// harness\n")
        from mcf_fpga.sim import build_report
        assert build_report._reporter is bp
    from mcf_fpga.sim import build_report
    assert build_report._reporter is None
    text = out.getvalue()
    assert "mcf run: building the Verilator model" in text and str(vl.cache_root()) in text
    assert "verilator C++" in text                          # its own bar
    assert text.rstrip().endswith("mcf run: Verilator model built")


def test_no_bar_with_json_or_no_progress(fake_verilator):
    out = io.StringIO()
    with BuildProgress("run", bar=False, stream=out):
        vl.build_from_sources("module top(); endmodule // 3\n", "// harness\n")
    lines = out.getvalue().splitlines()
    assert lines == [f"mcf run: building the Verilator model: the first run of this configuration takes "
                     f"minutes; it is cached under {vl.cache_root()}", "mcf run: Verilator model built"]


def test_version(capsys):
    from mcf_fpga import __version__
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"mcf {__version__} (mcf-fpga)"


def test_verilog_list_json_lists_every_block(capsys):
    import json
    from mcf_fpga.hdl import blocks
    assert main(["verilog", "--list", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert sorted(got) == sorted(blocks.BLOCKS)
    for name, b in blocks.BLOCKS.items():
        assert got[name]["doc"] == b.doc and got[name]["params"] == json.loads(json.dumps(b.params, default=repr))
    assert main(["verilog", "axis_register_slice", "--json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--json goes with --list" in err
