"""MCF hardware: Amaranth 0.5 components (amaranth.lib.wiring), synthesizable.

See ../DESIGN notes: streams are amaranth.lib.stream, packet payloads are
lib.data structs, top-level ports follow AMBA names (see hdl.verilog).
"""
