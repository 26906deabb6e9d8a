"""Reliable Ethernet link: framing, CRC-32, go-back-N ARQ.

``ReliableLink`` is the endpoint; ``Framer``/``Deframer`` its wire-side halves;
``LinkParams`` its parameters. The protocol itself is defined in ``mcf_fpga/golden/link.py``
and documented in ``docs/link.md``.
"""
from .params import LinkParams, COUNTERS, DROP_COUNTERS, STAT_COUNTERS
from .framer import Framer, FrameRequest
from .deframer import Deframer, FrameVerdict
from .link import ReliableLink

__all__ = ["LinkParams", "COUNTERS", "DROP_COUNTERS", "STAT_COUNTERS", "Framer", "make_reliable_link",
           "FrameRequest", "Deframer", "FrameVerdict", "ReliableLink"]


def make_reliable_link(data_width=64, window=8, max_packet=1536, timeout=2048, rx_slots=2,
                       local_node=0, peer_node=1):
    """Block-registry factory (``mcf verilog reliable_link``): MACs from node ids."""
    from mcf_fpga.spec.link import mac_for_node
    return ReliableLink(LinkParams(data_width=data_width, window=window, max_packet=max_packet,
                                   timeout=timeout, rx_slots=rx_slots),
                        mac_for_node(local_node), mac_for_node(peer_node))
