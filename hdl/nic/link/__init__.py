"""Reliable Ethernet link (issue 4 item 5): framing, CRC-32, go-back-N ARQ.

``ReliableLink`` is the endpoint; ``Framer``/``Deframer`` its wire-side halves;
``LinkParams`` its parameters. The protocol itself is defined in ``golden/link.py``
and documented in ``docs/link.md``.
"""
from .params import LinkParams, COUNTERS, DROP_COUNTERS, STAT_COUNTERS
from .framer import Framer, FrameRequest
from .deframer import Deframer, FrameVerdict
from .link import ReliableLink

__all__ = ["LinkParams", "COUNTERS", "DROP_COUNTERS", "STAT_COUNTERS", "Framer",
           "FrameRequest", "Deframer", "FrameVerdict", "ReliableLink"]
