#!/usr/bin/env python3
"""Link efficiency of ReliableLink (Amaranth simulator) beside the golden model.

For each packet size, A streams N packets to B over a 64-bit link (full wire bandwidth,
latency 8 cycles; the node side offers a beat every cycle and is never back-pressured),
on a clean link and with 5 % of data frames dropped (mean of 3 seeds; the wire model is store-and-forward:
a frame is replayed into the receiver after its last beat left the sender, plus the
latency; golden uses the same model). Two figures per run:
* sustained: packet bytes per wire byte slot between the first and the last delivery
  (steady-state throughput; (N-1) packets over that span);
* total: packet bytes / (cycles from start to last delivery x 8), which also pays the
  store-and-forward fill (the packet is buffered whole before it is framed, and the frame
  whole before its CRC is checked and it is delivered).
"ideal" is packet / frame size: header, padding and FCS overhead only. The golden model
(golden.link.simulate) runs the same workload. The last line: hardware sustained
efficiency for 1024-byte packets on the clean link.
"""
import random
import time


from mcf_fpga.golden.link import LinkModel, simulate  # noqa: E402
from mcf_fpga.spec.link import frame_bytes  # noqa: E402
from mcf_fpga.hdl.nic.link import LinkParams  # noqa: E402
from mcf_fpga.sim.link_bench import LinkBench  # noqa: E402

W, LAT, N = 64, 8, 24
SEEDS = (1, 2, 3)
B = W // 8


def sustained(size, at):
    return size * (len(at) - 1) / ((at[-1] - at[0]) * B)


def run(size, p_drop, seed=1):
    rng = random.Random(seed)
    packets = [rng.randbytes(size) for _ in range(N)]
    window = 8
    timeout = window * frame_bytes(size) // B + 4 * LAT + 64
    p = LinkParams(data_width=W, window=window, max_packet=max(size, 64), timeout=timeout)

    def wires():
        return (LinkModel(latency=LAT, bytes_per_cycle=B, p_drop=p_drop, seed=seed, store_and_forward=True),
                LinkModel(latency=LAT, bytes_per_cycle=B, seed=seed + 1, store_and_forward=True))
    bench = LinkBench(p, (packets, []), wires(), seed=seed).run(max_cycles=200_000, settle=1)
    assert bench.delivered[1] == packets, "bench: delivery mismatch"
    g = simulate((packets, []), window=window, timeout=timeout, max_packet=p.max_packet, links=wires())
    assert g.delivered[1] == packets
    at_hw, at_g = bench.delivered_at[1], g.delivered_at[1]
    return (sustained(size, at_hw), size * N / ((at_hw[-1] + 1) * B),
            sustained(size, at_g), size * N / ((at_g[-1] + 1) * B),
            bench.counters[0]["tx_retransmits"])


def main():
    t0 = time.time()
    print(f"{'packet':>7} {'drop':>5} {'ideal':>6} | {'hw sust':>7} {'hw total':>8} | "
          f"{'gold sust':>9} {'gold total':>10} | {'hw retx':>7}")
    last = None
    for size in (64, 256, 1024):
        ideal = size / frame_bytes(size)
        for p_drop in (0.0, 0.05):
            runs = [run(size, p_drop, seed) for seed in (SEEDS if p_drop else SEEDS[:1])]
            hs, ht, gs, gt, retx = (sum(r[k] for r in runs) / len(runs) for k in range(5))
            print(f"{size:7d} {p_drop:5.2f} {ideal:6.3f} | {hs:7.3f} {ht:8.3f} | {gs:9.3f} {gt:10.3f} | {retx:7.1f}")
            if size == 1024 and p_drop == 0.0:
                last = (hs, ideal)
    print(f"({time.time() - t0:.0f} s wall)")
    print(f"link efficiency, 64-bit, 1024-byte packets, clean: {last[0]:.3f} of wire bandwidth "
          f"(ideal {last[1]:.3f})")


if __name__ == "__main__":
    main()
