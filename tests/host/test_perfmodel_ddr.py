"""The performance model of a node whose engine keeps K/V in DDR (host.perfmodel.kv_in_ddr): every
ATT gets a KVL in the executor's queue order (host.executors.kv_ddr.load_order),
its block loads on the KV streamer's one read channel (the load's bytes at the HP3 port rate) and
the ATT waits for its window; a KVW fences later loads; KV units are sent with KVS (install
packets of records) and received units are written by the NIC's installer over HP2.wr with no
host SPW/KVW. Hand-computed batches on hand-made coefficients, and instruction/port totals of a
whole program counted independently from its ops. No simulation: seconds."""
import pytest

from mcf_fpga.golden.config import get_config
from mcf_fpga.hdl.compute.engine import KR260
from mcf_fpga.host import perfmodel as pm
from mcf_fpga.host.config import ClusterConfig, HardwareConfig
from mcf_fpga.host.ddrports import kv_row_bytes
from mcf_fpga.host.program_ops import Append, Project, Recv, Send

QWEN = get_config("qwen2.5-1.5b")              # d = 128, 2 KV heads
MICRO = get_config("micro").replace(num_layers=1)
LIN = lambda a, b: {"a": a, "b": b}  # noqa: E731


def _params(engine=None, ddr=None, att=1930.0):
    """Hand-made parameters: every instruction costs its ``one`` coefficient; the DDR node's KVL
    8 cycles, a block load 100 + 1 cycle per 16-byte beat from the KVL's start, the write fence 6,
    a KVS 100 + 1 cycle per 32-bit word."""
    instr = {k: {"one": 10.0} for k in pm.FEATURES}
    instr["att"] = {"one": att}
    P = {"instr": instr, "engine": dict(engine or KR260),
         "link": {"tx": LIN(5, 0), "rx": LIN(7, 0), "fwd": LIN(3, 0), "red": LIN(0, 0), "frame_overhead": 18,
                  "ack_bytes": 2, "max_payload": 2048}, "kvpool_cycles": 3.0,
         "kv_ddr": {"instr": {"att": {"one": att}, "kvw": {"one": 10.0}, "kvl": {"one": 8.0},
                              "kvs": {"one": 100.0, "words": 1.0}, "kvload": {"one": 100.0, "beats": 1.0},
                              "kvfence": {"one": 6.0}}}}
    if ddr:
        P["ddr"] = {"port_bytes_per_cycle": ddr[0], "ddr_bytes_per_cycle": ddr[1]}
    return P


DEC = {"rows": 6, "keys": 256}                  # a decode job: 6 query rows x a 256-key block


def test_decode_jobs_by_hand():
    """KR260 INT8, 16 B/cycle ports: a block load is 2 x 256 x 144 B = 73,728 B = 4,608 beats.
    One job: KVL at 0..8, window full at 100 + 4,608 = 4,708, ATT 4,708..6,638. Two jobs: the
    second block's KVL is queued ahead of the first ATT (8..16) but its data follow the first
    block's on the one read channel: full at 4,708 + 4,608 = 9,316, so the second ATT runs
    9,316..11,246 (port-bound: one job per 4,608 cycles). INT4 (80 B rows, 2,560 beats): 2,660,
    ATT 2,660..4,590, second block full at 5,220, done 7,150."""
    P = pm.kv_in_ddr(_params(ddr=(16, 64)))
    assert pm.batch_cycles(P, [("att", DEC)], QWEN) == 6638
    assert pm.batch_cycles(P, [("att", DEC)] * 2, QWEN) == 11246
    assert pm.batch_cycles(P, [("att", DEC)] * 2, QWEN, kv_bits=4) == 7150
    # a slower port: the transfer takes the port's time (73,728 / 8 = 9,216 cycles)
    assert pm.batch_cycles(pm.kv_in_ddr(_params(ddr=(8, 64))), [("att", DEC)], QWEN) == 100 + 9216 + 1930
    # without port charges (the simulated node) the calibrated cycle per beat
    assert pm.batch_cycles(pm.kv_in_ddr(_params()), [("att", DEC)], QWEN) == 6638
    # K/V on chip: the same jobs take their compute alone
    assert pm.batch_cycles(_params(ddr=(16, 64)), [("att", DEC)] * 2, QWEN) == 2 * 1930


def test_prefill_jobs_hide_their_loads():
    """Jobs of 96 query rows computing 27,040 cycles each: only the first block's load is exposed
    (4,708), the second loads while the first computes."""
    P = pm.kv_in_ddr(_params(ddr=(16, 64), att=27_040.0))
    assert pm.batch_cycles(P, [("att", {"rows": 96, "keys": 256})] * 2, QWEN) == 4708 + 2 * 27_040


def test_a_kvw_fences_the_next_load_and_folds_do_not_stop_the_prefetch():
    """KVW of 2 rows (288 B on HP3.wr = 18 cycles at 16 B/cycle, over its 10 of compute) retires
    at 18, its rows are written at 18 + 6 = 24: the ATT's KVL starts then (24..32), its block is
    full at 24 + 100 + 4,608 = 4,732, the ATT ends at 6,662. A FOLD between two ATTs does not
    stop the second block's prefetch (the decode batch of NodeDriver._dlocal): ATT, FOLD, ATT =
    the two-job batch above + the FOLD's 10 cycles, which the second load hides."""
    P = pm.kv_in_ddr(_params(ddr=(16, 64)))
    assert pm.batch_cycles(P, [("kvw", {"rows": 2, "len": 128}), ("att", DEC)], QWEN) == 6662
    fold = ("fold", {"rows": 6, "parts": 6, "final": 0})
    assert pm.batch_cycles(P, [("att", DEC), fold, ("att", DEC)], QWEN) == 11246


def _program():
    from mcf_fpga.host import mars
    return mars.plan(MICRO, ClusterConfig(nodes=2, kv_bytes_per_node=1 << 20), HardwareConfig(), 32, 3, block=16,
                     params=mars.MarsParams(chunk=16))


def _predict(prog, **kv):
    from mcf_fpga.host.executors.rtl import SIM_ENGINE
    P = _params(engine=SIM_ENGINE, ddr=(16, 64))
    return pm.predict(prog, pm.kv_in_ddr(P, **kv) if kv else P, chunk=1)


def test_program_on_the_ddr_node_counts_kvl_kvs_and_nic_installs():
    """A micro-model MARS program (2 nodes, 32 tokens, 3 new), counted from its ops: with K/V
    in DDR one KVL per ATT; KVS mode: one KVS per install packet (a 16-token unit: 32 K records
    of 32 B, then 32 V records: 2 packets of <= 63 records), no KV EMIT; NIC installs: the records
    of every received unit on HP2.wr, no SPW and no KVW for it, KV packets off the RX ring; host
    installs (run_rtl today): 4 SPW and 2 KVW per received unit, nothing on HP2.wr."""
    prog = _program()
    row = kv_row_bytes(MICRO.head_dim, 8)
    Hk = MICRO.num_kv_heads
    onchip, host = _predict(prog), _predict(prog, send="emit", install="host")
    nic = _predict(prog, send="kvs", install="nic")
    for n in range(2):
        ops = prog.ops[n]
        units = lambda cls: [prog.units[op.unit] for op in ops  # noqa: E731
                             if isinstance(op, cls) and op.what == "kv"]
        sent, got = units(Send), units(Recv)
        kvw_own = sum(2 for op in ops if isinstance(op, (Project, Append)))
        for p in (host, nic):
            c = p.instr_counts[n]
            assert c.get("kvl", 0) == c.get("att", 0) > 0
        assert onchip.instr_counts[n]["att"] == host.instr_counts[n]["att"]
        assert "kvl" not in onchip.instr_counts[n] and "kvs" not in onchip.instr_counts[n]
        # KVS: 2 packets per unit of 16 tokens (32 K records, 32 V records of 32 B), read on HP3.rd
        assert all(t1 - t0 == 16 for t0, t1 in sent + got)
        assert nic.instr_counts[n].get("kvs", 0) == 2 * len(sent)
        assert nic.port_bytes[n]["HP3.rd"] - host.port_bytes[n]["HP3.rd"] == len(sent) * 2 * 16 * Hk * row
        # EMIT: a unit was K values (512 B), K exponents (32 B), V values, V exponents: 4 packets
        assert host.instr_counts[n]["emit"] - nic.instr_counts[n].get("emit", 0) == 4 * len(sent)
        # received units: NIC -> installer -> DDR over HP2.wr; host: SPW + KVW
        assert nic.port_bytes[n]["HP2.wr"] == sum(2 * (t1 - t0) * Hk * row for t0, t1 in got)
        assert host.port_bytes[n]["HP2.wr"] == 0
        assert nic.instr_counts[n]["kvw"] == kvw_own
        assert host.instr_counts[n]["kvw"] == kvw_own + 2 * len(got)
        assert host.instr_counts[n]["spw"] - nic.instr_counts[n]["spw"] == 4 * len(got)
        assert nic.port_bytes[n]["HP3.wr"] == sum(2 * (op.rows[1] - op.rows[0]) * Hk * row
                                                  for op in ops if isinstance(op, Project)) + \
            sum(2 * Hk * row for op in ops if isinstance(op, Append))
        # the RX ring no longer carries a received unit's 4 EMIT packets (512 + 32 + 512 + 32 B
        # payload, each with a 16-byte record header and Meta, whole 16-byte beats: 1,216 B)
        assert host.port_bytes[n]["HP0.wr"] - nic.port_bytes[n]["HP0.wr"] == 1216 * len(got)
    assert nic.ttft_cycles > 0 and nic.decode_cycles > 0
    for p in (onchip, host, nic):              # the per-kind split adds up to the engine's busy time
        for n in range(2):
            assert sum(p.busy_by_kind[n].values()) == pytest.approx(p.engine_busy[n])
    assert sum(nic.kv_wait) > 0 and sum(v for k, v in nic.busy_by_kind[0].items() if k == "att wait") == nic.kv_wait[0]


def test_kv_in_ddr_refuses_what_it_cannot_model():
    P = _params()
    with pytest.raises(ValueError, match="send="):
        pm.kv_in_ddr(P, send="dma")
    with pytest.raises(ValueError, match="install="):
        pm.kv_in_ddr(P, install="cpu")
    with pytest.raises(ValueError, match="only the NIC's installer"):
        pm.kv_in_ddr(P, send="kvs", install="host")
    with pytest.raises(ValueError, match="which the compiler sends with KVS"):
        pm.kv_in_ddr(P, send="emit", install="nic")
    del P["kv_ddr"]
    with pytest.raises(ValueError, match="calibrate_perf.py"):
        pm.kv_in_ddr(P)


def test_kr260_setup_is_the_ddr_node_unless_told():
    base = _params()
    hw, P, _e = pm.kr260_setup(base=base, kr260=None)
    assert P["kv"] == {"send": "kvs", "install": "nic"} and P["ddr"]["port_bytes_per_cycle"] == 16
    assert P["instr_source"]["kvl"].startswith("simulated DDR node")
    _hw, P, _e = pm.kr260_setup(base=base, kr260=None, kv="onchip")
    assert "kv" not in P
    with pytest.raises(ValueError, match="kv="):
        pm.kr260_setup(base=base, kr260=None, kv="hbm")
