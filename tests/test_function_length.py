"""No function of the package or the scripts is longer than 150 lines (an ``elaborate``
composes small components instead), except those listed in ``CEILINGS``: each
may only shrink below the length it had when it was listed, and leaves the list once it is at
most 150 lines (docs/architecture.md, "Not yet done")."""
import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LIMIT = 150

#: (file, function) -> its length when listed
CEILINGS = {}


def _lengths():
    files = sorted((REPO / "mcf_fpga").rglob("*.py")) + sorted((REPO / "scripts").glob("*.py"))
    assert len(files) > 100
    for path in files:
        rel = path.relative_to(REPO).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield rel, node.name, node.end_lineno - node.lineno + 1


def test_functions_are_short_or_shrinking():
    seen = {}
    bad = []
    for rel, name, n in _lengths():
        key = (rel, name)
        seen[key] = max(seen.get(key, 0), n)
        limit = CEILINGS.get(key, LIMIT)
        if n > limit:
            bad.append(f"{rel}: {name} is {n} lines (limit {limit})")
    assert not bad, "\n".join(bad)
    done = [k for k, v in CEILINGS.items() if seen.get(k, 0) <= LIMIT]
    assert not done, f"now at most {LIMIT} lines (or gone): remove from CEILINGS: {done}"
