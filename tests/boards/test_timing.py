"""The logic-depth timing estimate (mcf_fpga/boards/timing.py): on hand-built netlists against an
independent brute-force walk of every path, and on Yosys netlists of small Amaranth designs."""
import functools

import pytest
from amaranth import Elaboratable, Module, Signal
from hypothesis import given, settings
from hypothesis import strategies as st

from mcf_fpga.boards import timing
from mcf_fpga.boards.timing import XCUP_1 as D


def _cell(typ, ins, outs, params=None):
    return {"type": typ, "parameters": params or {},
            "port_directions": {**{p: "input" for p in ins}, **{p: "output" for p in outs}},
            "connections": {**ins, **outs}}


def _net(cells, ports=None, names=None):
    return {"modules": {"top": {"attributes": {"top": 1}, "ports": ports or {}, "cells": cells,
                                "netnames": {n: {"bits": b, "hide_name": 0} for n, b in (names or {}).items()}}}}


def _ff(d, q):
    return _cell("FDRE", {"C": [1], "CE": [2], "R": [3], "D": [d]}, {"Q": [q]})


@st.composite
def lut_dags(draw):
    """FFs (bits 100..) feeding a random DAG of LUTs (bits 1000..), some of whose outputs are FF inputs."""
    n_ff = draw(st.integers(1, 4))
    n_lut = draw(st.integers(1, 12))
    srcs = [100 + i for i in range(n_ff)]
    cells, luts = {}, []
    for j in range(n_lut):
        ins = draw(st.lists(st.sampled_from(srcs), min_size=1, max_size=4))
        out = 1000 + j
        cells[f"lut{j}"] = _cell(f"LUT{len(ins)}", {f"I{k}": [b] for k, b in enumerate(ins)}, {"O": [out]})
        luts.append((ins, out))
        srcs.append(out)
    ends = draw(st.lists(st.sampled_from(srcs), min_size=1, max_size=4))
    for i in range(n_ff):                               # the FFs' D: some DAG node (or a constant)
        cells[f"ff{i}"] = _ff(ends[i % len(ends)], 100 + i)
    return cells, luts, ends[:n_ff]


def _reference(luts, d_bits):
    """Worst FF-to-FF delay by recursion over every path (no topological order, no memo of the
    module under test): a LUT output's arrival is the max over its inputs of arrival + net + lut."""
    drv = {out: ins for ins, out in luts}

    @functools.lru_cache(maxsize=None)
    def arrival(bit):
        if bit not in drv:
            return D.clk_to_q
        return max(arrival(b) + D.net + D.lut for b in drv[bit])
    return max(arrival(b) + D.net + D.setup for b in d_bits)


@settings(max_examples=60, deadline=None)
@given(lut_dags())
def test_worst_path_equals_a_brute_force_walk(dag):
    cells, luts, d_bits = dag
    paths = timing.critical_paths(_net(cells), n=100)
    assert paths[0].delay_ns == pytest.approx(_reference(luts, d_bits), abs=1e-6)
    assert paths == sorted(paths, key=lambda p: -p.delay_ns)
    # the slowest path's LUT count is what its delay says
    p = paths[0]
    assert p.luts == round((p.delay_ns - D.clk_to_q - D.net - D.setup) / (D.net + D.lut))


@settings(max_examples=40, deadline=None)
@given(lut_dags())
def test_every_end_signal_gets_its_own_worst_delay(dag):
    # analyse's `ends`: one entry per register, each its own slowest input path (the counts of
    # signals over a clock target, bench_timing's ends_over, come from it)
    cells, luts, _ = dag
    d_of = {c: cell["connections"]["D"][0] for c, cell in cells.items() if c.startswith("ff")}
    paths, ends = timing.analyse(_net(cells), n=1)
    assert set(ends) == set(d_of)
    for ff, b in d_of.items():
        assert ends[ff] == pytest.approx(_reference(luts, [b]), abs=1e-3)
    assert paths[0].delay_ns == max(ends.values())


def test_carry_chain_uses_dedicated_links():
    # FF q(10) -> LUT2 -> CARRY8.S -> CARRY8 (CI) -> FF d
    cells = {"a": _ff(30, 10), "l": _cell("LUT2", {"I0": [10], "I1": [10]}, {"O": [20]}),
             "c0": _cell("CARRY8", {"S": [20], "DI": ["0"], "CI": ["0"]}, {"CO": [21], "O": [22]}),
             "c1": _cell("CARRY8", {"S": ["0"], "DI": ["0"], "CI": [21]}, {"CO": [23], "O": [30]})}
    p = timing.critical_paths(_net(cells, names={"acc": [10]}), n=1)[0]
    want = D.clk_to_q + D.net + D.lut + D.carry_in + D.carry_step + D.net + D.setup
    assert p.delay_ns == pytest.approx(want)
    assert (p.luts, p.carries, p.levels, p.start, p.end) == (1, 2, 3, "acc", "acc")


def test_path_names_the_design_signals_it_passes_through():
    # FF q(10) -> LUT(20 "sum") -> LUT(21, generated) -> LUT(22 "hit") -> FF d; a shorter side path
    cells = {"a": _ff(22, 10), "l0": _cell("LUT2", {"I0": [10], "I1": [10]}, {"O": [20]}),
             "l1": _cell("LUT1", {"I0": [20]}, {"O": [21]}), "l2": _cell("LUT1", {"I0": [21]}, {"O": [22]})}
    names = {"q": [10], "sum": [20], "$abc$7": [21], "hit": [22]}
    p = timing.critical_paths(_net(cells, names=names), n=1)[0]
    assert (p.start, p.end, p.luts) == ("q", "q", 3)
    assert p.via == ("sum", "hit")


def test_registered_dsp_starts_and_ends_paths_and_unregistered_is_combinational():
    # FF a -> DSP.A; DSP.P -> LUT -> FF b. Unregistered: one path through the DSP. Registered:
    # two paths, the one into A ending at the A register (dsp_setup) or, with AREG off, running on
    # through the multiplier to the next register inside (dsp_comb); the one out of P starting at
    # P (dsp_out) or, with PREG off, before the ALU (dsp_out + dsp_comb)
    into = {"1": D.dsp_setup, "0": D.dsp_comb}
    for areg, mreg, preg in (("0", "0", "1"), ("1", "0", "1"), ("1", "1", "0"), ("0", "1", "0")):
        cells = {"a": _ff(41, 40),
                 "dsp": _cell("DSP48E2", {"A": [40]}, {"P": [50]}, {"PREG": preg, "AREG": areg, "MREG": mreg}),
                 "l": _cell("LUT1", {"I0": [50]}, {"O": [51]}), "b": _ff(51, 52)}
        cells["a"]["connections"]["D"] = [52]
        paths, ends = timing.analyse(_net(cells), n=10)
        out = (D.dsp_out if preg == "1" else D.dsp_out + D.dsp_comb) + D.net + D.lut + D.net + D.setup
        assert ends["dsp"] == pytest.approx(D.clk_to_q + D.net + into[areg]), (areg, mreg, preg)
        assert ends["b"] == pytest.approx(out), (areg, mreg, preg)
    cells = {"a": _ff(41, 40), "dsp": _cell("DSP48E2", {"A": [40]}, {"P": [50]}, {"PREG": "0", "AREG": "0", "MREG": "0"}),
             "l": _cell("LUT1", {"I0": [50]}, {"O": [51]}), "b": _ff(51, 52)}
    cells["a"]["connections"]["D"] = [52]
    got = timing.critical_paths(_net(cells), n=10)
    assert max(p.delay_ns for p in got) == pytest.approx(D.clk_to_q + D.net + D.dsp_comb + D.net + D.lut + D.net + D.setup)


def test_combinational_loop_is_an_error():
    cells = {"l0": _cell("LUT1", {"I0": [2]}, {"O": [1]}), "l1": _cell("LUT1", {"I0": [1]}, {"O": [2]})}
    with pytest.raises(ValueError, match="combinational loop"):
        timing.critical_paths(_net(cells))


class _Adder(Elaboratable):
    """o <= a + b (width w) in one cycle, or in two halves over two cycles (``split``)."""

    def __init__(self, w, split):
        self.w, self.split = w, split
        self.a, self.b, self.o = Signal(w, name="a"), Signal(w, name="b"), Signal(w + 1, name="o")

    def elaborate(self, platform):
        m = Module()
        ra, rb = Signal(self.w, name="ra"), Signal(self.w, name="rb")
        m.d.sync += [ra.eq(self.a), rb.eq(self.b)]
        if not self.split:
            m.d.sync += self.o.eq(ra + rb)
        else:
            h = self.w // 2
            lo, hi_a, hi_b = Signal(h + 1, name="lo"), Signal(self.w - h, name="hi_a"), Signal(self.w - h, name="hi_b")
            m.d.sync += [lo.eq(ra[:h] + rb[:h]), hi_a.eq(ra[h:]), hi_b.eq(rb[h:])]
            m.d.sync += self.o.eq(lo[:h] | ((hi_a + hi_b + lo[h]) << h))
        return m


@pytest.mark.parametrize("w", [64])
def test_yosys_netlist_pipelining_shortens_the_worst_path(tmp_path, w):
    from amaranth.back import verilog
    got = {}
    for split in (False, True):
        d = tmp_path / str(split)
        d.mkdir()
        dut = _Adder(w, split)
        (d / "add.v").write_text(verilog.convert(dut, name="add", ports=[dut.a, dut.b, dut.o], emit_src=False))
        net = timing.netlist(["add.v"], "add", str(d), timeout=600)
        got[split] = timing.critical_paths(net, "add", n=5)
        assert got[split][0].end in (("o", "lo") if split else ("o",))
        assert "LUT" in str(net["stat"])
    one, two = got[False][0], got[True][0]
    assert one.carries >= w // 8                    # the whole carry chain on one path
    assert two.carries < one.carries and two.delay_ns < one.delay_ns


_labels = st.lists(st.sampled_from(["att", "kv", "pipe", "vec", "x"]), min_size=1, max_size=4).map(".".join)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(_labels, st.floats(0.5, 8.0, allow_nan=False)), st.floats(1.0, 7.0))
def test_over_by_block_counts_each_slow_signal_once_under_its_module(ends, period):
    got = timing.over_by_block(ends, period, depth=2)
    slow = {k: t for k, t in ends.items() if t > period}
    assert sum(c for c, _ in got.values()) == len(slow)
    for block, (c, worst) in got.items():
        inside = [t for k, t in slow.items() if (".".join(k.split(".")[:-1][:2]) or "(top)") == block]
        assert (c, worst) == (len(inside), max(inside))
    assert [w for _, w in got.values()] == sorted((w for _, w in got.values()), reverse=True)
