"""mcf_fpga/sim/boards.py: the simulated board's register window answers like the top (node ID at
0x3000, DMA ID at 0x8000, DECERR raises naming the address) and its DDR model keeps the three
HP ports' memories one byte image (host flushes reach every port; what the PL writes through
one port reaches the host and the other ports at once: the RX placer's landings on HP0 are read by
the stream loader on HP2).
Uses the Verilated NodeBoardTop of the board executor (built once, cached)."""
import numpy as np
import pytest

from mcf_fpga.sim.boards import HP_PORTS, SimDmaMemory, SimWindow, board_model
from mcf_fpga.host.executors.rtl import sim_node_config


@pytest.fixture(scope="module")
def model():
    return board_model(sim_node_config("ring"))


def test_window(model):
    w = SimWindow(model.new())
    assert w.read(0x3000) == 0x4D43464F and w.read(0x8000) == 0x4D434644       # "MCFO", "MCFD"
    with pytest.raises(OSError, match="read of 0x4000 answered DECERR"):
        w.read(0x4000)
    with pytest.raises(ValueError, match="offset 2"):
        w.read(2)


def test_ddr_is_one_address_space(model):
    m = model.new()
    ddr = SimDmaMemory(m, size=1 << 14)
    a = ddr.allocate((64,), np.uint8)
    b = ddr.allocate((32,), np.uint32)
    assert a.physical_address == ddr.base and b.physical_address == ddr.base + 4096
    a.array[5:9] = [1, 2, 3, 4]
    a.flush()
    for mem in ddr.mems:                                   # every port reads the host's bytes
        assert mem.dump(a.physical_address, 64) == bytes(5) + bytes([1, 2, 3, 4]) + bytes(55)
    pl = np.arange(32, dtype=np.uint32).tobytes()
    ddr.mems[HP_PORTS.index("m_axi_hp1")].load(b.physical_address, pl)     # the PL writes via HP1
    b.invalidate()
    assert b.array.tobytes() == pl
    for mem in ddr.mems:
        assert mem.dump(b.physical_address, 128) == pl
    ddr.mems[HP_PORTS.index("m_axi_hp0")].load(b.physical_address, b"\x07" * 8)   # the PL writes via HP0:
    assert ddr.mems[HP_PORTS.index("m_axi_hp2")].dump(b.physical_address, 8) == b"\x07" * 8   # HP2 reads it
    a.array[0] = 9                                          # a flush loads only what the host changed
    a.flush()
    b.invalidate()
    assert b.array.tobytes()[:8] == b"\x07" * 8 and ddr.mems[1].dump(a.physical_address, 1) == b"\x09"
    with pytest.raises(ValueError, match="does not fit"):
        ddr.allocate((1 << 14,), np.uint8)
