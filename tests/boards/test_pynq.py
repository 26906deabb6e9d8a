"""`mcf package --pynq`: the PYNQ overlay folder (<app>.bit, <app>.hwh with the node's registers,
<app>.dtbo) from a build directory, and what `mcf build` writes for it (regmap.json/.h/.md, ip/).

The build runs without Yosys or Vivado (``synth=False``); Vivado's outputs are stand-ins (a few
bytes of "bitstream", tests/boards/vivado_hwh.py) as in tests/boards/test_flow.py."""
import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest

from mcf_fpga.boards.flow import build, default_top
from mcf_fpga.boards.ip.component_xml import SPIRIT
from mcf_fpga.spec.regmap import from_json_dict
from tests.boards.vivado_hwh import vivado_like_hwh
from tests.cli_helpers import cli as _cli

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")
APP = "mcfpynq"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("pynq") / "build"
    build("kr260", out=str(d), app=APP, top_name="node", synth=False, run_vivado=False, log=lambda *a: None)
    return d


@pytest.fixture
def build_dir(built, tmp_path):
    """A private copy of the build (tests add stand-in Vivado outputs or break files)."""
    d = tmp_path / "build"
    shutil.copytree(built, d)
    return d


def _vivado_outputs(d, hwh=None):
    (d / f"{APP}.bit").write_bytes(b"\x00\x09stand-in for vivado's .bit")
    (d / f"{APP}.bit.bin").write_bytes(b"\x00\x01stand-in for vivado's .bit.bin")
    (d / f"{APP}.hwh").write_text(vivado_like_hwh() if hwh is None else hwh)


def _hwh_registers(path):
    """{name: (offset, size, access, {field: (bit_offset, bit_width)})} of the node cell, read
    the way pynq.pl_server.hwh_parser reads them (MODULE .//REGISTERS/*[@NAME], PROPERTYs)."""
    root = ET.parse(path).getroot()
    mod = [m for m in root.iter("MODULE") if m.get("INSTANCE") == "node"]
    assert len(mod) == 1
    prop = lambda e, n: e.find(f'./PROPERTY/[@NAME="{n}"]').get("VALUE")
    out = {}
    for r in mod[0].findall(".//REGISTERS/*[@NAME]"):
        assert prop(r, "DESCRIPTION")
        out[r.get("NAME")] = (int(prop(r, "ADDRESS_OFFSET"), 16), int(prop(r, "SIZE")), prop(r, "ACCESS"),
                              {f.get("NAME"): (int(prop(f, "BIT_OFFSET")), int(prop(f, "BIT_WIDTH")))
                               for f in r.findall("./FIELDS/FIELD/[@NAME]")})
    return out


def _want(regmap):
    return {f.name: (f.address, 32, f.register.access.ipxact,
                     {b.name: (b.lsb, b.width) for b in f.register.bit_fields()}) for f in regmap.flat()}


def test_build_writes_the_register_map_and_the_ip(built):
    man = json.loads((built / "manifest.json").read_text())
    assert man["regmap"] == "regmap.json"
    regmap = from_json_dict(json.loads((built / "regmap.json").read_text()))
    assert regmap == default_top(1, 0, "node").register_map()
    assert [w.name for w in regmap.windows] == ["engine", "nic", "kvpool", "node", "dma"]
    assert re.search(r"^#define MCF_NODE_DMA_ID\s+0x8000u", (built / "regmap.h").read_text(), re.M)
    assert "`dma_id`" in (built / "regmap.md").read_text()
    root = ET.parse(built / "ip" / "component.xml").getroot()
    assert root.find(f"{{{SPIRIT}}}name").text == "mcf_node_ip"
    assert (built / "ip" / "hdl" / "mcf_node.v").read_text() == (built / "mcf_node.v").read_text()


def test_package_pynq_writes_bit_hwh_dtbo_with_the_registers(build_dir):
    _vivado_outputs(build_dir)
    rc, out, err = _cli("package", "-d", str(build_dir), "--pynq")
    assert rc == 0, err
    folder = build_dir / "package" / "pynq" / APP
    assert sorted(os.listdir(folder)) == [f"{APP}.bit", f"{APP}.dtbo", f"{APP}.hwh"]
    assert (folder / f"{APP}.bit").read_bytes() == (build_dir / f"{APP}.bit").read_bytes()
    assert f"PYNQ overlay folder: {folder}" in out
    # the Kria app folder is written as without --pynq
    assert sorted(os.listdir(build_dir / "package" / APP)) == [f"{APP}.bit.bin", f"{APP}.dtbo", "shell.json"]
    regmap = default_top(1, 0, "node").register_map()
    got = _hwh_registers(folder / f"{APP}.hwh")
    assert got == _want(regmap) and len(got) == len(regmap.flat()) > 100
    assert got["engine_status"][3] == {"busy": (0, 1), "halted": (1, 1), "error": (8, 8)}
    # the rest of Vivado's handoff is kept: the PS and its address range for node/s_axi
    root = ET.parse(folder / f"{APP}.hwh").getroot()
    (rng,) = [r for r in root.iter("MEMRANGE") if r.get("INSTANCE") == "node"]
    assert int(rng.get("BASEVALUE"), 16) == 0xA000_0000
    dts = subprocess.run(["dtc", "-I", "dtb", "-O", "dts", str(folder / f"{APP}.dtbo")],
                         capture_output=True, text=True, check=True).stdout
    assert "firmware-name" not in dts and 'compatible = "generic-uio"' in dts and "config-afi" in dts
    kria = subprocess.run(["dtc", "-I", "dtb", "-O", "dts", str(build_dir / "package" / APP / f"{APP}.dtbo")],
                          capture_output=True, text=True, check=True).stdout
    assert f'firmware-name = "{APP}.bit.bin"' in kria


def test_pynq_parser_reads_the_registers(build_dir):
    """PYNQ's own parser, when pynq is installed (it is not a project dependency)."""
    hwh_parser = pytest.importorskip("pynq.pl_server.hwh_parser")
    _vivado_outputs(build_dir)
    assert _cli("package", "-d", str(build_dir), "--pynq")[0] == 0
    hwh = build_dir / "package" / "pynq" / APP / f"{APP}.hwh"
    parsed = hwh_parser._HWHUltrascale(hwh_data=hwh.read_text().encode())
    ip = parsed.ip_dict["node"]
    assert (ip["phys_addr"], ip["addr_range"]) == (0xA000_0000, 0x10000)
    regs = {n: (r["address_offset"], r["size"], r["access"],
                {f: (v["bit_offset"], v["bit_width"]) for f, v in r["fields"].items()})
            for n, r in ip["registers"].items()}
    assert regs == _want(default_top(1, 0, "node").register_map())
    # PYNQ's RegisterMap (what Overlay gives a driver) reads the node's STATUS fields by name
    import numpy as np
    from pynq.registers import RegisterMap
    words = np.zeros(ip["addr_range"] // 4, dtype=np.uint32)
    words[regs["node_status"][0] // 4] = 0xAB06            # error 0xAB, engine busy and halted
    rm = RegisterMap.create_subclass("node", ip["registers"])(words)
    assert (rm.node_status.engine_error, rm.node_status.engine_busy, rm.node_status.irq) == (0xAB, 1, 0)


def test_no_vivado_outputs_is_a_runtime_error_and_no_stand_in(build_dir):
    rc, out, err = _cli("package", "-d", str(build_dir), "--pynq")
    assert rc == 1 and "no PYNQ overlay: missing" in err and f"{APP}.bit" in err and err.count("\n") == 1
    assert not (build_dir / "package" / "pynq").exists()


@pytest.mark.parametrize("breakage, message", [
    ("no_regmap_field", "names no register map"),
    ("bad_regmap_json", "regmap.json: not valid JSON"),
    ("hwh_without_range", "maps no address range to node/s_axi"),
    ("hwh_without_node", "has 0 MODULEs with INSTANCE='node'"),
    ("hwh_other_base", "maps node/s_axi at 0xb0000000, expected 0xa0000000"),
    ("hwh_not_xml", "the .hwh is not XML"),
    ("bad_axil_base", "field 'axil_base' is \"0xa0000000\", expected a byte address"),
])
def test_bad_build_dir_is_one_line_usage_error(build_dir, breakage, message):
    _vivado_outputs(build_dir)
    if breakage == "no_regmap_field":
        man = json.loads((build_dir / "manifest.json").read_text())
        del man["regmap"]
        (build_dir / "manifest.json").write_text(json.dumps(man))
    elif breakage == "bad_axil_base":
        man = json.loads((build_dir / "manifest.json").read_text())
        man["axil_base"] = "0xa0000000"
        (build_dir / "manifest.json").write_text(json.dumps(man))
    elif breakage == "bad_regmap_json":
        (build_dir / "regmap.json").write_text("{not json")
    elif breakage == "hwh_without_range":
        text = vivado_like_hwh()
        assert text.count('INSTANCE="node" IS_DATA') == 1
        (build_dir / f"{APP}.hwh").write_text(text.replace('INSTANCE="node" IS_DATA', 'INSTANCE="other" IS_DATA'))
    elif breakage == "hwh_without_node":
        (build_dir / f"{APP}.hwh").write_text(vivado_like_hwh(cell="other"))
    elif breakage == "hwh_other_base":
        (build_dir / f"{APP}.hwh").write_text(vivado_like_hwh(base=0xB000_0000))
    elif breakage == "hwh_not_xml":
        (build_dir / f"{APP}.hwh").write_text("<EDKSYSTEM>")
    rc, out, err = _cli("package", "-d", str(build_dir), "--pynq")
    assert rc == 2 and message in err and err.count("\n") == 1, err
    if breakage.startswith("hwh"):
        assert f"{APP}.hwh: " in err                      # names the file
    assert not (build_dir / "package" / "pynq").exists()


def test_missing_build_dir_with_pynq(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = _cli("package", "-d", "nowhere", "--pynq")
    assert rc == 2 and "not a build directory" in err and err.count("\n") == 1
    assert os.listdir(tmp_path) == []
