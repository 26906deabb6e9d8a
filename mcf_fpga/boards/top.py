"""The contract between a PL top (the node, or a stand-in) and the KR260 flow.

A *top* is any ``wiring.Component`` whose signature has these members (names
are the AMBA prefixes its Verilog ports get, see :mod:`boards.verilog`):

* ``s_axi``: ``In(AXI4LiteSignature(addr_width, 32))`` — control, mapped by the
  PS at 0xA000_0000 through M_AXI_HPM0_FPD (window 2**addr_width bytes).
* ``irq``: ``Out(1)`` — level-high interrupt to pl_ps_irq0[0] (GIC SPI 89).
* optional ``m_axi_hp0`` .. ``m_axi_hp3``: ``Out(AXI4Signature(..., 128, ...))``
  — masters into DDR through S_AXI_HP0..3_FPD (128-bit).
* optional ``m_axi_hpc0``, ``m_axi_hpc1``: the same, through S_AXI_HPC0/1_FPD (128-bit; the
  node's weight lanes 1 and 2, ``NodeDMA(w_lanes=2|3)``). Used non-coherently: a master's
  AxCACHE/AxPROT stay what it drives for the HP ports (the DMA readers: ARCACHE 0b0011, normal
  non-cacheable, so the CCI does not snoop the APU's caches), and it reads DDR the host wrote
  and flushed, as on HP2.
* optional link streams, one Ethernet frame per packet (destination MAC
  onward, no FCS): ``m_axis_link<k>`` Out(PacketSignature(w)) frames to send,
  ``s_axis_link<k>`` In(PacketSignature(w, user_width=1)) frames received,
  ``user`` = 1 on the last beat of a bad frame (FCS error, overrun: the top
  must drop it and count it). k = 0, 1: RGMII PHYs, w = 8; k = 2: SFP+
  (10GBASE-R), w = 64.
* optional ``led``: ``Out(n <= 2)`` — the carrier's user LEDs.

A top may also name, in a ``synth_split`` attribute (tuple of hierarchical paths such
as ``"node.engine"``), submodules the flow's Yosys estimate synthesizes on their own
(mcf_fpga/boards/utilisation.py: ``synthesize(split=...)``).

The top runs in one clock domain (``sync``), clocked by PS pl_clk0 with the
PS's synchronous active-high reset. :func:`describe_top` checks a component
against this contract and returns what the flow needs to wire it.
"""
import re
from dataclasses import dataclass, field

from amaranth import Shape
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import AXI4LiteSignature, AXI4Signature

__all__ = ["TopPorts", "describe_top", "HP_PORTS", "HPC_PORTS", "LINK_PORTS"]

HP_PORTS = 4
HPC_PORTS = 2
#: link number -> (board port, data width in bits)
LINK_PORTS = {0: ("rgmii0", 8), 1: ("rgmii1", 8), 2: ("sfp", 64)}


@dataclass(frozen=True)
class TopPorts:
    """What the board flow needs to know about a top."""
    module: str                      # Verilog module name
    axil_addr_width: int
    hp_masters: tuple = ()           # indices k of m_axi_hp<k>
    hp_data_width: int = 128         # of every m_axi_hp<k> and m_axi_hpc<i>
    hp_addr_width: int = 40          # the widest of them
    hpc_masters: tuple = ()          # indices i of m_axi_hpc<i>
    links: tuple = ()                # link numbers with both s_axis_link<k> and m_axis_link<k>
    led_width: int = 0
    extra: dict = field(default_factory=dict)


def _is(member, flow, sig_type):
    return member.is_port is False and member.flow == flow and isinstance(member.signature, sig_type)


def describe_top(top, module="mcf_node") -> TopPorts:
    """Check ``top`` against the contract above; raise ValueError naming the member that fails."""
    if not isinstance(top, wiring.Component):
        raise ValueError(f"the top must be an amaranth.lib.wiring.Component, got {type(top).__name__}")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", module):
        raise ValueError(f"module name must be a Verilog identifier, got {module!r}")
    members = dict(top.signature.members)
    s_axi = members.get("s_axi")
    if s_axi is None or s_axi.is_port or s_axi.flow != In or not isinstance(s_axi.signature, AXI4LiteSignature):
        raise ValueError("the top needs an 's_axi' member: In(AXI4LiteSignature(addr_width, 32))")
    if s_axi.signature.data_width != 32:
        raise ValueError(f"s_axi data width must be 32 (HPM0_FPD AXI-Lite window), got {s_axi.signature.data_width}")
    if s_axi.signature.addr_width > 28:
        raise ValueError(f"s_axi addr_width must be <= 28 (256 MiB HPM0_FPD low window), got {s_axi.signature.addr_width}")
    irq = members.get("irq")
    if irq is None or not irq.is_port or irq.flow != Out or Shape.cast(irq.shape).width != 1:
        raise ValueError("the top needs an 'irq' member: Out(1)")
    hp, hpc, awidths = [], [], set()
    for name, m in members.items():
        mo = re.fullmatch(r"m_axi_hp(c?)(\d+)", name)
        if not mo:
            continue
        k, kind = int(mo.group(2)), "HPC" if mo.group(1) else "HP"
        n = HPC_PORTS if mo.group(1) else HP_PORTS
        if k >= n:
            raise ValueError(f"{name}: the XCK26 PS has {n} {kind} ports "
                             f"(m_axi_{kind.lower()}0..{n - 1})")
        if m.is_port or m.flow != Out or not isinstance(m.signature, AXI4Signature):
            raise ValueError(f"{name} must be Out(AXI4Signature(...))")
        if m.signature.data_width != 128:
            raise ValueError(f"{name}: data width must be 128 (S_AXI_{kind}*_FPD are set to 128 bits), "
                             f"got {m.signature.data_width}")
        if m.signature.addr_width > 49:
            raise ValueError(f"{name}: addr_width must be <= 49 (S_AXI_{kind}*_FPD), got {m.signature.addr_width}")
        (hpc if mo.group(1) else hp).append(k)
        awidths.add(m.signature.addr_width)
    links = []
    for k, (board_port, width) in LINK_PORTS.items():
        rx, tx = members.get(f"s_axis_link{k}"), members.get(f"m_axis_link{k}")
        if rx is None and tx is None:
            continue
        if rx is None or tx is None:
            raise ValueError(f"link {k}: the top needs both s_axis_link{k} and m_axis_link{k}")
        for name, mem, flow in ((f"s_axis_link{k}", rx, In), (f"m_axis_link{k}", tx, Out)):
            if mem.is_port or mem.flow != flow:
                raise ValueError(f"{name} must be {flow.name}(PacketSignature({width}))")
            layout = mem.signature.members["payload"].shape
            try:
                dw = layout["data"].width
            except (KeyError, TypeError):
                dw = None
            if dw != width:
                raise ValueError(f"{name}: data width must be {width} for {board_port}, got {dw}")
            want_user = 1 if flow == In else 0
            try:
                uw = layout["user"].width
            except (KeyError, TypeError):
                uw = 0
            if uw != want_user:
                raise ValueError(f"{name}: user width must be {want_user} (bad-frame flag on receive), got {uw}")
        links.append(k)
    led = members.get("led")
    led_width = 0
    if led is not None:
        if not led.is_port or led.flow != Out or Shape.cast(led.shape).width > 2:
            raise ValueError("'led' must be Out(n) with n <= 2 (the carrier has 2 user LEDs)")
        led_width = Shape.cast(led.shape).width
    return TopPorts(module=module, axil_addr_width=s_axi.signature.addr_width,
                    hp_masters=tuple(sorted(hp)), hp_addr_width=max(awidths, default=40),
                    hpc_masters=tuple(sorted(hpc)),
                    links=tuple(links), led_width=led_width)
