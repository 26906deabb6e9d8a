"""Ethernet for the board links: a 1 Gb/s GMII MAC (TX/RX) and its RGMII DDR adapter.

The framing constants are ``spec.ethernet``'s; ``golden.eth`` holds the Python twin (frame
encoding/decoding) the hardware is tested against.
"""
from .mac_tx import EthernetTx
from .mac_rx import EthernetRx
from .rgmii import RGMIIMac, RGMIISimDDR, RGMIIPlatformDDR

__all__ = ["EthernetTx", "EthernetRx", "RGMIIMac", "RGMIISimDDR", "RGMIIPlatformDDR"]
from .rgmii_link import RGMIILink  # noqa: E402
from .tx_frame_fifo import TxFrameFIFO  # noqa: E402
from .rx_frame_fifo import RxFrameFIFO  # noqa: E402

__all__ += ["RGMIILink", "TxFrameFIFO", "RxFrameFIFO"]
