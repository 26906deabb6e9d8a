"""dfx-mgr packaging and flashing for the KR260 (``mcf package``, ``mcf flash``).

An app folder is what ``/lib/firmware/xilinx/<app>/`` must hold for
``xmutil loadapp <app>``: ``<app>.bit.bin``, ``<app>.dtbo`` (same base name)
and ``shell.json`` (``XRT_FLAT``, one slot). :func:`package` builds it inside
the build directory (``package/<app>/``); :func:`flash` copies it to a board
over ssh and loads it.

With ``pynq=True`` :func:`package` also writes a PYNQ overlay folder ``package/pynq/<app>/``:
``<app>.bit`` (Vivado's bitstream, copied), ``<app>.hwh`` (Vivado's hardware handoff with the
node cell's registers added from the build's ``regmap.json``: mcf_fpga/boards/pynq_hwh.py) and
``<app>.dtbo`` (the same overlay without the ``&fpga_full`` fragment: PYNQ programs the
bitstream itself). Copy it to the board and ``Overlay("<app>.bit")``.
"""
import json
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass

from .dts import overlay_dtsi, check_app_name

__all__ = ["package", "flash", "flash_commands", "SHELL_JSON", "PackageResult", "check_host"]

SHELL_JSON = '{\n    "shell_type" : "XRT_FLAT",\n    "num_slots": "1"\n}\n'
FIRMWARE_DIR = "/lib/firmware/xilinx"
_HOST_RE = re.compile(r"(?:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}@)?[A-Za-z0-9][A-Za-z0-9.-]{0,252}")


@dataclass
class PackageResult:
    folder: str
    files: list
    pynq: "PackageResult" = None     #: the PYNQ overlay folder, with ``pynq=True``


# manifest.json fields package/flash read: name -> (type, check, what the check means)
_MANIFEST_FIELDS = {
    "app": (str, None, "a string"),
    "axil_size": (int, lambda v: 1 <= v <= 1 << 40 and v & (v - 1) == 0, "a power of two in 1..2**40 (bytes)"),
    "axil_base": (int, lambda v: 0 <= v < 1 << 40, "a byte address below 2**40"),
}


def _manifest(build_dir, fields=("app", "axil_size")):
    """``manifest.json`` of ``build_dir`` as a dict; ValueError naming the file and the field when
    it is missing, not JSON, not an object, or a field (of ``fields``) is missing or mistyped."""
    path = os.path.join(build_dir, "manifest.json")
    if not os.path.isfile(path):
        raise ValueError(f"{build_dir} is not a build directory (no manifest.json): run `mcf build` first")
    try:
        with open(path, "rb") as f:
            man = json.loads(f.read(1 << 20).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"{path}: not valid JSON ({str(exc)[:100]}): re-run `mcf build`") from None
    except OSError as exc:
        raise ValueError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not isinstance(man, dict):
        raise ValueError(f"{path}: expected a JSON object with fields {', '.join(fields)}, got "
                         f"{type(man).__name__}: re-run `mcf build`")
    for name in fields:
        typ, ok, what = _MANIFEST_FIELDS[name]
        if name not in man:
            raise ValueError(f"{path}: missing field {name!r} ({what}): re-run `mcf build`")
        v = man[name]
        if isinstance(v, bool) or not isinstance(v, typ) or (ok is not None and not ok(v)):
            raise ValueError(f"{path}: field {name!r} is {json.dumps(v)[:60]}, expected {what}")
    return man


def _bitstream(build_dir, app, dest):
    """Put ``<app>.bit.bin`` at ``dest``; returns a description, or raises OSError listing what is missing."""
    binf = os.path.join(build_dir, f"{app}.bit.bin")
    bit = os.path.join(build_dir, f"{app}.bit")
    if os.path.isfile(binf):
        shutil.copyfile(binf, dest)
        return "from Vivado's -bin_file output"
    bootgen = shutil.which("bootgen")
    if os.path.isfile(bit) and bootgen:
        bif = os.path.join(build_dir, f"{app}.bif")
        with open(bif, "w") as f:
            f.write(f"all:\n{{\n    [destination_device = pl] {app}.bit\n}}\n")
        proc = subprocess.run([bootgen, "-arch", "zynqmp", "-image", os.path.basename(bif),
                               "-process_bitstream", "bin", "-w"], cwd=build_dir,
                              capture_output=True, text=True)
        if proc.returncode != 0 or not os.path.isfile(binf):
            raise OSError(f"bootgen failed on {bit}: {proc.stderr.strip()[-300:]}")
        shutil.copyfile(binf, dest)
        return "converted by bootgen"
    missing = [f"{binf} (written by `vivado -mode batch -source build.tcl`)"]
    if os.path.isfile(bit):
        missing.append("bootgen on PATH (to convert the .bit)")
    else:
        missing.append(f"or {bit} plus bootgen on PATH")
    raise OSError("no bitstream, so the app folder is incomplete (the .dtbo and shell.json are "
                  "written); missing: " + "; ".join(missing))


def _dtbo(dtsi_text, dtsi, dtbo):
    """Write ``dtsi_text`` to ``dtsi`` and compile it with dtc into ``dtbo``."""
    with open(dtsi, "w") as f:
        f.write(dtsi_text)
    dtc = shutil.which("dtc")
    if dtc is None:
        raise OSError("dtc not found on PATH (Debian: apt-get install device-tree-compiler)")
    proc = subprocess.run([dtc, "-@", "-I", "dts", "-O", "dtb", "-o", dtbo, dtsi],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise OSError(f"dtc failed on {dtsi}: {proc.stderr.strip()[-300:]}")


def _regmap(build_dir, man):
    """The build's register map (``regmap.json`` named by the manifest), or ValueError."""
    from mcf_fpga.spec.regmap import from_json_dict
    name = man.get("regmap")
    if not isinstance(name, str) or os.path.basename(name) != name:
        raise ValueError(f"{build_dir}/manifest.json names no register map (field 'regmap'): "
                         f"re-run `mcf build` (needed by --pynq)")
    path = os.path.join(build_dir, name)
    try:
        with open(path, "rb") as f:
            return from_json_dict(json.loads(f.read(16 << 20).decode("utf-8")))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read ({exc.strerror or exc}): re-run `mcf build`") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"{path}: not valid JSON ({str(exc)[:100]}): re-run `mcf build`") from None
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}: re-run `mcf build`") from None


def package_pynq(build_dir, app, man) -> PackageResult:
    """Make ``<build_dir>/package/pynq/<app>/`` (module docstring); OSError when Vivado's
    ``<app>.bit`` or ``<app>.hwh`` is missing (never a stand-in), ValueError for a bad
    register map or .hwh."""
    from .pynq_hwh import hwh_with_registers
    man = _manifest(build_dir, fields=("app", "axil_size", "axil_base"))
    regmap = _regmap(build_dir, man)
    folder = os.path.join(build_dir, "package", "pynq", app)
    bit, hwh = (os.path.join(build_dir, f"{app}.{ext}") for ext in ("bit", "hwh"))
    missing = [p for p in (bit, hwh) if not os.path.isfile(p)]
    if missing:
        raise OSError(f"no PYNQ overlay: missing {' and '.join(missing)} (written by `vivado -mode "
                      f"batch -source build.tcl`)")
    with open(hwh, "rb") as f:
        text = f.read(64 << 20).decode("utf-8", "replace")
    try:
        hwh_text = hwh_with_registers(text, regmap, base=man["axil_base"])
    except ValueError as exc:
        raise ValueError(f"{hwh}: {exc}") from None
    os.makedirs(folder, exist_ok=True)
    _dtbo(overlay_dtsi(app, axil_addr_width=(man["axil_size"] - 1).bit_length(), pynq=True),
          os.path.join(build_dir, f"{app}.pynq.dtsi"), os.path.join(folder, f"{app}.dtbo"))
    with open(os.path.join(folder, f"{app}.hwh"), "w") as f:
        f.write(hwh_text)
    shutil.copyfile(bit, os.path.join(folder, f"{app}.bit"))
    return PackageResult(folder, sorted(os.listdir(folder)))


def package(build_dir, app=None, pynq=False) -> PackageResult:
    """Make ``<build_dir>/package/<app>/`` (and with ``pynq`` first ``package/pynq/<app>/``);
    raises OSError when a tool or the bitstream is missing."""
    build_dir = os.path.abspath(build_dir)
    man = _manifest(build_dir)
    app = check_app_name(app or man["app"])
    overlay = package_pynq(build_dir, app, man) if pynq else None
    folder = os.path.join(build_dir, "package", app)
    os.makedirs(folder, exist_ok=True)
    _dtbo(overlay_dtsi(app, axil_addr_width=(man["axil_size"] - 1).bit_length()),
          os.path.join(build_dir, f"{app}.dtsi"), os.path.join(folder, f"{app}.dtbo"))
    with open(os.path.join(folder, "shell.json"), "w") as f:
        f.write(SHELL_JSON)
    _bitstream(build_dir, app, os.path.join(folder, f"{app}.bit.bin"))
    return PackageResult(folder, sorted(os.listdir(folder)), overlay)


def check_host(host):
    if not isinstance(host, str) or not _HOST_RE.fullmatch(host):
        raise ValueError(f"--host {host!r} must look like user@board or board (letters, digits, . - _)")
    return host


def flash_commands(folder, app, host, port=None):
    """The argv lists ``mcf flash`` runs, in order."""
    check_app_name(app)
    check_host(host)
    ssh = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"] + (["-p", str(port)] if port else [])
    scp = ["scp", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"] + (["-P", str(port)] if port else [])
    tmp = f"/tmp/mcf-{app}"
    files = [os.path.join(folder, f"{app}.bit.bin"), os.path.join(folder, f"{app}.dtbo"),
             os.path.join(folder, "shell.json")]
    remote = (f"sudo mkdir -p {FIRMWARE_DIR}/{app} && sudo cp {tmp}/* {FIRMWARE_DIR}/{app}/ && "
              f"(sudo xmutil unloadapp || true) && sudo xmutil loadapp {app}")
    return [ssh + [host, "true"],
            ssh + [host, f"rm -rf {tmp} && mkdir -p {tmp}"],
            scp + files + [f"{host}:{tmp}/"],
            ssh + [host, remote]]


def flash(build_dir, host, app=None, port=None, dry_run=False, run=subprocess.run, log=print):
    """Copy the app folder to ``host`` and load it; ``dry_run`` prints the commands instead."""
    build_dir = os.path.abspath(build_dir)
    man = _manifest(build_dir, fields=("app",))
    app = check_app_name(app or man["app"])
    check_host(host)
    folder = os.path.join(build_dir, "package", app)
    cmds = flash_commands(folder, app, host, port)
    missing = [f for f in cmds[2][-4:-1] if not os.path.isfile(f)]
    if dry_run:
        for c in cmds:
            log(shlex.join(c))
        if missing:
            log(f"# note: not packaged yet: {', '.join(missing)} (run `mcf package`)")
        return cmds
    if missing:
        raise OSError(f"app folder incomplete, missing {', '.join(missing)}: run `mcf package` first")
    probe = run(cmds[0], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        raise OSError(f"cannot reach {host} over ssh: {(probe.stderr or '').strip()[-200:] or 'no answer'}")
    for c in cmds[1:]:
        proc = run(c, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise OSError(f"`{shlex.join(c)}` failed: {(proc.stderr or '').strip()[-300:]}")
    log(f"loaded {app} on {host}")
    return cmds
