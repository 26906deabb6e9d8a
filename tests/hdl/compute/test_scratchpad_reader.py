"""ScratchpadReader over a memory: for random walks and memory contents, ``out`` carries the walk's
words in pattern order (or, ``em_only``, the EM rows as words), each with its row's exponent and the
row / walk end marks, under random back-pressure; ``drained`` rises once all are out. ``pairs``:
on a paired scratchpad (``PairedScratchpad``), one word or (``pair``, even addresses) two words a beat."""
from amaranth import Module, Mux, signed
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from hypothesis import given, settings, strategies as st

from mcf_fpga.hdl.compute.paired_scratchpad import PairedScratchpad
from mcf_fpga.hdl.compute.scratchpad_reader import ScratchpadReader
from mcf_fpga.sim.kit import StreamSink, run_simulation

SP, EM = 64, 16


class Bench(wiring.Component):
    """A reader on a SP memory (words) and an EM memory (int8 rows), as the engine wires reader A."""

    def __init__(self, sp, em, pairs=False):
        self.sp, self.em, self.pairs = sp, em, pairs
        self.rd = ScratchpadReader(pairs=pairs)
        members = dict(self.rd.signature.members)             # the reader's ports, passed through
        members.pop("rdata1", None)
        if pairs:                # the words are written through the scratchpad's port first
            self.spm = PairedScratchpad(SP)
            members.update(w=self.spm.signature.members["w"])
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.rd = rd = self.rd
        m.submodules.emm = emm = Memory(shape=signed(8), depth=EM, init=self.em)
        em_r = emm.read_port()
        if self.pairs:
            m.submodules.spm = spm = self.spm
            wiring.connect(m, wiring.flipped(self.w), spm.w)
            m.d.comb += [spm.ra.addr.eq(rd.addr), rd.rdata.eq(spm.ra.data), rd.rdata1.eq(spm.ra.data1),
                         rd.pair.eq(self.pair)]
        else:
            m.submodules.spm = spm = Memory(shape=signed(32), depth=SP, init=self.sp)
            sp_r = spm.read_port()
            m.d.comb += [sp_r.addr.eq(rd.addr), rd.rdata.eq(sp_r.data)]
        m.d.comb += [rd.start.eq(self.start), rd.cfg.eq(self.cfg), rd.em_only.eq(self.em_only),
                     em_r.addr.eq(Mux(self.em_only, rd.addr, rd.eaddr)), rd.edata.eq(em_r.data),
                     self.addr.eq(rd.addr), self.eaddr.eq(rd.eaddr), self.drained.eq(rd.drained)]
        wiring.connect(m, rd.out, wiring.flipped(self.out))
        return m


@given(sp=st.lists(st.integers(-2 ** 31, 2 ** 31 - 1), min_size=SP, max_size=SP),
       em=st.lists(st.integers(-128, 127), min_size=EM, max_size=EM),
       base=st.integers(0, 20), so=st.integers(0, 12), si=st.integers(0, 6), no=st.integers(1, 2),
       ni=st.integers(1, 3), nj=st.integers(1, 4), ebase=st.integers(0, 5), eo=st.integers(0, 3),
       ei=st.integers(0, 2), em_only=st.booleans(), seed=st.integers(0, 2 ** 16), rp=st.sampled_from([1.0, 0.3]),
       pairs=st.sampled_from([0, 1, 2]))
@settings(max_examples=24, deadline=None)
def test_reader_matches_pattern(sp, em, base, so, si, no, ni, nj, ebase, eo, ei, em_only, seed, rp, pairs):
    """pairs 0: the one-word reader on a memory; 1: the two-word reader on a paired scratchpad,
    a one-word walk; 2: a pair walk (``nj``, ``base``, ``so``, ``si`` doubled: even addresses, two
    words a beat; not em_only)."""
    pair = pairs == 2
    if pair:
        nj, em_only = 2 * nj, False
        base, so, si = 2 * (base // 2), 2 * (so // 2), 2 * (si // 2)
    dut = Bench(sp, em, pairs=bool(pairs))
    snk = StreamSink(dut.out, seed=seed, ready_prob=rp)
    walk = dict(base=base, so=so, si=si, no=no, ni=ni, nj=nj, ebase=ebase, eo=eo, ei=ei)
    out = {}

    async def tb(ctx):
        if pairs:                # fill the two-bank scratchpad, a pair of words a cycle
            ctx.set(dut.w.en, 1)
            ctx.set(dut.w.pair, 1)
            for a in range(0, SP, 2):
                ctx.set(dut.w.addr, a)
                ctx.set(dut.w.data, sp[a])
                ctx.set(dut.w.data1, sp[a + 1])
                await ctx.tick()
            ctx.set(dut.w.en, 0)
            ctx.set(dut.pair, pair)
        ctx.set(dut.em_only, em_only)
        for k, v in walk.items():
            ctx.set(getattr(dut.cfg, k), v)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        out["beats"] = await snk.collect(ctx, no * ni * nj // (1 + pair))
        await ctx.tick()
        out["drained"] = ctx.get(dut.drained)
    run_simulation(dut, [tb], vcd=False, max_cycles=2000)
    exp = []
    for o in range(no):
        for i in range(ni):
            for j in range(0, nj, 1 + pair):
                a = base + o * so + i * si + j
                e = em[a % EM] if em_only else em[ebase + o * eo + i * ei]
                exp.append({"data": e if em_only else sp[a], "e": e, "last_row": int(j == nj - 1 - pair),
                            "last": int(j == nj - 1 - pair and i == ni - 1 and o == no - 1)})
                if pair:
                    exp[-1]["data1"] = sp[a + 1]
    s = lambda v, b: (v & (1 << b) - 1) - ((v >> (b - 1) & 1) << b)
    got = [dict(b, data=s(b["data"], 32), e=s(b["e"], 8)) for b in out["beats"]]
    for g in got if pairs else ():
        if pair:
            g["data1"] = s(g["data1"], 32)
        else:
            del g["data1"]
    assert got == exp
    assert out["drained"] == 1
