"""Command fetcher (mcf_fpga/hdl/cmdfetch.py) against its golden twin (mcf_fpga/golden/cmdfetch.py).

The stream lies in an AXI4Memory (random latency, R-beat rate limit = R stalls, AR ready stalls,
optionally one SLVERR/DECERR beat); the KV pool is a test responder around a golden
``KVPool`` (random ``kv_cmd`` ready, random answer delay); the engine sink has random ready;
event counters rise on a random schedule (also across the 32-bit wrap); a loader model takes
``load`` descriptors with random ready and answers each, in order, after a random delay with a
random status code; a picker sink takes ``pick`` beats with random ready while ``tokens`` and
``values`` hold random values; a scratchpad sink takes ``put`` words with random ready.
Compared bit for bit with ``golden.cmdfetch.run``: the engine instructions in order, the KV
commands in order (a timed-out ``WAIT_KV``'s repeated lookups as one or more), the load
descriptors in order (LOADX's computed addresses), the pick beats in order (with their mode),
the put words in order, each put taken after exactly the descriptors golden issues before it
(the loader queues it behind them), the final registers and the irq count;
the AXI bus is idle afterwards and every output obeys the stream contract. Directed tests cover
each error cause, the watchdog, abort, polling, a late KV answer, loads and their statuses,
LOADX's address arithmetic, PICK's refusals (PAIRS with an odd n) and watchdog, PUT's words,
wait, refusals and watchdog, and the doorbell.
"""
import random

import pytest
from amaranth import Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from hypothesis import event, given, strategies as st

from mcf_fpga.golden.cmdfetch import run_for
from mcf_fpga.golden.kvpool import KVPool as GoldenPool, twin_of
from mcf_fpga.spec.kvpool import Opcode, State, Status
from mcf_fpga.hdl.bus import AXI4LiteSignature, AXI4Signature, Resp
from mcf_fpga.hdl.cmdfetch import (BASE_HI, BASE_LO, CTRL, CTRL_ABORT, CTRL_START, DOORBELL, ERR_CAUSE, ERR_INDEX, ERR_INFO,
                          LEN, LOADS, MARK, RECORDS, STATUS, WATCHDOG, CommandFetcher)
from mcf_fpga.spec.cmdstream import Cause, Kind, Patch
from mcf_fpga.hdl.cmdstream import (End, Engine, EngineKV, KvCmd, Load, LoadX, Mark, Pick, Put, Raw, Wait, WaitKV,
                           encode)
from mcf_fpga.spec.instr import instr_value
from mcf_fpga.spec.dma import DmaStatus
from mcf_fpga.spec.loader import Dest
from mcf_fpga.hdl.compute.engine import INSTR
from mcf_fpga.hdl.kvpool import KVPool
from mcf_fpga.sim import AXI4Memory
from mcf_fpga.sim.kit import AXI4LiteMaster, run_simulation

MEM_BASE, MEM_SIZE = 0x4000, 0x1000
N_SLOTS, SLOT_ROWS, N_COUNTERS = 16, 40, 4
KIDS = (0x0001, 0x0102, 0x0203, 0x0300, 0x0005, 0x0106, 0x0007)
WD = 500          # watchdog in the random runs: longer than the counter schedule and any stall


def make_dut(data_width=128, **kw):
    kw = dict(addr_width=32, data_width=data_width, max_burst=4, window_base=MEM_BASE, window_size=MEM_SIZE,
              n_counters=N_COUNTERS, slot_rows=SLOT_ROWS, fifo_depth=16, poll_gap=5, n_slots=N_SLOTS,
              max_readers=3) | kw
    return CommandFetcher(**kw)


def new_pool(setup=()):
    """A golden pool after ``setup`` ((opcode, kid) commands)."""
    pool = GoldenPool(N_SLOTS, 64, kv_id_width=32, max_readers=3)
    for op, kid in setup:
        pool.execute(op, kid)
    return pool


class Observed:
    """What the hardware did."""

    def __init__(self):
        self.engine, self.kv, self.irqs, self.regs, self.starts = [], [], 0, {}, 0
        self.runs = []           # regs of each run (``runs``)
        self.status_seen = []    # STATUS values polled while running (last run)
        self.engine_cycles, self.kv_cycles = [], []
        self.loads = []          # (dest, addr, count) descriptors taken, in order
        self.statuses = []       # (code, RECORDS when it arrived, or None: the run was not live)
        self.picks, self.pick_cycles = [], []   # (frame, skip, n, slot, mode) beats taken, in order
        self.puts, self.put_cycles = [], []     # put words taken, in order
        self.put_after = []      # per put: the load descriptors taken before it


def simulate(dut, stream, *, setup=(), addr=MEM_BASE, base=None, length=None, watchdog=WD, counters=(),
             schedule=(), seed=0, eng_ready=1.0, kv_ready=1.0, resp_delay=0, latency=4, rate=None,
             ar_stall=False, errors=(), abort_at=None, writes=(), actions=None, runs=None, pool_actions=(),
             load_ready=1.0, load_codes=(), status_delay=0, strays=(), tokens=(), pick_ready=1.0,
             values=(), put_ready=1.0, max_cycles=30_000):
    """Run ``stream`` (bytes at ``addr``) on ``dut``; returns (Observed, the memory model).
    ``base``: BASE if not ``addr``; ``counters``: initial values; ``schedule``: (cycle, index, value) counter updates;
    ``abort_at``: cycle (after start) of a CTRL.abort write; ``writes``: (cycle after start, offset,
    value) register writes while running; ``actions``: extra testbench;
    ``eng_ready``: a probability or ``f(cycle) -> bool``; ``runs``: several starts, one after the
    other, each a dict overriding ``base``/``length``/``watchdog`` (``obs.runs``: their registers;
    ``obs.regs``: the last run's); ``pool_actions``: (cycle, opcode, kid) run on the pool then;
    ``load_ready``: as ``eng_ready`` for ``load``; ``load_codes[i]``: the status code of the i-th
    load taken (beyond the list: OK; None: no status ever), sent 1 + random(0..``status_delay``)
    (or a ``(lo, hi)`` range) cycles after the descriptor was taken (and after the previous
    status); ``strays``: (cycle, code) statuses sent for no load; ``tokens``, ``values``: the
    ``tokens``/``values`` inputs (fixed); ``pick_ready``, ``put_ready``: as ``eng_ready`` for
    ``pick``/``put``."""
    rng = random.Random(seed)
    mem = AXI4Memory(MEM_SIZE, data_width=dut.dma.data_width, base=MEM_BASE, latency=latency,
                     bytes_per_cycle=rate, ready_seed=seed if ar_stall else None, error_ranges=errors)
    mem.load(addr, stream)
    pool = new_pool(setup)
    obs = Observed()
    n = len(stream) // 8 if length is None else length
    finished = []
    cycle = [0]

    async def clock(ctx):
        async for _ in ctx.tick():
            cycle[0] += 1

    async def engine_sink(ctx):
        s = dut.engine_cmd
        while True:
            ctx.set(s.ready, eng_ready(cycle[0]) if callable(eng_ready) else rng.random() < eng_ready)
            _, _, v, r, p = await ctx.tick().sample(s.valid, s.ready, s.payload)
            if v and r:
                obs.engine.append(int(p.as_value().value))
                obs.engine_cycles.append(cycle[0])

    async def kv_pool(ctx):
        c, rp = dut.kv_cmd, dut.kv_resp
        todo = sorted(pool_actions)
        while True:
            while todo and todo[0][0] <= cycle[0]:
                pool.execute(*todo.pop(0)[1:])
            ctx.set(c.ready, rng.random() < kv_ready)
            _, _, v, r, op, kid = await ctx.tick().sample(c.valid, c.ready, c.payload.opcode, c.payload.kv_id)
            if v and r:
                ctx.set(c.ready, 0)
                obs.kv.append((op, kid))
                obs.kv_cycles.append(cycle[0])
                ans = pool.execute(op, kid)
                for _ in range(rng.randint(0, resp_delay)):
                    await ctx.tick()
                ctx.set(rp.payload.status, ans.status)
                ctx.set(rp.payload.slot, ans.slot)
                ctx.set(rp.payload.state, ans.state)
                ctx.set(rp.payload.readers, ans.readers)
                ctx.set(rp.payload.freed, ans.freed)
                ctx.set(rp.valid, 1)
                await ctx.tick().until(rp.ready)
                ctx.set(rp.valid, 0)

    async def picker(ctx):
        s = dut.pick
        while True:
            ctx.set(s.ready, pick_ready(cycle[0]) if callable(pick_ready) else rng.random() < pick_ready)
            _, _, v, r, p = await ctx.tick().sample(s.valid, s.ready, s.payload)
            if v and r:
                obs.picks.append((int(p.frame), int(p.skip), int(p.n), int(p.slot), int(p.mode)))
                obs.pick_cycles.append(cycle[0])

    async def sp_sink(ctx):
        """The stream loader's ``put`` input. The loader model has handled every earlier cycle when
        this runs (a put is taken >= 3 cycles after the descriptor of the record before it)."""
        s = dut.put
        own = random.Random(seed + 7)               # its own draws: the other sinks' stay as they were
        while True:
            ctx.set(s.ready, put_ready(cycle[0]) if callable(put_ready) else own.random() < put_ready)
            _, _, v, r, p = await ctx.tick().sample(s.valid, s.ready, s.payload)
            if v and r:
                obs.puts.append(int(p.data))
                obs.put_cycles.append(cycle[0])
                obs.put_after.append(len(obs.loads))

    async def loader(ctx):
        """Takes descriptors, answers each in order on ``load_status`` (always ready) after a delay."""
        ld, st = dut.load, dut.load_status
        pending = []                                # (due cycle, code, addr)
        stray = sorted(strays)
        lo, hi = status_delay if isinstance(status_delay, tuple) else (0, status_delay)
        while True:
            ctx.set(ld.ready, load_ready(cycle[0]) if callable(load_ready) else rng.random() < load_ready)
            show = bool(pending) and pending[0][0] <= cycle[0]
            if show:
                ctx.set(st.payload.code, pending[0][1])
                ctx.set(st.payload.addr, pending[0][2])
            stray_now = not show and bool(stray) and stray[0][0] <= cycle[0]
            if stray_now:
                ctx.set(st.payload.code, stray.pop(0)[1])
            ctx.set(st.valid, show or stray_now)
            _, _, v, r, p, sr, status, rec = await ctx.tick().sample(ld.valid, ld.ready, ld.payload, st.ready,
                                                                      dut._regs.status, dut._regs.records)
            if show:
                assert sr, "load_status must be always ready"
                obs.statuses.append((pending.pop(0)[1], rec if status == 1 else None))
            if v and r:
                d = (int(p.dest), int(p.addr), int(p.count))
                obs.loads.append(d)
                code = load_codes[len(obs.loads) - 1] if len(obs.loads) <= len(load_codes) else DmaStatus.OK
                if code is not None:
                    due = max(cycle[0] + 1 + rng.randint(lo, hi), pending[-1][0] + 1 if pending else 0)
                    pending.append((due, code, d[1]))

    async def contract(ctx):
        """Every output stream: a beat offered stays offered, unchanged, until taken."""
        outs = {"engine_cmd": dut.engine_cmd, "kv_cmd": dut.kv_cmd, "load": dut.load, "pick": dut.pick,
                "put": dut.put}
        held = {}
        args = [x for s in outs.values() for x in (s.valid, s.ready, s.payload)]
        async for _, _, *vals in ctx.tick().sample(*args):
            for k, name in enumerate(outs):
                v, r, p = vals[3 * k:3 * k + 3]
                p = p.as_value().value if hasattr(p, "as_value") else int(p)
                if name in held:
                    assert v and p == held[name], f"cycle {cycle[0]}: {name} withdrew or changed an offered beat"
                held.pop(name, None)
                if v and not r:
                    held[name] = p

    async def counter_driver(ctx):
        for i, v in enumerate(counters):
            ctx.set(dut.counters[i], v)
        for i, v in enumerate(tokens):
            ctx.set(dut.tokens[i], v)
        for i, v in enumerate(values):
            ctx.set(dut.values[i], v)
        t = 0
        for when, i, v in sorted(schedule):
            while t < when:
                await ctx.tick()
                t += 1
            ctx.set(dut.counters[i], v)

    async def idle_when_stopped(ctx):
        """STATUS.running = 0 implies the read bus is idle: no AR offered, no read in flight."""
        async for _, _, st, arv in ctx.tick().sample(dut._regs.status, dut.m_axi.ar.valid):
            if not st & 1:
                assert not arv and not mem._reads, \
                    f"cycle {cycle[0]}: stopped with the read bus busy (AR valid {arv}, {len(mem._reads)} in flight)"

    async def irq_count(ctx):
        async for _, _, irq, started in ctx.tick().sample(dut.irq, dut.started):
            obs.irqs += irq
            obs.starts += started

    async def one_run(ctx, bus, b, n, watchdog):
        await bus.write(ctx, BASE_LO, b & 0xFFFFFFFF)
        await bus.write(ctx, BASE_HI, b >> 32)
        await bus.write(ctx, LEN, n)
        await bus.write(ctx, WATCHDOG, watchdog)
        t0 = cycle[0]
        await bus.write(ctx, CTRL, CTRL_START)
        await ctx.tick().repeat(3)
        todo = sorted(list(writes) + ([(abort_at, CTRL, CTRL_ABORT)] if abort_at is not None else []))
        obs.status_seen = []
        while True:
            while todo and cycle[0] - t0 >= todo[0][0]:
                await bus.write(ctx, *todo.pop(0)[1:])
            st, _ = await bus.read(ctx, STATUS)
            obs.status_seen.append(st)
            if not st & 1:
                break
        regs = {}
        for name, off in (("status", STATUS), ("records", RECORDS), ("err_cause", ERR_CAUSE),
                          ("err_index", ERR_INDEX), ("err_info", ERR_INFO), ("mark", MARK)):
            regs[name] = (await bus.read(ctx, off))[0]
        obs.loads_reg = (await bus.read(ctx, LOADS))[0]
        obs.runs.append(regs)
        obs.regs = regs

    async def host(ctx):
        bus = AXI4LiteMaster(dut.csr)
        for r in runs or [{}]:
            await one_run(ctx, bus, r.get("base", addr if base is None else base), r.get("length", n),
                          r.get("watchdog", watchdog))
        await ctx.tick().repeat(4)
        # the bus is idle: no read in flight, no AR offered
        assert not mem._reads, f"reads still in flight after the stop: {mem._reads}"
        assert not ctx.get(dut.m_axi.ar.valid), "AR valid after the stop"
        assert not ctx.get(dut.m_axi.aw.valid) and not ctx.get(dut.m_axi.w.valid)
        finished.append(True)

    tbs = [host] + ([actions] if actions else [])
    run_simulation(dut, tbs, background=[clock, mem.testbench(dut.m_axi), engine_sink, kv_pool, loader, picker, sp_sink, contract,
                                         counter_driver, irq_count, idle_when_stopped], max_cycles=max_cycles)
    assert finished
    return obs, mem


def word_resp(mem, addr, n):
    """Stream word index -> RRESP of its beat (golden's ``word_resp``) for the memory's error ranges."""
    bpb = mem.bytes_per_beat
    out = {}
    for i in range(n):
        a = (addr + 8 * i) & ~(bpb - 1)
        r = mem._beat_resp(a, bpb.bit_length() - 1, 1)
        if r != Resp.OKAY:
            out[i] = int(r)
    return out


def expect(dut, stream, obs, mem, *, setup=(), addr=MEM_BASE, base=None, length=None, watchdog=WD,
           counters_final=(), tokens=(), values=()):
    """Compare ``obs`` with golden's run of the same stream (``tokens``, ``values``: as given to
    ``simulate``)."""
    n = len(stream) // 8 if length is None else length
    live = [(c, at) for c, at in obs.statuses if at is not None]    # statuses that came while the run was live

    def golden(status_at):
        return run_for(dut, stream, pool=new_pool(setup), counters=list(counters_final), watchdog=watchdog,
                       word_resp=word_resp(mem, addr, n), base=addr if base is None else base, length=n,
                       load_status=[c for c, _ in live], status_at=status_at,
                       tokens=list(tokens) + [0] * (dut.pick_slots - len(tokens)),
                       values=list(values) + [0] * (dut.pick_slots - len(values)))
    gold = golden([at for _, at in live])
    # a failing status stops the record under way at once: it may have output a prefix of its beats,
    # what golden gives when the status comes one record later
    late = gold
    if gold.err_cause == Cause.LOAD_STATUS:
        j, e = gold.err_info >> 8, gold.err_index
        late = golden([at if i < j else max(at, e + 1) for i, (_, at) in enumerate(live)])
    for name in ("engine", "kv", "loads", "picks", "puts"):
        hw, g, g2 = getattr(obs, name), getattr(gold, name), getattr(late, name)
        tail = name == "kv" and gold.poll_tail
        k = len(g) - tail
        assert hw[:k] == g[:k], f"{name} differ: hardware {hw}, golden {g}"
        rest, more = hw[k:], g2[k:]
        if tail:
            assert rest and all(c == g[-1] for c in rest), f"WAIT_KV polls differ: {rest}"
        elif late.poll_tail and name == "kv" and late is not gold:
            assert all(c == more[0] for c in rest), f"kv after the failing status: {rest}, golden {more}"
        else:
            assert rest == more[:len(rest)], \
                f"{name} after the failing status: hardware {rest}, golden {more}"
    want = dict(status=gold.status(), records=gold.records, err_cause=int(gold.err_cause),
                err_index=gold.err_index, err_info=gold.err_info, mark=gold.mark)
    assert obs.regs == want, f"registers: hardware {obs.regs}, golden {want}"
    assert obs.irqs == gold.irqs, f"irq pulses: hardware {obs.irqs}, golden {gold.irqs}"
    assert obs.loads_reg == len(obs.loads), f"LOADS {obs.loads_reg}, descriptors taken {len(obs.loads)}"
    # stream order: each put taken after exactly the load descriptors golden issues before it (the
    # loader queues the word behind them, so it reaches sp_in after their units, before later ones)
    after = gold.put_after + late.put_after[len(gold.put_after):]
    assert obs.put_after == after[:len(obs.put_after)], f"loads before each put: hardware {obs.put_after}, golden {after}"
    return gold


def instr(**fields):
    return instr_value(fields)


# ---------------------------------------------------------------- directed
SETUP = [(Opcode.ALLOC_OWNER, 0x0001), (Opcode.INSTALL_REPLICA, 0x0102), (Opcode.BEGIN_INSTALL, 0x0203)]


def test_smoke_all_kinds():
    dut = make_dut()
    recs = [Engine(instr(op=3, a=5, meta=9)), EngineKV(instr(op=9, kvb=3), 0x0102, Patch.KVB_ROWS, 0b110),
            EngineKV(instr(op=6, b=77), 0x0001, Patch.SLOT_B, 0b10), KvCmd(Opcode.ACQUIRE, 0x0001, Status.OK),
            Wait(1, 7), WaitKV(0x0102, 1 << State.REPLICA_VALID), Mark(0x1234, True), End()]
    s = encode(recs)
    obs, mem = simulate(dut, s, setup=SETUP, counters=[0, 3, 0, 0], schedule=[(40, 1, 7)])
    gold = expect(dut, s, obs, mem, setup=SETUP, counters_final=[0, 7, 0, 0])
    assert gold.done and gold.records == len(recs) and len(gold.engine) == 3


# ---------------------------------------------------------------- random streams
def random_setup(rng):
    """Pre-fill commands: some KIDS as owner / replica / installing / draining, at varied slots."""
    setup = []
    for kid in rng.sample(KIDS, rng.randint(0, len(KIDS) - 1)):
        kind = rng.choice(["owner", "replica", "installing", "draining", "gap"])
        if kind == "gap":                           # a freed slot: later kids get higher slots
            setup += [(Opcode.INSTALL_REPLICA, 0x7700 | kid), (Opcode.INSTALL_REPLICA, 0x7800 | kid),
                      (Opcode.INVALIDATE, 0x7700 | kid)]
        op = {"owner": Opcode.ALLOC_OWNER, "installing": Opcode.BEGIN_INSTALL}.get(kind, Opcode.INSTALL_REPLICA)
        setup.append((op, kid))
        if kind == "draining":
            setup += [(Opcode.ACQUIRE, kid), (Opcode.MARK_DRAINING, kid)]
    return setup


def random_records(draw, rng, setup, counters0, finals, tokens=(0,), pick_slots=1):
    """A random stream (records, mostly valid; faults mixed in). A shadow pool predicts answers so
    most KVCMD / ENGINE_KV / WAIT_KV records succeed; ``tokens`` (the fetcher's, ``pick_slots``)
    let most LOADX addresses fit the 32-bit bus."""
    shadow = new_pool(setup)
    recs = []
    for _ in range(rng.randint(1, 10)):
        k = rng.choice(["engine", "engine", "engine_kv", "engine_kv", "kvcmd", "kvcmd", "wait", "wait",
                        "wait_kv", "mark", "load", "load", "pick", "loadx", "loadx", "put", "put"] * 2 + ["raw"])
        fault = rng.random() < (1 / 5 if k in ("pick", "loadx", "put") else 1 / 16)   # this record is meant to fail
        present = [x for x in KIDS if shadow.lookup(x).status == Status.OK]
        kid = rng.choice(present) if present and not fault and k != "kvcmd" else rng.choice(KIDS)
        if k == "engine":
            recs.append(Engine(rng.getrandbits(INSTR.size)))
        elif k == "engine_kv":
            v = rng.getrandbits(INSTR.size)
            kvb = rng.choice([0xFFFF - SLOT_ROWS * 3, 0xFFFF] if fault else [0, 5, 0x1000])
            v = v & ~(0xFFFF << INSTR["kvb"].offset) | kvb << INSTR["kvb"].offset
            mode = rng.choice([1, 2, 0, 3, 15] if fault else [1, 2])
            r = shadow.lookup(kid)
            mask = (1 << r.state) | rng.getrandbits(8) if not fault else rng.getrandbits(8)
            recs.append(EngineKV(v, kid, mode, mask))
        elif k == "kvcmd":
            op = rng.choice([*Opcode] + [11, 15])
            probe = new_pool()
            probe._dir, probe._budget = {a: type(e)(e.slot, e.state, e.readers) for a, e in shadow._dir.items()}, \
                shadow._budget
            want = probe.execute(op, kid).status
            ex = rng.randrange(16) if fault else want
            recs.append(KvCmd(op, kid, ex))
            if ex == want:
                shadow.execute(op, kid)
        elif k == "wait":
            i = rng.choice([*range(N_COUNTERS), N_COUNTERS, 255]) if fault \
                else draw(st.integers(0, N_COUNTERS - 1))
            if i < N_COUNTERS:
                lo, hi = counters0[i], finals[i]
                # reachable targets mostly (up to the final value, across the wrap); rarely one beyond
                t = (hi + rng.randint(1, 50)) % 2 ** 32 if fault else \
                    (lo + rng.randint(-3, (hi - lo) % 2 ** 32)) % 2 ** 32
            else:
                t = rng.getrandbits(32)
            recs.append(Wait(i, t))
        elif k == "wait_kv":
            r = shadow.lookup(kid)
            ok = r.status == Status.OK and not fault
            mask = (1 << r.state) | rng.getrandbits(8) & ~(1 << r.state) if ok else \
                (0xFF & ~(1 << r.state) if r.status == Status.OK else rng.getrandbits(8))
            recs.append(WaitKV(kid, mask))
        elif k == "mark":
            recs.append(Mark(rng.getrandbits(32), rng.random() < 0.5))
        elif k == "load":
            dest, count, addr = rng.choice(list(Dest)), rng.choice([1, 2, 2 ** 32 - 1, rng.getrandbits(32) or 1]), \
                rng.getrandbits(32)
            if fault:                                  # BAD_LOAD: each check
                bad = rng.randrange(3)
                dest = rng.choice([2, 3]) if bad == 0 else dest
                count = 0 if bad == 1 else count
                addr = addr | 1 << rng.randrange(32, 64) if bad == 2 else addr
            recs.append(Load(dest, count, addr))
        elif k == "pick":
            frame, skip = rng.getrandbits(32), rng.choice([0, 1, rng.getrandbits(32)])
            slot, n = rng.randrange(pick_slots), rng.choice([1, 2, 2 ** 32 - 1, rng.getrandbits(32) or 1])
            mode = rng.randrange(2)
            n += mode and n % 2 and n < 2 ** 32 - 1        # PAIRS: an even n (2**32 - 1 stays odd: BAD_PICK 3)
            if fault:                                  # BAD_PICK: each check
                bad = rng.randrange(3)
                if pick_slots < 16 and bad == 0:
                    slot = rng.randrange(pick_slots, 16)
                elif bad == 1:
                    n = 0
                else:
                    mode, n = 1, rng.choice([1, 3, 2 ** 32 - 1])
            recs.append(Pick(frame, skip, n, slot, mode))
        elif k == "put":
            slot = rng.randrange(pick_slots, 16) if fault and pick_slots < 16 else rng.randrange(pick_slots)
            recs.append(Put(slot, rng.randrange(2), rng.choice([0, 1, 2 ** 32 - 1, rng.getrandbits(32)])))
        elif k == "loadx":
            dest, count = rng.choice(list(Dest)), rng.choice([1, 2, 2 ** 32 - 1, rng.getrandbits(32) or 1])
            slot = rng.randrange(pick_slots)
            addr = rng.choice([0, rng.getrandbits(32), rng.getrandbits(20)])
            tok, room = tokens[slot], 2 ** 32 - 1 - addr
            stride = rng.choice([0, 1, rng.getrandbits(32)]) if tok == 0 else rng.randint(0, min(room // tok, 2 ** 32 - 1))
            if fault:                                  # BAD_LOAD: each check, the address one after the index
                bad = rng.randrange(5)
                dest = rng.choice([2, 3]) if bad == 0 else dest
                count = 0 if bad == 1 else count
                addr = addr | 1 << rng.randrange(32, 64) if bad == 2 else addr
                if bad == 3:                           # addr fits, addr + tokens[slot] * stride does not
                    slot = max(range(pick_slots), key=lambda j: tokens[j])
                    tok = tokens[slot]
                    if tok:
                        addr = rng.getrandbits(32)
                        stride = min(2 ** 32 - 1, (2 ** 32 - addr + tok - 1) // tok + rng.randint(0, 3))
                    else:
                        addr = 2 ** 32 + rng.getrandbits(8)
                if bad == 4:
                    slot = rng.randrange(pick_slots, 16) if pick_slots < 16 else slot
            recs.append(LoadX(dest, count, addr, stride, slot))
        else:
            recs.append(rng.choice([Raw(len(Kind)), Raw(0xFF), Raw(Kind.LOAD), Raw(Kind.LOAD, 2, 0, (0, 0)), Raw(Kind.ENGINE, 3), Raw(Kind.MARK, 1, 0, (5,)),
                                              Raw(Kind.PICK), Raw(Kind.LOADX, 1, 0, (7,)), Raw(Kind.PICK, 2, 0, (1, 2)),
                                              Raw(Kind.PUT, 1, 0, (3,)),
                                              Raw(Kind.END, 2, 0, (1, 2))]))
    tail = rng.choice(["end"] * 10 + ["none", "cut"])
    if tail == "end":
        recs.append(End())
    elif tail == "cut":
        recs.append(Raw(Kind.ENGINE, 7, 0, (1, 2)))    # runs past LEN
    return recs


@given(st.data(), st.sampled_from([128, 64]))
def test_random_streams_match_golden(data, width):
    draw = data.draw
    seed = draw(st.integers(0, 2 ** 64 - 1))       # all randomness below comes from it
    rng = random.Random(seed)
    setup = random_setup(rng)
    counters0 = [draw(st.sampled_from([0, 100, 2 ** 32 - 40])) for _ in range(N_COUNTERS)]
    finals = [(c + rng.randint(0, 80)) % 2 ** 32 for c in counters0]
    schedule = []
    for i in range(N_COUNTERS):          # each counter climbs to its final value by cycle ~300
        v, t = counters0[i], 0
        while v != finals[i]:
            v = (v + rng.randint(1, 20)) % 2 ** 32
            if (finals[i] - counters0[i]) % 2 ** 32 < (v - counters0[i]) % 2 ** 32:
                v = finals[i]
            t += rng.randint(5, 60)
            schedule.append((t, i, v))
    pick_slots = draw(st.sampled_from([1, 3, 4, 16]))
    tokens = [rng.choice([0, 1, rng.getrandbits(8), rng.getrandbits(20), rng.getrandbits(32), 2 ** 32 - 1])
              for _ in range(pick_slots)]
    values = [rng.choice([0, 1, 2 ** 31, rng.getrandbits(32), 2 ** 32 - 1]) for _ in range(pick_slots)]
    recs = random_records(draw, rng, setup, counters0, finals, tokens, pick_slots)
    stream = encode(recs)
    n = len(stream) // 8
    length = rng.randint(1, n) if rng.random() < 1 / 12 else n
    addr = MEM_BASE + 8 * draw(st.integers(0, 5))
    base = None
    if rng.random() < 1 / 16:                      # BAD_ADDR: misaligned, or leaving the window
        base = rng.choice([addr + 4, MEM_BASE + MEM_SIZE - 8 * (length - 1), MEM_BASE - 8])
    errors = ()
    if rng.random() < 1 / 6:
        bpb = width // 8
        b = ((addr & ~7) + 8 * rng.randrange(n)) & ~(bpb - 1)
        errors = [(b, b + bpb, draw(st.sampled_from([Resp.SLVERR, Resp.DECERR])))]
    dut = make_dut(data_width=width, fifo_depth=draw(st.sampled_from([8, 16, 32])) * (width // 64) // 2,
                   pick_slots=pick_slots)
    kw = dict(setup=setup, addr=addr, base=base, length=length, tokens=tokens, values=values)
    load_codes = [DmaStatus.OK if rng.random() < 0.7 else rng.randint(1, 15) for _ in range(12)]
    obs, mem = simulate(dut, stream, counters=counters0, schedule=schedule, load_codes=load_codes,
                        load_ready=draw(st.sampled_from([1.0, 0.5, 0.2])), status_delay=draw(st.sampled_from([0, 5, 40, 150])),
                        seed=seed, eng_ready=draw(st.sampled_from([1.0, 0.5, 0.2])),
                        kv_ready=draw(st.sampled_from([1.0, 0.5, 0.2])), resp_delay=draw(st.integers(0, 4)),
                        latency=draw(st.integers(1, 30)), rate=draw(st.sampled_from([None, 3, 8])),
                        ar_stall=draw(st.booleans()), errors=errors,
                        pick_ready=draw(st.sampled_from([1.0, 0.5, 0.1])),
                        put_ready=draw(st.sampled_from([1.0, 0.5, 0.1])), **kw)
    gold = expect(dut, stream, obs, mem, counters_final=finals, **kw)
    event(f"{'done' if gold.done else Cause(gold.err_cause).name}")
    event(f"records {min(gold.records, 5)}{'+' if gold.records >= 5 else ''}")
    event(f"loads {min(len(obs.loads), 3)}{'+' if len(obs.loads) >= 3 else ''}")
    event(f"picks {min(len(obs.picks), 2)}{'+' if len(obs.picks) >= 2 else ''}")
    event(f"puts {min(len(obs.puts), 2)}{'+' if len(obs.puts) >= 2 else ''}")
    event(f"a put after a load: {any(obs.put_after)}")
    nx = sum(isinstance(r, LoadX) for r in recs[:gold.records])
    event(f"LOADX issued {min(nx, 2)}{'+' if nx >= 2 else ''}")
    if gold.err_cause in (Cause.BAD_LOAD, Cause.BAD_PICK):
        event(f"{Cause(gold.err_cause).name} {gold.err_info}")
    if gold.err_cause == Cause.LOAD_STATUS:
        event(f"LOAD_STATUS {'mid-record' if len(obs.engine) + len(obs.kv) + len(obs.loads) > len(gold.engine) + len(gold.kv) + len(gold.loads) else 'between records'}")


# ---------------------------------------------------------------- directed: every cause
I = dict(op=6, a=3, b=7, kvb=100, meta=0x55)
CASES = {  # name: (records, length (None: all), setup, cause, index, info)
    "illegal_kind": ([Mark(1), Raw(11), End()], None, Cause.ILLEGAL_KIND, 1, 11),
    "nwords": ([Raw(Kind.WAIT, 1, 0, (0,)), End()], None, Cause.BAD_LENGTH, 0, Kind.WAIT | 1 << 8),
    "past_len": ([Mark(2), Engine(instr(**I)), End()], 6, Cause.BAD_LENGTH, 1, Kind.ENGINE | 7 << 8),
    "no_end": ([Mark(3), Engine(instr(**I))], 9, Cause.NO_END, 2, 0),
    "kv_unknown": ([EngineKV(instr(**I), 0x0300)], None, Cause.KV_STATE, 0, Status.UNKNOWN),
    "kv_state_mask": ([EngineKV(instr(**I), 0x0203, mask=1 << State.OWNER)], None, Cause.KV_STATE, 0,
                      State.INSTALLING << 4),
    "kv_status": ([KvCmd(Opcode.ALLOC_OWNER, 0x0001, Status.OK)], None, Cause.KV_STATUS, 0,
                  Status.EXISTS | State.OWNER << 4),
    "patch_mode0": ([EngineKV(instr(**I), 0x0001, 0)], None, Cause.BAD_PATCH, 0, 0),
    "patch_mode3": ([EngineKV(instr(**I), 0x0001, 3)], None, Cause.BAD_PATCH, 0, 3),
    "patch_overflow": ([EngineKV(instr(**I | dict(kvb=0xFFFF - SLOT_ROWS + 1)), 0x0102, Patch.KVB_ROWS)], None,
                       Cause.BAD_PATCH, 0, Patch.KVB_ROWS | 1 << 4),
    "bad_counter": ([Wait(N_COUNTERS, 0)], None, Cause.BAD_COUNTER, 0, N_COUNTERS),
    "wait_watchdog": ([Mark(5, True), Wait(1, 10), End()], None, Cause.WATCHDOG, 1, Kind.WAIT),
    "wait_kv_watchdog": ([WaitKV(0x0203, 1 << State.REPLICA_VALID), End()], None, Cause.WATCHDOG, 0, Kind.WAIT_KV),
}


@pytest.mark.parametrize("name", CASES)
def test_error_causes(name):
    recs, length, cause, index, info = CASES[name]
    dut = make_dut()
    s = encode(recs + [Mark(0xDEAD), End()])
    obs, mem = simulate(dut, s, setup=SETUP, length=length, watchdog=60, eng_ready=0.5, kv_ready=0.5)
    gold = expect(dut, s, obs, mem, setup=SETUP, length=length, watchdog=60, counters_final=[0] * N_COUNTERS)
    assert (gold.err_cause, gold.err_index, gold.err_info) == (cause, index, info)
    assert obs.regs["status"] == 4 and obs.regs["mark"] != 0xDEAD


def test_patch_edges_and_good_kinds():
    """kvb + slot * slot_rows = 0xFFFF exactly is no overflow; mode 1 puts the slot in b."""
    dut = make_dut()
    recs = [EngineKV(instr(**I | dict(kvb=0xFFFF - SLOT_ROWS)), 0x0102, Patch.KVB_ROWS),
            EngineKV(instr(**I), 0x0203, Patch.SLOT_B, 1 << State.INSTALLING), End()]
    s = encode(recs)
    obs, mem = simulate(dut, s, setup=SETUP)
    expect(dut, s, obs, mem, setup=SETUP)
    from mcf_fpga.spec.instr import instr_fields
    assert [instr_fields(v)["kvb"] for v in obs.engine] == [0xFFFF, 100]
    assert [instr_fields(v)["b"] for v in obs.engine] == [7, 2]


@pytest.mark.parametrize("base,info", [(MEM_BASE + 4, 1), (MEM_BASE - 8, 3), (MEM_BASE + MEM_SIZE - 8, 3)])
def test_bad_addr_refused(base, info):
    dut = make_dut()
    s = encode([Mark(1), End()])
    obs, mem = simulate(dut, s, base=base)
    expect(dut, s, obs, mem, base=base)
    assert obs.regs["err_cause"] == Cause.BAD_ADDR and obs.regs["err_info"] == info
    assert mem.log == [] and obs.irqs == 1


def test_zero_length_refused():
    dut = make_dut()
    s = encode([End()])
    obs, mem = simulate(dut, s, length=0)
    assert (obs.regs["err_cause"], obs.regs["err_info"], mem.log) == (Cause.BAD_ADDR, 2, [])


@pytest.mark.parametrize("resp", [Resp.SLVERR, Resp.DECERR])
def test_axi_error_beat(resp):
    """A failing beat under a needed word stops with AXI; one after END does not matter."""
    dut = make_dut()
    recs = [Mark(1), Engine(instr(**I)), Engine(instr(**I)), End()]
    s = encode(recs)
    bad = MEM_BASE + 8 * 10 & ~15                   # inside the second ENGINE's payload
    obs, mem = simulate(dut, s, errors=[(bad, bad + 16, resp)], eng_ready=0.3)
    gold = expect(dut, s, obs, mem)
    assert (gold.err_cause, gold.err_index, gold.err_info, len(obs.engine)) == (Cause.AXI, 2, resp, 1)
    s2 = encode([Mark(1), End()]) + bytes(64)
    obs, mem = simulate(dut, s2, errors=[(MEM_BASE + 32, MEM_BASE + 48, resp)])
    assert obs.regs["status"] == 2 and any(r[4] == resp for r in mem.log)


# ---------------------------------------------------------------- directed: time
def test_wait_is_wrap_safe():
    """counter - target as a signed 32-bit value: a target just past the wrap blocks until the
    counter wraps to it; a target 'behind' across the wrap is already reached."""
    dut = make_dut()
    s = encode([Wait(0, 2), Engine(instr(**I)), Wait(1, 2 ** 32 - 10), Engine(instr(**I)), End()])
    obs, mem = simulate(dut, s, counters=[2 ** 32 - 5, 5, 0, 0], schedule=[(150, 0, 1), (250, 0, 3)])
    expect(dut, s, obs, mem, counters_final=[3, 5, 0, 0])
    assert obs.engine_cycles[0] > 250                  # not before the counter reached 2 (after the wrap)
    assert obs.engine_cycles[1] - obs.engine_cycles[0] < 20   # -10 is behind 5: no wait


def test_wait_kv_polls_until_committed():
    """WAIT_KV polls LOOKUP at most every poll_gap cycles until the entry turns valid."""
    dut = make_dut(poll_gap=9)
    kid = 0x0203
    s = encode([WaitKV(kid, 1 << State.REPLICA_VALID), EngineKV(instr(**I), kid, Patch.SLOT_B), End()])
    obs, mem = simulate(dut, s, setup=SETUP, pool_actions=[(300, Opcode.COMMIT_INSTALL, kid)], watchdog=0,
                        kv_ready=0.6, resp_delay=2)
    polls, all_kv = obs.kv[:-1], obs.kv
    obs.kv = all_kv[-2:]                                # golden: the satisfied poll, then ENGINE_KV's lookup
    gold = expect(dut, s, obs, mem, setup=SETUP + [(Opcode.COMMIT_INSTALL, kid)], watchdog=0)
    assert len(polls) > 5 and set(polls) == {(Opcode.LOOKUP, kid)} and obs.kv_cycles[-2] >= 300
    gaps = [b - a for a, b in zip(obs.kv_cycles, obs.kv_cycles[1:-1])]
    assert min(gaps) >= 9, gaps
    assert gold.done


def test_watchdog_on_a_blocked_output():
    """The engine does not take the instruction: WATCHDOG is reported at once (error while still
    running), the beat stays offered (stream contract) and is delivered when taken; then stop."""
    dut = make_dut()
    s = encode([Mark(4), Engine(instr(**I)), Mark(9), End()])
    obs, mem = simulate(dut, s, watchdog=40, eng_ready=lambda c: c > 400)
    assert 0b101 in obs.status_seen                     # running + error
    assert obs.regs == dict(status=4, records=1, err_cause=Cause.WATCHDOG, err_index=1, err_info=Kind.ENGINE,
                            mark=4)
    assert obs.engine == [instr(**I)] and obs.engine_cycles[0] > 400 and obs.irqs == 1


def test_watchdog_on_a_late_answer_then_restart():
    """The pool answers after the watchdog: WATCHDOG; the late answer is dropped, not taken as the
    answer of the next run's command (which expects EXISTS from a second ALLOC_OWNER)."""
    dut = make_dut()
    s1 = encode([KvCmd(Opcode.ALLOC_OWNER, 0x0005, Status.OK), End()])
    s2 = encode([KvCmd(Opcode.ALLOC_OWNER, 0x0005, Status.EXISTS), Mark(2), End()])
    a2 = MEM_BASE + 0x100
    obs, mem = simulate(dut, s1 + bytes(0x100 - len(s1)) + s2, resp_delay=80,
                        runs=[dict(length=len(s1) // 8, watchdog=30), dict(base=a2, length=len(s2) // 8, watchdog=0)])
    r1, r2 = obs.runs
    assert (r1["err_cause"], r1["err_info"], r1["status"]) == (Cause.WATCHDOG, Kind.KVCMD, 4)
    assert r2 == dict(status=2, records=3, err_cause=0, err_index=0, err_info=0, mark=2)
    assert obs.kv == [(Opcode.ALLOC_OWNER, 5)] * 2
    assert obs.starts == 2                   # `started`: one cycle per run


def test_start_while_running_changes_nothing():
    """CTRL.start (with a new BASE and LEN) while running is ignored: the run goes on as golden's."""
    dut = make_dut()
    s = encode([Mark(1), Wait(0, 5), Engine(instr(**I)), Mark(2), End()])
    obs, mem = simulate(dut, s, counters=[0] * N_COUNTERS, schedule=[(300, 0, 5)],
                        writes=[(60, BASE_LO, MEM_BASE + 0x100), (80, LEN, 1), (100, CTRL, CTRL_START)])
    gold = expect(dut, s, obs, mem, counters_final=[5, 0, 0, 0])
    assert gold.done and obs.irqs == 1
    assert obs.starts == 1, "`started` pulses once per accepted start, not for one written while running"


def test_abort_stops_cleanly():
    """Abort during a WAIT that would block for ever: ABORT at that record, no further output, the
    prefetched and in-flight beats drained (simulate checks the bus is idle)."""
    dut = make_dut(fifo_depth=32)
    recs = [Engine(instr(**I)), Wait(0, 100)] + [Engine(instr(**I))] * 6 + [End()]
    s = encode(recs)
    obs, mem = simulate(dut, s, watchdog=0, abort_at=200, latency=30)
    assert obs.regs == dict(status=4, records=1, err_cause=Cause.ABORT, err_index=1, err_info=Kind.WAIT, mark=0)
    assert len(obs.engine) == 1 and obs.irqs == 1


def test_stop_drains_in_flight_reads_then_restart():
    """An error on the first record while bursts are in flight (long latency): running falls only
    once every beat is in (the monitor in ``simulate``), and nothing of them reaches the next run."""
    dut = make_dut(fifo_depth=32)
    bad = encode([Raw(11)] + [Engine(instr(**I | dict(a=k))) for k in range(6)] + [End()])
    good = encode([Engine(instr(**I | dict(a=99))), Mark(3), End()])
    a2 = MEM_BASE + 0x200
    obs, mem = simulate(dut, bad + bytes(0x200 - len(bad)) + good, latency=40, rate=2,
                        runs=[dict(length=len(bad) // 8), dict(base=a2, length=len(good) // 8)])
    assert obs.runs[0]["err_cause"] == Cause.ILLEGAL_KIND and obs.runs[1]["status"] == 2
    assert obs.engine == [instr(**I | dict(a=99))]
    assert sum(1 + log[3] for log in mem.log if log[2] < a2) > 4      # beats were in flight at the error


# ---------------------------------------------------------------- with the real KV pool
class PoolBench(wiring.Component):
    """CommandFetcher with its KV port on a hardware KVPool (cam)."""

    def __init__(self):
        self.fetch = make_dut()
        self.pool = KVPool(N_SLOTS, 64, max_readers=3)
        super().__init__({"m_axi": Out(AXI4Signature(32, 128, 4)), "engine_cmd": Out(stream.Signature(INSTR)),
                          "counters": In(data.ArrayLayout(32, N_COUNTERS)), "irq": Out(1),
                          "csr": In(AXI4LiteSignature(6, 32))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.fetch, m.submodules.pool = f, p = self.fetch, self.pool
        wiring.connect(m, f.kv_cmd, p.cmd)
        wiring.connect(m, p.resp, f.kv_resp)
        for name in ("m_axi", "engine_cmd", "csr"):
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(f, name))
        m.d.comb += [f.counters.eq(self.counters), self.irq.eq(f.irq), p.csr.ar.valid.eq(0), p.csr.aw.valid.eq(0),
                     p.csr.w.valid.eq(0), p.nic.valid.eq(0)]
        return m


def test_with_hardware_kv_pool():
    """The same stream against hdl.kvpool.KVPool: allocate, acquire, patch from the slots it chose,
    release, free -- the instructions and registers golden predicts."""
    bench = PoolBench()
    recs = [KvCmd(Opcode.ALLOC_OWNER, 0x0102), KvCmd(Opcode.INSTALL_REPLICA, 0x0203),
            KvCmd(Opcode.BEGIN_INSTALL, 0x0300), KvCmd(Opcode.COMMIT_INSTALL, 0x0300),
            WaitKV(0x0300, 1 << State.REPLICA_VALID), KvCmd(Opcode.ACQUIRE, 0x0203),
            EngineKV(instr(**I), 0x0203, Patch.SLOT_B, 1 << State.REPLICA_VALID),
            EngineKV(instr(**I), 0x0300, Patch.KVB_ROWS, 1 << State.REPLICA_VALID),
            KvCmd(Opcode.FREE_OWNER, 0x0203, Status.NOT_OWNER), KvCmd(Opcode.RELEASE, 0x0203),
            KvCmd(Opcode.INVALIDATE, 0x0203), EngineKV(instr(**I), 0x0203), Mark(1), End()]
    s = encode(recs)
    mem = AXI4Memory(MEM_SIZE, data_width=128, base=MEM_BASE, latency=8)
    mem.load(MEM_BASE, s)
    got, regs = [], {}

    async def sink(ctx):
        ctx.set(bench.engine_cmd.ready, 1)
        async for _, _, v, p in ctx.tick().sample(bench.engine_cmd.valid, bench.engine_cmd.payload):
            if v:
                got.append(int(p.as_value().value))

    async def host(ctx):
        bus = AXI4LiteMaster(bench.csr)
        for off, v in ((BASE_LO, MEM_BASE), (LEN, len(s) // 8), (WATCHDOG, 1000), (CTRL, CTRL_START)):
            await bus.write(ctx, off, v)
        await ctx.tick().repeat(3)
        while (await bus.read(ctx, STATUS))[0] & 1:
            pass
        for name, off in (("status", STATUS), ("records", RECORDS), ("err_cause", ERR_CAUSE),
                          ("err_index", ERR_INDEX), ("err_info", ERR_INFO)):
            regs[name] = (await bus.read(ctx, off))[0]

    run_simulation(bench, [host], background=[mem.testbench(bench.m_axi), sink], max_cycles=20_000)
    gold = run_for(bench.fetch, s, pool=twin_of(bench.pool), counters=[0] * N_COUNTERS, watchdog=1000,
                   base=MEM_BASE)
    assert got == gold.engine and len(got) == 2
    assert regs == dict(status=gold.status(), records=gold.records, err_cause=gold.err_cause,
                        err_index=gold.err_index, err_info=gold.err_info)
    assert gold.err_cause == Cause.KV_STATE and gold.err_index == 11    # the invalidated replica is gone


# ---------------------------------------------------------------- loads, their statuses, the doorbell
LA = MEM_BASE + 0x800         # a load's address (any: the loader is a model)
LOAD_CASES = {  # name: (records, cause, index, info) -- BAD_LOAD: nothing offered on ``load``
    "dest": ([Mark(1), Load(2, 1, LA)], 1, 1),
    "dest3": ([Load(3, 1, LA)], 0, 1),
    "count": ([Load(Dest.SP, 4, LA), Load(Dest.W, 0, LA)], 1, 2),
    "addr": ([Load(Dest.SP, 4, 1 << 32)], 0, 3),          # addr_width = 32
    "addr_top": ([Mark(2), Load(Dest.W, 1, 2 ** 64 - 1)], 1, 3),
}


@pytest.mark.parametrize("name", LOAD_CASES)
def test_bad_load(name):
    recs, index, info = LOAD_CASES[name]
    dut = make_dut()
    s = encode(recs + [Mark(0xDEAD), End()])
    obs, mem = simulate(dut, s)
    expect(dut, s, obs, mem)
    assert (obs.regs["err_cause"], obs.regs["err_index"], obs.regs["err_info"]) == (Cause.BAD_LOAD, index, info)
    assert obs.loads == [(Dest.SP, LA, 4)] * (name == "count") and obs.loads_reg == len(obs.loads)


def test_loads_issued_and_end_waits_for_their_statuses():
    """Descriptors go out in order under back-pressure (dest, addr, count as written); END is done
    only after the last status came (it arrives while END waits: RECORDS = END's index)."""
    dut = make_dut()
    recs = [Load(Dest.W, 3, LA), Mark(1), Load(Dest.SP, 2 ** 32 - 1, 0xFFFFFFF8), End()]
    s = encode(recs)
    obs, mem = simulate(dut, s, load_ready=0.3, status_delay=(150, 150))
    expect(dut, s, obs, mem)
    assert obs.loads == [(Dest.W, LA, 3), (Dest.SP, 0xFFFFFFF8, 2 ** 32 - 1)] and obs.loads_reg == 2
    assert obs.regs["status"] == 2 and obs.regs["records"] == 4
    assert [at for _, at in obs.statuses] == [3, 3]        # both came while END (record 3) waited


def test_end_watchdog_when_a_status_never_comes():
    dut = make_dut()
    s = encode([Load(Dest.W, 3, LA), Load(Dest.SP, 1, LA), End()])
    obs, mem = simulate(dut, s, load_codes=[DmaStatus.OK, None], watchdog=80)
    expect(dut, s, obs, mem, watchdog=80)
    assert obs.regs == dict(status=4, records=2, err_cause=Cause.WATCHDOG, err_index=2, err_info=Kind.END, mark=0)
    assert obs.loads_reg == 2 and [c for c, _ in obs.statuses] == [DmaStatus.OK]


def test_load_status_error_info():
    """A failing status: LOAD_STATUS, ERR_INFO = code | the load's number << 8, ERR_INDEX = RECORDS
    when it came (here during the WAIT after it); nothing more is output."""
    dut = make_dut()
    s = encode([Load(Dest.W, 1, LA), Load(Dest.SP, 2, LA + 64), Wait(0, 100), Engine(instr(**I)), End()])
    obs, mem = simulate(dut, s, load_codes=[DmaStatus.OK, DmaStatus.DECERR], watchdog=0,
                        counters=[0] * N_COUNTERS, schedule=[(400, 0, 100)])
    expect(dut, s, obs, mem, watchdog=0, counters_final=[100, 0, 0, 0])
    assert obs.regs == dict(status=4, records=2, err_cause=Cause.LOAD_STATUS, err_index=2,
                            err_info=DmaStatus.DECERR | 1 << 8, mark=0)
    assert obs.engine == [] and obs.irqs == 1


def test_load_status_while_an_output_is_blocked():
    """A failing status while an engine beat is offered: the error shows at once (running +
    error), the beat stays offered and is delivered when taken, then the stop."""
    dut = make_dut()
    s = encode([Load(Dest.SP, 1, LA), Engine(instr(**I)), Mark(3), End()])
    obs, mem = simulate(dut, s, load_codes=[DmaStatus.SLVERR], status_delay=(60, 60), eng_ready=lambda c: c > 300)
    expect(dut, s, obs, mem)
    assert 0b101 in obs.status_seen
    assert obs.regs == dict(status=4, records=1, err_cause=Cause.LOAD_STATUS, err_index=1,
                            err_info=DmaStatus.SLVERR, mark=0)
    assert obs.engine == [instr(**I)] and obs.engine_cycles[0] > 300


def test_stray_statuses_are_dropped():
    """Statuses when no load is outstanding (before any load, between loads) change nothing, even
    failing ones; the run's own load still gets its status counted."""
    dut = make_dut()
    s = encode([Wait(0, 5), Load(Dest.W, 2, LA), Wait(0, 9), End()])
    obs, mem = simulate(dut, s, counters=[0] * N_COUNTERS, schedule=[(200, 0, 5), (400, 0, 9)],
                        strays=[(100, DmaStatus.SLVERR), (120, 0), (350, DmaStatus.DECERR)], status_delay=(5, 5))
    expect(dut, s, obs, mem, counters_final=[9, 0, 0, 0])
    assert obs.regs["status"] == 2 and obs.loads_reg == 1


def test_doorbell_register_and_port():
    """DOORBELL: RW (read back), driven on the ``doorbell`` port, cleared by a start (also a
    refused one), writable while running."""
    dut = make_dut()
    s = encode([Wait(0, 1), End()])
    mem = AXI4Memory(MEM_SIZE, data_width=128, base=MEM_BASE, latency=4)
    mem.load(MEM_BASE, s)
    seen = []

    async def host(ctx):
        bus = AXI4LiteMaster(dut.csr)

        async def doorbell():
            v = (await bus.read(ctx, DOORBELL))[0]
            seen.append((v, ctx.get(dut.doorbell)))
        await bus.write(ctx, DOORBELL, 0xCAFEF00D)
        await doorbell()
        for off, v in ((BASE_LO, MEM_BASE), (LEN, len(s) // 8), (CTRL, CTRL_START)):
            await bus.write(ctx, off, v)
        await doorbell()                                     # cleared by the start
        await bus.write(ctx, DOORBELL, 7)
        await doorbell()                                     # written while running
        ctx.set(dut.counters[0], 1)
        while (await bus.read(ctx, STATUS))[0] & 1:
            pass
        await doorbell()                                     # the stop leaves it
        await bus.write(ctx, BASE_LO, MEM_BASE + 4)
        await bus.write(ctx, CTRL, CTRL_START)               # refused (BAD_ADDR), still a start
        await doorbell()
        assert (await bus.read(ctx, ERR_CAUSE))[0] == Cause.BAD_ADDR

    run_simulation(dut, [host], background=[mem.testbench(dut.m_axi)], max_cycles=5_000)
    assert seen == [(0xCAFEF00D,) * 2, (0, 0), (7, 7), (7, 7), (0, 0)]


# ---------------------------------------------------------------- PICK and LOADX (the on-node greedy pick)
def test_loadx_address_arithmetic_with_large_token_and_stride():
    """addr + tokens[slot] * stride in full (a 32x32-bit product, no wrap): the largest token and
    stride that still fit, exactly at the top of the 32-bit bus, the slot picked (not its
    neighbours), a zero token, and one byte past the bus -> BAD_LOAD 3 (the index added)."""
    tokens = [3, 0xFFFF, 0, 0xFFFFFFFF]
    dut = make_dut(pick_slots=4)
    top = 2 ** 32 - 1
    recs = [LoadX(Dest.W, 7, 0, 0x1_0001, 1),                      # 0xFFFF * 0x10001 = 0xFFFFFFFF exactly
            LoadX(Dest.SP, 1, 0x1234, 2 ** 32 - 1, 2),              # token 0: the base address itself
            LoadX(Dest.W, 2, 0, 1, 3),                              # 0xFFFFFFFF * 1: the bus's last byte
            LoadX(Dest.SP, 3, 1000, 48, 0),
            Mark(1), LoadX(Dest.W, 1, 1, 1, 3), Mark(2), End()]     # 1 + 0xFFFFFFFF = 2**32: refused
    s = encode(recs)
    obs, mem = simulate(dut, s, tokens=tokens, load_ready=0.4)
    expect(dut, s, obs, mem, tokens=tokens)
    assert obs.loads == [(Dest.W, top, 7), (Dest.SP, 0x1234, 1), (Dest.W, top, 2), (Dest.SP, 1000 + 3 * 48, 3)]
    assert obs.loads_reg == 4
    assert (obs.regs["err_cause"], obs.regs["err_index"], obs.regs["err_info"], obs.regs["mark"]) == \
        (Cause.BAD_LOAD, 5, 3, 1)


def test_loadx_wide_bus_product_is_not_truncated():
    """On a 40-bit bus: 0xFFFFFFFF * 0xFF + addr lands above 2**32 (the product's upper word counts)."""
    tokens = [0xFFFFFFFF]
    dut = make_dut(addr_width=40, pick_slots=1)
    s = encode([LoadX(Dest.SP, 5, 0x100, 0xFF, 0), LoadX(Dest.W, 1, 0, 0x101, 0), End()])
    obs, mem = simulate(dut, s, tokens=tokens)
    expect(dut, s, obs, mem, tokens=tokens)
    assert obs.loads == [(Dest.SP, 0x100 + 0xFFFFFFFF * 0xFF, 5)]
    assert (obs.regs["err_cause"], obs.regs["err_index"], obs.regs["err_info"]) == (Cause.BAD_LOAD, 1, 3)


LOADX_CASES = {  # name: (records, index, BAD_LOAD info) with pick_slots = 3
    "dest": ([Mark(1), LoadX(2, 1, LA, 4, 0)], 1, 1),
    "count": ([LoadX(Dest.W, 0, LA, 4, 9)], 0, 2),                 # count before slot
    "slot": ([LoadX(Dest.W, 1, 2 ** 40, 4, 3)], 0, 4),             # slot before the address
    "slot15": ([Mark(1), LoadX(Dest.SP, 1, LA, 4, 15)], 1, 4),
    "addr": ([LoadX(Dest.W, 1, 2 ** 32, 0, 0)], 0, 3),
    "addr_index": ([LoadX(Dest.W, 1, 0x10, 0x1_0001, 1)], 0, 3),  # 0x10 + 0xFFFF * 0x10001 = 2**32 + 0xF
    "addr_top_word": ([LoadX(Dest.W, 1, 0, 2 ** 31, 2)], 0, 3),    # 2 * 2**31 = 2**32
}


@pytest.mark.parametrize("name", LOADX_CASES)
def test_bad_loadx(name):
    recs, index, info = LOADX_CASES[name]
    dut = make_dut(pick_slots=3)
    s = encode(recs + [Mark(0xDEAD), End()])
    obs, mem = simulate(dut, s, tokens=[1, 0xFFFF, 2])
    expect(dut, s, obs, mem, tokens=[1, 0xFFFF, 2])
    assert (obs.regs["err_cause"], obs.regs["err_index"], obs.regs["err_info"]) == (Cause.BAD_LOAD, index, info)
    assert obs.loads == [] and obs.loads_reg == 0


def test_loadx_is_a_load_for_statuses_and_end():
    """LOADX descriptors count in LOADS, get numbered with the LOADs for LOAD_STATUS, and END waits for them."""
    dut = make_dut()
    s = encode([Load(Dest.W, 1, LA), LoadX(Dest.SP, 2, LA, 64, 2), Wait(0, 100), End()])
    obs, mem = simulate(dut, s, tokens=[0, 0, 5, 0], load_codes=[DmaStatus.OK, DmaStatus.SLVERR], watchdog=0,
                        counters=[0] * N_COUNTERS, schedule=[(400, 0, 100)])
    expect(dut, s, obs, mem, tokens=[0, 0, 5, 0], watchdog=0, counters_final=[100, 0, 0, 0])
    assert obs.loads == [(Dest.W, LA, 1), (Dest.SP, LA + 5 * 64, 2)]
    assert obs.regs == dict(status=4, records=2, err_cause=Cause.LOAD_STATUS, err_index=2,
                            err_info=DmaStatus.SLVERR | 1 << 8, mark=0)
    s = encode([LoadX(Dest.SP, 2, LA, 64, 2), End()])
    obs, mem = simulate(dut, s, tokens=[0, 0, 5, 0], status_delay=(120, 120))
    expect(dut, s, obs, mem, tokens=[0, 0, 5, 0])
    assert obs.regs["status"] == 2 and [at for _, at in obs.statuses] == [1] and obs.loads_reg == 1


def test_pick_beats_under_back_pressure():
    """PICK offers {frame, skip, n, slot} verbatim (every field at its extremes), in order with the
    other outputs, under back-pressure; the record completes only when the beat is taken."""
    dut = make_dut(pick_slots=16)
    picks = [Pick(0xFFFFFFFF, 0, 1, 15), Pick(0, 0xFFFFFFFF, 0xFFFFFFFF, 0), Pick(0x12345678, 7, 151936, 9, 1)]
    s = encode([picks[0], Mark(1), picks[1], Engine(instr(**I)), picks[2], Mark(2), End()])
    obs, mem = simulate(dut, s, pick_ready=0.15, eng_ready=0.5)
    expect(dut, s, obs, mem)
    assert obs.picks == [(p.frame, p.skip, p.n, p.slot, p.mode) for p in picks]
    assert obs.regs["status"] == 2 and obs.regs["records"] == 7 and obs.regs["mark"] == 2
    assert obs.pick_cycles[2] > obs.engine_cycles[0]


@pytest.mark.parametrize("rec,index,info", [(Pick(0, 0, 1, 4), 0, 1), (Pick(0, 0, 1, 15), 0, 1),
                                            (Pick(0, 0, 0, 0), 0, 2), (Pick(0, 0, 0, 0, 1), 0, 2),
                                            (Pick(0, 0, 3, 0, 1), 0, 3), (Pick(0, 0, 2 ** 32 - 1, 3, 1), 0, 3),
                                            (Put(4, 0), 0, 1), (Put(15, 1, 7), 0, 1)])
def test_bad_pick(rec, index, info):
    dut = make_dut(pick_slots=4)
    s = encode([rec, Mark(0xDEAD), End()])
    obs, mem = simulate(dut, s)
    expect(dut, s, obs, mem)
    assert (obs.regs["err_cause"], obs.regs["err_index"], obs.regs["err_info"]) == (Cause.BAD_PICK, index, info)
    assert obs.picks == [] and obs.regs["mark"] == 0


def test_pick_blocked_beyond_watchdog():
    """The picker does not take the beat: WATCHDOG with the PICK's index and kind, shown at once
    (running + error); the beat stays offered and is delivered when taken; nothing after it."""
    dut = make_dut()
    s = encode([Mark(4), Engine(instr(**I)), Pick(0x40, 2, 100, 1), Mark(9), End()])
    obs, mem = simulate(dut, s, watchdog=40, pick_ready=lambda c: c > 400)
    assert 0b101 in obs.status_seen
    assert obs.regs == dict(status=4, records=2, err_cause=Cause.WATCHDOG, err_index=2, err_info=Kind.PICK,
                            mark=4)
    assert obs.picks == [(0x40, 2, 100, 1, 0)] and obs.pick_cycles[0] > 400 and obs.irqs == 1


@pytest.mark.filterwarnings("ignore:.*created but never used")
def test_pick_slots_range():
    for bad in (-1, 17, 4.0, True):
        with pytest.raises(ValueError, match=r"pick_slots must be in 0\.\.16"):
            make_dut(pick_slots=bad)
    members = make_dut(pick_slots=16).signature.members
    assert members["tokens"].shape.length == members["values"].shape.length == 16


# ---------------------------------------------------------------- PUT (a picked token into the scratchpad)
@given(seed=st.integers(0, 2 ** 64 - 1), pick_slots=st.sampled_from([1, 3, 16]),
       load_ready=st.sampled_from([1.0, 0.3]), status_delay=st.sampled_from([0, 8, (30, 90)]),
       put_ready=st.sampled_from([1.0, 0.5, 0.1]), pick_ready=st.sampled_from([1.0, 0.3]))
def test_random_puts_among_loads_match_golden(seed, pick_slots, load_ready, status_delay, put_ready, pick_ready):
    """Streams of PUT, LOAD, LOADX, PICK (both modes), ENGINE and MARK records, mostly valid (a bad
    slot, a PAIRS pick with an odd n or a failing load status now and then), under random
    back-pressure on every output and random status delays: golden's words, beats and registers,
    and every PUT taken after exactly the descriptors before it (``expect``)."""
    rng = random.Random(seed)
    tokens = [rng.choice([0, 1, rng.getrandbits(12), 2 ** 32 - 1]) for _ in range(pick_slots)]
    values = [rng.choice([0, 2 ** 31, rng.getrandbits(32), 2 ** 32 - 1]) for _ in range(pick_slots)]
    recs = []
    for _ in range(rng.randint(1, 12)):
        k = rng.choice(["put", "put", "put", "load", "load", "loadx", "pick", "engine", "mark"])
        fault = rng.random() < 1 / 16
        slot = rng.randrange(pick_slots, 16) if fault and pick_slots < 16 else rng.randrange(pick_slots)
        if k == "put":
            recs.append(Put(slot, rng.randrange(2), rng.choice([0, 1, 2 ** 32 - 1, rng.getrandbits(32)])))
        elif k == "load":
            recs.append(Load(rng.choice(list(Dest)), rng.choice([1, 5, 2 ** 32 - 1]), rng.getrandbits(32)))
        elif k == "loadx":
            stride = rng.getrandbits(8) if slot >= pick_slots or tokens[slot] < 2 ** 16 else 0   # the sum fits
            recs.append(LoadX(rng.choice(list(Dest)), rng.randint(1, 9), rng.getrandbits(16), stride, slot))
        elif k == "pick":
            mode = rng.randrange(2)
            n = rng.choice([1, 3]) if fault and mode else 2 * rng.randint(1, 1000) - (not mode and rng.randrange(2))
            recs.append(Pick(rng.getrandbits(32), rng.getrandbits(8), n, slot if not (fault and mode) else 0, mode))
        elif k == "engine":
            recs.append(Engine(rng.getrandbits(INSTR.size)))
        else:
            recs.append(Mark(rng.getrandbits(32)))
    recs.append(End())
    s = encode(recs)
    dut = make_dut(pick_slots=pick_slots)
    codes = [DmaStatus.OK if rng.random() < 0.95 else DmaStatus.SLVERR for _ in range(16)]
    obs, mem = simulate(dut, s, tokens=tokens, values=values, seed=seed, load_ready=load_ready, load_codes=codes,
                        status_delay=status_delay, put_ready=put_ready, pick_ready=pick_ready, eng_ready=0.7)
    gold = expect(dut, s, obs, mem, tokens=tokens, values=values)
    event(f"{'done' if gold.done else Cause(gold.err_cause).name}")
    event(f"puts {min(len(obs.puts), 3)}{'+' if len(obs.puts) >= 3 else ''}")
    event(f"a put after a load: {any(obs.put_after)}")


def test_put_words_under_back_pressure():
    """PUT offers (src ? values : tokens)[slot] + add mod 2**32 on ``put``: each source, the slot
    named (not its neighbours), add 0, a carry out of bit 31 dropped, every slot of 16."""
    tokens = [7, 0xFFFFFFFF] + [100 + i for i in range(14)]
    values = [0x80000000, 5] + [0xFFFF0000 | i for i in range(14)]
    dut = make_dut(pick_slots=16)
    recs = [Put(0, 0), Mark(1), Put(1, 0, 1), Put(0, 1, 0x80000000), Put(1, 1, 0xFFFFFFFF), Engine(instr(**I)),
            Put(15, 0, 0x1000), Put(15, 1), End()]
    s = encode(recs)
    obs, mem = simulate(dut, s, tokens=tokens, values=values, put_ready=0.2, eng_ready=0.5)
    gold = expect(dut, s, obs, mem, tokens=tokens, values=values)
    assert obs.puts == [7, 0, 0, 4, 113 + 0x1000, 0xFFFF000D] == gold.puts
    assert obs.regs["status"] == 2 and obs.regs["records"] == len(recs) and obs.loads_reg == 0


def test_put_in_stream_order_without_waiting_for_the_loads():
    """A PUT is offered after the earlier descriptors were taken and before the next one is issued,
    without waiting for the loads' statuses (the loader queues the word behind their units: a
    stream may feed one SPW from a LOAD and a PUT); END still waits for every load. PUT is not
    counted in LOADS."""
    dut = make_dut(pick_slots=2)
    recs = [Load(Dest.SP, 3, LA), LoadX(Dest.W, 1, LA, 16, 1), Put(1, 0, 2), Load(Dest.SP, 2, LA + 64),
            Put(0, 1), End()]
    s = encode(recs)
    obs, mem = simulate(dut, s, tokens=[0, 9], values=[0x55, 0], status_delay=(150, 150), put_ready=0.5)
    expect(dut, s, obs, mem, tokens=[0, 9], values=[0x55, 0])
    assert obs.puts == [11, 0x55] and obs.put_after == [2, 3]
    assert [at for _, at in obs.statuses] == [5, 5, 5]        # all came while END waited
    assert obs.loads_reg == 3 and obs.regs["status"] == 2 and obs.regs["records"] == 6


def test_load_status_fails_while_a_put_is_offered():
    """A failing status while the put word waits to be taken: LOAD_STATUS at the PUT, shown at
    once; the word is still delivered when taken, nothing after it."""
    dut = make_dut()
    s = encode([Load(Dest.SP, 1, LA), Put(0, 1, 5), Mark(1), End()])
    obs, mem = simulate(dut, s, load_codes=[DmaStatus.DECERR], status_delay=(30, 30), values=[1, 0, 0, 0],
                        put_ready=lambda c: c > 300)
    expect(dut, s, obs, mem, values=[1, 0, 0, 0])
    assert 0b101 in obs.status_seen
    assert obs.regs == dict(status=4, records=1, err_cause=Cause.LOAD_STATUS, err_index=1,
                            err_info=DmaStatus.DECERR, mark=0)
    assert obs.puts == [6] and obs.put_cycles[0] > 300


def test_put_blocked_beyond_watchdog():
    """The scratchpad does not take the word: WATCHDOG with the PUT's index and kind, shown at once;
    the word stays offered and is delivered when taken; nothing after it."""
    dut = make_dut()
    s = encode([Mark(4), Put(3, 1, 1), Mark(9), End()])
    obs, mem = simulate(dut, s, watchdog=40, values=[0, 0, 0, 41], put_ready=lambda c: c > 400)
    assert 0b101 in obs.status_seen
    assert obs.regs == dict(status=4, records=1, err_cause=Cause.WATCHDOG, err_index=1, err_info=Kind.PUT,
                            mark=4)
    assert obs.puts == [42] and obs.put_cycles[0] > 400 and obs.irqs == 1


@pytest.mark.filterwarnings("ignore:.*created but never used")
@pytest.mark.parametrize("rec,cause,info", [(Put(0, 0), Cause.BAD_PICK, 1), (Pick(0, 0, 2, 0), Cause.BAD_PICK, 1),
                                            (LoadX(Dest.SP, 1, LA, 4, 0), Cause.BAD_LOAD, 4)])
def test_no_picker_refuses_every_slot(rec, cause, info):
    """pick_slots = 0 (a node without the token picker): PUT, PICK and LOADX are refused."""
    dut = make_dut(pick_slots=0)
    s = encode([Mark(1), rec, Mark(2), End()])
    obs, mem = simulate(dut, s)
    expect(dut, s, obs, mem)
    assert (obs.regs["err_cause"], obs.regs["err_index"], obs.regs["err_info"], obs.regs["mark"]) == (cause, 1, info, 1)
    assert obs.puts == obs.picks == obs.loads == []
