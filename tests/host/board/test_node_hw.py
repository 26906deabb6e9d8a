"""host.board.node_hw against a fake register file (an mmapped temp file, as test_driver.py) and a
fake u-dma-buf: the in-memory formats and register writes of mcf_fpga/boards/node_dma.py's docstring
(command records, descriptor lengths, RX ring records, KV command words), and the error paths
(refused GO, DMA error code, cut RX record, refused KV_GO, wrong IDs) raise naming the register.
Expected values are written from the docstring's format, not computed by node_hw."""
import struct

import pytest

from mcf_fpga.host.board import MmapWindow, UdmabufAllocator
from mcf_fpga.host.board.node_hw import BoardError, NodeHw

SIZE = 0x10000
DMA = 0x8000
ENG = {"cmd": 0x100, "sp_in": 0x140, "w": 0x180, "sp_out": 0x1C0}       # 0x100 + 0x40 * e
ADDR_LO, ADDR_HI, LENGTH, GO, POSTED, DONE, ERRORS, CODE, ST_LO, ST_HI, REJ = (
    0x00, 0x04, 0x08, 0x0C, 0x10, 0x14, 0x18, 0x1C, 0x20, 0x24, 0x28)
RX_BASE_LO, RX_SLOTS, RX_RP, RX_WP, RX_ERRORS, RX_CODE = 0x200, 0x208, 0x20C, 0x210, 0x218, 0x21C
KV_CMD_LO, KV_CMD_HI, KV_GO, KV_RESP, KV_REJECTED = 0x280, 0x284, 0x288, 0x28C, 0x294
NODE_ID, DMA_ID = 0x4D43464F, 0x4D434644
PHYS = 0x7000_0000
ENGINE = dict(pn=4, pk=16)                 # weight beat 4*16*4 bits = 32 bytes
SLOT = 16 + 2064                           # RX slot: header + max packet (2064) rounded to 16


class Clock:
    cycle = 0

    def step(self, n):
        self.cycle += n


class Window(MmapWindow):
    """The register file, plus what a test wants a write to do (``hooks[offset](value)``)."""
    hooks = {}

    def write(self, offset, value):
        super().write(offset, value)
        if offset in self.hooks:
            self.hooks[offset](value)


@pytest.fixture
def board(tmp_path):
    reg = tmp_path / "regs.bin"
    raw = bytearray(SIZE)
    for off, v in ((0x3000, NODE_ID), (DMA, DMA_ID), (DMA + 0x04, 64), (DMA + 0x08, 32), (DMA + 0x0C, SLOT),
                   (DMA + 0x10, 26 * 16), (DMA + 0x14, 0xF)):
        struct.pack_into("<I", raw, off, v)
    reg.write_bytes(bytes(raw))
    dev, sysfs = tmp_path / "dev", tmp_path / "sys"
    dev.mkdir()
    (sysfs / "udmabuf0").mkdir(parents=True)
    (dev / "udmabuf0").write_bytes(bytes(1 << 20))
    (sysfs / "udmabuf0" / "phys_addr").write_text(hex(PHYS))
    (sysfs / "udmabuf0" / "size").write_text(str(1 << 20))
    win = Window(str(reg), SIZE)
    win.hooks = {}
    alloc = UdmabufAllocator(dev_dir=str(dev), sysfs=str(sysfs))
    clock = Clock()

    def make(**kw):
        return NodeHw(win, alloc, clock, engine=ENGINE, kv_cmd_bits=40, kv_resp_bits=16, **kw)
    return win, alloc, clock, make


def r32(win, off):
    return win.read(off)


def instr_bytes(op, n0=0):
    """An instruction with ``op`` (INSTR bits 0..3) and ``n0`` (bits 96..111): 54 bytes."""
    return ((op & 0xF) | (n0 << 96)).to_bytes(54, "little")


def test_command_records_and_descriptors(board):
    win, alloc, clock, make = board
    hw = make(rx_slots=4)
    # RX ring configured: base = its buffer, 4 slots, read count 0
    rx_base = r32(win, DMA + RX_BASE_LO)
    assert r32(win, DMA + RX_SLOTS) == 4 and r32(win, DMA + RX_RP) == 0 and rx_base >= PHYS
    spr, other = instr_bytes(2, n0=9), instr_bytes(1, n0=9)          # op 2 = SPR: 9 words out
    hw.push("s_axis_cmd", other + spr)
    a = r32(win, DMA + ENG["cmd"] + ADDR_LO)
    assert r32(win, DMA + ENG["cmd"] + LENGTH) == 128                  # two 64-byte records
    mem = alloc._mm
    rec = mem[a - PHYS:a - PHYS + 128]
    assert rec == other + bytes(10) + spr + bytes(10)
    assert r32(win, DMA + ENG["sp_out"] + LENGTH) == 16 * 3            # ceil(9/4) beats
    hw.push("s_axis_sp", struct.pack("<5i", 1, -2, 3, -4, 5))
    assert r32(win, DMA + ENG["sp_in"] + LENGTH) == 20                 # word-granular: 4 * 5
    b = r32(win, DMA + ENG["sp_in"] + ADDR_LO)
    assert b % 16 == 0 and mem[b - PHYS:b - PHYS + 20] == struct.pack("<5i", 1, -2, 3, -4, 5)
    tile = bytes(range(64))                                          # 2 beats of 32 bytes
    hw.push("s_axis_w", tile)
    c = r32(win, DMA + ENG["w"] + ADDR_LO)
    assert r32(win, DMA + ENG["w"] + LENGTH) == 64 and mem[c - PHYS:c - PHYS + 64] == tile
    assert hw.pending("s_axis_cmd") == 128 and hw.pending("s_axis_sp") == 20
    # the engines answer: DONE = 1 each; after a poll interval nothing is pending
    for e in ("cmd", "sp_in", "w"):
        win.write(DMA + ENG[e] + DONE, 1)
    clock.step(100)
    assert hw.pending("s_axis_cmd") == 0 and hw.pending("s_axis_sp") == 0 and hw.pending("s_axis_w") == 0
    # the SPR's words come back when sp_out is DONE: exactly 9 words from its buffer
    d = r32(win, DMA + ENG["sp_out"] + ADDR_LO)
    words = struct.pack("<12i", *range(100, 112))
    mem[d - PHYS:d - PHYS + 48] = words
    assert hw.pull_all("m_axis_sp") == []
    win.write(DMA + ENG["sp_out"] + DONE, 1)
    assert hw.pull_all("m_axis_sp") == [words[:36]]
    # the KV command: low 32 bits, then bits 39..32, then GO
    hw.push("s_axis_kvcmd", (0x12_3456_789A).to_bytes(5, "little"))
    assert r32(win, DMA + KV_CMD_LO) == 0x3456_789A and r32(win, DMA + KV_CMD_HI) == 0x12
    win.write(DMA + KV_RESP, (1 << 31) | 0xBEEF)                       # valid response
    got = hw.pull_all("m_axis_kvresp")
    assert got == [(0xBEEF).to_bytes(2, "little")]


def test_rx_ring_records(board):
    win, alloc, clock, make = board
    hw = make(rx_slots=2)
    base = r32(win, DMA + RX_BASE_LO) - PHYS
    mem = alloc._mm
    pkts = [bytes(range(7)), bytes(range(40, 60)), b"\xAA" * 33]
    for j, p in enumerate(pkts[:2]):
        s = base + j * SLOT
        mem[s:s + 16] = struct.pack("<IIII", len(p), 0, j, 0)
        mem[s + 16:s + 16 + len(p)] = p
    assert hw.pull_all("m_axis_rx") == []                             # RX_WP = 0: nothing yet
    win.write(DMA + RX_WP, 2)
    assert hw.pull_all("m_axis_rx") == pkts[:2]
    assert r32(win, DMA + RX_RP) == 2                                  # records handed back
    s = base                                                           # record 2 wraps into slot 0
    mem[s:s + 16] = struct.pack("<IIII", len(pkts[2]), 0, 2, 0)
    mem[s + 16:s + 16 + 33] = pkts[2]
    win.write(DMA + RX_WP, 3)
    assert hw.pull_all("m_axis_rx") == pkts[2:]


def test_rx_truncated_or_out_of_sequence_raises(board):
    win, alloc, clock, make = board
    hw = make(rx_slots=2)
    base = r32(win, DMA + RX_BASE_LO) - PHYS
    alloc._mm[base:base + 16] = struct.pack("<IIII", 2064, 1, 0, 0)   # flags bit 0: cut to the slot
    win.write(DMA + RX_WP, 1)
    with pytest.raises(BoardError, match="flags=0x1"):
        hw.pull_all("m_axis_rx")
    assert r32(win, DMA + RX_RP) == 0                                  # not consumed
    alloc._mm[base:base + 16] = struct.pack("<IIII", 5, 0, 7, 0)      # sequence 7 in record 0
    with pytest.raises(BoardError, match="sequence 7, expected 0"):
        hw.pull_all("m_axis_rx")
    alloc._mm[base:base + 16] = struct.pack("<IIII", 5, 0, 0, 0)
    win.write(DMA + RX_ERRORS, 1)
    win.write(DMA + RX_CODE, 4)                                        # SLVERR
    with pytest.raises(BoardError, match="RX_ERRORS=1, RX_CODE=0x4 .SLVERR"):
        hw.pull_all("m_axis_rx")


def test_refused_go_raises_with_the_code(board):
    win, alloc, clock, make = board
    hw = make()
    win.hooks[DMA + ENG["cmd"] + GO] = lambda v: (win.write(DMA + ENG["cmd"] + CODE, 8 << 8),
                                                  win.write(DMA + ENG["cmd"] + REJ, 1))
    with pytest.raises(BoardError, match=r"cmd GO refused: CODE=0x800 .*REJECTED=1"):
        hw.push("s_axis_cmd", instr_bytes(1))
    with pytest.raises(BoardError, match="cmd GO refused"):          # still queued: tried again
        hw.pending("s_axis_cmd")
    win.hooks[DMA + ENG["cmd"] + GO] = lambda v: win.write(DMA + ENG["cmd"] + CODE, 0)
    assert hw.pending("s_axis_cmd") == 64                             # posted once, accepted
    assert r32(win, DMA + ENG["cmd"] + LENGTH) == 64


def test_dma_error_code_raises(board):
    win, alloc, clock, make = board
    hw = make()
    hw.push("s_axis_w", bytes(32))
    a = r32(win, DMA + ENG["w"] + ADDR_LO)
    for off, v in ((DONE, 1), (ERRORS, 1), (CODE, 3), (ST_LO, a), (ST_HI, 0)):   # 3 = out of the window
        win.write(DMA + ENG["w"] + off, v)
    clock.step(100)
    with pytest.raises(BoardError, match=rf"w DMA error: ERRORS=1, CODE=0x3 \(OUT_OF_WINDOW\), ST_ADDR={a:#x}"):
        hw.pending("s_axis_w")


def test_refused_kv_go_raises(board):
    win, alloc, clock, make = board
    hw = make()
    win.hooks[DMA + KV_GO] = lambda v: win.write(DMA + KV_REJECTED, r32(win, DMA + KV_REJECTED) + 1)
    with pytest.raises(BoardError, match="KV_GO refused: KV_REJECTED=1"):
        hw.push("s_axis_kvcmd", bytes(5))


def test_bad_input_is_refused_before_any_register_write(board):
    win, alloc, clock, make = board
    hw = make()
    before = open(win.path, "rb").read()
    with pytest.raises(ValueError, match="s_axis_sp: 6 bytes"):
        hw.push("s_axis_sp", bytes(6))
    with pytest.raises(ValueError, match="s_axis_cmd: 50 bytes"):
        hw.push("s_axis_cmd", bytes(50))
    with pytest.raises(ValueError, match=r"largest weight tile \(W_TILE_BYTES=416\)"):
        hw.push("s_axis_w", bytes(32 * 14))                          # 448 > W_TILE_BYTES 416
    with pytest.raises(ValueError, match="s_axis_kvcmd: 4 bytes"):
        hw.push("s_axis_kvcmd", bytes(4))
    with pytest.raises(ValueError, match="node register address 32768"):
        hw.axil_write(0x8000, 1)
    with pytest.raises(ValueError, match="no input stream 's_axis_eth1'"):
        hw.push("s_axis_eth1", b"x")
    assert open(win.path, "rb").read() == before


def test_identify_names_the_register(board):
    win, alloc, clock, make = board
    win.write(0x3000, 0)
    with pytest.raises(BoardError, match="node ID register 0x3000 reads 0x00000000"):
        make()
    win.write(0x3000, NODE_ID)
    win.write(DMA, 0x1234)
    with pytest.raises(BoardError, match="ID register 0x8000 reads 0x00001234, expected 0x4d434644"):
        make()


def test_fetching_board_gives_dma_buffers_and_refuses_host_streams(board):
    """ENGINES = 0x8 (sp_out only: a fetching node, mcf_fpga/boards/node_dma.py): no cmd/sp_in/w rings, a
    push to their streams is a BoardError naming the missing reader, their pending is 0; a fetched
    SPR (expect_sp_out) posts its sp_out descriptor;
    memory('m_axi_cmd'/'m_axi_load', n) is a buffer of the allocator (its own base, not the one
    asked for) whose load() lands in the DMA memory; on a board with every engine (0xF) memory()
    is refused, and ENGINES without sp_out is a BoardError."""
    win, alloc, clock, make = board
    win.write(DMA + 0x14, 0x8)
    hw = make(rx_slots=2)
    assert hw.fetching and sorted(hw.eng) == ["sp_out"]
    for port, reader in (("s_axis_cmd", "cmd"), ("s_axis_w", "w"), ("s_axis_sp", "sp_in")):
        with pytest.raises(BoardError, match=rf"push to {port}: the board's node fetches .*ENGINES=0x8: no "
                                             rf"{reader} reader"):
            hw.push(port, bytes(64))
        assert hw.pending(port) == 0
    for r in range(0x100, 0x1C0, 4):                 # nothing posted to the missing engines
        assert r32(win, DMA + r) == 0
    hw.expect_sp_out(5)                              # a fetched SPR of 5 words: 2 beats of sp_out
    assert r32(win, DMA + ENG["sp_out"] + LENGTH) == 32 and r32(win, DMA + ENG["sp_out"] + ADDR_LO) >= PHYS
    with pytest.raises(ValueError, match=r"expect_sp_out: an SPR reads at least one word, got 0"):
        hw.expect_sp_out(0)
    cmd = hw.memory("m_axi_cmd", 4096, base=0x20_0000_0000, latency=100)
    load = hw.memory("m_axi_load", 8192)
    assert PHYS <= cmd.base < cmd.base + 4096 <= load.base < PHYS + (1 << 20) and load.size == 8192
    load.load(load.base + 32, b"\x11\x22\x33")
    assert load.dump(load.base + 31, 5) == b"\x00\x11\x22\x33\x00"
    with pytest.raises(ValueError, match=r"m_axi_load memory: 4 bytes at .* leave its DMA buffer"):
        load.load(load.base + 8190, bytes(4))
    with pytest.raises(ValueError, match=r"memory\('m_axi_kv'\): a board gives DMA buffers to m_axi_cmd, "
                                         r"m_axi_load only"):
        hw.memory("m_axi_kv", 4096)
    win.write(DMA + 0x14, 0xF)
    with pytest.raises(BoardError, match=r"memory\('m_axi_cmd'\): the board's node does not fetch \(ENGINES=0xf"):
        make().memory("m_axi_cmd", 4096)
    win.write(DMA + 0x14, 0x7)
    with pytest.raises(BoardError, match=r"ENGINES=0x7: expected every engine \(0xf\) or, on a fetching node, "
                                         r"sp_out only \(0x8\)"):
        make()
