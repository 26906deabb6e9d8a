"""The tests mirror the source tree: a test of ``mcf_fpga/<path>/x.py`` lives in
``tests/<path>/test_x.py`` (docs/architecture.md, "Tests"). Only project-wide checks sit at the
top of ``tests/``; every directory below it is a directory of the package, and is a Python package
itself so helpers are imported as ``tests.<path>.<module>``."""
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PACKAGE = TESTS.parent / "mcf_fpga"


def _dirs():
    return sorted(p for p in TESTS.rglob("*") if p.is_dir() and p.name != "__pycache__"
                  and not p.name.startswith("."))


def test_every_test_directory_mirrors_a_package_directory():
    dirs = _dirs()
    assert len(dirs) >= 10
    orphans = [d.relative_to(TESTS).as_posix() for d in dirs
               if not (PACKAGE / d.relative_to(TESTS)).is_dir()]
    assert not orphans, f"test directories with no mcf_fpga/ counterpart: {orphans}"


def test_every_test_directory_is_a_package():
    missing = [d.relative_to(TESTS).as_posix() for d in _dirs() if not (d / "__init__.py").is_file()]
    assert not missing, f"test directories without __init__.py: {missing}"


def test_a_test_module_named_for_a_source_module_sits_beside_its_mirror():
    """``test_x.py`` for a module ``x.py`` (or a package ``x/``) of mcf_fpga is in that module's
    mirror directory, not elsewhere (a test may also be named for a behaviour, not a module)."""
    modules = {}
    for p in PACKAGE.rglob("*.py"):
        if p.stem == "__init__":      # a package ``a/b``: its tests are in tests/a/b (or tests/a)
            b = p.parent.relative_to(PACKAGE)
            modules.setdefault(b.name, set()).update({b.as_posix(), b.parent.as_posix()})
        else:
            modules.setdefault(p.stem, set()).add(p.parent.relative_to(PACKAGE).as_posix())
    misplaced = []
    for t in TESTS.rglob("test_*.py"):
        if t.parent == TESTS:
            continue
        homes = modules.get(t.stem[len("test_"):])
        here = t.parent.relative_to(TESTS).as_posix()
        if homes and here not in homes:
            misplaced.append(f"{t.relative_to(TESTS).as_posix()} (module in {sorted(homes)})")
    assert not misplaced, f"tests away from their module's mirror: {misplaced}"
