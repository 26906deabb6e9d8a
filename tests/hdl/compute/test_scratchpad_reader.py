"""ScratchpadReader over a memory: for random walks and memory contents, ``out`` carries the walk's
words in pattern order (or, ``em_only``, the EM rows as words), each with its row's exponent and the
row / walk end marks, under random back-pressure; ``drained`` rises once all are out."""
from amaranth import Module, Mux, signed
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from hypothesis import given, settings, strategies as st

from mcf_fpga.hdl.compute.scratchpad_reader import ScratchpadReader
from mcf_fpga.sim.kit import StreamSink, run_simulation

SP, EM = 64, 16


class Bench(wiring.Component):
    """A reader on a SP memory (words) and an EM memory (int8 rows), as the engine wires reader A."""

    def __init__(self, sp, em):
        self.sp, self.em = sp, em
        self.rd = ScratchpadReader()
        super().__init__(dict(self.rd.signature.members))     # the reader's ports, passed through

    def elaborate(self, platform):
        m = Module()
        m.submodules.rd = rd = self.rd
        m.submodules.spm = spm = Memory(shape=signed(32), depth=SP, init=self.sp)
        m.submodules.emm = emm = Memory(shape=signed(8), depth=EM, init=self.em)
        sp_r, em_r = spm.read_port(), emm.read_port()
        m.d.comb += [rd.start.eq(self.start), rd.cfg.eq(self.cfg), rd.em_only.eq(self.em_only),
                     sp_r.addr.eq(rd.addr), em_r.addr.eq(Mux(self.em_only, rd.addr, rd.eaddr)), rd.rdata.eq(sp_r.data), rd.edata.eq(em_r.data),
                     self.addr.eq(rd.addr), self.eaddr.eq(rd.eaddr), self.drained.eq(rd.drained)]
        wiring.connect(m, rd.out, wiring.flipped(self.out))
        return m


@given(sp=st.lists(st.integers(-2 ** 31, 2 ** 31 - 1), min_size=SP, max_size=SP),
       em=st.lists(st.integers(-128, 127), min_size=EM, max_size=EM),
       base=st.integers(0, 20), so=st.integers(0, 12), si=st.integers(0, 6), no=st.integers(1, 2),
       ni=st.integers(1, 3), nj=st.integers(1, 4), ebase=st.integers(0, 5), eo=st.integers(0, 3),
       ei=st.integers(0, 2), em_only=st.booleans(), seed=st.integers(0, 2 ** 16), rp=st.sampled_from([1.0, 0.3]))
@settings(max_examples=20, deadline=None)
def test_reader_matches_pattern(sp, em, base, so, si, no, ni, nj, ebase, eo, ei, em_only, seed, rp):
    dut = Bench(sp, em)
    snk = StreamSink(dut.out, seed=seed, ready_prob=rp)
    walk = dict(base=base, so=so, si=si, no=no, ni=ni, nj=nj, ebase=ebase, eo=eo, ei=ei)
    out = {}

    async def tb(ctx):
        ctx.set(dut.em_only, em_only)
        for k, v in walk.items():
            ctx.set(getattr(dut.cfg, k), v)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        out["beats"] = await snk.collect(ctx, no * ni * nj)
        await ctx.tick()
        out["drained"] = ctx.get(dut.drained)
    run_simulation(dut, [tb], vcd=False, max_cycles=2000)
    exp = []
    for o in range(no):
        for i in range(ni):
            for j in range(nj):
                a = base + o * so + i * si + j
                e = em[a % EM] if em_only else em[ebase + o * eo + i * ei]
                exp.append({"data": e if em_only else sp[a], "e": e, "last_row": int(j == nj - 1),
                            "last": int(j == nj - 1 and i == ni - 1 and o == no - 1)})
    s = lambda v, b: (v & (1 << b) - 1) - ((v >> (b - 1) & 1) << b)
    got = [dict(b, data=s(b["data"], 32), e=s(b["e"], 8)) for b in out["beats"]]
    assert got == exp
    assert out["drained"] == 1
