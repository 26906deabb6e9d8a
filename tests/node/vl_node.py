"""The node configuration the Verilator node tests share (one cached build per process)."""
from hdl.nic.config import NicConfig
from hdl.nic.link import LinkParams
from hdl.node import NodeConfig

#: Small node: the test engine, a ring NIC with 256-byte payloads, links with a short timeout.
TEST_CFG = NodeConfig(nic=NicConfig(n_net=2, n_routes=16, max_payload=256),
                      link=LinkParams(max_packet=272, timeout=1000), kv_slots=8)
