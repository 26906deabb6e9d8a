"""The command stream format (mcf_fpga/hdl/cmdstream.py): encode/decode round trip on random records, the
exact bit layout, the engine's own INSTR packing, error messages naming the field and its limit,
strict and lenient decoding of malformed streams, and the listing."""
import pytest
from hypothesis import given, settings, strategies as st

from mcf_fpga.spec.kvpool import Opcode, State, Status
from mcf_fpga.spec.cmdstream import ENGINE_WORDS, NWORDS
from mcf_fpga.hdl.cmdstream import (End, Engine, EngineKV, KvCmd, Load, LoadX, Mark, Pick, Put, Raw, Wait, WaitKV,
                           decode, pick_layout, encode, listing)
from mcf_fpga.spec.instr import instr_fields, instr_value
from mcf_fpga.spec.cmdstream import Kind, Patch, pack_header, unpack_header
from mcf_fpga.hdl.compute.engine import INSTR
from mcf_fpga.hdl.compute.program import instr as program_instr
from mcf_fpga.spec.loader import Dest

u = lambda bits: st.integers(0, 2 ** bits - 1)
instrs = st.fixed_dictionaries({name: u(f.width) for name, f in INSTR})
records = st.one_of(
    instrs.map(Engine),
    st.builds(EngineKV, instrs, u(32), u(4), u(8)),
    st.builds(KvCmd, u(4), u(32), u(4)),
    st.builds(Wait, u(8), u(32)),
    st.builds(WaitKV, u(32), u(8)),
    st.builds(Mark, u(32), st.booleans()),
    st.builds(Load, u(2), u(32), u(64)),
    st.builds(Pick, u(32), u(32), u(32), u(4), u(1)),
    st.builds(LoadX, u(2), u(32), u(64), u(32), u(4)),
    st.builds(Put, u(4), u(1), u(32)),
    st.just(End()),
)


@given(st.lists(records, max_size=12))
def test_round_trip(recs):
    b = encode(recs)
    assert len(b) == 8 * sum(1 + NWORDS[unpack_header(r.words()[0])[0]] for r in recs)
    assert len(b) == 8 * sum(1 + (ENGINE_WORDS if isinstance(r, (Engine, EngineKV)) else
                                  1 if isinstance(r, (Load, Pick)) else 2 * isinstance(r, LoadX)) for r in recs)
    assert decode(b) == recs
    assert len(listing(recs).splitlines()) == len(recs)


def test_header_bits():
    """The documented layout, bit for bit (kind [7:0], nwords [15:8], arg [63:16])."""
    w = lambda r: int.from_bytes(encode([r])[:8], "little")
    assert w(End()) == 0
    assert w(Mark(0x89ABCDEF, True)) == Kind.MARK | (0x89ABCDEF | 1 << 32) << 16
    assert w(Wait(3, 0xFFFFFFFE)) == Kind.WAIT | (3 | 0xFFFFFFFE << 8) << 16
    assert w(KvCmd(Opcode.COMMIT_OWNER, 0x12345678, Status.NOT_INSTALLING)) == \
        Kind.KVCMD | (0x12345678 | 10 << 32 | 12 << 36) << 16
    assert w(WaitKV(0xABCDEF01, 0x82)) == Kind.WAIT_KV | (0xABCDEF01 | 0x82 << 32) << 16
    assert w(EngineKV({}, 0xFFFFFFFF, Patch.KVB_ROWS, 0xF0)) == \
        Kind.ENGINE_KV | ENGINE_WORDS << 8 | (0xFFFFFFFF | 2 << 32 | 0xF0 << 36) << 16
    assert encode([Load(Dest.SP, 0xFFFFFFFF, 0x0123456789ABCDEF)]) == \
        (Kind.LOAD | 1 << 8 | (Dest.SP | 0xFFFFFFFF << 2) << 16).to_bytes(8, "little") + \
        (0x0123456789ABCDEF).to_bytes(8, "little")
    assert unpack_header(pack_header(0xFE, 0x12, 2 ** 48 - 1)) == (0xFE, 0x12, 2 ** 48 - 1)
    assert ENGINE_WORDS == 7 and NWORDS[Kind.ENGINE] == NWORDS[Kind.ENGINE_KV] == 7 and NWORDS[Kind.LOAD] == 1
    assert encode([Pick(0x89ABCDEF, 0x01234567, 0xFFFFFFFF, 15)]) == \
        (Kind.PICK | 1 << 8 | (15 | 0xFFFFFFFF << 4) << 16).to_bytes(8, "little") + \
        (0x89ABCDEF | 0x01234567 << 32).to_bytes(8, "little")
    assert encode([LoadX(Dest.SP, 0xFFFFFFFF, 0x0123456789ABCDEF, 0xFEDCBA98, 9)]) == \
        (Kind.LOADX | 2 << 8 | (Dest.SP | 0xFFFFFFFF << 2 | 9 << 34) << 16).to_bytes(8, "little") + \
        (0x0123456789ABCDEF).to_bytes(8, "little") + (0xFEDCBA98).to_bytes(8, "little")
    assert encode([Pick(1, 2, 6, 3, 1)])[:8] == (Kind.PICK | 1 << 8 | (3 | 6 << 4 | 1 << 36) << 16).to_bytes(8, "little")
    assert encode([Put(15, 1, 0xFFFFFFFF)]) == (Kind.PUT | (15 | 1 << 4 | 0xFFFFFFFF << 5) << 16).to_bytes(8, "little")
    assert encode([Put(2, 0)]) == (Kind.PUT | 2 << 16).to_bytes(8, "little")
    assert (Kind.LOAD, Kind.PICK, Kind.LOADX, Kind.PUT) == (7, 8, 9, 10) and NWORDS[Kind.PICK] == 1 \
        and NWORDS[Kind.LOADX] == 2 and NWORDS[Kind.PUT] == 0
    assert list(pick_layout()) and {k: f.width for k, f in pick_layout()} == dict(frame=32, skip=32, n=32, slot=4,
                                                                                  mode=1)
    from mcf_fpga.hdl.token_picker import arm_layout
    assert pick_layout() == arm_layout()       # the fetcher's pick beat is the picker's arm, verbatim


def test_loadx_stride_word_upper_bits_ignored():
    """Only stride [31:0] of LOADX's second payload word counts (the fetcher reads those bits)."""
    b = encode([Raw(Kind.LOADX, 2, Dest.W | 5 << 2 | 3 << 34, (0x1000, 0xFFFF_0000_0000_0040))])
    assert decode(b) == [LoadX(Dest.W, 5, 0x1000, 0x40, 3)]


def test_engine_payload_is_the_cmd_beat():
    """The payload is INSTR.const(instr) (NodeDriver.emit's packing), low word first."""
    i = program_instr(3, a=1, b=2, dst=0xFFFFF, n0=5, eps_q=0xDEADBEEF, meta=0x1234567)
    v = INSTR.const(i).as_value().value
    assert instr_value(i) == v
    pay = encode([Engine(i)])[8:]
    assert int.from_bytes(pay, "little") == v and len(pay) == 56
    assert Engine(i).instr == instr_fields(v) == decode(encode([Engine(i)]))[0].instr


@pytest.mark.parametrize("make,msg", [
    (lambda: Wait(256, 0), "Wait.counter=256 does not fit its 8-bit field (0..255)"),
    (lambda: Wait(0, 2 ** 32), "Wait.target=4294967296 does not fit its 32-bit field"),
    (lambda: KvCmd(16, 0), "KvCmd.opcode=16 does not fit its 4-bit field (0..15)"),
    (lambda: KvCmd(0, 2 ** 32), "KvCmd.kid=4294967296 does not fit its 32-bit field"),
    (lambda: KvCmd(0, 0, -1), "KvCmd.expect=-1 does not fit its 4-bit field"),
    (lambda: EngineKV({}, 0, 16), "EngineKV.mode=16 does not fit its 4-bit field"),
    (lambda: EngineKV({}, 0, 1, 256), "EngineKV.mask=256 does not fit its 8-bit field"),
    (lambda: WaitKV(-1, 0), "WaitKV.kid=-1 does not fit its 32-bit field"),
    (lambda: Mark(2 ** 32), "Mark.value=4294967296 does not fit its 32-bit field"),
    (lambda: Load(4, 1, 0), "Load.dest=4 does not fit its 2-bit field (0..3)"),
    (lambda: Load(0, 2 ** 32, 0), "Load.count=4294967296 does not fit its 32-bit field (0..4294967295)"),
    (lambda: Load(0, -1, 0), "Load.count=-1 does not fit its 32-bit field"),
    (lambda: Load(0, 1, 2 ** 64), "Load.addr=18446744073709551616 does not fit its 64-bit field"),
    (lambda: Load(0, 1, -8), "Load.addr=-8 does not fit its 64-bit field"),
    (lambda: Pick(2 ** 32, 0, 1, 0), "Pick.frame=4294967296 does not fit its 32-bit field (0..4294967295)"),
    (lambda: Pick(0, -1, 1, 0), "Pick.skip=-1 does not fit its 32-bit field"),
    (lambda: Pick(0, 0, 2 ** 32, 0), "Pick.n=4294967296 does not fit its 32-bit field"),
    (lambda: Pick(0, 0, 1, 16), "Pick.slot=16 does not fit its 4-bit field (0..15)"),
    (lambda: Pick(0, 0, 2, 0, 2), "Pick.mode=2 does not fit its 1-bit field (0..1)"),
    (lambda: Put(16, 0), "Put.slot=16 does not fit its 4-bit field (0..15)"),
    (lambda: Put(0, 2), "Put.src=2 does not fit its 1-bit field (0..1)"),
    (lambda: Put(0, 0, 2 ** 32), "Put.add=4294967296 does not fit its 32-bit field (0..4294967295)"),
    (lambda: LoadX(4, 1, 0, 0, 0), "LoadX.dest=4 does not fit its 2-bit field (0..3)"),
    (lambda: LoadX(0, 2 ** 32, 0, 0, 0), "LoadX.count=4294967296 does not fit its 32-bit field"),
    (lambda: LoadX(0, 1, 2 ** 64, 0, 0), "LoadX.addr=18446744073709551616 does not fit its 64-bit field"),
    (lambda: LoadX(0, 1, 0, 2 ** 32, 0), "LoadX.stride=4294967296 does not fit its 32-bit field (0..4294967295)"),
    (lambda: LoadX(0, 1, 0, -1, 0), "LoadX.stride=-1 does not fit its 32-bit field"),
    (lambda: LoadX(0, 1, 0, 64, 16), "LoadX.slot=16 does not fit its 4-bit field (0..15)"),
    (lambda: Engine({"b": 2 ** 20}), "instr.b=1048576 does not fit its 20-bit field (0..1048575)"),
    (lambda: Engine({"nope": 1}), "instr: unknown field(s) ['nope']"),
    (lambda: Raw(256), "kind=256 does not fit its 8-bit field"),
    (lambda: encode([3]), "encode: 3 is not a command-stream record"),
])
def test_errors_name_the_field_and_limit(make, msg):
    with pytest.raises(ValueError) as e:
        make()
    assert msg in str(e.value)


def test_decode_malformed():
    good = encode([Mark(1)])
    cases = [
        (good + encode([Raw(11)]), "record 1 (word 1): illegal kind 11 (kinds are 0..10)"),
        (good + encode([Raw(Kind.PUT, 1, 0, (0,))]), "record 1 (word 1): PUT has nwords=1, must be 0"),
        (good + encode([Raw(Kind.WAIT, 2, 0, (0, 0))]), "record 1 (word 1): WAIT has nwords=2, must be 0"),
        (good + encode([Raw(Kind.ENGINE, 7, 0, (1, 2))]), "record 1 (word 1): ENGINE runs past the stream's end"),
        (good + encode([Raw(Kind.LOAD)]), "record 1 (word 1): LOAD has nwords=0, must be 1"),
        (good + encode([Raw(Kind.LOAD, 1)]), "record 1 (word 1): LOAD runs past the stream's end"),
        (good + encode([Raw(Kind.PICK, 2, 0, (0, 0))]), "record 1 (word 1): PICK has nwords=2, must be 1"),
        (good + encode([Raw(Kind.LOADX, 1, 0, (0,))]), "record 1 (word 1): LOADX has nwords=1, must be 2"),
        (good + encode([Raw(Kind.LOADX, 2, 0, (0,))]), "record 1 (word 1): LOADX runs past the stream's end"),
        (good + b"\0" * 4, "a stream is whole 64-bit words: 12 bytes"),
    ]
    for b, msg in cases:
        with pytest.raises(ValueError, match=msg.replace("(", r"\(").replace(")", r"\)")):
            decode(b)
    lenient = decode(good + encode([Raw(11), Raw(Kind.ENGINE, 7, 0, (1, 2))]), strict=False)
    assert lenient == [Mark(1), Raw(11), Raw(Kind.ENGINE, 7, 0, (1, 2))]


def test_listing():
    recs = [EngineKV(program_instr(6, kvb=4), 0x102, Patch.KVB_ROWS, 1 << State.OWNER | 1 << State.REPLICA_VALID),
            KvCmd(Opcode.ACQUIRE, 0x102, Status.OK), Wait(2, 100), WaitKV(7, 1 << State.REPLICA_VALID),
            Mark(0x10, True), Raw(11), Load(Dest.W, 12, 0x8000), Load(2, 1, 0),
            Pick(0x40, 3, 1000, 2), LoadX(Dest.SP, 4, 0x10000, 2048, 2), Pick(0x41, 0, 8, 1, 1), Put(1, 0, 5),
            Put(3, 1), End()]
    assert listing(recs).splitlines() == [
        "    0 @0      ENGINE_KV kid=0x102 mode=KVB_ROWS states=OWNER|REPLICA_VALID ATT kvb=4",
        "    1 @8      KVCMD     ACQUIRE kid=0x102 expect=OK",
        "    2 @9      WAIT      counter[2] >= 100",
        "    3 @10     WAIT_KV   kid=0x7 states=REPLICA_VALID",
        "    4 @11     MARK      0x10 irq",
        "    5 @12     RAW       kind=11 nwords=0 arg=0x0 payload=0 words",
        "    6 @13     LOAD      W count=12 addr=0x8000",
        "    7 @15     LOAD      2 count=1 addr=0x0",
        "    8 @17     PICK      frame=0x40 skip=3 n=1000 -> slot 2",
        "    9 @19     LOADX     SP count=4 addr=0x10000 + tokens[2] * 2048",
        "   10 @22     PICK      frame=0x41 skip=0 n=8 pairs -> slot 1",
        "   11 @24     PUT       tokens[1] + 0x5 -> sp",
        "   12 @25     PUT       values[3] -> sp",
        "   13 @26     END",
    ]


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_instr_value_equals_the_layouts_const(d):
    """instr_value packs with shifts: for any subset of fields and any in-range values it equals
    INSTR.const (the engine's own layout); a value one past a field's range is refused."""
    from amaranth.lib import data as adata
    fields = {n: d.draw(st.integers(0, (1 << f.width) - 1), label=n) for n, f in INSTR
              if d.draw(st.booleans(), label=f"has {n}")}
    ref = dict(fields)
    if "meta" in ref:
        ref["meta"] = adata.Const(INSTR["meta"].shape, ref["meta"])
    assert instr_value(fields) == INSTR.const(ref).as_value().value
    name = d.draw(st.sampled_from([n for n, _f in INSTR]))
    with pytest.raises(ValueError, match=rf"instr.{name}="):
        instr_value(dict(fields, **{name: 1 << INSTR[name].width}))
