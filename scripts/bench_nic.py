#!/usr/bin/env python3
"""NIC benchmark on the Verilator backend (one mesh node: local port + 4 network ports).

1. Sustained throughput with every output port busy: frames arriving on net2 multicast to
   net1, net3, net4 and the local port (3 ports + local) while the local node sends to net2.
   For each output port: beats/cycle = (beats of frames 2..N) / (cycles between the end of
   frame 1 and the end of frame N) -- 1.0 means no idle cycle, also between packets.
   Beside it, the same with all five inputs multicasting to four outputs each (contention:
   outputs are shared, so this measures allocation efficiency, not the datapath limit).
2. Reduction-engine latency for N = 4, 8, 16 contributions of d + 2 = 18 int64 words: online-
   softmax partials (SOFTMAX_MERGE, merge pool: ascending-src fold after the last one) and
   partial words summed in 64-bit lanes (PARTIAL_STATE/SUM, reduce pool: accumulated as they
   arrive): cycles from the moment the last contribution is offered to the NIC until the
   result's last beat has left m_axis; and the share of it spent in the engine (analytic).

The LAST line prints the minimum per-port beats/cycle of scenario 1.
"""
import argparse
import random
import time


from mcf_fpga.golden.nic import NicModel, encode_partial, make_frame  # noqa: E402
from mcf_fpga.spec.topology import RouteEntry  # noqa: E402
from mcf_fpga.spec.meta import Collective, MetaFields, MetaOp, ReduceOp, Stage  # noqa: E402
from mcf_fpga.spec.nic import NicConfig, Reg, src_allow_reg  # noqa: E402
from mcf_fpga.hdl.nic.nic import Nic  # noqa: E402

CFG = NicConfig(n_net=4, n_routes=32, max_payload=512, reduce_contexts=4, merge_contexts=2)   # = tests/hdl/nic/vl_nic.VCFG (shared build)
IN = ["s_axis"] + [f"s_axis_net{p}" for p in range(1, 5)]
OUT = ["m_axis"] + [f"m_axis_net{p}" for p in range(1, 5)]


def configure(model, table):
    model.reset()
    for addr, val in [(Reg.NODE_ID, 0), (Reg.NUM_NODES, 16), (Reg.MEMBERS, 0xFFFF)]:
        model.axil_write(addr, val)
    for p in range(CFG.n_ports):            # any src on any port (golden NicModel's default)
        model.axil_write(src_allow_reg(p), 0xFFFF)
    for rid, e in table.items():
        model.axil_write(Reg.ROUTE_INDEX, rid)
        model.axil_write(Reg.ROUTE_DATA, e.encode())
    model.axil_write(Reg.BANK_FLIP, 1)


def beats(frame):
    return -(-len(frame) // CFG.beat_bytes)


def throughput(model, flows, n_frames, payload):
    """flows: [(in_port, route_id)]; returns {out_port: beats/cycle}."""
    rng = random.Random(1)
    for i, (p, rid) in enumerate(flows):
        for k in range(n_frames):
            meta = MetaFields(op=MetaOp.KV_REPLICA, src=1, dst=2, route_id=rid, kv_id=(0, k),
                              collective=Collective.MULTICAST, length=payload)
            model.push(IN[p], make_frame(meta, rng.randbytes(payload), CFG))
    first, last, count, nbeats = {}, {}, {}, {}
    expected = {}
    table_masks = {rid: m for rid, m in ROUTES.items()}
    for p, rid in flows:
        for o in range(CFG.n_ports):
            if (table_masks[rid].mask >> o) & 1:
                expected[o] = expected.get(o, 0) + n_frames
    cycle = 0
    while any(count.get(o, 0) < n for o, n in expected.items()):
        model.step(1)
        cycle += 1
        for o in expected:
            for f in model.pull_all(OUT[o]):
                count[o] = count.get(o, 0) + 1
                if count[o] == 1:
                    first[o] = cycle
                    nbeats[o] = 0
                else:
                    nbeats[o] += beats(f)
                last[o] = cycle
        if cycle > 50 * n_frames * 80:
            raise RuntimeError("throughput run did not finish (hang?)")
    return {o: nbeats[o] / (last[o] - first[o]) for o in expected}


ROUTES = {
    0: RouteEntry(0b11011),   # from net2: net1, net3, net4 + local
    1: RouteEntry(0b00100),   # from local: net2
    2: RouteEntry(0b01111),   # contention scenario: four outputs each
    3: RouteEntry(0b10111),
    4: RouteEntry(0b11011),
    5: RouteEntry(0b11101),
    6: RouteEntry(0b11110),
}


def reduction_latency(model, n, rop=ReduceOp.SOFTMAX_MERGE, d=16):
    rng = random.Random(n)
    table = {r: RouteEntry(1, n) for r in range(n)}
    configure(model, table)
    frames = []
    for s in range(n):
        payload = encode_partial(rng.randrange(-4000, 4000), rng.randrange(1, 2 ** 30),
                                 [rng.randrange(-2 ** 30, 2 ** 30) for _ in range(d)])
        frames.append(make_frame(MetaFields(op=MetaOp.PARTIAL_STATE, reduce_op=rop,
                                            stage=Stage.DECODE, src=s, dst=3, route_id=s,
                                            length=len(payload)), payload, CFG))
    golden = NicModel(CFG, node_id=0, num_nodes=16)
    golden.load_table(table)
    want = [o for i, f in enumerate(frames) for _, o in golden.receive(1 + i % 4, f)]
    for i, f in enumerate(frames[:-1]):
        model.push(IN[1 + i % 4], f)
    model.step(40 * n + 400)                       # everything but the last is in the engine
    assert model.pull("m_axis") is None
    model.push(IN[1], frames[-1])
    t = 0
    while (got := model.pull("m_axis")) is None:
        model.step(1)
        t += 1
        if t > 100_000:
            raise RuntimeError("no reduction result (hang?)")
    assert got == want[0], "reduction result differs from golden"
    words = 2 + d
    hb = CFG.header_beats
    if rop == ReduceOp.SOFTMAX_MERGE:    # mcf_fpga/hdl/nic/reduce.py: close, scales, header, m, fold per word
        engine = 1 + (n + 1) + hb + 1 + (n + 2) * (words - 1)
    else:                                # close, header, one accumulator word per cycle
        engine = 1 + hb + words
    return t, engine, beats(frames[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=200, help="frames per flow (default 200)")
    ap.add_argument("--payload", type=int, default=512, help="payload bytes per frame (default 512)")
    args = ap.parse_args()
    from mcf_fpga.sim.verilator import build
    t0 = time.time()
    model = build(Nic(CFG))
    print(f"Verilator build/load: {time.time() - t0:.1f} s")

    configure(model, ROUTES)
    hb = CFG.header_beats
    ideal = 1.0
    busy = throughput(model, [(2, 0), (0, 1)], args.frames, args.payload)
    print(f"scenario 1: net2 -> net1+net3+net4+local multicast, local -> net2; "
          f"{args.frames} frames x {args.payload} B ({args.payload // 8 + hb} beats incl. {hb} header)")
    for o in sorted(busy):
        print(f"  {OUT[o]:12s} {busy[o]:.4f} beats/cycle (ideal {ideal:.1f})")
    configure(model, ROUTES)
    cont = throughput(model, [(0, 2), (1, 3), (2, 4), (3, 5), (4, 6)], args.frames // 4, args.payload)
    print("scenario 2 (contention, all 5 inputs multicast to 4 outputs each):")
    for o in sorted(cont):
        print(f"  {OUT[o]:12s} {cont[o]:.4f} beats/cycle")

    for rop, what in ((ReduceOp.SOFTMAX_MERGE, "softmax merge"), (ReduceOp.SUM, "64-bit sum")):
        print(f"reduction latency ({what}, d=16, last contribution offered -> result's last beat out):")
        for n in (4, 8, 16):
            t, engine, in_beats = reduction_latency(model, n, rop)
            print(f"  N={n:2d}: {t} cycles (ingress store-and-forward of the last {in_beats}-beat "
                  f"contribution + engine ~{engine} + egress)")
    print(f"min per-port beats/cycle (all ports busy, multicast 3 ports + local): {min(busy.values()):.4f}")


if __name__ == "__main__":
    main()
