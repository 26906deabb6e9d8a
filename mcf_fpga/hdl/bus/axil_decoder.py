"""AXI4-Lite address decoder: one slave port fanned out to several sub-buses by address window.

Contract
--------
* ``bus`` (slave, ``addr_width`` bits) is decoded against the windows given at construction:
  window ``name`` starts at ``base`` and spans ``2**sub_width`` bytes; the sub-bus member
  ``name`` (master, ``AXI4LiteSignature(sub_width)``) sees the offset ``addr - base``.
* One write and one read are in flight at a time (independently): a write is taken when
  ``aw`` and ``w`` are both valid, forwarded to its window's ``aw``/``w`` (each held until
  its ready), and the window's ``b`` answer is passed back; reads likewise (``ar`` -> ``r``).
  Back-pressure on ``b``/``r`` holds the answer; nothing is lost or reordered.
* An address in no window answers DECERR (reads return 0) without touching any sub-bus, so
  an unmapped access never hangs. A sub-bus that never answers stalls its own direction
  only (the sub-buses of this project all answer every request).
"""
from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .axi_lite import AXI4LiteSignature, Resp

__all__ = ["AXI4LiteDecoder"]


def _check_windows(addr_width, windows):
    windows = [(str(n), int(b), int(w)) for n, b, w in windows]
    if not windows:
        raise ValueError("AXI4LiteDecoder needs at least one window")
    names, spans = set(), []
    for name, base, sw in windows:
        if not name.isidentifier() or name == "bus" or name in names:
            raise ValueError(f"window name must be a unique identifier other than 'bus', got {name!r}")
        if not 1 <= sw <= addr_width:
            raise ValueError(f"window {name}: sub_width must be in 1..{addr_width}, got {sw}")
        if base < 0 or base % (1 << sw):
            raise ValueError(f"window {name}: base {base:#x} must be a non-negative multiple of "
                             f"its size {1 << sw:#x}")
        if base + (1 << sw) > 1 << addr_width:
            raise ValueError(f"window {name}: [{base:#x}, {base + (1 << sw):#x}) exceeds the "
                             f"{addr_width}-bit address space")
        for other, lo, hi in spans:
            if base < hi and lo < base + (1 << sw):
                raise ValueError(f"windows {other} and {name} overlap")
        names.add(name)
        spans.append((name, base, base + (1 << sw)))
    return windows


class AXI4LiteDecoder(wiring.Component):
    """Decode ``bus`` into the ``windows`` (see the module docstring).

    Parameters
    ----------
    addr_width : int
        Address width of the upstream slave port ``bus``.
    windows : iterable of (name, base, sub_width)
        Sub-bus member name, byte base address (a multiple of ``2**sub_width``) and the
        sub-bus address width. Windows must not overlap and must fit in ``addr_width``.
    data_width : int
        32 or 64.
    """

    def __init__(self, addr_width: int, windows, data_width: int = 32):
        self.addr_width, self.data_width = addr_width, data_width
        try:
            self.windows = _check_windows(addr_width, windows)
        except ValueError:
            self._MustUse__silence = True      # a refused decoder is not an unused one
            raise
        members = {"bus": In(AXI4LiteSignature(addr_width, data_width))}
        for name, _, sw in self.windows:
            members[name] = Out(AXI4LiteSignature(sw, data_width))
        super().__init__(members)

    def _hit(self, addr, base, sw):
        return addr[sw:] == (base >> sw)

    def elaborate(self, platform):
        m = Module()
        up = self.bus
        n = len(self.windows)
        subs = [getattr(self, name) for name, _, _ in self.windows]

        # ------------------------------------------------------------ write direction
        w_sel = Signal(range(max(n, 2)))
        w_addr = Signal(self.addr_width)
        w_data = Signal(self.data_width)
        w_strb = Signal(self.data_width // 8)
        aw_done, wd_done = Signal(), Signal()
        for k, (sub, (_, base, sw)) in enumerate(zip(subs, self.windows)):
            m.d.comb += [sub.aw.payload.addr.eq(w_addr[:sw]), sub.w.payload.data.eq(w_data),
                         sub.w.payload.strb.eq(w_strb)]
        with m.FSM(name="wr"):
            with m.State("IDLE"):
                take = up.aw.valid & up.w.valid
                m.d.comb += [up.aw.ready.eq(take), up.w.ready.eq(take)]
                with m.If(take):
                    m.d.sync += [w_addr.eq(up.aw.payload.addr), w_data.eq(up.w.payload.data),
                                 w_strb.eq(up.w.payload.strb), aw_done.eq(0), wd_done.eq(0)]
                    m.next = "DECERR"
                    for k, (_, base, sw) in enumerate(self.windows):
                        with m.If(self._hit(up.aw.payload.addr, base, sw)):
                            m.d.sync += w_sel.eq(k)
                            m.next = "FWD"
            with m.State("FWD"):
                for k, sub in enumerate(subs):
                    with m.If(w_sel == k):
                        m.d.comb += [sub.aw.valid.eq(~aw_done), sub.w.valid.eq(~wd_done)]
                        a_ok = aw_done | sub.aw.ready
                        d_ok = wd_done | sub.w.ready
                        with m.If(sub.aw.ready):
                            m.d.sync += aw_done.eq(1)
                        with m.If(sub.w.ready):
                            m.d.sync += wd_done.eq(1)
                        with m.If(a_ok & d_ok):
                            m.next = "RESP"
            with m.State("RESP"):
                for k, sub in enumerate(subs):
                    with m.If(w_sel == k):
                        m.d.comb += [up.b.valid.eq(sub.b.valid), up.b.payload.resp.eq(sub.b.payload.resp),
                                     sub.b.ready.eq(up.b.ready)]
                        with m.If(sub.b.valid & up.b.ready):
                            m.next = "IDLE"
            with m.State("DECERR"):
                m.d.comb += [up.b.valid.eq(1), up.b.payload.resp.eq(Resp.DECERR)]
                with m.If(up.b.ready):
                    m.next = "IDLE"

        # ------------------------------------------------------------ read direction
        r_sel = Signal(range(max(n, 2)))
        r_addr = Signal(self.addr_width)
        for sub, (_, base, sw) in zip(subs, self.windows):
            m.d.comb += sub.ar.payload.addr.eq(r_addr[:sw])
        with m.FSM(name="rd"):
            with m.State("IDLE"):
                m.d.comb += up.ar.ready.eq(1)
                with m.If(up.ar.valid):
                    m.d.sync += r_addr.eq(up.ar.payload.addr)
                    m.next = "DECERR"
                    for k, (_, base, sw) in enumerate(self.windows):
                        with m.If(self._hit(up.ar.payload.addr, base, sw)):
                            m.d.sync += r_sel.eq(k)
                            m.next = "FWD"
            with m.State("FWD"):
                for k, sub in enumerate(subs):
                    with m.If(r_sel == k):
                        m.d.comb += sub.ar.valid.eq(1)
                        with m.If(sub.ar.ready):
                            m.next = "RESP"
            with m.State("RESP"):
                for k, sub in enumerate(subs):
                    with m.If(r_sel == k):
                        m.d.comb += [up.r.valid.eq(sub.r.valid), up.r.payload.data.eq(sub.r.payload.data),
                                     up.r.payload.resp.eq(sub.r.payload.resp), sub.r.ready.eq(up.r.ready)]
                        with m.If(sub.r.valid & up.r.ready):
                            m.next = "IDLE"
            with m.State("DECERR"):
                m.d.comb += [up.r.valid.eq(1), up.r.payload.data.eq(0),
                             up.r.payload.resp.eq(Resp.DECERR)]
                with m.If(up.r.ready):
                    m.next = "IDLE"
        return m
