"""host.program_ops: one frozen, keyword-only dataclass per op kind; closed string sets are
checked when an op is made, naming the field and the allowed values."""
import dataclasses
import typing

import pytest

from mcf_fpga.host import program
from mcf_fpga.host.config import ClusterConfig
from mcf_fpga.host.program_ops import (OP_CLASSES, AllReduce, DecodeFinish, DecodeFree, Embed, Install, Mark,
                                       MessageOp, ProgramOp, Recv, Send, What)

from ._common import CFG, build

KINDS = ("embed", "project", "acquire", "drain", "attend", "release", "finish", "logits", "send", "recv", "unstage",
         "free", "mark", "dembed", "dproject", "append", "dattend", "allreduce", "dfinish", "dlogits", "publish",
         "dfree", "dpick")


def test_one_class_per_kind_exported_from_program():
    assert sorted(c.kind for c in OP_CLASSES) == sorted(KINDS)
    for cls in OP_CLASSES:
        assert issubclass(cls, ProgramOp) and getattr(program, cls.__name__) is cls
        assert "kind" not in {f.name for f in dataclasses.fields(cls)}     # a class name, not a field
    assert {c for c in OP_CLASSES if issubclass(c, MessageOp)} == {Send, Recv, AllReduce}


def test_ops_are_frozen_keyword_only_and_carry_only_their_fields():
    op = Embed(rows=(0, 4), req=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        op.rows = (0, 8)
    with pytest.raises(TypeError):
        Embed((0, 4))                              # positional: refused
    with pytest.raises(TypeError):
        Embed(rows=(0, 4), layer=1)                # a field another kind has
    with pytest.raises(TypeError):
        Send(what="kv", layer=0, unit=0, msg=1)    # dsts missing
    assert DecodeFree(req=3).req == 3 and not hasattr(DecodeFree(), "layer")


@pytest.mark.parametrize("make, field, allowed", [
    (lambda v: Send(what=v, layer=0, unit=0, dsts=(1,), msg=1), "what", What),
    (lambda v: Recv(what=v, layer=0, unit=0, peer=1, msg=1, install="stage"), "what", What),
    (lambda v: Recv(what="kv", layer=0, unit=0, peer=1, msg=1, install=v), "install", Install),
    (lambda v: AllReduce(layer=0, name=v, dsts=(0, 1), root=0, msg=1), "name", typing.Literal["max", "sum"]),
    (lambda v: DecodeFinish(layer=0, rows=(5, 6), name=v), "name", typing.Literal["", "attn", "o", "ffn", "down"]),
    (lambda v: Mark(name=v), "name", typing.Literal["prefill_done"]),
])
def test_closed_string_fields_are_checked(make, field, allowed):
    for v in typing.get_args(allowed):
        assert getattr(make(v), field) == v
    with pytest.raises(ValueError) as e:
        make("teleport")
    msg = str(e.value)
    assert f".{field}='teleport'" in msg and all(repr(v) in msg for v in typing.get_args(allowed))


def test_builder_stamps_the_request_and_count_takes_a_class_or_its_kind():
    prog = build("mars", ClusterConfig(nodes=2, kv_bytes_per_node=1 << 20), 32, 2, 16)
    ops = [op for ops in prog.ops for op in ops]
    assert {type(op) for op in ops} <= set(OP_CLASSES) and all(op.req == 0 for op in ops)
    sends = sum(isinstance(op, Send) for op in ops)
    assert sends > 0 and prog.count(Send) == prog.count("send") == sends
    # one decode step (token 2): per layer a max and a sum all-reduce on every decode holder
    assert prog.count(AllReduce) == prog.count("allreduce") == 2 * len(prog.decode_group) * CFG.num_layers
