"""The node configuration the Verilator node tests share (one cached build per process)."""
from mcf_fpga.spec.nic import NicConfig
from mcf_fpga.hdl.nic.link import LinkParams
from mcf_fpga.hdl.node import SMALL_ENGINE, NodeConfig

#: Small node: the test engine, a mesh-capable NIC (4 network ports; a ring uses ports 1 and 2)
#: with 256-byte payloads, links with a short timeout. One build serves ring and mesh tests.
#: Its engine has the paired scratchpad and EMIT in pair beats (``emit_pairs``: the node's 32 -> 64
#: emit path takes them), so the cluster tests cover both emit paths.
TEST_CFG = NodeConfig(engine=dict(SMALL_ENGINE, sp_pairs=True, emit_pairs=True),
                      nic=NicConfig(n_net=4, n_routes=16, max_payload=256),
                      link=LinkParams(max_packet=272, timeout=1000), kv_slots=8)
