"""The command stream's record format: kinds, the header word, argument fields, error causes.

What the fetcher (:class:`hdl.cmdfetch.CommandFetcher`), its golden twin (:mod:`golden.cmdfetch`)
and the host compiler agree on. ``hdl.cmdstream`` adds the hardware layouts, the record classes
and :func:`~hdl.cmdstream.encode` / ``decode`` / ``listing``.

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
``ENGINE`` 1    7       -- ; payload: the ``spec.instr`` bits, low word first
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

``kid`` is a kv_id (``spec.meta.MetaParams.kv_id_bits`` bits, :data:`KID_BITS`); a state mask has bit
``s`` set for each ``spec.kvpool.State`` ``s`` accepted; opcodes and statuses are
``spec.kvpool.Opcode`` / ``Status``. ``ENGINE_KV`` patch modes (:class:`Patch`): 1 the
instruction's ``b`` := the kid's slot, 2 its ``kvb`` += slot * ``slot_rows``. ``LOAD`` hands a
descriptor (``hdl.dma.loader.load_layout``: ``dest`` a :class:`spec.loader.Dest`, ``count``
units, ``addr``) to the stream loader. ``PICK`` arms the token picker: the beat
:func:`pick_layout` ``{frame, skip, n, slot, mode}`` (passed on verbatim; the picker writes the
argmax of the logits frame -- ``mode`` 1, ``spec.token_picker.PickMode.PAIRS``: the id of the
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

from mcf_fpga.spec.instr import INSTR_BITS, check_field
from mcf_fpga.spec.loader import COUNT_BITS, DEST_BITS
from mcf_fpga.spec.meta import DEFAULT_PARAMS

__all__ = ["Kind", "Cause", "Patch", "PutSrc", "KID_BITS", "ARG_BITS", "LOAD_DEST_BITS", "LOAD_COUNT_BITS",
           "LOAD_ADDR_BITS", "LOAD_SEQ_BITS", "PICK_SLOT_BITS", "LOADX_STRIDE_BITS", "PICK_MODE_BIT",
           "PUT_ADD_BITS", "ENGINE_WORDS", "NWORDS", "pack_header", "unpack_header"]

#: bits of a record's ``arg``
ARG_BITS = 48
#: bits of a kid (the KV pool's kv_id at the default widths: ``spec.meta.MetaParams.kv_id_bits``)
KID_BITS = DEFAULT_PARAMS.kv_id_bits
#: payload words of an instruction: ceil(INSTR_BITS / 64)
ENGINE_WORDS = -(-INSTR_BITS // 64)


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
#: bits of ``LOAD``'s ``dest`` and ``count`` (the loader's descriptor, ``spec.loader``)
LOAD_DEST_BITS, LOAD_COUNT_BITS = DEST_BITS, COUNT_BITS
#: bits of ``LOAD``'s address word (a fetcher refuses addresses beyond its ``addr_width``)
LOAD_ADDR_BITS = 64
#: bits of a token slot number (``PICK``'s, ``LOADX``'s and ``PUT``'s ``slot``; a fetcher has ``pick_slots`` <= 16)
PICK_SLOT_BITS = 4
#: ``PICK``'s ``mode`` bit in ``arg`` (after slot [3:0] and n [35:4]): ``spec.token_picker.PickMode``
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


def pack_header(kind: int, nwords: int, arg: int) -> int:
    """The header word of a record (any kind byte: malformed streams for tests too)."""
    check_field("kind", kind, 8)
    check_field("nwords", nwords, 8)
    check_field("arg", arg, ARG_BITS)
    return kind | nwords << 8 | arg << 16


def unpack_header(word: int) -> tuple[int, int, int]:
    """``(kind, nwords, arg)`` of a header word."""
    return word & 0xFF, (word >> 8) & 0xFF, (word >> 16) & ((1 << ARG_BITS) - 1)
