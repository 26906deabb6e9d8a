"""Timing estimate without place and route: the logic depth of a Yosys ``synth_xilinx`` netlist.

Yosys maps a design to UltraScale+ cells (``synth_xilinx -family xcup -flatten``) and writes the
netlist as JSON; :func:`critical_paths` walks it from every timing start point (a flip-flop's Q, a
block RAM's or URAM's read data, a registered DSP48E2's P, a primary input) through the
combinational cells (LUTs, MUXF7/8/9, CARRY4/8, LUT-RAM reads, unregistered DSP48E2) to every end
point (a flip-flop's D/CE/R, a RAM's or DSP's inputs, a primary output), and returns the slowest
paths with their logic levels and an estimated delay.

The delay is an estimate, not a sign-off figure: :data:`XCUP_1` gives each cell a fixed delay and
each net between cells a fixed routing delay (stated assumptions for an UltraScale+ -1 part,
beside each field; Vivado's timing after placement will differ, routing most). The robust part
is the path's shape: how many LUT levels and carry cells lie between two registers, which is
what pipelining changes. Primary inputs and outputs are taken as registered just outside the
module (a unit synthesized alone).

``netlist(...)`` runs Yosys (``boards.utilisation``'s runner) and loads the JSON.
"""
from __future__ import annotations

import heapq
import json
import math
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field

__all__ = ["CellDelays", "XCUP_1", "Path", "critical_paths", "analyse", "over_by_block", "netlist", "classify"]


@dataclass(frozen=True)
class CellDelays:
    """Delays (ns) of the estimate. Assumptions for an UltraScale+ -1 speed grade, of the order of
    Vivado's reports for such parts; not taken from a data sheet table."""
    lut: float = 0.125          #: any LUT1..LUT6 (and INV, a LUT1 in the fabric), input to output
    net: float = 0.45           #: routing between two cells (not on dedicated CARRY/MUXF links)
    muxf: float = 0.10          #: MUXF7/8/9, on the dedicated link from the LUTs
    carry_in: float = 0.25      #: CARRY8 (or CARRY4) from S/DI/AX to CO/O (a LUT's S/DI inside the slice)
    carry_step: float = 0.10    #: one CARRY8 (8 bits) from CI to CO/O; CARRY4 half of it
    clk_to_q: float = 0.10      #: flip-flop clock to Q
    setup: float = 0.05         #: flip-flop D/CE/R setup
    ram_out: float = 1.00       #: block RAM / URAM clock to read data (no output register)
    ram_setup: float = 0.50     #: block RAM / URAM address/data/enable setup
    lutram_read: float = 0.30   #: LUT-RAM address to read data (asynchronous read)
    dsp_comb: float = 2.50      #: DSP48E2 with no internal register, input to output
    dsp_out: float = 1.00       #: registered DSP48E2, clock to P (half of its pipeline on the path)
    dsp_setup: float = 1.00     #: registered DSP48E2, input setup


XCUP_1 = CellDelays()


@dataclass(frozen=True)
class Path:
    """One timing path: its estimated delay (ns), the cells on it by kind, where it starts and
    ends (signal names of the Verilog), and the cell types in order."""
    delay_ns: float
    luts: int
    carries: int                #: carry cells in CARRY8 equivalents (a CARRY4 is half of one)
    muxf: int
    dsps: int
    start: str
    end: str
    cells: tuple = field(default=(), repr=False)
    #: the design's signal names the path passes through, start to end (nets Yosys named are left out)
    via: tuple = field(default=(), repr=False)

    @property
    def levels(self) -> int:
        """Logic levels as Vivado counts them: LUTs, MUXFs and carry cells (a chain counts each)."""
        return self.luts + self.muxf + self.carries

    def slack(self, mhz: float) -> float:
        return 1000.0 / mhz - self.delay_ns


def classify(cell_type: str, params: dict) -> str:
    """How a cell type takes part in timing: ``"ff"`` (starts at its outputs, ends at its inputs),
    ``"ram"`` (likewise, with RAM delays), ``"lutram"`` (address inputs to outputs combinational,
    other inputs end), ``"dsp"`` (registered DSP48E2), ``"comb"`` (combinational), ``"io"``
    (buffers, ignored: the path passes through)."""
    t = cell_type.lstrip("\\")
    if t.startswith(("FD", "LD")) or t.startswith("SRL"):
        return "ff"
    if t.startswith(("RAMB", "URAM", "FIFO")):
        return "ram"
    if t.startswith("RAM"):
        return "lutram"
    if t == "DSP48E2":
        regs = [k for k in params if k.endswith("REG") and k[:-3] in ("A", "B", "C", "D", "M", "P", "AD")]
        return "dsp" if any(_param_int(params[k]) for k in regs) else "comb"
    if t in ("IBUF", "OBUF", "BUFG", "IBUFG", "BUFGCE", "OBUFT", "IOBUF"):
        return "io"
    return "comb"


def _param_int(v) -> int:
    """A cell parameter as Yosys's JSON writes it (a binary string, or a number) as an int."""
    return int(str(v), 2) if set(str(v)) <= {"0", "1"} else int(v)


#: a registered DSP48E2's data inputs and the parameter of the register each goes through first
_DSP_INPUT_REG = {"A": "AREG", "ACIN": "AREG", "B": "BREG", "BCIN": "BREG", "C": "CREG", "D": "DREG",
                  "CARRYIN": "CARRYINREG", "OPMODE": "OPMODEREG", "ALUMODE": "ALUMODEREG",
                  "INMODE": "INMODEREG", "CARRYINSEL": "CARRYINSELREG"}


def _dsp_input_setup(port: str, params: dict, d: "CellDelays") -> float:
    """Setup of a registered DSP48E2's input ``port``: ``dsp_setup`` into its own register (or a
    clock enable / reset), ``dsp_comb`` when that register is off (the path runs on through the
    multiplier or the ALU to the next register inside). A parameter Yosys did not write has the
    primitive's default, 1 (UG579)."""
    reg = _DSP_INPUT_REG.get(port)
    if reg is None or _param_int(params.get(reg, 1)):
        return d.dsp_setup
    return d.dsp_comb


def _dsp_start(params: dict, d: "CellDelays") -> float:
    """Clock to P of a registered DSP48E2: ``dsp_out`` with its P register, else through the
    ALU from the register before it (``dsp_out + dsp_comb``)."""
    return d.dsp_out if _param_int(params.get("PREG", 1)) else d.dsp_out + d.dsp_comb


def _lutram_comb_input(port: str) -> bool:
    """A LUT-RAM input whose value reaches the read data combinationally: its read address
    (RAM32M/RAM64M ``ADDRx``, RAM64X1D ``A0..`` and ``DPRA0..``)."""
    return port.startswith(("A", "DPRA"))


def _kind_of(t: str) -> str:
    t = t.lstrip("\\")
    if t.startswith("LUT") or t == "INV":
        return "lut"
    if t.startswith("MUXF"):
        return "muxf"
    if t.startswith("CARRY"):
        return "carry"
    if t == "DSP48E2":
        return "dsp"
    if t.startswith("RAM"):
        return "lut"          # a LUT-RAM read is a LUT level
    return "other"


def _generated(name: str) -> bool:
    """A name Yosys or Amaranth made up (``$abc$...``, ``\\$signal$3``), not the design's."""
    return name.lstrip("\\").startswith("$")


def _names(mod: dict) -> dict:
    """bit -> the best signal name driving it (a public name before a generated one)."""
    best = {}
    for name, net in mod.get("netnames", {}).items():
        name = name.lstrip("\\")
        rank = (1 if net.get("hide_name") else 0, name.count("$"), len(name))
        for i, b in enumerate(net["bits"]):
            if isinstance(b, int):
                label = name if len(net["bits"]) == 1 else f"{name}[{i}]"
                if b not in best or rank < best[b][0]:
                    best[b] = (rank, label)
    return {b: v[1] for b, v in best.items()}


def critical_paths(net: dict, top: str | None = None, delays: CellDelays = XCUP_1, n: int = 10) -> list:
    """The ``n`` slowest paths of module ``top`` of a Yosys JSON netlist (``write_json`` of a
    flattened design), one per end signal, slowest first (:class:`Path`); a cell of a module listed
    in ``net["black_boxes"]`` (kept as ports only, :func:`netlist`) starts and ends paths as a
    register would. Raises ValueError on a combinational loop or a cell whose ports Yosys did not
    describe."""
    return analyse(net, top, delays, n)[0]


def analyse(net: dict, top: str | None = None, delays: CellDelays = XCUP_1, n: int = 10) -> tuple:
    """``(critical_paths(net, top, delays, n), ends)``: ``ends`` maps every end signal (a register,
    memory or output, one per signal as in :class:`Path`'s ``end``) to its slowest path's delay in
    ns, so that the number of signals a clock target would fail is ``sum(t > period for t in
    ends.values())``, not only among the ``n`` slowest."""
    mods = net["modules"]
    if top is None:
        tops = [k for k, m in mods.items() if m.get("attributes", {}).get("top")]
        top = tops[0] if tops else next(iter(mods))
    mod = mods[top]
    d = delays
    cells = mod.get("cells", {})
    driver = {}                        # bit -> (cell name, port)
    comb_in = defaultdict(list)        # cell -> [(port, bit)] inputs that propagate to its outputs
    ends = []                          # (cell, port, bit, setup)
    kind = {}
    boxes = set(net.get("black_boxes", ()))   # the design's modules kept as ports (not the cell library's)
    for cname, c in cells.items():
        dirs = c.get("port_directions")
        if not c.get("connections"):
            continue                   # e.g. Yosys's $scopeinfo: hierarchy notes, no wires
        if dirs is None:
            raise ValueError(f"timing: cell {cname} ({c['type']}) has no port directions")
        k = "ff" if c["type"] in boxes else classify(c["type"], c.get("parameters", {}))
        kind[cname] = k
        for port, bits in c["connections"].items():
            for b in bits:
                if not isinstance(b, int):
                    continue
                if dirs[port] == "output":
                    driver[b] = (cname, port)
                elif k in ("comb", "io") or (k == "lutram" and _lutram_comb_input(port)):
                    comb_in[cname].append((port, b))
                elif k != "lutram" or not port.startswith("WCLK"):
                    setup = (_dsp_input_setup(port, c.get("parameters", {}), d) if k == "dsp" else
                             {"ff": d.setup, "ram": d.ram_setup, "lutram": d.setup}[k])
                    if port not in ("C", "CLK", "CLKARDCLK", "CLKBWRCLK", "WCLK"):
                        ends.append((cname, port, b, setup))
    for pname, p in mod.get("ports", {}).items():
        if p["direction"] == "output":
            ends += [(None, pname, b, 0.0) for b in p["bits"] if isinstance(b, int)]

    start_delay = {"ff": d.clk_to_q, "ram": d.ram_out}      # a DSP48E2's: _dsp_start
    cell_delay = {"lut": d.lut, "muxf": d.muxf, "dsp": d.dsp_comb, "other": 0.0}
    arr = {}                           # cell -> (arrival at its outputs, predecessor cell or None, via bit)

    def source_time(b):
        """(arrival time at bit ``b``, the cell driving it or None for an input)."""
        drv = driver.get(b)
        if drv is None:
            return 0.0, None           # primary input (or undriven): registered outside
        cname, port = drv
        k = kind[cname]
        if k == "dsp":
            return _dsp_start(cells[cname].get("parameters", {}), d), cname
        if k in start_delay:
            return start_delay[k], cname
        return arr[cname][0], cname

    # Kahn over combinational cells (lutram reads count as combinational)
    comb = [c for c in kind if kind[c] in ("comb", "io", "lutram")]
    deps = {}
    users = defaultdict(list)
    for c in comb:
        preds = {driver[b][0] for _, b in comb_in[c] if b in driver and kind[driver[b][0]] in ("comb", "io", "lutram")}
        deps[c] = len(preds)
        for p in preds:
            users[p].append(c)
    ready = [c for c in comb if deps[c] == 0]
    done = 0
    while ready:
        c = ready.pop()
        done += 1
        t = cells[c]["type"].lstrip("\\")
        kd = _kind_of(t)
        best = (0.0, None, None)
        for port, b in comb_in[c]:
            at, src = source_time(b)
            src_t = cells[src]["type"].lstrip("\\") if src else ""
            dedicated = (kd == "carry" and port == "CI" and src_t.startswith("CARRY")) or \
                (kd == "carry" and port.startswith(("S", "DI")) and src_t.startswith("LUT")) or \
                (kd == "muxf" and src_t.startswith(("LUT", "MUXF")))    # links inside a slice
            if kind.get(c) == "io":
                hop = 0.0
            elif kd == "carry":
                step = d.carry_step * (0.5 if t == "CARRY4" else 1.0)
                hop = step if port == "CI" else d.carry_in + (0.0 if dedicated else d.net)
            else:
                hop = (0.0 if dedicated else d.net) + (d.lutram_read if kind[c] == "lutram" else cell_delay[kd])
            if at + hop > best[0] or best[1] is None:
                best = (at + hop, src, b)
        arr[c] = best
        for u in users[c]:
            deps[u] -= 1
            if deps[u] == 0:
                ready.append(u)
    if done != len(comb):
        stuck = [c for c in comb if c not in arr][:5]
        raise ValueError(f"timing: combinational loop through {len(comb) - done} cells, e.g. {stuck}")

    names = _names(mod)
    worst = {}                         # end label -> (delay, cell, bit)
    for cname, port, b, setup in ends:
        at, src = source_time(b)
        total = at + (d.net if src is not None else 0.0) + setup
        if cname is None:
            label = f"output {port}"
        else:                          # the register (or memory) written: its output's signal name
            qbits = [x for p, bits in cells[cname]["connections"].items()
                     if cells[cname]["port_directions"][p] == "output" for x in bits if isinstance(x, int)]
            label = names.get(qbits[0], cname) if qbits else cname
            if _generated(label):      # a register or RAM Yosys named: its input's or its cell's name
                label = next((x for x in (names.get(b, "$"), cname) if not _generated(x)), label)
        label = re.sub(r"(\.\d+)+$", "", label.split("[")[0])   # one path per signal or memory
        if label not in worst or total > worst[label][0]:
            worst[label] = (total, src, b)
    out = []
    for label, (total, src, b) in heapq.nlargest(n, worst.items(), key=lambda kv: kv[1][0]):
        chain, via, cur, bit = [], [b], src, b     # via: the bits the path runs on, end first
        while cur is not None and kind[cur] in ("comb", "io", "lutram"):
            chain.append(cells[cur]["type"].lstrip("\\"))
            _, cur, bit = arr[cur]
            via.append(bit)
        if bit is None:
            start = "constant"
        elif bit not in driver:
            start = f"input {names.get(bit, '?')}"
        else:
            start = names.get(bit, "?")
            if _generated(start) and not _generated(cur):
                start = re.sub(r"(\.\d+)+$", "", cur)   # a RAM's read data: the memory's name
        chain.reverse()
        kinds = [_kind_of(t) for t in chain]
        carry8 = sum(0.5 if t == "CARRY4" else 1.0 for t in chain if t.startswith("CARRY"))
        out.append(Path(round(total, 3), kinds.count("lut"), math.ceil(carry8), kinds.count("muxf"),
                        kinds.count("dsp"), start, label, tuple(chain),
                        tuple(names[x] for x in reversed(via[:-1]) if not _generated(names.get(x, "$")))))
    return out, {label: round(v[0], 3) for label, v in worst.items()}


def over_by_block(ends: dict, period_ns: float, depth: int = 2) -> dict:
    """Where the end signals slower than ``period_ns`` sit: ``{block: [count, worst ns]}`` from
    :func:`analyse`'s ``ends``, the block being a signal's module path (its dotted name without the
    last part) cut to ``depth`` parts, ``"(top)"`` for the top module's own signals; slowest block
    first."""
    out = {}
    for label, t in ends.items():
        if t <= period_ns:
            continue
        parts = label.split(".")[:-1][:depth]
        block = ".".join(parts) if parts else "(top)"
        c = out.setdefault(block, [0, 0.0])
        c[0] += 1
        c[1] = max(c[1], t)
    return dict(sorted(out.items(), key=lambda kv: (-kv[1][1], -kv[1][0], kv[0])))


def netlist(verilog_files, top: str, workdir: str, timeout: float | None = None, blackbox=()) -> dict:
    """Synthesize ``top`` from ``verilog_files`` (in ``workdir``) with ``synth_xilinx -family
    xcup -flatten`` (no I/O or clock buffers: a unit, not a chip) and return its JSON netlist, with
    the cell counts under the key ``"stat"``; ``blackbox``: modules kept as black boxes (their
    cells start and end paths, as registers would). Raises RuntimeError when Yosys fails or does
    not finish within ``timeout`` seconds (``boards.utilisation``, the log's path in the message)."""
    from .utilisation import _run_yosys
    counts = _run_yosys(verilog_files, top, workdir, timeout, [_yosys_name(b) for b in blackbox], "_timing",
                        synth_flags="-noiopad -noclkbuf", extra=["write_json timing.json"])
    with open(os.path.join(workdir, "timing.json")) as f:
        net = json.load(f)
    net["stat"] = counts
    net["black_boxes"] = list(blackbox)
    return net


def _yosys_name(module: str) -> str:
    """A module name as a Yosys command takes it (escaped when it is not a plain identifier)."""
    return module if module.replace("_", "a").isalnum() else "\\" + module
