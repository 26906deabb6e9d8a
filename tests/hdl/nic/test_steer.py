"""OpSteer (mcf_fpga/hdl/nic/steer.py) against golden.steer.split_by_op: random packets (any length from
one byte, every op, KV_REPLICA often), random gaps on the input, random back-pressure on both
outputs: each output carries exactly golden's packets, in order (nothing lost, duplicated or
moved to the other output), under the stream contract checkers."""
import pytest
from hypothesis import given, strategies as st

from mcf_fpga.golden.steer import packet_op, split_by_op
from mcf_fpga.spec.meta import MetaFields, MetaOp
from mcf_fpga.golden.header import pack_header
from mcf_fpga.hdl.nic.steer import OpSteer
from mcf_fpga.sim.kit import StreamSink, StreamSource, packets_to_beats, run_simulation

DW = 64


@st.composite
def packets(draw):
    out = []
    for _ in range(draw(st.integers(0, 8))):
        op = draw(st.one_of(st.just(int(MetaOp.KV_REPLICA)), st.integers(0, 15)))
        body = draw(st.binary(min_size=0, max_size=40))
        if draw(st.booleans()):                           # a real header
            pkt = pack_header(MetaFields(op=op, dst=draw(st.integers(0, 255)), length=len(body))) + body
        else:                                             # raw bytes: runts of 1.. bytes too
            pkt = bytes([op | draw(st.integers(0, 15)) << 4]) + body
        out.append(pkt)
    return out


def run(dut, pkts, vp, rp_match, rp_other, seed):
    got = {}
    matched, other = split_by_op(pkts, dut.ops)

    async def src(ctx):
        await StreamSource(dut.s_axis, seed=seed, valid_prob=vp).send(ctx, packets_to_beats(pkts, DW))

    def sink(name, port, rp, n):
        async def tb(ctx):
            got[name] = await StreamSink(port, seed=seed + len(name), ready_prob=rp).collect_packets(ctx, n, DW)
        return tb

    run_simulation(dut, [src, sink("match", dut.m_match, rp_match, len(matched)),
                         sink("other", dut.m_other, rp_other, len(other))],
                   vcd=False, max_cycles=2000 + 40 * len(pkts))
    return got, matched, other


@given(packets(), st.floats(0.2, 1.0), st.floats(0.1, 1.0), st.floats(0.1, 1.0), st.integers(0, 2 ** 16))
def test_steer_equals_golden_split(pkts, vp, rp_match, rp_other, seed):
    dut = OpSteer([MetaOp.KV_REPLICA])
    got, matched, other = run(dut, pkts, vp, rp_match, rp_other, seed)
    assert got["match"] == matched
    assert got["other"] == other


def test_steer_several_ops_and_held_choice():
    """Two ops steered; a packet whose later beats look like another op keeps its first beat's
    choice; back-to-back packets alternate outputs."""
    kv = pack_header(MetaFields(op=MetaOp.KV_REPLICA, length=24)) + bytes([MetaOp.DATA]) * 24
    data = pack_header(MetaFields(op=MetaOp.DATA, length=24)) + bytes([MetaOp.KV_REPLICA]) * 24
    q = pack_header(MetaFields(op=MetaOp.QUERY, length=3)) + b"abc"
    pkts = [kv, data, q, kv, kv, data, q, data]
    dut = OpSteer([MetaOp.KV_REPLICA, MetaOp.QUERY])
    got, matched, other = run(dut, pkts, 1.0, 0.5, 0.5, 3)
    assert matched == [kv, q, kv, kv, q] and other == [data, data, data]
    assert got == {"match": matched, "other": other}
    assert [packet_op(p) for p in other] == [MetaOp.DATA] * 3


def test_steer_parameters_named():
    with pytest.raises(ValueError, match="ops"):
        OpSteer([])
    with pytest.raises(ValueError, match="ops"):
        OpSteer([16])
