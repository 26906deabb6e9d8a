"""The KV install packet: the header both the sender (engine KVS) and the receiving installer use.

A KV unit (one slot's K and V row records, :class:`spec.kvregion.KVRegion`) travels as one or
more packets ``Meta(op = KV_REPLICA, kv_id = the unit, length = 8 + n * row_bytes)`` whose
payload is

* one 8-byte **install header**, little-endian (first field at bit 0):

  ====  ========  =====================================================================
  bits  field     meaning
  ====  ========  =====================================================================
  0-15  ``row0``  first record index within the slot's record array: a slot holds
                  ``2 * slot_rows`` records, K rows ``0 .. slot_rows-1`` then V rows,
                  record index ``sel * slot_rows + row`` (:meth:`KVRegion.record_addr`)
  16-31 ``n``     records in the packet (>= 1)
  32    ``last``  this packet completes the unit
  33    ``first`` this packet starts the unit: the receiver allocates the entry
                  (``BEGIN_INSTALL``) instead of expecting it (:mod:`golden.kvinstall`)
  34    ``owner`` the unit becomes an ``OWNER`` entry when committed (``COMMIT_OWNER``;
                  read on the ``last`` packet) instead of a replica (``COMMIT_INSTALL``)
  35-63           zero (reserved: nonzero = malformed)
  ====  ========  =====================================================================

* then the ``n`` records ``row0 .. row0+n-1`` exactly as they lie in DDR (``row_bytes`` each,
  :meth:`golden.kvstore.KVStore.read_records`).

K row r and V row r of a slot are not adjacent: a packet carries one contiguous run of records,
so a unit is (at least) one run of K records and one of V records.

This module is the one definition of the header: its fields and their bits, packed by
:func:`pack_install_header` / :func:`unpack_install_header`; the hardware's layout is
``hdl.kvinstall_header.install_header_layout``, golden's payload ``golden.kvinstall.install_payload``.
"""
from typing import NamedTuple

__all__ = ["HEADER_BYTES", "ROW0_BITS", "N_BITS", "RSVD_LSB", "InstallHeader", "pack_install_header",
           "unpack_install_header", "install_length"]

#: bytes of the install header at the start of the payload
HEADER_BYTES = 8
ROW0_BITS = N_BITS = 16


RSVD_LSB = 35     #: the first reserved bit


class InstallHeader(NamedTuple):
    """The fields of an install header (:func:`unpack_install_header`)."""
    row0: int
    n: int
    last: bool
    first: bool = False
    owner: bool = False


def pack_install_header(row0: int, n: int, last: bool, rsvd: int = 0, *, first: bool = False,
                        owner: bool = False) -> bytes:
    """The 8 header bytes (little-endian) of a packet of records ``row0 .. row0+n-1``. ``rsvd``
    (bits ORed in, 0 by default) and ``n = 0`` exist for malformed-packet tests only."""
    if not 0 <= row0 < 2 ** ROW0_BITS:
        raise ValueError(f"row0={row0} does not fit the {ROW0_BITS}-bit field")
    if not 0 <= n < 2 ** N_BITS:
        raise ValueError(f"n={n} does not fit the {N_BITS}-bit field")
    x = row0 | n << 16 | int(bool(last)) << 32 | int(bool(first)) << 33 | int(bool(owner)) << 34
    return (x | rsvd).to_bytes(HEADER_BYTES, "little")


def unpack_install_header(header: bytes) -> InstallHeader:
    """The :class:`InstallHeader` ``(row0, n, last, first, owner)`` of 8 header bytes; raises on
    nonzero reserved bits or ``n = 0``."""
    if len(header) != HEADER_BYTES:
        raise ValueError(f"the install header is {HEADER_BYTES} bytes, got {len(header)}")
    x = int.from_bytes(header, "little")
    if x >> RSVD_LSB:
        raise ValueError(f"reserved header bits (bits {RSVD_LSB}..63) set: {x:#018x}")
    h = InstallHeader(x & 0xFFFF, (x >> 16) & 0xFFFF, bool(x >> 32 & 1), bool(x >> 33 & 1), bool(x >> 34 & 1))
    if h.n == 0:
        raise ValueError("install header with n = 0")
    return h


def install_length(region, n: int) -> int:
    """The Meta ``length`` of a packet of ``n`` records: header + records."""
    return HEADER_BYTES + n * region.row_bytes
