"""MCF: a generator for FPGA clusters that run long-context LLM inference.

Sub-packages, lowest layer first (docs/architecture.md): ``spec`` (what hardware, reference
and host agree on, plain Python), ``golden`` (the PyTorch reference), ``hdl`` (the Amaranth
hardware), ``boards`` (board tops and flows), ``host`` (compiler, schedulers, executors, the
``mcf`` command and the board driver).
"""
__version__ = "0.2.0"
