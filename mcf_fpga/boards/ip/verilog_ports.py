"""The ports of one module of a Verilog text (as Amaranth/Yosys writes it): names in header
order, direction and width, read from the module's ``input``/``output`` declarations."""
import re

__all__ = ["module_ports"]

_DECL = re.compile(r"^\s*(input|output|inout)\s+(?:wire\s+|reg\s+)?(?:signed\s+)?"
                   r"(?:\[(\d+):(\d+)\]\s*)?([A-Za-z_][A-Za-z0-9_$]*)\s*;", re.M)


def module_ports(text: str, module: str) -> dict:
    """{port: (direction, width)} of module ``module`` in ``text``, in the order of its
    header; ValueError when the module is missing or a header port has no declaration."""
    head = re.search(rf"^module\s+{re.escape(module)}\s*\(([^;]*)\)\s*;", text, re.M)
    if head is None:
        raise ValueError(f"module {module!r} not found in the Verilog")
    end = text.find("endmodule", head.end())
    body = text[head.end():end if end >= 0 else len(text)]
    decl = {}
    for d, msb, lsb, name in _DECL.findall(body):
        decl[name] = (d, abs(int(msb) - int(lsb)) + 1 if msb else 1)
    order = [p.strip() for p in head.group(1).split(",") if p.strip()]
    missing = [p for p in order if p not in decl]
    if missing:
        raise ValueError(f"module {module!r}: header ports without a declaration: {', '.join(missing[:5])}")
    return {p: decl[p] for p in order}
