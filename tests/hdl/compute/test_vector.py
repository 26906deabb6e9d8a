"""VectorUnit vs golden numerics (sat add, swiglu_fixed, quantize_pow2, rmsnorm_quant, rope_fixed):
bit-exact on random rows with random input gaps and output back-pressure; bad commands flagged;
the two-element beats of ADD / SWIGLU (``pairs``), QUANT (``quant_pairs``) and RMSNORM (``rms_pairs``)
too, in half the cycles."""
import pytest
import torch
from hypothesis import given, strategies as st, settings

from mcf_fpga.golden import numerics as nx
from mcf_fpga.hdl.compute.vector import VectorUnit, VecOp, ERR_OPCODE, ERR_SHAPE
from mcf_fpga.hdl.compute.rmsnorm_scale import PIPE_EXTRA
from mcf_fpga.hdl.compute.vector_result_pipe import LATENCY
from mcf_fpga.sim.kit import StreamSource, StreamSink, run_simulation

DUT = VectorUnit(d_max=32)
DUT_ONE_ROW = VectorUnit(d_max=32, depth=32)       # the ring holds one d_max row (or two short ones)
DUT_PIPE = VectorUnit(d_max=32, pipelined=True)    # the result path in registered stages (VectorResultPipe)
#: a ring of 48 words (not a power of two: the emit stage's ring addresses wrap by compare, not overflow)
DUT_PIPE48 = VectorUnit(d_max=24, pipelined=True)
#: two elements a beat for ADD / SWIGLU (``pair``), the rest as DUT_PIPE
DUT_PAIRS = VectorUnit(d_max=32, pipelined=True, pairs=True)
#: QUANT in pair beats too (the ring a PairedScratchpad); a 48-word ring: the pair step wraps by compare
DUT_QPAIRS = VectorUnit(d_max=24, pipelined=True, pairs=True, quant_pairs=True)
#: RMSNORM in pair beats as well (RmsNormScale(pairs=True)), the rest as DUT_QPAIRS
DUT_RPAIRS = VectorUnit(d_max=24, pipelined=True, pairs=True, quant_pairs=True, rms_pairs=True)
#: a row's bit length in two cycles (``bitlen_stages=2``), the rest as DUT_RPAIRS
DUT_BL2 = VectorUnit(d_max=24, pipelined=True, pairs=True, quant_pairs=True, rms_pairs=True, bitlen_stages=2)
#: the command checked and started from a register (``cmd_stage``), the rest as DUT_BL2 (the
#: KR260 preset's vector unit)
DUT_200 = VectorUnit(d_max=24, pipelined=True, pairs=True, quant_pairs=True, rms_pairs=True, bitlen_stages=2,
                     cmd_stage=True)


def run_vec(cmds, a, b, n_out, *, seed=0, vp=1.0, rp=1.0, max_cycles=30000, dut=DUT, pair=False):
    """Runs ``cmds`` on ``dut``; returns the output beats, error, busy and ``cycles`` (cycles busy).
    ``pair``: ``a`` and ``b`` go two elements a beat (``data``, ``data1``)."""
    def beats(x):
        x = [int(v) for v in x]
        if pair:
            return [{"data": x[k], "data1": x[k + 1]} for k in range(0, len(x), 2)]
        return [{"data": v} for v in x]
    out = {"cycles": 0}
    srcs = [(StreamSource(dut.cmd, seed=seed), cmds),
            (StreamSource(dut.a_in, seed=seed + 1, valid_prob=vp), beats(a)),
            (StreamSource(dut.b_in, seed=seed + 2, valid_prob=vp), beats(b))]
    snk = StreamSink(dut.o_out, seed=seed + 3, ready_prob=rp)

    def sender(src, beats):
        async def tb(ctx):
            await src.send(ctx, beats)
        return tb

    async def rx(ctx):
        out["beats"] = await snk.collect(ctx, n_out)
        for _ in range(4):
            await ctx.tick()
        out["err"] = ctx.get(dut.error)
        out["busy"] = ctx.get(dut.busy)

    async def count(ctx):
        async for _, _, busy in ctx.tick().sample(dut.busy):
            out["cycles"] += busy
    run_simulation(dut, [sender(s, bt) for s, bt in srcs] + [rx], max_cycles=max_cycles, vcd=False,
                   background=[count])
    return out


def cmd(op, ln, rows, frac=nx.FA, bits=8, eps_q=17):
    return {"op": op, "len": ln, "rows": rows, "frac": frac, "bits": bits, "eps_q": eps_q}


def rand_rows(rng, rows, ln):
    mag = torch.randint(0, 32, (rows, 1), generator=rng)
    x = torch.randint(-2 ** 31, 2 ** 31, (rows, ln), generator=rng) >> (31 - mag)
    if rows > 1:
        x[torch.randint(0, rows, (1,), generator=rng)] = 0       # an all-zero row
    return x


def signed32(v):
    return v - (1 << 32) if v >> 31 else v


@given(seed=st.integers(0, 2 ** 31), op=st.sampled_from([VecOp.ADD, VecOp.SWIGLU, VecOp.QUANT,
                                                          VecOp.RMSNORM, VecOp.ROPE]),
       ln=st.integers(1, 16) | st.integers(17, 32), rows=st.integers(1, 4), frac=st.integers(0, 30),
       bits=st.sampled_from([4, 8]), eps_q=st.integers(0, 2 ** 20),
       vp=st.sampled_from([1.0, 0.5]), rp=st.sampled_from([1.0, 0.4]),
       dut=st.sampled_from([DUT, DUT_ONE_ROW, DUT_PIPE, DUT_PIPE48, DUT_QPAIRS, DUT_RPAIRS, DUT_BL2,
                            DUT_200]))
@settings(max_examples=50)
def test_vector_matches_golden(seed, op, ln, rows, frac, bits, eps_q, vp, rp, dut):
    """Multi-row commands (rows overlap in the row path) with rows up to d_max (one, two or three
    rows fit the ring), random input gaps and output back-pressure."""
    rng = torch.Generator().manual_seed(seed)
    ln = min(ln, dut.d_max)
    if op == VecOp.ROPE:
        ln = 2 * ((ln + 1) // 2)
    if op == VecOp.SWIGLU:
        frac = min(frac, 20)
    a = rand_rows(rng, rows, ln)
    b = rand_rows(rng, rows, ln)
    e_exp = torch.zeros(rows, dtype=torch.int64)
    if op == VecOp.ADD:
        exp = nx.sat(a + b)
    elif op == VecOp.SWIGLU:
        exp = nx.swiglu_fixed(a, b, frac)
    elif op == VecOp.QUANT:
        exp, e_exp = nx.quantize_pow2(a, frac, bits)
    elif op == VecOp.RMSNORM:
        exp, e_exp = nx.rmsnorm_quant(a, eps_q / 2 ** (2 * nx.FA), bits)
    else:
        pos = torch.randint(0, 4096, (rows,), generator=rng)
        cos, sin = nx.rope_tables(pos.tolist(), ln, 10000.0)
        exp = torch.stack([nx.rope_fixed(a[r:r + 1], cos[r:r + 1], sin[r:r + 1])[0] for r in range(rows)])
        b = torch.stack([(cos[r] & 0xFFFF) | ((sin[r] & 0xFFFF) << 16) for r in range(rows)])
        b = torch.tensor([[signed32(int(v)) for v in row] for row in b.tolist()])
    if op in (VecOp.QUANT, VecOp.RMSNORM):
        b = b[:, :0]
    out = run_vec([cmd(op, ln, rows, frac, bits, eps_q)], a.flatten(), b.flatten(), rows * ln,
                  seed=seed, vp=vp, rp=rp, dut=dut)
    got = torch.tensor([bt["data"] for bt in out["beats"]]).view(rows, ln)
    got = torch.where(got >= 2 ** 39, got - 2 ** 40, got)
    assert torch.equal(got, exp), f"op {op}: got\n{got}\nexpected\n{exp}"
    if op in (VecOp.QUANT, VecOp.RMSNORM):
        ge = torch.tensor([bt["e"] for bt in out["beats"]]).view(rows, ln)
        ge = torch.where(ge >= 128, ge - 256, ge)
        assert torch.equal(ge, e_exp[:, None].expand(rows, ln)), f"exponents {ge} vs {e_exp}"
    assert [bt["last"] for bt in out["beats"]] == [int(i % ln == ln - 1) for i in range(rows * ln)]
    assert out["err"] == 0 and out["busy"] == 0


def run_pairs(op, ln, rows, frac, a, b, *, seed=0, vp=1.0, rp=1.0, pair=True, bits=8, dut=DUT_PAIRS, eps_q=17):
    """``op`` (ADD / SWIGLU; QUANT on DUT_QPAIRS, RMSNORM on DUT_RPAIRS) on ``dut`` with ``pair``:
    (results in order, last flags by element, error, busy cycles, exponents by element)."""
    c = dict(cmd(op, ln, rows, frac, bits, eps_q), pair=int(pair))
    out = run_vec([c], a.flatten(), b.flatten(), rows * ln // (1 + pair), seed=seed, vp=vp, rp=rp, dut=dut,
                  pair=pair)
    s40 = lambda v: v - (1 << 40) if v >= 1 << 39 else v  # noqa: E731
    vals, lasts, es = [], [], []
    for bt in out["beats"]:
        vals += [s40(bt["data"])] + ([s40(bt["data1"])] if pair else [])
        lasts += [0, bt["last"]] if pair else [bt["last"]]
        es += [bt["e"] - 256 if bt["e"] >= 128 else bt["e"]] * (1 + pair)
    return vals, lasts, out["err"], out["cycles"], es


@given(seed=st.integers(0, 2 ** 31), op=st.sampled_from([VecOp.ADD, VecOp.SWIGLU]), half=st.integers(1, 16),
       rows=st.integers(1, 4), frac=st.integers(0, 20), vp=st.sampled_from([1.0, 0.5]), rp=st.sampled_from([1.0, 0.4]))
@settings(max_examples=30, deadline=None)
def test_vector_pairs_match_golden(seed, op, half, rows, frac, vp, rp):
    """ADD / SWIGLU with ``pair``: two elements a beat in, two results a beat out (the second
    result pipe), equal to golden, ``last`` on each row's last beat, under input gaps and
    back-pressure."""
    rng = torch.Generator().manual_seed(seed)
    ln = 2 * half
    a, b = rand_rows(rng, rows, ln), rand_rows(rng, rows, ln)
    exp = nx.sat(a + b) if op == VecOp.ADD else nx.swiglu_fixed(a, b, frac)
    vals, lasts, err, _, _ = run_pairs(op, ln, rows, frac, a, b, seed=seed, vp=vp, rp=rp)
    assert vals == exp.flatten().tolist()
    assert lasts == [int(i % ln == ln - 1) for i in range(rows * ln)]
    assert err == 0


@given(seed=st.integers(0, 2 ** 31), half=st.integers(1, 12), rows=st.integers(1, 4), frac=st.integers(0, 30),
       bits=st.sampled_from([4, 8]), vp=st.sampled_from([1.0, 0.5]), rp=st.sampled_from([1.0, 0.4]),
       dut=st.sampled_from([DUT_QPAIRS, DUT_BL2, DUT_200]))
@settings(max_examples=30, deadline=None)
def test_vector_quant_pairs_match_golden(seed, half, rows, frac, bits, vp, rp, dut):
    """QUANT with ``pair`` (``quant_pairs``): rows of up to d_max (one, two or three in the ring,
    pair steps wrapping it), two elements a beat in and out, values and row exponents equal to
    golden's quantize_pow2, ``last`` on each row's last beat, under input gaps and back-pressure."""
    rng = torch.Generator().manual_seed(seed)
    ln = 2 * half
    a = rand_rows(rng, rows, ln)
    exp, e_exp = nx.quantize_pow2(a, frac, bits)
    vals, lasts, err, _, es = run_pairs(VecOp.QUANT, ln, rows, frac, a, a[:, :0], seed=seed, vp=vp, rp=rp,
                                        bits=bits, dut=dut)
    assert vals == exp.flatten().tolist()
    assert es == e_exp[:, None].expand(rows, ln).flatten().tolist()
    assert lasts == [int(i % ln == ln - 1) for i in range(rows * ln)]
    assert err == 0


@given(seed=st.integers(0, 2 ** 31), half=st.integers(1, 12), rows=st.integers(1, 4), bits=st.sampled_from([4, 8]),
       eps_q=st.integers(0, 2 ** 20), vp=st.sampled_from([1.0, 0.5]), rp=st.sampled_from([1.0, 0.4]),
       dut=st.sampled_from([DUT_RPAIRS, DUT_BL2, DUT_200]))
@settings(max_examples=30, deadline=None)
def test_vector_rms_pairs_match_golden(seed, half, rows, bits, eps_q, vp, rp, dut):
    """RMSNORM with ``pair`` (``rms_pairs``): rows of up to d_max (one, two or three in the ring, the
    load, scale and emit stages stepping pairs around it), two elements a beat in and out, values
    and row exponents equal to golden's rmsnorm_quant, ``last`` on each row's last beat, under
    input gaps and back-pressure."""
    rng = torch.Generator().manual_seed(seed)
    ln = 2 * half
    a = rand_rows(rng, rows, ln)
    exp, e_exp = nx.rmsnorm_quant(a, eps_q / 2 ** (2 * nx.FA), bits)
    vals, lasts, err, _, es = run_pairs(VecOp.RMSNORM, ln, rows, 0, a, a[:, :0], seed=seed, vp=vp, rp=rp,
                                        bits=bits, dut=dut, eps_q=eps_q)
    assert vals == exp.flatten().tolist()
    assert es == e_exp[:, None].expand(rows, ln).flatten().tolist()
    assert lasts == [int(i % ln == ln - 1) for i in range(rows * ln)]
    assert err == 0


def test_vector_rms_pairs_halve_the_cycles():
    """4 rows x 24 elements of RMSNORM: with ``pair`` the unit is busy for rows * (len/2 + 54) +
    len + 1 cycles plus the result path's latency and the scale's PIPE_EXTRA per row (the module
    docstring), against rows * (len + 53) + 2 * len + 1 (and one more per row for the pairs'
    extra sum stage)."""
    rng = torch.Generator().manual_seed(7)
    a = rand_rows(rng, 4, 24)
    one = run_pairs(VecOp.RMSNORM, 24, 4, 0, a, a[:, :0], pair=False, dut=DUT_RPAIRS)
    two = run_pairs(VecOp.RMSNORM, 24, 4, 0, a, a[:, :0], dut=DUT_RPAIRS)
    exp = nx.rmsnorm_quant(a, 17 / 2 ** (2 * nx.FA), 8)[0].flatten().tolist()
    assert one[0] == two[0] == exp
    tail = 4 + LATENCY - 1 + 4 * PIPE_EXTRA
    assert one[3] <= 4 * (24 + 54) + 2 * 24 + 1 + tail, one[3]
    assert two[3] <= 4 * (12 + 54) + 24 + 1 + tail, two[3]


def test_vector_quant_pairs_halve_the_cycles():
    """4 rows x 24 elements of QUANT: with ``pair`` the unit is busy for rows * (len/2 + 1) + len/2
    cycles plus the result path's latency (the module docstring), against rows * (len + 1) + len."""
    rng = torch.Generator().manual_seed(6)
    a = rand_rows(rng, 4, 24)
    one = run_pairs(VecOp.QUANT, 24, 4, 9, a, a[:, :0], pair=False, dut=DUT_QPAIRS)
    two = run_pairs(VecOp.QUANT, 24, 4, 9, a, a[:, :0], dut=DUT_QPAIRS)
    assert one[0] == two[0] == nx.quantize_pow2(a, 9, 8)[0].flatten().tolist()
    assert one[3] <= 4 * 25 + 24 + 4 + LATENCY - 1, one[3]
    assert two[3] <= 4 * 13 + 12 + 4 + LATENCY - 1, two[3]


@pytest.mark.parametrize("op, frac", [(VecOp.RMSNORM, 0), (VecOp.QUANT, 9)], ids=["rmsnorm", "quant"])
@pytest.mark.parametrize("pair", [False, True], ids=["words", "pairs"])
def test_vector_bitlen_stages_cost_a_cycle_per_command(op, frac, pair):
    """``bitlen_stages=2``: the same results; the first row's later stages wait a cycle more for
    its bit length, later rows at most a cycle each (QUANT's 4 rows of 24: the ring full, the
    second row's load waits for the first row's emit, which comes a cycle later)."""
    rng = torch.Generator().manual_seed(11)
    for rows, ln in ((1, 8), (4, 24)):
        a = rand_rows(rng, rows, ln)
        one = run_pairs(op, ln, rows, frac, a, a[:, :0], pair=pair, dut=DUT_RPAIRS)
        two = run_pairs(op, ln, rows, frac, a, a[:, :0], pair=pair, dut=DUT_BL2)
        assert one[0] == two[0] and one[4] == two[4]
        assert 1 <= two[3] - one[3] <= rows, (rows, ln, one[3], two[3])


def test_vector_pairs_halve_the_cycles():
    """4 rows x 32 elements of SWIGLU: with ``pair`` the unit is busy at most 0.55 x the cycles
    without (64 beats instead of 128, the pipe's latency once)."""
    rng = torch.Generator().manual_seed(5)
    a, b = rand_rows(rng, 4, 32), rand_rows(rng, 4, 32)
    one = run_pairs(VecOp.SWIGLU, 32, 4, 12, a, b, pair=False)
    two = run_pairs(VecOp.SWIGLU, 32, 4, 12, a, b)
    assert one[0] == two[0] == nx.swiglu_fixed(a, b, 12).flatten().tolist()
    assert two[3] <= 0.55 * one[3], (one[3], two[3])


def test_vector_pairs_refused_shapes():
    """``pair`` with a row op (QUANT allowed with ``quant_pairs``, RMSNORM with ``rms_pairs``, ROPE
    never) or an odd ``len``: ERR_SHAPE, nothing consumed; the next command runs. A unit with pairs
    must be pipelined, one with quant_pairs must have pairs and an even ring, rms_pairs needs
    quant_pairs."""
    a = torch.tensor([5, -7, 2 ** 31 - 1, -2 ** 31])
    b = torch.tensor([1, 1, 1, -1])
    bad = [dict(cmd(VecOp.QUANT, 4, 1), pair=1), dict(cmd(VecOp.ADD, 3, 1), pair=1)]
    out = run_vec(bad + [dict(cmd(VecOp.ADD, 4, 1), pair=0)], a, b, 4, dut=DUT_PAIRS)
    assert [bt["data"] for bt in out["beats"]] == nx.sat(a + b).tolist()
    assert out["err"] == ERR_SHAPE
    bad = [dict(cmd(VecOp.RMSNORM, 4, 1), pair=1), dict(cmd(VecOp.ROPE, 4, 1), pair=1),
           dict(cmd(VecOp.QUANT, 3, 1), pair=1)]
    out = run_vec(bad + [dict(cmd(VecOp.ADD, 4, 1), pair=0)], a, b, 4, dut=DUT_QPAIRS)
    assert [bt["data"] for bt in out["beats"]] == nx.sat(a + b).tolist()
    assert out["err"] == ERR_SHAPE
    bad = [dict(cmd(VecOp.ROPE, 4, 1), pair=1), dict(cmd(VecOp.RMSNORM, 3, 1), pair=1)]
    out = run_vec(bad + [dict(cmd(VecOp.ADD, 4, 1), pair=0)], a, b, 4, dut=DUT_RPAIRS)
    assert [bt["data"] for bt in out["beats"]] == nx.sat(a + b).tolist()
    assert out["err"] == ERR_SHAPE
    with pytest.raises(ValueError, match="pairs=True needs pipelined=True"):
        VectorUnit(d_max=8, pairs=True)
    with pytest.raises(ValueError, match="quant_pairs=True needs pairs=True"):
        VectorUnit(d_max=8, pipelined=True, quant_pairs=True)
    with pytest.raises(ValueError, match="rms_pairs=True needs quant_pairs=True"):
        VectorUnit(d_max=8, pipelined=True, pairs=True, rms_pairs=True)
    with pytest.raises(ValueError, match="depth=9 must be even"):
        VectorUnit(d_max=8, depth=9, pipelined=True, pairs=True, quant_pairs=True)
    for stages, pipelined in ((2, False), (3, True), (0, True)):
        with pytest.raises(ValueError, match="bitlen_stages"):
            VectorUnit(d_max=8, pipelined=pipelined, bitlen_stages=stages)


@pytest.mark.parametrize("dut", [DUT, DUT_PIPE, DUT_200], ids=["comb", "pipelined", "cmd_stage"])
def test_vector_bad_commands(dut):
    """Unknown op and out-of-limit shapes are refused without consuming input; then a valid op runs.
    Each bad command alone sets its own error bit (``cmd_stage``: the checks registered with the
    command must belong to that command)."""
    a = torch.tensor([5, -7, 2 ** 31 - 1, -2 ** 31])
    b = torch.tensor([1, 1, 1, -1])
    d_max = dut.d_max
    bad = [cmd(7, 4, 1), cmd(VecOp.ADD, 0, 1), cmd(VecOp.ADD, d_max + 1, 1), cmd(VecOp.ADD, 4, 0),
           cmd(VecOp.ROPE, 3, 1), cmd(VecOp.QUANT, 4, 1, bits=9), cmd(VecOp.QUANT, 4, 1, frac=31)]
    good = cmd(VecOp.ADD, 4, 1)
    for cmds, err in ((bad, ERR_OPCODE | ERR_SHAPE), (bad[:1], ERR_OPCODE), (bad[1:], ERR_SHAPE)):
        out = run_vec(cmds + [good], a, b, 4, dut=dut)
        got = [bt["data"] for bt in out["beats"]]
        assert got == nx.sat(a + b).tolist()
        assert out["err"] == err and out["busy"] == 0


@pytest.mark.parametrize("op", [VecOp.ADD, VecOp.QUANT, VecOp.RMSNORM, VecOp.ROPE], ids=["add", "quant", "rmsnorm", "rope"])
def test_vector_cmd_stage_costs_a_cycle_per_lone_command(op):
    """``cmd_stage``: the same results; a lone command (the engine issues one VEC at a time) starts a
    cycle later, so it is busy exactly one cycle more. Commands back to back cost that cycle once:
    the next one waits in the register while the one before runs and starts as it ends."""
    rng = torch.Generator().manual_seed(12)
    ln, rows = 8, 3
    a = rand_rows(rng, 3 * rows, ln)
    if op == VecOp.ROPE:
        b = torch.randint(-2 ** 14, 2 ** 14, (3 * rows, ln // 2), generator=rng)
    else:
        b = rand_rows(rng, 3 * rows, ln) if op == VecOp.ADD else a[:, :0]
    for n in (1, 3):
        runs = [run_vec([dict(cmd(op, ln, rows, frac=9), pair=0)] * n, a[:n * rows].flatten(),
                        b[:n * rows].flatten(), n * rows * ln, dut=dut) for dut in (DUT_BL2, DUT_200)]
        assert runs[0]["beats"] == runs[1]["beats"]
        assert runs[0]["err"] == runs[1]["err"] == 0 and runs[1]["busy"] == 0
        assert runs[1]["cycles"] == runs[0]["cycles"] + 1, (n, runs[0]["cycles"], runs[1]["cycles"])


@given(seed=st.integers(0, 2 ** 31), op=st.sampled_from([VecOp.QUANT, VecOp.RMSNORM, VecOp.ROPE]),
       ln=st.integers(2, 32), rows=st.integers(2, 4), dut=st.sampled_from([DUT, DUT_PIPE]))
@settings(max_examples=8, deadline=None)
def test_vector_rows_overlap(seed, op, ln, rows, dut):
    """A multi-row QUANT / RMSNORM / ROPE takes fewer busy cycles than its rows as single-row
    commands (simulator cycles, full-rate streams), and for long-enough rows at most one row's
    fill (RMSNORM: two rows' and its divider per row) more than one element per cycle (pipelined:
    plus the result path's LATENCY - 1 once per command and RMSNORM's PIPE_EXTRA per row)."""
    ln += ln % 2
    rng = torch.Generator().manual_seed(seed)
    a = rand_rows(rng, rows, ln).flatten()
    b = torch.randint(-2 ** 14, 2 ** 14, (rows * ln // 2,), generator=rng) if op == VecOp.ROPE else a[:0]
    multi = run_vec([cmd(op, ln, rows)], a, b, rows * ln, dut=dut)
    hb = ln // 2 if op == VecOp.ROPE else 0
    single = [run_vec([cmd(op, ln, 1)], a[r * ln:(r + 1) * ln], b[r * hb:(r + 1) * hb], ln, dut=dut)["cycles"]
              for r in range(rows)]
    assert multi["cycles"] < sum(single), (multi["cycles"], single)
    rms = op == VecOp.RMSNORM
    tail = LATENCY - 1 + (rows * PIPE_EXTRA if rms else 0) if dut.pipelined else 0
    assert multi["cycles"] <= (2 if rms else 1) * ln + rows * (ln + (56 if rms else 1)) + 4 + tail, (multi["cycles"], single)


@given(seed=st.integers(0, 2 ** 31), op=st.sampled_from([VecOp.QUANT, VecOp.RMSNORM, VecOp.ROPE]),
       ln=st.integers(2, 24), rows=st.integers(2, 5), vp=st.sampled_from([1.0, 0.5]), rp=st.sampled_from([1.0, 0.3]),
       dut=st.sampled_from([DUT_PIPE48, DUT_RPAIRS]))
@settings(max_examples=12, deadline=None)
def test_pipelined_room_is_the_ring_s_room(seed, op, ln, rows, vp, rp, dut):
    """The pipelined unit's load stage starts a row on a register (``load_room``) set the cycle
    before from the next rows held and ring words: in every cycle of a row command it equals the
    room those imply (a free slot and ``len`` free words), under input gaps and output back-pressure
    (rings of two rows: the room runs out)."""
    import mcf_fpga.hdl.compute.vector as vector_mod
    from amaranth.hdl import Assert
    track = vector_mod._Rows.track

    def checked(self, m):
        track(self, m)
        m.d.comb += Assert(~self.on | (self.room_q == self.ring_room()), "load_room differs from the ring's room")
    ln += ln % 2
    rng = torch.Generator().manual_seed(seed)
    a = rand_rows(rng, rows, ln).flatten()
    b = torch.randint(-2 ** 14, 2 ** 14, (rows * ln // 2,), generator=rng) if op == VecOp.ROPE else a[:0]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(vector_mod._Rows, "track", checked)
        out = run_vec([cmd(op, ln, rows)], a, b, rows * ln, seed=seed, vp=vp, rp=rp, dut=dut)
    assert out["err"] == 0 and len(out["beats"]) == rows * ln
