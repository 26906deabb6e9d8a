"""A shell script in place of ``verilator`` for build tests: ``install`` puts ``script`` on the
build's PATH, fakes the version, and points the build cache at ``tmp_path``."""
import os
import stat

import mcf_fpga.sim.verilator as vl


def install(tmp_path, monkeypatch, script: str, **env):
    """Install ``script`` as ``verilator`` for ``vl.build_from_sources``; ``env``: extra
    variables the script sees. Returns the script's directory."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "verilator"
    exe.write_text(script)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    full = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}", **env)
    monkeypatch.setattr(vl, "verilator_env", lambda: full)
    monkeypatch.setattr(vl, "_verilator_version", lambda env: "fake verilator")
    monkeypatch.setenv("MCF_CACHE", str(tmp_path / "cache"))
    return bindir
