"""Helpers of the node tests: instruction bytes for ``s_axis_cmd``, int32 words as bytes."""

from mcf_fpga.hdl.compute.engine import INSTR
from mcf_fpga.hdl.compute.program import instr
from mcf_fpga.hdl.node import pad8


def instr_bytes(op, **fields) -> bytes:
    """One instruction (``hdl.compute.program.instr``) as the ``s_axis_cmd`` tdata bytes."""
    value = INSTR.const(instr(op, **fields)).as_value().value
    return value.to_bytes(pad8(INSTR.size) // 8, "little")


def words_bytes(words) -> bytes:
    return b"".join((w & 0xFFFFFFFF).to_bytes(4, "little") for w in words)
