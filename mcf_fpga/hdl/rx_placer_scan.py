"""RxKeyScan: the RX placer's key table and its scan (which entry a packet's key matches).

Contract
--------
* ``write`` programs the key of entry ``sel`` (``wkey``: the key, then ``key_any_layer`` on
  top). Keys are in LUT-RAM, lane ``l`` holding entries ``l, L + l, 2L + l, ...``.
* ``start`` (one cycle) loads ``key`` and scans from row 0; ``scanning`` is high from the next
  cycle until the verdict. Row ``r`` compares entries ``rL .. rL + L-1`` that are ``valid``:
  equal kind, src and block, and layer unless the entry matches any layer.
* ``resolve`` (combinational) is the verdict cycle: a row hit or the last row, while
  ``restart`` is low and ``accept`` high. ``hit`` says whether a row entry matched and
  ``found`` is the lowest one. ``restart`` (a table change) rescans from row 0 instead.
* ``start`` and ``resolve`` never come in the same cycle (the receiver holds its input meanwhile).
"""
from amaranth import Cat, Module, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

__all__ = ["RxKeyScan"]


class RxKeyScan(wiring.Component):
    """See module docstring. ``entries``; ``lanes``: entries compared per cycle (a power of two);
    ``key_width``: bits of a key; ``layer``: ``(lo, hi)``, the layer's bits in a key."""

    def __init__(self, *, entries: int, lanes: int, key_width: int, layer: tuple):
        self.entries, self.lanes, self.key_width, self.layer = entries, lanes, key_width, layer
        self.rows = -(-entries // lanes)
        self.lane_bits = (lanes - 1).bit_length()
        self.row_bits = max(1, (self.rows - 1).bit_length())
        super().__init__({
            "write": In(1),
            "sel": In(self.lane_bits + self.row_bits),
            "wkey": In(key_width + 1),
            "valid": In(self.rows * lanes),
            "start": In(1),
            "key": In(key_width),
            "restart": In(1),
            "accept": In(1),
            "scanning": Out(1),
            "resolve": Out(1),
            "hit": Out(1),
            "found": Out(range(max(entries, 2))),
        })

    def elaborate(self, platform):
        m = Module()
        L, D, kw, lb = self.lanes, self.rows, self.key_width, self.lane_bits
        lo, hi = self.layer
        skey = Signal(kw)                         # the key being matched
        row = Signal(range(max(D, 2)))
        hits = Signal(L)
        for l in range(L):
            km = Memory(shape=unsigned(kw + 1), depth=D, init=[])
            m.submodules[f"keys{l}"] = km
            kwp = km.write_port()
            m.d.comb += [kwp.addr.eq(self.sel[lb:lb + self.row_bits]), kwp.data.eq(self.wkey),
                         kwp.en.eq(self.write & (self.sel[:lb] == l))]
            rp = km.read_port(domain="comb")
            key, anyl = rp.data[:kw], rp.data[kw]
            vl = Cat(self.valid[d * L + l] for d in range(D))
            m.d.comb += [rp.addr.eq(row),
                         hits[l].eq(vl.bit_select(row, 1) & (key[:lo] == skey[:lo]) & (key[hi:] == skey[hi:])
                                    & (anyl | (key[lo:hi] == skey[lo:hi])))]
        hit_lane = Signal(range(max(L, 2)))
        for l in reversed(range(L)):
            with m.If(hits[l]):
                m.d.comb += hit_lane.eq(l)
        scanning, resolve = self.scanning, self.resolve
        m.d.comb += [self.found.eq(row * L + hit_lane), self.hit.eq(hits.any()),
                     resolve.eq(scanning & (hits.any() | (row == D - 1)) & ~self.restart & self.accept)]
        with m.If(scanning & ~resolve):
            with m.If(self.restart):
                m.d.sync += row.eq(0)
            with m.Elif(~hits.any() & (row != D - 1)):
                m.d.sync += row.eq(row + 1)
        with m.If(self.start):
            m.d.sync += [scanning.eq(1), row.eq(0), skey.eq(self.key)]
        with m.If(resolve):
            m.d.sync += scanning.eq(0)
        return m
