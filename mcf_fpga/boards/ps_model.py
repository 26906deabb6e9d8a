"""Synthesis-only stand-in for the block design, so Yosys sees node + board glue at once.

Vivado builds ``mcf_ps_wrapper`` from the block design; Yosys cannot. For the
resource estimate we write a Verilog ``mcf_ps_wrapper`` that instantiates the
node exactly as the block design does (clk = pl_clk0, rst = pl_reset, the
node's block-design ports passed through) and connects everything that goes to
the PS (s_axi, m_axi_hp*, irq, the clocks) to a black box ``mcf_ps_model``.
Nothing is optimised away, and PS/SmartConnect/vendor IP count as zero.
"""
from mcf_fpga.hdl.verilog import amba_ports

from .board_top import bd_ports, BD_NAME, XXV_NAME, XXV_PORTS
from .top import TopPorts

__all__ = ["ps_model_verilog"]


def _decl(d, w, name):
    rng = f"[{w - 1}:0] " if w > 1 else ""
    return f"{d} wire {rng}{name}"


def ps_model_verilog(top, ports: TopPorts) -> str:
    """Verilog text: black-box PS model, ``<bd>_wrapper`` around the node, xxv black box."""
    bd = bd_ports(ports)
    bd_names = {n for n, _, _ in bd}
    node_ports = [(vname, d, w) for p in amba_ports(top) for vname, _, d, w in p.ports]
    to_ps = [(n, d, w) for n, d, w in node_ports if n not in bd_names]
    fixed = [(n, d, w) for n, d, w in bd if not n.startswith(("m_axis_link", "s_axis_link", "led"))]
    ps_io = [_decl("output" if d == "O" else "input", w, n) for n, d, w in fixed]
    ps_io += [_decl("input" if d == "o" else "output", w, n) for n, d, w in to_ps]
    out = ["// Synthesis-only model of the block design (mcf_fpga/boards/ps_model.py); not for Vivado.",
           "(* blackbox *)", "module mcf_ps_model(", ",\n".join("    " + x for x in ps_io), ");",
           "endmodule", ""]
    io = [_decl("output" if d == "O" else "input", w, n) for n, d, w in bd]
    out += [f"module {BD_NAME}_wrapper(", ",\n".join("    " + x for x in io), ");"]
    for n, d, w in to_ps:
        out.append(f"    wire {f'[{w - 1}:0] ' if w > 1 else ''}{n};")
    conns = [f".{n}({n})" for n, _, _ in fixed]
    conns += [f".{n}({n})" for n, _, _ in to_ps]
    out.append("    mcf_ps_model ps(" + ", ".join(conns) + ");")
    nconn = [".clk(pl_clk0)", ".rst(pl_reset)"] + [f".{n}({n})" for n, _, _ in node_ports]
    out.append(f"    {ports.module} node(" + ", ".join(nconn) + ");")
    out += ["endmodule", ""]
    if 2 in ports.links:
        xio = [_decl({"I": "input", "O": "output"}[d], w, n) for n, (d, w) in XXV_PORTS.items()]
        out += ["(* blackbox *)", f"module {XXV_NAME}(", ",\n".join("    " + x for x in xio), ");",
                "endmodule", ""]
    return "\n".join(out)
