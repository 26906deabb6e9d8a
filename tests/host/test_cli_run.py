"""``mcf run``: the main job on the simulated cluster, small sizes; the JSON contract and the
refusals with a message naming the limit."""
import json

from mcf_fpga.host.cli import main


def test_mcf_run_json(capsys):
    """(with the nodes stepped in 2 threads: the same results as 1, tests/sim/test_verilator_threads.py)"""
    assert main(["run", "--nodes", "2", "--layers", "1", "--prompt-len", "40", "--max-new-tokens", "2",
                 "--sim-threads", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["prompt"]) == 40 and len(out["tokens"]) == 2
    assert out["matches_golden"] is True and out["backend"] == "rtl"
    assert set(out["runs"]) == {"mars", "ring"}
    for r in out["runs"].values():
        assert r["tokens"] == r["golden_tokens"] and r["logits_match"]
        assert r["ttft_cycles"] > 0 and r["bytes_moved"] > 0 and len(r["peak_kv_bytes"]) == 2
        assert r["host_interactions_per_unit"] > 0 and r["host_interactions_per_token"] > 0
    assert out["mars_speedup_over_ring"] > 0


def _mars_runs(capsys, option, values) -> dict:
    """``mcf run`` of MARS on 2 nodes (1 layer, 40 tokens, 2 new) once per ``option`` value: {value:
    the JSON}; every run must match golden and report the value."""
    args = ["run", "--nodes", "2", "--layers", "1", "--prompt-len", "40", "--max-new-tokens", "2",
            "--schedules", "mars", "--json"]
    outs = {}
    for v in values:
        assert main(args + [option, v]) == 0
        out = outs[v] = json.loads(capsys.readouterr().out)
        assert out[option.removeprefix("--")] == v and out["matches_golden"] is True
    return outs


def test_mcf_run_last_row_logits(capsys):
    """``--logits last``: the head on the first token's row only -- the last row's logits and the
    tokens equal golden's, in fewer cycles to the first token than the head on every row."""
    outs = _mars_runs(capsys, "--logits", ("all", "last"))
    assert outs["last"]["runs"]["mars"]["ttft_cycles"] < outs["all"]["runs"]["mars"]["ttft_cycles"]


def test_mcf_run_on_fetching_nodes(capsys):
    """``--node fetch``: the nodes fetch their streams and load their weights and rows; the same
    tokens as golden with fewer host interactions than the host-driven DDR node."""
    rates = {}
    for node, out in _mars_runs(capsys, "--node", ("ddr", "fetch")).items():
        r = out["runs"]["mars"]
        rates[node] = (r["host_interactions_per_unit"], r["host_interactions_per_token"])
    assert rates["fetch"][0] < rates["ddr"][0] and rates["fetch"][1] < rates["ddr"][1]
    assert main(["run", "--node", "fetch", "--backend", "golden", "--prompt-len", "16"]) == 2
    assert "--node fetch needs --backend rtl" in capsys.readouterr().err


def test_mcf_run_bad_input(capsys):
    assert main(["run", "--prompt-len", "0"]) == 2
    assert "argument --prompt-len: 0 must be >= 1" in capsys.readouterr().err
    assert main(["run", "--schedules", "mars,nope", "--prompt-len", "16"]) == 2
    assert "expected names from mars, ring, zigzag, pd" in capsys.readouterr().err
    assert main(["run", "--kv-headroom", "0.5", "--prompt-len", "16"]) == 2
    assert "argument --kv-headroom: 0.5 must be >= 1" in capsys.readouterr().err
    assert main(["run", "--chunk", "64", "--prompt-len", "128", "--nodes", "2"]) == 2
    assert "t_max=32" in capsys.readouterr().err


def test_mcf_run_board_without_hardware_is_a_clear_error(capsys):
    """No board here: a runtime failure (exit 1), not a usage error."""
    assert main(["run", "--backend", "board", "--nodes", "2", "--layers", "1", "--prompt-len", "16",
                 "--max-new-tokens", "1", "--schedules", "mars", "--json"]) == 1
    err = capsys.readouterr().err
    assert "mcf run: error:" in err and "no UIO device named 'mcf'" in err
    assert main(["run", "--simulate-boards", "--prompt-len", "16"]) == 2
    assert "--simulate-boards needs --backend board" in capsys.readouterr().err


def test_mcf_run_on_simulated_boards(capsys):
    """``--backend board --simulate-boards``: the same programs on Verilated board tops."""
    assert main(["run", "--backend", "board", "--simulate-boards", "--nodes", "2", "--layers", "1",
                 "--prompt-len", "24", "--max-new-tokens", "2", "--schedules", "mars", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["backend"] == "board" and out["matches_golden"] is True
    r = out["runs"]["mars"]
    assert r["tokens"] == r["golden_tokens"] and r["logits_match"] and r["ttft_cycles"] > 0


def test_mcf_run_mars_search_on_the_verilated_cluster(capsys):
    """``--mars-search``: MARS is the plan host.mars_search chose for the simulated node; on the
    Verilated cluster it matches golden and its measured TTFT is at most every baseline's."""
    assert main(["run", "--nodes", "2", "--layers", "1", "--prompt-len", "64", "--max-new-tokens", "1",
                 "--schedules", "mars,ring,zigzag,pd", "--mars-search", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["matches_golden"] is True
    runs = out["runs"]
    assert all(r["logits_match"] for r in runs.values())
    s = out["mars_search"]
    assert s["chosen"] and s["candidates"] > 1 and s["predicted_ttft_cycles"] > 0
    for b in ("ring", "zigzag", "pd"):
        assert runs["mars"]["ttft_cycles"] <= runs[b]["ttft_cycles"], (b, s["chosen"])
