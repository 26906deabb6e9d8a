"""What an ``mcf_fpga.sim.AXI4Memory`` answers, written from its documented contract (not from
its code), for the DMA readers' tests: a beat outside the memory is DECERR, one overlapping an
``error_ranges`` entry gets that entry's response, every other beat OKAY."""
from mcf_fpga.hdl.bus import Resp


def beat_resp(mem, a, bpb):
    """The response to a ``bpb``-byte beat at address ``a`` of ``mem``."""
    if a < mem.base or a + bpb > mem.base + mem.size:
        return Resp.DECERR
    for s, e, r in mem.error_ranges:
        if a < e and s < a + bpb:
            return r
    return Resp.OKAY
