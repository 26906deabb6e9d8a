"""Async Amaranth testbench kit: stream source/sink, scoreboard, AXI4-Lite master,
stream-contract checker and ``run_simulation`` (VCD on failure, path in the message).

Typical use (see docs/harness.md)::

    src = StreamSource(dut.s_axis, seed=1, valid_prob=0.7)
    snk = StreamSink(dut.m_axis, seed=2, ready_prob=0.5)
    async def tb(ctx):
        await src.send(ctx, packets_to_beats(pkts, 64))
    async def rx(ctx):
        got = await snk.collect_packets(ctx, len(pkts), data_width=64)
        Scoreboard(pkts).check(got)
    run_simulation(dut, [tb, rx])            # contract checkers on every output stream

Randomness comes only from the seeds, so a failing run repeats exactly.
"""
import itertools
import os
import random
import re
import tempfile

from amaranth.hdl import Value
from amaranth.lib import data, wiring
from amaranth.sim import Simulator

from mcf_fpga.hdl.bus import Resp
from .reused_simulator import reused_simulator

__all__ = ["StreamSource", "StreamSink", "Scoreboard", "AXI4LiteMaster", "stream_checker",
           "output_streams", "run_simulation", "packets_to_beats", "beats_to_packets",
           "plain", "comb_outputs"]


def plain(value):
    """Sampled simulator value -> int, or dict of field -> plain for struct payloads."""
    if isinstance(value, data.Const):
        if isinstance(value.shape(), data.StructLayout):
            return {name: plain(value[name]) for name, _ in value.shape()}
        return int(value.as_value().value)
    return int(value)


def _set_payload(ctx, payload, beat):
    if isinstance(beat, dict):
        for k, v in beat.items():
            ctx.set(payload[k], v)
    else:
        ctx.set(payload, beat)


# ---------------------------------------------------------------- packets
def packets_to_beats(packets, data_width: int, users=None):
    """Split byte-string packets into AXI-Stream beats ``{"data","keep","last"[,"user"]}``.
    The last beat's ``keep`` is contiguous from byte 0. ``users``: one TUSER value per packet."""
    nb = data_width // 8
    beats = []
    for i, pkt in enumerate(packets):
        if not pkt:
            raise ValueError(f"packet {i} is empty (AXI-Stream packets carry at least one byte)")
        chunks = [pkt[o:o + nb] for o in range(0, len(pkt), nb)]
        for j, c in enumerate(chunks):
            beat = {"data": int.from_bytes(c, "little"), "keep": (1 << len(c)) - 1,
                    "last": int(j == len(chunks) - 1)}
            if users is not None:
                beat["user"] = users[i]
            beats.append(beat)
    return beats


def beats_to_packets(beats, data_width: int, with_user: bool = False):
    """Join beats into packets (bytes whose ``keep`` bit is set, in lane order); with
    ``with_user`` each packet is ``(bytes, user_of_first_beat)``."""
    nb = data_width // 8
    out, cur, user = [], bytearray(), None
    for b in beats:
        if user is None:
            user = b.get("user", 0)
        d = b["data"].to_bytes(nb, "little")
        cur += bytes(d[k] for k in range(nb) if (b["keep"] >> k) & 1)
        if b["last"]:
            out.append((bytes(cur), user) if with_user else bytes(cur))
            cur, user = bytearray(), None
    return out


# ---------------------------------------------------------------- stream source / sink
class StreamSource:
    """Drives a ``lib.stream`` interface (the DUT's sink) with seeded random valid gaps:
    before each beat, every cycle is idle with probability ``1 - valid_prob``. Once valid
    is raised it is held with a stable payload until the transfer (stream contract)."""

    def __init__(self, stream, *, seed=0, valid_prob: float = 1.0):
        if not 0 < valid_prob <= 1:
            raise ValueError(f"valid_prob must be in (0, 1], got {valid_prob}")
        self.stream, self.valid_prob, self.rng = stream, valid_prob, random.Random(seed)

    async def send(self, ctx, beats):
        s = self.stream
        for beat in beats:
            while self.rng.random() >= self.valid_prob:
                ctx.set(s.valid, 0)
                await ctx.tick()
            _set_payload(ctx, s.payload, beat)
            ctx.set(s.valid, 1)
            await ctx.tick().until(s.ready)
        ctx.set(s.valid, 0)


class StreamSink:
    """Accepts beats from a ``lib.stream`` interface (the DUT's source); each cycle
    ``ready`` is high with probability ``ready_prob`` (seeded)."""

    def __init__(self, stream, *, seed=0, ready_prob: float = 1.0):
        if not 0 < ready_prob <= 1:
            raise ValueError(f"ready_prob must be in (0, 1], got {ready_prob}")
        self.stream, self.ready_prob, self.rng = stream, ready_prob, random.Random(seed)
        self.beats = []

    async def _one_cycle(self, ctx):
        s = self.stream
        ctx.set(s.ready, self.rng.random() < self.ready_prob)
        _, _, v, r, p = await ctx.tick().sample(s.valid, s.ready, s.payload)
        if v and r:
            self.beats.append(plain(p))
            return True
        return False

    async def collect(self, ctx, n_beats: int):
        """Receive ``n_beats`` beats; returns them (as ints or field dicts)."""
        start = len(self.beats)
        while len(self.beats) - start < n_beats:
            await self._one_cycle(ctx)
        ctx.set(self.stream.ready, 0)
        return self.beats[start:]

    async def collect_packets(self, ctx, n_packets: int, data_width: int, with_user=False):
        """Receive beats until ``n_packets`` packets (``last``) have arrived."""
        start, n = len(self.beats), 0
        while n < n_packets:
            if await self._one_cycle(ctx) and self.beats[-1]["last"]:
                n += 1
        ctx.set(self.stream.ready, 0)
        return beats_to_packets(self.beats[start:], data_width, with_user)

    async def run(self, ctx):
        """Background testbench: accept beats forever into ``self.beats``."""
        while True:
            await self._one_cycle(ctx)


# ---------------------------------------------------------------- scoreboard
def _short(x, limit=48):
    if isinstance(x, (bytes, bytearray)):
        h = bytes(x).hex()
        return f"{len(x)} bytes {h[:limit]}{'...' if len(h) > limit else ''}"
    r = repr(x)
    return r if len(r) <= 2 * limit else r[:2 * limit] + "..."


def _bytes_diff(a, b):
    if isinstance(a, (bytes, bytearray)) and isinstance(b, (bytes, bytearray)):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return f" (first differing byte at offset {i}: expected {x:#04x}, got {y:#04x})"
        return f" (lengths differ: expected {len(a)}, got {len(b)})"
    return ""


class Scoreboard:
    """Compares received items against a golden list: no loss, no duplicate, order kept,
    payload equal. ``check(got)`` raises AssertionError describing the first problem."""

    def __init__(self, expected, name="scoreboard"):
        self.expected, self.name = list(expected), name

    def check(self, got):
        got, exp = list(got), self.expected
        for i in range(min(len(got), len(exp))):
            if got[i] == exp[i]:
                continue
            why = [f"{self.name}: item {i} differs: expected {_short(exp[i])}, got {_short(got[i])}"
                   f"{_bytes_diff(exp[i], got[i])}"]
            if i > 0 and got[i] == got[i - 1] and exp[i] != exp[i - 1]:
                why.append(f"got[{i}] duplicates got[{i - 1}]")
            if exp[i] not in got:
                why.append(f"expected item {i} is missing from the output (lost)")
            else:
                why.append(f"expected item {i} appears at got[{got.index(exp[i])}] (order changed)")
            if got[i] not in exp:
                why.append(f"got[{i}] matches no expected item (corrupted payload)")
            raise AssertionError("; ".join(why) + f"; {len(exp)} expected, {len(got)} received")
        if len(got) < len(exp):
            raise AssertionError(f"{self.name}: {len(exp) - len(got)} item(s) lost: received "
                                 f"{len(got)} of {len(exp)}; first missing: {_short(exp[len(got)])}")
        if len(got) > len(exp):
            extra = got[len(exp)]
            kind = "duplicate" if extra in exp else "unexpected"
            raise AssertionError(f"{self.name}: {len(got) - len(exp)} extra item(s) received; "
                                 f"first extra ({kind}): {_short(extra)}")


# ---------------------------------------------------------------- AXI4-Lite master
class AXI4LiteMaster:
    """Drives the DUT's AXI4-Lite slave interface (``In(AXI4LiteSignature)`` member)."""

    def __init__(self, port):
        self.port = port

    async def write(self, ctx, addr: int, data: int, strb: int = None) -> Resp:
        p = self.port
        nb = Value.cast(p.w.payload.strb).shape().width
        ctx.set(p.aw.payload.addr, addr)
        ctx.set(p.w.payload.data, data)
        ctx.set(p.w.payload.strb, (1 << nb) - 1 if strb is None else strb)
        ctx.set(p.aw.valid, 1)
        ctx.set(p.w.valid, 1)
        aw_done = w_done = False
        while not (aw_done and w_done):
            _, _, awr, wr = await ctx.tick().sample(p.aw.ready, p.w.ready)
            if awr and not aw_done:
                aw_done = True
                ctx.set(p.aw.valid, 0)
            if wr and not w_done:
                w_done = True
                ctx.set(p.w.valid, 0)
        ctx.set(p.b.ready, 1)
        resp, = await ctx.tick().sample(p.b.payload.resp).until(p.b.valid)
        ctx.set(p.b.ready, 0)
        return Resp(resp)

    async def read(self, ctx, addr: int) -> tuple[int, Resp]:
        p = self.port
        ctx.set(p.ar.payload.addr, addr)
        ctx.set(p.ar.valid, 1)
        await ctx.tick().until(p.ar.ready)
        ctx.set(p.ar.valid, 0)
        ctx.set(p.r.ready, 1)
        data_, resp = await ctx.tick().sample(p.r.payload.data, p.r.payload.resp).until(p.r.valid)
        ctx.set(p.r.ready, 0)
        return data_, Resp(resp)


# ---------------------------------------------------------------- contract checker
def axi_handshakes(bus, into: dict):
    """A background testbench recording the cycles of ``bus``'s AR and B handshakes (AXI4 master
    signature) in ``into["ar"]`` / ``into["b"]`` (cycle 0 = the first tick): what shows the order
    of a read and an earlier write when the memory applies writes at once."""
    async def record(ctx):
        cycle = 0
        async for _, _, av, ar, bv, br in ctx.tick().sample(bus.ar.valid, bus.ar.ready, bus.b.valid, bus.b.ready):
            if av and ar:
                into.setdefault("ar", []).append(cycle)
            if bv and br:
                into.setdefault("b", []).append(cycle)
            cycle += 1
    return record


def stream_checker(stream, name: str):
    """Background testbench asserting the stream contract on ``stream``: ``valid`` never
    falls without a transfer, and the payload is stable while ``valid & ~ready``."""
    payload = Value.cast(stream.payload)

    async def check(ctx):
        prev = None
        cycle = 0
        async for _, rst, v, r, p in ctx.tick().sample(stream.valid, stream.ready, payload):
            if rst:
                prev = None
            elif prev is not None and prev[0] and not prev[1]:
                if not v:
                    raise AssertionError(f"stream contract: {name}.valid fell at cycle {cycle} "
                                         f"without a transfer")
                if p != prev[2]:
                    raise AssertionError(f"stream contract: {name}.payload changed at cycle {cycle} "
                                         f"while valid & ~ready ({prev[2]:#x} -> {p:#x})")
            if not rst:
                prev = (v, r, p)
            cycle += 1
    return check


def output_streams(component):
    """``[(name, stream)]`` of every stream whose ``valid`` the component drives (including
    the output channels of AXI members: aw/w/ar of a master, b/r of a slave)."""
    out = []
    for path, member, _ in component.signature.flatten(component):
        if path[-1] == "valid" and member.flow == wiring.Out:
            obj = component
            for step in path[:-1]:
                obj = obj[step] if isinstance(step, int) else getattr(obj, step)
            if hasattr(obj, "ready") and hasattr(obj, "payload"):
                out.append(("_".join(map(str, path[:-1])), obj))
    return out


# ---------------------------------------------------------------- runner
_counter = itertools.count()


def _vcd_path(name):
    d = os.environ.get("MCF_VCD_DIR") or os.path.join(tempfile.gettempdir(), "mcf-vcd")
    os.makedirs(d, exist_ok=True)
    if name is None:
        name = os.environ.get("PYTEST_CURRENT_TEST", "sim").split(" ")[0]
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[-120:]
    return os.path.join(d, f"{name}.{os.getpid()}.{next(_counter)}.vcd")


def run_simulation(dut, testbenches, *, background=(), name=None, max_cycles: int = 200_000,
                   check_streams: bool = True, vcd: bool = True, clock: float = 1e-8):
    """Run ``dut`` with async ``testbenches`` (foreground; the run ends when all return) and
    ``background`` ones (e.g. ``mem.serve`` partials, ``sink.run``). With ``check_streams``
    a contract checker watches every output stream of ``dut``. Waveforms go to a VCD file
    (``$MCF_VCD_DIR`` or ``<tmp>/mcf-vcd``) that is deleted on success; on any failure --
    including no completion within ``max_cycles`` -- the error names the VCD path. The design's
    simulator is built once and reset for each later run with as many testbenches
    (:mod:`.reused_simulator`): a test's examples pay for its compilation once."""
    def checkers(d):
        return [stream_checker(s, sname) for sname, s in output_streams(d)] if check_streams else []
    sim = reused_simulator(dut, n_fg=len(testbenches), n_bg=len(background), clock=clock,
                           fixed_for=checkers, tag=check_streams)
    path = _vcd_path(name) if vcd else None
    try:
        sim.run(testbenches, background, max_cycles=max_cycles, vcd=path)
    except AssertionError as exc:
        if path is None:
            raise
        raise AssertionError(f"{exc}\n  waveform: {path}") from exc
    except Exception as exc:
        if path is not None:
            exc.add_note(f"waveform: {path}")
        raise
    if path is not None:
        os.unlink(path)


def comb_outputs(design, inputs, outputs, cases):
    """Evaluate a combinational ``design`` (no clock): for each case (one value per signal of
    ``inputs``) set the inputs and read ``outputs``; returns one tuple per case (one value per
    output), or one value per case when ``outputs`` is a single signal."""
    single = not isinstance(outputs, (list, tuple))
    outs = [outputs] if single else list(outputs)
    got = []

    async def tb(ctx):
        for case in cases:
            for sig, v in zip(inputs, case):
                ctx.set(sig, v)
            vals = tuple(ctx.get(o) for o in outs)
            got.append(vals[0] if single else vals)
    sim = Simulator(design)
    sim.add_testbench(tb)
    sim.run()
    return got
