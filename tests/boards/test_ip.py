"""The node packaged as a Vivado IP (``mcf verilog node --ip DIR``, mcf_fpga/boards/ip/): component.xml's
interfaces name real ports of the exported Verilog with the right directions, clock/reset
associations, the memory map equals the register definitions, the wrapper carries the same
interfaces, and the register map's C header and Markdown say the same as the definitions."""
import contextlib
import io
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest

from mcf_fpga.boards.ip.component_xml import SPIRIT
from mcf_fpga.boards.ip.package_ip import write_ip
from mcf_fpga.boards.node_top import NodeBoardTop
from mcf_fpga.hdl.node import make_node
from mcf_fpga.host.cli import main

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")
NS = {"spirit": SPIRIT}

#: AMBA logical ports (AXI4 / AXI4-Lite master view: "o" driven by the master)
AXI_LOGICAL = {f"{ch}{f}": ("o" if ch in ("AW", "W", "AR") else "i") for ch in ("AW", "AR")
               for f in ("ID", "ADDR", "LEN", "SIZE", "BURST", "CACHE", "PROT", "VALID")}
AXI_LOGICAL.update({f"W{f}": "o" for f in ("DATA", "STRB", "LAST", "VALID")})
AXI_LOGICAL.update({f"B{f}": "i" for f in ("ID", "RESP", "VALID")})
AXI_LOGICAL.update({f"R{f}": "i" for f in ("ID", "DATA", "RESP", "LAST", "VALID")})
AXI_LOGICAL.update({"AWREADY": "i", "WREADY": "i", "ARREADY": "i", "BREADY": "o", "RREADY": "o"})
AXIS_LOGICAL = {"TDATA": "o", "TKEEP": "o", "TLAST": "o", "TUSER": "o", "TVALID": "o", "TREADY": "i"}


def _cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def verilog_header(text, module):
    """{port: (direction, width)} of ``module``, read independently of boards.ip."""
    m = re.search(rf"^module {module}\(([^;]*)\);(.*?)^endmodule", text, re.M | re.S)
    assert m, module
    names = [p.strip() for p in m.group(1).split(",")]
    decl = {n: (d, int(a) - int(b) + 1 if a else 1) for d, a, b, n in
            re.findall(r"^\s*(input|output)\s+(?:\[(\d+):(\d+)\]\s+)?(\w+);", m.group(2), re.M)}
    return {n: decl[n] for n in names}


@pytest.fixture(scope="module")
def node_ip(tmp_path_factory):
    d = tmp_path_factory.mktemp("ip") / "node"
    rc, out, err = _cli("verilog", "node", "--ip", str(d))
    assert rc == 0, err
    return d


@pytest.fixture(scope="module")
def top_ip(tmp_path_factory):
    """The board top (NodeBoardTop: AXI4 masters m_axi_hp0..2, 8-bit links) packaged as an IP."""
    d = tmp_path_factory.mktemp("ip") / "top"
    top = NodeBoardTop()
    write_ip(str(d), top, "mcf_node")
    return d, top


def _interfaces(root):
    out = {}
    for bi in root.findall("spirit:busInterfaces/spirit:busInterface", NS):
        name = bi.find("spirit:name", NS).text
        bus = bi.find("spirit:busType", NS).get(f"{{{SPIRIT}}}name")
        mode = "master" if bi.find("spirit:master", NS) is not None else \
            "slave" if bi.find("spirit:slave", NS) is not None else None
        pmap = {pm.find("spirit:logicalPort/spirit:name", NS).text:
                pm.find("spirit:physicalPort/spirit:name", NS).text
                for pm in bi.findall("spirit:portMaps/spirit:portMap", NS)}
        params = {p.find("spirit:name", NS).text: p.find("spirit:value", NS).text
                  for p in bi.findall("spirit:parameters/spirit:parameter", NS)}
        out[name] = dict(bus=bus, mode=mode, pmap=pmap, params=params, el=bi)
    return out


def _check_component(d, name, comp):
    root = ET.parse(d / "component.xml").getroot()
    assert root.tag == f"{{{SPIRIT}}}component"
    assert root.find("spirit:name", NS).text == f"{name}_ip"
    ports = verilog_header((d / "hdl" / f"{name}.v").read_text(), name)
    ifs = _interfaces(root)
    # every physical port exists in the Verilog, with the direction its role implies
    covered = []
    for iname, bi in ifs.items():
        for logical, physical in bi["pmap"].items():
            assert physical in ports, (iname, physical)
            covered.append(physical)
            table = AXI_LOGICAL if bi["bus"] == "aximm" else AXIS_LOGICAL if bi["bus"] == "axis" else None
            if table is not None:
                assert logical in table, (iname, logical)
                drives = table[logical] == "o"
                want = "output" if drives == (bi["mode"] == "master") else "input"
                assert ports[physical][0] == want, (iname, logical, physical)
                assert physical.startswith(iname + "_"), (iname, physical)
    assert len(covered) == len(set(covered))
    # every port of the module belongs to an interface
    assert set(covered) == set(ports)
    # clock and reset associations
    buses = {n for n, b in ifs.items() if b["bus"] in ("aximm", "axis")}
    assert ifs["clk"]["bus"] == "clock" and ifs["clk"]["pmap"] == {"CLK": "clk"}
    assert set(ifs["clk"]["params"]["ASSOCIATED_BUSIF"].split(":")) == buses
    assert ifs["clk"]["params"]["ASSOCIATED_RESET"] == "rst"
    assert ifs["rst"]["bus"] == "reset" and ifs["rst"]["params"]["POLARITY"] == "ACTIVE_HIGH"
    assert ifs["irq"]["bus"] == "interrupt" and ifs["irq"]["pmap"] == {"INTERRUPT": "irq"}
    assert ifs["irq"]["params"]["SENSITIVITY"] == "LEVEL_HIGH"
    # the AXI4-Lite slave and its memory map
    s_axi = ifs["s_axi"]
    assert (s_axi["bus"], s_axi["mode"], s_axi["params"]["PROTOCOL"]) == ("aximm", "slave", "AXI4LITE")
    ref = s_axi["el"].find("spirit:slave/spirit:memoryMapRef", NS).get(f"{{{SPIRIT}}}memoryMapRef")
    mm = root.find(f"spirit:memoryMaps/spirit:memoryMap[spirit:name='{ref}']", NS)
    block = mm.find("spirit:addressBlock", NS)
    regmap = comp.register_map(name)
    assert int(block.find("spirit:range", NS).text) == regmap.size == 1 << int(s_axi["params"]["ADDR_WIDTH"])
    got = []
    for r in block.findall("spirit:register", NS):
        fields = [(f.find("spirit:name", NS).text, int(f.find("spirit:bitOffset", NS).text),
                   int(f.find("spirit:bitWidth", NS).text)) for f in r.findall("spirit:field", NS)]
        got.append((r.find("spirit:name", NS).text, int(r.find("spirit:addressOffset", NS).text, 16),
                    r.find("spirit:access", NS).text, int(r.find("spirit:reset/spirit:value", NS).text, 16),
                    fields))
    want = [(f.name, f.address, f.register.access.ipxact, f.register.reset,
             [(b.name, b.lsb, b.width) for b in f.register.bit_fields()]) for f in regmap.flat()]
    assert got == want
    # the model's ports are the Verilog's; the file set names files that exist
    model = {p.find("spirit:name", NS).text:
             ({"in": "input", "out": "output"}[p.find("spirit:wire/spirit:direction", NS).text],
              int(p.find("spirit:wire/spirit:vector/spirit:left", NS).text) + 1
              if p.find("spirit:wire/spirit:vector", NS) is not None else 1)
             for p in root.findall("spirit:model/spirit:ports/spirit:port", NS)}
    assert model == ports
    for f in root.findall("spirit:fileSets/spirit:fileSet/spirit:file/spirit:name", NS):
        assert (d / f.text).is_file(), f.text
    return ifs, ports


def test_node_ip_component_lists_axi_lite_and_stream_interfaces(node_ip):
    ifs, ports = _check_component(node_ip, "node", make_node())
    for p in (1, 2):
        assert (ifs[f"s_axis_eth{p}"]["bus"], ifs[f"s_axis_eth{p}"]["mode"]) == ("axis", "slave")
        assert (ifs[f"m_axis_eth{p}"]["bus"], ifs[f"m_axis_eth{p}"]["mode"]) == ("axis", "master")
        assert set(ifs[f"m_axis_eth{p}"]["pmap"]) == {"TDATA", "TKEEP", "TLAST", "TVALID", "TREADY"}
        assert ifs[f"m_axis_eth{p}"]["params"]["TDATA_NUM_BYTES"] == "8"


def test_board_top_ip_lists_axi4_masters_with_address_spaces(top_ip):
    d, top = top_ip
    ifs, ports = _check_component(d, "mcf_node", top)
    root = ET.parse(d / "component.xml").getroot()
    for k in (0, 1, 2):
        bi = ifs[f"m_axi_hp{k}"]
        assert (bi["bus"], bi["mode"], bi["params"]["PROTOCOL"]) == ("aximm", "master", "AXI4")
        assert {"AWADDR", "AWLEN", "WDATA", "WLAST", "BRESP", "ARADDR", "RDATA", "RLAST"} <= set(bi["pmap"])
        space = root.find(f"spirit:addressSpaces/spirit:addressSpace[spirit:name='m_axi_hp{k}']", NS)
        assert int(space.find("spirit:width", NS).text) == 128
        assert int(space.find("spirit:range", NS).text) == 1 << ports[f"m_axi_hp{k}_araddr"][1]
    # the DMA front-end's window is in the memory map too
    assert any(f.name == "dma_id" and f.address == 0x8000 for f in top.register_map().flat())


def test_wrapper_carries_the_same_interfaces_and_compiles(node_ip):
    text = (node_ip / "hdl" / "node_ip.v").read_text()
    root = ET.parse(node_ip / "component.xml").getroot()
    for iname, bi in _interfaces(root).items():
        vlnv = "xilinx.com:{0}:{1}:1.0".format("interface" if bi["bus"] in ("aximm", "axis") else "signal", bi["bus"])
        for logical, physical in bi["pmap"].items():
            assert re.search(rf'\(\* X_INTERFACE_INFO = "{vlnv} {iname} {logical}" \*\)\s*'
                             rf'(?:\(\* X_INTERFACE_PARAMETER = "[^"]*" \*\)\s*)?(?:input|output) wire '
                             rf'(?:\[\d+:0\] )?{physical}\b', text), (iname, physical)
    assert 'X_INTERFACE_PARAMETER = "ASSOCIATED_BUSIF s_axi:' in text
    assert 'X_INTERFACE_PARAMETER = "POLARITY ACTIVE_HIGH"' in text
    iverilog = shutil.which("iverilog")
    assert iverilog, "iverilog not on PATH: scripts/setup.sh installs it (Debian package iverilog)"
    proc = subprocess.run([iverilog, "-o", os.devnull, "-s", "node_ip", str(node_ip / "hdl" / "node_ip.v"),
                           str(node_ip / "hdl" / "node.v")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_c_header_compiles_and_agrees_with_the_definitions(node_ip, tmp_path):
    gcc = shutil.which("gcc") or shutil.which("cc")
    assert gcc, "no C compiler on PATH: scripts/setup.sh installs g++ (and with it gcc)"
    regmap = make_node().register_map()
    flat = regmap.flat()
    picks = [f for f in flat if f.name in ("engine_status", "nic_node_id", "kvpool_budget", "node_status",
                                           "node_p2_peer_mac_hi")]
    assert len(picks) == 5
    lines = []
    for f in flat:
        n = f"NODE_{f.name.upper()}"
        lines.append(f'    printf("{f.name} %u %u %u %u\\n", (unsigned){n}, (unsigned){n}_RESET, '
                     f'(unsigned){n}_ACCESS, (unsigned){n}_WIDTH);')
        for b in f.register.bit_fields():
            lines.append(f'    printf("{f.name}.{b.name} %u %u\\n", (unsigned){n}_{b.name.upper()}_SHIFT, '
                         f'(unsigned){n}_{b.name.upper()}_MASK);')
    asserts = "\n".join(f"_Static_assert(NODE_{f.name.upper()} == {f.address}u, \"{f.name}\");" for f in picks)
    src = tmp_path / "check.c"
    src.write_text(f'#include <stdio.h>\n#include "regmap.h"\n{asserts}\nint main(void) {{\n'
                   + "\n".join(lines) + "\n    return 0;\n}\n")
    exe = tmp_path / "check"
    proc = subprocess.run([gcc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-I", str(node_ip), "-o", str(exe),
                           str(src)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    access = {"RW": 0, "RO": 1, "WO": 2}
    want = []
    for f in flat:
        r = f.register
        want.append(f"{f.name} {f.address} {r.reset} {access[r.access.name]} {r.width}")
        want += [f"{f.name}.{b.name} {b.lsb} {b.mask}" for b in r.bit_fields()]
    assert out == want
    status = {ln.split()[0]: ln.split()[1:] for ln in out}
    assert status["engine_status.error"] == ["8", str(0xFF00)]      # bits 8..15 of the engine's STATUS


def test_markdown_lists_every_register(node_ip):
    text = (node_ip / "regmap.md").read_text()
    regmap = make_node().register_map()
    rows = re.findall(r"^\| (0x[0-9a-f]+) \| 0x[0-9a-f]+ \| `(\w+)` \| (RW|RO|WO) \|", text, re.M)
    assert [(int(a, 16), n, acc) for a, n, acc in rows] == \
        sorted(((f.address, f.name, f.register.access.name) for f in regmap.flat()),
               key=lambda t: (next(i for i, w in enumerate(regmap.windows) if t[1].startswith(w.name + "_")), t[0]))
    for w in regmap.windows:
        assert f"## {w.name} ({w.base:#06x})" in text


def test_regmap_alone_needs_no_yosys_and_matches_the_ip_dir(node_ip):
    for fmt in ("md", "h", "json"):
        rc, out, err = _cli("verilog", "node", "--regmap", fmt)
        assert rc == 0, err
        assert out == (node_ip / f"regmap.{fmt}").read_text()


@pytest.mark.parametrize("argv, code, message", [
    (["verilog", "node", "--ip", "FILE"], 2, "--ip FILE: exists and is not a directory"),
    (["verilog", "node", "--ip", "d", "-o", "x.v"], 2, "leave out -o"),
    (["verilog", "node", "--ip", "d", "--regmap", "h"], 2, "leave out --regmap"),
    (["verilog", "axis_register_slice", "--regmap", "h"], 2, "has no register map"),
    (["verilog", "node", "--regmap", "pdf"], 2, "invalid choice: 'pdf'"),
])
def test_bad_ip_input_is_one_line_and_writes_nothing(tmp_path, monkeypatch, argv, code, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "FILE").write_text("keep me")
    rc, out, err = _cli(*argv)
    assert rc == code and message in err and err.count("\n") == 1, err
    assert sorted(os.listdir(tmp_path)) == ["FILE"] and (tmp_path / "FILE").read_text() == "keep me"
