"""host.rtl_source: the source a calibration was measured on, and whether the tree still makes it;
perfmodel.kr260_setup reading a KR260 refit with its K/V-in-DDR section."""
import hashlib
import json

import pytest

from mcf_fpga.host import perfmodel as pm
from mcf_fpga.host.executors.rtl import kr260_sim_node_config, sim_node_config
from mcf_fpga.host.rtl_source import export_sha256, freshness, node_source


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MCF_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _fake_build(cache, key, verilog: str):
    """A cached build of ``key`` as sim.verilator.build leaves it: keys/<key> -> the library,
    top.v next to it."""
    lib = cache / "verilator" / "lib0"
    lib.mkdir(parents=True, exist_ok=True)
    (lib / "top.v").write_text(verilog)
    (lib / "libmcfsim.so").write_bytes(b"")
    (cache / "verilator" / "keys").mkdir(parents=True, exist_ok=True)
    (cache / "verilator" / "keys" / key).write_text(str(lib / "libmcfsim.so"))
    return hashlib.sha256(verilog.encode()).hexdigest()


def test_freshness_from_the_key_then_the_verilog(cache):
    cfg = sim_node_config("ring")
    now = node_source(cfg)
    assert now["verilog_sha256"] is None                       # nothing built in this cache
    assert freshness(dict(now), cfg)[0] == "current"
    old = {"source_key": "0" * 32, "verilog_sha256": "ab" * 32}
    state, why = freshness(old, cfg)
    assert state == "unknown" and "not known here" in why
    sha = _fake_build(cache, now["source_key"], "module top; endmodule\n")
    assert node_source(cfg)["verilog_sha256"] == sha
    assert freshness(old, cfg)[0] == "stale"
    assert freshness(dict(old, verilog_sha256=sha), cfg) == (
        "current", "hdl/ or golden/ changed since, but the node's Verilog is the same")


def test_an_export_is_remembered_and_equals_the_build(cache, monkeypatch):
    """export_sha256 hashes what build() compiles (to_verilog of the node as module top) and is
    remembered; a cached build's top.v wins over the export."""
    import mcf_fpga.hdl.verilog as hv
    cfg = sim_node_config("ring")
    calls = []
    monkeypatch.setattr(hv, "to_verilog", lambda comp, name, rename=None: calls.append(name) or "module top;\n")
    sha = export_sha256(cfg)
    assert calls == ["top"] and sha == hashlib.sha256(b"module top;\n").hexdigest()
    assert export_sha256(cfg) == sha and calls == ["top"]              # remembered: no second export
    assert node_source(cfg)["verilog_sha256"] == sha
    assert freshness({"source_key": "0" * 32, "verilog_sha256": sha}, cfg)[0] == "current"
    built = _fake_build(cache, node_source(cfg)["source_key"], "module other;\n")
    assert node_source(cfg)["verilog_sha256"] == built


def test_the_key_follows_the_configuration():
    assert node_source(sim_node_config("ring"))["source_key"] != node_source(kr260_sim_node_config())["source_key"]


def test_kr260_setup_takes_the_ddr_refit(tmp_path, monkeypatch):
    base = pm.load_params()                   # (may calibrate: with the real build cache)
    monkeypatch.setenv("MCF_CACHE", str(tmp_path / "cache"))
    _hw, P0, _e = pm.kr260_setup(base=base, kr260=None)
    att = {"one": 7.0, "firstrow": 1.0, "rowpace": 1.0}
    kvl = {"one": 3.0}
    gemm = dict(P0["instr"]["gemm"], one=123.0)
    refit = {"node": "ddr", "instr": {"gemm": gemm}, "kv_ddr": {"instr": {"att": att, "kvl": kvl}},
             "rtl_commit": "abc1234", **node_source(kr260_sim_node_config())}
    path = tmp_path / "perf_kr260.json"
    path.write_text(json.dumps(refit))
    _hw, P, _e = pm.kr260_setup(base=base, kr260=str(path))
    assert P["instr"]["gemm"] == gemm
    assert P["kv_ddr"]["instr"]["att"] == att and P["kv_ddr"]["instr"]["kvl"] == kvl
    assert P["kv_ddr"]["instr"]["kvs"] == P0["kv_ddr"]["instr"]["kvs"]      # not refitted: extrapolated
    assert P["instr_source"]["kvl"] == "KR260 DDR node (RTL abc1234)"
    assert P["instr_source"]["gemm"] == "KR260 node (RTL abc1234)"
    assert P["kr260_refit"]["state"] == "current"
    path.write_text(json.dumps(dict(refit, source_key="1" * 32)))
    assert pm.kr260_setup(base=base, kr260=str(path))[1]["kr260_refit"]["state"] == "unknown"
