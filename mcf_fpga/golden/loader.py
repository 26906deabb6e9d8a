"""Golden model of the stream loader (the hardware twin is
:class:`hdl.dma.loader.StreamLoader`): load descriptors (and ``put`` words) against a memory
image, the units each output receives and the status of every descriptor.

Timing-free. The image rule, refusal order and unit widths are the hardware's own definitions
(:mod:`hdl.dma.loader`: :func:`check_load`, :func:`unit_stride_bytes`, :func:`load_bytes`);
bus beats that answer an error read as 0, as :class:`sim.AXI4Memory` answers them.
"""
from dataclasses import dataclass, field

from mcf_fpga.spec.dma import DmaParams, DmaStatus
from mcf_fpga.spec.loader import Dest, check_load, load_bytes, unit_bits, unit_stride_bytes

__all__ = ["Result", "run"]


@dataclass
class Result:
    w: list = field(default_factory=list)        #: ``(data, last)`` per unit on ``w``
    sp: list = field(default_factory=list)       #: ``data`` per unit on ``sp`` (``sp_pairs``: a tuple of a beat's words)
    status: list = field(default_factory=list)   #: ``(code, addr)`` per descriptor, in order


def run(memory, base: int, descs, *, w_bits: int, data_width: int, addr_width: int = 40,
        len_width: int = 32, window_base: int = 0, window_size=None, max_length=None,
        bad_beats=frozenset(), sp_pairs: bool = False) -> Result:
    """Serve ``descs`` (``[(dest, addr, count), ...]``) in order; an entry ``("put", word)`` is
    a word taken on ``put``: one ``sp`` unit in its place, no status.

    ``memory``: ``bytes`` at ``[base, base + len)`` (a beat touching bytes outside answers
    DECERR), or a ``dict`` byte address -> byte (missing bytes read 0, never DECERR).
    ``bad_beats``: byte addresses of bus beats that answer SLVERR. A load with erroring beats
    still delivers every unit; its status is the first failing beat's code and address.
    ``sp_pairs``: ``sp`` beats are tuples, an SP load's words two by two (an odd count's last
    alone), a put word alone.
    """
    if not isinstance(w_bits, int) or w_bits <= 0 or w_bits % 8:
        raise ValueError(f"w_bits must be a positive multiple of 8 (pn*pk*4), got {w_bits!r}")
    p = DmaParams(addr_width=addr_width, data_width=data_width, len_width=len_width,
                  window_base=window_base, window_size=window_size, max_length=max_length)
    bpb = p.bytes_per_beat
    out = Result()

    def beat(a):
        if a in bad_beats:
            return DmaStatus.SLVERR, bytes(bpb)
        if isinstance(memory, dict):
            return DmaStatus.OK, bytes(memory.get(a + i, 0) for i in range(bpb))
        if a < base or a + bpb > base + len(memory):
            return DmaStatus.DECERR, bytes(bpb)
        return DmaStatus.OK, bytes(memory[a - base:a - base + bpb])

    for d in descs:
        if d[0] == "put":
            out.sp.append((d[1] & 0xFFFFFFFF,) if sp_pairs else d[1] & 0xFFFFFFFF)
            continue
        dest, addr, count = d
        code = check_load(p, dest, addr, count, w_bits)
        if code != DmaStatus.OK:
            out.status.append((int(code), addr))
            continue
        bits = unit_bits(dest, w_bits)
        img, fail = bytearray(), None
        for a in range(addr, addr + load_bytes(count, bits, data_width), bpb):
            r, b = beat(a)
            img += b
            if r != DmaStatus.OK and fail is None:
                fail = (int(r), a)
        stride, nbytes = unit_stride_bytes(bits, data_width), bits // 8
        units = [int.from_bytes(img[i * stride:i * stride + nbytes], "little") for i in range(count)]
        if dest == Dest.W:
            out.w += [(u, int(i == count - 1)) for i, u in enumerate(units)]
        elif sp_pairs:
            out.sp += [tuple(units[i:i + 2]) for i in range(0, count, 2)]
        else:
            out.sp += units
        out.status.append(fail or (int(DmaStatus.OK), addr))
    return out
