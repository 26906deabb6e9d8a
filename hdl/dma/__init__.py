"""DMA engines (AXI4 master): descriptor-driven reader and writer, and the ping-pong loader.

See docs/memory.md for descriptor formats and status codes.
"""
from .common import DmaParams, DmaStatus, plan_bursts, check_descriptor
from .reader import DMAReader
from .writer import DMAWriter
from .pingpong import PingPongLoader

__all__ = ["DmaParams", "DmaStatus", "plan_bursts", "check_descriptor", "DMAReader", "DMAWriter",
           "PingPongLoader"]
