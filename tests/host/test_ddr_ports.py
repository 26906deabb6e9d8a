"""The performance model charges each AXI HP port (host.ddrports,
host.perfmodel ``params["ddr"]``): hand-computed port times of one GEMM tile and one decode
attention job, a case where one port binds and one where the DDR total binds, and the per-port
byte totals of a prediction."""
from types import SimpleNamespace

import pytest

from mcf_fpga.golden.config import get_config
from mcf_fpga.hdl.compute.engine import INSTR, KR260
from mcf_fpga.host import perfmodel as pm
from mcf_fpga.host.config import ClusterConfig, HardwareConfig
from mcf_fpga.host.ddrports import CHANNELS, DDRPorts, channel, cmd_bytes, instr_traffic, kv_row_bytes

QWEN = get_config("qwen2.5-1.5b")
ENG = {"pn": KR260["pn"], "pk": KR260["pk"], "group": KR260["group"]}     # 16, 32, 128


def test_one_gemm_tile_by_hand():
    """One tile (N = pn = 16) of a K = 1536 GEMM on the KR260 engine: header beat + one beat of
    scales (1536 / 128 = 12 groups, 16 per beat) + 1536 / 32 = 48 weight beats = 50 beats of
    16 x 32 int4 = 256 B: 12,800 B on HP2.rd = 800 cycles at 16 B/cycle (200 at 64 B/cycle DDR)."""
    tr = instr_traffic("gemm", {"T": 1, "K": 1536, "N": 16, "reuse": 0}, ENG, 144, 0)
    assert tr == {"cmd": 0, "weights": 12_800}
    assert DDRPorts(16, 64).cycles(tr) == 800
    assert DDRPorts(16, 64).cycles(instr_traffic("gemm", {"T": 1, "K": 1536, "N": 32, "reuse": 1}, ENG, 144, 0)) \
        == 1600                                                     # two tiles, reuse still streams weights


def test_gemm_tile_striped_over_weight_lanes_by_hand():
    """The same 50-beat tile over 3 weight lanes (boards.striped_reader: beat k on lane k mod 3):
    17, 17, 16 beats on HP2.rd, HPC0.rd, HPC1.rd; the busiest lane binds (17 x 256 / 16 = 272
    cycles), and the DDR total (12,800 / 64 = 200) does not. Two lanes: 25 + 25 = 400 cycles."""
    tr = instr_traffic("gemm", {"T": 1, "K": 1536, "N": 16, "reuse": 0}, dict(ENG, w_lanes=3), 144, 0)
    assert tr == {"cmd": 0, "weights": 17 * 256, "weights1": 17 * 256, "weights2": 16 * 256}
    assert DDRPorts(16, 64, weight_lanes=3).cycles(tr) == 272
    tr2 = instr_traffic("gemm", {"T": 1, "K": 1536, "N": 32, "reuse": 0}, dict(ENG, w_lanes=2), 144, 0)
    assert tr2 == {"cmd": 0, "weights": 2 * 25 * 256, "weights1": 2 * 25 * 256}
    assert DDRPorts(16, 64, weight_lanes=2).cycles(tr2) == 800
    ch = {channel(t) for t in tr}
    assert ch == {"HP0.rd", "HP2.rd", "HPC0.rd", "HPC1.rd"}
    # the model charges the lanes: a decode GEMM tile takes 272 cycles instead of 800
    P = pm.engine_params(_params(), dict(KR260), ddr_bytes_per_cycle=64.0, port_bytes_per_cycle=16.0,
                         weight_lanes=3)
    cost, by_ch, _ = _node(P).cost("gemm", {"T": 1, "K": 1536, "N": 16, "reuse": 0})
    assert by_ch["HP2.rd"] == 17 * 256 and by_ch["HPC1.rd"] == 16 * 256 and cost == pytest.approx(272, abs=2)
    with pytest.raises(ValueError, match="weight_lanes"):
        DDRPorts(16, 64, weight_lanes=4)


def test_one_decode_attention_job_by_hand():
    """The KVL of a decode ATT job over a 256-key block of one KV head, d = 128: K and V rows of
    129 B (128 values + exponent) padded to 144 B records: 2 x 256 x 144 = 73,728 B on HP3.rd =
    4,608 cycles at 16 B/cycle. The job computes in ~1,930 cycles on chip (docs/memory.md): one
    port runs it at 1,930 / 4,608 = 42 % of the on-chip speed (INT4: 80 B rows, 2,560 cycles,
    75 %). With K/V on chip ATT and KVW move no DDR bytes, and KVL/KVS do not exist."""
    assert kv_row_bytes(128, 8) == 144 and kv_row_bytes(128, 4) == 80
    tr = instr_traffic("kvl", {"keys": 256}, ENG, 144, 0, kv_ddr=True)
    assert tr == {"cmd": 0, "kv_load": 73_728}
    assert DDRPorts(16, 64).cycles(tr) == 4_608
    assert round(1930 / 4608, 2) == 0.42 and round(1930 / DDRPorts(16, 64).cycles(
        instr_traffic("kvl", {"keys": 256}, ENG, 80, 0, kv_ddr=True)), 2) == 0.75
    assert instr_traffic("att", {"rows": 6, "keys": 256}, ENG, 144, 0, kv_ddr=True) == {"cmd": 0}
    assert instr_traffic("att", {"rows": 6, "keys": 256}, ENG, 144, 0) == {"cmd": 0}
    # KVS of 14 records (one 2 KB install packet at INT8) reads them on HP3.rd
    assert instr_traffic("kvs", {"records": 14, "words": 506}, ENG, 144, 0, kv_ddr=True)["kv_load"] == 2016
    with pytest.raises(ValueError, match="kv_ddr=True"):
        instr_traffic("kvl", {"keys": 4}, ENG, 144, 0)
    # KVW of one decode token's K rows (2 heads) on HP3.wr (DDR only); SPW/SPR in whole 16-byte beats on HP1
    assert instr_traffic("kvw", {"rows": 2, "len": 128}, ENG, 144, 0, kv_ddr=True)["kv_wr"] == 288
    assert instr_traffic("kvw", {"rows": 2, "len": 128}, ENG, 144, 0) == {"cmd": 0}
    assert instr_traffic("spw", {"n0": 5}, ENG, 144, 0)["sp_in"] == 32
    assert instr_traffic("spr", {"n0": 8}, ENG, 144, 0)["sp_out"] == 32
    assert cmd_bytes() == 16 * -(-INSTR.size // 128)


def test_port_binds_or_ddr_total_binds():
    """3,200 B at once, 1,600 on HP2.rd and 1,600 on HP3.rd: one port needs 100 cycles; the
    total at 64 B/cycle 50 (the port binds), at 20 B/cycle 160 (the DDR total binds). Reads and
    writes of one port are separate channels: 1,600 B each way on HP3 is also 100 cycles."""
    tr = {"weights": 1600, "kv_load": 1600}
    assert DDRPorts(16, 64).cycles(tr) == 100
    assert DDRPorts(16, 20).cycles(tr) == 160
    assert DDRPorts(16, 64).cycles({"kv_load": 1600, "kv_wr": 1600}) == 100
    assert DDRPorts(16, 64).cycles({"kv_load": 1600, "kv_wr": 1600, "weights": 3200}) == 200
    with pytest.raises(ValueError, match="port_bytes_per_cycle"):
        DDRPorts(0, 64)
    with pytest.raises(ValueError, match="port_bytes_per_cycle"):
        HardwareConfig(port_bytes_per_cycle=0)


def _params(ddr=None, att=1930.0, gemm=100.0):
    """Hand-made model parameters: every instruction costs its ``one`` coefficient."""
    instr = {k: {"one": 10.0} for k in pm.FEATURES}
    instr["att"] = {"one": att}
    instr["gemm"] = {"one": gemm}
    lin = lambda a, b: {"a": a, "b": b}  # noqa: E731
    P = {"instr": instr, "engine": dict(KR260),
         "link": {"tx": lin(5, 0), "rx": lin(7, 0), "fwd": lin(3, 0), "red": lin(0, 0), "frame_overhead": 18,
                  "ack_bytes": 2, "max_payload": 2048}, "kvpool_cycles": 3.0}
    if ddr:
        P["ddr"] = {"port_bytes_per_cycle": ddr[0], "ddr_bytes_per_cycle": ddr[1]}
    return P


def _node(P, kv_bits=8):
    prog = SimpleNamespace(model=QWEN, kv_bits=kv_bits, block=16)
    return pm._Node(0, prog, P, 2048)


def test_model_charges_the_ports_per_instruction():
    """The model's instruction time is max(compute, busiest channel / port rate, total / DDR
    rate); without params["ddr"] (the RTL calibration) it is the compute alone. (K/V loads are
    timed on the streamer: tests/host/test_perfmodel_ddr.py.)"""
    cmd = cmd_bytes()
    gemm = {"T": 1, "K": 1536, "N": 16, "reuse": 0}
    free = _node(_params())
    assert free.cost("gemm", gemm)[0] == 100                                       # bytes counted, not charged
    ports = _node(_params(ddr=(16, 64)))
    c, by_ch, extra = ports.cost("gemm", gemm)
    assert c == 800 and extra == 700                                               # HP2 binds
    assert by_ch == {"HP0.rd": cmd, "HP2.rd": 12_800}
    slow_ddr = _node(_params(ddr=(16, 8)))
    assert slow_ddr.cost("gemm", gemm)[0] == (12_800 + cmd) / 8                    # the DDR total binds
    # compute-bound: a GEMM computing for 1,000 cycles hides its 800-cycle weight stream
    assert _node(_params(ddr=(16, 64), gemm=1000.0)).cost("gemm", gemm)[0] == 1000
    # K/V on chip: ATT reads the attention unit's memories, no DDR bytes, no charge
    assert ports.cost("att", {"rows": 6, "keys": 256})[:2] == (1930, {"HP0.rd": cmd})
    # speedup (what-if: a faster node) divides the ports' cycles too
    P = pm.engine_params(_params(ddr=(16, 64)), dict(KR260), speedup=2.0)
    assert _node(P).cost("gemm", gemm)[0] == 800 / 2


def test_engine_params_sets_the_ports_and_kr260_hardware_has_them():
    P = pm.engine_params(_params(), dict(KR260), ddr_bytes_per_cycle=64.0, port_bytes_per_cycle=16.0)
    assert P["ddr"] == {"port_bytes_per_cycle": 16.0, "ddr_bytes_per_cycle": 64.0, "weight_lanes": 1}
    with pytest.raises(ValueError, match="needs ddr_bytes_per_cycle"):
        pm.engine_params(_params(), dict(KR260), port_bytes_per_cycle=16.0)
    hw = HardwareConfig.kr260()
    assert hw.port_bytes_per_cycle == 16 and hw.ddr_bytes_per_cycle == pytest.approx(19.2e9 * 2 / 3 / 200e6)
    assert hw.weight_ports == 3 and HardwareConfig().weight_ports == 1     # HP2, HPC0, HPC1 on the KR260
    _, P3, _ = pm.kr260_setup(kr260=None)
    assert P3["ddr"]["weight_lanes"] == 3


def test_prediction_exposes_port_totals_and_ddr_only_slows_it_down():
    """A micro-model MARS program (2 nodes, 32 tokens, 3 new) on the hand-made parameters at
    the micro engine shape: per-port byte totals are the same with and without charging;
    charging makes nothing faster. K/V on chip: nothing on HP3 (KVW and ATT use the attention
    unit's memories), nothing on HP2.wr (no NIC installer); the K/V-in-DDR counterpart is in
    tests/host/test_perfmodel_ddr.py."""
    from mcf_fpga.host import mars
    from mcf_fpga.host.executors.rtl import SIM_ENGINE
    micro = get_config("micro").replace(num_layers=1)
    prog = mars.plan(micro, ClusterConfig(nodes=2, kv_bytes_per_node=1 << 20), HardwareConfig(), 32, 3, block=16,
                     params=mars.MarsParams(chunk=16))
    base = _params()
    base["engine"] = dict(SIM_ENGINE)
    free = pm.predict(prog, base, chunk=1)
    charged = pm.predict(prog, dict(base, ddr={"port_bytes_per_cycle": 1.0, "ddr_bytes_per_cycle": 1.5}), chunk=1)
    assert free.port_bytes == charged.port_bytes and set(free.port_bytes[0]) == set(CHANNELS)
    assert free.ddr_cycles == [0.0, 0.0] and min(charged.ddr_cycles) > 0
    assert charged.ttft_cycles > free.ttft_cycles and charged.decode_cycles > free.decode_cycles
    for n in range(2):
        assert free.port_bytes[n]["HP3.wr"] == free.port_bytes[n]["HP3.rd"] == 0
        assert free.port_bytes[n]["HP2.wr"] == 0                   # received KV: host SPW + KVW
        assert free.port_bytes[n]["HP0.wr"] > 0                    # the RX ring
