"""Make the node test helpers (vl_node.py, node_util.py) importable from the node tests."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
