"""What an ``mcf_fpga.sim.AXI4Memory`` answers, written from its documented contract (not from
its code), for the DMA readers' tests: a beat outside the memory is DECERR, one overlapping an
``error_ranges`` entry gets that entry's response, every other beat OKAY."""
from mcf_fpga.hdl.bus import Resp
from mcf_fpga.spec.dma import DmaStatus


def beat_resp(mem, a, bpb):
    """The response to a ``bpb``-byte beat at address ``a`` of ``mem``."""
    if a < mem.base or a + bpb > mem.base + mem.size:
        return Resp.DECERR
    for s, e, r in mem.error_ranges:
        if a < e and s < a + bpb:
            return r
    return Resp.OKAY


def expect_beat(mem, image, a, bpb):
    """(the bytes a reader delivers for the beat at ``a``, its failure ``(status, a)`` or None):
    the memory's ``image`` (bytes from ``mem.base``) where the beat is OKAY, zeros where not."""
    r = beat_resp(mem, a, bpb)
    if r == Resp.OKAY:
        return bytes(image[a - mem.base:a - mem.base + bpb]), None
    return bytes(bpb), (DmaStatus.SLVERR if r == Resp.SLVERR else DmaStatus.DECERR, a)
