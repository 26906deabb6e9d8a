"""mcf_fpga/host/trace.py: JSONL parsing with line-numbered errors, the synthetic agentic trace's
statistics, and the replay performance model (hand-checked cases, no dropped requests)."""
import json

import pytest

from mcf_fpga.host.trace import (A6000_8B, Hardware, TraceError, Turn, dump_trace, format_table, load_trace,
                        parse_trace, plot_results, replay, replay_all, synthetic_trace, trace_stats)


def _line(**kw):
    d = {"session": "s0", "arrival": 0.0, "prompt_tokens": 10, "output_tokens": 5}
    d.update(kw)
    return json.dumps(d)


def test_parse_valid_lines_and_blank_lines():
    turns = parse_trace([_line(), "", "  ", _line(session=7, arrival=2, prompt_tokens=0)])
    assert turns == [Turn("s0", 0.0, 10, 5), Turn("7", 2.0, 0, 5)]


@pytest.mark.parametrize("bad, msg", [
    ("{not json", "line 3: not valid JSON"),
    (_line(prompt_tokens=-5), "line 3: prompt_tokens=-5 must be >= 0"),
    (_line(output_tokens=0), "line 3: output_tokens=0 must be >= 1"),
    (_line(arrival=-1.0), "line 3: arrival=-1.0"),
    (_line(prompt_tokens=1.5), "line 3: prompt_tokens=1.5 has the wrong type"),
    (_line(output_tokens=True), "line 3: output_tokens=True has the wrong type"),
    (json.dumps({"session": "s", "arrival": 0, "output_tokens": 1}), "line 3: missing field 'prompt_tokens'"),
    ("[1, 2]", "line 3: expected a JSON object"),
])
def test_malformed_lines_rejected_with_line_number(bad, msg):
    with pytest.raises(TraceError, match=msg.replace("(", r"\(").replace("[", r"\[")):
        parse_trace([_line(), "", bad, _line()])


def test_dump_and_load_round_trip(tmp_path):
    turns = synthetic_trace(5, seed=3)
    dump_trace(turns, tmp_path / "t.jsonl")
    assert load_trace(tmp_path / "t.jsonl") == turns


def test_synthetic_trace_matches_agentic_statistics():
    """KernelFlume §2.1/§6.4: median context ~80K, tail to ~273K, bursty arrivals."""
    st = trace_stats(synthetic_trace(400, seed=0))
    assert 68_000 <= st["median_ctx"] <= 92_000
    assert 200_000 <= st["p99_ctx"] and st["max_ctx"] <= 273_000
    assert st["arrival_cv"] > 1.1                    # burstier than Poisson (CV = 1)


def test_single_session_tpot_hand_checked():
    """One turn, 1000 prompt + 100 output tokens on a static pool of one A6000 rank:
    TPOT = 16e9/768e9 + KV(1000..1100 tokens)*128 KiB/768e9 + 4 ms = 25.00..25.02 ms."""
    hw = A6000_8B
    r = replay([Turn("s", 0.0, 1000, 100)], "static-over", hw, dt=0.05)
    lo = hw.t_w + 1000 * hw.kv_per_token / hw.bw + hw.overhead
    hi = hw.t_w + 1100 * hw.kv_per_token / hw.bw + hw.overhead
    assert lo <= r.p99_tpot <= hi and r.slo_attainment == 1.0 and r.output_tokens == 100
    assert r.dollars_per_mtok == pytest.approx(r.node_hours * hw.price / 100 * 1e6)
    k = replay([Turn("s", 0.0, 1000, 100)], "kernelflume", hw, dt=0.05)
    assert k.p99_tpot == pytest.approx(hw.t_w + hw.overhead)        # W-bound: max(t_w, t_A)
    assert k.output_tokens == 100


def test_replay_all_conserves_tokens_and_writes_png(tmp_path):
    turns = synthetic_trace(12, seed=4)
    want = sum(t.output_tokens for t in turns)
    res = replay_all(turns, dt=0.5)
    assert [r.strategy for r in res] == ["static-under", "static-over", "full-instance", "kernelflume"]
    for r in res:
        assert r.output_tokens == want                # every request completed: none dropped
        assert 0 < r.slo_attainment <= 1 and r.node_hours > 0 and r.p99_tpot > 0
    assert "kernelflume" in format_table(res)
    png = plot_results(res, tmp_path / "r.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_pool_limit_admission_waits_no_session_dropped():
    """Two sessions that each fit one A node but not together with max_nodes=2 (W + 1 A):
    the second waits for the first to finish; both complete."""
    hw = Hardware(max_nodes=2)
    big = int(0.7 * hw.c_thresh_tokens)
    turns = [Turn("a", 0.0, big, 50), Turn("b", 0.0, big, 50)]
    r = replay(turns, "kernelflume", hw, dt=0.1)
    assert r.output_tokens == 100
    assert max(n for _, n, _ in r.timeline) <= 2


def test_session_larger_than_the_pool_is_a_clear_error():
    hw = Hardware(max_nodes=2)
    with pytest.raises(ValueError, match="session 'a' needs"):
        replay([Turn("a", 0.0, 2 * hw.c_thresh_tokens, 10)], "kernelflume", hw)
    with pytest.raises(ValueError, match="strategy='x'"):
        replay([Turn("a", 0.0, 1, 1)], "x")


def test_turn_extension_beyond_free_room_builds_nodes_and_finishes():
    """A later turn whose prompt needs more room than the A nodes have: nodes are built and
    kept (not released as idle spares) until the extension fits."""
    hw = Hardware(max_nodes=4)
    c = hw.c_thresh_tokens
    turns = [Turn("a", 0.0, c // 2, 10), Turn("a", 1.0, int(1.6 * c), 10)]
    r = replay(turns, "kernelflume", hw, dt=0.1)
    assert r.output_tokens == 20
    assert max(n for _, n, _ in r.timeline) >= 3          # W + 2 A nodes for 1.6 C_thresh


def test_dynamics_spread_and_bad_name():
    lo = trace_stats(synthetic_trace(200, seed=2, dynamics="low"))
    hi = trace_stats(synthetic_trace(200, seed=2, dynamics="high"))
    assert lo["p99_ctx"] < hi["p99_ctx"]
    with pytest.raises(ValueError, match="dynamics='x'"):
        synthetic_trace(3, dynamics="x")
