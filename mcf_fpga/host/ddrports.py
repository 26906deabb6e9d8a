"""The node's AXI HP ports into DDR and what an engine instruction moves through them
(docs/memory.md "AXI ports and arbitration").

Port plan (every DDR user on its own HP port; the PS's DDR controller arbitrates among them):

==========  =========  ==============================================================
traffic     channel    what
==========  =========  ==============================================================
``cmd``     HP0.rd     command records: ``cmd_bytes`` = 16 ceil(instruction bits / 128) per instruction
``rx``      HP0.wr     RX ring: a 16-byte record header + the packet (16-byte Meta + payload)
``sp_in``   HP1.rd     SPW: 4 bytes per scratchpad word, whole 16-byte beats
``sp_out``  HP1.wr     SPR: as ``sp_in``
``weights`` HP2.rd     GEMM weight tiles: ``tile_beats`` beats of ``pn pk / 2`` bytes per tile;
                       with ``weight_lanes`` L > 1 (``boards.striped_reader``) beat k of a tile
                       on lane ``k mod L``: lane 0 here, lanes 1, 2 as ``weights1`` / ``weights2``
``weights1`` HPC0.rd   GEMM weight lane 1 (``weight_lanes`` >= 2)
``weights2`` HPC1.rd   GEMM weight lane 2 (``weight_lanes`` = 3)
``install`` HP2.wr     NIC KV installs: the records of every received KV install packet
``kv_load`` HP3.rd     KVL (K/V in DDR): the ATT job's K and V rows, ``2 keys row_bytes``
                       (``KVRegion.row_bytes``); KVS: its ``records row_bytes``
``kv_wr``   HP3.wr     KVW (K/V in DDR): ``rows row_bytes``
==========  =========  ==============================================================

With K/V on chip (``kv_ddr`` False) ATT and KVW read and write the attention unit's memories
and move no DDR bytes.

Cost (:meth:`DDRPorts.cycles`): each channel moves at most ``port_bytes_per_cycle`` (a 128-bit
HP port: 16 B/cycle per direction) and all channels together at most ``ddr_bytes_per_cycle``
(``HardwareConfig.ddr_bytes_per_cycle``); bytes that overlap in one instruction take
``max(max_channel bytes / port rate, total bytes / DDR rate)`` cycles. The performance model
(``host.perfmodel``) takes an instruction's time as the max of that and its compute cycles.
"""
from __future__ import annotations

from dataclasses import dataclass

from mcf_fpga.spec.kvregion import KVRegion
from mcf_fpga.hdl.compute.gemm import tile_beats

__all__ = ["PORT_PLAN", "CHANNELS", "WEIGHT_LANES", "DDRPorts", "cmd_bytes", "kv_row_bytes", "instr_traffic"]

#: traffic -> (HP port, direction)
PORT_PLAN = {
    "cmd": ("HP0", "rd"), "rx": ("HP0", "wr"),
    "sp_in": ("HP1", "rd"), "sp_out": ("HP1", "wr"),
    "weights": ("HP2", "rd"), "install": ("HP2", "wr"),
    "kv_load": ("HP3", "rd"), "kv_wr": ("HP3", "wr"),
    "weights1": ("HPC0", "rd"), "weights2": ("HPC1", "rd"),
}
#: the weight lanes' traffic names, lane i = WEIGHT_LANES[i] (``boards.striped_reader`` lane order)
WEIGHT_LANES = ("weights", "weights1", "weights2")
#: every channel as ``"HPn.rd"`` / ``"HPn.wr"``, in port order
CHANNELS = tuple(f"{p}.{d}" for p, d in PORT_PLAN.values())

HP_BYTES = 16      #: one beat of a 128-bit HP port


def _beats(n: int) -> int:
    return -(-n // HP_BYTES) * HP_BYTES


def cmd_bytes() -> int:
    """Bytes of one command record (``boards.node_dma``: 16 ceil(cmd_bits / 128))."""
    from mcf_fpga.hdl.compute.engine import INSTR
    return _beats(-(-INSTR.size // 8))


def kv_row_bytes(d: int, kv_bits: int, bus_bytes: int = HP_BYTES) -> int:
    """Bytes of one K or V row record in the KV region (``spec.kvregion.KVRegion.row_bytes``)."""
    return KVRegion(0, 1, 1, d, kv_bits, bus_bytes).row_bytes


def channel(traffic: str) -> str:
    p, d = PORT_PLAN[traffic]
    return f"{p}.{d}"


@dataclass(frozen=True)
class DDRPorts:
    """Rates of one node's DDR: ``port_bytes_per_cycle`` per channel (port and direction),
    ``ddr_bytes_per_cycle`` for all channels together; GEMM weight tiles striped over
    ``weight_lanes`` read channels (:data:`WEIGHT_LANES`)."""
    port_bytes_per_cycle: float = 16.0
    ddr_bytes_per_cycle: float = 64.0
    weight_lanes: int = 1

    def __post_init__(self):
        if not self.port_bytes_per_cycle > 0:
            raise ValueError(f"DDRPorts.port_bytes_per_cycle={self.port_bytes_per_cycle!r}, expected > 0")
        if not self.ddr_bytes_per_cycle > 0:
            raise ValueError(f"DDRPorts.ddr_bytes_per_cycle={self.ddr_bytes_per_cycle!r}, expected > 0")
        if self.weight_lanes not in range(1, len(WEIGHT_LANES) + 1):
            raise ValueError(f"DDRPorts.weight_lanes={self.weight_lanes!r}, expected 1..{len(WEIGHT_LANES)}")

    def cycles(self, traffic: dict) -> float:
        """Cycles to move ``traffic`` ({traffic name: bytes}, :data:`PORT_PLAN`) at once: the
        busiest channel at the port rate or the total at the DDR rate, whichever is longer."""
        per = {}
        for t, b in traffic.items():
            per[channel(t)] = per.get(channel(t), 0) + b
        if not per:
            return 0.0
        return max(max(per.values()) / self.port_bytes_per_cycle, sum(per.values()) / self.ddr_bytes_per_cycle)


def instr_traffic(kind: str, shape: dict, engine: dict, row_bytes: int, cmd: int, kv_ddr: bool = False) -> dict:
    """{traffic name: bytes} one engine instruction of ``kind`` with ``shape`` (the performance
    model's shapes) moves through the HP ports on an engine ``engine`` (pn, pk, group; ``w_lanes``:
    GEMM weight beat k of a tile on lane k mod w_lanes, :data:`WEIGHT_LANES`), K/V rows of
    ``row_bytes``, command records of ``cmd`` bytes. ``kv_ddr``: the engine keeps K/V in DDR
    (KVL loads an ATT job's rows ``{"keys": n}``, KVS reads ``{"records": n}``, KVW writes its
    rows); otherwise ATT/KVW stay on chip and KVL/KVS do not exist."""
    out = {"cmd": cmd}
    if kind == "spw":
        out["sp_in"] = _beats(4 * shape["n0"])
    elif kind == "spr":
        out["sp_out"] = _beats(4 * shape["n0"])
    elif kind == "gemm":
        pn, pk, group = engine["pn"], engine["pk"], engine["group"]
        kc, lanes = shape["K"] // pk, engine.get("w_lanes", 1)
        tb = tile_beats(kc, group // pk, pk)
        for i in range(min(lanes, tb)):
            out[WEIGHT_LANES[i]] = (shape["N"] // pn) * len(range(i, tb, lanes)) * _beats(pn * pk // 2)
    elif kind in ("kvl", "kvs") and not kv_ddr:
        raise ValueError(f"instr_traffic: {kind} exists only with K/V in DDR (kv_ddr=True)")
    elif kind == "kvl":
        out["kv_load"] = 2 * shape["keys"] * row_bytes
    elif kind == "kvs":
        out["kv_load"] = shape["records"] * row_bytes
    elif kind == "kvw" and kv_ddr:
        out["kv_wr"] = shape["rows"] * row_bytes
    return out
