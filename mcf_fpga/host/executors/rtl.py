"""RTL executor: a ``host.program.Program`` on the simulated hardware cluster (``sim.cluster``).

Every node is the Verilated ``hdl.node.Node``: compute engine, packetizer, NIC, link layers and
KV-pool directory. The program is compiled once (``host.compiler``: one instruction stream per
node, every address and instruction decided ahead); the host side of each node (this module, one
``NodeDriver`` per node) runs its stream and does what the node's host CPU and DMA engines do on
a board:

* it queues the stream's engine instructions (``spec.instr.EngineOpcode``) on ``s_axis_cmd``, with
  the weight tiles on ``s_axis_w`` and input words (embedding rows, RoPE table rows, received
  payloads) on ``s_axis_sp`` -- the streams the node's ping-pong weight loader and data DMA feed
  on a board -- after giving each symbolic KV address (``host.compiler.KvRow`` / ``KvSlot``) the
  slot the node's directory chose;
* it sends every KV-pool directory command (alloc, install, acquire, release, drain, free) to the
  hardware pool (``s_axis_kvcmd``) and checks each answer against ``golden.kvpool.KVPool`` (and
  its ``freed`` flag against the compiler's);
* it collects the packets the NIC delivers (``m_axis_rx``, what the RX DMA writes to DDR) and,
  when the stream reaches the matching ``Recv``, streams their payload into the scratchpad;
* it reads the logits and picks decode's tokens.

Everything between -- projections, attention, folds, FFN, logits, packetization, routing,
multicast, link framing and retransmission -- happens in the RTL, cycle by cycle. The host only
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

from mcf_fpga.golden import numerics as nx
from mcf_fpga.golden.int_model import IntModel
from mcf_fpga.host.engine_fit import check_engine_fits
from mcf_fpga.golden.kvpool import KVPool
from mcf_fpga.spec.kvpool import Opcode, Status, kv_id_from
from mcf_fpga.hdl.compute.engine import INSTR
from mcf_fpga.spec.instr import EngineOpcode, opcode_name
from mcf_fpga.spec.instr import instr_value
from mcf_fpga.hdl.compute.program import gemm_weight_beats
from mcf_fpga.spec.meta import DEFAULT_PARAMS
from mcf_fpga.hdl.meta import kv_id_layout
from mcf_fpga.golden.header import unpack_header

from mcf_fpga.host import compiler as C
from mcf_fpga.host.install_credits import install_credits
from mcf_fpga.host.compiler import (KvRow, KvSlot, compile_program,  # noqa: F401
                           decode_reduce_contexts, decode_sum_packets, fold_batches, kv_table, pad_values,
                           up_to)
from mcf_fpga.host.node_image import unit_image
from mcf_fpga.host.program_ops import Publish

from .kv_ddr import ddr_mismatches, expected_kv
from .kv_events import PoolMirror
from .runtime import ExecError, pool_layout
from .tp_stages import pick

__all__ = ["run_rtl", "RtlResult", "NodeDriver", "up_to", "pad_values", "fold_batches",
           "decode_sum_packets", "decode_reduce_contexts"]

ENGINE_RETIRED = 0x0004                # engine register: instructions retired (hdl.compute.engine)
HDR = DEFAULT_PARAMS.header_bytes     # wire header bytes in front of every rx payload


def _s32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def _words_bytes(words) -> bytes:
    return b"".join((int(w) & 0xFFFFFFFF).to_bytes(4, "little") for w in words)


def _bytes_words(b: bytes) -> list:
    return [_s32(int.from_bytes(b[i:i + 4], "little")) for i in range(0, len(b), 4)]


class RtlResult:
    """Outputs and measurements of one RTL run (``ExecResult`` fields plus cycles and bytes)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


#: records that read an SPR frame: the host reads them even when the node picks their token
_FRAMES = (C.Logits, C.DLogits, C.TpLogits, C.RecvToken, C.Pick)


class NodeDriver:
    """The host side of one node: runs the node's compiled stream (``comp``, a
    ``host.compiler.NodeCompiler``) on ``hw`` (set before ``run``). ``run()`` is a generator that
    yields while it waits for the hardware (an rx message, scratchpad output, a directory answer,
    the engine's retired count)."""

    def __init__(self, comp, im: IntModel, prompt, ncfg):
        self.compiler, self.node, self.program, self.im, self.hw = comp, comp.node, comp.program, im, None
        self.ncfg = ncfg
        self.prompts = [torch.as_tensor(p, dtype=torch.long) for p in self.program.prompts(prompt)]
        self.install, self.ddr, self.kv_heads = comp.install, comp.ddr, comp.kv_heads
        self.pool = KVPool(comp.pool_slots, self.program.slot_bytes, kv_id_width=32, max_readers=15,
                           table=kv_table(ncfg), budget=comp.pool.budget)
        self.mirror = None                   # set by run_rtl when the node reports pool events
        self.slots = {}                      # (layer, unit) -> the slot the directory gave it
        self.inbox = collections.defaultdict(collections.deque)   # (kind, src, layer, unit) -> payloads
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
        self.decode_max = {}             # req -> the all-reduced max of its current decode layer
        self.bests = collections.defaultdict(dict)   # req -> {slice: (value, token)} (W group)
        self.stash = None        # words of the last Recv / RecvMax / RecvSum, for FeedRecv
        self.waiting_publish = None
        self.rx_log = []         # (cycle seen by the host, 'q' | 'sum', kv_id) of decode packets
        self.retired_seen = 0    # the engine's RETIRED count when last read (NIC installs)
        # the node's command fetcher runs the node's part of the stream (host.compiler.to_cmdstream):
        # the host serves only the rest (weights, rows, received words, logits)
        self.fetch = bool(getattr(ncfg, "fetcher", False))
        self.image = None        # fetch: host.node_image.NodeImage the node loads its data from
        self.peers = None        # fetch: every fetching node of the run (a fetcher error names their drops)
        self.load_mem = None     # ... in this memory (the loader's m_axi_load)
        self.at = None           # index of the record being served
        self.host_events = 0     # fetch: host events so far (publishes, mailbox entries): the doorbell
        self.wait_index = {}     # fetch: doorbell event -> index of the fetched record that waits for it
        self.layout_prefill = {}

    # ------------------------------------------------------------------ hardware queues
    def resolve(self, v):
        """A symbolic KV address -> the number (the slot the directory gave the unit)."""
        if isinstance(v, (KvRow, KvSlot)):
            slot = self.slots.get((v.layer, v.unit))
            if slot is None:
                raise ExecError(f"node {self.node}: KV unit ({v.layer},{v.unit}) is addressed but holds no slot")
            return slot if isinstance(v, KvSlot) else slot * self.compiler.slot_rows + v.off
        return v

    def emit(self, recs):
        instrs = []
        for r in recs:
            f = r.fields
            if any(isinstance(v, (KvRow, KvSlot)) for v in f.values()):
                f = {k: self.resolve(v) for k, v in f.items()}
            instrs.append(f)
            self.issued.append((r.op, f))
        nb = -(-INSTR.size // 8)
        frame = b"".join(instr_value(i).to_bytes(nb, "little") for i in instrs)
        self.push("s_axis_cmd", frame)
        self.cmd_count += len(instrs)

    def expect_reads(self, recs):
        """A fetched stream's ``SPR`` instructions (the host pushes none of them): a ``hw`` whose
        scratchpad reads need a buffer per read (``expect_sp_out(n)``, a board's ``sp_out``
        descriptor, ``host.board.node_hw.NodeHw``) gets one per ``SPR`` of n >= 1 words, in stream
        order; the simulator's ``m_axis_sp`` takes every word without one."""
        expect = getattr(self.hw, "expect_sp_out", None)
        if expect is None:
            return
        for r in recs:
            n = r.fields.get("n0", 0)
            if int(r.fields.get("op", -1)) == int(EngineOpcode.SPR) and n:
                expect(n)

    def push(self, port, data: bytes):
        self.hw.push(port, data)
        if self.pushlog is not None:
            self.pushlog.append((self.hw.cycle, port, bytes(data)))

    def feed(self, words):
        """Words for the engine's ``sp_in``: pushed on ``s_axis_sp``, or with the node's loader
        written to the record's mailbox entry of the image, then the doorbell rung."""
        if self.image is not None:
            addr, n, event = self.image.mail[self.at]
            if len(words) != n:
                raise ExecError(f"node {self.node}: record {self.at} feeds {len(words)} words, its mailbox "
                                f"entry holds {n}")
            self.load_mem.load(addr, unit_image(words, 32, self.image.data_width))
            self.host_events += 1
            if event != self.host_events:
                raise ExecError(f"node {self.node}: mailbox entry of record {self.at} is event {event}, the host "
                                f"counted {self.host_events}")
            self.doorbell(event)
        elif len(words):
            self.push("s_axis_sp", _words_bytes(words))

    def doorbell(self, event):
        from mcf_fpga.hdl import cmdfetch as F
        from mcf_fpga.hdl.node import CMDFETCH_WINDOW
        self.hw.axil_write(CMDFETCH_WINDOW[1] + F.DOORBELL, event)

    def image_bytes(self, key) -> bytes:
        """The bytes of one preloaded region of the node's image (``host.node_image``)."""
        dw = self.image.data_width
        if key[0] == "w":
            return b"".join(unit_image([bt["data"] for bt in tile], self.image.w_bits, dw)
                            for tile in self.weight_tiles(key[1:]))
        if key[0] == "embed":
            _k, req, (r0, r1) = key
            return unit_image(self.im.embed(self.prompts[req][r0:r1]).flatten().tolist(), 32, dw)
        if key[0] == "rope":
            return unit_image(self.cs_words(key[1], key[2]), 32, dw)
        if key[0] == "embtab":           # every token's embedding row, on whole beats
            return b"".join(unit_image(row, 32, dw) for row in self.im.embed(torch.arange(self.compiler.vocab)).tolist())
        if key[0] == "empty":
            from mcf_fpga.host.node_image import empty_partial_words
            return unit_image(empty_partial_words(self.compiler), 32, dw)
        raise ExecError(f"node {self.node}: unknown image region {key!r}")

    def weight_tiles(self, key) -> list:
        """The GEMM tiles (lists of beats) of weight ``key`` = (layer, name, rows)."""
        layer, name, rows = key
        qm = self.im.qm
        lin = qm.head if layer is None else getattr(qm.layers[layer], name)
        beats = gemm_weight_beats(lin if rows is None else lin.rows(*rows), self.compiler.pn, self.compiler.pk)
        tiles, cur = [], []
        for bt in beats:
            cur.append(bt)
            if bt["last"]:
                tiles.append(cur)
                cur = []
        if cur:
            raise ExecError("weight stream does not end a tile with last")
        return tiles

    def weights(self, rec):
        """Stream the weight tiles of ``rec`` (a ``Weights``: a matrix, or a slice of its output
        rows, whole tiles) into ``s_axis_w``, one frame per tile."""
        key = (rec.layer, rec.name, rec.rows)
        if key not in self.wcache:
            nb = self.compiler.pn * self.compiler.pk * 4 // 8
            self.wcache[key] = [b"".join(int(bt["data"]).to_bytes(nb, "little") for bt in tile)
                                for tile in self.weight_tiles(key)]
        for f in self.wcache[key]:
            self.push("s_axis_w", f)

    def kvcmd(self, rec):
        """One directory command; checks golden.kvpool's answer (status OK, the compiler's ``freed``)
        and takes the unit's slot from it. The host sends it (``s_axis_kvcmd``) and checks the
        hardware's answer against golden bit for bit (status, slot, state, readers, freed); with the
        fetcher the node sends it and checks the status itself (the pool's counters are compared
        after the run). With NIC installs golden's answer is the replay of the command's event
        (``kv_events``), in the node's order among the installer's commands."""
        layer, unit, opcode = rec.layer, rec.unit, rec.opcode
        kid = kv_id_from(layer, unit, DEFAULT_PARAMS.layer_bits)
        if self.mirror is None:
            gold = self.pool.execute(opcode, kid)
        got = None
        if not self.fetch:
            self.push("s_axis_kvcmd", self._kv_encode(opcode, kid))
            while not self.kv_resps:
                yield
            got = self.kv_resps.popleft()
        if self.mirror is not None:
            while (gold := self.mirror.host_answer()) is None:
                yield
        exp = (int(gold.status), gold.slot, int(gold.state), gold.readers, int(gold.freed))
        if got is not None and got != exp:
            raise ExecError(f"node {self.node}: KV pool answered {got} to {opcode.name} ({layer},{unit}), "
                            f"golden.kvpool says {exp}")
        if gold.status != Status.OK:
            raise ExecError(f"node {self.node}: {rec.kind} ({layer},{unit}): KV pool answered {gold.status.name}")
        if bool(gold.freed) != rec.freed:
            raise ExecError(f"node {self.node}: {rec.kind} ({layer},{unit}): the pool {'freed' if gold.freed else 'kept'} "
                            f"the unit, the compiler expected otherwise")
        if opcode in (Opcode.ALLOC_OWNER, Opcode.INSTALL_REPLICA):
            self.slots[(layer, unit)] = gold.slot
        self.events.append((self.done_ops, rec.kind, (layer, unit), gold.state.name, gold.readers, gold.freed))

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
            raise ExecError(f"node {self.node}: {what}: scratchpad frame of {len(fr)} bytes, expected {nbytes}")
        return fr

    def req_tokens(self, req) -> list:
        return self.tokens.setdefault(req, [])

    def cs_words(self, t0, t1):
        cfg = self.program.model
        cos, sin = nx.rope_tables(range(t0, t1), cfg.head_dim, cfg.rope_theta)
        return [_s32(x) for x in ((cos & 0xFFFF) | ((sin & 0xFFFF) << 16)).flatten().tolist()]

    def held_kv(self) -> list:
        """Every KV row this node holds for decode at the end: ``(req, layer, block, row0, stride,
        count)`` (``NodeCompiler.held_kv`` with the directory's slots)."""
        return [(req, layer, b, self.resolve(row0), stride, count)
                for req, layer, b, row0, stride, count in self.compiler.held_kv()]

    def layout(self) -> dict:
        return pool_layout(self.pool)

    # ------------------------------------------------------------------ the interpreter
    def run(self):
        stream = self.compiler.stream
        i, n = 0, len(stream)
        H, W, V = self.compiler.heads, self.compiler.partial_words, self.compiler.vocab
        while i < n:
            rec = stream[i]
            t = type(rec)
            if t is C.Ins:
                j = i
                while j < n and type(stream[j]) is C.Ins:
                    j += 1
                if self.fetch:           # the fetcher queues them (issued: as compiled, for reports)
                    self.issued.extend((r.op, r.fields) for r in stream[i:j])
                    self.cmd_count += j - i
                    self.expect_reads(stream[i:j])
                else:
                    self.emit(stream[i:j])
                i = j
                continue
            self.at = i
            i += 1
            if t in (C.Weights, C.Embed, C.Rope) and self.image is not None:
                pass                     # the node loads them from its image
            elif self.image is not None and i - 1 in self.image.placed and t not in _FRAMES:
                pass                     # its RX placer lands the packets / its picker picks, the node loads
            elif t is C.Weights:
                self.weights(rec)
            elif t is C.KvCmd:
                yield from self.kvcmd(rec)
            elif t is C.WaitRetired and self.fetch:
                pass                     # the fetcher waits (counter 0: the engine's retired count)
            elif t is C.WaitRetired:
                while self.retired_seen < rec.count:
                    self.retired_seen = self.hw.axil_read(ENGINE_RETIRED)[0]
                    if self.retired_seen < rec.count:
                        yield
            elif t is C.WaitInstalled:
                # the NIC installed the unit into a pool slot of its own (the installer's
                # BEGIN_INSTALL on the first packet, COMMIT_INSTALL / COMMIT_OWNER after the last)
                while (slot := self.mirror.installed(rec.layer, rec.unit)) is None:
                    yield
                self.slots[(rec.layer, rec.unit)] = slot
            elif t is C.Embed:
                h = self.im.embed(self.prompts[rec.req][rec.rows[0]:rec.rows[1]])
                self.feed(h.flatten().tolist())
            elif t is C.Rope:
                self.feed(self.cs_words(rec.t0, rec.t1))
            elif t is C.Recv:
                payloads = yield from self.wait_rx(rec.key, len(rec.sizes))
                got = tuple(len(x) for x in payloads)
                if got != rec.sizes:
                    raise ExecError(f"node {self.node}: {rec.what}: packets of {list(got)} bytes, expected "
                                    f"{list(rec.sizes)}")
                self.stash = _bytes_words(b"".join(payloads))
            elif t is C.FeedRecv:
                self.feed(self.stash * rec.copies)
                self.stash = None
            elif t is C.EmbedToken:
                h = self.im.embed(torch.tensor([self.req_tokens(rec.req)[-1]]))
                self.feed(h.flatten().tolist())
            elif t is C.TokenWord:
                self.feed([self.req_tokens(rec.req)[-1]])
            elif t is C.BestWords:
                self.feed(list(self.bests[rec.req][rec.part]))
            elif t is C.EmptyPartial:
                m = self.decode_max[rec.req] if rec.ext else [nx.M_EMPTY] * H
                words = []
                for h in range(H):
                    words += [_s32(m[h]), -1 if m[h] < 0 else 0] + [0] * (W - 2)
                self.feed(words)
            elif t is C.RecvMax:
                (pl,) = yield from self.wait_rx(rec.key, 1)
                words = _bytes_words(pl)
                if len(words) != H:
                    raise ExecError(f"node {self.node}: max all-reduce result of {len(words)} words, expected {H}")
                self.decode_max[rec.req] = self.stash = words
            elif t is C.RecvSum:
                words = []
                for key in rec.keys:
                    (pl,) = yield from self.wait_rx(key, 1)
                    words += _bytes_words(pl)
                if len(words) != H * W:
                    raise ExecError(f"node {self.node}: merged partials of {len(words)} words, expected {H * W}")
                for h in range(H):
                    msum = (words[h * W] & 0xFFFFFFFF) | (words[h * W + 1] << 32)
                    M = msum // rec.holders if rec.w_root else self.decode_max[rec.req][h]
                    if msum != rec.holders * M:
                        raise ExecError(f"node {self.node}: merged partial of head {h}: m words sum to {msum}, "
                                        f"expected {rec.holders} holders x the all-reduced max")
                    words[h * W], words[h * W + 1] = _s32(M), -1 if M < 0 else 0
                self.stash = words
            elif t is C.Logits:
                T = rec.rows[1] - rec.rows[0]
                fr = yield from self.wait_sp(4 * T * V, "logits")
                lg = torch.tensor(_bytes_words(fr), dtype=torch.int64).view(T, V)
                self.logits[(rec.req, rec.rows)] = lg
                if rec.rows[1] == self.program.reqs[rec.req][0]:
                    self.req_tokens(rec.req).append(int(torch.argmax(lg[-1])))
                    if self.t_logits is None:
                        self.t_logits = self.hw.cycle
            elif t is C.DLogits:
                fr = yield from self.wait_sp(4 * V, "decode logits")
                lg = torch.tensor(_bytes_words(fr), dtype=torch.int64)
                self.req_tokens(rec.req).append(int(torch.argmax(lg)))
                self.t_tokens.append(self.hw.cycle)
            elif t is C.TpLogits:
                fr = yield from self.wait_sp(4 * (rec.v1 - rec.v0), "decode logits slice")
                lg = torch.tensor(_bytes_words(fr), dtype=torch.int64)
                k = int(torch.argmax(lg))
                self.bests[rec.req][rec.part] = (int(lg[k]), rec.v0 + k)
            elif t is C.RecvToken:
                fr = yield from self.wait_sp(8, "received token pair")
                self.req_tokens(rec.req).append(_bytes_words(fr)[1])
            elif t is C.Pick:
                fr = _bytes_words((yield from self.wait_sp(8 * rec.parts, "the W group's best pairs")))
                pairs = [(fr[2 * j], fr[2 * j + 1]) for j in range(rec.parts)]
                tok = pick(pairs)
                self.req_tokens(rec.req).append(tok)
                self.picked.setdefault(rec.req, []).append(next(vi for vi in pairs if vi[1] == tok))
                self.bests[rec.req].clear()
                self.t_tokens.append(self.hw.cycle)
            elif t is C.Mark:
                self.marks[rec.name] = self.hw.cycle
                if rec.name == "prefill_done":
                    self.layout_prefill = self.layout()
            elif t is C.Publish:
                if self.fetch:
                    self.host_events += 1             # the stream waits for this doorbell event
                self.waiting_publish = rec.step       # the orchestrator publishes at the barrier
                while self.waiting_publish is not None:
                    yield
                if self.fetch:
                    self.doorbell(self.host_events)
                self.version += 1
            elif t is C.Version:
                self.step_versions[(rec.req, rec.pos, rec.layer)] = self.version
            elif t is C.OpDone:
                self.done_ops += 1
            else:
                raise ExecError(f"node {self.node}: record {rec!r} is not supported by the RTL executor")


# ---------------------------------------------------------------------- the orchestrator

#: Engine parameters of the simulated node for the small Qwen2-shaped models (micro): a 64-MAC
#: GEMM array (pn 4 x pk 16), 32-row tiles, head_dim 16 attention over a 4096-row KV memory.
SIM_ENGINE = dict(pn=4, pk=16, group=32, kc_max=8, x_depth=256, t_max=32, pack2=True, d_max=128,
                  head_dim=16, nq_max=64, kv_depth=4096, nb_max=4, z_max=32, blk_max=32,
                  sp_depth=1 << 17, em_depth=4096, cmd_depth=16)


def sim_node_config(topology: str = "ring", kv_slots: int = 48, engine: dict | None = None):
    """The ``hdl.node.NodeConfig`` the RTL executor builds by default (one Verilator build per
    topology, cached by content)."""
    from mcf_fpga.hdl.node import NodeConfig, node_nic
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
    from mcf_fpga.spec.kvregion import KVRegion
    from mcf_fpga.hdl.compute.engine import KR260_KV_DDR
    region = KVRegion(base=SIM_DDR_BASE, n_slots=SIM_DDR_SLOTS, slot_rows=SIM_DDR_SLOT_ROWS,
                      d=SIM_ENGINE["head_dim"], kv_bits=kv_bits)
    eng = dict(SIM_ENGINE, kv_region=region, kv_win_rows=SIM_ENGINE["blk_max"], kv_n_win=2,
               kv_dma=dict(KR260_KV_DDR["kv_dma"]))
    return dataclasses.replace(sim_node_config(topology, kv_slots=kv_slots), engine=eng)


#: The KR260-sized node with K/V in DDR that ``scripts/measure_kr260.py --kv-ddr`` and
#: ``scripts/check_kr260_costs.py`` build (one Verilator build, about an hour here): the KV pool's
#: slots (one-token units: 80 tokens x 28 layers fit) and the region's slots (the pool plus staging
#: for decode blocks; the memory model allocates the whole region as host RAM, 349 MB per node).
KR260_SIM_POOL = 2304
KR260_SIM_SLOTS = KR260_SIM_POOL + 64


def kr260_sim_node_config():
    """The board build's node (``mcf build --top node-kr260``: ``kr260_ddr_engine``, the NIC
    installing received KV) on the simulated cluster's NIC, over a ``kr260_region`` layout of
    ``KR260_SIM_SLOTS`` slots instead of 1 GiB, with a pool of ``KR260_SIM_POOL`` entries."""
    from mcf_fpga.spec.kvregion import kr260_region
    from mcf_fpga.hdl.compute.engine import kr260_ddr_engine
    region = kr260_region(size=KR260_SIM_SLOTS * kr260_region().slot_bytes)
    return dataclasses.replace(sim_node_config("ring", kv_slots=KR260_SIM_POOL, engine=kr260_ddr_engine(region)),
                               kv_install=True)


def kr260_refit_node_config(node: str = "ddr"):
    """The node a KR260 cost refit is measured on (``scripts/check_kr260_costs.py --node``):
    ``"ddr"`` :func:`kr260_sim_node_config`, ``"onchip"`` the KR260 engine with K/V on chip."""
    from mcf_fpga.hdl.compute.engine import KR260
    return kr260_sim_node_config() if node == "ddr" else sim_node_config("ring", engine=dict(KR260))


#: RX placer entries of the simulated autonomous node (``sim_fetch_node_config``): the receive keys
#: of the test and ``mcf run`` programs (a few per layer and request) with room to spare
SIM_RX_ENTRIES = 16
#: token picker slots of the simulated autonomous node (requests whose picks may be in flight)
SIM_PICK_SLOTS = 4


def sim_fetch_node_config(topology: str = "ring", **kw):
    """``sim_ddr_node_config`` with the command fetcher, the RX placer and the token picker: the
    node runs its own stream, loads its data, lands received payloads and picks its tokens
    itself."""
    return dataclasses.replace(sim_ddr_node_config(topology, **kw), fetcher=True, rx_entries=SIM_RX_ENTRIES,
                               pick_slots=SIM_PICK_SLOTS)


def run_rtl(program, im: IntModel, prompt, *, node_cfg=None, chunk: int = 64, progress=None,
            max_cycles: int = 50_000_000, stall_cycles: int = 200_000, query_first: bool = False,
            cluster=None, make_hw=None, kv_latency: int = 100, kv_stalls: bool = True,
            link_fate=None, cmdstream_edit=None, threads: int | None = None, ranks: int | None = None,
            group=None, trace=None, rank_timeout: float = 120.0, kv_budget: int | None = None) -> RtlResult | None:
    """Run ``program`` (prefill and decode) on a simulated cluster of ``program.nodes`` Verilated nodes.

    Returns an ``RtlResult``: ``logits`` (the head rows, ``Program.head_rows``, int), ``tokens`` (the leader's
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
    ready stalls unless ``kv_stalls`` is False; a given cluster with ``kv_memory(i)``, simulated
    boards, has its own), and after the run every KV row the nodes hold
    for decode is compared with IntModel's (``ExecError`` on a difference); ``kv_rows_checked``
    (per node: K and V rows compared),
    ``kv_loads`` (KVL per node) and ``kv_bus`` (per node: bytes read, bytes written on
    ``m_axi_kv``) are then set (else None). With ``NodeConfig.kv_install`` the NIC installs every
    received KV unit (the installer's ``m_axi_kvin`` writes the same memory image), senders send
    from DDR with KVS, the host mirrors the pool from the node's event stream
    (``kv_events.PoolMirror``), ``kv_installs`` holds each node's installer counters (the run fails on
    any dropped or failed install packet) and install credits keep every pool within ``kv_budget``
    (``_compiled``; ``credits``; ``program``: the one run, ``issued``'s). ``host_interactions`` (per node: records of
    its compiled stream the host serves, per program op kind; ``host.compiler``), ``host_rates``
    ((per KV unit of the prompts, per decode token), cluster-wide). ``link_fate(node, port, frame) -> [frames]``
    (a cluster this function builds): link faults; the wire bytes count what it returns.
    With ``NodeConfig.fetcher`` every node's command fetcher runs the node's part of its compiled
    stream (``host.compiler.to_cmdstream``, loaded into the ``m_axi_cmd`` memory the node's ``hw``
    gives, at ``CMD_STREAM_BASE`` on the simulator cluster, wherever the DMA buffer allocator puts
    it on a board; its watchdog is ``stall_cycles``): engine instructions, directory commands and
    their slots, and ``LOAD`` records that have the node's stream loader read weight tiles, prompt
    rows and RoPE rows from its data image (``host.node_image``, planned at the base of the
    ``m_axi_load`` memory, ``LOAD_BASE`` on the simulator cluster, written before the start). The host serves the rest: it collects received packets and
    scratchpad reads, writes each run-time feed into the image's mailbox and rings the fetcher's
    doorbell; at a route publish it waits until every fetcher waits for the publish's doorbell and
    the engines are idle, publishes, and rings. A fetcher error ends the run with an ``ExecError``
    naming the cause and the record. ``cmdstream_edit(node, records) -> records``: fault injection
    into the fetched streams. ``threads``: threads that step the nodes of a cluster this function
    builds (``SimCluster(threads=...)``, 1..``program.nodes``; default
    ``sim.verilator.DEFAULT_THREADS``): the result is the same for every value, only
    ``seconds`` changes; a given ``cluster`` has its own, so passing both is refused.
    The program's model must fit the node's engine (``host.engine_fit.check_engine_fits``, a
    ValueError naming the dimension and the limit, before any build); a model quantised with a
    coarser INT4 group than the engine's GEMM group runs regrouped (``QuantModel.regroup``: the
    same weights, every result bit for bit the same).
    ``ranks``: split the cluster over this many local torch.distributed (gloo) processes, each
    simulating a contiguous group of nodes with their host drivers (``sim.ranks``; a rank's
    collectives time out after ``rank_timeout`` s, so a rank that dies ends the run with an
    error); ``group`` (a ``sim.ranks.RankGroup``): this process is one rank of such a split, e.g.
    started by ``torchrun``; it returns the result on rank 0 and None on the others. Either way
    every logit, token, cycle count and wire byte equals the one-process run: frames cross ranks
    after every ``chunk`` as they cross links, and every decision that needs the whole cluster
    (a publish, the stall check, the end of the run) is taken from all ranks' state.
    ``trace=(directory, start, stop)``: the nodes are the FST-tracing build and each writes
    ``directory/node<i>.fst`` for cycles ``[start, stop)`` since its configuration (``stop``
    None: to the end), ``sim.cluster.SimCluster.trace``."""
    from mcf_fpga.sim.cluster import SimCluster
    from mcf_fpga.sim.ranks import OneProcess
    _check_run_args(program, im, prompt, cluster, threads, query_first)
    _check_rank_args(program, cluster, make_hw, ranks, group, trace)
    if ranks is not None and ranks > 1 and group is None:
        return _run_forked(ranks, rank_timeout, program, im, prompt, dict(
            node_cfg=node_cfg, chunk=chunk, progress=progress, max_cycles=max_cycles, stall_cycles=stall_cycles,
            query_first=query_first, kv_latency=kv_latency, kv_stalls=kv_stalls, link_fate=link_fate,
            cmdstream_edit=cmdstream_edit, threads=threads, trace=trace, kv_budget=kv_budget))
    g = group if group is not None else OneProcess(program.nodes)
    ncfg = node_cfg or sim_node_config(_topo_name(program.topo))
    check_engine_fits(program.model, ncfg.engine)
    # the engine's GEMM group may be finer than the model's: the same weights, bit for bit
    im = IntModel(im.qm.regroup(ncfg.engine["group"])) if im.qm.config.group_size != ncfg.engine["group"] else im
    t_start = time.time()
    routes, rid_max, rid_sum = _decode_routes(program)
    program, credits, comps = _compiled(program, ncfg, kv_budget, query_first=query_first, rid_max=rid_max,
                                        rid_sum=rid_sum)
    drivers = []
    for comp in comps:
        if comp.node not in g.local:
            continue
        drv = NodeDriver(comp, im, prompt, ncfg)
        drv.kv_cmd_bytes, drv.kv_slot_bits, drv.kv_reader_bits = _kv_widths(ncfg)
        if drv.install:
            drv.mirror = PoolMirror(drv.pool, (kv_id_layout(ncfg.nic.meta).size, ncfg.kv_slots, 15), drv.node)
        drivers.append(drv)
    wire = [None]
    if cluster is None:
        cl = SimCluster(program.nodes, topology=_topo_name(program.topo), node_cfg=ncfg, chunk=chunk,
                        threads=threads, group=group, trace=trace is not None)
        wire = [0]
        _count_wires(cl, wire, link_fate)
    else:
        cl = cluster
    if trace is not None:             # open before the configuration's reset restarts the cycles
        cl.trace(*trace)
    cl.configure(routes)
    for drv in drivers:
        drv.hw = make_hw(cl, drv.node) if make_hw else cl.node(drv.node)
    kv_mems = _attach_kv_memories(cl, drivers, ncfg, program, own_cluster=cluster is None, latency=kv_latency,
                                  stalls=kv_stalls)
    fetch = [d for d in drivers if d.fetch]
    for drv in fetch:
        drv.peers = fetch                # a fetcher error names every node's RX placer drops
    for drv in fetch:                    # the node's stream in DDR; the fetcher starts at once
        _start_fetcher(drv, latency=kv_latency, watchdog=stall_cycles, edit=cmdstream_edit)
    base = g.largest(max(drv.hw.cycle for drv in drivers))
    for drv in drivers:                                        # align the nodes' clocks
        if drv.hw.cycle < base:
            drv.hw.step(base - drv.hw.cycle)
    publishes = _step_until_done(cl, drivers, program, g, chunk=chunk, stall_cycles=stall_cycles,
                                 max_cycles=max_cycles, progress=progress, wire=wire)
    nic, kv_installs = _agree(g, lambda: _finish_run(cl, drivers, g, chunk=chunk, max_cycles=max_cycles,
                                                     kv_ddr=kv_mems is not None))
    recs = sorted((r for part in g.gather([_node_record(d) for d in drivers]) for r in part),
                  key=lambda r: r["node"])
    lead = recs[program.leader]
    req_tokens = [lead["tokens"].get(q, [])[:n] for q, (_p, n) in enumerate(program.reqs)]
    kv_checked = kv_bus = None
    if kv_mems is not None:
        kv = _agree(g, lambda: _check_kv_region(drivers, kv_mems, program, im, ncfg.engine["kv_region"], req_tokens))
        kv = _by_node(g, kv)
        kv_checked, kv_bus = [kv[i][0] for i in sorted(kv)], [kv[i][1] for i in sorted(kv)]
    nic = _by_node(g, nic)
    kv_installs = None if kv_installs is None else [v for _, v in sorted(_by_node(g, kv_installs).items())]
    wire_bytes = None if wire[0] is None else g.total(wire[0])
    if cluster is None:
        cl.close()                   # its step threads and waveforms (on an error: when collected)
    if g.rank != 0:
        return None
    return _result(program, comps, recs, req_tokens, base, t_start, dict(
        wire_bytes=wire_bytes, publishes=publishes, nic_counters=nic, kv_rows_checked=kv_checked, kv_bus=kv_bus,
        kv_installs=kv_installs, credits=len(credits), program=program))


def _compiled(program, ncfg, kv_budget, **kw):
    """``(program, credits, compilers)``: with NIC installs the program with the receivers'
    credits that keep every pool within ``kv_budget`` (None: ``NodeConfig.kv_slots``;
    host.install_credits), else the program as it is (``kv_budget`` refused); compiled for every
    node (``compile_program``'s ``kw``), which checks it against the node's memories before any
    simulation."""
    credits = []
    if getattr(ncfg, "kv_install", False):
        kv_budget = ncfg.kv_slots if kv_budget is None else kv_budget
        program, credits = install_credits(program, ncfg, kv_budget)
    elif kv_budget is not None:
        raise ValueError("run_rtl(kv_budget=...): the pool budget of NIC installs; this node has no "
                         "NodeConfig.kv_install")
    return program, credits, compile_program(program, ncfg, kv_budget=kv_budget, **kw)


def _check_rank_args(program, cluster, make_hw, ranks, group, trace):
    """``run_rtl``'s refusals of the rank and trace arguments, before any work."""
    from mcf_fpga.sim.ranks import groups
    if ranks is not None:
        groups(program.nodes, ranks)                 # ValueError naming the limit
    if (ranks is not None or group is not None) and (cluster is not None or make_hw is not None):
        raise ValueError("run_rtl(ranks=/group=) splits the cluster run_rtl builds; a given cluster or make_hw "
                         "runs in one process")
    if trace is not None:
        if cluster is not None:
            raise ValueError("run_rtl(trace=...) traces the cluster run_rtl builds; a given cluster has its own")
        if not isinstance(trace, (tuple, list)) or len(trace) != 3:
            raise ValueError(f"run_rtl trace must be (directory, start, stop), got {trace!r}")


def _run_forked(ranks, timeout, program, im, prompt, kw):
    """``run_rtl`` over ``ranks`` forked local gloo ranks; rank 0's result, with this process's
    wall time."""
    from mcf_fpga.sim.ranks import fork_ranks
    t0 = time.time()
    try:
        res = fork_ranks(ranks, _rank_run, (program, im, prompt, kw), timeout=timeout)[0]
    except RuntimeError as exc:
        raise ExecError(str(exc)) from None
    res.seconds = time.time() - t0
    return res


def _rank_run(program, im, prompt, kw):
    from mcf_fpga.sim.ranks import RankGroup
    group = RankGroup(program.nodes)
    if group.rank != 0:
        kw = {**kw, "progress": None}
    return run_rtl(program, im, prompt, group=group, **kw)


def _agree(g, fn):
    """``fn()`` on every rank; an error on any rank is raised on every rank (``ExecError`` naming
    the ranks), so none waits for the others in a later collective. In one process: ``fn()``."""
    if g.world == 1:
        return fn()
    try:
        out, err = fn(), None
    except (ExecError, RuntimeError, ValueError) as exc:
        out, err = None, f"{type(exc).__name__}: {exc}"
    errs = [(r, e) for r, e in enumerate(g.gather(err)) if e is not None]
    if errs:
        raise ExecError("; ".join(f"rank {r}: {e}" for r, e in errs))
    return out


def _by_node(g, local) -> dict:
    """Every rank's ``{node: value}`` (a list is of this rank's nodes in order) merged."""
    merged = {}
    for part in g.gather(dict(zip(g.local, local)) if isinstance(local, list) else local):
        merged.update(part)
    return merged


def _node_record(d) -> dict:
    """What the result needs of node driver ``d`` (gathered from every rank)."""
    return {"node": d.node, "logits": d.logits, "tokens": d.tokens, "picked": d.picked, "t_tokens": d.t_tokens,
            "t_logits": d.t_logits, "marks": d.marks, "layout_prefill": d.layout_prefill,
            "step_versions": d.step_versions, "rx_log": d.rx_log, "peak_slots": d.pool.peak_slots,
            "events": d.events, "issued": d.issued, "kv_loads": d.ddr.loads if d.ddr is not None else None,
            "cycle": d.hw.cycle, "fetch": d.fetch, "placed": d.image.placed if d.image else ()}


def _result(program, comps, recs, req_tokens, base, t_start, measured) -> RtlResult:
    """The ``RtlResult`` of a run from every node's record (``_node_record``, in node order)."""
    lead = recs[program.leader]
    rows = [{} for _ in program.reqs]
    for r in recs:
        for (req, k), v in r["logits"].items():
            rows[req][k] = v
    req_logits = [torch.cat([rw[k] for k in sorted(rw)]) for rw in rows]
    first = [r for r in recs if r["t_logits"] is not None]
    fetched = any(r["fetch"] for r in recs)
    return RtlResult(
        logits=req_logits[0], tokens=req_tokens[0], req_logits=req_logits, req_tokens=req_tokens,
        req_picked=[list(lead["picked"].get(q, [])) for q in range(len(program.reqs))],
        step_versions=[r["step_versions"] for r in recs], rx_log=[r["rx_log"] for r in recs],
        decode_cycles=(lead["t_tokens"][-1] - first[0]["t_logits"]) if lead["t_tokens"] and first else None,
        layout={r["node"]: sorted(r["layout_prefill"]) for r in recs},
        layout_states={r["node"]: r["layout_prefill"] for r in recs},
        ttft_cycles=(first[0]["t_logits"] - base) if first else None,
        prefill_cycles=max(r["marks"].get("prefill_done", 0) for r in recs) - base,
        peak_slots=[r["peak_slots"] for r in recs], events=[r["events"] for r in recs],
        seconds=time.time() - t_start, cycles_simulated=max(r["cycle"] for r in recs) - base,
        issued=[r["issued"] for r in recs],
        kv_loads=[r["kv_loads"] for r in recs] if recs[0]["kv_loads"] is not None else None,
        host_interactions=[C.host_interactions(c.stream, r["fetch"], r["placed"]) for c, r in zip(comps, recs)],
        host_rates=C.host_interaction_rates(program, [c.stream for c in comps], fetched,
                                            [r["placed"] for r in recs]),
        **measured)

def _check_run_args(program, im: IntModel, prompt, cluster, threads, query_first: bool):
    """``run_rtl``'s refusals before any work: the prompts, ``threads`` with a given cluster or out
    of range, a model quantised unlike the program, ``query_first`` with a W group."""
    program.prompts(prompt)          # refused before any work: wrong count or length
    if cluster is not None and threads is not None:
        raise ValueError("run_rtl(threads=...) sets the threads of the cluster run_rtl builds; the given "
                         "cluster steps its nodes with its own")
    if threads is not None:
        from mcf_fpga.sim.verilator import check_threads
        check_threads(threads, program.nodes, "run_rtl threads")
    if im.qm.block != program.block or im.qm.kv_bits != program.kv_bits:
        raise ValueError(f"the model was quantised with block={im.qm.block}, kv_bits={im.qm.kv_bits}; the "
                         f"program expects block={program.block}, kv_bits={program.kv_bits}")
    if query_first and program.wsplit is not None:
        raise ValueError("run_rtl(query_first=True) with a tensor-parallel W group (Program.wsplit): the "
                         "query-first reordering is defined for one W node only")


def _attach_kv_memories(cl, drivers, ncfg, program, *, own_cluster: bool, latency: int, stalls: bool):
    """K/V in DDR: every node's ``m_axi_kv`` memory (on a cluster run_rtl built: the AXI4 model over
    the region, the installer's ``m_axi_kvin`` sharing it; simulated boards: their own), or None
    without a KV region. Sets every node's KV-pool budget."""
    from mcf_fpga.sim.cluster import KV_BASE
    region = ncfg.engine.get("kv_region")
    kv_mems = None
    if region is not None and own_cluster:
        kv_mems = [drv.hw.memory("m_axi_kv", region.size, base=region.base, latency=latency,
                                 ready_seed=(1 + drv.node) if stalls else None) for drv in drivers]
        for drv in drivers:                  # the installer writes the same image (HP2's AW/W/B)
            if drv.install:
                drv.hw.memory("m_axi_kvin", region.size, base=region.base, latency=latency,
                              ready_seed=(101 + drv.node) if stalls else None, share="m_axi_kv")
    elif region is not None and hasattr(cl, "kv_memory"):    # simulated boards: their HP3 models
        kv_mems = [cl.kv_memory(drv.node) for drv in drivers]
    for drv in drivers:
        # KV-pool budget = the program's S_node; with NIC installs run_rtl's kv_budget (staged
        # units are pool entries; the install credits keep the pool within it, and the run
        # fails if the installer ever finds it full: kv_events.py)
        drv.hw.axil_write(KV_BASE + 0x1C, drv.pool.budget if drv.install else program.n_slots)
    return kv_mems


def _step_until_done(cl, drivers, program, g, *, chunk: int, stall_cycles: int, max_cycles: int, progress,
                     wire) -> list:
    """Step the cluster ``chunk`` cycles at a time while the node drivers issue their ops and
    collect their packets, publishing elastic route updates when every live node waits for one.
    Returns the publishes; an ``ExecError`` (``_no_progress``) when nothing moves for
    ``stall_cycles`` or the run passes ``max_cycles``. ``g`` (``sim.ranks``): the ranks that
    share the cluster; every decision is taken on the state of all of them."""
    gens = {drv.node: drv.run() for drv in drivers}
    fetch = [d for d in drivers if d.fetch]
    publishes = []
    total = sum(len(ops) for ops in program.ops)
    cycles, last_progress, last_done, last_level = 0, 0, -1, -1
    while True:
        err = _advance_drivers(g, gens)
        waiting = {d.waiting_publish for d in drivers if d.node in gens}
        votes = g.gather((not gens, None not in waiting, waiting, err))     # one collective a chunk
        if any(v[3] for v in votes):
            raise ExecError("; ".join(f"rank {r}: {v[3]}" for r, v in enumerate(votes) if v[3]))
        if all(v[0] for v in votes):
            break
        if all(v[1] for v in votes):
            step = set().union(*(v[2] for v in votes))
            if len(step) != 1:
                raise ExecError(f"nodes wait to publish different decode steps {sorted(step)}")
            _drain(cl, drivers, chunk, stall_cycles, g)
            s_ = step.pop()
            op = next(op for op in program.ops[drivers[0].node] if isinstance(op, Publish) and op.step == s_)
            cyc, before, after = _publish(cl, drivers, program, dict(op.groups), g)
            publishes.append({"step": s_, "group": tuple(op.dsts), "groups": dict(op.groups), "cycles": cyc,
                              "bank_before": before, "bank_after": after})
            for d in drivers:
                d.waiting_publish = None
            continue
        cl.step(chunk)
        cycles += chunk
        for drv in drivers:
            _collect(drv)
        # progress = a finished op, or any node consuming its queued inputs (a long engine queue
        # drains for a long time after the host has issued everything)
        level = sum(d.hw.pending(p) for d in drivers for p in _INPUTS) + sum(_fetcher_records(d) for d in fetch)
        done, level = map(sum, zip(*g.gather((sum(d.done_ops for d in drivers), level))))
        if done != last_done or level != last_level:
            last_done, last_level, last_progress = done, level, cycles
            if progress:
                progress(done, total)
        if cycles - last_progress > stall_cycles or cycles > max_cycles:
            raise _no_progress(drivers, program, gens, cycles - last_progress, wire)
    return publishes


def _advance_drivers(g, gens) -> str | None:
    """Let every live driver of this rank run until it waits (``next``); a finished one leaves
    ``gens``. In one process an error is raised; split over ranks it is returned as text, for the
    caller's next collective to raise it on every rank."""
    try:
        for n in list(gens):
            try:
                next(gens[n])
            except StopIteration:
                del gens[n]
    except (ExecError, RuntimeError, ValueError) as exc:
        if g.world == 1:
            raise
        return f"{type(exc).__name__}: {exc}"
    return None


def _no_progress(drivers, program, gens, idle: int, wire) -> ExecError:
    """The error of a run that made no progress for ``idle`` cycles: where every node is, its
    engine's state, undelivered packets, NIC counters and the instruction each engine executes
    (``MCF_RTL_TRACE``: a directory that gets every node's push log)."""
    where = {d.node: (d.done_ops, program.ops[d.node][d.done_ops].kind if d.done_ops < len(program.ops[d.node])
                   else "end") for d in drivers if d.node in gens}
    status = {d.node: (hex(d.hw.axil_read(0x0000)[0]), d.hw.axil_read(0x0004)[0], d.cmd_count,
                    {p: d.hw.pending(p) for p in _INPUTS})
              for d in drivers}
    inbox = {d.node: {k: len(v) for k, v in d.inbox.items() if v} for d in drivers}
    stuck = {}
    for d in drivers:
        k = status[d.node][1]
        if k < len(d.issued):
            oi, ins = d.issued[k]
            stuck[d.node] = (oi, program.ops[d.node][oi].kind, _instr_brief(ins))
    nic = {d.node: _nic_counters(d.hw) for d in drivers}
    if os.environ.get("MCF_RTL_TRACE"):
        for d in drivers:
            with open(os.path.join(os.environ["MCF_RTL_TRACE"], f"node{d.node}.pkl"), "wb") as f:
                pickle.dump(d.pushlog, f)
    return ExecError(f"RTL cluster made no progress for {idle} cycles; nodes at "
                     f"(op index, kind) {where}; engine (STATUS, retired, queued, bytes pending on its inputs) {status}; "
                     f"undelivered packets {inbox}; NIC counters {nic}; wire bytes {wire[0]}; "
                     f"instruction each engine is executing (op index, op, instruction) {stuck}")


def _finish_run(cl, drivers, g, *, chunk: int, max_cycles: int, kv_ddr: bool) -> tuple:
    """After the last op: let every engine finish its queue (and every fetcher its stream; the
    last KVW rows land in DDR with ``kv_ddr``), check the fetchers, the installers and the engines'
    error flags. Returns (NIC counters per node, installer counters per node or None)."""
    fetch = [d for d in drivers if d.fetch]
    for _ in range(max_cycles // chunk):
        if g.all_true(all(_idle(d) for d in drivers)) and g.all_in_order(fetch, lambda d: not _fetcher_running(d)):
            break
        cl.step(chunk)
        for drv in drivers:
            _collect(drv)
    _agree(g, lambda: [_check_fetcher(d) for d in fetch])
    if kv_ddr:          # the last KVW rows land in DDR before the image is read
        for _ in range(max_cycles // chunk):
            if g.all_in_order(drivers, lambda d: not d.hw.axil_read(0x0000)[0] & 1):
                break
            cl.step(chunk)
    nic = {d.node: _nic_counters(d.hw) for d in drivers}
    kv_installs = None
    if drivers[0].install:
        for d in drivers:                    # events still in flight (the last commits, frees)
            _collect(d)
        kv_installs = [_check_installs(d) for d in drivers]
    for drv in drivers:
        st, _ = drv.hw.axil_read(0x0000)
        if (st >> 8) & 0xFF:
            raise ExecError(f"node {drv.node}: engine error flags {(st >> 8) & 0xFF:#x} (STATUS {st:#x})")
    return nic, kv_installs


def _check_kv_region(drivers, kv_mems, program, im: IntModel, region, req_tokens: list) -> list:
    """Every KV row the nodes hold in their DDR region against IntModel's (``ExecError`` on a
    difference). Returns per node (K and V rows compared, (bytes read, bytes written) on
    ``m_axi_kv``)."""
    prompts = drivers[0].prompts                # every driver has every request's prompt
    caches = {q: expected_kv(im, prompts[q], req_tokens[q]) for q in range(len(program.reqs))}
    kv_checked, kv_bus = [], []
    for d, mem in zip(drivers, kv_mems):
        held = d.held_kv()
        bad = ddr_mismatches(region, held, caches, program.block, d.kv_heads, mem.dump)
        if bad:
            raise ExecError(f"node {d.node}: the KV region in DDR differs from IntModel: " + "; ".join(bad))
        kv_checked.append(2 * d.kv_heads * sum(h[5] for h in held))
        log = mem.log
        kv_bus.append(tuple(sum((ln + 1) * region.bus_bytes for _c, k, _a, ln, _r in log if k == kind)
                            for kind in "RW"))
    return list(zip(kv_checked, kv_bus))


def _decode_members(program) -> dict:
    """{req: every node that is ever one of the request's holders} (the initial decode group and
    every node an elastic ``publish`` adds), in a fixed order."""
    out = {q: list(program.decode_group) for q in range(len(program.reqs))}
    for op in program.ops[0]:
        if isinstance(op, Publish):
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
    from mcf_fpga.sim.cluster import NIC_BASE
    from mcf_fpga.spec.nic import Reg
    return {d.node: d.hw.axil_read(NIC_BASE + Reg.BANK)[0] for d in drivers}


def _publish(cl, drivers, program, groups, g) -> tuple:
    """KernelFlume route update at a token boundary: every NIC's shadow bank gets the whole table
    for ``groups`` ({req: holders}; AXI-Lite ROUTE_INDEX/ROUTE_DATA writes), then BANK_FLIP.
    Returns (cycles the slowest node spent — the writes are serial on each node's AXI-Lite port —,
    active bank of every node before, and after)."""
    from mcf_fpga.sim.cluster import NIC_BASE
    from mcf_fpga.spec.nic import Reg
    routes, _, _ = _decode_routes(program, groups)
    before = _by_node(g, _banks(drivers))
    worst = 0
    for d in drivers:
        hw, c0 = d.hw, d.hw.cycle
        for rid in range(routes.n_routes):
            e = routes.tables[d.node].get(rid)
            hw.axil_write(NIC_BASE + Reg.ROUTE_INDEX, rid)
            hw.axil_write(NIC_BASE + Reg.ROUTE_DATA, e.encode() if e is not None else 0)
        hw.axil_write(NIC_BASE + Reg.BANK_FLIP, 1)
        worst = max(worst, hw.cycle - c0)
    worst = g.largest(worst)
    after = _by_node(g, _banks(drivers))
    top = g.largest(max(d.hw.cycle for d in drivers))
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
    from mcf_fpga.hdl.kvinstall import REGISTERS as IREGS
    from mcf_fpga.hdl.kvpool import REGISTERS as PREGS
    from mcf_fpga.hdl.node import KVINSTALL_WINDOW
    ib = KVINSTALL_WINDOW[1]
    got = {r.name: drv.hw.axil_read(ib + r.offset)[0] for r in IREGS
           if r.access.name == "RO" and not r.name.startswith("err_addr")}
    bad = {k: v for k, v in got.items() if k.startswith("drop") or k in ("axi_err", "err_code")}
    if any(bad.values()) or got["status"] & 2:
        raise ExecError(f"node {drv.node}: the KV installer dropped or failed packets: {got}")
    commits = drv.mirror.commits_counted()
    if got["committed"] != commits:
        raise ExecError(f"node {drv.node}: the installer counted {got['committed']} commits, the pool "
                        f"reported {commits}")
    left = {k: len(v) for k, v in drv.mirror.commits.items() if v}
    if left:
        raise ExecError(f"node {drv.node}: units installed that no recv op took: {left}")
    off = {r.name: r.offset for r in PREGS}
    from mcf_fpga.sim.cluster import KV_BASE
    used = drv.hw.axil_read(KV_BASE + off["used_slots"])[0]
    if used != drv.pool.used_slots:
        raise ExecError(f"node {drv.node}: the KV pool holds {used} slots, golden.kvpool {drv.pool.used_slots}")
    return got


def _kv_widths(ncfg):
    """(cmd tdata bytes, slot bits, reader bits) of the node's KV-pool streams (hdl.kvpool)."""
    from mcf_fpga.hdl.kvpool import cmd_layout, DEFAULT_KV_ID_WIDTH
    readers = 15                                   # hdl.node.Node: resp_layout(kv_slots, 15)
    return (-(-cmd_layout(DEFAULT_KV_ID_WIDTH).size // 8), max(1, (ncfg.kv_slots - 1).bit_length()),
            readers.bit_length())


_INPUTS = ("s_axis_cmd", "s_axis_w", "s_axis_sp", "s_axis_kvcmd")


def _instr_brief(ins: dict) -> str:
    keep = ("sub", "flags", "a", "b", "dst", "n0", "n1", "len", "nblk", "ntok", "kvb", "kpos", "bits")
    return opcode_name(ins["op"]) + " " + " ".join(f"{k}={ins[k]}" for k in keep if ins.get(k))


def _nic_counters(hw) -> dict:
    """Nonzero NIC counters of one node (frames accepted, drops per cause)."""
    from mcf_fpga.sim.cluster import NIC_BASE
    from mcf_fpga.spec.nic import ErrorCause, Reg
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


def _drain(cl, drivers, chunk, limit, g):
    """Step until every node's inputs are consumed and its engine is idle (a token boundary:
    no packet of the finished step is still to be sent)."""
    for _ in range(max(1, limit // chunk)):
        if g.all_in_order(drivers, lambda d: _idle(d) and not (d.hw.axil_read(0x0000)[0] & 1)
                          and _fetcher_waits_publish(d)):
            return
        cl.step(chunk)
        for d in drivers:
            _collect(d)
    raise ExecError(f"nodes did not drain within {limit} cycles before a route publish")


def _fetcher_waits_publish(d) -> bool:
    """A fetching node's fetcher has run every record before the WAIT for its publish's doorbell
    event (always true for a host-driven node)."""
    from mcf_fpga.hdl import cmdfetch as F
    return not d.fetch or _fetcher_reg(d, F.RECORDS) == d.wait_index[d.host_events]


def _inbox_kind(meta) -> str:
    """The kind of a received key (``spec.rx_placer.rx_kind``, the RX placer's own rule), as the
    compiler names it: "kv", "max", "sum", "q", "data", or "op<n>"."""
    from mcf_fpga.spec.rx_placer import RxKind, rx_kind
    k = rx_kind(meta.stage, meta.op, meta.reduce_op)
    return f"op{int(meta.op)}" if k == RxKind.OTHER else k.name.lower()


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


#: where the RTL executor puts a node's command stream (the fetcher's ``m_axi_cmd`` memory)
CMD_STREAM_BASE = 0x20_0000_0000
#: ... and its data image (host.node_image: weights, rows, the mailbox; the loader's ``m_axi_load``)
LOAD_BASE = 0x30_0000_0000


def _fetcher_reg(drv, off) -> int:
    from mcf_fpga.hdl.node import CMDFETCH_WINDOW
    return drv.hw.axil_read(CMDFETCH_WINDOW[1] + off)[0]


def _start_fetcher(drv, *, latency, watchdog, edit=None):
    """Load the node's part of its compiled stream (``host.compiler.to_cmdstream``; ``edit``
    (node, records) -> records: fault injection) into the ``m_axi_cmd`` memory and its data image
    into the ``m_axi_load`` memory, and start the fetcher. Each memory comes from
    ``drv.hw.memory(port, size, base=..., latency=...)``, which returns an object with ``.base``
    and ``.load(addr, bytes)``: the simulator cluster honours ``base`` (``CMD_STREAM_BASE``,
    ``LOAD_BASE``), a board's allocator chooses its own (``host.board.node_hw.NodeHw.memory``), so
    the image is planned at the base it got and BASE_LO/HI take the stream's."""
    from mcf_fpga.hdl import cmdfetch as F
    from mcf_fpga.hdl.cmdstream import Wait, encode
    from mcf_fpga.hdl.node import CMDFETCH_WINDOW, LOAD_DATA_WIDTH
    from mcf_fpga.host.node_image import plan_image
    size = plan_image(drv.compiler, drv.ncfg, 0, data_width=LOAD_DATA_WIDTH).size     # the layout's size
    drv.load_mem = drv.hw.memory("m_axi_load", _pages(size), base=LOAD_BASE, latency=latency)
    img = plan_image(drv.compiler, drv.ncfg, drv.load_mem.base, data_width=LOAD_DATA_WIDTH)
    if img.size != size:
        raise ExecError(f"node {drv.node}: the image is {img.size} bytes at {drv.load_mem.base:#x}, "
                        f"{size} at 0: its layout must not depend on its base")
    drv.image = img
    for key, (addr, _n) in img.regions.items():
        if key[0] != "rx":               # landing zones: the RX placer writes them
            drv.load_mem.load(addr, drv.image_bytes(key))
    if img.rx:
        _program_rx_placer(drv, img, latency)
    recs = C.to_cmdstream(drv.compiler.stream, img)
    if edit is not None:
        recs = edit(drv.node, recs)
    drv.wait_index = {r.target: k for k, r in enumerate(recs) if isinstance(r, Wait) and r.counter == C.COUNTER_HOST}
    data = encode(recs)
    mem = drv.hw.memory("m_axi_cmd", _pages(len(data)), base=CMD_STREAM_BASE, latency=latency)
    mem.load(mem.base, data)
    drv.fetch_records = len(recs)
    w = lambda off, v: drv.hw.axil_write(CMDFETCH_WINDOW[1] + off, v)  # noqa: E731
    w(F.BASE_LO, mem.base & 0xFFFFFFFF)
    w(F.BASE_HI, mem.base >> 32)
    w(F.LEN, len(data) // 8)
    w(F.WATCHDOG, watchdog)
    w(F.CTRL, F.CTRL_START)


def _program_rx_placer(drv, img, latency):
    """The RX placer writes into the loader's image (``m_axi_rx`` shares ``m_axi_load``'s memory):
    one entry per receive key of the image (``host.node_image.RxEntry``)."""
    from mcf_fpga.spec.rx_placer import RxKind
    from mcf_fpga.hdl.rx_placer import CTRL_PROGRAM
    drv.hw.memory("m_axi_rx", share="m_axi_load", latency=latency)
    w = lambda name, v: drv.hw.axil_write(_rx_reg(name), v)  # noqa: E731
    for ent in img.rx.values():
        kind, src, layer, block = ent.key
        w("sel", ent.index)
        w("key_kind", int(RxKind[kind.upper()]))
        w("key_src", src)
        w("key_layer", layer or 0)
        w("key_any_layer", int(layer is None))
        w("key_block", block)
        w("base_lo", ent.addr & 0xFFFFFFFF)
        w("base_hi", ent.addr >> 32)
        w("limit", ent.limit)
        w("ctrl", CTRL_PROGRAM)


def _pages(nbytes: int) -> int:
    """``nbytes`` rounded up to whole 4 KiB pages (at least one)."""
    return max(4096, -(-nbytes // 4096) * 4096)


def _fetcher_records(drv) -> int:
    from mcf_fpga.hdl import cmdfetch as F
    st = _fetcher_reg(drv, F.STATUS)
    if st & F.STATUS_ERROR:
        _check_fetcher(drv)
    return _fetcher_reg(drv, F.RECORDS)


def _fetcher_running(drv) -> bool:
    from mcf_fpga.hdl import cmdfetch as F
    return bool(_fetcher_reg(drv, F.STATUS) & F.STATUS_RUNNING)


def _check_fetcher(drv):
    """The fetcher ran its whole stream: done, no error (else an ``ExecError`` naming the cause,
    the record and its info)."""
    from mcf_fpga.hdl import cmdfetch as F
    from mcf_fpga.spec.cmdstream import Cause
    st = _fetcher_reg(drv, F.STATUS)
    if st & F.STATUS_ERROR:
        cause, idx, info = (_fetcher_reg(drv, r) for r in (F.ERR_CAUSE, F.ERR_INDEX, F.ERR_INFO))
        name = Cause(cause).name if cause in set(Cause) else str(cause)
        raise ExecError(f"node {drv.node}: the command fetcher stopped with {name} at record {idx} of "
                        f"{drv.fetch_records} (ERR_INFO {info:#x}){_picker_note(drv)}{_rx_note(drv)}")
    if not st & F.STATUS_DONE:
        raise ExecError(f"node {drv.node}: the command fetcher did not finish its stream (STATUS {st:#x}, "
                        f"{_fetcher_reg(drv, F.RECORDS)} of {drv.fetch_records} records)")
    if drv.image is not None and drv.image.picks is not None:
        picks, errors = _picker_regs(drv)
        want = len(drv.image.picks.arms)
        if picks != want or errors:
            raise ExecError(f"node {drv.node}: the token picker made {picks} picks, the stream armed {want}"
                            f"{_picker_note(drv)}")
    from mcf_fpga.sim.cluster import KV_BASE
    from mcf_fpga.hdl.kvpool import REGISTERS as PREGS
    used = drv.hw.axil_read(KV_BASE + {r.name: r.offset for r in PREGS}["used_slots"])[0]
    if used != drv.pool.used_slots:
        raise ExecError(f"node {drv.node}: after the fetched stream the KV pool holds {used} slots, "
                        f"golden.kvpool {drv.pool.used_slots}")


def _rx_reg(name: str) -> int:
    """The ``s_axi`` address of the RX placer's register ``name`` (``hdl.rx_placer.REGISTERS``)."""
    from mcf_fpga.hdl import rx_placer as R
    from mcf_fpga.hdl.node import RXPLACE_WINDOW
    return RXPLACE_WINDOW[1] + next(r.offset for r in R.REGISTERS if r.name == name)


def _picker_regs(drv) -> tuple:
    """(picks, PICK_ERRORS) of the node's token picker (``hdl.node.NodeReg``)."""
    from mcf_fpga.sim.cluster import NODE_BASE
    from mcf_fpga.hdl.node import NodeReg
    return (drv.hw.axil_read(NODE_BASE + NodeReg.PICKS)[0], drv.hw.axil_read(NODE_BASE + NodeReg.PICK_ERRORS)[0])


def _picker_note(drv) -> str:
    """``; the token picker failed N picks, the first <cause>`` when it did, else ""."""
    if drv.image is None or drv.image.picks is None:
        return ""
    from mcf_fpga.spec.token_picker import PickError
    _picks, err = _picker_regs(drv)
    n, cause = err & ((1 << 30) - 1), err >> 30
    return f"; the token picker failed {n} pick(s), the first {PickError(cause).name}" if n else ""


def _rx_note(drv) -> str:
    """``; node k's RX placer: drop_overrun 1 ...`` for every node of the run (``drv.peers``: a
    wait that never ends is often another node's lost packet) whose RX placer dropped or failed
    packets, else ""."""
    notes = []
    for d in drv.peers or [drv]:
        if d.image is None or not d.image.rx:
            continue
        got = {k: d.hw.axil_read(_rx_reg(k))[0] for k in ("drop_malformed", "drop_overrun", "axi_err")}
        bad = ", ".join(f"{k} {v}" for k, v in got.items() if v)
        if bad:
            notes.append(f"; node {d.node}'s RX placer: {bad}")
    return "".join(notes)


def _idle(drv) -> bool:
    return drv.hw.pending("s_axis_cmd") == 0 and drv.hw.pending("s_axis_sp") == 0
