"""The command stream: the instruction stream a node fetches from DDR and runs (issue #19).

One definition shared by the fetcher (:class:`hdl.cmdfetch.CommandFetcher`), its golden twin
(:mod:`golden.cmdfetch`) and the host compiler: the record kinds, the header's bit layout, the
error causes, and :func:`encode` / :func:`decode` / :func:`listing`.

A stream is a sequence of 64-bit little-endian words. Each record is one **header word**
followed by ``nwords`` payload words:

=======  ========  ===================================================================
bits     field     meaning
=======  ========  ===================================================================
0-7      ``kind``  :class:`Kind`
8-15     ``nwords`` payload words that follow (fixed per kind: :data:`NWORDS`)
16-63    ``arg``   48 kind-specific bits (below; bits not named are ignored, encode 0)
=======  ========  ===================================================================

==============  ======  ======================================================================
kind            nwords  ``arg`` (bit offsets within ``arg``)
==============  ======  ======================================================================
``END`` 0       0       --
``ENGINE`` 1    7       -- ; payload: the :data:`hdl.compute.engine.INSTR` bits, low word first
``ENGINE_KV`` 2 7       kid [31:0], mode [35:32], state mask [43:36]; payload as ``ENGINE``
``KVCMD`` 3     0       kid [31:0], opcode [35:32], expected status [39:36]
``WAIT`` 4      0       counter index [7:0], target [39:8]
``WAIT_KV`` 5   0       kid [31:0], state mask [39:32]
``MARK`` 6      0       value [31:0], irq [32]
``LOAD`` 7      1       dest [1:0], count [33:2]; payload: the byte address (64 bits)
``PICK`` 8      1       slot [3:0], n [35:4], mode [36]; payload: frame [31:0], skip [63:32]
``LOADX`` 9     2       dest [1:0], count [33:2], slot [37:34]; payload: the byte address (64
                        bits), then stride [31:0] (bytes; the word's upper bits ignored, encode 0)
``PUT`` 10      0       slot [3:0], src [4], add [36:5]
==============  ======  ======================================================================

``kid`` is a kv_id (``hdl.meta.kv_id_layout`` bits, :data:`KID_BITS`); a state mask has bit
``s`` set for each ``golden.kvpool.State`` ``s`` accepted; opcodes and statuses are
``golden.kvpool.Opcode`` / ``Status``. ``ENGINE_KV`` patch modes (:class:`Patch`): 1 the
instruction's ``b`` := the kid's slot, 2 its ``kvb`` += slot * ``slot_rows``. ``LOAD`` hands a
descriptor (``hdl.dma.loader.load_layout``: ``dest`` a :class:`hdl.dma.loader.Dest`, ``count``
units, ``addr``) to the stream loader. ``PICK`` arms the token picker: the beat
:func:`pick_layout` ``{frame, skip, n, slot, mode}`` (passed on verbatim; the picker writes the
argmax of the logits frame -- ``mode`` 1, ``hdl.token_picker.PickMode.PAIRS``: the id of the
best ``(value, id)`` pair -- into token slot ``slot``). ``LOADX`` is a ``LOAD`` whose address is
``addr + tokens[slot] * stride`` (the fetcher's ``tokens`` input; 64-bit address, no wrap: a sum
at or above ``2**addr_width`` is refused) -- the next token's embedding row. ``PUT`` feeds one
scratchpad word, ``(src ? values[slot] : tokens[slot]) + add`` (mod ``2**32``; the fetcher's
``tokens``/``values`` inputs: the picker's results), to the engine's ``sp_in`` in stream order
with the ``LOAD`` units (after every unit of an earlier load, before any of a later one) -- a
picked token (or its value) handed on without the host. What the fetcher does with each kind,
and the errors (:class:`Cause`), are in :mod:`hdl.cmdfetch`.
"""
import enum
from dataclasses import dataclass, field

from amaranth.lib import data

from hdl.compute.engine import INSTR
from hdl.dma.loader import Dest, load_layout
from spec.meta import DEFAULT_PARAMS
from hdl.meta import kv_id_layout

__all__ = ["Kind", "Cause", "Patch", "NWORDS", "ENGINE_WORDS", "KID_BITS", "ARG_BITS", "LOAD_DEST_BITS",
           "LOAD_COUNT_BITS", "LOAD_ADDR_BITS", "LOAD_SEQ_BITS", "PICK_SLOT_BITS", "LOADX_STRIDE_BITS",
           "PICK_MODE_BIT", "PUT_ADD_BITS",
           "header_layout", "pick_layout",
           "pack_header", "unpack_header", "instr_value", "instr_fields", "Engine", "EngineKV", "KvCmd",
           "Wait", "WaitKV", "Mark", "Load", "Pick", "LoadX", "Put", "PutSrc", "End", "Raw", "encode", "decode", "listing"]

#: bits of a record's ``arg``
ARG_BITS = 48
#: bits of a kid (the KV pool's kv_id: ``hdl.meta.kv_id_layout(DEFAULT_PARAMS).size``)
KID_BITS = kv_id_layout(DEFAULT_PARAMS).size
#: payload words of an instruction: ceil(INSTR.size / 64)
ENGINE_WORDS = -(-INSTR.size // 64)
_M64 = (1 << 64) - 1


class Kind(enum.IntEnum):
    """Record kinds (the header's 8-bit ``kind``)."""
    END = 0
    ENGINE = 1
    ENGINE_KV = 2
    KVCMD = 3
    WAIT = 4
    WAIT_KV = 5
    MARK = 6
    LOAD = 7
    PICK = 8
    LOADX = 9
    PUT = 10


#: the ``nwords`` each kind must have
NWORDS = {Kind.END: 0, Kind.ENGINE: ENGINE_WORDS, Kind.ENGINE_KV: ENGINE_WORDS, Kind.KVCMD: 0,
          Kind.WAIT: 0, Kind.WAIT_KV: 0, Kind.MARK: 0, Kind.LOAD: 1,
          Kind.PICK: 1, Kind.LOADX: 2, Kind.PUT: 0}
#: bits of ``LOAD``'s ``dest`` and ``count`` (the loader's descriptor, ``hdl.dma.loader.load_layout``)
LOAD_DEST_BITS, LOAD_COUNT_BITS = load_layout(64)["dest"].width, load_layout(64)["count"].width
#: bits of ``LOAD``'s address word (a fetcher refuses addresses beyond its ``addr_width``)
LOAD_ADDR_BITS = 64
#: bits of a token slot number (``PICK``'s, ``LOADX``'s and ``PUT``'s ``slot``; a fetcher has ``pick_slots`` <= 16)
PICK_SLOT_BITS = 4
#: ``PICK``'s ``mode`` bit in ``arg`` (after slot [3:0] and n [35:4]): ``hdl.token_picker.PickMode``
PICK_MODE_BIT = PICK_SLOT_BITS + 32
#: bits of ``PUT``'s ``add`` (``arg`` [36:5]; the word is 32 bits, the sum wraps)
PUT_ADD_BITS = 32
#: bits of ``LOADX``'s stride (bytes per token) and of a token
LOADX_STRIDE_BITS = 32
#: bits of the failing load's number in ``LOAD_STATUS``'s ERR_INFO (above the 8-bit code field)
LOAD_SEQ_BITS = 24


class Patch(enum.IntEnum):
    """``ENGINE_KV`` patch modes (4 bits; any other value is the error ``BAD_PATCH``)."""
    SLOT_B = 1     #: instruction field ``b`` := slot
    KVB_ROWS = 2   #: instruction field ``kvb`` += slot * slot_rows (16 bits: overflow is BAD_PATCH)


class PutSrc(enum.IntEnum):
    """``PUT``'s ``src`` bit: which of the picker's results of the slot it feeds."""
    TOKEN = 0      #: ``tokens[slot]``
    VALUE = 1      #: ``values[slot]``


class Cause(enum.IntEnum):
    """Why the fetcher stopped with STATUS.error (the ``ERR_CAUSE`` register, 4 bits)."""
    NONE = 0
    ILLEGAL_KIND = 1   #: kind > 10; ERR_INFO = the kind byte
    BAD_LENGTH = 2     #: nwords wrong for the kind, or the record runs past LEN; ERR_INFO = kind | nwords << 8
    NO_END = 3         #: LEN words consumed without an END record; ERR_INFO = 0
    KV_STATE = 4       #: ENGINE_KV lookup not OK or state not in the mask; ERR_INFO = status | state << 4
    KV_STATUS = 5      #: KVCMD answered another status than expected; ERR_INFO = status | state << 4
    BAD_PATCH = 6      #: ENGINE_KV mode not 1/2, or kvb overflow; ERR_INFO = mode | overflow << 4
    BAD_COUNTER = 7    #: WAIT counter index >= n_counters; ERR_INFO = the index
    AXI = 8            #: a word the parser needed came back SLVERR/DECERR; ERR_INFO = RRESP (2/3)
    WATCHDOG = 9       #: a WAIT/WAIT_KV/output blocked WATCHDOG cycles; ERR_INFO = kind
    BAD_ADDR = 10      #: start refused: BASE not 8-byte aligned (ERR_INFO 1), LEN = 0 (2), outside the window (3)
    ABORT = 11         #: CTRL.abort; ERR_INFO = the kind of the record interrupted (0 between records)
    #: LOAD/LOADX refused: dest not a Dest (ERR_INFO 1), count = 0 (2), the address (LOADX's computed
    #: ``addr + tokens[slot] * stride``) >= 2**addr_width (3), LOADX slot >= pick_slots (4; checked before 3)
    BAD_LOAD = 12
    LOAD_STATUS = 13   #: a load's status was not OK; ERR_INFO = code | (the load's number in the run, 24 bits) << 8
    #: PICK refused: slot >= pick_slots (ERR_INFO 1), n = 0 (2), mode PAIRS with an odd n (3);
    #: PUT refused: slot >= pick_slots (1)
    BAD_PICK = 14


def header_layout() -> data.StructLayout:
    """The 64-bit header word (``kind`` at bit 0)."""
    return data.StructLayout({"kind": 8, "nwords": 8, "arg": ARG_BITS})


def pick_layout() -> data.StructLayout:
    """The beat a ``PICK`` offers on the fetcher's ``pick`` port (the token picker's command,
    ``hdl.token_picker.arm_layout``): ``frame``, ``skip``, ``n`` (32 bits each, verbatim from the
    record), the token ``slot`` and ``mode`` (``hdl.token_picker.PickMode``)."""
    return data.StructLayout({"frame": 32, "skip": 32, "n": 32, "slot": PICK_SLOT_BITS, "mode": 1})


def pack_header(kind: int, nwords: int, arg: int) -> int:
    """The header word of a record (any kind byte: malformed streams for tests too)."""
    _field("kind", kind, 8)
    _field("nwords", nwords, 8)
    _field("arg", arg, ARG_BITS)
    return kind | nwords << 8 | arg << 16


def unpack_header(word: int) -> tuple[int, int, int]:
    """``(kind, nwords, arg)`` of a header word."""
    return word & 0xFF, (word >> 8) & 0xFF, (word >> 16) & ((1 << ARG_BITS) - 1)


def _field(name, value, bits, record=None):
    if not isinstance(value, int) or not 0 <= value < (1 << bits):
        who = f"{record}.{name}" if record else name
        raise ValueError(f"{who}={value!r} does not fit its {bits}-bit field (0..{(1 << bits) - 1})")


def _meta_int(v):
    if isinstance(v, data.Const):
        return int(v.as_value().value)
    return v


def instr_value(instr: dict) -> int:
    """The INSTR bits of an instruction field dict (unset fields 0; ``meta`` an int or a
    ``data.Const``), as the engine's ``cmd`` payload: ``INSTR.const(instr).as_value().value``
    (host/executors/rtl.py ``NodeDriver.emit``). Raises ValueError naming a field that is unknown
    or does not fit."""
    out = 0
    for name, off, width in _INSTR_FIELDS:       # (every field unsigned: plain shifts)
        v = _meta_int(instr.get(name, 0))
        _field(name, v, width, "instr")
        out |= v << off
    unknown = set(instr) - _INSTR_NAMES
    if unknown:
        raise ValueError(f"instr: unknown field(s) {sorted(unknown)}")
    return out


#: (name, offset, width) of every INSTR field; building ``INSTR.const`` per instruction costs
#: about a millisecond, which a stream of thousands of instructions feels
_INSTR_FIELDS = tuple((name, f.offset, f.width) for name, f in INSTR)
_INSTR_NAMES = frozenset(name for name, _o, _w in _INSTR_FIELDS)


def instr_fields(value: int) -> dict:
    """The field dict (every field, ``meta`` as an int) of INSTR bits ``value``."""
    return {name: (value >> f.offset) & ((1 << f.width) - 1) for name, f in INSTR}


# ---------------------------------------------------------------- records
def _canon(instr):
    if isinstance(instr, int):
        _field("instr", instr, INSTR.size)
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
        _field("kid", self.kid, KID_BITS, "EngineKV")
        _field("mode", self.mode, 4, "EngineKV")
        _field("mask", self.mask, 8, "EngineKV")

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
        _field("opcode", int(self.opcode), 4, "KvCmd")
        _field("kid", self.kid, KID_BITS, "KvCmd")
        _field("expect", int(self.expect), 4, "KvCmd")

    def words(self):
        return pack_header(Kind.KVCMD, 0, self.kid | int(self.opcode) << 32 | int(self.expect) << 36), ()


@dataclass(frozen=True)
class Wait:
    """Block until ``counters[counter] - target`` (signed 32-bit) >= 0."""
    counter: int
    target: int

    def __post_init__(self):
        _field("counter", self.counter, 8, "Wait")
        _field("target", self.target, 32, "Wait")

    def words(self):
        return pack_header(Kind.WAIT, 0, self.counter | self.target << 8), ()


@dataclass(frozen=True)
class WaitKV:
    """Poll LOOKUP ``kid`` until it answers OK with a state in ``mask``."""
    kid: int
    mask: int

    def __post_init__(self):
        _field("kid", self.kid, KID_BITS, "WaitKV")
        _field("mask", self.mask, 8, "WaitKV")

    def words(self):
        return pack_header(Kind.WAIT_KV, 0, self.kid | self.mask << 32), ()


@dataclass(frozen=True)
class Mark:
    """MARK := ``value``; an irq pulse if ``irq``."""
    value: int
    irq: bool = False

    def __post_init__(self):
        _field("value", self.value, 32, "Mark")
        object.__setattr__(self, "irq", bool(self.irq))

    def words(self):
        return pack_header(Kind.MARK, 0, self.value | int(self.irq) << 32), ()


@dataclass(frozen=True)
class Load:
    """Hand the stream loader a descriptor: ``count`` units for ``dest`` (``hdl.dma.loader.Dest``)
    read from byte address ``addr``. The fields' ranges are the format's; the fetcher refuses
    (``BAD_LOAD``) a dest that is not a ``Dest``, count 0 and an address beyond its bus."""
    dest: int
    count: int
    addr: int

    def __post_init__(self):
        _field("dest", self.dest, LOAD_DEST_BITS, "Load")
        object.__setattr__(self, "dest", int(self.dest))
        _field("count", self.count, LOAD_COUNT_BITS, "Load")
        _field("addr", self.addr, LOAD_ADDR_BITS, "Load")

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
        _field("frame", self.frame, 32, "Pick")
        _field("skip", self.skip, 32, "Pick")
        _field("n", self.n, 32, "Pick")
        _field("slot", self.slot, PICK_SLOT_BITS, "Pick")
        _field("mode", int(self.mode), 1, "Pick")
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
        _field("dest", self.dest, LOAD_DEST_BITS, "LoadX")
        object.__setattr__(self, "dest", int(self.dest))
        _field("count", self.count, LOAD_COUNT_BITS, "LoadX")
        _field("addr", self.addr, LOAD_ADDR_BITS, "LoadX")
        _field("stride", self.stride, LOADX_STRIDE_BITS, "LoadX")
        _field("slot", self.slot, PICK_SLOT_BITS, "LoadX")

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
        _field("slot", self.slot, PICK_SLOT_BITS, "Put")
        _field("src", int(self.src), 1, "Put")
        object.__setattr__(self, "src", int(self.src))
        _field("add", self.add, PUT_ADD_BITS, "Put")

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
            _field(f"payload[{i}]", w, 64, "Raw")

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
        v = sum(w << (64 * j) for j, w in enumerate(pay)) & ((1 << INSTR.size) - 1)
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
    from golden.kvpool import State
    names = [State(s).name if s in State._value2member_map_ else str(s) for s in range(8) if mask >> s & 1]
    return "|".join(names) or "none"


def _instr_text(instr):
    from hdl.compute.engine import Op
    ops = {v: k for k, v in vars(Op).items() if k.isupper()}
    nz = [f"{k}={v}" for k, v in instr.items() if v and k != "op"]
    return f"{ops.get(instr['op'], instr['op'])} " + " ".join(nz)


def listing(records) -> str:
    """One line per record: index, word offset, kind and fields (a ``--dump-stream`` view)."""
    from golden.kvpool import Opcode, Status
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
