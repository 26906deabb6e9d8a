"""Testbench helpers for the NIC: configure over AXI-Lite, drive every port with random
valid gaps, accept on every port with random back-pressure, and compare with mcf_fpga/golden/nic.py."""
from __future__ import annotations

import random
from collections import defaultdict

from mcf_fpga.golden.nic import NicModel
from mcf_fpga.spec.topology import RouteEntry
from mcf_fpga.spec.nic import ErrorCause, NicConfig, Reg, src_allow_reg
from mcf_fpga.hdl.nic.nic import Nic
from mcf_fpga.sim.kit import AXI4LiteMaster, StreamSink, StreamSource, packets_to_beats, plain, run_simulation

DW = 64


def register_ops(model: NicModel):
    """AXI-Lite writes (addr, data) that give the hardware the model's registers (SRC_ALLOW_p and
    REDUCE_TIMEOUT included: the hardware's network ports accept nothing until written)."""
    ops = [(Reg.NODE_ID, model.node_id), (Reg.NUM_NODES, model.num_nodes), (Reg.MEMBERS, model.members),
           (Reg.NUM_LAYERS, model.num_layers), (Reg.NUM_BLOCKS, model.num_blocks),
           (Reg.REDUCE_TIMEOUT, model.reduce_timeout)]
    return ops + [(src_allow_reg(p), mask) for p, mask in enumerate(model.src_allow)]


def configure_ops(model: NicModel, table: dict):
    """``register_ops`` of the model, then ``table`` into the shadow bank followed by a flip
    (as NicModel.load_table)."""
    ops = register_ops(model)
    ops += route_ops(table)
    ops.append((Reg.BANK_FLIP, 1))
    return ops


def route_ops(table: dict):
    ops = []
    for rid, e in sorted(table.items()):
        ops += [(Reg.ROUTE_INDEX, rid), (Reg.ROUTE_DATA, e.encode())]
    return ops


class NicBench:
    """One simulation run. ``frames[p]``: list of frames (bytes) into port p, sent in order.
    ``extra`` async callables run after configuration (e.g. a bank flip mid-traffic)."""

    def __init__(self, cfg: NicConfig, model: NicModel, table: dict, frames: dict, *, seed=0,
                 valid_prob=1.0, ready_prob=1.0, inval_ready_prob=1.0):
        self.cfg, self.model, self.table, self.frames = cfg, model, table, frames
        self.rng = random.Random(seed)
        self.dut = Nic(cfg)
        self.seed, self.valid_prob, self.ready_prob = seed, valid_prob, ready_prob
        self.inval_ready_prob = inval_ready_prob
        self.out = {}
        self.inval = []
        self.counters = {}

    def _prob(self, p, which):
        v = self.valid_prob if which == "v" else self.ready_prob
        return v[p] if isinstance(v, (list, tuple)) else v

    def run(self, expect_out: dict, expect_inval: int = 0, mid_ops=(), mid_after_beats=0,
            max_cycles=100_000, settle=40):
        dut, cfg = self.dut, self.cfg
        n = cfg.n_ports
        axi = AXI4LiteMaster(dut.s_axi)
        sinks = [StreamSink(dut.out_port(p), seed=self.seed * 31 + p, ready_prob=self._prob(p, "r"))
                 for p in range(n)]
        inval_sink = StreamSink(dut.m_axis_inval, seed=self.seed * 31 + 99, ready_prob=self.inval_ready_prob)
        state = {"configured": False, "sent": 0}

        async def config(ctx):
            for addr, val in configure_ops(self.model, self.table):
                assert (await axi.write(ctx, addr, val)).name == "OKAY"
            state["configured"] = True
            if mid_ops:
                while state["sent"] < mid_after_beats:
                    await ctx.tick()
                for addr, val in mid_ops:
                    assert (await axi.write(ctx, addr, val)).name == "OKAY"
            # wait until every expected output arrived, then a little more to catch extras
            def done():
                return (all(sum(1 for b in sinks[p].beats if b["last"]) >= len(expect_out.get(p, []))
                            for p in range(n)) and len(inval_sink.beats) >= expect_inval
                        and state.get("tx_done", 0) == n)
            while not done():
                await ctx.tick()
            await ctx.tick().repeat(settle)
            for c in ErrorCause:
                v, r = await axi.read(ctx, Reg.ERR_BASE + 4 * c)
                self.counters[c] = v
            v, _ = await axi.read(ctx, Reg.RX_FRAMES)
            self.counters["rx_frames"] = v
            v, _ = await axi.read(ctx, Reg.ERR_FLAGS)
            self.counters["err_flags"] = v
            v, _ = await axi.read(ctx, Reg.BANK)
            self.counters["bank"] = v

        def sender(p):
            src = StreamSource(dut.in_port(p), seed=self.seed * 17 + p, valid_prob=self._prob(p, "v"))

            async def tx(ctx):
                while not state["configured"]:
                    await ctx.tick()
                beats = packets_to_beats(self.frames.get(p, []), DW) if self.frames.get(p) else []
                for b in beats:
                    await src.send(ctx, [b])
                    state["sent"] += 1
                state["tx_done"] = state.get("tx_done", 0) + 1
            return tx

        async def rx_all(ctx):
            while True:
                for s in sinks + [inval_sink]:
                    ctx.set(s.stream.ready, s.rng.random() < s.ready_prob)
                _, _, *vals = await ctx.tick().sample(
                    *[x for s in sinks + [inval_sink] for x in (s.stream.valid, s.stream.ready, s.stream.payload)])
                for i, s in enumerate(sinks + [inval_sink]):
                    v, r, pl = vals[3 * i:3 * i + 3]
                    if v and r:
                        s.beats.append(plain(pl))

        run_simulation(dut, [config] + [sender(p) for p in range(n)], background=[rx_all],
                       max_cycles=max_cycles, vcd=False)
        from mcf_fpga.sim.kit import beats_to_packets
        self.out = {p: beats_to_packets(sinks[p].beats, DW) for p in range(n)}
        self.inval = list(inval_sink.beats)
        return self


def golden_outputs(model: NicModel, frames: dict):
    """Run the golden model port by port; returns ({out_port: [(origin_port, frame)]}, model)."""
    outs = defaultdict(list)
    for p in sorted(frames):
        for f in frames[p]:
            for op, fr in model.receive(p, f):
                outs[op].append((p, fr))
    return outs


def check_interleaving(expected, got, port):
    """``got`` (frames at one output) must be an interleaving of the per-origin lists in
    ``expected`` ([(origin, frame)]): every frame exactly once, each origin's order kept."""
    per_origin = defaultdict(list)
    where = {}
    for origin, f in expected:
        per_origin[origin].append(f)
        assert f not in where, f"test bug: frame not unique at port {port}"
        where[f] = origin
    seen = defaultdict(list)
    for i, f in enumerate(got):
        assert f in where, f"port {port}: output {i} ({f[:24].hex()}...) was not expected (invalid or corrupted)"
        seen[where[f]].append(f)
    for origin, fl in per_origin.items():
        assert seen[origin] == fl, (f"port {port}: frames from port {origin}: expected {len(fl)} in order, "
                                    f"got {len(seen[origin])} (lost, duplicated or reordered)")
    assert len(got) == len(expected), f"port {port}: expected {len(expected)} frames, got {len(got)}"
