"""Simulation and verification harness: testbench kit, memory model, Verilog export.

Submodules: ``axi4_memory`` (AXI4Memory), ``kit`` (stream source/sink, scoreboard,
AXI4-Lite master, contract checker, run_simulation with VCD on failure), ``verilog``
(to_verilog with AMBA port names), ``cocotb_runner`` and ``verilator`` (fast backend).
See docs/harness.md.
"""
from .axi4_memory import AXI4Memory

__all__ = ["AXI4Memory"]
