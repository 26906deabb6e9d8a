"""Striped DMA reader: one descriptor read over several AXI4 read ports at once, merged in order.

The node's weight tiles stream from DDR through one HP port at 16 B/cycle, a quarter of what
the engine's GEMM array takes (one 256-byte weight beat per cycle at KR260). This reader deals a
descriptor's ``stripe_bytes`` chunks round robin over ``lanes`` read ports (chunk k, at
``addr + k * stripe_bytes``, to lane ``k mod lanes``, as that lane's own ``hdl.dma.DMAReader``
descriptor) and merges them back in chunk order on one stream of ``stripe_bytes``-wide beats.

Contract
--------
* ``desc`` ``{addr, length}`` (bytes). Legal when ``spec.dma.check_descriptor`` of the reader's
  parameters says OK and ``length`` is a multiple of ``stripe_bytes`` (else ``MISALIGNED``).
  A legal descriptor produces ``length / stripe_bytes`` beats on ``data`` (``data``: chunk k's
  bytes, byte 0 in bits 0..7; ``last`` on the final chunk), then one ``status``
  ``{code, addr}``: OK and the descriptor's address, or the code and address of the first
  failing HP beat in stream order (SLVERR/DECERR; the beats are still delivered, carrying
  what the slave sent). An illegal descriptor issues nothing on any bus and gets only its
  status, in order. These are ``DMAReader``'s answers, with ``stripe_bytes`` beats.
* Each lane is a ``DMAReader`` (bursts of at most ``max_burst`` beats, never across 4 KB,
  ``max_outstanding`` per lane, ARID 0): lane answers come back in order per lane, so the
  merge needs no reordering buffer beyond one stripe per lane.
* Back-pressure on ``data`` stalls every lane's RREADY once its stripe buffer is full; on
  ``status`` it stalls the merge. Nothing is dropped.
"""
from amaranth import Module, Signal, Mux
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import AXI4Signature
from mcf_fpga.hdl.dma import DMAReader
from mcf_fpga.hdl.dma.common import descriptor_check, descriptor_layout, status_layout
from mcf_fpga.spec.dma import DmaParams, DmaStatus

__all__ = ["StripedReader", "MAX_LANES"]

MAX_LANES = 8
PLAN_DEPTH = 4


class StripedReader(wiring.Component):
    """``lanes`` DMA read lanes behind one descriptor stream (module docstring).

    Parameters: ``lanes`` (1..8), ``stripe_bytes`` (the bus width times a power of two) and
    those of :class:`spec.dma.DmaParams` (``max_length`` limits the whole descriptor).

    Members: ``desc`` (In), ``data`` (Out, ``{data: 8 stripe_bytes, last: 1}``), ``status``
    (Out ``{code, addr}``), ``m_axi<i>`` (Out ``AXI4Signature``) for i in 0..lanes-1.
    """

    def __init__(self, *, lanes, stripe_bytes, **params):
        self._MustUse__silence = True          # a refused reader is not an unused one
        self.p = p = DmaParams(**params)
        if not isinstance(lanes, int) or not 1 <= lanes <= MAX_LANES:
            raise ValueError(f"StripedReader lanes must be an integer in 1..{MAX_LANES}, got {lanes!r}")
        words = stripe_bytes // p.bytes_per_beat if stripe_bytes > 0 else 0
        if stripe_bytes % p.bytes_per_beat or words < 1 or words & (words - 1):
            raise ValueError(f"StripedReader stripe_bytes must be {p.bytes_per_beat} bytes (the bus width) "
                             f"times a power of two, got {stripe_bytes}")
        self._MustUse__silence = False
        self.lanes, self.stripe_bytes, self.words = lanes, stripe_bytes, words
        self.lane_params = {k: v for k, v in params.items() if k != "max_length"}
        axi = AXI4Signature(p.addr_width, p.data_width, p.id_width)
        super().__init__({
            "desc": In(stream.Signature(descriptor_layout(p.addr_width, p.len_width))),
            "data": Out(stream.Signature(data.StructLayout({"data": 8 * stripe_bytes, "last": 1}))),
            "status": Out(stream.Signature(status_layout(p.addr_width))),
            **{f"m_axi{i}": Out(axi) for i in range(lanes)},
        })

    def elaborate(self, platform):
        m = Module()
        p, L = self.p, self.lanes
        rd = []
        for i in range(L):
            m.submodules[f"lane{i}"] = r = DMAReader(**self.lane_params)
            wiring.connect(m, r.m_axi, wiring.flipped(getattr(self, f"m_axi{i}")))
            rd.append(r)
        cw = p.len_width + 1
        plan = data.StructLayout({"ok": 1, "code": 4, "addr": p.addr_width, "chunks": cw})
        m.submodules.plan_data = pd = fifo.SyncFIFOBuffered(width=cw, depth=PLAN_DEPTH)
        m.submodules.plan_status = ps = fifo.SyncFIFOBuffered(width=plan.size, depth=PLAN_DEPTH)
        self._deal(m, rd, pd, ps, plan)
        merged = self._merge(m, [self._gather(m, r.data, i) for i, r in enumerate(rd)], pd)
        self._collect(m, rd, ps, plan, merged)
        return m

    def _deal(self, m, rd, pd, ps, plan):
        """Descriptor -> checked plan entries (both FIFOs) and one lane descriptor per chunk."""
        p, L, sl = self.p, self.lanes, (self.stripe_bytes - 1).bit_length()
        d = self.desc.payload
        active = Signal()
        cur = Signal(p.addr_width)
        rem = Signal(p.len_width + 1)
        lane = Signal(range(L))
        chk = descriptor_check(m, p, d.addr, d.length)
        code = Signal(4)
        m.d.comb += code.eq(Mux((chk == DmaStatus.OK) & (d.length[:sl] != 0), DmaStatus.MISALIGNED, chk))
        ok = code == DmaStatus.OK
        entry = Signal(plan)
        m.d.comb += [entry.ok.eq(ok), entry.code.eq(code), entry.addr.eq(d.addr),
                     entry.chunks.eq(d.length >> sl)]
        take = self.desc.valid & ~active & ps.w_rdy & pd.w_rdy
        m.d.comb += [self.desc.ready.eq(take), ps.w_data.eq(entry.as_value()), ps.w_en.eq(take),
                     pd.w_data.eq(entry.chunks), pd.w_en.eq(take & ok)]
        with m.If(take & ok):
            m.d.sync += [active.eq(1), cur.eq(d.addr), rem.eq(entry.chunks), lane.eq(0)]
        sent = Signal()
        for i, r in enumerate(rd):
            m.d.comb += [r.desc.valid.eq(active & (lane == i)), r.desc.payload.addr.eq(cur),
                         r.desc.payload.length.eq(self.stripe_bytes)]
            with m.If(lane == i):
                m.d.comb += sent.eq(r.desc.valid & r.desc.ready)
        with m.If(sent):
            m.d.sync += [cur.eq(cur + self.stripe_bytes), rem.eq(rem - 1),
                         lane.eq(Mux(lane == L - 1, 0, lane + 1))]
            with m.If(rem == 1):
                m.d.sync += active.eq(0)

    def _gather(self, m, src, i):
        """Lane ``i``'s HP beats -> one stripe beat per ``words`` of them (a stream); takes the
        next stripe's first beat in the cycle the full one leaves."""
        n, dw = self.words, self.p.data_width
        out = stream.Signature(8 * self.stripe_bytes).create(path=(f"stripe{i}",))
        if n == 1:
            m.d.comb += [out.valid.eq(src.valid), out.payload.eq(src.payload.data), src.ready.eq(out.ready)]
            return out
        buf = Signal(n * dw, name=f"stripe{i}_buf")
        cnt = Signal(range(n + 1), name=f"stripe{i}_cnt")
        full = Signal(name=f"stripe{i}_full")
        drain = out.valid & out.ready
        m.d.comb += [out.valid.eq(full), out.payload.eq(buf), src.ready.eq(~full | out.ready)]
        with m.If(drain):
            m.d.sync += [full.eq(0), cnt.eq(0)]
        with m.If(src.valid & src.ready):
            c = Mux(drain, 0, cnt)
            with m.Switch(c):
                for k in range(n):
                    with m.Case(k):
                        m.d.sync += buf[dw * k:dw * (k + 1)].eq(src.payload.data)
            m.d.sync += cnt.eq(c + 1)
            with m.If(c == n - 1):
                m.d.sync += full.eq(1)
        return out

    def _merge(self, m, stripes, pd):
        """Stripe beats from lane 0, 1, ..., L-1, 0, ... -> ``data``, ``last`` on the plan's count."""
        L = self.lanes
        lane = Signal(range(L), name="merge_lane")
        done = Signal(self.p.len_width + 1, name="merge_done")
        last = Signal()
        m.d.comb += last.eq(done == pd.r_data - 1)
        with m.Switch(lane):
            for i, s in enumerate(stripes):
                with m.Case(i):
                    m.d.comb += [self.data.valid.eq(pd.r_rdy & s.valid), self.data.payload.data.eq(s.payload),
                                 s.ready.eq(pd.r_rdy & self.data.ready)]
        m.d.comb += self.data.payload.last.eq(last)
        with m.If(self.data.valid & self.data.ready):
            m.d.sync += [lane.eq(Mux((lane == L - 1) | last, 0, lane + 1)), done.eq(Mux(last, 0, done + 1))]
            m.d.comb += pd.r_en.eq(last)
        return pd.r_en

    def _collect(self, m, rd, ps, plan, merged):
        """Lane statuses in chunk order -> one status per descriptor (refused ones: their code),
        a legal one's only once its last beat has left ``data`` (``merged`` pulses then)."""
        L = self.lanes
        head = data.View(plan, ps.r_data)
        lane = Signal(range(L), name="st_lane")
        seen = Signal(self.p.len_width + 1, name="st_seen")
        err = Signal(name="st_err")
        err_code = Signal(4, name="st_err_code")
        err_addr = Signal(self.p.addr_width, name="st_err_addr")
        credit = Signal(range(PLAN_DEPTH + 2), name="st_credit")     # descriptors merged, status not yet sent
        fin = ps.r_rdy & (~head.ok | ((seen == head.chunks) & (credit != 0)))
        st = self.status.payload
        m.d.comb += [self.status.valid.eq(fin),
                     st.code.eq(Mux(head.ok, Mux(err, err_code, DmaStatus.OK), head.code)),
                     st.addr.eq(Mux(head.ok & err, err_addr, head.addr))]
        sent_ok = Signal()
        with m.If(self.status.valid & self.status.ready):
            m.d.comb += [ps.r_en.eq(1), sent_ok.eq(head.ok)]
            m.d.sync += [lane.eq(0), seen.eq(0), err.eq(0)]
        m.d.sync += credit.eq(credit + merged - sent_ok)
        want = ps.r_rdy & head.ok & (seen != head.chunks)
        got, code, addr = Signal(), Signal(4), Signal(self.p.addr_width)
        for i, r in enumerate(rd):
            with m.If(lane == i):
                m.d.comb += [r.status.ready.eq(want), got.eq(want & r.status.valid),
                             code.eq(r.status.payload.code), addr.eq(r.status.payload.addr)]
        with m.If(got):
            m.d.sync += [seen.eq(seen + 1), lane.eq(Mux(lane == L - 1, 0, lane + 1))]
            with m.If((code != DmaStatus.OK) & ~err):
                m.d.sync += [err.eq(1), err_code.eq(code), err_addr.eq(addr)]
