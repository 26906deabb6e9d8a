"""AXI4 write arbiter: the write channels (AW/W/B) of ``n`` masters onto one slave port.

Used on the KR260 board top to share S_AXI_HP0_FPD's write channels between the front-end's
RX-ring writer and the node's RX placer (mcf_fpga/boards/node_top.py). The reference model and the
checks the property test applies are :mod:`golden.axi_write_arbiter`.

Contract
--------
* Masters ``s_axi0`` .. ``s_axi<n-1>`` (``In(AXI4Signature)``, all of the same widths as
  ``m_axi``): only AW, W and B are used. Their AR is never ready and R never valid; ``m_axi``'s
  AR is never valid and its RREADY is 0 (a caller sharing the port's reads wires AR/R itself).
* **Grant** (round robin): while fewer than ``max_outstanding`` granted bursts await their B
  response, a master with AWVALID is granted; among several, the first after the last granted
  one in cyclic order (``0, 1, ..., n-1, 0, ...``). The granted AW goes to ``m_axi`` with its
  fields unchanged except the ID, which is 0 (so the slave answers in AW order); ``m_axi``'s
  AWVALID then stays high with that payload until AWREADY (a grant is never withdrawn).
* **W**: the W beats on ``m_axi`` are the granted bursts' W beats, burst after burst in grant
  order, each burst's beats all from its master up to and including its WLAST (no interleaving:
  AXI4 has none). A master's W beats may come before its AW is granted: they wait (WREADY 0)
  until the bursts granted before theirs have passed. Each burst's W may start as soon as it is
  granted, before AWREADY (the arbiter never waits for AWREADY to offer W).
* **B**: the slave's responses come in AW order (all IDs 0); each goes to the master of that
  burst with the master's own AWID restored and RESP unchanged. A master holding BREADY low
  stalls only ``m_axi``'s BREADY.
* Masters must send exactly ``AWLEN + 1`` W beats per burst, WLAST on the last one only
  (the arbiter switches W masters on WLAST), and keep the AXI handshake rules.
* Fairness: a master holding AWVALID is granted before any other master is granted twice.
* Latency: a grant and its first presentation on ``m_axi`` are the same cycle (AW, W and B
  paths are combinational from the masters to the slave; no register stage).
"""
from amaranth import Module, Mux, Signal
from amaranth.lib import fifo, wiring
from amaranth.lib.wiring import In, Out

from .axi4 import AXI4Signature

__all__ = ["AXI4WriteArbiter"]


class AXI4WriteArbiter(wiring.Component):
    """See the module docstring.

    Parameters
    ----------
    n : int
        Masters, 2..8.
    addr_width, data_width, id_width : int
        Every port's (:class:`hdl.bus.AXI4Signature`).
    max_outstanding : int
        Granted bursts awaiting their B response, at most (1..64).
    """

    def __init__(self, n: int = 2, *, addr_width: int = 40, data_width: int = 128, id_width: int = 4,
                 max_outstanding: int = 8):
        if isinstance(n, bool) or not isinstance(n, int) or not 2 <= n <= 8:
            self._MustUse__silence = True
            raise ValueError(f"n (masters) must be an integer in 2..8, got {n!r}")
        if isinstance(max_outstanding, bool) or not isinstance(max_outstanding, int) or not 1 <= max_outstanding <= 64:
            self._MustUse__silence = True
            raise ValueError(f"max_outstanding must be an integer in 1..64, got {max_outstanding!r}")
        self.n, self.max_outstanding = n, max_outstanding
        sig = AXI4Signature(addr_width, data_width, id_width)
        members = {f"s_axi{i}": In(sig) for i in range(n)}
        members["m_axi"] = Out(sig)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        n, mb = self.n, self.m_axi
        ss = [getattr(self, f"s_axi{i}") for i in range(n)]
        iw = len(mb.aw.payload.id)
        ib = (n - 1).bit_length()
        # bursts granted, in grant order: whose W passes (master) and whose B comes back (master, AWID)
        m.submodules.wq = wq = fifo.SyncFIFOBuffered(width=ib, depth=self.max_outstanding)
        m.submodules.bq = bq = fifo.SyncFIFOBuffered(width=ib + iw, depth=self.max_outstanding)
        for s in ss:
            m.d.comb += [s.ar.ready.eq(0), s.r.valid.eq(0)]
        m.d.comb += [mb.ar.valid.eq(0), mb.r.ready.eq(0)]

        # ---- AW: round-robin grant, held until AWREADY ----
        last = Signal(range(n), init=n - 1)       # the last granted master
        locked = Signal()                         # a granted AW waits for AWREADY
        held = Signal(range(n))                   # ... from this master
        pick = Signal(range(n))
        valids = [s.aw.valid for s in ss]
        # the first valid master after `last` in cyclic order: try offsets n-1 .. 1 then 0 last
        for off in reversed(range(1, n + 1)):
            for g in range(n):
                with m.If((last == g) & valids[(g + off) % n]):
                    m.d.comb += pick.eq((g + off) % n)
        grant = Signal()
        m.d.comb += grant.eq(~locked & self._any_at(m, valids, pick) & wq.w_rdy & bq.w_rdy)
        cur = Signal(range(n))
        m.d.comb += cur.eq(Mux(locked, held, pick))
        with m.Switch(cur):
            for i, s in enumerate(ss):
                with m.Case(i):
                    m.d.comb += [mb.aw.payload.eq(s.aw.payload), s.aw.ready.eq(mb.aw.ready & (locked | grant))]
        m.d.comb += [mb.aw.payload.id.eq(0), mb.aw.valid.eq(locked | grant),
                     wq.w_data.eq(pick), wq.w_en.eq(grant),
                     bq.w_data.eq(pick | self._aw_id(m, ss, pick) << ib), bq.w_en.eq(grant)]
        with m.If(grant):
            m.d.sync += [last.eq(pick), held.eq(pick)]
            with m.If(~mb.aw.ready):
                m.d.sync += locked.eq(1)
        with m.If(locked & mb.aw.ready):
            m.d.sync += locked.eq(0)

        # ---- W: the head burst's master until its WLAST ----
        wh = wq.r_data
        with m.Switch(wh):
            for i, s in enumerate(ss):
                with m.Case(i):
                    m.d.comb += [mb.w.payload.eq(s.w.payload), mb.w.valid.eq(wq.r_rdy & s.w.valid),
                                 s.w.ready.eq(wq.r_rdy & mb.w.ready)]
        m.d.comb += wq.r_en.eq(mb.w.valid & mb.w.ready & mb.w.payload.last)

        # ---- B: in AW order, to the head burst's master with its AWID ----
        bh, bid = bq.r_data[:ib], bq.r_data[ib:]
        with m.Switch(bh):
            for i, s in enumerate(ss):
                with m.Case(i):
                    m.d.comb += [s.b.valid.eq(bq.r_rdy & mb.b.valid), mb.b.ready.eq(bq.r_rdy & s.b.ready)]
        for s in ss:
            m.d.comb += [s.b.payload.resp.eq(mb.b.payload.resp), s.b.payload.id.eq(bid)]
        m.d.comb += bq.r_en.eq(mb.b.valid & mb.b.ready)
        return m

    @staticmethod
    def _any_at(m, valids, idx):
        v = Signal()
        with m.Switch(idx):
            for i, x in enumerate(valids):
                with m.Case(i):
                    m.d.comb += v.eq(x)
        return v

    @staticmethod
    def _aw_id(m, ss, idx):
        v = Signal(len(ss[0].aw.payload.id))
        with m.Switch(idx):
            for i, s in enumerate(ss):
                with m.Case(i):
                    m.d.comb += v.eq(s.aw.payload.id)
        return v
