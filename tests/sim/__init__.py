"""Simulation harness tests (package so helpers import relatively and names stay unique)."""
