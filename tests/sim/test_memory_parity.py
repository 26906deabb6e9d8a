"""One AXI4 trace on the Python AXI4Memory (Amaranth simulator) and on the C++ memory model
(Verilator backend): transaction logs, read beats (data + resp), B counts and final memory
must be identical, cycle for cycle."""
import pytest

from mcf_fpga.sim import AXI4Memory
from mcf_fpga.sim.axi4_trace_master import AXI4TraceMaster
from mcf_fpga.sim.kit import StreamSource, StreamSink, packets_to_beats, run_simulation
from mcf_fpga.sim.verilator import build

from .axi4_trace import MEM, make_trace, initial_memory


def _python_run(cmds, frames, init, DW):
    dut = AXI4TraceMaster(cmds, data_width=DW)
    mem = AXI4Memory(data_width=DW, **MEM)
    mem.load(MEM["base"], init)
    n_reads = sum(c[0] == "R" for c in cmds)
    n_writes = len(frames)
    src, snk = StreamSource(dut.s_axis), StreamSink(dut.m_axis)
    out = {}

    async def tx(ctx):
        await src.send(ctx, packets_to_beats(frames, DW))

    async def rx(ctx):
        out["r"] = await snk.collect_packets(ctx, n_reads, DW + 8)
        while ctx.get(dut.b_count) < n_writes:
            await ctx.tick()
        out["b"] = (ctx.get(dut.b_count), ctx.get(dut.b_errors))
    run_simulation(dut, [tx, rx], background=[mem.testbench(dut.m_axi)], max_cycles=20000)
    return mem.log, out["r"], out["b"], mem.dump(MEM["base"], MEM["size"])


@pytest.mark.parametrize("DW,n", [(64, 24), (128, 14)])   # QData and VlWide ports in C++
def test_python_and_cpp_memory_models_agree(DW, n):
    cmds, frames = make_trace(n=n, dw=DW)
    init = initial_memory()
    assert any(c[0] == "R" for c in cmds) and frames
    py_log, py_r, py_b, py_mem = _python_run(cmds, frames, init, DW)

    model = build(AXI4TraceMaster(cmds, data_width=DW))
    mem = model.memory("m_axi", MEM["size"], base=MEM["base"], latency=MEM["latency"],
                       bytes_per_cycle=MEM["bytes_per_cycle"],
                       max_outstanding=MEM["max_outstanding"], error_ranges=MEM["error_ranges"],
                       ready_seed=MEM["ready_seed"])
    mem.load(MEM["base"], init)
    for f in frames:
        model.push("s_axis", f)
    model.reset()
    n_reads = sum(c[0] == "R" for c in cmds)
    got = []
    for _ in range(200):
        model.step(50)
        got += model.pull_all("m_axis")
        if len(got) == n_reads and model.peek("b_count") == len(frames):
            break
    cpp_b = (model.peek("b_count"), model.peek("b_errors"))

    # the trace exercises what it should
    resps = {r[4] for r in py_log}
    assert {0, 2, 3} <= {int(r) for r in resps}, resps
    assert py_b[1] > 0
    assert len(py_log) == len(cmds)
    # and both models agree exactly
    assert mem.log == py_log
    assert got == py_r
    assert cpp_b == py_b
    assert mem.dump(MEM["base"], MEM["size"]) == py_mem
    assert py_mem != init          # writes landed
