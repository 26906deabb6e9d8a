"""The named ``flags`` of each engine opcode (``spec.instr.FLAGS_OF``) pack to the bits the engine
decodes.

The expected bit positions are written here from the hardware decoder (``mcf_fpga/hdl/compute/engine.py``:
which ``ins.flags[k]`` drives what), not from ``spec.instr``; the decoder's ATT and KVS lines are
also read from the engine's source, so a decoder that moves a bit fails here. The integers the
call sites wrote before the flags were named (``flags=0b011`` ...) are checked too.
"""
import dataclasses
import inspect
import itertools
import re

import pytest

from mcf_fpga.hdl.compute import engine
from mcf_fpga.hdl.compute.program import instr
from mcf_fpga.spec.instr import (FLAGS_OF, AttFlags, EmitFlags, EngineOpcode, FoldFlags, GemmFlags, InstrFlags, KvsFlags,
                        KvwFlags, SprFlags, SpwFlags, flags_value)

#: opcode -> {flag: the bit of ``ins.flags`` the engine reads for it}
DECODER = {
    EngineOpcode.SPW: {"em": 0,            # wr_em_only.eq(ins.flags[0])
                       "packed": 1},       # with m.If(ins.flags[1]): unpack
    EngineOpcode.SPR: {"em": 0},           # ra_em_only.eq(ins.flags[0])
    EngineOpcode.GEMM: {"reuse": 0},       # with m.If(ins.flags[0]): reuse the activations
    EngineOpcode.KVW: {"v": 0},            # kv_in.payload.sel.eq(ins.flags[0])
    EngineOpcode.ATT: {"causal": 0, "flat": 1, "final": 2, "ext_m": 3},   # att.cmd.payload.*
    EngineOpcode.FOLD: {"final": 2},       # att.cmd.payload.final.eq(ins.flags[2])
    EngineOpcode.EMIT: {"em": 0,           # emit from EM
                        "packed": 1},      # with m.If(ins.flags[1]): pack
    EngineOpcode.KVS: {"last": 0, "first": 1, "owner": 2},               # kvs_hdr.*
}


def _all(cls):
    """Every value of flags class ``cls`` (each flag on or off)."""
    names = [f.name for f in dataclasses.fields(cls)]
    for bits in itertools.product((False, True), repeat=len(names)):
        yield cls(**dict(zip(names, bits)))


def test_every_opcode_with_flags_has_a_class_and_only_those():
    assert set(FLAGS_OF) == set(DECODER)
    for op, cls in FLAGS_OF.items():
        assert {f.name for f in dataclasses.fields(cls)} == set(DECODER[op]), op.name


@pytest.mark.parametrize("op", sorted(DECODER), ids=lambda op: EngineOpcode(op).name)
def test_flags_pack_to_the_decoders_bits(op):
    cls = FLAGS_OF[op]
    seen = set()
    for flags in _all(cls):
        want = sum(1 << bit for name, bit in DECODER[op].items() if getattr(flags, name))
        assert flags.pack() == want, flags
        assert cls.unpack(want) == flags
        assert instr(op, flags=flags)["flags"] == want
        seen.add(want)
    assert len(seen) == 2 ** len(DECODER[op])          # no two flags share a bit


def test_the_decoders_att_and_kvs_lines():
    """The ATT command's and the KVS header's bits, read from the engine's source."""
    src = inspect.getsource(engine)
    att = dict(re.findall(r"att\.cmd\.payload\.(causal|flat|final)\.eq\(ins\.flags\[(\d)\]\)", src))
    att.update(re.findall(r"att\.cmd\.payload\.(ext_m)\.eq\(\(op == EngineOpcode\.ATT\) & ins\.flags\[(\d)\]\)", src))
    assert {k: int(v) for k, v in att.items()} == DECODER[EngineOpcode.ATT]
    kvs = dict(re.findall(r"kvs_hdr\.(last|first|owner)\.eq\(ins\.flags\[(\d)\]\)", src))
    assert {k: int(v) for k, v in kvs.items()} == DECODER[EngineOpcode.KVS]


def test_the_literals_call_sites_wrote():
    """The integers of the call sites before the flags were named."""
    assert AttFlags(causal=True).pack() == 0b001                          # prefill ATT
    assert AttFlags(causal=True, flat=True).pack() == 0b011               # decode ATT
    assert AttFlags(causal=True, flat=True, ext_m=True).pack() == 0b1011  # decode ATT, phase 2
    assert AttFlags(causal=True, final=True).pack() == 0b101
    assert FoldFlags(final=True).pack() == 0b100
    for em in (False, True):
        assert SpwFlags(em=em).pack() == int(em)
        assert SpwFlags(em=em, packed=True).pack() == (1 if em else 0) | 2
        assert EmitFlags(em=em).pack() == int(em)
        assert EmitFlags(em=em, packed=True).pack() == (1 if em else 0) | 2
        assert SprFlags(em=em).pack() == int(em)
        assert GemmFlags(reuse=em).pack() == int(em)
        assert KvwFlags(v=em).pack() == int(em)                         # sel: 0 K, 1 V
    for last, first, owner in itertools.product((False, True), repeat=3):
        assert (KvsFlags(last=last, first=first, owner=owner).pack()
                == int(last) | int(first) << 1 | int(owner) << 2)


def test_another_opcodes_flags_are_refused():
    with pytest.raises(ValueError, match="FoldFlags given for op ATT"):
        instr(EngineOpcode.ATT, flags=FoldFlags(final=True))
    with pytest.raises(ValueError, match="expects no flags"):
        flags_value(EngineOpcode.VEC, GemmFlags())
    assert flags_value(EngineOpcode.ATT, 0b1010) == 0b1010               # raw bits pass as they are
    assert all(issubclass(cls, InstrFlags) for cls in FLAGS_OF.values())
