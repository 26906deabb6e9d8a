"""Make the NIC test helpers (nic_tb.py, frames.py) importable from the NIC tests."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
