"""The ops of a program (``host.program.Program``): one frozen dataclass per op kind.

Every op is keyword-only and carries ``req``, the request it belongs to (0 for single-request
programs; ``ProgramOp``). The ops that put a message on a link or take part in a collective
(``Send``, ``Recv``, ``AllReduce``; ``MessageOp``) also carry the message id ``msg``, the
``spec.meta.MetaFields`` the node's packetizer/NIC would put on the wire (``meta``), the
payload bytes in the hardware format (``nbytes``), those bytes times the links they cross
(``link_bytes``) and the hops to the farthest destination (``depth``).

KV is addressed by units: ``(layer, unit)`` is the KV of token range ``program.units[unit]`` in
``layer``; rows ``(t0, t1)`` are token positions of the op's request. ``part=(j, W)`` marks the
op of W node ``j`` of a tensor-parallel weight group of W nodes (``host.tp``; ``()`` with one W
node). A field whose values are a closed set of strings is typed with a ``Literal`` and checked
when the op is made (``ValueError`` naming the field and the allowed values).

``kind`` is each class's short name (a class attribute, not a field): the name reports, traces
and ``Program.count`` use. Executors and the compiler dispatch on the class.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal, get_args

from mcf_fpga.spec.meta import MetaFields

__all__ = ["ProgramOp", "MessageOp", "Embed", "Project", "Acquire", "Drain", "Attend", "Release", "Finish",
           "Logits", "Send", "Recv", "Unstage", "Free", "Mark", "DecodeEmbed", "DecodeProject", "Append",
           "DecodeAttend", "AllReduce", "DecodeFinish", "DecodeLogits", "Publish", "DecodeFree", "DecodePick",
           "OP_CLASSES", "DECODE_OPS", "What", "Install", "ReduceName", "FinishStage", "MarkName",
           "WSlice"]

#: what a message carries: prefill KV of a unit, the decode query, the token's K/V, token 1; with a
#: tensor-parallel W group also the gathered vectors a | h1 | s | h, a slice's best and the merged
#: partial rows pm (host.tp.TAGS); a receiver's install credit for (layer, unit)'s send
#: (host.install_credits)
What = Literal["kv", "q", "kvtok", "token", "a", "h1", "s", "h", "best", "pm", "credit"]
#: how a received KV unit is kept: a pool replica, a pool owner unit (PD hand-off), or staged
#: (streamed through the propagation buffer for one use, never in the pool)
Install = Literal["replica", "owner", "stage"]
#: the phase of the two-phase flat merge (docs/numerics.md)
ReduceName = Literal["max", "sum"]
#: a W-group stage of ``DecodeFinish`` (host.tp.STAGES); "" with one W node (the whole of it)
FinishStage = Literal["", "attn", "o", "ffn", "down"]
#: the points every executor reports
MarkName = Literal["prefill_done"]
#: (j, W): the weight slice of W node j of a tensor-parallel W group (host.tp); () with one W node
WSlice = tuple[int, int] | tuple[()]


def _check(op, name: str, allowed) -> None:
    value, values = getattr(op, name), get_args(allowed)
    if value not in values:
        raise ValueError(f"{type(op).__name__}.{name}={value!r}, expected one of {values}")


@dataclass(frozen=True, kw_only=True)
class ProgramOp:
    """What every op has: ``req``, the request it belongs to."""
    kind: ClassVar[str] = ""
    req: int = 0


@dataclass(frozen=True, kw_only=True)
class MessageOp(ProgramOp):
    """An op of a message: its id ``msg``, its wire header ``meta`` (None on a receive), its
    payload ``nbytes``, ``link_bytes`` = nbytes x links crossed (route-tree edges) and ``depth``
    = hops to the farthest destination (critical-path depth)."""
    msg: int
    meta: MetaFields | None = None
    nbytes: int = 0
    link_bytes: int = 0
    depth: int = 0


# ---------------------------------------------------------------------- prefill

@dataclass(frozen=True, kw_only=True)
class Embed(ProgramOp):
    """h = embedding of the prompt tokens ``rows``."""
    kind = "embed"
    rows: tuple[int, int]


@dataclass(frozen=True, kw_only=True)
class Project(ProgramOp):
    """RMSNorm + QKV + RoPE of ``rows``; K/V stored as owner of (layer, unit) (``alloc_owner``);
    q kept for ``Attend``."""
    kind = "project"
    layer: int
    rows: tuple[int, int]
    unit: int


@dataclass(frozen=True, kw_only=True)
class Acquire(ProgramOp):
    """Take a reader reference on the local pool units ``units`` (owner or replica) of ``layer``."""
    kind = "acquire"
    layer: int
    units: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class Drain(ProgramOp):
    """Replica (layer, unit) valid -> draining (freed by its last release); ``meta`` is the
    directory command to the node's own pool (``host.program.local_meta``)."""
    kind = "drain"
    layer: int
    unit: int
    meta: MetaFields


@dataclass(frozen=True, kw_only=True)
class Attend(ProgramOp):
    """Block partials of the q of ``rows`` over ``units`` of ``layer`` (local pool or staged); a
    replica must be held (acquired) to be read."""
    kind = "attend"
    layer: int
    rows: tuple[int, int]
    units: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class Release(ProgramOp):
    """Drop the references ``Acquire`` took."""
    kind = "release"
    layer: int
    units: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class Finish(ProgramOp):
    """Left fold of the partials of ``rows`` in ascending block order (docs/numerics.md),
    o-projection, FFN -> h."""
    kind = "finish"
    layer: int
    rows: tuple[int, int]


@dataclass(frozen=True, kw_only=True)
class Logits(ProgramOp):
    """Head -> logits of ``rows``; the last prompt row's argmax is token 1."""
    kind = "logits"
    rows: tuple[int, int]


@dataclass(frozen=True, kw_only=True)
class Unstage(ProgramOp):
    """Drop the staged copy of (layer, unit)."""
    kind = "unstage"
    layer: int
    unit: int


@dataclass(frozen=True, kw_only=True)
class Free(ProgramOp):
    """Free the owner unit (layer, unit) (PD hand-off)."""
    kind = "free"
    layer: int
    unit: int


@dataclass(frozen=True, kw_only=True)
class Mark(ProgramOp):
    """A point every executor reports (``name``)."""
    kind = "mark"
    name: MarkName

    def __post_init__(self):
        _check(self, "name", MarkName)


# ---------------------------------------------------------------------- messages

@dataclass(frozen=True, kw_only=True)
class Send(MessageOp):
    """Send ``what`` of (layer, unit) to ``dsts`` (a multicast on a route, or one unicast per
    destination with the same ``msg``); ``part``: the W slice it carries."""
    kind = "send"
    what: What
    layer: int
    unit: int
    dsts: tuple[int, ...]
    part: WSlice = ()

    def __post_init__(self):
        _check(self, "what", What)


@dataclass(frozen=True, kw_only=True)
class Recv(MessageOp):
    """Receive message ``msg`` (``what`` of (layer, unit)) from ``peer``; a KV unit is kept as
    ``install`` says; ``part``: the W slice it carries."""
    kind = "recv"
    what: What
    layer: int
    unit: int
    peer: int
    install: Install
    part: WSlice = ()

    def __post_init__(self):
        _check(self, "what", What)
        _check(self, "install", Install)


@dataclass(frozen=True, kw_only=True)
class AllReduce(MessageOp):
    """One member's part of phase ``name`` of the two-phase flat merge of ``layer`` over the
    group ``dsts``: reduced to ``root`` through the NIC, the result multicast back. Only the
    root's op carries the link bytes of the whole collective."""
    kind = "allreduce"
    layer: int
    name: ReduceName
    dsts: tuple[int, ...]
    root: int

    def __post_init__(self):
        _check(self, "name", ReduceName)


# ---------------------------------------------------------------------- decode

@dataclass(frozen=True, kw_only=True)
class DecodeEmbed(ProgramOp):
    """h = embedding of the current token of decode step ``step`` (every W node)."""
    kind = "dembed"
    step: int


@dataclass(frozen=True, kw_only=True)
class DecodeProject(ProgramOp):
    """q, k, v of the token at rows = (pos, pos + 1) in ``layer`` (of slice ``part``)."""
    kind = "dproject"
    layer: int
    step: int
    rows: tuple[int, int]
    part: WSlice = ()


@dataclass(frozen=True, kw_only=True)
class Append(ProgramOp):
    """Append the token's K/V (rows = (pos, pos + 1)) to the local golden block (its owner)."""
    kind = "append"
    layer: int
    rows: tuple[int, int]


@dataclass(frozen=True, kw_only=True)
class DecodeAttend(ProgramOp):
    """Local block partials of the query (rows = (pos, pos + 1)) over this node's blocks."""
    kind = "dattend"
    layer: int
    rows: tuple[int, int]


@dataclass(frozen=True, kw_only=True)
class DecodeFinish(ProgramOp):
    """Finalize the merged partial, o-projection, FFN (the leader); with a W group one stage
    ``name`` of it on slice ``part`` (host.tp.STAGES)."""
    kind = "dfinish"
    layer: int
    rows: tuple[int, int]
    name: FinishStage = ""
    part: WSlice = ()

    def __post_init__(self):
        _check(self, "name", FinishStage)


@dataclass(frozen=True, kw_only=True)
class DecodeLogits(ProgramOp):
    """Head -> the next token (the leader); with a W group its vocabulary slice's best."""
    kind = "dlogits"
    step: int
    part: WSlice = ()


@dataclass(frozen=True, kw_only=True)
class Publish(ProgramOp):
    """At this token boundary the routing table becomes ``groups`` (((req, holders), ...) of
    every live request; ``dsts`` = their union). KernelFlume scale-up (a weightless A node joins
    as a request's tail, new K/V go to it) and scale-down (a finished request leaves; a node
    holding no range leaves the table); on the NIC one route-table update made atomic by the
    bank flip (on every node, same place in every stream)."""
    kind = "publish"
    step: int
    dsts: tuple[int, ...]
    groups: tuple[tuple[int, tuple[int, ...]], ...]


@dataclass(frozen=True, kw_only=True)
class DecodeFree(ProgramOp):
    """The request ``req`` finished: free every KV range of it on this node (its prefill owner
    units in the pool and its decode blocks)."""
    kind = "dfree"


@dataclass(frozen=True, kw_only=True)
class DecodePick(ProgramOp):
    """Tensor-parallel decode: the token = the best of the W nodes' vocabulary slices (largest
    logit, lowest index on ties: IntModel's argmax); every W node."""
    kind = "dpick"
    step: int


#: every op class (prefill, messages, decode)
OP_CLASSES = (Embed, Project, Acquire, Drain, Attend, Release, Finish, Logits, Send, Recv, Unstage, Free, Mark,
              DecodeEmbed, DecodeProject, Append, DecodeAttend, AllReduce, DecodeFinish, DecodeLogits, Publish,
              DecodeFree, DecodePick)
#: the decode-phase compute ops (a decode context is set up before them)
DECODE_OPS = (DecodeEmbed, DecodeProject, Append, DecodeAttend, AllReduce, DecodeFinish, DecodeLogits, DecodePick)
