"""The import layering (docs/architecture.md), read from every source file's imports (ast).

* ``spec`` imports nothing of the project (nor torch or Amaranth): what hardware, golden and
  host agree on, in plain Python.
* ``golden`` (the reference) never imports ``hdl`` or ``sim``.
* ``hdl`` (the synthesizable hardware) imports only ``spec``: never ``golden``, ``sim``,
  ``boards`` or ``host``.
* ``boards`` (board tops and flows) imports only ``spec`` and ``hdl``; ``sim`` (Verilator
  backend, simulated cluster and boards, memory models, link benches) may use ``boards`` and
  ``golden`` but never ``host``: ``host.board`` (the driver) may use ``boards``, not the other
  way round.
* Edges tolerated for a while go in ``ALLOWED`` with their reason; the allow-list must not go
  stale (every entry is still an import).

Function-level (lazy) imports count like module-level ones.
"""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "mcf_fpga"        #: the one import package; its sub-packages are the layers
PROJECT = ("spec", "golden", "hdl", "sim", "host", "boards", "scripts", "tests")

#: importing package -> the top-level packages it must not import
FORBIDDEN = {
    "spec": set(PROJECT) - {"spec"} | {"torch", "amaranth"},
    "golden": {"hdl", "sim", "host", "boards"},
    "hdl": {"golden", "sim", "host", "boards"},
    "sim": {"host"},
    "boards": {"golden", "sim", "host"},
}

#: (file, imported module) edges tolerated for now, with the reason
ALLOWED = {
    # The simulated board hands the driver its own Buffer type (the allocator interface that
    # sim.boards.SimDmaMemory implements for host.board.node_hw).
    ("mcf_fpga/sim/boards.py", "host.board.buffers"),
}


def _imports(path: Path):
    """(module, line) of every absolute import in ``path`` (relative ones stay in their package)."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield _layer_path(alias.name), node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "mcf_fpga":           # ``from mcf_fpga import golden``: "golden"
                for alias in node.names:
                    yield alias.name, node.lineno
            else:                                   # ``from mcf_fpga.golden import numerics``
                yield _layer_path(node.module), node.lineno


def _layer_path(module: str) -> str:
    """``mcf_fpga.golden.link`` -> ``golden.link``: the layer is the sub-package's name."""
    return module[len("mcf_fpga."):] if module.startswith("mcf_fpga.") else module


def _edges():
    """(file, importing package, imported module, line) for every package in FORBIDDEN."""
    for package in FORBIDDEN:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT.parent).as_posix()
            for module, line in _imports(path):
                yield rel, package, module, line


def test_layers_import_only_downwards():
    bad = [f"{rel}:{line} imports {module}" for rel, package, module, line in _edges()
           if module.split(".")[0] in FORBIDDEN[package] and (rel, module) not in ALLOWED]
    assert not bad, "layering broken:\n" + "\n".join(sorted(set(bad)))


def test_allow_list_is_not_stale():
    seen = {(rel, module) for rel, _p, module, _l in _edges()}
    stale = sorted(ALLOWED - seen)
    assert not stale, f"ALLOWED names edges that no longer exist (remove them): {stale}"


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_is_scanned(package):
    """The scan sees the package's files (a moved tree would make the checks vacuous)."""
    assert any((ROOT / package).rglob("*.py"))


def test_no_sys_path_edits():
    """The package is installed (editable in the venv), tests import their helpers as
    ``tests.<dir>.<module>`` and scripts their siblings from their own directory: nothing edits
    the import path."""
    me = Path(__file__).resolve()
    paths = [p for d in (ROOT, ROOT.parent / "scripts", ROOT.parent / "tests") for p in d.rglob("*.py")
             if p.resolve() != me]
    assert len(paths) > 100
    bad = [str(p.relative_to(ROOT.parent)) for p in paths if "sys.path.insert" in p.read_text()
           or "sys.path.append" in p.read_text()]
    assert not bad, f"sys.path edited in {bad}"
