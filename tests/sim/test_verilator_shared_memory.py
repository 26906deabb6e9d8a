"""Verilator backend: ``Model.memory(port, share=other)`` -- two AXI4 masters of one design over one
memory image (the node's KV streamer and KV installer both reach the KV region in DDR).

Two trace masters, A and B, each write one half of the image and read the other half; both ports
have a read latency (600 cycles) far longer than the writes take to land, so every read returns the
other master's bytes. Checked against a golden image built from the traces: the read beats of each
master, the final image through both handles, loads through one handle seen by the other; each
port keeps its own log (only its own transactions) and its own parameters; misuse is refused with
the argument named."""
import random

import pytest
from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import AXI4Signature, Burst, PacketSignature
from mcf_fpga.sim.axi4_trace_master import AXI4TraceMaster
from mcf_fpga.sim.verilator import build

DW, BASE, SIZE = 64, 0x2000, 2048
BPB = DW // 8
HALF = SIZE // 2


class TwoMasters(wiring.Component):
    """Two AXI4TraceMasters side by side: ports ``m_axi_a``/``s_axis_a``/``m_axis_a`` and ``_b``."""

    def __init__(self, cmds_a, cmds_b):
        self.a, self.b = AXI4TraceMaster(cmds_a, data_width=DW), AXI4TraceMaster(cmds_b, data_width=DW)
        members = {}
        for n in "ab":
            members.update({f"m_axi_{n}": Out(AXI4Signature(32, DW, 2)), f"s_axis_{n}": In(PacketSignature(DW)),
                            f"m_axis_{n}": Out(PacketSignature(DW + 8)), f"b_count_{n}": Out(16)})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        for n in "ab":
            t = getattr(self, n)
            m.submodules[n] = t
            wiring.connect(m, t.m_axi, wiring.flipped(getattr(self, f"m_axi_{n}")))
            wiring.connect(m, wiring.flipped(getattr(self, f"s_axis_{n}")), t.s_axis)
            wiring.connect(m, t.m_axis, wiring.flipped(getattr(self, f"m_axis_{n}")))
            m.d.comb += getattr(self, f"b_count_{n}").eq(t.b_count)
        return m


def traces(seed=4):
    """A writes bursts into the low half and reads the high half; B the other way round."""
    rng = random.Random(seed)
    out = {}
    for n, (wlo, rlo) in (("a", (0, HALF)), ("b", (HALF, 0))):
        cmds, frames = [], []
        for _ in range(6):
            ln = rng.randrange(0, 8)
            off = wlo + BPB * rng.randrange(0, (HALF - (ln + 1) * BPB) // BPB)
            cmds.append(("W", BASE + off, ln, 3, int(Burst.INCR)))
            frames.append(bytes(rng.randrange(256) for _ in range((ln + 1) * BPB)))
        for _ in range(5):
            ln = rng.randrange(0, 8)
            off = rlo + BPB * rng.randrange(0, (HALF - (ln + 1) * BPB) // BPB)
            cmds.append(("R", BASE + off, ln, 3, int(Burst.INCR)))
        out[n] = (cmds, frames)
    return out


@pytest.fixture(scope="module")
def built():
    tr = traces()
    return tr, build(TwoMasters(tr["a"][0], tr["b"][0]))


def golden_image(init, tr):
    img = bytearray(init)
    for cmds, frames in tr.values():
        for (k, addr, ln, _s, _b), f in zip([c for c in cmds if c[0] == "W"], frames):
            img[addr - BASE:addr - BASE + len(f)] = f
    return bytes(img)


def reads_of(img, cmds):
    """The m_axis frames a trace master delivers for its reads: per burst, rdata + an rresp byte per beat."""
    out = []
    for k, addr, ln, _s, _b in cmds:
        if k == "R":
            out.append(b"".join(img[addr - BASE + i * BPB:addr - BASE + (i + 1) * BPB] + b"\0" for i in range(ln + 1)))
    return out


def test_two_masters_share_one_image(built):
    tr, model = built
    m = model.new()
    init = bytes(random.Random(7).randrange(256) for _ in range(SIZE))
    a = m.memory("m_axi_a", SIZE, base=BASE, latency=600, ready_seed=3)
    b = m.memory("m_axi_b", latency=620, ready_seed=5, max_outstanding=2, share="m_axi_a")
    assert (b.size, b.base) == (SIZE, BASE)
    b.load(BASE, init)                        # a load through one handle ...
    assert a.dump(BASE, SIZE) == init         # ... is what the other sees
    for n in "ab":
        for f in tr[n][1]:
            m.push(f"s_axis_{n}", f)
    m.reset()
    got = {"a": [], "b": []}
    n_reads = {n: sum(c[0] == "R" for c in tr[n][0]) for n in "ab"}
    for _ in range(200):
        m.step(50)
        for n in "ab":
            got[n] += m.pull_all(f"m_axis_{n}")
        if all(len(got[n]) == n_reads[n] for n in "ab"):
            break
    want = golden_image(init, tr)
    assert a.dump(BASE, SIZE) == b.dump(BASE, SIZE) == want
    assert want[:HALF] != init[:HALF] and want[HALF:] != init[HALF:]      # both masters wrote
    for n in "ab":                            # every read saw the other master's writes
        assert got[n] == reads_of(want, tr[n][0]), n
        assert m.peek(f"b_count_{n}") == len(tr[n][1])
    # each port logged only its own transactions
    for n, mem in (("a", a), ("b", b)):
        assert sorted((kind, addr, ln) for _c, kind, addr, ln, _r in mem.log) == \
            sorted((k, ad, ln) for k, ad, ln, _s, _b in tr[n][0])


def test_unshared_ports_have_their_own_images(built):
    _tr, model = built
    m = model.new()
    a = m.memory("m_axi_a", SIZE, base=BASE)
    b = m.memory("m_axi_b", SIZE, base=BASE)
    a.load(BASE, b"\x11" * 16)
    assert b.dump(BASE, 16) == bytes(16)
    b2 = m.memory("m_axi_b", share="m_axi_a")          # now shared ...
    assert b2.dump(BASE, 16) == b"\x11" * 16
    b3 = m.memory("m_axi_b", SIZE, base=BASE)          # ... and own again
    assert b3.dump(BASE, 16) == bytes(16) and a.dump(BASE, 16) == b"\x11" * 16


def test_share_misuse_is_named(built):
    _tr, model = built
    m = model.new()
    with pytest.raises(ValueError, match="attach that port's memory first"):
        m.memory("m_axi_b", share="m_axi_a")
    m.memory("m_axi_a", SIZE, base=BASE)
    with pytest.raises(ValueError, match="cannot share its own"):
        m.memory("m_axi_a", share="m_axi_a")
    with pytest.raises(ValueError, match="share: no AXI4 master port 'm_axi_c'"):
        m.memory("m_axi_b", share="m_axi_c")
    with pytest.raises(ValueError, match="size=0x400 differs"):
        m.memory("m_axi_b", 1024, share="m_axi_a")
    with pytest.raises(ValueError, match="base=0x0 differs"):
        m.memory("m_axi_b", base=0, share="m_axi_a")
    with pytest.raises(ValueError, match="size is required"):
        m.memory("m_axi_b")
