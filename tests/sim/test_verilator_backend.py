"""Verilator backend: AXI4-Lite on the register file against its golden twin, AXI-Stream
frames with back-pressure, links between simulated nodes, and build/port errors."""
import random

import pytest
from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from mcf_fpga.hdl.bus import AXI4Signature
from mcf_fpga.sim.verilator import Cluster, VerilatorBuildError, build, build_from_sources

from .sample_top import SampleTop
from tests.hdl.bus.test_regfile import REGS, GoldenRegFile

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")


@pytest.fixture(scope="module")
def sample_model():
    """SampleTop: the register file on s_axi and an AXIS register slice (the cocotb tests
    use the same top)."""
    return build(SampleTop())


def test_regfile_over_axi_lite_matches_golden(sample_model):
    model = sample_model.new()
    gold = GoldenRegFile(REGS, 6)
    model.reset()
    rng = random.Random(1)
    status = 0x12345678
    model.poke("status", status)
    for _ in range(400):
        addr = rng.choice([0x0, 0x4, 0x8, 0xC, rng.randrange(64)])
        if rng.random() < 0.5:
            data, strb = rng.getrandbits(32), rng.randrange(16)
            assert model.axil_write(addr, data, strb) == gold.write(addr, data, strb), hex(addr)
        else:
            assert model.axil_read(addr) == gold.read(addr, status), hex(addr)
        assert model.peek("ctrl") == gold.value["ctrl"]
        assert model.peek("narrow") == gold.value["narrow"]
    with pytest.raises(ValueError, match="no plain signal 'nope'"):
        model.peek("nope")
    with pytest.raises(ValueError, match="not an input"):
        model.poke("ctrl", 1)


def test_frames_round_trip_with_backpressure(sample_model):
    m = sample_model.new()
    m.reset()
    m.sink_backpressure("m_axis", seed=3)
    rng = random.Random(2)
    frames = [(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 100))), rng.randrange(4))
              for _ in range(200)]
    for f, u in frames:
        m.push("s_axis", f, u)
    m.step(20000)
    assert m.pending("s_axis") == 0
    assert m.pull_all("m_axis", with_user=True) == frames
    assert m.pull("m_axis") is None
    with pytest.raises(ValueError, match="no AXI-Stream input port 'x'"):
        m.push("x", b"1")
    with pytest.raises(ValueError, match="at least one byte"):
        m.push("s_axis", b"")


def test_cluster_links_forward_frames_in_order(sample_model):
    nodes = [sample_model.new() for _ in range(3)]
    cl = Cluster(chunk=32)
    for n in nodes:
        n.reset()
        cl.add(n)
    cl.link(nodes[0], "m_axis", nodes[1], "s_axis")
    cl.link(nodes[1], "m_axis", nodes[2], "s_axis")
    frames = [bytes([i]) * (1 + i % 37) for i in range(50)]
    for f in frames:
        nodes[0].push("s_axis", f, 1)
    cl.step(3000)
    assert nodes[2].pull_all("m_axis") == frames
    assert nodes[0].cycle == nodes[2].cycle == 3000


def test_a_forked_process_drops_its_parent_s_models_without_freeing_them(sample_model):
    """A process forked after a Model was made (a simulation rank) must not free the parent's
    instance: its C++ destructor can wait forever on a lock or thread the child does not have (a
    rank hung in a garbage collection of an inherited Model). The child's close() drops the
    handle without calling mcf_free; the parent's instance still steps and is freed once."""
    import os

    class Spy:
        def __init__(self, lib):
            self.lib, self.freed = lib, 0

        def __getattr__(self, name):
            return getattr(self.lib, name)

        def mcf_free(self, h):
            self.freed += 1
            self.lib.mcf_free(h)

    model = sample_model.new()
    model.reset()
    model._lib = spy = Spy(model._lib)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                     # the child: report, then leave at once
        try:
            model.close()
            os.write(w, bytes([spy.freed, model._h is None]))
        finally:
            os._exit(0)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    assert os.read(r, 2) == bytes([0, 1]) and status == 0
    os.close(r)
    c0 = model.cycle
    model.step(10)
    assert model.cycle == c0 + 10 and spy.freed == 0
    model.close()
    assert spy.freed == 1


def test_build_is_cached(sample_model):
    again = build(SampleTop())
    assert again._L.path == sample_model._L.path


def test_cpp_build_failure_shows_compiler_message():
    with pytest.raises(VerilatorBuildError, match=r"(?s)Verilator build failed.*error.*not_a_type"):
        build_from_sources("module top(input clk, input rst); endmodule\n",
                           '#include "Vtop.h"\nnot_a_type x;\n', jobs=1)   # -j1: stop at the error


def test_verilator_failure_shows_its_message():
    with pytest.raises(VerilatorBuildError, match=r"(?s)%Error.*top\.v"):
        build_from_sources("module top(input clk; endmodule\n", "int x;\n")


class _AXI4Slave(wiring.Component):
    s_axi4: In(AXI4Signature(32, 64, 2))

    def elaborate(self, platform):
        return Module()


def test_unsupported_port_is_named():
    with pytest.raises(ValueError, match=r"member 's_axi4': an axi4 slave port is not supported"):
        build(_AXI4Slave())
