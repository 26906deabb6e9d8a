"""Board driver against a fake register file (mmap of a temp file) and a fake u-dma-buf."""
import struct

import numpy as np
import pytest

from mcf_fpga.host.board import MmapWindow, UdmabufAllocator, BoardDriver, find_uio, open_window
from mcf_fpga.host.board.mmio import PynqWindow

SIZE = 0x10000


@pytest.fixture
def regfile(tmp_path):
    path = tmp_path / "regs.bin"
    path.write_bytes(bytes(SIZE))
    return path


def test_mmap_window_reads_and_writes_32bit_words(regfile):
    with MmapWindow(str(regfile), SIZE) as w:
        w.write(0x04, 0xDEADBEEF)
        w.write(0xFFFC, 0x01020304)
        assert w.read(0x04) == 0xDEADBEEF
        assert w.read(0x08) == 0
    raw = regfile.read_bytes()
    assert struct.unpack_from("<I", raw, 0x04)[0] == 0xDEADBEEF      # little-endian, in place
    assert struct.unpack_from("<I", raw, 0xFFFC)[0] == 0x01020304


def test_window_refuses_bad_offsets_and_values_without_writing(regfile):
    with MmapWindow(str(regfile), SIZE) as w:
        for off in (-4, 2, SIZE, SIZE - 2):
            with pytest.raises(ValueError, match="offset"):
                w.write(off, 1)
        with pytest.raises(ValueError, match="value"):
            w.write(0, 1 << 32)
        with pytest.raises(ValueError, match="offset"):
            w.read(3)
    assert regfile.read_bytes() == bytes(SIZE)


def test_identify_reads_magic_and_node(regfile):
    raw = bytearray(SIZE)
    struct.pack_into("<I", raw, 0x00, (0x4D4346 << 8) | 1)
    struct.pack_into("<I", raw, 0x20, 2 | (4 << 8))
    regfile.write_bytes(bytes(raw))
    drv = BoardDriver(MmapWindow(str(regfile), SIZE))
    assert drv.identify() == {"version": 1, "node_id": 2, "nodes": 4}
    drv.write_reg(0x04, 0x1234)
    assert drv.read_reg(0x04) == 0x1234
    drv.close()
    regfile.write_bytes(bytes(SIZE))
    with pytest.raises(OSError, match="no MCF design"):
        BoardDriver(MmapWindow(str(regfile), SIZE)).identify()


@pytest.fixture
def udmabuf(tmp_path):
    dev, sysfs = tmp_path / "dev", tmp_path / "sys"
    dev.mkdir()
    (sysfs / "udmabuf0").mkdir(parents=True)
    (dev / "udmabuf0").write_bytes(bytes(1 << 16))
    (sysfs / "udmabuf0" / "phys_addr").write_text("0x70000000\n")
    (sysfs / "udmabuf0" / "size").write_text(str(1 << 16))
    (sysfs / "udmabuf0" / "sync_for_device").write_text("0")
    return dict(dev_dir=str(dev), sysfs=str(sysfs))


def test_buffers_load_dump_through_udmabuf(regfile, udmabuf, tmp_path):
    alloc = UdmabufAllocator(**udmabuf)
    drv = BoardDriver(MmapWindow(str(regfile), SIZE), alloc)
    a = np.arange(100, dtype=np.int16)
    b = np.full((3, 5), 7, dtype=np.int32)
    pa = drv.load("a", a)
    pb = drv.load("b", b)
    assert pa == 0x70000000 and pb == 0x70000000 + 4096          # page-aligned bump allocation
    raw = (tmp_path / "dev" / "udmabuf0").read_bytes()
    assert np.array_equal(np.frombuffer(raw, np.int16, 100), a)   # really in the device memory
    assert (tmp_path / "sys" / "udmabuf0" / "sync_for_device").read_text() == "1"
    np.testing.assert_array_equal(drv.dump("b"), b)
    with pytest.raises(ValueError, match="buffer 'a'"):
        drv.load("a", np.zeros(3, np.int16))
    with pytest.raises(ValueError, match="does not fit"):
        alloc.allocate((1 << 16,), np.uint8)
    with pytest.raises(ValueError, match="no buffer named"):
        drv.dump("c")


def test_pynq_backends_are_used_when_importable():
    calls = []

    class FakeMMIO:
        def __init__(self, base, size):
            calls.append((base, size))
            self.mem = {}

        def write(self, off, v):
            self.mem[off] = v

        def read(self, off):
            return self.mem.get(off, 0)

    class FakePynq:
        MMIO = FakeMMIO

    w = PynqWindow(0xA0000000, SIZE, FakePynq)
    w.write(8, 5)
    assert w.read(8) == 5 and calls == [(0xA0000000, SIZE)]


def test_no_backend_is_a_clear_error(tmp_path):
    assert find_uio("mcf", sysfs=str(tmp_path)) is None
    with pytest.raises(OSError, match="no register backend"):
        open_window(0xA0000000, SIZE, prefer=("uio",))


def test_uio_irq_enable_and_wait_on_a_fake_uio_device():
    import socket
    from mcf_fpga.host.board import UioIrq
    dev, kernel = socket.socketpair()
    irq = UioIrq(fd=dev.fileno())
    assert irq.wait(timeout=0.01) is None                 # nothing pending: times out
    assert kernel.recv(4) == struct.pack("=I", 1)          # ... after enabling the line
    kernel.send(struct.pack("=I", 7))                      # the kernel reports interrupt #7
    assert irq.wait(timeout=1) == 7
    assert kernel.recv(4) == struct.pack("=I", 1)          # re-enabled before waiting
    with pytest.raises(ValueError, match="timeout"):
        irq.wait(timeout=-1)
    dev.close()
    kernel.close()
