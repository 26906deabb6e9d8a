"""cocotb tests of the NIC's generated Verilog (AMBA port names), run by test_nic_verilog.py.
cocotbext-axi drives s_axi / s_axis* and receives m_axis*; expected frames come from
mcf_fpga/golden/nic.py."""
import random

import cocotb
from cocotb.triggers import ClockCycles
from cocotbext.axi import (AxiLiteBus, AxiLiteMaster, AxiStreamBus, AxiStreamFrame,
                           AxiStreamSink, AxiStreamSource)

from mcf_fpga.golden.nic import NicModel, encode_i32, encode_partial, make_frame
from mcf_fpga.spec.topology import RouteEntry
from mcf_fpga.spec.meta import Collective, MetaFields, MetaOp, ReduceOp, Stage
from mcf_fpga.spec.nic import ErrorCause, NicConfig, Reg, src_allow_reg
from mcf_fpga.sim.cocotb_clock import clock_and_reset

CFG = NicConfig(n_net=4, n_routes=16, max_payload=128)


class Env:
    def __init__(self, dut, seed):
        self.dut = dut
        self.rng = random.Random(seed)
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axi"), dut.clk, dut.rst)
        names = ["s_axis"] + [f"s_axis_net{p}" for p in range(1, CFG.n_net + 1)]
        self.src = [AxiStreamSource(AxiStreamBus.from_prefix(dut, n), dut.clk, dut.rst) for n in names]
        self.snk = [AxiStreamSink(AxiStreamBus.from_prefix(dut, n.replace("s_", "m_", 1)), dut.clk, dut.rst)
                    for n in names]
        for s in self.src:
            s.set_pause_generator(iter(lambda: self.rng.random() < 0.2, None))
        for s in self.snk:
            s.set_pause_generator(iter(lambda: self.rng.random() < 0.4, None))

    async def write(self, addr, value):
        resp = await self.axil.write(addr, int(value).to_bytes(4, "little"))
        assert int(resp.resp) == 0, f"AXI-Lite write {addr:#x} answered {resp.resp}"

    async def read(self, addr):
        resp = await self.axil.read(addr, 4)
        return int.from_bytes(resp.data, "little")

    async def configure(self, model, table):
        for addr, val in [(Reg.NODE_ID, model.node_id), (Reg.NUM_NODES, model.num_nodes),
                          (Reg.MEMBERS, model.members)]:
            await self.write(addr, val)
        for p, mask in enumerate(model.src_allow):      # the ports accept nothing until written
            await self.write(src_allow_reg(p), mask)
        for rid, e in sorted(table.items()):
            await self.write(Reg.ROUTE_INDEX, rid)
            await self.write(Reg.ROUTE_DATA, e.encode())
            assert await self.read(Reg.ROUTE_READ) == e.encode()   # shadow read-back
        await self.write(Reg.BANK_FLIP, 1)
        model.load_table(table)


async def reset(dut):
    await clock_and_reset(dut, idle={"crc_err": 0, "m_axis_inval_tready": 1})


@cocotb.test()
async def multicast_to_three_ports_and_local(dut):
    """Frames arriving on net1 with a multicast route leave on m_axis (local) and net2..net4,
    unchanged and in order; a malformed frame in between is dropped and counted."""
    await reset(dut)
    env = Env(dut, 1)
    model = NicModel(CFG, node_id=5, num_nodes=16)
    await env.configure(model, {3: RouteEntry(0b11101), 4: RouteEntry(0b00010)})
    frames = []
    for i in range(8):
        n = env.rng.randrange(0, 100)
        frames.append(make_frame(MetaFields(op=MetaOp.KV_REPLICA, src=2, dst=9, route_id=3,
                                            collective=Collective.MULTICAST, kv_id=(1, i), length=n),
                                 bytes(env.rng.randrange(256) for _ in range(n)), CFG))
    bad = make_frame(MetaFields(op=MetaOp.DATA, src=2, dst=9, route_id=3, length=40), bytes(30), CFG)
    back = make_frame(MetaFields(op=MetaOp.DATA, src=1, dst=2, route_id=4, length=16), bytes(range(16)), CFG)
    sequence = frames[:4] + [bad] + frames[4:]
    expected = {p: [] for p in range(CFG.n_ports)}
    for f in sequence:
        for p, out in model.receive(1, f):
            expected[p].append(out)
    for p, out in model.receive(0, back):
        expected[p].append(out)
    for f in sequence:
        await env.src[1].send(AxiStreamFrame(f))
    await env.src[0].send(AxiStreamFrame(back))
    for p in range(CFG.n_ports):
        for want in expected[p]:
            got = await env.snk[p].recv()
            assert bytes(got.tdata) == want, f"port {p}: frame differs"
    await ClockCycles(dut.clk, 50)
    for p in range(CFG.n_ports):
        assert env.snk[p].empty(), f"port {p}: unexpected extra frame"
    assert len(expected[0]) == 8 and len(expected[1]) == 1
    assert await env.read(Reg.ERR_BASE + 4 * ErrorCause.LENGTH) == model.errors[ErrorCause.LENGTH] == 1
    assert await env.read(Reg.RX_FRAMES) == 9


@cocotb.test()
async def reduction_softmax_merge_and_sum(dut):
    """Four online-softmax partials (one per network port) merge into one result on m_axis,
    bit-identical to golden; then an int32 all-reduce sum of three vectors."""
    await reset(dut)
    env = Env(dut, 2)
    model = NicModel(CFG, node_id=0, num_nodes=16)
    table = {r: RouteEntry(0b00001, 4) for r in range(4)}
    table.update({r: RouteEntry(0b00001, 3) for r in range(4, 7)})
    await env.configure(model, table)
    d = 6
    partials = []
    for s in range(4):
        m = env.rng.randrange(-5000, 5000)
        payload = encode_partial(m, env.rng.randrange(1, 2 ** 30),
                                 [env.rng.randrange(-2 ** 30, 2 ** 30) for _ in range(d)])
        partials.append(make_frame(MetaFields(op=MetaOp.PARTIAL_STATE, reduce_op=ReduceOp.SOFTMAX_MERGE,
                                              stage=Stage.DECODE, src=4 - s, dst=0, route_id=s,
                                              kv_id=(0, 0), length=len(payload)), payload, CFG))
    sums = []
    for s in range(3):
        payload = encode_i32([env.rng.randrange(-2 ** 31, 2 ** 31) for _ in range(8)])
        sums.append(make_frame(MetaFields(op=MetaOp.REDUCTION, reduce_op=ReduceOp.SUM,
                                          collective=Collective.ALL_REDUCE, src=7 + s, dst=12,
                                          route_id=4 + s, length=len(payload)), payload, CFG))
    expected = []
    for i, f in enumerate(partials):
        expected += [out for _, out in model.receive(1 + i, f)]
    for i, f in enumerate(sums):
        expected += [out for _, out in model.receive(1 + i, f)]
    assert len(expected) == 2
    for i, f in enumerate(partials):
        await env.src[1 + i].send(AxiStreamFrame(f))
    got = await env.snk[0].recv()
    assert bytes(got.tdata) == expected[0], "softmax merge differs from golden"
    for i, f in enumerate(sums):
        await env.src[1 + i].send(AxiStreamFrame(f))
    got = await env.snk[0].recv()
    assert bytes(got.tdata) == expected[1], "int32 sum differs from golden"
    assert await env.read(Reg.ERR_BASE + 4 * ErrorCause.REDUCE) == 0
