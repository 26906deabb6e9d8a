"""hdl.fast_meminit: memories' initial contents written by the fast emitter give Amaranth's own
RTLIL text byte for byte (random widths, depths, signed and unsigned rows, all-zero and empty
contents, several memories), and Amaranth's emitter is back after the block, also on an error."""
import pytest
from amaranth import Cat, Module, signed, unsigned
from amaranth.back import rtlil
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out
from hypothesis import given, strategies as st

from mcf_fpga.hdl.fast_meminit import fast_memory_init


def _design(mems):
    """One read port per memory of ``mems`` ((shape, depth, init) each), all read at ``addr``."""
    class Mems(wiring.Component):
        addr: In(8)
        out: Out(sum(shape.width for shape, _d, _i in mems))

        def elaborate(self, platform):
            m = Module()
            outs = []
            for k, (shape, depth, init) in enumerate(mems):
                mem = memory.Memory(shape=shape, depth=depth, init=init)
                m.submodules[f"mem{k}"] = mem
                rp = mem.read_port()
                m.d.comb += rp.addr.eq(self.addr)
                outs.append(rp.data)
            m.d.comb += self.out.eq(Cat(*outs))
            return m
    return Mems()


@st.composite
def _memory(draw):
    width = draw(st.integers(1, 70))
    shape = draw(st.sampled_from([unsigned(width), signed(width)]))
    depth = draw(st.integers(1, 40))
    lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if shape.signed else (0, (1 << width) - 1)
    init = draw(st.one_of(st.just([]), st.just([0] * depth),
                          st.lists(st.integers(lo, hi), max_size=depth)))
    return shape, depth, init


@given(mems=st.lists(_memory(), min_size=1, max_size=4))
def test_same_rtlil_as_amaranth(mems):
    theirs = rtlil.convert(_design(mems), emit_src=False)
    with fast_memory_init():
        ours = rtlil.convert(_design(mems), emit_src=False)
    assert ours == theirs
    assert "$meminit_v2" in ours


def test_amaranths_emitter_is_back_after_the_block():
    before = rtlil.ModuleEmitter.emit_memory
    with pytest.raises(RuntimeError, match="boom"):
        with fast_memory_init():
            assert rtlil.ModuleEmitter.emit_memory is not before
            raise RuntimeError("boom")
    assert rtlil.ModuleEmitter.emit_memory is before
