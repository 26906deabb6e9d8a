"""Verilog export: AMBA port names, errors naming the member, Verilator lint with the
documented waivers, the block registry and `mcf verilog`."""
import argparse
import re
import subprocess

import pytest
from amaranth import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl import blocks
from mcf_fpga.hdl.bus import AXI4LiteSignature, AXI4Signature, PacketSignature
from mcf_fpga.hdl.bus.axis_register_slice import AXISRegisterSlice
from mcf_fpga.hdl.verilog import to_verilog, amba_ports
from mcf_fpga.sim.verilator import verilator_env, WAIVERS
from mcf_fpga.host.commands import verilog as verilog_cmd


def ports_of(text, module):
    m = re.search(rf"module {module}\((.*?)\);", text, re.S)
    return {p.strip() for p in m.group(1).split(",")}


pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")

AXIL_SLAVE = {f"s_axi_{n}" for n in (
    "awaddr awprot awvalid awready wdata wstrb wvalid wready bresp bvalid bready "
    "araddr arprot arvalid arready rdata rresp rvalid rready").split()}


class _Mixed(wiring.Component):
    """Every mappable member kind at once."""
    s_axi: In(AXI4LiteSignature(12, 32))
    m_axi_hp0: Out(AXI4Signature(40, 128, 4))
    s_axis: In(PacketSignature(64, 4))
    m_axis: Out(stream.Signature(16))
    irq: Out(1)
    mode: In(3)

    def elaborate(self, platform):
        m = Module()
        x = Signal()
        m.d.sync += x.eq(~x)
        return m


def test_stream_ports():
    text = to_verilog(AXISRegisterSlice(32, 2), "slice")
    assert ports_of(text, "slice") == {"clk", "rst"} | {
        f"{p}_t{f}" for p in ("s_axis", "m_axis") for f in ("data", "keep", "last", "user", "valid", "ready")}
    assert re.search(r"input \[31:0\] s_axis_tdata;", text)
    assert re.search(r"output \[3:0\] m_axis_tkeep;", text)


def test_axi_lite_axi4_plain_ports():
    text = to_verilog(_Mixed(), "mixed")
    ports = ports_of(text, "mixed")
    assert AXIL_SLAVE <= ports
    axi4 = {f"m_axi_hp0_{ch}{f}" for ch in ("aw", "ar") for f in
            ("id", "addr", "len", "size", "burst", "cache", "prot", "valid", "ready")}
    axi4 |= {f"m_axi_hp0_w{f}" for f in ("data", "strb", "last", "valid", "ready")}
    axi4 |= {f"m_axi_hp0_b{f}" for f in ("id", "resp", "valid", "ready")}
    axi4 |= {f"m_axi_hp0_r{f}" for f in ("id", "data", "resp", "last", "valid", "ready")}
    assert axi4 <= ports
    assert {"s_axis_tuser", "m_axis_tdata", "m_axis_tvalid", "irq", "mode", "clk", "rst"} <= ports
    assert len(ports) == len(AXIL_SLAVE) + len(axi4) + 6 + 3 + 2 + 2
    # directions: master drives arlen, receives rdata; the slave receives awaddr
    assert re.search(r"output \[7:0\] m_axi_hp0_arlen;", text)
    assert re.search(r"input \[127:0\] m_axi_hp0_rdata;", text)
    assert re.search(r"input \[11:0\] s_axi_awaddr;", text)
    assert re.search(r"output s_axi_awready;", text)
    assert re.search(r"output \[1:0\] s_axi_bresp;", text)
    assert re.search(r"input m_axis_tready;", text)


def test_rename_gives_s_axi_for_the_register_file():
    comp, rename = blocks.build("axil_regfile")
    ports = ports_of(to_verilog(comp, "rf", rename=rename), "rf")
    assert AXIL_SLAVE <= ports and not any(p.startswith("bus") for p in ports)


class _Custom(wiring.Signature):
    def __init__(self):
        super().__init__({"a": Out(1), "b": In(1)})


class _Unmappable(wiring.Component):
    s_axis: In(PacketSignature(8))
    weird_bus: Out(_Custom())

    def elaborate(self, platform):
        return Module()


class _BadStream(wiring.Component):
    m_axis: Out(stream.Signature(data.StructLayout({"data": 8, "kv_id": 4})))

    def elaborate(self, platform):
        return Module()


def test_unmappable_member_is_named():
    with pytest.raises(ValueError, match=r"member 'weird_bus' has signature .*maps to no AMBA port"):
        to_verilog(_Unmappable())
    with pytest.raises(ValueError, match=r"member 'm_axis': stream payload field 'kv_id' has no AXI-Stream name"):
        to_verilog(_BadStream())
    with pytest.raises(ValueError, match=r"rename names members that do not exist: \['nope'\]"):
        amba_ports(AXISRegisterSlice(8), rename={"nope": "x"})
    with pytest.raises(ValueError, match=r"member 'm_axis': port name 's_axis_tdata' collides"):
        amba_ports(AXISRegisterSlice(8), rename={"m_axis": "s_axis"})


def _lint(path, waivers=True):
    args = ["verilator", "--lint-only"] + ([str(WAIVERS)] if waivers else []) + [str(path)]
    return subprocess.run(args, env=verilator_env(), capture_output=True, text=True)


@pytest.mark.parametrize("name", sorted(blocks.BLOCKS))
def test_registered_blocks_lint_clean_with_waivers(name, tmp_path):
    comp, rename = blocks.build(name)
    v = tmp_path / f"{name}.v"
    v.write_text(to_verilog(comp, name, rename=rename))
    res = _lint(v)
    assert res.returncode == 0 and "%Warning" not in res.stderr and "%Error" not in res.stderr, res.stderr
    # Icarus (the cocotb fallback) accepts it in Verilog-2005 mode
    res = subprocess.run(["iverilog", "-g2005", "-o", str(tmp_path / "a.out"), str(v)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


class _Patterns(wiring.Component):
    """Amaranth code that makes the Verilog backend emit each waived pattern."""
    sel: In(3)
    x: In(6)
    y: In(16)
    o: Out(4)
    hit: Out(1)
    zero: Out(1)
    below: Out(1)
    zero_rec: Out(1)
    oh: In(4)
    first: Out(2)

    def elaborate(self, platform):
        from amaranth.lib import data, fifo
        m = Module()
        m.submodules.f = f = fifo.SyncFIFOBuffered(width=4, depth=2)      # ASCRANGE
        rec = Signal(data.StructLayout({"a": 4, "b": 4}))                 # ALWNEVER: field b never driven
        with m.If(self.sel[0]):
            m.d.comb += rec.a.eq(self.x[:4])
        m.d.sync += self.zero_rec.eq(rec.as_value() == 0)
        m.d.comb += [f.w_data.eq(self.x), f.w_en.eq(1), f.r_en.eq(1),
                     self.o.eq(self.y.word_select(self.sel[:2], 4)),     # WIDTHTRUNC
                     self.zero.eq(self.y == 0),
                     self.below.eq(self.y < 0)]                          # UNSIGNED
        with m.Switch(self.sel):                                          # CASEINCOMPLETE
            with m.Case(1):
                m.d.sync += self.hit.eq(self.x == 3)                      # WIDTHEXPAND
            with m.Case(2):
                m.d.sync += self.hit.eq(f.r_data == 1)
        with m.Switch(self.oh):       # CASEOVERLAP: wildcard cases that overlap (first match wins)
            with m.Case("--11"):
                m.d.comb += self.first.eq(1)
            with m.Case("-11-"):
                m.d.comb += self.first.eq(self.x[:2])
        return m


def test_each_waiver_is_needed_and_the_list_is_complete(tmp_path):
    v = tmp_path / "patterns.v"
    v.write_text(to_verilog(_Patterns(), "patterns"))
    rules = set(re.findall(r"%Warning-([A-Z]+)", _lint(v, waivers=False).stderr))
    waived = set(re.findall(r"lint_off -rule ([A-Z]+)", WAIVERS.read_text()))
    assert rules == waived
    res = _lint(v)
    assert res.returncode == 0 and "%Warning" not in res.stderr, res.stderr


# ---------------------------------------------------------------- registry and command
def _cmd(argv):
    p = argparse.ArgumentParser()
    verilog_cmd.add_arguments(p)
    return verilog_cmd.run(p.parse_args(argv))


def test_mcf_verilog_writes_file(tmp_path, capsys):
    out = tmp_path / "s.v"
    assert _cmd(["axis_register_slice", "--param", "data_width=128", "--param", "user_width=2",
                 "-o", str(out)]) == 0
    text = out.read_text()
    assert "module axis_register_slice(" in text and re.search(r"input \[127:0\] s_axis_tdata;", text)
    assert _cmd(["--list"]) == 0
    assert "axil_regfile" in capsys.readouterr().out


def test_registry_param_errors():
    with pytest.raises(ValueError, match=r"has no parameter 'depth' \(parameters: data_width, user_width\)"):
        blocks.parse_params("axis_register_slice", ["depth=3"])
    with pytest.raises(ValueError, match=r"parameter 'data_width' must be int, got 'wide'"):
        blocks.parse_params("axis_register_slice", ["data_width=wide"])
    with pytest.raises(ValueError, match=r"unknown block 'nope'"):
        blocks.parse_params("nope", [])
    with pytest.raises(ValueError, match="key=value"):
        blocks.parse_params("axis_register_slice", ["data_width"])
    assert blocks.parse_params("axis_register_slice", ["data_width=0x80"]) == {"data_width": 128}
    with pytest.raises(ValueError, match="already registered"):
        blocks.register("axis_register_slice", AXISRegisterSlice, "dup")


def test_mcf_cli_dispatches_verilog(tmp_path):
    from mcf_fpga.host.cli import main
    out = tmp_path / "rf.v"
    assert main(["verilog", "axil_regfile", "--param", "n_rw=2", "-o", str(out)]) == 0
    assert AXIL_SLAVE <= ports_of(out.read_text(), "axil_regfile")
    assert main(["verilog", "axil_regfile", "--param", "bogus=1"]) == 2     # user error, no traceback
