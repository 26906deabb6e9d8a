"""A seeded random AXI4 trace shared by the memory tests (Python model and C++ twin)."""
import random

from mcf_fpga.hdl.bus import Burst, Resp

DW = 64
MEM = dict(size=4096, base=0x1000, latency=7, bytes_per_cycle=3, max_outstanding=3,
           error_ranges=[(0x1800, 0x1810, Resp.SLVERR)], ready_seed=11)


def make_trace(seed=5, n=24, dw=DW):
    """Commands (kind, addr, len, size, burst) and the W frames (one per write) for a
    ``dw``-bit bus."""
    bpb, top = dw // 8, (dw // 8).bit_length() - 1
    rng = random.Random(seed)
    cmds, frames = [], []
    for i in range(n):
        kind = rng.choice("RW")
        r = rng.random()
        size = top if rng.random() < 0.8 else rng.choice([0, 1, 2])
        ln = rng.randrange(0, 6)
        if r < 0.1 or i in (3, 8):
            addr = 0x1000 + 4096 - bpb * rng.randrange(1, 3)     # runs off the end: DECERR
            size, ln = top, rng.randrange(2, 6)
        elif r < 0.2:
            addr = 0x17F0 + bpb * rng.randrange(0, 2)            # touches the SLVERR range
        else:
            addr = 0x1000 + (rng.randrange(0, 3000) & ~((1 << size) - 1))
        kind = {3: "R", 8: "W"}.get(i, kind)
        burst = Burst.INCR if rng.random() < 0.9 else rng.choice([Burst.FIXED, Burst.WRAP])
        cmds.append((kind, addr, ln, size, int(burst)))
        if kind == "W":
            frames.append(bytes(rng.randrange(256) for _ in range(ln * bpb + rng.randrange(1, bpb + 1))))
    return cmds, frames


def initial_memory(seed=9):
    rng = random.Random(seed)
    return bytes(rng.randrange(256) for _ in range(MEM["size"]))
