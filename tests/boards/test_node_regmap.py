"""The node top's register map is the hardware's: every window of ``register_map()`` is a window
the AXI-Lite decoders route, holding exactly the ``Register`` list of the register file behind it
(recorded while the fetching KR260-style top, which has every window, elaborates)."""
import dataclasses
import warnings

import pytest
from amaranth.hdl import Fragment

from mcf_fpga.boards.node_top import DMA_BASE, NodeBoardTop
from mcf_fpga.hdl.bus import axil_decoder, regfile
from mcf_fpga.host.executors.rtl import sim_fetch_node_config

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")


def test_register_map_equals_the_register_files_and_decoder_windows(monkeypatch):
    files, decoders = [], []
    init_rf, init_dec = regfile.AXI4LiteRegisterFile.__init__, axil_decoder.AXI4LiteDecoder.__init__

    def rf(self, registers, addr_width=12):
        init_rf(self, registers, addr_width)
        files.append((tuple(self.registers), addr_width))

    def dec(self, addr_width, windows, data_width=32):
        init_dec(self, addr_width, windows, data_width)
        decoders.append(list(self.windows))

    monkeypatch.setattr(regfile.AXI4LiteRegisterFile, "__init__", rf)
    monkeypatch.setattr(axil_decoder.AXI4LiteDecoder, "__init__", dec)
    top = NodeBoardTop(2, 1, dataclasses.replace(sim_fetch_node_config(), kv_install=True))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Fragment.get(top, None)
    regmap = top.register_map()
    names = [w.name for w in regmap.windows]
    assert names == ["engine", "nic", "kvpool", "node", "kvinstall", "cmdfetch", "rxplace", "dma"]
    # the top's decoder (node at 0, dma at DMA_BASE) and the node's decoder give every window
    top_dec = next(d for d in decoders if [n for n, *_ in d] == ["node", "dma"])
    node_dec = next(d for d in decoders if [n for n, *_ in d][:4] == ["engine", "nic", "kvpool", "node"])
    routed = {n: (top_dec[0][1] + b, w) for n, b, w in node_dec}
    routed["dma"] = (DMA_BASE, top_dec[1][2])
    assert {w.name: (w.base, w.addr_bits) for w in regmap.windows} == routed
    # each window holds the very list its register file decodes, with the file's address width
    recorded = sorted(files, key=repr)
    assert sorted(((w.registers, w.addr_bits) for w in regmap.windows), key=repr) == recorded
