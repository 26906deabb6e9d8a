"""The node configuration the Verilator node tests share (one cached build per process)."""
from mcf_fpga.spec.nic import NicConfig
from mcf_fpga.hdl.nic.link import LinkParams
from mcf_fpga.hdl.node import NodeConfig

#: Small node: the test engine, a mesh-capable NIC (4 network ports; a ring uses ports 1 and 2)
#: with 256-byte payloads, links with a short timeout. One build serves ring and mesh tests.
TEST_CFG = NodeConfig(nic=NicConfig(n_net=4, n_routes=16, max_payload=256),
                      link=LinkParams(max_packet=272, timeout=1000), kv_slots=8)
