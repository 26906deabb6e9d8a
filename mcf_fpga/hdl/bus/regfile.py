"""AXI4-Lite register file: a slave that maps 32-bit registers at fixed offsets.

Contract
--------
* One write and one read may be in progress at a time (independently). A write
  is taken when both ``aw`` and ``w`` are valid and no B response is pending;
  the B response is then held until ``b.ready``. A read is taken when ``ar`` is
  valid and no R response is pending; R is held until ``r.ready``. Back-pressure
  on B or R therefore stalls only that direction, never loses a response.
* Address decode uses the word offset (``addr >> 2``) within the window of
  ``addr_width`` bits. An unmapped or misaligned address answers DECERR
  (reads return 0); a write to a read-only register answers SLVERR and changes
  nothing.
* ``WSTRB`` is honoured byte by byte for RW registers.

Per register ``name`` the component has:
  * RW: ``name`` (Out, current value) and ``name_wstb`` (Out, 1-cycle pulse on a write); with
    ``Register.clear``, ``name_clr`` (In): the value returns to ``reset`` next cycle.
  * RO: ``name`` (In, value sampled when the read is accepted) and ``name_rstb``
    (Out, 1-cycle pulse when a read of it is accepted: use it for pop/clear-on-read).
  * WO: ``name`` (Out, the last written value, valid with ``name_wstb``); reads give 0.

``Register`` and ``Access`` are defined in ``spec.regmap`` (re-exported here): the generated
register descriptions (IP-XACT, PYNQ .hwh, C header, Markdown: ``boards.ip``) read the same
definitions a register file is built from.
"""
from amaranth import Module, Signal, Cat, Const, Mux
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.regmap import Access, Register, check_registers

from .axi_lite import AXI4LiteSignature, Resp

__all__ = ["Access", "Register", "AXI4LiteRegisterFile"]


class AXI4LiteRegisterFile(wiring.Component):
    """AXI4-Lite slave exposing ``registers`` (see module docstring for the contract).

    Parameters
    ----------
    registers : iterable of Register
    addr_width : int
        Width of the AXI-Lite address decoded here (the window is 2**addr_width bytes).
    """

    def __init__(self, registers, addr_width: int = 12):
        self.registers = list(registers)
        self.addr_width = addr_width
        check_registers(self.registers, 2 ** addr_width, f"the {addr_width}-bit window")
        members = {"bus": In(AXI4LiteSignature(addr_width, 32))}
        for reg in self.registers:
            if reg.access is Access.RO:
                members[reg.name] = In(reg.width)
                members[reg.name + "_rstb"] = Out(1)
            else:
                members[reg.name] = Out(reg.width, init=reg.reset)
                members[reg.name + "_wstb"] = Out(1)
                if reg.clear:
                    members[reg.name + "_clr"] = In(1)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        bus = self.bus

        # ---- write path ----
        b_pending = Signal()
        b_resp = Signal(2)
        m.d.comb += [bus.b.valid.eq(b_pending), bus.b.payload.resp.eq(b_resp)]
        with m.If(bus.b.valid & bus.b.ready):
            m.d.sync += b_pending.eq(0)
        take_w = Signal()
        m.d.comb += take_w.eq(bus.aw.valid & bus.w.valid & ~b_pending)
        m.d.comb += [bus.aw.ready.eq(take_w), bus.w.ready.eq(take_w)]
        waddr = bus.aw.payload.addr
        wdata = bus.w.payload.data
        wstrb = bus.w.payload.strb
        for reg in self.registers:
            if reg.access is not Access.RO:
                m.d.sync += getattr(self, reg.name + "_wstb").eq(0)
            if reg.clear:
                with m.If(getattr(self, reg.name + "_clr")):
                    m.d.sync += getattr(self, reg.name).eq(reg.reset)
        with m.If(take_w):
            m.d.sync += b_pending.eq(1)
            with m.If(waddr[:2] != 0):
                m.d.sync += b_resp.eq(Resp.DECERR)
            with m.Else():
                with m.Switch(waddr[2:]):
                    for reg in self.registers:
                        with m.Case(reg.offset >> 2):
                            if reg.access is Access.RO:
                                m.d.sync += b_resp.eq(Resp.SLVERR)
                            else:
                                sig = getattr(self, reg.name)
                                old = Signal(32, name=f"{reg.name}_old")
                                m.d.comb += old.eq(sig)
                                merged = Cat(*(Mux(wstrb[i], wdata[8 * i:8 * i + 8], old[8 * i:8 * i + 8])
                                               for i in range(4)))
                                m.d.sync += [sig.eq(merged[:reg.width]), b_resp.eq(Resp.OKAY),
                                             getattr(self, reg.name + "_wstb").eq(1)]
                    with m.Default():
                        m.d.sync += b_resp.eq(Resp.DECERR)

        # ---- read path ----
        r_pending = Signal()
        r_data = Signal(32)
        r_resp = Signal(2)
        m.d.comb += [bus.r.valid.eq(r_pending), bus.r.payload.data.eq(r_data),
                     bus.r.payload.resp.eq(r_resp)]
        with m.If(bus.r.valid & bus.r.ready):
            m.d.sync += r_pending.eq(0)
        take_r = Signal()
        m.d.comb += [take_r.eq(bus.ar.valid & ~r_pending), bus.ar.ready.eq(take_r)]
        raddr = bus.ar.payload.addr
        for reg in self.registers:
            if reg.access is Access.RO:
                m.d.comb += getattr(self, reg.name + "_rstb").eq(0)
        with m.If(take_r):
            m.d.sync += r_pending.eq(1)
            with m.If(raddr[:2] != 0):
                m.d.sync += [r_resp.eq(Resp.DECERR), r_data.eq(0)]
            with m.Else():
                with m.Switch(raddr[2:]):
                    for reg in self.registers:
                        with m.Case(reg.offset >> 2):
                            value = Const(0, 32) if reg.access is Access.WO else getattr(self, reg.name)
                            m.d.sync += [r_data.eq(value), r_resp.eq(Resp.OKAY)]
                            if reg.access is Access.RO:
                                m.d.comb += getattr(self, reg.name + "_rstb").eq(1)
                    with m.Default():
                        m.d.sync += [r_resp.eq(Resp.DECERR), r_data.eq(0)]
        return m

