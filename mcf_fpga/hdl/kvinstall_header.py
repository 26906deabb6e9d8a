"""The hardware's layout of the KV install header (``spec.kvinstall`` defines the header)."""
from amaranth.lib import data

from mcf_fpga.spec.kvinstall import N_BITS, ROW0_BITS, RSVD_LSB

__all__ = ["install_header_layout"]


def install_header_layout() -> data.StructLayout:
    """The 64-bit install header (bits in field order, ``row0`` at bit 0)."""
    return data.StructLayout({"row0": ROW0_BITS, "n": N_BITS, "last": 1, "first": 1, "owner": 1,
                              "_rsvd": 64 - RSVD_LSB})
