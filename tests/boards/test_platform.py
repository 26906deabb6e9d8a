"""KR260 platform, board top and stand-in top: elaboration, XDC against the facts file, registers."""
import re
import warnings

import pytest
from amaranth import Module, Signal, Elaboratable
from amaranth.lib import io

from mcf_fpga.boards.kr260 import KR260Platform
from mcf_fpga.boards.board_top import KR260Top, bd_ports
from mcf_fpga.boards.standin import StandInTop, REGISTERS, ID_VALUE, OFFSETS
from mcf_fpga.boards.top import TopPorts, describe_top
from mcf_fpga.hdl.bus import Resp
from mcf_fpga.sim.kit import AXI4LiteMaster, run_simulation
from tests.boards.facts_pins import facts_pins

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")


def _plan(elaboratable):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return KR260Platform().build(elaboratable, name="top", do_build=False)


def _xdc_pins(xdc):
    """{package pin: {property: value}} from an Amaranth XDC."""
    port_pin, props = {}, {}
    for prop, value, port in re.findall(r'set_property (\w+) "?([^" ]+)"? \[get_ports "?([^\]"]+)"?\]', xdc):
        if prop == "LOC":
            port_pin[port] = value
        else:
            props.setdefault(port, {})[prop] = value
    return {pin: props.get(port, {}) for port, pin in port_pin.items()}


class Blinky(Elaboratable):
    def elaborate(self, platform):
        m = Module()
        led = platform.request("led", 0, dir="-")
        m.submodules.led = b = io.Buffer("o", led)
        count = Signal(25)
        m.d.sync += count.eq(count + 1)
        m.d.comb += b.o.eq(count[-1])
        return m


def test_blinky_elaborates_on_the_25mhz_clock():
    plan = _plan(Blinky())
    xdc = plan.files["top.xdc"]
    pins = _xdc_pins(xdc)
    assert pins["F8"]["IOSTANDARD"] == "LVCMOS18" and pins["C3"]["IOSTANDARD"] == "LVCMOS18"
    assert re.search(r"create_clock .*-period 40\.0", xdc)
    assert "xck26-sfvc784-2LV-c" in plan.files["top.tcl"]


@pytest.mark.parametrize("links", [(0, 1, 2)])
def test_xdc_has_every_facts_pin_with_its_iostandard(links):
    """Board top of a node with all three links (RGMII x2 + SFP+) constrains every pin of the facts file."""
    want = facts_pins()
    assert len(want) >= 85
    got = _xdc_pins(_plan(KR260Top(TopPorts("mcf_node", 16, links=links, led_width=2))).files["top.xdc"])
    missing = sorted(set(want) - set(got))
    assert not missing, f"pins of the facts file not in the XDC: {missing}"
    wrong = {p: (got[p].get("IOSTANDARD"), s) for p, s in want.items() if got[p].get("IOSTANDARD") != s}
    assert not wrong, f"IOSTANDARD (xdc, facts) differs: {wrong}"
    extra = sorted(set(got) - set(want))
    assert not extra, f"XDC pins the facts file does not list: {extra}"


def test_standin_board_top_constrains_all_but_the_unused_gth():
    top = StandInTop()
    plan = _plan(KR260Top(describe_top(top)))
    got = _xdc_pins(plan.files["top.xdc"])
    want = facts_pins()
    gth = {p for p, s in want.items() if s is None}
    assert gth == {"T2", "T1", "R4", "R3", "Y6", "Y5"}
    assert set(got) == set(want) - gth       # no I/O buffer may sit on an MGT pin
    v = plan.files["top.v"]
    assert "mcf_ps_wrapper" in v and "IDDRE1" in v and "ODDRE1" in v
    for name, _, _ in bd_ports(describe_top(top)):
        assert f".{name}(" in v, name


def test_describe_top_rejects_bad_tops():
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out
    from mcf_fpga.hdl.bus import AXI4LiteSignature, AXI4Signature

    class T(wiring.Component):
        def __init__(self, members):
            super().__init__(members)

        def elaborate(self, platform):
            return Module()

    with pytest.raises(ValueError, match="s_axi"):
        describe_top(T({"irq": Out(1)}))
    with pytest.raises(ValueError, match="irq"):
        describe_top(T({"s_axi": In(AXI4LiteSignature(16, 32))}))
    with pytest.raises(ValueError, match="128"):
        describe_top(T({"s_axi": In(AXI4LiteSignature(16, 32)), "irq": Out(1),
                        "m_axi_hp0": Out(AXI4Signature(40, 64))}))
    with pytest.raises(ValueError, match="4 HP ports"):
        describe_top(T({"s_axi": In(AXI4LiteSignature(16, 32)), "irq": Out(1),
                        "m_axi_hp4": Out(AXI4Signature(40, 128))}))
    ok = describe_top(T({"s_axi": In(AXI4LiteSignature(16, 32)), "irq": Out(1),
                         **{f"m_axi_hp{k}": Out(AXI4Signature(40, 128)) for k in range(4)}}))
    assert ok.hp_masters == (0, 1, 2, 3) and ok.hpc_masters == ()
    # S_AXI_HPC0/1_FPD: the same contract as the HP ports, two of them
    base = {"s_axi": In(AXI4LiteSignature(16, 32)), "irq": Out(1), "m_axi_hp2": Out(AXI4Signature(40, 128))}
    hpc = describe_top(T({**base, "m_axi_hpc1": Out(AXI4Signature(44, 128)), "m_axi_hpc0": Out(AXI4Signature(40, 128))}))
    assert (hpc.hp_masters, hpc.hpc_masters, hpc.hp_addr_width) == ((2,), (0, 1), 44)
    with pytest.raises(ValueError, match=r"m_axi_hpc2: the XCK26 PS has 2 HPC ports \(m_axi_hpc0..1\)"):
        describe_top(T({**base, "m_axi_hpc2": Out(AXI4Signature(40, 128))}))
    with pytest.raises(ValueError, match=r"m_axi_hpc0: data width must be 128 \(S_AXI_HPC\*_FPD"):
        describe_top(T({**base, "m_axi_hpc0": Out(AXI4Signature(40, 64))}))
    with pytest.raises(ValueError, match=r"m_axi_hpc0: addr_width must be <= 49"):
        describe_top(T({**base, "m_axi_hpc0": Out(AXI4Signature(50, 128))}))
    with pytest.raises(ValueError, match=r"m_axi_hpc1 must be Out\(AXI4Signature"):
        describe_top(T({**base, "m_axi_hpc1": In(AXI4Signature(40, 128))}))
    with pytest.raises(ValueError, match="node_id"):
        StandInTop(nodes=2, node_id=2)


def test_standin_registers_led_irq_and_link_echo():
    dut = StandInTop(blink_bits=4, nodes=4, node_id=3)
    bus = AXI4LiteMaster(dut.s_axi)
    seen = {}

    async def tb(ctx):
        assert await bus.read(ctx, OFFSETS["id"]) == (ID_VALUE, Resp.OKAY)
        assert await bus.read(ctx, OFFSETS["node"]) == (3 | 4 << 8, Resp.OKAY)
        assert await bus.write(ctx, OFFSETS["scratch"], 0xDEADBEEF) == Resp.OKAY
        assert await bus.read(ctx, OFFSETS["scratch"]) == (0xDEADBEEF, Resp.OKAY)
        assert await bus.write(ctx, OFFSETS["id"], 1) == Resp.SLVERR          # RO refuses
        assert await bus.read(ctx, OFFSETS["id"]) == (ID_VALUE, Resp.OKAY)
        assert (await bus.read(ctx, 0x400))[1] == Resp.DECERR
        await bus.write(ctx, OFFSETS["led"], 0b10)
        assert ctx.get(dut.led) == 0b10
        await bus.write(ctx, OFFSETS["led"], 0x100)                  # LED0 blinks
        leds = set()
        for _ in range(40):
            await ctx.tick()
            leds.add(ctx.get(dut.led))
        assert leds == {0, 1}
        c0 = (await bus.read(ctx, OFFSETS["cycles"]))[0]
        c1 = (await bus.read(ctx, OFFSETS["cycles"]))[0]
        assert c1 > c0
        # interrupt: pending only drives irq when enabled; reading IRQ clears it
        await bus.write(ctx, OFFSETS["irq_set"], 1)
        assert ctx.get(dut.irq) == 0
        await bus.write(ctx, OFFSETS["irq_enable"], 1)
        assert ctx.get(dut.irq) == 1
        assert await bus.read(ctx, OFFSETS["irq_status"]) == (1, Resp.OKAY)
        await ctx.tick()
        assert ctx.get(dut.irq) == 0
        assert await bus.read(ctx, OFFSETS["irq_status"]) == (0, Resp.OKAY)
        # link echo: one good, one bad frame on link 1
        for user in (0, 1):
            for k, byte in enumerate(b"\x11\x22\x33"):
                ctx.set(dut.s_axis_link1.payload.data, byte)
                ctx.set(dut.s_axis_link1.payload.last, k == 2)
                ctx.set(dut.s_axis_link1.payload.user, user and k == 2)
                ctx.set(dut.s_axis_link1.valid, 1)
                ctx.set(dut.m_axis_link1.ready, 1)
                _, _, d = await ctx.tick().sample(dut.m_axis_link1.payload.data)
                seen.setdefault("echo", []).append(d)
        ctx.set(dut.s_axis_link1.valid, 0)
        assert (await bus.read(ctx, OFFSETS["link_rx"]))[0] == (1 << 8) | (1 << 24)

    run_simulation(dut, [tb], max_cycles=5000)
    assert seen["echo"] == [0x11, 0x22, 0x33] * 2
