"""DMA descriptors as hardware, golden and host agree on them: status codes, engine
parameters, the legality check and the burst split.

A descriptor is ``{addr, length}`` in bytes. It is legal when ``length > 0``, ``addr``
and ``length`` are multiples of the bus width in bytes, ``[addr, addr + length)``
lies inside the engine's window ``[window_base, window_base + window_size)``, and
``length`` is at most the engine's ``max_length`` (when it has one). An illegal
descriptor issues no bus transaction: it is answered in order on the status stream
with its code and its address.

A legal descriptor is cut into INCR bursts of at most ``max_burst`` beats that never
cross a 4 KB boundary (AXI4 A3.4.1): each burst is
``min(beats left, max_burst, beats to the next 4 KB boundary)`` (:func:`plan_bursts`;
the hardware's ``hdl.dma.common.BurstSplitter`` applies the same rule).
"""
import enum

__all__ = ["DmaStatus", "DmaParams", "check_descriptor", "burst_resp", "plan_bursts"]


class DmaStatus(enum.IntEnum):
    """Status codes (4 bits) on a DMA engine's status stream."""
    OK = 0
    ZERO_LENGTH = 1       #: refused: length is 0
    MISALIGNED = 2        #: refused: addr or length not a multiple of the bus width in bytes
    OUT_OF_WINDOW = 3     #: refused: [addr, addr+length) leaves the configured window
    SLVERR = 4            #: the slave answered SLVERR; addr = first failing beat (reads) / burst (writes)
    DECERR = 5            #: the interconnect answered DECERR; addr as for SLVERR
    LENGTH_MISMATCH = 6   #: writer: the data packet was shorter/longer than the descriptor
    TOO_LONG = 7          #: refused: length exceeds the engine's max_length (a ping-pong buffer, a tile)
    BAD_DEST = 8          #: refused (stream loader): the load's ``dest`` names no output (2 or 3)


class DmaParams:
    """Validated engine parameters (shared by reader, writer and loader).

    Parameters
    ----------
    addr_width : int
        Byte address width (40 on Zynq UltraScale+ HP ports).
    data_width : int
        Bus width in bits (power of two, 8..1024; 128 on KR260 HP ports).
    len_width : int
        Width of the descriptor length field in bytes.
    max_burst : int
        Largest burst in beats, 1..256 (AXI4: 256; Zynq HP ports: 16).
    max_outstanding : int
        Bursts in flight at once (AR issued, last R beat not yet received; AW issued,
        B not yet received).
    window_base, window_size : int
        The address window descriptors must stay inside (default: the whole space).
    max_length : int or None
        Longest descriptor in bytes (a multiple of the bus width); longer ones are refused
        with ``TOO_LONG``. None: no limit beyond ``len_width`` and the window.
    """

    def __init__(self, *, addr_width=40, data_width=128, len_width=32, max_burst=256,
                 max_outstanding=4, window_base=0, window_size=None, id_width=4, max_length=None):
        if data_width < 8 or data_width > 1024 or data_width & (data_width - 1):
            raise ValueError(f"data_width must be a power of two in 8..1024, got {data_width}")
        if not 12 <= addr_width <= 64:
            raise ValueError(f"addr_width must be in 12..64, got {addr_width}")
        if not 1 <= max_burst <= 256:
            raise ValueError(f"max_burst must be in 1..256 (AXI4 AxLEN), got {max_burst}")
        if not 1 <= max_outstanding <= 64:
            raise ValueError(f"max_outstanding must be in 1..64, got {max_outstanding}")
        bpb = data_width // 8
        if not (bpb).bit_length() <= len_width <= 40:
            raise ValueError(f"len_width must be in {bpb.bit_length()}..40, got {len_width}")
        if window_size is None:
            window_size = 2 ** addr_width - window_base
        if window_base < 0 or window_size <= 0 or window_base + window_size > 2 ** addr_width:
            raise ValueError(f"window [{window_base:#x}, +{window_size:#x}) must be non-empty and "
                             f"inside the {addr_width}-bit address space")
        self.addr_width, self.data_width, self.len_width = addr_width, data_width, len_width
        self.max_burst, self.max_outstanding, self.id_width = max_burst, max_outstanding, id_width
        if max_length is not None and (max_length < bpb or max_length % bpb
                                       or max_length >= 2 ** len_width):
            raise ValueError(f"max_length must be a positive multiple of {bpb} bytes (the bus "
                             f"width) below 2**len_width, got {max_length}")
        self.window_base, self.window_size = window_base, window_size
        self.max_length = max_length
        self.bytes_per_beat = bpb
        self.size_log2 = bpb.bit_length() - 1


def check_descriptor(p: DmaParams, addr: int, length: int) -> DmaStatus:
    """Python reference of the descriptor check (the hardware applies the same order)."""
    if length == 0:
        return DmaStatus.ZERO_LENGTH
    if addr % p.bytes_per_beat or length % p.bytes_per_beat:
        return DmaStatus.MISALIGNED
    if addr < p.window_base or addr + length > p.window_base + p.window_size:
        return DmaStatus.OUT_OF_WINDOW
    if p.max_length is not None and length > p.max_length:
        return DmaStatus.TOO_LONG
    return DmaStatus.OK


def burst_resp(error_ranges, addr: int, nbytes: int) -> int:
    """The response a burst over ``[addr, addr + nbytes)`` gets from a memory that answers each
    ``(start, end, resp)`` of ``error_ranges`` with ``resp`` (``sim.AXI4Memory``'s
    ``error_ranges``): the worst one it overlaps, 0 (OKAY) if none. The golden models' AXI error
    rule."""
    worst = 0
    for s, e, resp in error_ranges:
        if addr < e and s < addr + nbytes:
            worst = max(worst, int(resp))
    return worst


def plan_bursts(p: DmaParams, addr: int, length: int):
    """The bursts ``[(addr, beats), ...]`` a legal descriptor is split into."""
    out = []
    rem = length // p.bytes_per_beat
    while rem:
        to4k = (4096 - (addr & 0xFFF)) // p.bytes_per_beat
        nb = min(rem, p.max_burst, to4k)
        out.append((addr, nb))
        addr += nb * p.bytes_per_beat
        rem -= nb
    return out
