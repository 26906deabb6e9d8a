"""A compiled node stream (``host.compiler``) served to a bare ``ComputeEngine`` in the Amaranth
simulator (tests/hdl/compute/test_engine.py, scripts/bench_kv.py): the engine tests and the KV bench
run the one compiler's instructions and data, not a lowering of their own.

:func:`solo_program` is a program whose node 0 works alone: MARS prefill in chunks on node 0 of a
2-node ring (``host.elastic.program`` with one prefill node; node 1 only marks ``prefill_done``),
then KV-stationary decode with node 0 the only holder. Node 0's stream is then engine
instructions, directory commands, data records and one-member all-reduces, all of which
:class:`EngineHost` serves the way ``host.executors.rtl.NodeDriver`` does on the node, with
``NodeDriver``'s own helpers (``weight_tiles``, ``cs_words``, ``resolve``, ``kvcmd``):

* ``Ins``: queued on ``cmd`` with every symbolic KV address resolved (``NodeDriver.resolve``);
* ``KvCmd``: golden ``KVPool`` is the directory (``NodeDriver.kvcmd`` as on a fetching node: the
  host sends nothing, golden answers; status and the compiler's ``freed`` are checked, the slot
  taken from the answer);
* ``Weights`` / ``Embed`` / ``Rope`` / ``EmbedToken``: the tiles on ``w_in``, the rows on ``sp_in``;
* ``RecvMax`` / ``RecvSum`` + ``FeedRecv``: the NIC's all-reduce of a one-member group is the
  member's own contribution, so the EMIT words on ``emit_out`` come back (the max lanes;
  the merged rows with their m words checked against that max, as ``NodeDriver`` does);
* ``Logits`` / ``DLogits``: read from ``sp_out``; the token is the argmax of the last row, as on
  the node (decode's next ``EmbedToken`` embeds it).

Anything else in the stream (a send to or receive from another node) is refused.
"""
from __future__ import annotations

import collections
import random

import torch

from mcf_fpga.golden.int_model import IntModel
from mcf_fpga.host import compiler as C
from mcf_fpga.host.config import ClusterConfig, kv_unit_bytes
from mcf_fpga.host.elastic.program import elastic_program
from mcf_fpga.host.executors.rtl import NodeDriver, sim_node_config
from mcf_fpga.host.scenario import sim_hardware
from mcf_fpga.sim.kit import plain

__all__ = ["solo_program", "compile_solo", "EngineHost", "golden_logits"]


def solo_program(cfg, prompt_len: int, max_new_tokens: int, *, chunk: int, block: int, kv_bits: int):
    """The program of the module docstring. Node 0's KV memory (S_node) is just what the prompt's
    chunks and decode's new blocks need (as ``host.scenario.build_programs`` counts them), so the
    pool is no larger: the compiler puts its rows at the bottom of the engine's KV memory."""
    L = cfg.num_layers
    dec = -(-(prompt_len + max_new_tokens - 1) // block) - -(-prompt_len // block)
    need = -(-prompt_len // chunk) * L * kv_unit_bytes(cfg, chunk, kv_bits) + \
        max(0, dec) * L * kv_unit_bytes(cfg, block, kv_bits)
    return elastic_program(cfg, ClusterConfig(nodes=2, kv_bytes_per_node=need), sim_hardware(), prompt_len,
                           max_new_tokens, prefill_nodes=1, scale_ups={}, chunk=chunk, block=block,
                           kv_bits=kv_bits, prefill="mars")


def compile_solo(program, engine: dict):
    """Node 0's ``NodeCompiler`` for a node with engine parameters ``engine`` (what the bare
    engine is built with) and the program's ``NodeConfig`` (``sim_node_config``)."""
    ncfg = sim_node_config(engine=engine, kv_slots=program.n_slots)
    rid = {(r, 0): 0 for r in range(len(program.reqs))}      # route ids: only the Meta of EMITs
    return C.compile_program(program, ncfg, rid_max=rid, rid_sum=rid)[0], ncfg


def golden_logits(im: IntModel, prompt, chunk: int, max_new_tokens: int):
    """IntModel's logits of every prompt row (prefill in chunks) and of each decode step's token
    (greedy), as the stream reads them."""
    cache = im.new_cache()
    rows = [im.forward(prompt[c:c + chunk], cache, decode=False) for c in range(0, len(prompt), chunk)]
    out, lg = [torch.cat(rows)], rows[-1]
    for _ in range(max_new_tokens - 1):
        lg = im.forward([int(torch.argmax(lg[-1]))], cache, decode=True)
        out.append(lg)
    return out


class EngineHost:
    """Serves ``comp.stream`` (node 0 of a :func:`solo_program`) to ``dut`` (a bare
    ``ComputeEngine`` built with the compiled engine parameters). :meth:`testbenches` gives the
    simulator's (foreground, background) processes; after the run :meth:`read_logits` gives what
    the stream's ``Logits`` and ``DLogits`` read.
    ``w_valid``: valid probability on ``w_in``; ``ready``: ready probability on ``sp_out``,
    ``emit_out`` and ``meta_out`` (random back-pressure, seeded).

    For a measurement of part of a stream (``scripts/bench_kv.py``): records before index
    ``first`` are not run (only their directory commands, for the slots; the caller puts what
    they would have left in the KV memory and sets the tokens), ``weights=False`` leaves ``w_in``
    to the caller (``weight_tiles`` of the ``Weights`` records), and the records are served once
    ``hold()`` is false (the caller may queue its own commands and words on ``cmd`` / ``sp``
    first)."""

    def __init__(self, dut, comp, im: IntModel, prompt, ncfg, *, seed: int = 0, w_valid: float = 0.8,
                 ready: float = 0.5, first: int = 0, weights: bool = True, hold=None):
        self.dut, self.compiler = dut, comp
        self.drv = NodeDriver(comp, im, prompt, ncfg)
        self.drv.fetch = True            # golden's pool is the directory: no s_axis_kvcmd (NodeDriver.kvcmd)
        self.first, self.weights, self.hold = first, weights, hold
        for rec in comp.stream[:first]:          # not run: the directory's slots (self.drv.slots)
            if type(rec) is C.KvCmd:
                self._kvcmd(rec)
        # one process drives the inputs and one drains the three outputs (a coroutine per stream
        # would cost the simulator more than the streams do)
        self.cmd, self.w, self.sp = collections.deque(), collections.deque(), collections.deque()
        self.ins = [(dut.cmd, 1.0, self.cmd), (dut.sp_in, 1.0, self.sp)] + \
            ([(dut.w_in, w_valid, self.w)] if weights else [])
        self.outs = [(dut.sp_out, []), (dut.emit_out, []), (dut.meta_out, None)]
        self.taken = [0, 0]
        self.rng, self.ready = random.Random(seed), ready
        self.prefill, self.decode, self.error = [], [], None

    def testbenches(self):
        """(foreground, background) testbenches for ``run_simulation``."""
        return [self._host], [self._inputs, self._outputs]

    async def _inputs(self, ctx):
        """Each input stream: the next queued beat, valid with probability ``p`` per cycle while
        offered (held until taken)."""
        cur = [None] * len(self.ins)
        while True:
            for i, (s, p, q) in enumerate(self.ins):
                if cur[i] is None and q and (p >= 1 or self.rng.random() < p):
                    cur[i] = q.popleft()
                    for k, v in cur[i].items():
                        ctx.set(s.payload[k], v)
                ctx.set(s.valid, cur[i] is not None)
            got = await ctx.tick().sample(*(x for s, _p, _q in self.ins for x in (s.valid, s.ready)))
            for i in range(len(self.ins)):
                if got[2 + 2 * i] and got[3 + 2 * i]:      # (clock, reset, valid, ready, ...)
                    cur[i] = None

    async def _outputs(self, ctx):
        """Every output stream ready with probability ``ready`` per cycle; the words of ``sp_out``
        and ``emit_out`` kept (signed; an ``emit_out`` beat with ``two``: both its words)."""
        while True:
            for s, _w in self.outs:
                ctx.set(s.ready, self.rng.random() < self.ready)
            got = await ctx.tick().sample(*(x for s, _w in self.outs for x in (s.valid, s.ready, s.payload)))
            for i, (_s, words) in enumerate(self.outs):
                if got[2 + 3 * i] and got[3 + 3 * i] and words is not None:
                    beat = plain(got[4 + 3 * i])
                    words.append(_s32(beat["data"]))
                    if beat.get("two"):
                        words.append(_s32(beat["data1"]))

    async def _words(self, ctx, i, n):
        """The next ``n`` words the engine put on output ``i`` (0: ``sp_out``, 1: ``emit_out``)."""
        words = self.outs[i][1]
        while len(words) - self.taken[i] < n:
            await ctx.tick()
        j = self.taken[i]
        self.taken[i] = j + n
        return words[j:j + n]

    async def _host(self, ctx):
        drv, c = self.drv, self.compiler
        H, W, V = c.heads, c.partial_words, c.vocab
        stash, M = None, None
        while self.hold is not None and self.hold():
            await ctx.tick()
        for rec in c.stream[self.first:]:
            t = type(rec)
            if t is C.Weights and not self.weights:
                continue
            if t is C.Ins:
                f = {k: drv.resolve(v) for k, v in rec.fields.items()}
                self.cmd.append(f)
            elif t is C.KvCmd:
                self._kvcmd(rec)
            elif t is C.Weights:
                self.w.extend(bt for tile in drv.weight_tiles((rec.layer, rec.name, rec.rows)) for bt in tile)
            elif t is C.Embed:
                self._feed(drv.im.embed(drv.prompts[rec.req][rec.rows[0]:rec.rows[1]]).flatten().tolist())
            elif t is C.Rope:
                self._feed(drv.cs_words(rec.t0, rec.t1))
            elif t is C.EmbedToken:
                self._feed(drv.im.embed(torch.tensor([drv.req_tokens(rec.req)[-1]])).flatten().tolist())
            elif t is C.RecvMax:
                M = stash = await self._words(ctx, 1, H)
            elif t is C.RecvSum:
                assert rec.holders == 1 and not rec.w_root, "one-member merges only"
                words = await self._words(ctx, 1, H * W)
                for h in range(H):
                    m = (words[h * W] & 0xFFFFFFFF) | (words[h * W + 1] << 32)
                    assert m == M[h], f"merged partial of head {h}: m = {m}, the all-reduced max is {M[h]}"
                stash = words
            elif t is C.FeedRecv:
                self._feed(stash)
                stash = None
            elif t is C.Logits:
                T = rec.rows[1] - rec.rows[0]
                lg = torch.tensor(await self._words(ctx, 0, T * V), dtype=torch.int64).view(T, V)
                self.prefill.append(lg)
                if rec.rows[1] == drv.program.reqs[rec.req][0]:
                    drv.req_tokens(rec.req).append(int(torch.argmax(lg[-1])))
            elif t is C.DLogits:
                lg = torch.tensor(await self._words(ctx, 0, V), dtype=torch.int64).view(1, V)
                self.decode.append(lg)
                drv.req_tokens(rec.req).append(int(torch.argmax(lg[-1])))
            elif t not in (C.Mark, C.Version, C.OpDone):
                raise AssertionError(f"record {rec!r} is not the bare engine's")
        self.error = ctx.get(self.dut.error)

    def _kvcmd(self, rec):
        for _ in self.drv.kvcmd(rec):
            raise AssertionError("golden's directory answers at once")

    def read_logits(self) -> list:
        """[logits of every prompt row, of decode step 1, 2, ...] (int64 tensors [rows, vocab]),
        as :func:`golden_logits`."""
        return [torch.cat(self.prefill)] + self.decode

    def _feed(self, words):
        self.sp.extend({"data": int(w) & 0xFFFFFFFF} for w in words)


def _s32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >> 31 else v
