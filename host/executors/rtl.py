"""RTL executor: a ``host.program.Program`` on the simulated hardware cluster (``hdl.cluster``).

Every node is the Verilated ``hdl.node.Node``: compute engine, packetizer, NIC, link layers and
KV-pool directory. The host side of each node (this module, one ``NodeDriver`` per node) does
what the node's host CPU and DMA engines do on a board:

* it compiles each program op into engine instructions (``hdl.compute.engine.Op``) and queues
  them on ``s_axis_cmd``, with the weight tiles on ``s_axis_w`` and input words (embedding rows,
  RoPE table rows, received payloads) on ``s_axis_sp`` — the streams the node's ping-pong weight
  loader and data DMA feed on a board;
* it sends every KV-pool directory command (alloc, install, acquire, release, drain, free) to the
  hardware pool (``s_axis_kvcmd``), checks each answer against ``golden.kvpool.KVPool`` and uses
  the hardware's slot number as the KV-memory address;
* it collects the packets the NIC delivers (``m_axis_rx``, what the RX DMA writes to DDR) and,
  when the program reaches the matching ``recv``, streams their payload into the scratchpad.

Everything between — projections, attention, folds, FFN, logits, packetization, routing,
multicast, link framing and retransmission — happens in the RTL, cycle by cycle. The host only
acts between cluster steps of ``chunk`` cycles (its reaction time is therefore up to ``chunk``
cycles, far quicker than a real CPU's). Embedding rows are gathered by the host (a table
lookup, ``IntModel.embed``); RoPE cos/sin rows are host constants (a ROM on the board).

Attention follows the canonical orders of docs/numerics.md: prefill computes one partial per
golden KV block (``ATT``, one block per job) and folds them in ascending block order (``FOLD``),
so every layout gives IntModel's bits. Supported: prefill (MARS, ring, zigzag, PD hand-off) and
KV-stationary decode (flat merge through the NIC's reductions), including elastic programs with
several requests (``req`` on every op: rows, tokens and decode blocks are per request), route
``publish``es (shadow bank + flip at a drained token boundary) and ``dfree`` of finished requests,
and decode with a tensor-parallel weight group (``Program.wsplit``, ``host.tp``): every W node
streams only the weight tiles of its slices, the gathered vectors travel as EMIT/SPW payloads.
"""
from __future__ import annotations

import collections
import dataclasses
import os
import pickle
import time

import torch

from golden import numerics as nx
from golden.int_model import IntModel
from golden.kvpool import KVPool, Opcode, Status, kv_id_from
from hdl.compute.engine import INSTR, Op as EOp
from hdl.compute.program import gemm_weight_beats, instr
from hdl.compute.vector import VecOp
from hdl.meta import (DEFAULT_PARAMS, Collective, MetaFields, Op as MOp, ReduceOp, Stage, pack_int,
                      kv_id_layout, unpack_header)

from .kv_ddr import DdrKV, ddr_mismatches, expected_kv
from .kv_events import PoolMirror
from hdl.kvinstall_header import HEADER_BYTES
from .rtl_memory import Arena
from .runtime import ExecError, pool_layout
from .tp_stages import pick

__all__ = ["run_rtl", "RtlResult", "NodeDriver", "DECODE_KINDS", "up_to", "pad_values", "fold_batches",
           "decode_sum_packets", "decode_reduce_contexts"]

DECODE_KINDS = ("dembed", "dproject", "append", "dattend", "allreduce", "dfinish", "dlogits", "dpick")
PW_EXTRA = 4                          # partial row = 2d + 4 int32 words (int64 m, l, o[d])
ENGINE_RETIRED = 0x0004                # engine register: instructions retired (hdl.compute.engine)
HDR = DEFAULT_PARAMS.header_bytes     # wire header bytes in front of every rx payload
#: decode partial slots per KV head: a node folds its blocks' partials in batches through this many
#: slots (slot 0 carries the running fold), so its scratch does not grow with the context
DECODE_FOLD_SLOTS = 4


def fold_batches(n_blocks: int, slots: int | None = None):
    """Decode's batched left fold of ``n_blocks`` per-block partials through ``slots`` slots:
    ``[(first block, blocks, carried)]`` per FOLD; ``carried``: slot 0 holds the fold so far (the
    batch's ATTs write slots 1..). Folding the running partial first and then the next blocks is
    the same left fold (golden merge_partials) as one FOLD over every block. ``slots``: default
    :data:`DECODE_FOLD_SLOTS` (read at call time)."""
    slots = DECODE_FOLD_SLOTS if slots is None else slots
    if slots < 2:
        raise ValueError(f"slots={slots}: a batched fold needs at least 2 partial slots")
    out, j = [], 0
    while j < n_blocks:
        k = min(n_blocks - j, slots - (1 if j else 0))
        out.append((j, k, j > 0))
        j += k
    return out


def up_to(n: int, m: int) -> int:
    """n rounded up to a multiple of m."""
    return -(-n // m) * m


def pad_values(n: int, bits: int) -> int:
    """n values rounded up to whole 32-bit words of ``bits``-wide values (EMIT/SPW packing)."""
    return up_to(n, 32 // bits)


def _s32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >> 31 else v


def _words_bytes(words) -> bytes:
    return b"".join((int(w) & 0xFFFFFFFF).to_bytes(4, "little") for w in words)


def _bytes_words(b: bytes) -> list:
    return [_s32(int.from_bytes(b[i:i + 4], "little")) for i in range(0, len(b), 4)]


class RtlResult:
    """Outputs and measurements of one RTL run (``ExecResult`` fields plus cycles and bytes)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


class NodeDriver:
    """The host side of one node (module docstring). ``run()`` is a generator that yields while
    it waits for the hardware (an rx message, scratchpad output, a directory answer)."""

    def __init__(self, node: int, program, im: IntModel, prompt, model, ncfg, eparams: dict):
        self.n, self.p, self.im, self.hw = node, program, im, model
        self.prompts = [torch.as_tensor(p, dtype=torch.long) for p in program.prompts(prompt)]
        cfg = program.model
        self.cfg = cfg
        self.D, self.I, self.H, self.Hk, self.d = (cfg.hidden_size, cfg.intermediate_size, cfg.num_heads,
                                                   cfg.num_kv_heads, cfg.head_dim)
        self.Q, self.KV, self.rep, self.V = self.H * self.d, self.Hk * self.d, cfg.gqa_ratio, cfg.vocab_size
        self.W = 2 * self.d + PW_EXTRA
        self.kv_bits = program.kv_bits
        self.block = program.block
        e = eparams
        self.pn, self.pk = e["pn"], e["pk"]
        self.max_payload = ncfg.nic.max_payload
        self.unit_max = max(t1 - t0 for t0, t1 in program.units)
        # rows at once: the engine's t_max, or fewer if no op of the program needs as many (the
        # per-tile scratch is sized for t_max rows: a large engine then still fits small chunks)
        rows = [op.rows[1] - op.rows[0] for ops in program.ops for op in ops if getattr(op, "rows", None)]
        self.t_max = min(e["t_max"], max(rows + [self.unit_max, 1]))
        # a unit's head stride is rounded up to whole golden blocks: decode appends the tokens
        # after the prompt's last (partial) block into the same rows
        self.slot_rows = self.Hk * up_to(self.unit_max, program.block)
        if self.unit_max > e["t_max"]:
            raise ValueError(f"units of {self.unit_max} tokens exceed the engine's t_max={e['t_max']} "
                             f"(rows per GEMM); use a smaller chunk")
        if self.t_max * self.rep > e["nq_max"]:
            raise ValueError(f"{self.t_max} rows at once x gqa {self.rep} = {self.t_max * self.rep} query rows "
                             f"exceed nq_max={e['nq_max']}")
        if self.block > e["blk_max"] or self.block > e["z_max"]:
            raise ValueError(f"block={self.block} exceeds the attention unit's blk_max/z_max "
                             f"({e['blk_max']}/{e['z_max']})")
        self.sum_words, self.n_sum = decode_sum_packets(self.H, self.d, self.max_payload)
        if max(n for _p, n in program.reqs) > 1:
            need, why = decode_reduce_contexts(program, self.n_sum)
            if need > ncfg.nic.reduce_contexts:
                # the NIC's reduction input blocks while its pool is full: every group that can be
                # open at once must have a context or the merge deadlocks
                raise ValueError(f"decode needs {need} NIC reduction contexts ({why}), the node has "
                                 f"{ncfg.nic.reduce_contexts} (NicConfig.reduce_contexts must be at "
                                 f"least {need})")
        self.split = program.wsplit
        if self.split is not None:
            sp = self.split
            if sp.tile % self.pn:
                raise ValueError(f"w_tile={sp.tile} is not a multiple of the engine's GEMM tile pn={self.pn} "
                                 f"(a W node's weight slice must be whole tiles)")
            for j in range(sp.W):
                for what in ("q", "kvtok"):
                    for f, _o, n, bits in sp.wire(what, j):
                        if bits < 32 and n % (32 // bits):
                            raise ValueError(f"w_group: slice {j} sends {n} {bits}-bit values of {f}, not whole "
                                             f"32-bit words (head_dim={self.d})")
        hw_slots = ncfg.kv_slots
        if program.n_slots > hw_slots:
            raise ValueError(f"the program's KV pool needs {program.n_slots} slots, the node has "
                             f"{hw_slots} (NodeConfig.kv_slots)")
        region = e.get("kv_region")
        self.ddr = None
        # the NIC installs received KV units itself (NodeConfig.kv_install): the pool then also
        # holds staged units and units that arrive before the program expects them, so the host
        # mirrors the node's whole pool (kv_slots), in the node's command order (kv_events.py)
        self.install = bool(getattr(ncfg, "kv_install", False))
        if self.install and region is None:
            raise ValueError("NodeConfig.kv_install needs an engine with a kv_region (K/V in DDR)")
        pool_slots = hw_slots if self.install else program.n_slots
        if region is not None:
            # K/V in DDR: flat row f = row f % R of region slot f // R; staged units and decode
            # blocks take whole slots above the pool's (host/executors/kv_ddr.py)
            self.ddr = DdrKV(region, e.get("kv_win_rows") or e["blk_max"], e.get("kv_n_win", 2),
                             self.slot_rows, pool_slots)
            self.slot_rows = region.slot_rows
            base, size = self.ddr.stage_rows
            self.kvrows = Arena("KV region slots (staging/decode)", size, base=base, align=region.slot_rows)
        else:
            pool_rows = program.n_slots * self.slot_rows
            if pool_rows >= e["kv_depth"]:
                raise ValueError(f"KV pool of {program.n_slots} slots x {self.slot_rows} rows exceeds the "
                                 f"attention memory kv_depth={e['kv_depth']}")
            self.kvrows = Arena("kv rows (staging/decode)", e["kv_depth"] - pool_rows, base=pool_rows)
        # ---- scratchpad: per-tile scratch, then a dynamic arena. The engine runs its queue in
        # order, one instruction at a time, so the scratch of the projection, of the attention
        # tail and of the head share one region.
        T, D, I, Q, KV, d = self.t_max, self.D, self.I, self.Q, self.KV, self.d
        self.S = {}
        top = 0
        for group in ((("CS", T * d // 2), ("X", T * D), ("Qb", T * Q), ("Kb", T * KV), ("Vb", T * KV),
                       ("Qr", T * Q), ("Kr", T * KV)),
                      (("A", T * Q), ("Aq", T * Q), ("O", T * D), ("H1", T * D), ("X2", T * D), ("G", T * I),
                       ("U", T * I), ("Dn", T * D)),
                      (("Xf", T * D), ("LG", T * self.V))):
            addr = 0
            for name, n in group:
                self.S[name] = addr
                addr += n
            top = max(top, addr)
        addr = top
        if addr >= e["sp_depth"]:
            raise ValueError(f"scratch of {addr} words exceeds sp_depth={e['sp_depth']}")
        self.sp = Arena("scratchpad", e["sp_depth"] - addr, base=addr)
        eaddr, self.E = 0, {}
        for name in ("EX", "EA", "EX2", "ES"):
            self.E[name] = eaddr
            eaddr += T
        self.em = Arena("exponent memory", e["em_depth"] - eaddr, base=eaddr, align=4)
        # ---- state
        self.pool = KVPool(pool_slots, program.slot_bytes, kv_id_width=32, max_readers=15,
                           table=_kv_table(ncfg))
        self.mirror = None                   # set by run_rtl when the node reports pool events
        # receivers' install kind of every KV message (the sender's KVS header says owner or not)
        self.recv_install = collections.defaultdict(set)
        for ops in program.ops:
            for o in ops:
                if o.kind == "recv" and o.what == "kv":
                    self.recv_install[o.msg].add(o.install)
        self.units = {}          # (layer, unit) -> dict(kind, slot|row, sp, em, n)
        # K/V in DDR: attention reads a unit's rows from the region, so its scratchpad/EM copy
        # (the QUANT output its KVW writes, the source of its EMITs) is freed once it is KVW'd
        # and its last KV send of the program is queued (the engine runs in order). Sends left:
        self.kv_sends_left = (collections.Counter((op.layer, op.unit) for op in program.ops[node]
                                                  if op.kind == "send" and op.what == "kv")
                              if self.ddr is not None else None)
        self.rowsets = {}        # (req, rows) -> dict(h=[a, b], cur, q, eq, parts)
        self.held = {}
        self.inbox = collections.defaultdict(collections.deque)   # (src, layer, unit) -> payloads
        self.sp_frames = collections.deque()
        self.kv_resps = collections.deque()
        self.tokens, self.logits, self.marks, self.events = {}, {}, {}, []   # tokens: req -> list
        self.done_ops, self.cmd_count = 0, 0
        self.issued = []         # (program op index, instruction) in queue order: stall reports
        self.pushlog = [] if os.environ.get("MCF_RTL_TRACE") else None   # replayable input log
        self.wcache = {}
        self.t_logits = None
        self.t_tokens = []       # cycle of every decode token (all requests, in order)
        self.picked = {}         # req -> (logit, token) of every tensor-parallel decode step (dpick)
        self.version = 0         # routing-table version: publishes passed
        self.step_versions = {}  # (req, pos, layer) -> version every decode op of that step ran under
        self.dd = None           # decode scratch of the current request (dinit)
        self.dds = {}            # req -> its decode scratch
        self.dblocks = None      # (req, layer) -> decode KV blocks held here
        self.cur_req = 0
        self.rid_max, self.rid_sum = {}, {}
        self.waiting_publish = None
        self.query_first = False     # decode: emit Q before the K/V projection (KernelFlume §5.1)
        self.rx_log = []             # (cycle seen by the host, 'q' | 'sum', kv_id) of decode packets
        self.deferred = None         # the K/V projection held back behind the Q send
        self.retired_seen = 0        # the engine's RETIRED count when last read (NIC installs)

    # ------------------------------------------------------------------ hardware queues
    def emit(self, instrs):
        if not instrs:
            return
        if self.ddr is not None:
            instrs = self.ddr.rewrite(instrs)
        nb = -(-INSTR.size // 8)
        frame = b"".join(int(INSTR.const(i).as_value().value).to_bytes(nb, "little") for i in instrs)
        self.push("s_axis_cmd", frame)
        self.cmd_count += len(instrs)
        self.issued.extend((self.done_ops, i) for i in instrs)

    def push(self, port, data: bytes):
        self.hw.push(port, data)
        if self.pushlog is not None:
            self.pushlog.append((self.hw.cycle, port, bytes(data)))

    def feed(self, words):
        if len(words):
            self.push("s_axis_sp", _words_bytes(words))

    def weights(self, lin, rows=None):
        """Stream the weight tiles of ``lin`` (output rows ``rows`` = (a, b) of it: a W node's
        slice, whole tiles) into ``s_axis_w``."""
        key = (id(lin), rows)
        if key not in self.wcache:
            beats = gemm_weight_beats(lin if rows is None else lin.rows(*rows), self.pn, self.pk)
            nb = self.pn * self.pk * 4 // 8
            frames, cur = [], b""
            for bt in beats:
                cur += int(bt["data"]).to_bytes(nb, "little")
                if bt["last"]:
                    frames.append(cur)
                    cur = b""
            if cur:
                raise ExecError("weight stream does not end a tile with last")
            self.wcache[key] = frames
        for f in self.wcache[key]:
            self.push("s_axis_w", f)

    def kvcmd(self, opcode, layer, unit, kind):
        """One directory command on the hardware pool; waits for its answer and checks it against
        golden.kvpool (status, slot, state, readers, freed). Returns the answer."""
        kid = kv_id_from(layer, unit, DEFAULT_PARAMS.layer_bits)
        if self.mirror is None:
            gold = self.pool.execute(opcode, kid)
        self.push("s_axis_kvcmd", self._kv_encode(opcode, kid))
        while not self.kv_resps:
            yield
        got = self.kv_resps.popleft()
        if self.mirror is not None:
            # golden answers in the node's order: the event of this command replays it after
            # every installer / NIC command the node executed before it
            while (gold := self.mirror.host_answer()) is None:
                yield
        exp = (int(gold.status), gold.slot, int(gold.state), gold.readers, int(gold.freed))
        if got != exp:
            raise ExecError(f"node {self.n}: KV pool answered {got} to {opcode.name} ({layer},{unit}), "
                            f"golden.kvpool says {exp}")
        if gold.status != Status.OK:
            raise ExecError(f"node {self.n}: {kind} ({layer},{unit}): KV pool answered {gold.status.name}")
        self.events.append((self.done_ops, kind, (layer, unit), gold.state.name, gold.readers, gold.freed))
        return gold

    # kv pool stream packing (hdl.kvpool cmd_layout / resp_layout, first field in the low bits)
    def _kv_encode(self, opcode, kid) -> bytes:
        v = int(opcode) | (kid << 4)
        return v.to_bytes(self.kv_cmd_bytes, "little")

    def kv_decode(self, b: bytes):
        v = int.from_bytes(b, "little")
        sb = self.kv_slot_bits
        status, v = v & 0xF, v >> 4
        slot, v = v & ((1 << sb) - 1), v >> sb
        state, v = v & 0x7, v >> 3
        readers, v = v & ((1 << self.kv_reader_bits) - 1), v >> self.kv_reader_bits
        return status, slot, state, readers, v & 1

    def wait_rx(self, key, count):
        """Wait until ``count`` packets with inbox key ``key`` arrived; return their payloads."""
        q = self.inbox[key]
        while len(q) < count:
            yield
        return [q.popleft() for _ in range(count)]

    def wait_sp(self, nbytes, what):
        while not self.sp_frames:
            yield
        fr = self.sp_frames.popleft()
        if len(fr) != nbytes:
            raise ExecError(f"node {self.n}: {what}: scratchpad frame of {len(fr)} bytes, expected {nbytes}")
        return fr

    # ------------------------------------------------------------------ helpers
    def req_tokens(self, req) -> list:
        return self.tokens.setdefault(req, [])

    def rowset(self, req, rows):
        rs = self.rowsets.get((req, rows))
        if rs is None:
            T = rows[1] - rows[0]
            if T > self.t_max:
                raise ValueError(f"node {self.n}: {T} rows at once exceed the engine's t_max={self.t_max}")
            rs = self.rowsets[(req, rows)] = {
                "T": T, "h": [self.sp.alloc(T * self.D, "h"), self.sp.alloc(T * self.D, "h")], "cur": 0,
                "q": None, "eq": None, "parts": None, "pblocks": set()}
        return rs

    def unit_rows(self, layer, unit):
        u = self.units.get((layer, unit))
        if u is None:
            raise ExecError(f"node {self.n}: KV of ({layer},{unit}) is not on this node")
        return u

    def new_unit(self, layer, unit, kind, slot=None, copy=True):
        """A KV unit held here: at pool slot ``slot`` (else staging rows); ``copy``: with its
        scratchpad/EM copy (the QUANT output its KVW writes; a unit the NIC installed has none)."""
        t0, t1 = self.p.units[unit]
        n = t1 - t0
        kvw, ew = pad_values(n * self.KV, self.kv_bits), pad_values(n * self.Hk, 8)
        u = {"kind": kind, "n": n, "t0": t0, "t1": t1, "kvw": kvw, "ew": ew, "stride": up_to(n, self.block),
             "spk": None, "spv": None, "emk": None, "emv": None}
        if copy:
            u.update(spk=self.sp.alloc(kvw, "K copy"), spv=self.sp.alloc(kvw, "V copy"),
                     emk=self.em.alloc(ew, "K exps"), emv=self.em.alloc(ew, "V exps"))
        if slot is not None:
            u["row"] = slot * self.slot_rows
        else:
            u["row"] = self.kvrows.alloc(self.Hk * u["stride"], f"staged ({layer},{unit})")
        self.units[(layer, unit)] = u
        return u

    def drop_unit(self, layer, unit):
        u = self.units.pop((layer, unit))
        if u["spk"] is not None:                  # else freed by free_copy
            for k in ("spk", "spv"):
                self.sp.free(u[k])
            for k in ("emk", "emv"):
                self.em.free(u[k])
        if u["kind"] == "stage" and not self.install:     # installed: a pool slot (INVALIDATE)
            self.kvrows.free(u["row"])


    # ------------------------------------------------------------------ op compilers
    def cs_words(self, t0, t1):
        cos, sin = nx.rope_tables(range(t0, t1), self.d, self.cfg.rope_theta)
        return [_s32(x) for x in ((cos & 0xFFFF) | ((sin & 0xFFFF) << 16)).flatten().tolist()]

    def vec(self, sub, a, dst, n0, ln, b=0, n1=0, ed=0, bits=8):
        eps_q = int(round(self.cfg.rms_norm_eps * 2 ** (2 * nx.FA)))
        return instr(EOp.VEC, sub=sub, a=a, b=b, dst=dst, n0=n0, n1=n1, len=ln, ed=ed, frac=nx.FA,
                     bits=bits, eps_q=eps_q)

    def gemm(self, lin, a, ea, T, K, N, dst, reuse=False, rows=None):
        if rows is not None and rows[1] - rows[0] != N:
            raise ExecError(f"node {self.n}: GEMM of rows {rows} with N={N}")
        self.weights(lin, rows)
        return instr(EOp.GEMM, flags=int(reuse), a=a, ea=ea, n0=T, len=K, n1=N, dst=dst)

    def op_embed(self, req, rows):
        rs = self.rowset(req, rows)
        h = self.im.embed(self.prompts[req][rows[0]:rows[1]])
        self.emit([instr(EOp.SPW, dst=rs["h"][rs["cur"]], n0=rs["T"] * self.D)])
        self.feed(h.flatten().tolist())

    def op_project(self, req, layer, rows, unit):
        r = yield from self.kvcmd(Opcode.ALLOC_OWNER, layer, unit, "project")
        u = self.new_unit(layer, unit, "owner", slot=r.slot)
        if (u["t0"], u["t1"]) != tuple(rows):
            raise ExecError(f"node {self.n}: project rows {rows} differ from unit {unit} {u['t0'], u['t1']}")
        rs = self.rowset(req, rows)
        T, L = rs["T"], self.im.qm.layers[layer]
        D, Q, KV, H, Hk, d = self.D, self.Q, self.KV, self.H, self.Hk, self.d
        if rs["q"] is None:
            rs["q"], rs["eq"] = self.sp.alloc(T * Q, "q"), self.em.alloc(T * H, "q exps")
        S, E = self.S, self.E
        P = [instr(EOp.SPW, dst=S["CS"], n0=T * d // 2)]
        self.emit(P)
        self.feed(self.cs_words(*rows))
        P = [self.vec(VecOp.RMSNORM, rs["h"][rs["cur"]], S["X"], T, D, ed=E["EX"]),
             self.gemm(L.q, S["X"], E["EX"], T, D, Q, S["Qb"]),
             self.gemm(L.k, S["X"], E["EX"], T, D, KV, S["Kb"], reuse=True),
             self.gemm(L.v, S["X"], E["EX"], T, D, KV, S["Vb"], reuse=True),
             self.vec(VecOp.ROPE, S["Qb"], S["Qr"], T, d, b=S["CS"], n1=H),
             self.vec(VecOp.ROPE, S["Kb"], S["Kr"], T, d, b=S["CS"], n1=Hk),
             self.vec(VecOp.QUANT, S["Qr"], rs["q"], T * H, d, ed=rs["eq"]),
             self.vec(VecOp.QUANT, S["Kr"], u["spk"], T * Hk, d, ed=u["emk"], bits=self.kv_bits),
             self.vec(VecOp.QUANT, S["Vb"], u["spv"], T * Hk, d, ed=u["emv"], bits=self.kv_bits)]
        P += self.kvw(u)
        self.emit(P)
        self.free_copy(layer, unit)

    def used_until(self, layer, unit):
        """The engine reads the unit's DDR slot until the instructions queued so far retire."""
        u = self.units.get((layer, unit))
        if u is not None:
            u["last_use"] = self.cmd_count

    def wait_unused(self, layer, unit):
        """NIC installs: before a command that may free the unit's slot, wait until the engine has
        retired every instruction that reads it (an ATT retires after its window's load, a KVS
        after its records went out). The installer writes a freed slot as soon as another unit
        arrives, while the engine may still be behind the host: the in-order engine no longer
        orders the writes (without installs they are SPW/KVW in the same queue)."""
        if not self.install:
            return
        need = self.units.get((layer, unit), {}).get("last_use", 0)
        while self.retired_seen < need:
            self.retired_seen = self.hw.axil_read(ENGINE_RETIRED)[0]
            if self.retired_seen < need:
                yield

    def free_copy(self, layer, unit):
        """K/V in DDR: free the unit's scratchpad/EM copy when no KV send of it is left (its KVW
        and sends are queued before anything that reuses the words: the engine runs in order)."""
        if self.kv_sends_left is None or (not self.install and self.kv_sends_left[(layer, unit)] > 0):
            return                           # (installs: sends read DDR with KVS, the copy is not needed)
        u = self.units[(layer, unit)]
        if u["spk"] is not None:
            for k in ("spk", "spv"):
                self.sp.free(u[k])
            for k in ("emk", "emv"):
                self.em.free(u[k])
            u["spk"] = u["spv"] = u["emk"] = u["emv"] = None

    def kvw(self, u):
        """KVW of a unit's K and V copies into its KV-memory rows (head g at row + g*n + t)."""
        out = []
        for sel, a, e in ((0, u["spk"], u["emk"]), (1, u["spv"], u["emv"])):
            out.append(instr(EOp.KVW, flags=sel, a=a, n0=u["n"], n1=self.Hk, so=self.KV, len=self.d, ea=e,
                             eo=self.Hk, ei=1, kvb=u["row"], kvs=u["stride"]))
        return out

    def op_send_kv(self, op):
        u = self.unit_rows(op.layer, op.unit)
        meta = op.meta
        if self.install:
            self.emit(self.kvs_unit(u, op))
            self.used_until(op.layer, op.unit)
            return
        P = []
        for a, n, em, bits in ((u["spk"], u["kvw"], False, self.kv_bits), (u["emk"], u["ew"], True, 8),
                               (u["spv"], u["kvw"], False, self.kv_bits), (u["emv"], u["ew"], True, 8)):
            P += self.emit_packed(a, n, em, bits, meta)
        self.emit(P)
        if self.kv_sends_left is not None:
            self.kv_sends_left[(op.layer, op.unit)] -= 1
            self.free_copy(op.layer, op.unit)

    def kvs_unit(self, u, op) -> list:
        """The KVS instructions sending unit ``u`` from its DDR slot as install packets
        (hdl/kvinstall_header.py): its K records then its V records, at most ``max_payload``
        bytes per packet; ``first`` on the first, ``last`` on the final one, ``owner`` when the
        receiver installs it as its own block (PD). Meta op KV_REPLICA (what the node steers to
        its installer), length replaced by the engine."""
        kinds = self.recv_install.get(op.msg, set())
        if len(kinds) != 1:
            raise ExecError(f"node {self.n}: KV message {op.msg} of ({op.layer},{op.unit}) is installed as "
                            f"{sorted(kinds) or 'nothing'} by its receivers; one install packet carries "
                            f"one kind")
        owner = kinds == {"owner"}
        rb = self.ddr.region.row_bytes
        per = (min(self.max_payload, (1 << 16) - 1) - HEADER_BYTES) // rb
        if per < 1:
            raise ExecError(f"node {self.n}: a KV record of {rb} B does not fit a packet of max_payload="
                            f"{self.max_payload} B with its {HEADER_BYTES}-byte install header")
        rows = self.Hk * u["stride"]
        slot, row0 = self.ddr.slot_row(u["row"], rows)
        meta = pack_int(dataclasses.replace(op.meta, op=MOp.KV_REPLICA))
        runs = [(row0 + j, min(per, rows - j)) for j in range(0, rows, per)]
        runs += [(self.ddr.R + r, n) for r, n in runs]
        out = []
        for i, (rec, n) in enumerate(runs):
            flags = int(i == len(runs) - 1) | int(i == 0) << 1 | int(owner) << 2
            out.append(instr(EOp.KVS, flags=flags, b=slot, kvb=rec, ntok=n, meta=meta))
        return out

    def emit_packed(self, a, n, em, bits, meta):
        """EMIT n values packed ``bits`` wide, split into packets of at most max_payload bytes."""
        per_pkt = (self.max_payload * 8 // bits) // (32 // bits) * (32 // bits)
        out = []
        for j in range(0, n, per_pkt):
            k = min(per_pkt, n - j)
            out.append(instr(EOp.EMIT, flags=(1 if em else 0) | 2, bits=bits % 16, a=a + j, n0=k,
                             meta=pack_int(meta)))
        return out

    def parts_of(self, n, bits):
        per_pkt = (self.max_payload * 8 // bits) // (32 // bits) * (32 // bits)
        return [min(per_pkt, n - j) * bits // 8 for j in range(0, n, per_pkt)]

    def op_recv_kv(self, op):
        if self.install:
            # the NIC installed the unit into a pool slot of its own (the installer's BEGIN_INSTALL
            # on the first packet, COMMIT_INSTALL / COMMIT_OWNER after the last one's B response)
            key = (op.layer, op.unit)
            if key in self.units:
                raise ExecError(f"node {self.n}: ({op.layer},{op.unit}) already here, cannot receive it again")
            while (slot := self.mirror.installed(*key)) is None:
                yield
            self.new_unit(op.layer, op.unit, op.install, slot=slot, copy=False)
            return
        t0, t1 = self.p.units[op.unit]
        n = t1 - t0
        kvw, ew = pad_values(n * self.KV, self.kv_bits), pad_values(n * self.Hk, 8)
        sizes = (self.parts_of(kvw, self.kv_bits) + self.parts_of(ew, 8)) * 2
        payloads = yield from self.wait_rx(("kv", op.peer, op.layer, op.unit), len(sizes))
        for got, want in zip(payloads, sizes):
            if len(got) != want:
                raise ExecError(f"node {self.n}: kv ({op.layer},{op.unit}) from {op.peer}: packet of "
                                f"{len(got)} bytes, expected {want}")
        if op.install == "stage":
            if (op.layer, op.unit) in self.units:
                raise ExecError(f"node {self.n}: ({op.layer},{op.unit}) already here, cannot stage it")
            u = self.new_unit(op.layer, op.unit, "stage")
        else:
            opc = Opcode.INSTALL_REPLICA if op.install == "replica" else Opcode.ALLOC_OWNER
            r = yield from self.kvcmd(opc, op.layer, op.unit, "install_" + op.install)
            u = self.new_unit(op.layer, op.unit, op.install, slot=r.slot)
        nk = len(self.parts_of(kvw, self.kv_bits))
        ne = len(self.parts_of(ew, 8))
        groups = [payloads[:nk], payloads[nk:nk + ne], payloads[nk + ne:2 * nk + ne], payloads[2 * nk + ne:]]
        P, words = [], []
        for (a, cnt, em, bits), pk in zip(((u["spk"], kvw, False, self.kv_bits), (u["emk"], ew, True, 8),
                                           (u["spv"], kvw, False, self.kv_bits), (u["emv"], ew, True, 8)),
                                          groups):
            data = b"".join(pk)
            P.append(instr(EOp.SPW, flags=(1 if em else 0) | 2, bits=bits % 16, dst=a, n0=cnt))
            words += _bytes_words(data)
        self.emit(P)
        self.feed(words)
        self.emit(self.kvw(u))
        self.free_copy(op.layer, op.unit)

    def op_attend(self, req, layer, rows, units):
        rs = self.rowset(req, rows)
        T, W, rep, Hk, d = rs["T"], self.W, self.rep, self.Hk, self.d
        nb = (rows[1] - 1) // self.block + 1
        if rs["parts"] is None:
            rs["parts"] = self.sp.alloc(nb * Hk * T * rep * W, "partials")
            rs["nb"] = nb
        P = []
        for unit in units:
            u = self.units.get((layer, unit))
            if u is None:
                raise ExecError(f"node {self.n}: attend reads ({layer},{unit}) which is neither in the pool "
                                f"nor staged")
            if u["kind"] == "replica" and not self.held.get((layer, unit)):
                raise ExecError(f"node {self.n}: attend reads replica ({layer},{unit}) without holding it")
            for b in self.p.golden_blocks(unit):
                k0, k1 = max(b * self.block, u["t0"]), min((b + 1) * self.block, u["t1"])
                if k0 > rows[1] - 1:
                    continue                        # entirely in the future: skipped, as golden
                if b in rs["pblocks"]:
                    raise ExecError(f"node {self.n}: golden block {b} attended twice")
                rs["pblocks"].add(b)
                for g in range(Hk):
                    P.append(instr(EOp.ATT, flags=0b001, a=rs["q"] + g * rep * d, so=self.Q, len=d, n0=T,
                                   n1=rep, ea=rs["eq"] + g * rep, eo=self.H, ei=1, pos0=rows[0],
                                   kvb=u["row"] + g * u["stride"] + (k0 - u["t0"]), nblk=1, bs=self.block,
                                   ntok=k1 - k0, kpos=k0,
                                   dst=rs["parts"] + (b * Hk + g) * T * rep * W))
        self.emit(P)
        for unit in units:
            self.used_until(layer, unit)

    def op_finish(self, req, layer, rows):
        rs = self.rowsets[(req, rows)]
        need = set(range(rs["nb"]))
        if rs["pblocks"] != need:
            raise ExecError(f"node {self.n}: rows {rows} layer {layer} missing golden blocks "
                            f"{sorted(need - rs['pblocks'])}")
        T, W, rep, Hk, d, S, E = rs["T"], self.W, self.rep, self.Hk, self.d, self.S, self.E
        D, Q, I = self.D, self.Q, self.I
        L = self.im.qm.layers[layer]
        P = []
        for g in range(Hk):
            P.append(instr(EOp.FOLD, flags=0b100, a=rs["parts"] + g * T * rep * W, b=Hk * T * rep * W,
                           nblk=rs["nb"], n0=T, n1=rep, so=Q, len=d, dst=S["A"] + g * rep * d))
        h0, h2 = rs["h"][rs["cur"]], rs["h"][1 - rs["cur"]]
        P += self.tail(L, h0, h2, T)
        self.emit(P)
        rs["cur"] = 1 - rs["cur"]
        self.sp.free(rs["parts"])
        rs["parts"], rs["pblocks"] = None, set()

    def tail(self, L, h0, h2, T):
        """After attention (y in S['A']): o-projection, residual, FFN, residual -> h2."""
        S, E, D, Q, I = self.S, self.E, self.D, self.Q, self.I
        return [self.vec(VecOp.QUANT, S["A"], S["Aq"], T, Q, ed=E["EA"]),
                self.gemm(L.o, S["Aq"], E["EA"], T, Q, D, S["O"]),
                self.vec(VecOp.ADD, h0, S["H1"], T, D, b=S["O"]),
                self.vec(VecOp.RMSNORM, S["H1"], S["X2"], T, D, ed=E["EX2"]),
                self.gemm(L.gate, S["X2"], E["EX2"], T, D, I, S["G"]),
                self.gemm(L.up, S["X2"], E["EX2"], T, D, I, S["U"], reuse=True),
                # SWIGLU in place over the gate rows (element-wise: each word is read before it is
                # written), its quantisation into the up rows: the MLP needs two T x I regions
                self.vec(VecOp.SWIGLU, S["G"], S["G"], T, I, b=S["U"]),
                self.vec(VecOp.QUANT, S["G"], S["U"], T, I, ed=E["ES"]),
                self.gemm(L.down, S["U"], E["ES"], T, I, D, S["Dn"]),
                self.vec(VecOp.ADD, S["H1"], h2, T, D, b=S["Dn"])]

    def op_logits(self, req, rows):
        rs = self.rowsets.pop((req, rows))
        T, S, E = rs["T"], self.S, self.E
        self.emit([self.vec(VecOp.RMSNORM, rs["h"][rs["cur"]], S["Xf"], T, self.D, ed=E["EX"]),
                   self.gemm(self.im.qm.head, S["Xf"], E["EX"], T, self.D, self.V, S["LG"]),
                   instr(EOp.SPR, a=S["LG"], n0=T * self.V)])
        for a in rs["h"]:
            self.sp.free(a)
        if rs["q"] is not None:
            self.sp.free(rs["q"])
            self.em.free(rs["eq"])
        fr = yield from self.wait_sp(4 * T * self.V, "logits")
        lg = torch.tensor(_bytes_words(fr), dtype=torch.int64).view(T, self.V)
        self.logits[(req, rows)] = lg
        if rows[1] == self.p.reqs[req][0]:
            self.req_tokens(req).append(int(torch.argmax(lg[-1])))
            if self.t_logits is None:
                self.t_logits = self.hw.cycle

    # ------------------------------------------------------------------ decode (KV-stationary)
    def dinit(self, req=None):
        """Decode scratch of request ``req`` (default: the current op's), allocated at its first
        decode op and made current (``self.dd``): the token's h (ping-pong), q, its K/V, the
        per-block partials, the local partial, the global max and the merged partial. Requests
        have their own scratch (microbatches interleave per layer); ``blocks`` is shared."""
        req = self.cur_req if req is None else req
        if self.dblocks is None:
            self.dblocks = self.owner_blocks()
        dd = self.dds.get(req)
        if dd is None:
            H, Hk, W, rep = self.H, self.Hk, self.W, self.rep
            nblocks = min(DECODE_FOLD_SLOTS, max(-(-(n + k) // self.block) for n, k in self.p.reqs))
            kvw, ew = pad_values(self.KV, self.kv_bits), pad_values(Hk, 8)
            sp, em = self.sp.alloc, self.em.alloc
            dd = self.dds[req] = {
                "h": [sp(self.D, "decode h"), sp(self.D, "decode h")], "cur": 0,
                "q": sp(self.Q, "decode q"), "eq": em(pad_values(H, 8), "decode q exps"),
                "kt": sp(kvw, "token K"), "vt": sp(kvw, "token V"), "ekt": em(ew, "token K exps"),
                "evt": em(ew, "token V exps"), "parts": sp(nblocks * Hk * rep * W, "decode partials"),
                "ploc": sp(H * W, "local partial"), "M": sp(H, "global max"), "pm": sp(H * W, "merged partial"),
                "blocks": self.dblocks, "pos": None, "dM": None}
            if self.split is not None:      # the gathered vectors of a W group
                dd["h1"], dd["s"] = sp(self.D, "decode h1"), sp(self.I, "decode FFN vector")
                dd["bests"] = {}
        self.dd = dd
        return dd

    def owner_blocks(self) -> dict:
        """The KV blocks this node owns now: (req, layer) -> {block: [row0, stride, count, rows
        allocated for decode (or None: the rows of a pool slot)]} (head g, token k0 + i of the
        block at flat row ``row0 + g * stride + i``)."""
        out = {}
        for (layer, unit), u in self.units.items():
            if u["kind"] != "owner":
                continue
            for b in self.p.golden_blocks(unit):
                k0, k1 = max(b * self.block, u["t0"]), min((b + 1) * self.block, u["t1"])
                out.setdefault((self.p.req_of(unit), layer), {})[b] = [
                    u["row"] + (b * self.block - u["t0"]), u["stride"], k1 - k0, None]
        return out

    def held_kv(self) -> list:
        """Every KV row this node holds for decode now: ``(req, layer, block, row0, stride, count)``
        (the decode blocks once decode began, else the owner units)."""
        blocks = self.dblocks if self.dblocks is not None else self.owner_blocks()
        return [(req, layer, b, v[0], v[1], v[2]) for (req, layer), bl in sorted(blocks.items())
                for b, v in sorted(bl.items()) if v[2] > 0]

    def op_dembed(self, req):
        dd = self.dinit()
        h = self.im.embed(torch.tensor([self.req_tokens(req)[-1]]))
        self.emit([instr(EOp.SPW, dst=dd["h"][dd["cur"]], n0=self.D)])
        self.feed(h.flatten().tolist())

    def op_dproject(self, layer, pos):
        dd, S, E = self.dinit(), self.S, self.E
        L = self.im.qm.layers[layer]
        D, Q, KV, H, Hk, d = self.D, self.Q, self.KV, self.H, self.Hk, self.d
        self.emit([instr(EOp.SPW, dst=S["CS"], n0=d // 2)])
        self.feed(self.cs_words(pos, pos + 1))
        if self.query_first:
            # Q first: norm, W_Q, RoPE, quantise; the q send (the next op) is queued right after
            # it and the K/V projection behind the send (the weight stream follows the same order)
            self.emit([self.vec(VecOp.RMSNORM, dd["h"][dd["cur"]], S["X"], 1, D, ed=E["EX"]),
                       self.gemm(L.q, S["X"], E["EX"], 1, D, Q, S["Qb"]),
                       self.vec(VecOp.ROPE, S["Qb"], S["Qr"], 1, d, b=S["CS"], n1=H),
                       self.vec(VecOp.QUANT, S["Qr"], dd["q"], H, d, ed=dd["eq"])])
            self.deferred = (L, pos, dd)
            return
        self.emit([self.vec(VecOp.RMSNORM, dd["h"][dd["cur"]], S["X"], 1, D, ed=E["EX"]),
                   self.gemm(L.q, S["X"], E["EX"], 1, D, Q, S["Qb"]),
                   self.gemm(L.k, S["X"], E["EX"], 1, D, KV, S["Kb"], reuse=True),
                   self.gemm(L.v, S["X"], E["EX"], 1, D, KV, S["Vb"], reuse=True),
                   self.vec(VecOp.ROPE, S["Qb"], S["Qr"], 1, d, b=S["CS"], n1=H),
                   self.vec(VecOp.ROPE, S["Kb"], S["Kr"], 1, d, b=S["CS"], n1=Hk),
                   self.vec(VecOp.QUANT, S["Qr"], dd["q"], H, d, ed=dd["eq"]),
                   self.vec(VecOp.QUANT, S["Kr"], dd["kt"], Hk, d, ed=dd["ekt"], bits=self.kv_bits),
                   self.vec(VecOp.QUANT, S["Vb"], dd["vt"], Hk, d, ed=dd["evt"], bits=self.kv_bits)])

    def flush_kv_projection(self):
        """Query-first: queue the K/V projection held back by ``op_dproject`` (after the q send).
        W_K and W_V reuse the activations W_Q loaded into the GEMM array (the VEC ops and the
        EMIT between do not touch them; reloading would read X's exponents, which the Q RoPE
        has overwritten: a VEC writes exponents at ``ed``, 0 = E['EX'])."""
        if self.deferred is None:
            return
        (L, pos, dd), self.deferred = self.deferred, None
        S, E = self.S, self.E
        D, KV, Hk, d = self.D, self.KV, self.Hk, self.d
        self.emit([self.gemm(L.k, S["X"], E["EX"], 1, D, KV, S["Kb"], reuse=True),
                   self.gemm(L.v, S["X"], E["EX"], 1, D, KV, S["Vb"], reuse=True),
                   self.vec(VecOp.ROPE, S["Kb"], S["Kr"], 1, d, b=S["CS"], n1=Hk),
                   self.vec(VecOp.QUANT, S["Kr"], dd["kt"], Hk, d, ed=dd["ekt"], bits=self.kv_bits),
                   self.vec(VecOp.QUANT, S["Vb"], dd["vt"], Hk, d, ed=dd["evt"], bits=self.kv_bits)])

    def _dsets(self, what):
        dd = self.dd
        if what == "q":
            return ((dd["q"], self.Q, False, 8), (dd["eq"], pad_values(self.H, 8), True, 8))
        kvw, ew = pad_values(self.KV, self.kv_bits), pad_values(self.Hk, 8)
        return ((dd["kt"], kvw, False, self.kv_bits), (dd["ekt"], ew, True, 8),
                (dd["vt"], kvw, False, self.kv_bits), (dd["evt"], ew, True, 8))

    def op_dsend(self, op):
        self.dinit()
        if op.what == "token":
            a = self.sp.alloc(1, "token")
            self.emit([instr(EOp.SPW, dst=a, n0=1)])
            self.feed([self.req_tokens(op.req)[-1]])
            self.emit([instr(EOp.EMIT, a=a, n0=1, meta=pack_int(op.meta))])
            self.sp.free(a)                 # the engine runs in order: the SPW/EMIT pair is done first
            return
        P = []
        for a, n, em, bits in self._dsets(op.what):
            P += self.emit_packed(a, n, em, bits, op.meta)
        self.emit(P)

    def op_drecv(self, op):
        self.dinit()
        if op.what == "token":
            (pl,) = yield from self.wait_rx(("data", op.peer, 0, 0), 1)
            self.req_tokens(op.req).append(_bytes_words(pl)[0])
            return
        sets = self._dsets(op.what)
        sizes = [sz for _a, n, _em, bits in sets for sz in self.parts_of(n, bits)]
        kind = "q" if op.what == "q" else "data"
        payloads = yield from self.wait_rx((kind, op.peer, op.layer, 0), len(sizes))
        P, words, i = [], [], 0
        for a, n, em, bits in sets:
            k = len(self.parts_of(n, bits))
            data = b"".join(payloads[i:i + k])
            i += k
            P.append(instr(EOp.SPW, flags=(1 if em else 0) | 2, bits=bits % 16, dst=a, n0=n))
            words += _bytes_words(data)
        self.emit(P)
        self.feed(words)

    def op_append(self, req, layer, pos):
        dd = self.dinit()
        b = pos // self.block
        blk = dd["blocks"].setdefault((req, layer), {}).get(b)
        if blk is None:
            if pos % self.block:
                raise ExecError(f"node {self.n}: token {pos} appended to a block it does not hold")
            row = self.kvrows.alloc(self.Hk * self.block, "decode block")
            blk = dd["blocks"][(req, layer)][b] = [row, self.block, 0, row]
        if b * self.block + blk[2] != pos:
            raise ExecError(f"node {self.n}: append of position {pos} to block {b} holding {blk[2]} tokens")
        P = []
        for sel, a, e in ((0, dd["kt"], dd["ekt"]), (1, dd["vt"], dd["evt"])):
            P.append(instr(EOp.KVW, flags=sel, a=a, n0=1, n1=self.Hk, so=self.KV, len=self.d, ea=e, eo=self.Hk,
                           ei=1, kvb=blk[0] + blk[2], kvs=blk[1]))
        self.emit(P)
        blk[2] += 1

    def _dlocal(self, req, layer, pos, ext: bool, out):
        """ATT (flat; with the global max when ``ext``) over every local block of the request, then
        FOLD -> out (H partial rows). A node without blocks contributes the empty partial (M when ext)."""
        dd, rep, Hk, W, d = self.dd, self.rep, self.Hk, self.W, self.d
        blocks = sorted((b, v) for b, v in dd["blocks"].get((req, layer), {}).items() if v[2] > 0)
        if not blocks:
            m = dd["dM"] if ext else [nx.M_EMPTY] * self.H
            words = []
            for h in range(self.H):
                words += [_s32(m[h]), -1 if m[h] < 0 else 0] + [0] * (W - 2)
            self.emit([instr(EOp.SPW, dst=out, n0=self.H * W)])
            self.feed(words)
            return
        P = []
        batches = fold_batches(len(blocks))
        for j0, k, carried in batches:
            for i, (b, (row, stride, cnt, _own)) in enumerate(blocks[j0:j0 + k]):
                slot = i + carried
                for g in range(Hk):
                    P.append(instr(EOp.ATT, flags=0b011 | (0b1000 if ext else 0), a=dd["q"] + g * rep * d,
                                   so=self.Q, len=d, n0=1, n1=rep, ea=dd["eq"] + g * rep, eo=self.H, ei=1,
                                   pos0=pos, kvb=row + g * stride, nblk=1, bs=self.block, ntok=cnt,
                                   kpos=b * self.block, b=dd["M"] + g * rep,
                                   dst=dd["parts"] + (slot * Hk + g) * rep * W))
            last = j0 + k == len(blocks)
            for g in range(Hk):
                # FOLD reads row r's partials before it writes row r, so slot 0 may be its own target
                P.append(instr(EOp.FOLD, a=dd["parts"] + g * rep * W, b=Hk * rep * W, nblk=k + carried, n0=1,
                               n1=rep, so=self.Q, len=d,
                               dst=(out if last else dd["parts"]) + g * rep * W))
        self.emit(P)

    def op_allreduce(self, op):
        """Two-phase flat merge through the NIC (docs/numerics.md, decode): ``max``: every holder's
        local maxima (the m words of its H partial rows, one gathering EMIT) are max-all-reduced
        in 64-bit lanes; ``sum``: every holder's partial rows rescaled to that max (ATT ext_m),
        all H*(2d+4) words, go to the root as ``n_sum`` SUM groups of at most max_payload bytes
        (64-bit lanes, the last packet shorter); the root reassembles the rows: the integer sum of
        (l, o) over the holders is golden ``flat_merge``, and every m word summed to (holders)*M,
        which it replaces by M (what a softmax merge of equal maxima gives)."""
        dd, H, W = self.dinit(), self.H, self.W
        layer = op.layer
        root = op.peer
        base = op.req * (1 + self.n_sum)   # reduction ids of the request: concurrent requests never mix
        w_root = self.n == root and self.p.stats.get("w_only")
        if op.name == "max":
            self._dlocal(op.req, layer, dd["pos"], False, dd["ploc"])
            meta = MetaFields(op=MOp.PARTIAL_STATE, stage=Stage.DECODE, src=self.n, dst=root, kv_id=(layer, base),
                              route_id=self.rid_max[(op.req, self.n)], collective=Collective.ALL_REDUCE,
                              reduce_op=ReduceOp.MAX, length=0)
            self.emit([instr(EOp.EMIT, a=dd["ploc"], n0=2, n1=H, so=W, meta=pack_int(meta))])   # the m words
            (pl,) = yield from self.wait_rx(("max", self.n, layer, base), 1)
            words = _bytes_words(pl)
            if len(words) != 2 * H:
                raise ExecError(f"node {self.n}: max all-reduce result of {len(words)} words, expected {2 * H}")
            dd["dM"] = [words[2 * h] for h in range(H)]
            self.emit([instr(EOp.SPW, dst=dd["M"], n0=H)])       # strided DMA read of the m lanes
            self.feed(dd["dM"])
            return
        if not w_root:              # a W node without KV only receives the merged partial
            self._dlocal(op.req, layer, dd["pos"], True, dd["ploc"])
            P = []
            for j, w0 in enumerate(range(0, H * W, self.sum_words)):
                meta = MetaFields(op=MOp.PARTIAL_STATE, stage=Stage.DECODE, src=self.n, dst=root,
                                  kv_id=(layer, base + 1 + j), route_id=self.rid_sum[(op.req, self.n)],
                                  collective=Collective.ALL_REDUCE, reduce_op=ReduceOp.SUM, length=0)
                P.append(instr(EOp.EMIT, a=dd["ploc"] + w0, n0=min(self.sum_words, H * W - w0),
                               meta=pack_int(meta)))
            self.emit(P)
        if self.n == root:
            words = []
            for j in range(self.n_sum):
                (pl,) = yield from self.wait_rx(("sum", self.n, layer, base + 1 + j), 1)
                words += _bytes_words(pl)
            if len(words) != H * W:
                raise ExecError(f"node {self.n}: merged partials of {len(words)} words, expected {H * W}")
            holders = len(op.dsts) - (1 if w_root and root in op.dsts else 0)
            for h in range(H):
                msum = (words[h * W] & 0xFFFFFFFF) | (words[h * W + 1] << 32)
                M = msum // holders if w_root else dd["dM"][h]
                if msum != holders * M:
                    raise ExecError(f"node {self.n}: merged partial of head {h}: m words sum to {msum}, "
                                    f"expected {holders} holders x the all-reduced max")
                words[h * W], words[h * W + 1] = _s32(M), -1 if M < 0 else 0
            self.emit([instr(EOp.SPW, dst=dd["pm"], n0=H * W)])
            self.feed(words)

    def op_dfinish(self, layer):
        dd, rep, W, d = self.dd, self.rep, self.W, self.d
        P = [instr(EOp.FOLD, flags=0b100, a=dd["pm"] + g * rep * W, b=0, nblk=1, n0=1, n1=rep, so=self.Q,
                   len=d, dst=self.S["A"] + g * rep * d) for g in range(self.Hk)]
        h0, h2 = dd["h"][dd["cur"]], dd["h"][1 - dd["cur"]]
        P += self.tail(self.im.qm.layers[layer], h0, h2, 1)
        self.emit(P)
        dd["cur"] = 1 - dd["cur"]

    def op_dfree(self, req):
        """The request finished: free its decode blocks' rows and its owner units in the pool."""
        dd = self.dinit()
        for key in [k for k in dd["blocks"] if k[0] == req]:
            for blk in dd["blocks"].pop(key).values():
                if blk[3] is not None:
                    self.kvrows.free(blk[3])
        for (layer, unit), u in sorted(self.units.items()):
            if self.p.req_of(unit) == req:
                if u["kind"] != "owner":
                    raise ExecError(f"node {self.n}: dfree of request {req}: ({layer},{unit}) is {u['kind']}")
                r = yield from self.kvcmd(Opcode.FREE_OWNER, layer, unit, "dfree")
                if r.freed:
                    self.drop_unit(layer, unit)

    def op_dlogits(self, req):
        dd, S, E = self.dd, self.S, self.E
        self.emit([self.vec(VecOp.RMSNORM, dd["h"][dd["cur"]], S["Xf"], 1, self.D, ed=E["EX"]),
                   self.gemm(self.im.qm.head, S["Xf"], E["EX"], 1, self.D, self.V, S["LG"]),
                   instr(EOp.SPR, a=S["LG"], n0=self.V)])
        fr = yield from self.wait_sp(4 * self.V, "decode logits")
        lg = torch.tensor(_bytes_words(fr), dtype=torch.int64)
        self.req_tokens(req).append(int(torch.argmax(lg)))
        self.t_tokens.append(self.hw.cycle)

    # ------------------------------------------------------------------ tensor-parallel decode (host.tp)
    def tp_dproject(self, op):
        """W node j: RMSNorm of the whole h, W_Q rows of its query heads, W_K/W_V rows of its KV
        heads (if any), RoPE, quantisation into its slice of the token's q and K/V."""
        dd, S, E, sp, j = self.dd, self.S, self.E, self.split, op.part[0]
        L, pos = self.im.qm.layers[op.layer], op.rows[0]
        D, d = self.D, self.d
        (h0, h1), (g0, g1) = sp.heads(j), sp.kv_heads(j)
        nh, nk = h1 - h0, g1 - g0
        self.emit([instr(EOp.SPW, dst=S["CS"], n0=d // 2)])
        self.feed(self.cs_words(pos, pos + 1))
        P = [self.vec(VecOp.RMSNORM, dd["h"][dd["cur"]], S["X"], 1, D, ed=E["EX"]),
             self.gemm(L.q, S["X"], E["EX"], 1, D, nh * d, S["Qb"], rows=sp.rows("q", j))]
        if nk:
            P += [self.gemm(L.k, S["X"], E["EX"], 1, D, nk * d, S["Kb"], reuse=True, rows=sp.rows("k", j)),
                  self.gemm(L.v, S["X"], E["EX"], 1, D, nk * d, S["Vb"], reuse=True, rows=sp.rows("v", j))]
        P += [self.vec(VecOp.ROPE, S["Qb"], S["Qr"], 1, d, b=S["CS"], n1=nh)]
        if nk:
            P += [self.vec(VecOp.ROPE, S["Kb"], S["Kr"], 1, d, b=S["CS"], n1=nk)]
        P += [self.vec(VecOp.QUANT, S["Qr"], dd["q"] + h0 * d, nh, d, ed=dd["eq"] + h0)]
        if nk:
            P += [self.vec(VecOp.QUANT, S["Kr"], dd["kt"] + g0 * d, nk, d, ed=dd["ekt"] + g0, bits=self.kv_bits),
                  self.vec(VecOp.QUANT, S["Vb"], dd["vt"] + g0 * d, nk, d, ed=dd["evt"] + g0, bits=self.kv_bits)]
        self.emit(P)

    def tp_dfinish(self, op):
        """One stage of the W side after the merge (``Op.name``): ``attn`` (FOLD final of the merged
        partial rows of its query heads -> its slice of A), ``o`` (quantise the gathered A, W_O rows
        of the hidden slice + residual -> h1 slice),
        ``ffn`` (RMSNorm of the gathered h1, W_gate/W_up rows of the intermediate slice, SwiGLU -> s
        slice), ``down`` (quantise the gathered s, W_down rows + residual -> the next h's slice)."""
        dd, S, E, sp, j = self.dd, self.S, self.E, self.split, op.part[0]
        L = self.im.qm.layers[op.layer]
        D, Q, I = self.D, self.Q, self.I
        a, b = sp.hidden(j)
        if op.name == "attn":
            h0, h1 = sp.heads(j)
            P = [instr(EOp.FOLD, flags=0b100, a=dd["pm"] + h0 * self.W, b=0, nblk=1, n0=1, n1=h1 - h0, so=Q,
                       len=self.d, dst=S["A"] + h0 * self.d)]
        elif op.name == "o":
            P = [self.vec(VecOp.QUANT, S["A"], S["Aq"], 1, Q, ed=E["EA"]),
                 self.gemm(L.o, S["Aq"], E["EA"], 1, Q, b - a, S["O"], rows=(a, b)),
                 self.vec(VecOp.ADD, dd["h"][dd["cur"]] + a, dd["h1"] + a, 1, b - a, b=S["O"])]
        elif op.name == "ffn":
            c, e = sp.inter(j)
            P = [self.vec(VecOp.RMSNORM, dd["h1"], S["X2"], 1, D, ed=E["EX2"]),
                 self.gemm(L.gate, S["X2"], E["EX2"], 1, D, e - c, S["G"], rows=(c, e)),
                 self.gemm(L.up, S["X2"], E["EX2"], 1, D, e - c, S["U"], reuse=True, rows=(c, e)),
                 self.vec(VecOp.SWIGLU, S["G"], dd["s"] + c, 1, e - c, b=S["U"])]
        elif op.name == "down":
            P = [self.vec(VecOp.QUANT, dd["s"], S["U"], 1, I, ed=E["ES"]),
                 self.gemm(L.down, S["U"], E["ES"], 1, I, b - a, S["Dn"], rows=(a, b)),
                 self.vec(VecOp.ADD, dd["h1"] + a, dd["h"][1 - dd["cur"]] + a, 1, b - a, b=S["Dn"])]
            dd["cur"] = 1 - dd["cur"]
        else:
            raise ExecError(f"node {self.n}: unknown dfinish stage {op.name!r}")
        self.emit(P)

    def tp_dlogits(self, op):
        """W node j: RMSNorm of the whole h, the head's rows of its vocabulary slice, SPR; the host
        keeps the slice's best (value, token id; lowest id on ties)."""
        dd, S, E, sp, j = self.dd, self.S, self.E, self.split, op.part[0]
        v0, v1 = sp.vocab(j)
        self.emit([self.vec(VecOp.RMSNORM, dd["h"][dd["cur"]], S["Xf"], 1, self.D, ed=E["EX"]),
                   self.gemm(self.im.qm.head, S["Xf"], E["EX"], 1, self.D, v1 - v0, S["LG"], rows=(v0, v1)),
                   instr(EOp.SPR, a=S["LG"], n0=v1 - v0)])
        fr = yield from self.wait_sp(4 * (v1 - v0), "decode logits slice")
        lg = torch.tensor(_bytes_words(fr), dtype=torch.int64)
        i = int(torch.argmax(lg))
        dd["bests"][j] = (int(lg[i]), v0 + i)

    def tp_dpick(self, op):
        bests = self.dd["bests"]
        if sorted(bests) != list(range(self.split.W)):
            raise ExecError(f"node {self.n}: dpick with the best of slices {sorted(bests)}, expected all "
                            f"{self.split.W}")
        tok = pick(bests.values())
        self.req_tokens(op.req).append(tok)
        self.picked.setdefault(op.req, []).append(next(vi for vi in bests.values() if vi[1] == tok))
        bests.clear()
        self.t_tokens.append(self.hw.cycle)

    def _tp_sets(self, what, j):
        """(address, count, exponent memory?, bits) of every EMIT set of ``what`` from slice j
        (``WeightSplit.wire``; bits 32: plain words)."""
        dd = self.dd
        base = {"q": (dd["q"], False), "eq": (dd["eq"], True), "kt": (dd["kt"], False), "ekt": (dd["ekt"], True),
                "vt": (dd["vt"], False), "evt": (dd["evt"], True), "pm": (dd["pm"], False),
                "a": (self.S["A"], False), "h1": (dd.get("h1"), False), "s": (dd.get("s"), False),
                "h": (dd["h"][dd["cur"]], False)}
        return [(base[f][0] + off, n, base[f][1], bits) for f, off, n, bits in self.split.wire(what, j)]

    def tp_send(self, op):
        j = op.part[0]
        if op.what == "best":
            a = self.sp.alloc(2, "best")
            self.emit([instr(EOp.SPW, dst=a, n0=2)])
            self.feed(list(self.dd["bests"][j]))
            self.emit([instr(EOp.EMIT, a=a, n0=2, meta=pack_int(op.meta))])
            self.sp.free(a)                 # the engine runs in order: the SPW/EMIT pair is done first
            return
        P = []
        for a, n, em, bits in self._tp_sets(op.what, j):
            if bits == 32:
                per = self.max_payload // 4
                P += [instr(EOp.EMIT, flags=int(em), a=a + i, n0=min(per, n - i), meta=pack_int(op.meta))
                      for i in range(0, n, per)]
            else:
                P += self.emit_packed(a, n, em, bits, op.meta)
        self.emit(P)

    def tp_recv(self, op):
        j = op.part[0]
        kind = "q" if op.what == "q" else "data"
        key = (kind, op.peer, op.layer, op.unit)
        if op.what == "best":
            (pl,) = yield from self.wait_rx(key, 1)
            v, i = _bytes_words(pl)
            self.dd["bests"][j] = (v, i)
            return
        sets = self._tp_sets(op.what, j)
        sizes = [self.parts_of(n, bits) for _a, n, _em, bits in sets]
        payloads = yield from self.wait_rx(key, sum(len(x) for x in sizes))
        P, words, i = [], [], 0
        for (a, n, em, bits), sz in zip(sets, sizes):
            got = payloads[i:i + len(sz)]
            i += len(sz)
            if [len(x) for x in got] != sz:
                raise ExecError(f"node {self.n}: {op.what} slice {j} from {op.peer}: packets of "
                                f"{[len(x) for x in got]} bytes, expected {sz}")
            if bits == 32:
                P.append(instr(EOp.SPW, flags=int(em), dst=a, n0=n))
            else:
                P.append(instr(EOp.SPW, flags=int(em) | 2, bits=bits % 16, dst=a, n0=n))
            words += _bytes_words(b"".join(got))
        self.emit(P)
        self.feed(words)

    # ------------------------------------------------------------------ the interpreter
    def run(self):
        for idx, op in enumerate(self.p.ops[self.n]):
            k = op.kind
            if self.deferred is not None and not (k == "send" and op.what == "q"):
                self.flush_kv_projection()
            self.cur_req = op.req
            if k in DECODE_KINDS or k == "dfree" or (k in ("send", "recv") and op.what != "kv"):
                self.dinit(op.req)
            if k in ("dproject", "dattend"):
                self.step_versions[(op.req, op.rows[0], op.layer)] = self.version
            if k == "embed":
                self.op_embed(op.req, op.rows)
            elif k == "project":
                yield from self.op_project(op.req, op.layer, op.rows, op.unit)
            elif k == "acquire":
                for u in op.units:
                    yield from self.kvcmd(Opcode.ACQUIRE, op.layer, u, k)
                    self.held[(op.layer, u)] = self.held.get((op.layer, u), 0) + 1
            elif k == "release":
                for u in op.units:
                    if not self.held.get((op.layer, u)):
                        raise ExecError(f"node {self.n} op {idx}: release of ({op.layer},{u}) not held")
                    self.held[(op.layer, u)] -= 1
                    yield from self.wait_unused(op.layer, u)
                    r = yield from self.kvcmd(Opcode.RELEASE, op.layer, u, k)
                    if r.freed:
                        self.drop_unit(op.layer, u)
            elif k == "drain":
                yield from self.wait_unused(op.layer, op.unit)
                r = yield from self.kvcmd(Opcode.MARK_DRAINING, op.layer, op.unit, k)
                if r.freed:
                    self.drop_unit(op.layer, op.unit)
            elif k == "attend":
                self.op_attend(op.req, op.layer, op.rows, op.units)
            elif k == "finish":
                self.op_finish(op.req, op.layer, op.rows)
            elif k == "logits":
                yield from self.op_logits(op.req, op.rows)
            elif k == "send":
                if op.what == "kv":
                    self.op_send_kv(op)
                elif op.part:
                    self.tp_send(op)
                else:
                    self.op_dsend(op)
                    if op.what == "q":
                        self.flush_kv_projection()
            elif k == "recv":
                if op.what == "kv":
                    yield from self.op_recv_kv(op)
                elif op.part:
                    yield from self.tp_recv(op)
                else:
                    yield from self.op_drecv(op)
            elif k == "unstage":
                u = self.units.get((op.layer, op.unit))
                if u is None or u["kind"] != "stage":
                    raise ExecError(f"node {self.n} op {idx}: unstage of ({op.layer},{op.unit}) not staged")
                if self.install:             # a staged unit is a pool entry the NIC installed
                    yield from self.wait_unused(op.layer, op.unit)
                    yield from self.kvcmd(Opcode.INVALIDATE, op.layer, op.unit, k)
                self.drop_unit(op.layer, op.unit)
            elif k == "free":
                yield from self.wait_unused(op.layer, op.unit)
                r = yield from self.kvcmd(Opcode.FREE_OWNER, op.layer, op.unit, k)
                if r.freed:
                    self.drop_unit(op.layer, op.unit)
            elif k == "mark":
                self.marks[op.name] = self.hw.cycle
                if op.name == "prefill_done":
                    self.layout_prefill = self.layout()
            elif k == "publish":
                self.waiting_publish = op.step       # the orchestrator publishes at the barrier
                while self.waiting_publish is not None:
                    yield
                self.version += 1
            elif k == "dfree":
                yield from self.op_dfree(op.req)
            elif k == "dembed":
                self.op_dembed(op.req)
            elif k == "dproject":
                self.dd["pos"] = op.rows[0]
                if op.part:
                    self.tp_dproject(op)
                else:
                    self.op_dproject(op.layer, op.rows[0])
            elif k == "append":
                self.op_append(op.req, op.layer, op.rows[0])
            elif k == "dattend":
                self.dd["pos"] = op.rows[0]         # the local work happens in the all-reduce phases
            elif k == "allreduce":
                yield from self.op_allreduce(op)
            elif k == "dfinish":
                if op.part:
                    self.tp_dfinish(op)
                else:
                    self.op_dfinish(op.layer)
            elif k == "dlogits":
                if op.part:
                    yield from self.tp_dlogits(op)
                else:
                    yield from self.op_dlogits(op.req)
            elif k == "dpick":
                self.tp_dpick(op)
            else:
                raise ExecError(f"node {self.n}: op {k!r} is not supported by the RTL executor")
            self.done_ops += 1

    def layout(self) -> dict:
        return pool_layout(self.pool)


# ---------------------------------------------------------------------- the orchestrator

#: Engine parameters of the simulated node for the small Qwen2-shaped models (micro): a 64-MAC
#: GEMM array (pn 4 x pk 16), 32-row tiles, head_dim 16 attention over a 4096-row KV memory.
SIM_ENGINE = dict(pn=4, pk=16, group=32, kc_max=8, x_depth=256, t_max=32, pack2=True, d_max=128,
                  head_dim=16, nq_max=64, kv_depth=4096, nb_max=4, z_max=32, blk_max=32,
                  sp_depth=1 << 17, em_depth=4096, cmd_depth=16)


def sim_node_config(topology: str = "ring", kv_slots: int = 48, engine: dict | None = None):
    """The ``hdl.node.NodeConfig`` the RTL executor builds by default (one Verilator build per
    topology, cached by content)."""
    from hdl.node import NodeConfig, node_nic
    n_net = 2 if topology == "ring" else 4
    return NodeConfig(engine=dict(engine or SIM_ENGINE), nic=node_nic(n_net), kv_slots=kv_slots)


#: The simulated node with K/V in DDR that the performance model is calibrated and validated on
#: (``scripts/calibrate_perf.py``): ``SIM_ENGINE`` with a KV region of ``SIM_DDR_SLOTS`` slots of
#: 32 rows (2 KV heads x a 16-token unit or block), 2 staging windows of ``blk_max`` = 32 rows and
#: the KR260 build's streamer AXI parameters (bursts of 16, 8 in flight).
SIM_DDR_SLOTS, SIM_DDR_SLOT_ROWS, SIM_DDR_BASE = 128, 32, 0x40_0000_0000


def sim_ddr_node_config(topology: str = "ring", kv_slots: int = 48, kv_bits: int = 8):
    """``sim_node_config`` whose engine keeps K/V in a DDR region (``run_rtl`` attaches the AXI4
    memory model to its ``m_axi_kv``); one Verilator build per topology and ``kv_bits``."""
    from golden.kvstore import KVRegion
    from hdl.compute.engine import KR260_KV_DDR
    region = KVRegion(base=SIM_DDR_BASE, n_slots=SIM_DDR_SLOTS, slot_rows=SIM_DDR_SLOT_ROWS,
                      d=SIM_ENGINE["head_dim"], kv_bits=kv_bits)
    eng = dict(SIM_ENGINE, kv_region=region, kv_win_rows=SIM_ENGINE["blk_max"], kv_n_win=2,
               kv_dma=dict(KR260_KV_DDR["kv_dma"]))
    return dataclasses.replace(sim_node_config(topology, kv_slots=kv_slots), engine=eng)


def run_rtl(program, im: IntModel, prompt, *, node_cfg=None, chunk: int = 64, progress=None,
            max_cycles: int = 50_000_000, stall_cycles: int = 200_000, query_first: bool = False,
            cluster=None, make_hw=None, kv_latency: int = 100, kv_stalls: bool = True,
            link_fate=None) -> RtlResult:
    """Run ``program`` (prefill and decode) on a simulated cluster of ``program.nodes`` Verilated nodes.

    Returns an ``RtlResult``: ``logits`` (every prompt row, int), ``tokens`` (the leader's
    generated tokens), ``decode_cycles`` (first token to last token),
    ``issued`` (per node, every engine instruction queued as (program op index, INSTR fields)),
    ``req_tokens`` / ``req_logits`` (per request; ``tokens`` / ``logits`` are request 0's),
    ``req_picked`` (per request: (logit, token) of every decode step of a tensor-parallel W group),
    ``rx_log`` (per node: (cycle, 'q' | 'sum', kv_id) of every query and merged-partial packet
    its host collected, at ``chunk`` granularity),
    ``step_versions`` (per node: routing version every decode op of a (req, pos, layer) ran under),
    ``publishes`` (elastic route updates: step, holders' union ``group``, ``groups`` per request,
    cycles of the shadow-bank writes and flip, every node's active bank before and after),
    ``nic_counters`` (frames accepted and drops per cause, per node),
    ``layout`` / ``layout_states`` (pool at prefill_done, per node), ``ttft_cycles`` (cycle at which
    the node holding the last prompt row has its logits), ``prefill_cycles`` (last node done),
    ``wire_bytes`` (every Ethernet frame forwarded between nodes, acks and retransmissions
    included), ``peak_slots`` per node (KV-pool slots), ``events`` (directory answers per node),
    ``cycles_simulated`` and ``seconds``. ``progress(done_ops, total_ops)`` is called as it runs.
    ``query_first``: the decode leader queues each token's Q projection and Q send before its
    K/V projection, so the holders start attention while W_K/W_V run (KernelFlume §5.1; the
    tail still waits for K_new/V_new). Timing only: the same instructions, reordered.
    ``cluster`` (default: a new ``SimCluster``) is anything with ``configure(routes)``, ``step(n)``
    and ``node(i)``; ``make_hw(cluster, i)`` gives node i's ``hw`` (default ``cluster.node(i)``):
    the board executor runs the same loop on boards through their DMA front-ends. Wire bytes are
    counted only on a cluster this function builds (a given one may carry its own link faults).
    K/V in DDR (the node's engine has a ``kv_region``): on a cluster this function builds, every
    node's ``m_axi_kv`` gets the AXI4 memory model over the region (``kv_latency`` cycles, random
    ready stalls unless ``kv_stalls`` is False), and after the run every KV row the nodes hold
    for decode is compared with IntModel's (``ExecError`` on a difference); ``kv_rows_checked``
    (per node: K and V rows compared),
    ``kv_loads`` (KVL per node) and ``kv_bus`` (per node: bytes read, bytes written on
    ``m_axi_kv``) are then set (else None). With ``NodeConfig.kv_install`` the NIC installs every
    received KV unit (the installer's ``m_axi_kvin`` writes the same memory image), senders send
    from DDR with KVS, the host mirrors the pool from the node's event stream
    (``kv_events.PoolMirror``) and ``kv_installs`` holds each node's installer counters (the run
    fails on any dropped or failed install packet). ``link_fate(node, port, frame) -> [frames]``
    (a cluster this function builds): link faults; the wire bytes count what it returns."""
    from hdl.cluster import KV_BASE, SimCluster
    program.prompts(prompt)          # refused before any work: wrong count or length
    if im.qm.block != program.block or im.qm.kv_bits != program.kv_bits:
        raise ValueError(f"the model was quantised with block={im.qm.block}, kv_bits={im.qm.kv_bits}; the "
                         f"program expects block={program.block}, kv_bits={program.kv_bits}")
    if query_first and program.wsplit is not None:
        raise ValueError("run_rtl(query_first=True) with a tensor-parallel W group (Program.wsplit): the "
                         "query-first reordering is defined for one W node only")
    ncfg = node_cfg or sim_node_config(_topo_name(program.topo))
    t_start = time.time()
    routes, rid_max, rid_sum = _decode_routes(program)
    # every driver checks the program against the node's memories before any simulation
    drivers = []
    for n in range(program.nodes):
        drv = NodeDriver(n, program, im, prompt, None, ncfg, ncfg.engine)
        drv.kv_cmd_bytes, drv.kv_slot_bits, drv.kv_reader_bits = _kv_widths(ncfg)
        drv.rid_max, drv.rid_sum = rid_max, rid_sum
        drv.query_first = query_first
        if drv.install:
            drv.mirror = PoolMirror(drv.pool, (kv_id_layout(ncfg.nic.meta).size, ncfg.kv_slots, 15), n)
        drivers.append(drv)
    wire = [None]
    if cluster is None:
        cl = SimCluster(program.nodes, topology=_topo_name(program.topo), node_cfg=ncfg, chunk=chunk)
        wire = [0]
        _count_wires(cl, wire, link_fate)
    else:
        cl = cluster
    cl.configure(routes)
    for drv in drivers:
        drv.hw = make_hw(cl, drv.n) if make_hw else cl.node(drv.n)
    region = ncfg.engine.get("kv_region")
    kv_mems = None
    if region is not None and cluster is None:
        kv_mems = [drv.hw.memory("m_axi_kv", region.size, base=region.base, latency=kv_latency,
                                 ready_seed=(1 + drv.n) if kv_stalls else None) for drv in drivers]
        for drv in drivers:                  # the installer writes the same image (HP2's AW/W/B)
            if drv.install:
                drv.hw.memory("m_axi_kvin", region.size, base=region.base, latency=kv_latency,
                              ready_seed=(101 + drv.n) if kv_stalls else None, share="m_axi_kv")
    for drv in drivers:
        # KV-pool budget = the program's S_node; with NIC installs the whole pool (a unit may
        # arrive before the program frees the slot it expects to reuse, and staged units are
        # pool entries): the run fails if the installer ever finds it full (kv_events.py)
        drv.hw.axil_write(KV_BASE + 0x1C, drv.pool.n_slots if drv.install else program.n_slots)
    base = max(drv.hw.cycle for drv in drivers)
    for drv in drivers:                                        # align the nodes' clocks
        if drv.hw.cycle < base:
            drv.hw.step(base - drv.hw.cycle)
    gens = {drv.n: drv.run() for drv in drivers}
    publishes = []
    total = sum(len(ops) for ops in program.ops)
    cycles, last_progress, last_done, last_level = 0, 0, -1, -1
    while gens:
        for n in list(gens):
            try:
                next(gens[n])
            except StopIteration:
                del gens[n]
        if not gens:
            break
        if gens and all(d.waiting_publish is not None for d in drivers if d.n in gens):
            step = {d.waiting_publish for d in drivers if d.n in gens}
            if len(step) != 1:
                raise ExecError(f"nodes wait to publish different decode steps {sorted(step)}")
            _drain(cl, drivers, chunk, stall_cycles)
            s_ = step.pop()
            op = next(op for op in program.ops[drivers[0].n] if op.kind == "publish" and op.step == s_)
            cyc, before, after = _publish(cl, drivers, program, dict(op.groups))
            publishes.append({"step": s_, "group": tuple(op.dsts), "groups": dict(op.groups), "cycles": cyc,
                              "bank_before": before, "bank_after": after})
            for d in drivers:
                d.waiting_publish = None
            continue
        cl.step(chunk)
        cycles += chunk
        for drv in drivers:
            _collect(drv)
        done = sum(d.done_ops for d in drivers)
        # progress = a finished op, or any node consuming its queued inputs (a long engine queue
        # drains for a long time after the host has issued everything)
        level = sum(d.hw.pending(p) for d in drivers for p in _INPUTS)
        if done != last_done or level != last_level:
            last_done, last_level, last_progress = done, level, cycles
            if progress:
                progress(done, total)
        if cycles - last_progress > stall_cycles or cycles > max_cycles:
            where = {d.n: (d.done_ops, program.ops[d.n][d.done_ops].kind if d.done_ops < len(program.ops[d.n])
                           else "end") for d in drivers if d.n in gens}
            status = {d.n: (hex(d.hw.axil_read(0x0000)[0]), d.hw.axil_read(0x0004)[0], d.cmd_count,
                            {p: d.hw.pending(p) for p in _INPUTS})
                      for d in drivers}
            inbox = {d.n: {k: len(v) for k, v in d.inbox.items() if v} for d in drivers}
            stuck = {}
            for d in drivers:
                k = status[d.n][1]
                if k < len(d.issued):
                    oi, ins = d.issued[k]
                    stuck[d.n] = (oi, program.ops[d.n][oi].kind, _instr_brief(ins))
            nic = {d.n: _nic_counters(d.hw) for d in drivers}
            if os.environ.get("MCF_RTL_TRACE"):
                for d in drivers:
                    with open(os.path.join(os.environ["MCF_RTL_TRACE"], f"node{d.n}.pkl"), "wb") as f:
                        pickle.dump(d.pushlog, f)
            raise ExecError(f"RTL cluster made no progress for {cycles - last_progress} cycles; nodes at "
                            f"(op index, kind) {where}; engine (STATUS, retired, queued, bytes pending on its inputs) {status}; "
                            f"undelivered packets {inbox}; NIC counters {nic}; wire bytes {wire[0]}; "
                            f"instruction each engine is executing (op index, op, instruction) {stuck}")
    # drain: let every engine finish its queue
    for _ in range(max_cycles // chunk):
        if all(_idle(d) for d in drivers):
            break
        cl.step(chunk)
        for drv in drivers:
            _collect(drv)
    if kv_mems is not None:          # the last KVW rows land in DDR before the image is read
        for _ in range(max_cycles // chunk):
            if not any(d.hw.axil_read(0x0000)[0] & 1 for d in drivers):
                break
            cl.step(chunk)
    nic = {d.n: _nic_counters(d.hw) for d in drivers}
    kv_installs = None
    if drivers[0].install:
        for d in drivers:                    # events still in flight (the last commits, frees)
            _collect(d)
        kv_installs = [_check_installs(d) for d in drivers]
    for drv in drivers:
        st, _ = drv.hw.axil_read(0x0000)
        if (st >> 8) & 0xFF:
            raise ExecError(f"node {drv.n}: engine error flags {(st >> 8) & 0xFF:#x} (STATUS {st:#x})")
    lead = drivers[program.leader]
    req_tokens = [lead.tokens.get(q, [])[:n] for q, (_p, n) in enumerate(program.reqs)]
    kv_checked = kv_bus = None
    if kv_mems is not None:
        caches = {q: expected_kv(im, lead.prompts[q], req_tokens[q]) for q in range(len(program.reqs))}
        kv_checked, kv_bus = [], []
        for d, mem in zip(drivers, kv_mems):
            held = d.held_kv()
            bad = ddr_mismatches(region, held, caches, program.block, d.Hk, mem.dump)
            if bad:
                raise ExecError(f"node {d.n}: the KV region in DDR differs from IntModel: " + "; ".join(bad))
            kv_checked.append(2 * d.Hk * sum(h[5] for h in held))
            log = mem.log
            kv_bus.append(tuple(sum((ln + 1) * region.bus_bytes for _c, k, _a, ln, _r in log if k == kind)
                                for kind in "RW"))
    rows = [{} for _ in program.reqs]
    for d in drivers:
        for (req, k), v in d.logits.items():
            rows[req][k] = v
    req_logits = [torch.cat([rw[k] for k in sorted(rw)]) for rw in rows]
    first = [d for d in drivers if d.t_logits is not None]
    return RtlResult(
        logits=req_logits[0], tokens=req_tokens[0], req_logits=req_logits, req_tokens=req_tokens,
        req_picked=[list(lead.picked.get(q, [])) for q in range(len(program.reqs))],
        step_versions=[d.step_versions for d in drivers], rx_log=[d.rx_log for d in drivers],
        decode_cycles=(lead.t_tokens[-1] - first[0].t_logits) if lead.t_tokens and first else None,
        layout={d.n: sorted(d.layout_prefill) for d in drivers},
        layout_states={d.n: d.layout_prefill for d in drivers},
        ttft_cycles=(first[0].t_logits - base) if first else None,
        prefill_cycles=max(d.marks.get("prefill_done", 0) for d in drivers) - base,
        wire_bytes=wire[0], peak_slots=[d.pool.peak_slots for d in drivers],
        events=[d.events for d in drivers], seconds=time.time() - t_start,
        cycles_simulated=max(d.hw.cycle for d in drivers) - base, publishes=publishes, nic_counters=nic,
        issued=[d.issued for d in drivers], kv_rows_checked=kv_checked, kv_bus=kv_bus,
        kv_loads=[d.ddr.loads for d in drivers] if drivers[0].ddr is not None else None,
        kv_installs=kv_installs)


def _decode_members(program) -> dict:
    """{req: every node that is ever one of the request's holders} (the initial decode group and
    every node an elastic ``publish`` adds), in a fixed order."""
    out = {q: list(program.decode_group) for q in range(len(program.reqs))}
    for op in program.ops[0]:
        if op.kind == "publish":
            for q, grp in op.groups:
                out[q] += [n for n in grp if n not in out[q]]
    return out


def _decode_routes(program, groups=None):
    """The program's route tables plus, per request and holder, the routes of the decode
    collectives for ``groups`` ({req: holders}; default: every request on the initial decode
    group; a request not in ``groups`` has finished and gets no entries): the max all-reduce (to
    every holder, fan-in = holders) and the partial merge (to the leader, fan-in = holders).
    Route ids are fixed per (request, member) (``rid_max``, ``rid_sum``), so an elastic
    ``publish`` only rewrites entries. Refused if the route table cannot hold them."""
    import copy
    routes = copy.deepcopy(program.routes)
    if groups is None:
        groups = {q: tuple(program.decode_group) for q in range(len(program.reqs))}
    rid_max, rid_sum = {}, {}
    if max(n for _p, n in program.reqs) > 1:
        members = _decode_members(program)
        pairs = [(q, g) for q in sorted(members) for g in members[q]]
        need = routes.next_id + 2 * len(pairs)
        if need > routes.n_routes:
            raise ValueError(f"decode collectives need {need} route-table entries, the NIC has "
                             f"{routes.n_routes} (ClusterConfig.route_table_size)")
        base = routes.next_id
        for i, key in enumerate(pairs):
            rid_max[key], rid_sum[key] = base + 2 * i, base + 2 * i + 1
        for q, group in groups.items():
            if program.stats.get("w_only"):      # the W node adds nothing to the merges
                group = tuple(g for g in group if g != program.leader)
            for g in group:
                routes.add(g, group, fanin=len(group), route_id=rid_max[(q, g)])
                routes.add(g, [program.leader], fanin=len(group), route_id=rid_sum[(q, g)])
        routes.next_id = base + 2 * len(pairs)
    return routes, rid_max, rid_sum


def _banks(drivers) -> dict:
    """{node: index of its NIC's active route bank} (AXI-Lite BANK)."""
    from hdl.cluster import NIC_BASE
    from hdl.nic.config import Reg
    return {d.n: d.hw.axil_read(NIC_BASE + Reg.BANK)[0] for d in drivers}


def _publish(cl, drivers, program, groups) -> tuple:
    """KernelFlume route update at a token boundary: every NIC's shadow bank gets the whole table
    for ``groups`` ({req: holders}; AXI-Lite ROUTE_INDEX/ROUTE_DATA writes), then BANK_FLIP.
    Returns (cycles the slowest node spent — the writes are serial on each node's AXI-Lite port —,
    active bank of every node before, and after)."""
    from hdl.cluster import NIC_BASE
    from hdl.nic.config import Reg
    routes, _, _ = _decode_routes(program, groups)
    before = _banks(drivers)
    worst = 0
    for d in drivers:
        hw, c0 = d.hw, d.hw.cycle
        for rid in range(routes.n_routes):
            e = routes.tables[d.n].get(rid)
            hw.axil_write(NIC_BASE + Reg.ROUTE_INDEX, rid)
            hw.axil_write(NIC_BASE + Reg.ROUTE_DATA, e.encode() if e is not None else 0)
        hw.axil_write(NIC_BASE + Reg.BANK_FLIP, 1)
        worst = max(worst, hw.cycle - c0)
    after = _banks(drivers)
    top = max(d.hw.cycle for d in drivers)
    for d in drivers:                       # the nodes' clocks stay aligned
        if d.hw.cycle < top:
            d.hw.step(top - d.hw.cycle)
    return worst, before, after


def _topo_name(topo) -> str:
    return "mesh" if type(topo).__name__.lower().startswith("mesh") else "ring"


def _check_installs(drv) -> dict:
    """After a run with NIC installs: the installer dropped nothing, every commit it counted is one
    the host replayed, and the pool's slot and byte counters equal the golden mirror's.
    Returns the installer's counters."""
    from hdl.kvinstall import REGISTERS as IREGS
    from hdl.kvpool import REGISTERS as PREGS
    from hdl.node import KVINSTALL_WINDOW
    ib = KVINSTALL_WINDOW[1]
    got = {r.name: drv.hw.axil_read(ib + r.offset)[0] for r in IREGS
           if r.access.name == "RO" and not r.name.startswith("err_addr")}
    bad = {k: v for k, v in got.items() if k.startswith("drop") or k in ("axi_err", "err_code")}
    if any(bad.values()) or got["status"] & 2:
        raise ExecError(f"node {drv.n}: the KV installer dropped or failed packets: {got}")
    commits = drv.mirror.commits_counted()
    if got["committed"] != commits:
        raise ExecError(f"node {drv.n}: the installer counted {got['committed']} commits, the pool "
                        f"reported {commits}")
    left = {k: len(v) for k, v in drv.mirror.commits.items() if v}
    if left:
        raise ExecError(f"node {drv.n}: units installed that no recv op took: {left}")
    off = {r.name: r.offset for r in PREGS}
    from hdl.cluster import KV_BASE
    used = drv.hw.axil_read(KV_BASE + off["used_slots"])[0]
    if used != drv.pool.used_slots:
        raise ExecError(f"node {drv.n}: the KV pool holds {used} slots, golden.kvpool {drv.pool.used_slots}")
    return got


def _kv_table(ncfg):
    """golden.kvpool's ``table`` of the node's directory (None: the CAM)."""
    if getattr(ncfg, "kv_directory", "cam") != "table":
        return None
    return (ncfg.kv_layers, ncfg.kv_blocks)


def _kv_widths(ncfg):
    """(cmd tdata bytes, slot bits, reader bits) of the node's KV-pool streams (hdl.kvpool)."""
    from hdl.kvpool import cmd_layout, DEFAULT_KV_ID_WIDTH
    readers = 15                                   # hdl.node.Node: resp_layout(kv_slots, 15)
    return (-(-cmd_layout(DEFAULT_KV_ID_WIDTH).size // 8), max(1, (ncfg.kv_slots - 1).bit_length()),
            readers.bit_length())


_INPUTS = ("s_axis_cmd", "s_axis_w", "s_axis_sp", "s_axis_kvcmd")


def _instr_brief(ins: dict) -> str:
    names = {v: k for k, v in vars(EOp).items() if not k.startswith("_") and isinstance(v, int)}
    keep = ("sub", "flags", "a", "b", "dst", "n0", "n1", "len", "nblk", "ntok", "kvb", "kpos", "bits")
    return names.get(ins["op"], str(ins["op"])) + " " + " ".join(f"{k}={ins[k]}" for k in keep if ins.get(k))


def _nic_counters(hw) -> dict:
    """Nonzero NIC counters of one node (frames accepted, drops per cause)."""
    from hdl.cluster import NIC_BASE
    from hdl.nic.config import ErrorCause, Reg
    out = {"rx_frames": hw.axil_read(NIC_BASE + Reg.RX_FRAMES)[0]}
    for c in ErrorCause:
        v = hw.axil_read(NIC_BASE + Reg.ERR_BASE + 4 * c)[0]
        if v:
            out[c.name] = v
    return out


def _count_wires(cl, wire, link_fate=None):
    """Count the bytes of every frame the links carry (a pass-through fate on every wire), after
    ``link_fate(node, port, frame) -> [frames]`` (faults) when given."""
    def make(i, p):
        def fate(frame):
            out = [frame] if link_fate is None else link_fate(i, p, frame)
            wire[0] += sum(len(f) for f in out)
            return out
        return fate
    for i, p, _j, _q in cl.wires:
        cl.fault(i, p, make(i, p))


def _drain(cl, drivers, chunk, limit):
    """Step until every node's inputs are consumed and its engine is idle (a token boundary:
    no packet of the finished step is still to be sent)."""
    for _ in range(max(1, limit // chunk)):
        if all(_idle(d) and not (d.hw.axil_read(0x0000)[0] & 1) for d in drivers):
            return
        cl.step(chunk)
        for d in drivers:
            _collect(d)
    raise ExecError(f"nodes did not drain within {limit} cycles before a route publish")


def _inbox_kind(meta) -> str:
    if meta.stage == Stage.PREFILL:
        return "kv"
    if meta.reduce_op == ReduceOp.MAX:
        return "max"
    if meta.reduce_op in (ReduceOp.SUM, ReduceOp.SOFTMAX_MERGE):
        return "sum"
    return {MOp.QUERY: "q", MOp.DATA: "data"}.get(meta.op, f"op{int(meta.op)}")


def decode_sum_packets(num_heads: int, head_dim: int, max_payload: int) -> tuple:
    """(int32 words per packet, packets) of decode's sum phase: the partial rows of all heads
    (``num_heads * (2*head_dim + 4)`` words, contiguous) cut into packets of at most
    ``max_payload`` bytes (a multiple of 8: no int64 word is split), the last one shorter."""
    per = max_payload // 4
    return per, -(-num_heads * (2 * head_dim + PW_EXTRA) // per)


def decode_reduce_contexts(program, n_sum: int) -> tuple:
    """(NIC reduce-pool contexts a node needs for the decode merge, why) when each merge is one
    max group plus ``n_sum`` sum groups (``NodeDriver.op_allreduce``). A holder sends its sum
    groups only after the max result, which needs every holder's max contribution: when the root
    holds KV (it is in the max group) it can have one request's sum groups and the next one's max
    group open (1 + n_sum); a holder may see two max groups (its own not yet closed, the next one
    from a faster holder). A W-only root is not in the max group: with pipelined requests the
    holders may send the sum groups of every request of a round before the root takes any."""
    if not program.stats.get("w_only"):
        return max(2, 1 + n_sum), f"1 max + {n_sum} sum groups of the merge"
    reqs = max(1, len(program.reqs)) if program.stats.get("pipeline", True) else 1
    return max(2, reqs * n_sum), f"{n_sum} sum groups of the merge x {reqs} pipelined requests at a W-only root"


def _collect(drv):
    hw = drv.hw
    for fr in hw.pull_all("m_axis_rx"):
        meta = unpack_header(fr[:HDR])
        payload = fr[HDR:HDR + meta.length]
        kind = _inbox_kind(meta)
        drv.inbox[(kind, meta.src, meta.kv_id[0], meta.kv_id[1])].append(payload)
        if kind in ("q", "sum"):
            drv.rx_log.append((hw.cycle, kind, meta.kv_id))
    for fr in hw.pull_all("m_axis_sp"):
        drv.sp_frames.append(fr)
    for fr in hw.pull_all("m_axis_kvresp"):
        drv.kv_resps.append(drv.kv_decode(fr))
    if drv.mirror is not None:
        for fr in hw.pull_all("m_axis_kvevent"):
            drv.mirror.feed(fr)


def _idle(drv) -> bool:
    return drv.hw.pending("s_axis_cmd") == 0 and drv.hw.pending("s_axis_sp") == 0
