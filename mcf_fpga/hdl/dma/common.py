"""The DMA engines' shared hardware: descriptor and status layouts and the burst splitter.

Descriptors, status codes and the splitting rule are ``spec.dma``'s (its docstring states them).
"""
from amaranth import Module, Signal, Mux, Const
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.dma import DmaParams, DmaStatus

__all__ = ["descriptor_layout", "status_layout", "burst_layout", "BurstSplitter", "descriptor_check"]


def descriptor_layout(addr_width, len_width):
    return data.StructLayout({"addr": addr_width, "length": len_width})


def status_layout(addr_width):
    return data.StructLayout({"code": 4, "addr": addr_width})


def burst_layout(addr_width):
    """One burst (or one refused descriptor, ``null=1``) from the splitter."""
    return data.StructLayout({"addr": addr_width, "len": 8, "last": 1, "null": 1, "code": 4,
                              "desc_addr": addr_width})


def descriptor_check(m, p: DmaParams, addr, length):
    """Add the descriptor check to module ``m``; returns the 4-bit ``DmaStatus`` code
    (combinational; same order as :func:`check_descriptor`)."""
    lg = p.size_log2
    chk = Signal(4)
    end = Signal(max(p.addr_width, p.len_width) + 1)     # addr + length never wraps
    m.d.comb += end.eq(addr + length)
    with m.If(length == 0):
        m.d.comb += chk.eq(DmaStatus.ZERO_LENGTH)
    with m.Elif((addr[:lg] != 0) | (length[:lg] != 0) if lg else Const(0)):
        m.d.comb += chk.eq(DmaStatus.MISALIGNED)
    with m.Elif((addr < p.window_base) | (end > p.window_base + p.window_size)):
        m.d.comb += chk.eq(DmaStatus.OUT_OF_WINDOW)
    with m.Elif(length > p.max_length if p.max_length is not None else Const(0)):
        m.d.comb += chk.eq(DmaStatus.TOO_LONG)
    with m.Else():
        m.d.comb += chk.eq(DmaStatus.OK)
    return chk


class BurstSplitter(wiring.Component):
    """Descriptor stream in, burst stream out (one entry per burst; a refused descriptor
    becomes one ``null`` entry carrying its status code). ``desc`` is taken when the
    previous descriptor has been fully emitted; back-pressure on ``bursts`` holds it.

    A burst is ``min(rem, lim)`` beats: ``rem`` the descriptor's beats left, ``lim`` =
    min(beats to the next 4 KB boundary, ``max_burst``). ``lim`` and the beats to the boundary
    are registers kept beside ``cur`` (set from the descriptor's address when it is taken; after
    a burst that is not the last one, which is ``lim`` beats long, counted down by ``lim``), so a
    burst's length and ``last`` come from registers through one compare, not from the address
    through a subtractor and two minima."""

    def __init__(self, p: DmaParams):
        self.p = p
        super().__init__({
            "desc": In(stream.Signature(descriptor_layout(p.addr_width, p.len_width))),
            "bursts": Out(stream.Signature(burst_layout(p.addr_width))),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.p
        lg = p.size_log2
        page = 4096 >> lg                   # beats in a 4 KB page
        active = Signal()
        null = Signal()
        code = Signal(4)
        cur = Signal(p.addr_width)
        desc_addr = Signal(p.addr_width)
        rem = Signal(p.len_width)           # beats left
        to4k = Signal(range(page + 1))      # beats from cur to the next 4 KB boundary, 1..page
        lim = Signal(9)                     # min(to4k, max_burst)

        def limit(x):
            return Mux(x < p.max_burst, x, p.max_burst)

        d = self.desc.payload
        m.d.comb += self.desc.ready.eq(~active & ~null)
        chk = descriptor_check(m, p, d.addr, d.length)
        with m.If(self.desc.valid & self.desc.ready):
            first = Signal.like(to4k, name="to4k_first")
            m.d.comb += first.eq((4096 - d.addr[:12]) >> lg)
            m.d.sync += [cur.eq(d.addr), desc_addr.eq(d.addr), rem.eq(d.length >> lg),
                         code.eq(chk), to4k.eq(first), lim.eq(limit(first))]
            with m.If(chk == DmaStatus.OK):
                m.d.sync += active.eq(1)
            with m.Else():
                m.d.sync += null.eq(1)

        last = Signal()                      # this burst ends the descriptor: rem <= lim
        nb = Signal(9)
        m.d.comb += [last.eq(rem <= lim), nb.eq(Mux(last, rem, lim))]
        b = self.bursts.payload
        m.d.comb += [
            self.bursts.valid.eq(active | null),
            b.addr.eq(cur), b.len.eq(nb - 1), b.last.eq(null | last), b.null.eq(null),
            b.code.eq(code), b.desc_addr.eq(desc_addr),
        ]
        with m.If(self.bursts.valid & self.bursts.ready):
            m.d.sync += null.eq(0)
            with m.If(active):
                # a burst that is not the last is lim beats: the next state from registers only
                nxt = Signal.like(to4k, name="to4k_next")
                m.d.comb += nxt.eq(Mux(to4k == lim, page, to4k - lim))
                m.d.sync += [cur.eq(cur + (lim << lg)), rem.eq(rem - lim), to4k.eq(nxt), lim.eq(limit(nxt))]
                with m.If(last):
                    m.d.sync += active.eq(0)
        return m
