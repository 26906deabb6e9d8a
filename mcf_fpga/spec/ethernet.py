"""IEEE 802.3 framing constants on GMII (clause 3/35), shared by the board's MACs
(hdl/eth) and their golden twin (golden/eth.py)."""

__all__ = ["PREAMBLE", "SFD", "MIN_PAYLOAD", "IFG_BYTES"]

PREAMBLE = bytes([0x55] * 7)
SFD = 0xD5
MIN_PAYLOAD = 60      # frame bytes before FCS (64-byte minimum frame)
IFG_BYTES = 12
