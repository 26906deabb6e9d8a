"""Bus signatures shared by every block: AXI-Stream packets, AXI4-Lite, AXI4.

Each AMBA channel is an ``amaranth.lib.stream`` (payload/valid/ready), so the
handshake contract is the stream contract: a transfer happens on
``valid & ready``; ``valid`` never waits for ``ready``; the payload is stable
while ``valid & ~ready``. Field names are the AMBA names without the channel
prefix, so the Verilog exporter can rebuild ``s_axi_awaddr`` from
``s_axi.aw.payload.addr`` and ``m_axis_tdata`` from ``m_axis.payload.data``.
"""
from .axis import PacketLayout, PacketSignature
from .axi_lite import AXI4LiteSignature, Resp
from .axi4 import AXI4Signature, Burst
from .regfile import Register, Access, AXI4LiteRegisterFile

__all__ = [
    "PacketLayout", "PacketSignature",
    "AXI4LiteSignature", "Resp",
    "AXI4Signature", "Burst",
    "Register", "Access", "AXI4LiteRegisterFile",
]
