"""The IP directory of a top (``mcf verilog BLOCK --ip DIR``, and ``ip/`` of ``mcf build``).

:func:`write_ip` writes into ``DIR``:

=====================  ==================================================================
``component.xml``      IP-XACT description (:mod:`boards.ip.component_xml`), component and
                       top module ``<name>_ip``
``hdl/<name>.v``       the Amaranth export of the top, module ``<name>`` (AMBA port names)
``hdl/<name>_ip.v``    the wrapper with Vivado interface attributes (:mod:`boards.ip.wrapper`)
``regmap.md``          the register map as Markdown (only for a top with ``register_map()``)
``regmap.h``           the register map as a C header
``regmap.json``        the register map as data (``spec.regmap.to_json_dict``)
=====================  ==================================================================

Files of these names already in ``DIR`` are replaced; nothing else there is touched. In
Vivado: ``set_property ip_repo_paths DIR [current_project]; update_ip_catalog``, then
``create_bd_cell -type ip -vlnv mcf:mcf:<name>_ip:1.0 node``.
"""
import json
import os

from mcf_fpga.spec.regmap import to_json_dict

from .component_xml import component_xml
from .interfaces import bus_interfaces
from .regmap_header import c_header
from .regmap_markdown import markdown
from .verilog_ports import module_ports
from .wrapper import wrapper_verilog

__all__ = ["write_ip", "register_map_of", "regmap_files"]


def register_map_of(component, name):
    """``component.register_map(name)``, or None when the component has no register map."""
    fn = getattr(component, "register_map", None)
    return fn(name) if fn is not None else None


def regmap_files(regmap) -> dict:
    """{file name: text} of the register map's Markdown, C header and JSON."""
    return {"regmap.md": markdown(regmap), "regmap.h": c_header(regmap),
            "regmap.json": json.dumps(to_json_dict(regmap), indent=1) + "\n"}


def _check_dir(path):
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"--ip {path}: exists and is not a directory")


def write_ip(out_dir, component, name, *, verilog_text=None, rename=None, description="") -> list:
    """Write the IP directory of ``component`` exported as module ``name`` (see the module
    docstring); ``verilog_text``: its export if already made (else ``to_verilog`` runs).
    Returns the written paths, relative to ``out_dir``."""
    _check_dir(out_dir)
    if verilog_text is None:
        from mcf_fpga.hdl.verilog import to_verilog
        verilog_text = to_verilog(component, name, rename=rename)
    ports = module_ports(verilog_text, name)
    ifs = bus_interfaces(component, ports, rename)
    regmap = register_map_of(component, name)
    ip = f"{name}_ip"
    files = {f"hdl/{name}.v": verilog_text,
             f"hdl/{ip}.v": wrapper_verilog(ip, name, ports, ifs)}
    files["component.xml"] = component_xml(ip, ports, ifs, [f"hdl/{name}.v", f"hdl/{ip}.v"], regmap,
                                           description or f"MCF {name} ({ip}: Vivado interfaces)")
    if regmap is not None:
        files.update(regmap_files(regmap))
    os.makedirs(os.path.join(out_dir, "hdl"), exist_ok=True)
    for rel, text in files.items():
        with open(os.path.join(out_dir, rel), "w") as f:
            f.write(text)
    return sorted(files)
