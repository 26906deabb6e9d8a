"""The command stream: the instruction stream a node fetches from DDR and runs.

The record format (kinds, header word, argument fields, error causes) is ``spec.cmdstream``'s
(its docstring has the tables), the instruction word ``spec.instr``'s. This module adds the
fetcher's layouts, the record classes and :func:`encode` / :func:`decode` / :func:`listing`,
used by the fetcher (:class:`hdl.cmdfetch.CommandFetcher`) and the host compiler.
"""
from dataclasses import dataclass, field

from amaranth.lib import data

from mcf_fpga.spec.cmdstream import (ARG_BITS, ENGINE_WORDS, LOAD_ADDR_BITS, LOAD_COUNT_BITS, LOAD_DEST_BITS,
                            LOADX_STRIDE_BITS, NWORDS, PICK_MODE_BIT, PICK_SLOT_BITS, PUT_ADD_BITS, KID_BITS,
                            Kind, Patch, PutSrc, pack_header, unpack_header)
from mcf_fpga.spec.instr import INSTR_BITS, check_field, instr_fields, instr_value
from mcf_fpga.spec.loader import Dest

__all__ = ["header_layout", "pick_layout", "Engine", "EngineKV", "KvCmd", "Wait", "WaitKV", "Mark", "Load",
           "Pick", "LoadX", "Put", "End", "Raw", "encode", "decode", "listing"]

_M64 = (1 << 64) - 1


def header_layout() -> data.StructLayout:
    """The 64-bit header word (``kind`` at bit 0)."""
    return data.StructLayout({"kind": 8, "nwords": 8, "arg": ARG_BITS})


def pick_layout() -> data.StructLayout:
    """The beat a ``PICK`` offers on the fetcher's ``pick`` port (the token picker's command,
    ``hdl.token_picker.arm_layout``): ``frame``, ``skip``, ``n`` (32 bits each, verbatim from the
    record), the token ``slot`` and ``mode`` (``spec.token_picker.PickMode``)."""
    return data.StructLayout({"frame": 32, "skip": 32, "n": 32, "slot": PICK_SLOT_BITS, "mode": 1})


# ---------------------------------------------------------------- records
def _canon(instr):
    if isinstance(instr, int):
        check_field("instr", instr, INSTR_BITS)
        return instr_fields(instr)
    return instr_fields(instr_value(instr))


@dataclass(frozen=True)
class Engine:
    """Push one instruction (a field dict, see :func:`instr_value`) to the engine."""
    instr: dict

    def __post_init__(self):
        object.__setattr__(self, "instr", _canon(self.instr))

    def words(self):
        return pack_header(Kind.ENGINE, ENGINE_WORDS, 0), _payload(self.instr)


@dataclass(frozen=True)
class EngineKV:
    """LOOKUP ``kid``; its state must be in ``mask``; patch the instruction (``mode``,
    :class:`Patch`) with the slot, then push it."""
    instr: dict
    kid: int
    mode: int = Patch.SLOT_B
    mask: int = 0xFF

    def __post_init__(self):
        object.__setattr__(self, "instr", _canon(self.instr))
        check_field("kid", self.kid, KID_BITS, "EngineKV")
        check_field("mode", self.mode, 4, "EngineKV")
        check_field("mask", self.mask, 8, "EngineKV")

    def words(self):
        arg = self.kid | self.mode << 32 | self.mask << 36
        return pack_header(Kind.ENGINE_KV, ENGINE_WORDS, arg), _payload(self.instr)


@dataclass(frozen=True)
class KvCmd:
    """Send ``opcode`` for ``kid`` to the KV pool; its answer's status must be ``expect``."""
    opcode: int
    kid: int
    expect: int = 0

    def __post_init__(self):
        check_field("opcode", int(self.opcode), 4, "KvCmd")
        check_field("kid", self.kid, KID_BITS, "KvCmd")
        check_field("expect", int(self.expect), 4, "KvCmd")

    def words(self):
        return pack_header(Kind.KVCMD, 0, self.kid | int(self.opcode) << 32 | int(self.expect) << 36), ()


@dataclass(frozen=True)
class Wait:
    """Block until ``counters[counter] - target`` (signed 32-bit) >= 0."""
    counter: int
    target: int

    def __post_init__(self):
        check_field("counter", self.counter, 8, "Wait")
        check_field("target", self.target, 32, "Wait")

    def words(self):
        return pack_header(Kind.WAIT, 0, self.counter | self.target << 8), ()


@dataclass(frozen=True)
class WaitKV:
    """Poll LOOKUP ``kid`` until it answers OK with a state in ``mask``."""
    kid: int
    mask: int

    def __post_init__(self):
        check_field("kid", self.kid, KID_BITS, "WaitKV")
        check_field("mask", self.mask, 8, "WaitKV")

    def words(self):
        return pack_header(Kind.WAIT_KV, 0, self.kid | self.mask << 32), ()


@dataclass(frozen=True)
class Mark:
    """MARK := ``value``; an irq pulse if ``irq``."""
    value: int
    irq: bool = False

    def __post_init__(self):
        check_field("value", self.value, 32, "Mark")
        object.__setattr__(self, "irq", bool(self.irq))

    def words(self):
        return pack_header(Kind.MARK, 0, self.value | int(self.irq) << 32), ()


@dataclass(frozen=True)
class Load:
    """Hand the stream loader a descriptor: ``count`` units for ``dest`` (``spec.loader.Dest``)
    read from byte address ``addr``. The fields' ranges are the format's; the fetcher refuses
    (``BAD_LOAD``) a dest that is not a ``Dest``, count 0 and an address beyond its bus."""
    dest: int
    count: int
    addr: int

    def __post_init__(self):
        check_field("dest", self.dest, LOAD_DEST_BITS, "Load")
        object.__setattr__(self, "dest", int(self.dest))
        check_field("count", self.count, LOAD_COUNT_BITS, "Load")
        check_field("addr", self.addr, LOAD_ADDR_BITS, "Load")

    def words(self):
        return pack_header(Kind.LOAD, 1, int(self.dest) | self.count << LOAD_DEST_BITS), (self.addr,)


@dataclass(frozen=True)
class Pick:
    """Arm the token picker: ``{frame, skip, n, slot, mode}`` (32, 32, 32, 4 and 1 bits)
    offered on the fetcher's ``pick`` port (:func:`pick_layout`); the picker writes the argmax
    of the logits frame (``mode`` 0, ``PickMode.ARGMAX``) or the id of the best ``(value, id)``
    pair (``mode`` 1, ``PickMode.PAIRS``) into token slot ``slot``. The fetcher refuses
    (``BAD_PICK``) slot >= its ``pick_slots``, n = 0 and PAIRS with an odd n."""
    frame: int
    skip: int
    n: int
    slot: int
    mode: int = 0

    def __post_init__(self):
        check_field("frame", self.frame, 32, "Pick")
        check_field("skip", self.skip, 32, "Pick")
        check_field("n", self.n, 32, "Pick")
        check_field("slot", self.slot, PICK_SLOT_BITS, "Pick")
        check_field("mode", int(self.mode), 1, "Pick")
        object.__setattr__(self, "mode", int(self.mode))

    def words(self):
        arg = self.slot | self.n << PICK_SLOT_BITS | self.mode << PICK_MODE_BIT
        return pack_header(Kind.PICK, 1, arg), (self.frame | self.skip << 32,)


@dataclass(frozen=True)
class LoadX:
    """A :class:`Load` from byte address ``addr + tokens[slot] * stride`` (``tokens``: the
    fetcher's input, 32-bit unsigned; ``stride`` in bytes): the picked token's embedding row.
    The fetcher refuses (``BAD_LOAD``) what it refuses of a ``Load`` (the computed address
    checked against its bus) and slot >= its ``pick_slots``."""
    dest: int
    count: int
    addr: int
    stride: int
    slot: int

    def __post_init__(self):
        check_field("dest", self.dest, LOAD_DEST_BITS, "LoadX")
        object.__setattr__(self, "dest", int(self.dest))
        check_field("count", self.count, LOAD_COUNT_BITS, "LoadX")
        check_field("addr", self.addr, LOAD_ADDR_BITS, "LoadX")
        check_field("stride", self.stride, LOADX_STRIDE_BITS, "LoadX")
        check_field("slot", self.slot, PICK_SLOT_BITS, "LoadX")

    def words(self):
        arg = self.dest | self.count << LOAD_DEST_BITS | self.slot << (LOAD_DEST_BITS + LOAD_COUNT_BITS)
        return pack_header(Kind.LOADX, 2, arg), (self.addr, self.stride)


@dataclass(frozen=True)
class Put:
    """Feed the engine's scratchpad input one word, ``(values[slot] if src else tokens[slot]) +
    add`` mod 2**32 (``tokens``/``values``: the fetcher's inputs, the picker's results), in
    stream order with the ``LOAD``/``LOADX`` units (:mod:`hdl.cmdfetch`). The fetcher refuses
    (``BAD_PICK``) slot >= its ``pick_slots``."""
    slot: int
    src: int
    add: int = 0

    def __post_init__(self):
        check_field("slot", self.slot, PICK_SLOT_BITS, "Put")
        check_field("src", int(self.src), 1, "Put")
        object.__setattr__(self, "src", int(self.src))
        check_field("add", self.add, PUT_ADD_BITS, "Put")

    def words(self):
        return pack_header(Kind.PUT, 0, self.slot | self.src << PICK_SLOT_BITS
                           | self.add << (PICK_SLOT_BITS + 1)), ()


@dataclass(frozen=True)
class End:
    """Stop: STATUS.done and an irq pulse."""

    def words(self):
        return pack_header(Kind.END, 0, 0), ()


@dataclass(frozen=True)
class Raw:
    """A record given as its header fields and payload words, verbatim (any kind byte and
    length: malformed streams for tests; :func:`decode` returns it with ``strict=False``)."""
    kind: int
    nwords: int = 0
    arg: int = 0
    payload: tuple = field(default=())

    def __post_init__(self):
        pack_header(self.kind, self.nwords, self.arg)
        object.__setattr__(self, "payload", tuple(self.payload))
        for i, w in enumerate(self.payload):
            check_field(f"payload[{i}]", w, 64, "Raw")

    def words(self):
        return pack_header(self.kind, self.nwords, self.arg), self.payload


def _payload(instr: dict):
    v = instr_value(instr)
    return tuple((v >> (64 * i)) & _M64 for i in range(ENGINE_WORDS))


def encode(records) -> bytes:
    """The stream's bytes (64-bit little-endian words) of ``records`` (the record classes of
    this module; nothing is appended: end the list with :class:`End`)."""
    out = bytearray()
    for r in records:
        if not hasattr(r, "words"):
            raise ValueError(f"encode: {r!r} is not a command-stream record")
        head, payload = r.words()
        for w in (head, *payload):
            out += w.to_bytes(8, "little")
    return bytes(out)


def decode(stream: bytes, *, strict: bool = True) -> list:
    """The records of a stream. ``strict``: a record with an unknown kind, a wrong ``nwords``
    or running past the end raises ValueError naming its index and word offset; otherwise such
    a record (and the truncated tail) comes back as :class:`Raw` and decoding goes on."""
    if len(stream) % 8:
        raise ValueError(f"a stream is whole 64-bit words: {len(stream)} bytes is not a multiple of 8")
    words = [int.from_bytes(stream[i:i + 8], "little") for i in range(0, len(stream), 8)]
    out, i = [], 0
    while i < len(words):
        kind, nw, arg = unpack_header(words[i])
        where = f"record {len(out)} (word {i})"
        if kind not in Kind._value2member_map_:
            why = f"{where}: illegal kind {kind} (kinds are 0..{max(Kind)})"
        elif nw != NWORDS[Kind(kind)]:
            why = f"{where}: {Kind(kind).name} has nwords={nw}, must be {NWORDS[Kind(kind)]}"
        elif i + 1 + nw > len(words):
            why = f"{where}: {Kind(kind).name} runs past the stream's end ({len(words)} words)"
        else:
            why = None
        if why is not None:
            if strict:
                raise ValueError(why)
            pay = tuple(words[i + 1:i + 1 + nw])
            out.append(Raw(kind, nw, arg, pay))
            i += 1 + nw
            continue
        pay = words[i + 1:i + 1 + nw]
        out.append(_record(Kind(kind), arg, pay))
        i += 1 + nw
    return out


def _record(kind, arg, pay):
    kid = arg & ((1 << KID_BITS) - 1)
    if kind == Kind.END:
        return End()
    if kind in (Kind.ENGINE, Kind.ENGINE_KV):
        v = sum(w << (64 * j) for j, w in enumerate(pay)) & ((1 << INSTR_BITS) - 1)
        if kind == Kind.ENGINE:
            return Engine(v)
        return EngineKV(v, kid, (arg >> 32) & 0xF, (arg >> 36) & 0xFF)
    if kind == Kind.KVCMD:
        return KvCmd((arg >> 32) & 0xF, kid, (arg >> 36) & 0xF)
    if kind == Kind.WAIT:
        return Wait(arg & 0xFF, (arg >> 8) & 0xFFFFFFFF)
    if kind == Kind.WAIT_KV:
        return WaitKV(kid, (arg >> 32) & 0xFF)
    if kind == Kind.LOAD:
        return Load(arg & ((1 << LOAD_DEST_BITS) - 1), (arg >> LOAD_DEST_BITS) & ((1 << LOAD_COUNT_BITS) - 1), pay[0])
    if kind == Kind.PICK:
        return Pick(pay[0] & 0xFFFFFFFF, pay[0] >> 32, (arg >> PICK_SLOT_BITS) & 0xFFFFFFFF,
                    arg & ((1 << PICK_SLOT_BITS) - 1), (arg >> PICK_MODE_BIT) & 1)
    if kind == Kind.LOADX:
        dc = LOAD_DEST_BITS + LOAD_COUNT_BITS
        return LoadX(arg & ((1 << LOAD_DEST_BITS) - 1), (arg >> LOAD_DEST_BITS) & ((1 << LOAD_COUNT_BITS) - 1),
                     pay[0], pay[1] & ((1 << LOADX_STRIDE_BITS) - 1), (arg >> dc) & ((1 << PICK_SLOT_BITS) - 1))
    if kind == Kind.PUT:
        return Put(arg & ((1 << PICK_SLOT_BITS) - 1), (arg >> PICK_SLOT_BITS) & 1,
                   (arg >> (PICK_SLOT_BITS + 1)) & ((1 << PUT_ADD_BITS) - 1))
    return Mark(arg & 0xFFFFFFFF, bool(arg >> 32 & 1))


def _mask_names(mask):
    from mcf_fpga.spec.kvpool import State
    names = [State(s).name if s in State._value2member_map_ else str(s) for s in range(8) if mask >> s & 1]
    return "|".join(names) or "none"


def _instr_text(instr):
    from mcf_fpga.spec.instr import opcode_name
    nz = [f"{k}={v}" for k, v in instr.items() if v and k != "op"]
    return f"{opcode_name(instr['op'])} " + " ".join(nz)


def listing(records) -> str:
    """One line per record: index, word offset, kind and fields (a ``--dump-stream`` view)."""
    from mcf_fpga.spec.kvpool import Opcode, Status
    lines, off = [], 0
    for i, r in enumerate(records):
        head, pay = r.words()
        if isinstance(r, Engine):
            text = f"ENGINE    {_instr_text(r.instr)}"
        elif isinstance(r, EngineKV):
            mode = Patch(r.mode).name if r.mode in Patch._value2member_map_ else r.mode
            text = (f"ENGINE_KV kid={r.kid:#x} mode={mode} states={_mask_names(r.mask)} "
                    f"{_instr_text(r.instr)}")
        elif isinstance(r, KvCmd):
            op = Opcode(r.opcode).name if r.opcode in Opcode._value2member_map_ else r.opcode
            ex = Status(r.expect).name if r.expect in Status._value2member_map_ else r.expect
            text = f"KVCMD     {op} kid={r.kid:#x} expect={ex}"
        elif isinstance(r, Wait):
            text = f"WAIT      counter[{r.counter}] >= {r.target}"
        elif isinstance(r, WaitKV):
            text = f"WAIT_KV   kid={r.kid:#x} states={_mask_names(r.mask)}"
        elif isinstance(r, Mark):
            text = f"MARK      {r.value:#x}" + (" irq" if r.irq else "")
        elif isinstance(r, Load):
            dest = Dest(r.dest).name if r.dest in Dest._value2member_map_ else r.dest
            text = f"LOAD      {dest} count={r.count} addr={r.addr:#x}"
        elif isinstance(r, Pick):
            text = f"PICK      frame={r.frame:#x} skip={r.skip} n={r.n}" + " pairs" * r.mode + f" -> slot {r.slot}"
        elif isinstance(r, LoadX):
            dest = Dest(r.dest).name if r.dest in Dest._value2member_map_ else r.dest
            text = f"LOADX     {dest} count={r.count} addr={r.addr:#x} + tokens[{r.slot}] * {r.stride}"
        elif isinstance(r, Put):
            text = f"PUT       {'values' if r.src else 'tokens'}[{r.slot}]" + (f" + {r.add:#x}" if r.add else "") + " -> sp"
        elif isinstance(r, End):
            text = "END"
        else:
            text = f"RAW       kind={r.kind} nwords={r.nwords} arg={r.arg:#x} payload={len(r.payload)} words"
        lines.append(f"{i:5d} @{off:<6d} {text}")
        off += 1 + len(pay)
    return "\n".join(lines)
