"""Golden model of the KV installer: received KV install packets written
straight into the node's KV region in DDR, the directory entry committed when the unit's last
bytes have landed. No host on the data path. The hardware twin is
:class:`hdl.kvinstall.KVInstaller`; both count, write and commit identically.

Wire format
-----------
A KV install packet is a Meta header (:mod:`hdl.meta`, ``header_bytes`` = 16 at the defaults)
with ``op = KV_REPLICA``, ``kv_id`` = the unit, ``length = 8 + n * row_bytes``; its payload is
one 8-byte install header, little-endian:

* bits 0..15 ``row0``: the first record index within the slot's record array (a slot holds
  ``2 * slot_rows`` records, K rows then V rows: record index = ``sel * slot_rows + row``);
* bits 16..31 ``n``: records in this packet (>= 1);
* bit 32 ``last``: this packet completes the unit;
* bit 33 ``first``: this packet starts the unit (the installer allocates its entry, rule 2);
* bit 34 ``owner``: the unit becomes an ``OWNER`` entry when committed (read on the ``last``
  packet, ignored on the others; rule 4);
* bits 35..63 reserved, 0;

then the ``n`` records exactly as they are in DDR (:class:`spec.kvregion.KVRegion` row
records, ``row_bytes`` each). The sender splits a unit into packets of at most ``max_payload``
payload bytes; packets of one unit arrive in order (the reliable link).

Rules (applied to each packet in arrival order)
-----------------------------------------------
1. **Malformed** (counted ``drop_malformed``, nothing written): fewer than ``header_bytes``
   bytes, ``op != KV_REPLICA``, a payload whose size is not ``length``, ``length > max_payload``,
   ``length != 8 + n * row_bytes``, ``n = 0``, ``row0 + n > 2 * slot_rows``, or nonzero reserved
   install-header bits.
2. **Entry** (which slot, or a drop that writes nothing):

   a. ``first`` = 1: the installer allocates the unit's entry with ``BEGIN_INSTALL``. Answer
      ``OK`` (a new INSTALLING entry) or ``EXISTS`` with state ``INSTALLING`` (allocated by the
      host, or left by an earlier attempt of this unit that failed): written at the answer's
      slot. ``EXISTS`` in any other state (owner / valid / draining / invalid): ``drop_state``.
      ``FULL`` or ``OUT_OF_RANGE`` (outside the table directory's range): ``drop_full`` (no entry
      is made, so the unit's later packets drop by 2b).
   b. ``first`` = 0: ``LOOKUP``; written when the entry is ``INSTALLING``, else (no entry, or
      owner / valid / draining / invalid) ``drop_state``.
   c. A kv_id wider than the directory's ``kv_id_width`` issues no command and counts as the
      pool would answer: ``drop_full`` with ``first`` (out of range), ``drop_state`` without.

   So the entry is allocated either beforehand by whoever expects the unit (the host's
   ``BEGIN_INSTALL``; a ``first`` packet then finds it INSTALLING and writes) or by the unit's
   own ``first`` packet, which need not wait for the receiver; room is the sender's admission's
   business (MARS eq. 10): a unit that finds the pool full is dropped and counted.
3. **Written**: the records go to ``row_addr`` of the entry's slot, records ``row0 .. row0+n-1``:
   one DMA descriptor ``{slot_addr + row0 * row_bytes, n * row_bytes}``, cut into INCR bursts of
   at most ``max_burst`` beats that never cross 4 KB (:func:`spec.dma.plan_bursts`). A
   burst the memory answers SLVERR/DECERR writes nothing (the other bursts land); the packet
   then counts ``axi_err`` (else ``installed``), and the first error since reset/``clear`` keeps
   its code (``spec.dma.DmaStatus``: 4 SLVERR, 5 DECERR) and the failing burst's address.
4. **Commit**: a written ``last`` packet with no error commits the entry: ``COMMIT_OWNER``
   (INSTALLING -> OWNER) when its ``owner`` bit is set, else ``COMMIT_INSTALL`` (INSTALLING ->
   REPLICA_VALID); ``committed`` counts an OK answer -- in hardware only after the B response of
   its write, so every byte of the unit has landed. A unit with an AXI error in any packet is
   not committed: the error puts its kv_id in a set of failed units (``max_failed`` entries);
   its later packets are still written, its ``last`` packet does not commit and takes it out of
   the set (so a re-sent unit can commit). When the set is full, a further failed unit sets
   ``overflow``: then no unit commits until ``clear`` (conservative: never a commit of a unit that
   may have lost bytes).

``clear`` zeroes the counters, the error code/address, the failed set and ``overflow`` (write it
while no unit is in flight). Counters saturate at 2**32 - 1.
"""
from __future__ import annotations

import enum

from mcf_fpga.golden.header import pack_header, unpack_header
from mcf_fpga.golden.kvpool import KVPool
from mcf_fpga.spec.kvregion import KVRegion
from mcf_fpga.golden.kvstore import KVStore
from mcf_fpga.spec.dma import DmaParams, burst_resp, plan_bursts
from mcf_fpga.spec.kvinstall import HEADER_BYTES, RSVD_LSB, pack_install_header
from mcf_fpga.spec.kvpool import Response, State, Status
from mcf_fpga.spec.meta import DEFAULT_PARAMS, MetaFields, MetaParams, MetaOp

__all__ = ["INSTALL_HEADER_BYTES", "Outcome", "install_packet", "install_payload", "KVInstaller",
           "SLVERR", "DECERR"]

INSTALL_HEADER_BYTES = HEADER_BYTES     #: the install header (mcf_fpga/spec/kvinstall.py: its one definition)
SLVERR, DECERR = 4, 5            #: error codes kept (``spec.dma.DmaStatus`` values)
_AXI_SLVERR, _AXI_DECERR = 2, 3  #: AXI RESP values of an error range
_M32 = (1 << 32) - 1


class Outcome(enum.Enum):
    """What :meth:`KVInstaller.receive` did with a packet."""
    DROP_MALFORMED = "drop_malformed"
    DROP_STATE = "drop_state"
    DROP_FULL = "drop_full"        #: a ``first`` packet whose BEGIN_INSTALL answered FULL / OUT_OF_RANGE
    INSTALLED = "installed"        #: written, no error, not a committing last packet
    COMMITTED = "committed"        #: written, no error, last: the entry was committed
    NOT_COMMITTED = "not_committed"  #: written, no error, last, but the unit failed (or overflow) / commit refused
    AXI_ERR = "axi_err"            #: written with an AXI error


def install_packet(kv_id: int, row0: int, records: bytes, last: bool, *, row_bytes: int,
                   meta: MetaFields | None = None, params: MetaParams = DEFAULT_PARAMS,
                   first: bool = False, owner: bool = False) -> bytes:
    """A well-formed install packet: Meta header (``meta``'s other fields kept), install header
    (``last``, ``first``, ``owner``), records (``len(records)`` a multiple of ``row_bytes``)."""
    if not records or len(records) % row_bytes:
        raise ValueError(f"records must be a positive multiple of row_bytes={row_bytes}, got {len(records)}")
    n = len(records) // row_bytes
    layer_mask = (1 << params.layer_bits) - 1
    m = (meta or MetaFields()).replace(op=MetaOp.KV_REPLICA, kv_id=(kv_id & layer_mask, kv_id >> params.layer_bits),
                                       length=INSTALL_HEADER_BYTES + len(records))
    return pack_header(m, params) + pack_install_header(row0, n, last, first=first, owner=owner) + bytes(records)


def install_payload(store, slot: int, row0: int, n: int, last: bool, *, first: bool = False,
                    owner: bool = False) -> bytes:
    """Golden payload of the packet carrying records ``row0 .. row0+n-1`` of ``slot`` from a
    :class:`golden.kvstore.KVStore`: the header, then the records as DDR holds them."""
    return pack_install_header(row0, n, last, first=first, owner=owner) + store.read_records(slot, row0, n)


class KVInstaller:
    """Golden installer over a golden ``pool`` (its directory) and ``store`` (the region's bytes).

    Parameters
    ----------
    pool : golden.kvpool.KVPool
    store : golden.kvstore.KVStore
    max_payload : int
        Largest payload (``length``) accepted; longer packets are malformed.
    max_burst : int
        The install DMA's largest burst in beats.
    error_ranges : [(start, end, resp)]
        Addresses ``[start, end)`` the memory answers with AXI ``resp`` (2 SLVERR, 3 DECERR),
        as :class:`sim.AXI4Memory`'s ``error_ranges``.
    max_failed : int
        Entries of the failed-unit set (module docstring, rule 4).
    """

    def __init__(self, pool: KVPool, store: KVStore, *, max_payload: int, max_burst: int = 16,
                 error_ranges=(), max_failed: int = 4, params: MetaParams = DEFAULT_PARAMS):
        self.pool, self.store, self.region = pool, store, store.region
        self.max_payload, self.max_burst, self.max_failed = max_payload, max_burst, max_failed
        self.error_ranges = [(int(s), int(e), int(r)) for s, e, r in error_ranges]
        self.params = params
        self.clear()

    def clear(self):
        self.installed = self.committed = self.drop_state = self.drop_malformed = self.axi_err = 0
        self.drop_full = 0
        self.err_code, self.err_addr = 0, 0
        self.failed: list[int] = []
        self.overflow = False

    # ------------------------------------------------------------------ checks
    def parse(self, packet: bytes):
        """``(kv_id, row0, n, last, first, owner)`` of a well-formed packet, None when malformed
        (rule 1)."""
        hb, r = self.params.header_bytes, self.region
        if len(packet) < hb:
            return None
        meta = unpack_header(bytes(packet[:hb]), self.params)
        payload = packet[hb:]
        if int(meta.op) != MetaOp.KV_REPLICA or len(payload) != meta.length or meta.length > self.max_payload:
            return None
        if len(payload) < INSTALL_HEADER_BYTES:
            return None
        h = int.from_bytes(payload[:INSTALL_HEADER_BYTES], "little")
        row0, n, rsvd = h & 0xFFFF, (h >> 16) & 0xFFFF, h >> RSVD_LSB
        if rsvd or n == 0 or row0 + n > 2 * r.slot_rows or meta.length != INSTALL_HEADER_BYTES + n * r.row_bytes:
            return None
        kv_id = meta.kv_id[0] | (meta.kv_id[1] << self.params.layer_bits)
        return kv_id, row0, n, bool(h >> 32 & 1), bool(h >> 33 & 1), bool(h >> 34 & 1)

    # ------------------------------------------------------------------ one packet
    def receive(self, packet: bytes) -> Outcome:
        """Apply one packet (header + payload bytes, as the NIC delivers it)."""
        f = self.parse(packet)
        if f is None:
            self.drop_malformed = min(self.drop_malformed + 1, _M32)
            return Outcome.DROP_MALFORMED
        kv_id, row0, n, last, first, owner = f
        if kv_id >> self.pool.kv_id_width:          # no command: what the pool would answer
            e = Response(Status.OUT_OF_RANGE if first else Status.UNKNOWN)
        elif first:
            e = self.pool.begin_install(kv_id)
        else:
            e = self.pool.lookup(kv_id)
        if first and e.status in (Status.FULL, Status.OUT_OF_RANGE):
            self.drop_full = min(self.drop_full + 1, _M32)
            return Outcome.DROP_FULL
        if e.status not in (Status.OK, Status.EXISTS) or e.state != State.INSTALLING:
            self.drop_state = min(self.drop_state + 1, _M32)
            return Outcome.DROP_STATE
        r, hb = self.region, self.params.header_bytes
        records = packet[hb + INSTALL_HEADER_BYTES:]
        addr = r.slot_addr(e.slot) + row0 * r.row_bytes
        first_err = None
        dma = DmaParams(data_width=r.bus_bytes * 8, max_burst=self.max_burst)
        for baddr, beats in plan_bursts(dma, addr, n * r.row_bytes):
            nbytes = beats * r.bus_bytes
            resp = burst_resp(self.error_ranges, baddr, nbytes)
            if resp in (_AXI_SLVERR, _AXI_DECERR):
                if first_err is None:
                    first_err = (SLVERR if resp == _AXI_SLVERR else DECERR, baddr)
                continue
            off = baddr - r.base
            self.store.image[off:off + nbytes] = records[baddr - addr:baddr - addr + nbytes]
        if first_err is not None:
            self.axi_err = min(self.axi_err + 1, _M32)
            if not self.err_code:
                self.err_code, self.err_addr = first_err
            if last:
                if kv_id in self.failed:
                    self.failed.remove(kv_id)
            elif kv_id not in self.failed:
                if len(self.failed) < self.max_failed:
                    self.failed.append(kv_id)
                else:
                    self.overflow = True
            return Outcome.AXI_ERR
        self.installed = min(self.installed + 1, _M32)
        if not last:
            return Outcome.INSTALLED
        if kv_id in self.failed or self.overflow:
            if kv_id in self.failed:
                self.failed.remove(kv_id)
            return Outcome.NOT_COMMITTED
        commit = self.pool.commit_owner if owner else self.pool.commit_install
        if commit(kv_id).status == Status.OK:
            self.committed = min(self.committed + 1, _M32)
            return Outcome.COMMITTED
        return Outcome.NOT_COMMITTED

    def registers(self) -> dict:
        """The register values (``hdl.kvinstall.registers`` names), ``busy`` excluded."""
        return {"installed": self.installed, "committed": self.committed, "drop_state": self.drop_state,
                "drop_malformed": self.drop_malformed, "axi_err": self.axi_err,
                "err_addr_lo": self.err_addr & _M32, "err_addr_hi": self.err_addr >> 32,
                "err_code": self.err_code, "overflow": int(self.overflow), "drop_full": self.drop_full}
