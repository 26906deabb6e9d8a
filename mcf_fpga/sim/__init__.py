"""Simulation and verification harness (docs/harness.md).

* ``AXI4Memory`` (``axi4_memory``): AXI4 slave memory model for Amaranth testbenches.
* ``SharedAXI4Memory`` (``shared_memory``): several AXI4Memory ports over one image and one
  shared bandwidth budget (the PS DDR controller's HP ports), round-robin grant.
* ``kit``: StreamSource/StreamSink, Scoreboard, AXI4LiteMaster, stream_checker,
  run_simulation (VCD on failure), packets_to_beats/beats_to_packets.
* ``to_verilog`` (``hdl.verilog``): the AMBA-named export, re-exported; ``cocotb_runner``: run_cocotb;
  ``verilator``: the fast backend (build -> Model, Cluster).
"""
import importlib

#: name -> the module that defines it; loaded on first use (PEP 562), so importing one
#: sub-module (e.g. ``sim.build_report`` from the ``mcf`` command) does not load the rest
_WHERE = {"AXI4Memory": ".axi4_memory", "SharedAXI4Memory": ".shared_memory",
          **{name: ".kit" for name in ("StreamSource", "StreamSink", "Scoreboard", "AXI4LiteMaster",
                                       "stream_checker", "run_simulation", "packets_to_beats",
                                       "beats_to_packets")},
          "to_verilog": "mcf_fpga.hdl.verilog"}

__all__ = list(_WHERE)


def __getattr__(name):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name], __name__), name)
