"""The NIC on the Verilator backend (mcf_fpga/sim/verilator): one cached build shared by the fuzz
and cluster tests (and scripts/bench_nic.py, which uses the same configuration)."""

from mcf_fpga.spec.nic import NicConfig, Reg
from mcf_fpga.hdl.nic.nic import Nic

VCFG = NicConfig(n_net=4, n_routes=32, max_payload=512, reduce_contexts=4, merge_contexts=2)
IN = ["s_axis"] + [f"s_axis_net{p}" for p in range(1, VCFG.n_net + 1)]
OUT = ["m_axis"] + [f"m_axis_net{p}" for p in range(1, VCFG.n_net + 1)]
_models = {}


def vl_model():
    """A fresh instance of the Verilator model of ``Nic(VCFG)`` (built once per process)."""
    from mcf_fpga.sim.verilator import build
    if "lib" not in _models:
        _models["lib"] = build(Nic(VCFG))
        return _models["lib"]
    return _models["lib"].new()


def vl_configure(model, golden, table):
    """Reset, write the golden model's registers (``nic_tb.register_ops``) and ``table``
    (shadow bank, then flip)."""
    from mcf_fpga.hdl.bus import Resp
    from tests.hdl.nic.nic_tb import register_ops
    model.reset()
    for addr, val in register_ops(golden):
        assert model.axil_write(addr, val) == Resp.OKAY
    for rid, e in sorted(table.items()):
        model.axil_write(Reg.ROUTE_INDEX, rid)
        model.axil_write(Reg.ROUTE_DATA, e.encode())
    model.axil_write(Reg.BANK_FLIP, 1)


def vl_counters(model):
    from mcf_fpga.spec.nic import ErrorCause
    out = {c: model.axil_read(Reg.ERR_BASE + 4 * c)[0] for c in ErrorCause}
    out["rx_frames"] = model.axil_read(Reg.RX_FRAMES)[0]
    out["err_flags"] = model.axil_read(Reg.ERR_FLAGS)[0]
    return out
