"""The KR260 build flow behind ``mcf build``: sources, constraints, Tcl, resource report.

:func:`build` writes into one build directory (and nowhere else):

==================  ==============================================================
``mcf_node.v``      the top (node, or the stand-in), AMBA port names
``kr260_top.v``     the board top (boards.board_top) with the board I/O and MACs
``kr260_top.xdc``   pin LOC/IOSTANDARD of every PL pin used, clocks
``cdc.tcl``         timing exceptions for Amaranth's CDC cells, bitstream options
``build.tcl``       the Vivado script (boards.vivado): project, block design, bitstream
``build_plan.md``   what to run, in order, and what each step produces
``synth/``          Yosys work directory (model of the block design, logs)
``utilisation.rpt`` Yosys estimate against the XCK26
``manifest.json``   app name, node id, addresses: read by ``mcf package``
``regmap.json``     the top's AXI-Lite register map (``spec.regmap``; read by
                    ``mcf package --pynq``), also as ``regmap.md`` and ``regmap.h``
``ip/``             the top packaged as a Vivado IP (mcf_fpga/boards/ip/package_ip.py)
==================  ==============================================================

With Vivado on PATH it then runs ``vivado -mode batch -source build.tcl``.
"""
import json
import os
import re
import shutil
import subprocess
import warnings
from dataclasses import dataclass

from mcf_fpga.hdl.dsp48e2 import XCUP
from mcf_fpga.hdl.verilog import to_verilog

from .board_top import KR260Top, TOP_NAME, BD_NAME
from .dts import check_app_name
from .ip.package_ip import register_map_of, regmap_files, write_ip
from .kr260 import KR260Platform, PART, BOARD_PART, XCK26_RESOURCES
from .ps_model import ps_model_verilog
from .standin import StandInTop
from .top import describe_top
from .utilisation import synthesize, report_text
from .vivado import build_tcl, cdc_tcl, AXIL_BASE

__all__ = ["BOARDS", "TOPS", "DEFAULT_TOP", "KR260_RX_ENTRIES", "KR260_W_LANES", "BuildResult", "build", "default_top",
           "plan_text"]

BOARDS = ("kr260",)
NODE_MODULE = "mcf_node"


#: RX placer entries of the fetching KR260 top: a decode request needs 1 + 1 + n_sum entries
#: (query, max result, merged partials: host.compiler.rx_entry_key, one per message stream for
#: all layers), 9 at Qwen2.5-1.5B with 2 KB packets, so 16 serve one request in flight with room
#: to spare (a second pipelined request adds 1 + n_sum: 17 in all); as the simulated fetching node
#: (host.executors.rtl.SIM_RX_ENTRIES). A plan that needs more is refused by the compiler naming
#: the limit (host.node_image: "receive keys, the RX placer has rx_entries=16"). 32 (three
#: requests) would cost about 340 LUT more (Yosys, scripts/bench_fetch_resources.py: the placer
#: +125, the command fetcher's 16 more 32-bit counters to WAIT on +213) and 1,000 FF.
KR260_RX_ENTRIES = 16


#: weight lanes of the host-fed KR260 tops (``NodeDMA(w_lanes=...)``: GEMM weight tiles striped
#: over S_AXI_HP2_FPD, S_AXI_HPC0_FPD and S_AXI_HPC1_FPD, boards.striped_reader); what
#: ``host.config.HardwareConfig.kr260().weight_ports`` models. The fetching top reads its weights
#: through the node's stream loader on HP2 alone (NodeDMA refuses w_lanes > 1 with fetch), the
#: test-sized "node" top keeps one lane.
KR260_W_LANES = 3


def _node_top(nodes, node_id, kr260=None):
    """``kr260``: None (the small engine), "ddr" (K/V in DDR, HP3), "fetch" (the same with the
    command fetcher, the stream loader, the token picker and the RX placer) or "onchip". "ddr"
    and "onchip" stripe the weights over :data:`KR260_W_LANES` read ports."""
    from mcf_fpga.hdl.compute.engine import KR260, kr260_ddr_engine
    from mcf_fpga.hdl.node import NodeConfig
    from .node_top import NodeBoardTop
    engine = {None: None, "ddr": kr260_ddr_engine(), "fetch": kr260_ddr_engine(), "onchip": dict(KR260)}[kr260]
    fetch = dict(fetcher=True, pick_slots=4, rx_entries=KR260_RX_ENTRIES) if kr260 == "fetch" else {}
    cfg = NodeConfig() if engine is None else NodeConfig(engine=engine, kv_install=kr260 in ("ddr", "fetch"), **fetch)
    lanes = {"w_lanes": KR260_W_LANES} if kr260 in ("ddr", "onchip") else {}
    return NodeBoardTop(nodes, node_id, cfg, **lanes)


#: tops `mcf build --top` can build: name -> factory(nodes, node_id).
#: "node": the node (mcf_fpga/boards/node_top.py) with the test-sized engine (hdl.node.SMALL_ENGINE);
#: "node-kr260": the same with the KR260 engine keeping K/V in DDR (hdl.compute.engine.kr260_ddr_engine:
#: the KV streamer on S_AXI_HP3_FPD over spec.kvregion.kr260_region(), 1 GiB at 0x8_0000_0000) and
#: the NIC install path (NodeConfig.kv_install: the KV installer's writes on S_AXI_HP2_FPD's write channels)
#: and the GEMM weight tiles striped over HP2, HPC0 and HPC1 (KR260_W_LANES, m_axi_hpc0/1 on S_AXI_HPC0/1_FPD);
#: "node-kr260-fetch": "node-kr260" running its own command stream (NodeConfig.fetcher:
#: the command fetcher on S_AXI_HP0_FPD's reads, the stream loader on S_AXI_HP2_FPD's, the token
#: picker on sp_out (4 slots), the RX placer (KR260_RX_ENTRIES entries) on S_AXI_HP0_FPD's writes,
#: shared with the RX-ring writer through a round-robin AXI4 write arbiter (mcf_fpga/boards/node_top.py), no
#: host cmd/sp_in/w readers; no whole-top Yosys run: its estimate adds
#: scripts/bench_fetch_resources.py's blocks to node-kr260's, docs/boards.md "Utilisation");
#: "node-kr260-onchip": the KR260 engine with K/V in its 4,096-row attention memory (about 73 tokens
#: per node at 28 layers; the build measured before K/V moved to DDR: ~90 % of the XCK26's LUTs, 78 % of
#: its BRAM36, docs/boards.md), weights striped like "node-kr260". Both are synthesized in two parts
#: (NodeBoardTop.synth_split);
#: "standin": the bring-up register file.
#: "node" is the default: Yosys puts it at 58.8 % of the XCK26's LUTs (docs/boards.md).
TOPS = {
    "node": lambda nodes, node_id: _node_top(nodes, node_id),
    "node-kr260": lambda nodes, node_id: _node_top(nodes, node_id, kr260="ddr"),
    "node-kr260-fetch": lambda nodes, node_id: _node_top(nodes, node_id, kr260="fetch"),
    "node-kr260-onchip": lambda nodes, node_id: _node_top(nodes, node_id, kr260="onchip"),
    "standin": lambda nodes, node_id: StandInTop(nodes=nodes, node_id=node_id),
}
DEFAULT_TOP = "node"


def default_top(nodes=1, node_id=0, name=None):
    """Instantiate top ``name`` (default :data:`DEFAULT_TOP`) for node ``node_id`` of ``nodes``."""
    name = name or DEFAULT_TOP
    if name not in TOPS:
        raise ValueError(f"unknown top {name!r} (known: {', '.join(sorted(TOPS))})")
    return TOPS[name](nodes, node_id)


@dataclass
class BuildResult:
    out: str
    files: list
    utilisation: object
    vivado_ran: bool
    lut_percent: float


def check_args(board, nodes, node_id):
    if board not in BOARDS:
        raise ValueError(f"unknown board {board!r} (known: {', '.join(BOARDS)})")
    if not isinstance(nodes, int) or nodes < 1:
        raise ValueError(f"--nodes must be >= 1, got {nodes}")
    if not isinstance(node_id, int) or not 0 <= node_id < nodes:
        raise ValueError(f"--node-id must be in 0..{nodes - 1} for --nodes {nodes}, got {node_id}")


def synth_split_modules(top, node_v: str) -> list:
    """Verilog module names of ``top.synth_split`` (hierarchical Amaranth paths inside the top,
    e.g. ``"node.engine"``): the parts the Yosys estimate synthesizes on their own."""
    out = []
    for path in getattr(top, "synth_split", ()):
        names = re.findall(rf"^module \\({re.escape(NODE_MODULE)}(?:\.\S+)?\.{re.escape(path)}) ",
                           node_v, re.M)
        if len(names) != 1:
            raise RuntimeError(f"synth_split {path!r}: {len(names)} modules of {NODE_MODULE}.v "
                               f"end in .{path} (want exactly one)")
        out += names
    return out


def plan_text(app, vivado_found):
    return f"""# KR260 build plan for app `{app}`

Part {PART}, board part {BOARD_PART}. All paths are relative to this directory.

1. (done by `mcf build`) Verilog `mcf_node.v` + `kr260_top.v`, constraints `kr260_top.xdc`
   + `cdc.tcl`, Vivado script `build.tcl`, Yosys estimate `utilisation.rpt`.
2. Vivado (2022.2 or later, with the Kria board files): {'ran' if vivado_found else 'NOT on PATH; run'}

       vivado -mode batch -source build.tcl -log vivado.log -journal vivado.jou

   It creates the project in `./vivado`, the block design `{BD_NAME}` (PS + node),
   implements, and writes `{app}.bit`, `{app}.bit.bin`, `{app}.xsa`, `{app}.hwh`,
   `utilisation_vivado.rpt`, `timing_vivado.rpt`.
3. `mcf package -d .` : the dfx-mgr folder `package/{app}/` with `{app}.bit.bin`,
   `{app}.dtbo` (dtc from the generated `{app}.dtsi`) and `shell.json`.
4. `mcf flash -d . --host user@board` : copies it to `/lib/firmware/xilinx/{app}/`
   on the board and runs `xmutil unloadapp; xmutil loadapp {app}`.
5. On the board: `host.board.driver.BoardDriver` maps the AXI-Lite window at
   {AXIL_BASE:#x} (UIO device `mcf`, or PYNQ `Overlay("{app}.bit")` with the .hwh).
"""


def build(board="kr260", *, nodes=1, node_id=0, out=None, app="mcf", top=None, top_name=None,
          run_vivado=None, synth=True, log=print) -> BuildResult:
    """Write the build directory (see module docstring); returns a :class:`BuildResult`.

    ``top``: a component satisfying boards.top; else ``top_name`` from :data:`TOPS`.
    ``run_vivado``: None = run if ``vivado`` is on PATH.
    Raises ValueError for bad arguments or a design that does not fit the XCK26.
    """
    check_args(board, nodes, node_id)
    check_app_name(app)
    if top is None:
        top = default_top(nodes, node_id, top_name)
    out = os.path.abspath(out or os.path.join("build", f"{board}-node{node_id}"))
    ports = describe_top(top, module=NODE_MODULE)
    os.makedirs(out, exist_ok=True)
    files = []

    def write(name, text):
        path = os.path.join(out, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        files.append(name)
        return path

    node_v = to_verilog(top, NODE_MODULE, platform=XCUP)     # DSP48E2 primitives for Vivado
    write(f"{NODE_MODULE}.v", node_v)
    files += [f"ip/{f}" for f in write_ip(os.path.join(out, "ip"), top, NODE_MODULE, verilog_text=node_v)]
    regmap = register_map_of(top, NODE_MODULE)
    if regmap is not None:
        for name, text in regmap_files(regmap).items():
            write(name, text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")       # UnusedElaboratable for the node (used via Verilog)
        plan = KR260Platform().build(KR260Top(ports), name=TOP_NAME, do_build=False)
    write(f"{TOP_NAME}.v", plan.files[f"{TOP_NAME}.v"])
    write(f"{TOP_NAME}.xdc", plan.files[f"{TOP_NAME}.xdc"])
    write("cdc.tcl", cdc_tcl())
    write("build.tcl", build_tcl(ports, app=app, sources=[f"{NODE_MODULE}.v", f"{TOP_NAME}.v"],
                                 constraints=[f"{TOP_NAME}.xdc", "cdc.tcl"]))
    vivado = shutil.which("vivado")
    if run_vivado is None:
        run_vivado = vivado is not None
    write("build_plan.md", plan_text(app, run_vivado))
    manifest = {"board": board, "app": app, "nodes": nodes, "node_id": node_id,
                "module": NODE_MODULE, "axil_base": AXIL_BASE, "axil_size": 2 ** ports.axil_addr_width,
                "hp_masters": list(ports.hp_masters), "hpc_masters": list(ports.hpc_masters),
                "links": list(ports.links),
                "bitstream": f"{app}.bit.bin"}
    if regmap is not None:
        manifest["regmap"] = "regmap.json"
    write("manifest.json", json.dumps(manifest, indent=2) + "\n")
    log(f"wrote {len(files)} files to {out}")

    util = None
    if synth:
        sdir = os.path.join(out, "synth")
        os.makedirs(sdir, exist_ok=True)
        for name in (f"{NODE_MODULE}.v", f"{TOP_NAME}.v"):
            shutil.copyfile(os.path.join(out, name), os.path.join(sdir, name))
        with open(os.path.join(sdir, "ps_model.v"), "w") as f:
            f.write(ps_model_verilog(top, ports))
        split = synth_split_modules(top, node_v)
        log("Yosys synth_xilinx -family xcup (node + board glue; first run compiles Yosys, ~60 s)"
            + (f", in {len(split) + 1} parts" if split else "") + " ...")
        util = synthesize([f"{NODE_MODULE}.v", f"{TOP_NAME}.v", "ps_model.v"], TOP_NAME, sdir,
                          split=split, log=log)
        write("utilisation.rpt", report_text(util, f"{app}: {TOP_NAME} (node {node_id} of {nodes})"))
        for r in XCK26_RESOURCES:
            log(f"  {r:<7} {util.used[r]:>9g} / {XCK26_RESOURCES[r]:<7} ({util.percent(r):.2f} %)")
        if not util.fits():
            raise ValueError(f"design does not fit the XCK26: {', '.join(util.over())} over budget "
                             f"(see {os.path.join(out, 'utilisation.rpt')})")

    if run_vivado:
        if vivado is None:
            raise OSError("vivado is not on PATH")
        log(f"running Vivado in {out} (this takes a while) ...")
        proc = subprocess.run([vivado, "-mode", "batch", "-source", "build.tcl",
                               "-log", "vivado.log", "-journal", "vivado.jou"], cwd=out)
        if proc.returncode != 0:
            raise OSError(f"Vivado failed (exit {proc.returncode}); see {os.path.join(out, 'vivado.log')}")
    else:
        log("Vivado is not on PATH: the build plan is complete; to make the bitstream run")
        log(f"  cd {out} && vivado -mode batch -source build.tcl")
        log(f"  (steps: {os.path.join(out, 'build_plan.md')})")
    lut = util.percent("LUT") if util else float("nan")
    return BuildResult(out, files, util, bool(run_vivado), lut)
