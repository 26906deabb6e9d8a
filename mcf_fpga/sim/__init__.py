"""Simulation and verification harness (docs/harness.md).

* ``AXI4Memory`` (``axi4_memory``): AXI4 slave memory model for Amaranth testbenches.
* ``SharedAXI4Memory`` (``shared_memory``): several AXI4Memory ports over one image and one
  shared bandwidth budget (the PS DDR controller's HP ports), round-robin grant.
* ``kit``: StreamSource/StreamSink, Scoreboard, AXI4LiteMaster, stream_checker,
  run_simulation (VCD on failure), packets_to_beats/beats_to_packets.
* ``verilog``: to_verilog with AMBA port names; ``cocotb_runner``: run_cocotb;
  ``verilator``: the fast backend (build -> Model, Cluster).
"""
from .axi4_memory import AXI4Memory
from .shared_memory import SharedAXI4Memory
from .kit import (StreamSource, StreamSink, Scoreboard, AXI4LiteMaster, stream_checker,
                  run_simulation, packets_to_beats, beats_to_packets)
from mcf_fpga.hdl.verilog import to_verilog

__all__ = ["AXI4Memory", "SharedAXI4Memory", "StreamSource", "StreamSink", "Scoreboard", "AXI4LiteMaster",
           "stream_checker", "run_simulation", "packets_to_beats", "beats_to_packets",
           "to_verilog"]
