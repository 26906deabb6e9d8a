"""The one compiler: a ``host.program.Program`` -> one instruction stream per node.

``compile_program(program, node_cfg)`` turns every op of every node into *records*, in the order
the node must see them, from the program and the node's configuration alone (no model weights, no
prompt, no hardware): the compiler decides every scratchpad, exponent-memory and KV-row address,
every engine instruction (``spec.instr`` fields), every KV-pool directory command
and every point at which the node has to wait. The RTL executor (``host.executors.rtl``), and
through it the board executor, runs these streams; ``mcf compile`` prints them.

Records (plain frozen data; ``listing`` prints one line each):

* ``Ins`` -- one engine instruction, queued on the node's command stream. A field may hold a
  symbolic KV address, resolved where the node's directory knows it: :class:`KvRow` (row ``off``
  of the KV-memory rows of pool unit (layer, unit): ``slot * slot_rows + off`` on the on-chip KV
  memory) or :class:`KvSlot` (the unit's DDR slot number, field ``b`` of KVW / KVL / KVS). The
  slot of a unit is chosen at run time (by the host's ALLOC_OWNER, or by the NIC's installer when
  the unit arrives), so no stream can hold it -- the command fetcher patches it from a directory
  LOOKUP (``hdl.cmdstream`` ``ENGINE_KV``).
* ``KvCmd`` -- a directory command (``spec.kvpool.Opcode``) for KV unit (layer, unit), with
  the answer's ``freed`` flag the program's own pool model predicts (the compiler runs
  ``golden.kvpool.KVPool`` over the node's commands: an address freed here is reused later).
* ``WaitRetired`` -- wait until the engine has retired ``count`` instructions (NIC installs: the
  installer may reuse a slot the moment the directory frees it, so a command that may free a slot
  first waits for the last instruction that reads it).
* ``WaitInstalled`` -- wait until the NIC's installer committed KV unit (layer, unit).
* Data the node's inputs need (today fed by the host on ``s_axis_sp`` / ``s_axis_w``; what the
  node is to fetch itself): ``Weights`` (the tiles of one weight matrix, or a slice of its
  rows), ``Embed`` (prompt embedding rows), ``Rope`` (cos/sin table rows), ``Recv`` +
  ``FeedRecv`` (received payloads: wait for the packets, then stream their words),
  ``EmbedToken`` / ``TokenWord`` / ``BestWords`` / ``EmptyPartial`` / ``RecvMax`` / ``RecvSum``
  (decode values only known at run time).
* Results the host collects: ``Logits``, ``DLogits``, ``TpLogits``, ``RecvToken``, ``Pick`` (SPR
  frames: the logits, a received token, the W group's best pairs); and ``Mark``, ``Publish``, ``Version``, ``OpDone`` (progress and reports).

Today the host serves every record but the bookkeeping (``Mark``, ``OpDone``, ``Version``): a
run of ``Ins`` is one push, every other record one interaction (:func:`host_interactions` counts
them per op kind). The command fetcher is to take the instructions, directory commands and waits;
the data records are the work left to move onto the node.
"""
from __future__ import annotations

import collections
import dataclasses
import itertools
from dataclasses import dataclass

from mcf_fpga.golden import numerics as nx
from mcf_fpga.golden.kvpool import KVPool
from mcf_fpga.spec.kvpool import Opcode, kv_id_from
from mcf_fpga.spec.instr import (AttFlags, EmitFlags, EngineOpcode, FoldFlags, GemmFlags, KvsFlags, KvwFlags, SpwFlags,
                        opcode_name)
from mcf_fpga.hdl.compute.program import instr
from mcf_fpga.hdl.compute.vector import VecOp
from mcf_fpga.spec.kvinstall import HEADER_BYTES
from mcf_fpga.spec.partial import PartialRow
from mcf_fpga.spec.meta import DEFAULT_PARAMS, Collective, MetaFields, MetaOp, ReduceOp, Stage
from mcf_fpga.golden.header import pack_int

from mcf_fpga.host import program_ops
from mcf_fpga.host.executors.kv_ddr import DdrKV
from mcf_fpga.host.executors.rtl_memory import Arena
from mcf_fpga.host.install_credits import CREDIT_BYTES, credit_key
from mcf_fpga.host.prefill_fold import Att, PrefillFold, fold_slots
from mcf_fpga.host.scratch_layout import ExponentLayout, ScratchLayout

__all__ = ["compile_program", "NodeCompiler", "CompileError", "KvRow", "KvSlot", "Ins", "KvsRun", "KvCmd",
           "WaitRetired", "WaitInstalled", "Weights", "Embed", "Rope", "Recv", "FeedRecv",
           "EmbedToken", "TokenWord", "BestWords", "EmptyPartial", "RecvMax", "RecvSum", "Logits",
           "DLogits", "TpLogits", "RecvToken", "Pick", "Mark", "Publish", "Version",
           "OpDone", "listing", "host_interactions", "host_serves", "host_interaction_rates", "DECODE_FOLD_SLOTS",
           "up_to", "pad_values", "fold_batches", "decode_sum_packets", "decode_reduce_contexts",
           "kv_table", "to_cmdstream", "placed_records", "rx_entry_key", "COUNTER_RETIRED", "COUNTER_HOST", "COUNTER_PICKS",
           "COUNTER_RX0"]

#: decode partial slots per KV head: a node folds its blocks' partials in batches through this many
#: slots (slot 0 carries the running fold), so its scratch does not grow with the context
DECODE_FOLD_SLOTS = 4


class CompileError(ValueError):
    """A program the node cannot run as configured (the message names the node, op and limit)."""


def fold_batches(n_blocks: int, slots: int | None = None):
    """Decode's local fold of ``n_blocks`` block partials through ``slots`` partial slots per KV
    head: ``[(first block, blocks in the batch, carried)]`` -- each batch's ATT jobs write slots
    ``carried ..``, its FOLD folds ``carried + blocks`` slots into slot 0 (the running fold;
    ``carried`` = 1 from the second batch) or, for the last batch, into the output."""
    slots = DECODE_FOLD_SLOTS if slots is None else slots
    out, j = [], 0
    while j < n_blocks:
        carried = 1 if j else 0
        k = min(slots - carried, n_blocks - j)
        out.append((j, k, carried))
        j += k
    return out


def up_to(n: int, m: int) -> int:
    return -(-n // m) * m


def pad_values(n: int, bits: int) -> int:
    """Values rounded up to whole 32-bit words of ``bits``-bit values (32 // bits per word)."""
    return up_to(n, 32 // bits)


def decode_sum_packets(num_heads: int, head_dim: int, max_payload: int) -> tuple:
    """(int32 words per packet, packets) of decode's sum phase: the partial rows of all heads
    (``num_heads`` :class:`~spec.partial.PartialRow` rows, contiguous) cut into packets of at
    most ``max_payload`` bytes (a multiple of 8: no int64 word is split), the last one shorter."""
    per = max_payload // 4
    return per, -(-num_heads * PartialRow(head_dim).words // per)


def decode_reduce_contexts(program, n_sum: int) -> tuple:
    """(NIC reduce-pool contexts a node needs for the decode merge, why) when each merge is one
    max group plus ``n_sum`` sum groups (``NodeCompiler.op_allreduce``). A holder sends its sum
    groups only after the max result, which needs every holder's max contribution: when the root
    holds KV (it is in the max group) it can have one request's sum groups and the next one's max
    group open (1 + n_sum); a holder may see two max groups (its own not yet closed, the next one
    from a faster holder). A W-only root is not in the max group: with pipelined requests the
    holders may send the sum groups of every request of a round before the root takes any."""
    if not program.stats.get("w_only"):
        return max(2, 1 + n_sum), f"1 max + {n_sum} sum groups of the merge"
    reqs = max(1, len(program.reqs)) if program.stats.get("pipeline", True) else 1
    return max(2, reqs * n_sum), f"{n_sum} sum groups of the merge x {reqs} pipelined requests at a W-only root"


def kv_table(ncfg):
    """golden.kvpool's ``table`` of the node's directory (None: the CAM)."""
    if getattr(ncfg, "kv_directory", "cam") != "table":
        return None
    return (ncfg.kv_layers, ncfg.kv_blocks)


# ---------------------------------------------------------------------- symbolic KV addresses

@dataclass(frozen=True)
class KvRow:
    """Row ``off`` of pool unit (layer, unit)'s KV rows (its slot's first row + ``off``)."""
    layer: int
    unit: int
    off: int = 0

    def __add__(self, k: int) -> "KvRow":
        return KvRow(self.layer, self.unit, self.off + int(k))

    __radd__ = __add__

    def __str__(self):
        return f"row({self.layer},{self.unit})+{self.off}"


@dataclass(frozen=True)
class KvSlot:
    """The DDR slot of pool unit (layer, unit)."""
    layer: int
    unit: int

    def __str__(self):
        return f"slot({self.layer},{self.unit})"


# ---------------------------------------------------------------------- records

@dataclass(frozen=True)
class Ins:
    """One engine instruction (``fields``: INSTR field -> int, or KvRow / KvSlot), of op ``op``."""
    fields: dict
    op: int


@dataclass(frozen=True)
class KvsRun(Ins):
    """The KVS instructions of one KV unit's send as their shapes only (``fields``: ``op`` KVS,
    ``ntoks`` the records of each install packet, in order): what ``compile_program(...,
    kvs_shapes=True)`` emits in their place for the performance model, which times a packet by its
    record count (the executors take the full instructions, :meth:`NodeCompiler.kvs_unit`)."""


@dataclass(frozen=True)
class KvCmd:
    opcode: Opcode
    layer: int
    unit: int
    kind: str          # the program op it serves (for reports)
    freed: bool        # the answer's freed flag the compiler's pool model predicts


@dataclass(frozen=True)
class WaitRetired:
    count: int


@dataclass(frozen=True)
class WaitInstalled:
    """Wait until the NIC's installer committed KV unit (layer, unit), sent as install packets of
    ``packets`` records each (``NodeCompiler.install_packets``)."""
    layer: int
    unit: int
    packets: tuple = ()


@dataclass(frozen=True)
class Weights:
    """The GEMM tiles of weight ``name`` of layer ``layer`` (None: the LM head), rows ``rows``."""
    layer: int | None
    name: str
    rows: tuple | None = None


@dataclass(frozen=True)
class Embed:
    req: int
    rows: tuple


@dataclass(frozen=True)
class Rope:
    t0: int
    t1: int


@dataclass(frozen=True)
class Recv:
    """Wait for ``len(sizes)`` packets of inbox ``key`` of ``sizes`` bytes each (None: any);
    ``fed``: a ``FeedRecv`` streams their words next (False: only the wait, an install credit's,
    host.install_credits)."""
    key: tuple
    sizes: tuple
    what: str
    fed: bool = True


@dataclass(frozen=True)
class FeedRecv:
    """Stream the words of the last ``Recv``'s payloads (or of ``RecvSum``'s merged rows),
    ``copies`` times over (2: a received token as the pair (token, token), ``RecvToken``)."""
    copies: int = 1


@dataclass(frozen=True)
class EmbedToken:
    req: int


@dataclass(frozen=True)
class TokenWord:
    req: int


@dataclass(frozen=True)
class BestWords:
    req: int
    part: int


@dataclass(frozen=True)
class EmptyPartial:
    """A node holding no block contributes H empty partial rows (m = the all-reduced max of
    request ``req`` when ``ext``, else M_EMPTY)."""
    req: int
    ext: bool


@dataclass(frozen=True)
class RecvMax:
    """The max all-reduce's result of request ``req`` (``key``): its H m lanes become the request's
    global max, fed next (after the SPW the compiler queued) as H words."""
    req: int
    key: tuple


@dataclass(frozen=True)
class RecvSum:
    """The root's merged partial rows (``n_sum`` packets ``keys``); the m words (holders x M) are
    replaced by M (``FeedRecv`` streams them)."""
    req: int
    keys: tuple
    holders: int
    w_root: bool


@dataclass(frozen=True)
class Logits:
    req: int
    rows: tuple      # the rows whose logits the SPR frame carries (``Program.head_rows``)


@dataclass(frozen=True)
class DLogits:
    req: int


@dataclass(frozen=True)
class TpLogits:
    req: int
    part: int
    v0: int
    v1: int


@dataclass(frozen=True)
class RecvToken:
    """The SPR frame of a received token as the pair (token, token) (``op_drecv``): the host reads
    it (the token is its id); a node with a token picker picks it into a slot (pairs mode)."""
    req: int


@dataclass(frozen=True)
class Pick:
    """The SPR frame of the W group's ``parts`` (value, token) pairs in slice order: the token is
    the id of the first largest value (the lowest token on ties: slices are in vocabulary order),
    read by the host; a node with a token picker picks it into a slot (pairs mode)."""
    req: int
    parts: int


@dataclass(frozen=True)
class Mark:
    name: str


@dataclass(frozen=True)
class Publish:
    step: int


@dataclass(frozen=True)
class Version:
    """Record the routing version a decode op of (req, pos, layer) runs under."""
    req: int
    pos: int
    layer: int


@dataclass(frozen=True)
class OpDone:
    index: int
    kind: str


#: bookkeeping records: no work for anybody
_BOOKKEEPING = (Mark, OpDone, Version)


#: records the node's command fetcher serves (``to_cmdstream``): instructions, directory commands
#: and waits, and the data its stream loader reads from the preloaded image (host.node_image)
_FETCHED = (Ins, KvCmd, WaitRetired, WaitInstalled, Weights, Embed, Rope)


def host_serves(r, prev, fetched: bool) -> bool:
    """Whether the host serves record ``r`` (after ``prev``) as one interaction."""
    if isinstance(r, _BOOKKEEPING) or (fetched and isinstance(r, _FETCHED)):
        return False
    return not (isinstance(r, Ins) and isinstance(prev, Ins))


def host_interactions(stream, fetched: bool = False, served=()) -> collections.Counter:
    """{program op kind: host interactions} of one node's stream, as the RTL executor serves it
    today: every push of a run of engine instructions (one ``s_axis_cmd`` frame), directory
    command, data feed, wait and read is one (bookkeeping is none). The command fetcher takes the
    instruction runs, directory commands and waits off this count; moving the data onto the node
    takes the rest. ``fetched``: the node's fetcher serves the instructions, directory commands
    and waits (``NodeConfig.fetcher``) and loads the weights, prompt rows and RoPE rows from its
    image, which then do not count; a run-time feed is one (a mailbox entry and the doorbell).
    ``served`` (with ``fetched``): indices of records the node serves itself, which do not count
    either: received payloads its RX placer lands (:func:`placed_records`), tokens it picks
    (``host.node_image.plan_picks``); ``NodeImage.placed`` is both."""
    out, pending, prev = collections.Counter(), 0, None
    for i, r in enumerate(stream):
        if isinstance(r, OpDone):
            if pending:
                out[r.kind] += pending
            pending, prev = 0, None
            continue
        if i not in served and host_serves(r, prev, fetched):
            pending += 1
        prev = r
    return out


def host_interaction_rates(program, streams, fetched: bool = False, served=None) -> tuple:
    """(host interactions per KV unit of the prompts, per decode token), over every node's
    ``streams``: those before a node's ``prefill_done`` mark count as prefill, the rest as decode
    (decode tokens: every request's ``max_new_tokens - 1`` steps; None without decode);
    ``fetched`` as :func:`host_interactions`, ``served`` its ``served`` per stream."""
    pre = dec = 0
    for n, stream in enumerate(streams):
        prev, after = None, False
        placed = served[n] if served else ()
        for i, r in enumerate(stream):
            if isinstance(r, Mark) and r.name == "prefill_done":
                after = True
            if i not in placed and host_serves(r, prev, fetched):
                if after:
                    dec += 1
                else:
                    pre += 1
            prev = r
    steps = sum(n - 1 for _p, n in program.reqs)
    return pre / max(1, len(program.units)), (dec / steps if steps else None)


def _ins_line(f: dict) -> str:
    parts = []
    for k, v in f.items():
        if k == "op":
            continue
        if k == "meta":
            v = int(v.as_value().value) if hasattr(v, "as_value") else int(v)
            if v:
                parts.append(f"meta={v:#x}")
            continue
        if v:
            parts.append(f"{k}={v}")
    return opcode_name(f["op"]) + " " + " ".join(parts)


def listing(stream) -> str:
    """One line per record (``mcf compile``): the diffable text of a node's stream."""
    out = []
    for r in stream:
        if isinstance(r, Ins):
            out.append(f"  {_ins_line(r.fields)}")
        elif isinstance(r, OpDone):
            out.append(f"# op {r.index} {r.kind} done")
        elif isinstance(r, KvCmd):
            out.append(f"  kv {r.opcode.name} ({r.layer},{r.unit})" + (" -> freed" if r.freed else ""))
        else:
            fields = ", ".join(f"{f.name}={getattr(r, f.name)!r}" for f in dataclasses.fields(r))
            out.append(f"  {type(r).__name__.lower()} {fields}".rstrip())
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------- the compiler

class NodeCompiler:
    """Compiles node ``node``'s ops of ``program`` (``hdl.node.NodeConfig`` ``ncfg``, engine
    parameters ``ncfg.engine``); ``stream`` holds the records after :meth:`compile`.
    ``query_first``: the decode leader queues each token's Q projection and Q send before its K/V
    projection (KernelFlume §5.1; the same instructions, reordered).

    State: ``node``, ``program``, ``cfg`` (its model); the model's widths ``hidden`` (D),
    ``intermediate`` (I), ``heads`` (H), ``kv_heads`` (Hk), ``head_dim`` (d), ``gqa`` (H / Hk),
    ``vocab`` (V), ``q_width`` (H*d), ``kv_width`` (Hk*d) and ``partial_words`` (a
    :class:`~spec.partial.PartialRow`'s words); ``scratch`` / ``exps`` the fixed scratchpad and
    exponent-memory regions (:mod:`host.scratch_layout`), ``sp`` / ``em`` the arenas above them.
    Methods name the widths by their letters in local variables (``D, Q = self.hidden, ...``)."""

    def __init__(self, node: int, program, ncfg, *, query_first: bool = False, kvs_shapes: bool = False,
                 facts: tuple | None = None, kv_budget: int | None = None):
        e = ncfg.engine
        # (most rows of an op, receivers' install kinds per KV message) of the whole program
        # (program_facts; compile_program reckons them once for every node)
        max_rows, self.recv_install = facts or program_facts(program)
        self.kvs_shapes = kvs_shapes     # a unit's KVS sends as one KvsRun (the performance model)
        self.node, self.program = node, program
        cfg = program.model
        self.cfg = cfg
        # the model's widths (D, I, H, Hk, d, V; Q = H*d, KV = Hk*d in the formulas below)
        self.hidden, self.intermediate, self.vocab = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
        self.heads, self.kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.gqa = cfg.gqa_ratio
        self.q_width, self.kv_width = self.heads * self.head_dim, self.kv_heads * self.head_dim
        self.partial_words = PartialRow(self.head_dim).words
        self.kv_bits = program.kv_bits
        self.block = program.block
        self.pn, self.pk = e["pn"], e["pk"]
        self.max_payload = ncfg.nic.max_payload
        self.unit_max = max(t1 - t0 for t0, t1 in program.units)
        # rows at once: the engine's t_max, or fewer if no op of the program needs as many (the
        # per-tile scratch is sized for t_max rows: a large engine then still fits small chunks)
        self.t_max = min(e["t_max"], max(max_rows, self.unit_max, 1))
        # a unit's head stride is rounded up to whole golden blocks: decode appends the tokens
        # after the prompt's last (partial) block into the same rows
        self.slot_rows = self.kv_heads * up_to(self.unit_max, program.block)
        if self.unit_max > e["t_max"]:
            raise CompileError(f"units of {self.unit_max} tokens exceed the engine's t_max={e['t_max']} "
                               f"(rows per GEMM); use a smaller chunk")
        if self.t_max * self.gqa > e["nq_max"]:
            raise CompileError(f"{self.t_max} rows at once x gqa {self.gqa} = {self.t_max * self.gqa} query rows "
                               f"exceed nq_max={e['nq_max']}")
        if self.block > e["blk_max"] or self.block > e["z_max"]:
            raise CompileError(f"block={self.block} exceeds the attention unit's blk_max/z_max "
                               f"({e['blk_max']}/{e['z_max']})")
        self.sum_words, self.n_sum = decode_sum_packets(self.heads, self.head_dim, self.max_payload)
        if max(n for _p, n in program.reqs) > 1:
            need, why = decode_reduce_contexts(program, self.n_sum)
            if need > ncfg.nic.reduce_contexts:
                # the NIC's reduction input blocks while its pool is full: every group that can be
                # open at once must have a context or the merge deadlocks
                raise CompileError(f"decode needs {need} NIC reduction contexts ({why}), the node has "
                                   f"{ncfg.nic.reduce_contexts} (NicConfig.reduce_contexts must be at "
                                   f"least {need})")
        self.split = program.wsplit
        if self.split is not None:
            sp = self.split
            if sp.tile % self.pn:
                raise CompileError(f"w_tile={sp.tile} is not a multiple of the engine's GEMM tile pn={self.pn} "
                                   f"(a W node's weight slice must be whole tiles)")
            for j in range(sp.W):
                for what in ("q", "kvtok"):
                    for f, _o, n, bits in sp.wire(what, j):
                        if bits < 32 and n % (32 // bits):
                            raise CompileError(f"w_group: slice {j} sends {n} {bits}-bit values of {f}, not "
                                               f"whole 32-bit words (head_dim={self.head_dim})")
        hw_slots = ncfg.kv_slots
        if program.n_slots > hw_slots:
            raise CompileError(f"the program's KV pool needs {program.n_slots} slots, the node has "
                               f"{hw_slots} (NodeConfig.kv_slots)")
        region = e.get("kv_region")
        self.ddr = None
        # the NIC installs received KV units itself (NodeConfig.kv_install): the pool then also
        # holds staged units and units that arrive before the program expects them
        self.install = bool(getattr(ncfg, "kv_install", False))
        if self.install and region is None:
            raise CompileError("NodeConfig.kv_install needs an engine with a kv_region (K/V in DDR)")
        self.pool_slots = hw_slots if self.install else program.n_slots
        if region is not None:
            # K/V in DDR: flat row f = row f % R of region slot f // R; staged units and decode
            # blocks take whole slots above the pool's (mcf_fpga/host/executors/kv_ddr.py)
            self.ddr = DdrKV(region, e.get("kv_win_rows") or e["blk_max"], e.get("kv_n_win", 2),
                             self.slot_rows, self.pool_slots)
            # decode: a layer's first blocks load beside its projection, the sum phase's beside the
            # max reduction (next_local_atts); ``kv_preload`` False (a model-only key, as att_acc):
            # every ATT's load queued in its own op, as before
            self.kv_preload = e.get("kv_preload", True)
            self.slot_rows = region.slot_rows
            base, size = self.ddr.stage_rows
            self.kvrows = Arena("KV region slots (staging/decode)", size, base=base, align=region.slot_rows)
        else:
            pool_rows = program.n_slots * self.slot_rows
            if pool_rows >= e["kv_depth"]:
                raise CompileError(f"KV pool of {program.n_slots} slots x {self.slot_rows} rows exceeds the "
                                   f"attention memory kv_depth={e['kv_depth']}")
            self.kvrows = Arena("kv rows (staging/decode)", e["kv_depth"] - pool_rows, base=pool_rows)
        # ---- scratchpad: per-tile scratch, then a dynamic arena. The engine runs its queue in
        # order, one instruction at a time, so the scratch of the projection, of the attention
        # tail and of the head share one region.
        self.scratch = ScratchLayout.for_rows(self.t_max, hidden=self.hidden, intermediate=self.intermediate,
                                              q_width=self.q_width, kv_width=self.kv_width, head_dim=self.head_dim,
                                              vocab=self.vocab)
        addr = self.scratch.top
        if addr >= e["sp_depth"]:
            raise CompileError(f"scratch of {addr} words exceeds sp_depth={e['sp_depth']}")
        self.sp = Arena("scratchpad", e["sp_depth"] - addr, base=addr)
        # the prefill fold's slots are sized from the real scratchpad (``fold_sp_depth``: the
        # performance model's node has an unbounded one but compiles the stream the node runs);
        # where the real node cannot even hold the per-tile scratch (paper-scale chunks, which
        # would need row tiles), the model's scratchpad is unbounded, partials included: one
        # slot per block (None)
        real = e.get("fold_sp_depth", e["sp_depth"])
        self.fold_arena = real - addr if real > addr else None
        # the running fold takes the next block in place by an ATT acc (host.prefill_fold);
        # ``att_acc`` False (a model-only key, as fold_sp_depth): every block through a window slot
        self.att_acc = e.get("att_acc", True)
        self.exps = ExponentLayout.for_rows(self.t_max)
        eaddr = self.exps.top
        self.em = Arena("exponent memory", e["em_depth"] - eaddr, base=eaddr, align=4)
        # ---- state: the compiler's model of the node's pool (answers' freed flags)
        # (``kv_budget``: the pool's run-time budget, at most its slots; host.install_credits)
        if kv_budget is not None and not 1 <= kv_budget <= self.pool_slots:
            raise CompileError(f"kv_budget={kv_budget}: the pool's budget must be 1..{self.pool_slots} "
                               f"(its slots)")
        self.pool = KVPool(self.pool_slots, program.slot_bytes, kv_id_width=32, max_readers=15,
                           table=kv_table(ncfg), budget=kv_budget)
        # slots the pool model took and freed so far, and after each op (``pool_trace``:
        # host.install_credits orders a KV send after the receiver's frees with it)
        self.pool_taken = self.pool_freed = 0
        self.pool_trace = []
        self.units = {}          # (layer, unit) -> dict(kind, row, sp, em, n)
        # K/V in DDR: attention reads a unit's rows from the region, so its scratchpad/EM copy
        # (the QUANT output its KVW writes, the source of its EMITs) is freed once it is KVW'd
        # and its last KV send of the program is queued (the engine runs in order). Sends left:
        self.kv_sends_left = (collections.Counter((op.layer, op.unit) for op in program.ops[node]
                                                  if isinstance(op, program_ops.Send) and op.what == "kv")
                              if self.ddr is not None else None)
        self.rowsets = {}        # (req, rows) -> dict(h=[a, b], cur, q, eq, parts)
        self.held = {}
        self.cmd_count = 0       # engine instructions queued so far
        self.dd = None           # decode scratch of the current request (dinit)
        self.dds = {}            # req -> its decode scratch
        self.dblocks = None      # (req, layer) -> decode KV blocks held here
        self.cur_req = 0
        self.query_first = query_first
        self.deferred = None     # the K/V projection held back behind the Q send
        self.stream = []
        self.idx = 0             # the op being compiled
        self.rid_max, self.rid_sum = {}, {}

    # ------------------------------------------------------------------ output
    def out(self, rec):
        self.stream.append(rec)

    def emit(self, instrs, then=()):
        """Queue ``instrs``; K/V in DDR: ``then``, the first ATT jobs of a later op, get their
        block loads queued with these (``DdrKV.rewrite``)."""
        if self.ddr is not None:
            instrs = self.ddr.rewrite(instrs, then)
        if not instrs:
            return
        for i in instrs:
            self.stream.append(Ins(i, self.idx))
        self.cmd_count += len(instrs)

    def kvcmd(self, opcode, layer, unit, kind):
        """One directory command: the compiler's pool answers it (refusals are compile errors);
        the record carries the predicted ``freed``."""
        kid = kv_id_from(layer, unit, DEFAULT_PARAMS.layer_bits)
        gold = self.pool_cmd(opcode, kid)
        if gold.status.name != "OK":
            raise CompileError(f"node {self.node} op {self.idx}: {kind} ({layer},{unit}): the KV pool would "
                               f"answer {gold.status.name} (slots in use {self.pool.used_slots} of "
                               f"{self.pool.budget})")
        self.out(KvCmd(opcode, layer, unit, kind, bool(gold.freed)))
        return gold

    def pool_cmd(self, opcode, kid):
        """One command to the compiler's pool model, counting the slots it takes and frees."""
        used = self.pool.used_slots
        gold = self.pool.execute(opcode, kid)
        delta = self.pool.used_slots - used
        self.pool_taken += max(delta, 0)
        self.pool_freed += max(-delta, 0)
        return gold

    # ------------------------------------------------------------------ helpers
    def rowset(self, req, rows):
        rs = self.rowsets.get((req, rows))
        if rs is None:
            T = rows[1] - rows[0]
            if T > self.t_max:
                raise CompileError(f"node {self.node}: {T} rows at once exceed the engine's t_max={self.t_max}")
            rs = self.rowsets[(req, rows)] = {
                "T": T, "h": [self.sp.alloc(T * self.hidden, "h"), self.sp.alloc(T * self.hidden, "h")], "cur": 0,
                "q": None, "eq": None, "fold": None}
        return rs

    def unit_rows(self, layer, unit):
        u = self.units.get((layer, unit))
        if u is None:
            raise CompileError(f"node {self.node}: KV of ({layer},{unit}) is not on this node")
        return u

    def new_unit(self, layer, unit, kind, pool=True, copy=True):
        """A KV unit held here: in a pool slot (``pool``; its rows are symbolic, :class:`KvRow`)
        or in staging rows; ``copy``: with its scratchpad/EM copy (the QUANT output its KVW
        writes; a unit the NIC installed has none)."""
        t0, t1 = self.program.units[unit]
        n = t1 - t0
        kvw, ew = pad_values(n * self.kv_width, self.kv_bits), pad_values(n * self.kv_heads, 8)
        u = {"kind": kind, "n": n, "t0": t0, "t1": t1, "kvw": kvw, "ew": ew, "stride": up_to(n, self.block),
             "spk": None, "spv": None, "emk": None, "emv": None}
        if copy:
            u.update(spk=self.sp.alloc(kvw, "K copy"), spv=self.sp.alloc(kvw, "V copy"),
                     emk=self.em.alloc(ew, "K exps"), emv=self.em.alloc(ew, "V exps"))
        if pool:
            u["row"] = KvRow(layer, unit)
        else:
            u["row"] = self.kvrows.alloc(self.kv_heads * u["stride"], f"staged ({layer},{unit})")
        self.units[(layer, unit)] = u
        return u

    def drop_unit(self, layer, unit):
        u = self.units.pop((layer, unit))
        if u["spk"] is not None:                  # else freed by free_copy
            for k in ("spk", "spv"):
                self.sp.free(u[k])
            for k in ("emk", "emv"):
                self.em.free(u[k])
        if not isinstance(u["row"], KvRow):       # staging rows (a pool unit's slot: the directory)
            self.kvrows.free(u["row"])

    def vec(self, sub, a, dst, n0, ln, b=0, n1=0, ed=0, bits=8):
        eps_q = int(round(self.cfg.rms_norm_eps * 2 ** (2 * nx.FA)))
        return instr(EngineOpcode.VEC, sub=sub, a=a, b=b, dst=dst, n0=n0, n1=n1, len=ln, ed=ed, frac=nx.FA,
                     bits=bits, eps_q=eps_q)

    def gemm(self, layer, name, a, ea, T, K, N, dst, reuse=False, rows=None):
        """A GEMM with weight ``name`` of ``layer`` (None: the head), output rows ``rows`` of it."""
        if rows is not None and rows[1] - rows[0] != N:
            raise CompileError(f"node {self.node}: GEMM of rows {rows} with N={N}")
        self.out(Weights(layer, name, None if rows is None else tuple(rows)))
        return instr(EngineOpcode.GEMM, flags=GemmFlags(reuse=reuse), a=a, ea=ea, n0=T, len=K, n1=N, dst=dst)

    # ------------------------------------------------------------------ prefill
    def op_embed(self, req, rows):
        rs = self.rowset(req, rows)
        self.emit([instr(EngineOpcode.SPW, dst=rs["h"][rs["cur"]], n0=rs["T"] * self.hidden)])
        self.out(Embed(req, tuple(rows)))

    def op_project(self, req, layer, rows, unit):
        self.kvcmd(Opcode.ALLOC_OWNER, layer, unit, "project")
        u = self.new_unit(layer, unit, "owner")
        if (u["t0"], u["t1"]) != tuple(rows):
            raise CompileError(f"node {self.node}: project rows {rows} differ from unit {unit} {u['t0'], u['t1']}")
        rs = self.rowset(req, rows)
        T = rs["T"]
        D, Q, KV, H, Hk, d = self.hidden, self.q_width, self.kv_width, self.heads, self.kv_heads, self.head_dim
        if rs["q"] is None:
            rs["q"], rs["eq"] = self.sp.alloc(T * Q, "q"), self.em.alloc(T * H, "q exps")
        S, E = self.scratch, self.exps
        self.emit([instr(EngineOpcode.SPW, dst=S.rope.base, n0=T * d // 2)])
        self.out(Rope(*rows))
        P = [self.vec(VecOp.RMSNORM, rs["h"][rs["cur"]], S.x.base, T, D, ed=E.x.base),
             self.gemm(layer, "q", S.x.base, E.x.base, T, D, Q, S.q.base),
             self.gemm(layer, "k", S.x.base, E.x.base, T, D, KV, S.k.base, reuse=True),
             self.gemm(layer, "v", S.x.base, E.x.base, T, D, KV, S.v.base, reuse=True),
             self.vec(VecOp.ROPE, S.q.base, S.q_rope.base, T, d, b=S.rope.base, n1=H),
             self.vec(VecOp.ROPE, S.k.base, S.k_rope.base, T, d, b=S.rope.base, n1=Hk),
             self.vec(VecOp.QUANT, S.q_rope.base, rs["q"], T * H, d, ed=rs["eq"]),
             self.vec(VecOp.QUANT, S.k_rope.base, u["spk"], T * Hk, d, ed=u["emk"], bits=self.kv_bits),
             self.vec(VecOp.QUANT, S.v.base, u["spv"], T * Hk, d, ed=u["emv"], bits=self.kv_bits)]
        P += self.kvw(u)
        self.emit(P)
        self.free_copy(layer, unit)

    def used_until(self, layer, unit):
        """The engine reads the unit's DDR slot until the instructions queued so far retire."""
        u = self.units.get((layer, unit))
        if u is not None:
            u["last_use"] = self.cmd_count

    def wait_unused(self, layer, unit):
        """Before a command that may free the unit (it may leave the node): queue the prefill
        fold's ATTs that still read it (``settle``); with NIC installs, then wait until the engine
        has retired every instruction that reads it (an ATT retires after its window's load, a
        KVS after its records went out). The installer writes a freed slot as soon as another unit
        arrives, while the engine may still be behind: the in-order engine no longer orders the
        writes (without installs they are SPW/KVW in the same queue)."""
        self.settle(layer, unit)
        if not self.install:
            return
        need = self.units.get((layer, unit), {}).get("last_use", 0)
        if need:
            self.out(WaitRetired(need))

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
        for v, a, e in ((False, u["spk"], u["emk"]), (True, u["spv"], u["emv"])):
            out.append(instr(EngineOpcode.KVW, flags=KvwFlags(v=v), a=a, n0=u["n"], n1=self.kv_heads,
                             so=self.kv_width, len=self.head_dim, ea=e, eo=self.kv_heads, ei=1, kvb=u["row"],
                             kvs=u["stride"]))
        return out

    def op_send_kv(self, op):
        u = self.unit_rows(op.layer, op.unit)
        meta = op.meta
        if self.install:
            if self.kvs_shapes:
                counts = self.kvs_counts(u, op)[1]
                self.stream.append(KvsRun({"op": EngineOpcode.KVS, "ntoks": counts}, self.idx))
                self.cmd_count += len(counts)
            else:
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

    def kvs_counts(self, u, op) -> tuple:
        """(owner, records per install packet, slot, first row) of sending unit ``u`` with KVS
        (:meth:`kvs_unit`); CompileError when its receivers install it as different kinds."""
        kinds = self.recv_install.get(op.msg, set())
        if len(kinds) != 1:
            raise CompileError(f"node {self.node}: KV message {op.msg} of ({op.layer},{op.unit}) is installed as "
                               f"{sorted(kinds) or 'nothing'} by its receivers; one install packet carries "
                               f"one kind")
        rows = self.kv_heads * u["stride"]
        slot, row0 = self.ddr.slot_row(u["row"], rows)
        return kinds == {"owner"}, self.install_packets(u["stride"]), slot, row0

    def kvs_unit(self, u, op) -> list:
        """The KVS instructions sending unit ``u`` from its DDR slot as install packets
        (mcf_fpga/spec/kvinstall.py): its K records then its V records, at most ``max_payload``
        bytes per packet; ``first`` on the first, ``last`` on the final one, ``owner`` when the
        receiver installs it as its own block (PD). Meta op KV_REPLICA (what the node steers to
        its installer), length replaced by the engine."""
        owner, counts, slot, row0 = self.kvs_counts(u, op)
        meta = pack_int(dataclasses.replace(op.meta, op=MetaOp.KV_REPLICA))
        half = counts[:len(counts) // 2]
        starts = [row0 + s for s in itertools.accumulate(half, initial=0)][:len(half)]
        runs = list(zip(starts + [self.ddr.R + r for r in starts], counts))
        # one instruction built (instr), the others copied from it: the same fields, packed once
        base = instr(EngineOpcode.KVS, flags=KvsFlags(owner=owner), b=slot, meta=meta)
        flags = {(first, last): KvsFlags(last=last, first=first, owner=owner).pack()
                 for first in (False, True) for last in (False, True)}
        end = len(runs) - 1
        return [dict(base, flags=flags[(i == 0, i == end)], kvb=rec, ntok=n) for i, (rec, n) in enumerate(runs)]

    def install_packets(self, stride: int) -> tuple:
        """Records per install packet of a unit whose head stride is ``stride`` rows (``Hk x
        stride`` rows in its slot): its K records then its V records, each run cut so that a packet
        holds at most ``max_payload`` bytes with its install header."""
        rb = self.ddr.region.row_bytes
        per = (min(self.max_payload, (1 << 16) - 1) - HEADER_BYTES) // rb
        if per < 1:
            raise CompileError(f"node {self.node}: a KV record of {rb} B does not fit a packet of max_payload="
                               f"{self.max_payload} B with its {HEADER_BYTES}-byte install header")
        full, rest = divmod(self.kv_heads * stride, per)
        return ((per,) * full + ((rest,) if rest else ())) * 2

    def emit_packed(self, a, n, em, bits, meta):
        """EMIT n values packed ``bits`` wide, split into packets of at most max_payload bytes."""
        per_pkt = (self.max_payload * 8 // bits) // (32 // bits) * (32 // bits)
        m = pack_int(meta)
        return [instr(EngineOpcode.EMIT, flags=EmitFlags(em=em, packed=True), bits=bits % 16, a=a + j,
                      n0=min(per_pkt, n - j), meta=m)
                for j in range(0, n, per_pkt)]

    def parts_of(self, n, bits):
        per_pkt = (self.max_payload * 8 // bits) // (32 // bits) * (32 // bits)
        return [min(per_pkt, n - j) * bits // 8 for j in range(0, n, per_pkt)]

    def op_recv_kv(self, op):
        key = (op.layer, op.unit)
        if self.install:
            # the NIC installs the unit into a pool slot of its own (the installer's BEGIN_INSTALL
            # on the first packet, COMMIT_INSTALL / COMMIT_OWNER after the last one's B response)
            if key in self.units:
                raise CompileError(f"node {self.node}: ({op.layer},{op.unit}) already here, cannot receive it again")
            kid = kv_id_from(op.layer, op.unit, DEFAULT_PARAMS.layer_bits)
            got = self.pool_cmd(Opcode.BEGIN_INSTALL, kid)
            if got.status.name != "OK":
                raise CompileError(f"node {self.node} op {self.idx}: install of ({op.layer},{op.unit}): the KV pool "
                                   f"would answer {got.status.name} (slots in use {self.pool.used_slots} of "
                                   f"{self.pool.budget})")
            self.pool_cmd(Opcode.COMMIT_OWNER if op.install == "owner" else Opcode.COMMIT_INSTALL, kid)
            t0, t1 = self.program.units[op.unit]
            self.out(WaitInstalled(op.layer, op.unit, self.install_packets(up_to(t1 - t0, self.block))))
            self.new_unit(op.layer, op.unit, op.install, copy=False)
            return
        t0, t1 = self.program.units[op.unit]
        n = t1 - t0
        kvw, ew = pad_values(n * self.kv_width, self.kv_bits), pad_values(n * self.kv_heads, 8)
        sizes = (self.parts_of(kvw, self.kv_bits) + self.parts_of(ew, 8)) * 2
        self.out(Recv(("kv", op.peer, op.layer, op.unit), tuple(sizes), f"kv ({op.layer},{op.unit}) from {op.peer}"))
        if op.install == "stage":
            if key in self.units:
                raise CompileError(f"node {self.node}: ({op.layer},{op.unit}) already here, cannot stage it")
            u = self.new_unit(op.layer, op.unit, "stage", pool=False)
        else:
            opc = Opcode.INSTALL_REPLICA if op.install == "replica" else Opcode.ALLOC_OWNER
            self.kvcmd(opc, op.layer, op.unit, "install_" + op.install)
            u = self.new_unit(op.layer, op.unit, op.install)
        P = []
        for a, cnt, em, bits in ((u["spk"], kvw, False, self.kv_bits), (u["emk"], ew, True, 8),
                                 (u["spv"], kvw, False, self.kv_bits), (u["emv"], ew, True, 8)):
            P.append(instr(EngineOpcode.SPW, flags=SpwFlags(em=em, packed=True), bits=bits % 16, dst=a, n0=cnt))
        self.emit(P)
        self.out(FeedRecv())
        self.emit(self.kvw(u))
        self.free_copy(op.layer, op.unit)

    def op_attend(self, req, layer, rows, units):
        """The blocks of ``units`` the rows see join the row set's fold (``host.prefill_fold``):
        a block's ATT is emitted once it lies in the fold's window of slots (at once, unless
        blocks before it are still missing), so the partials go through a few slots and are
        folded in ascending block order, however the blocks arrive."""
        rs = self.rowset(req, rows)
        if rs["fold"] is None:
            nb = (rows[1] - 1) // self.block + 1
            slot = self.kv_heads * rs["T"] * self.gqa * self.partial_words
            slots = nb if self.fold_arena is None else fold_slots(slot, self.fold_arena, nb)
            rs["fold"] = PrefillFold(nb, slots, slot, self.sp, acc_att=self.att_acc)
        for unit in units:
            u = self.units.get((layer, unit))
            if u is None:
                raise CompileError(f"node {self.node}: attend reads ({layer},{unit}) which is neither in the pool "
                                   f"nor staged")
            if u["kind"] == "replica" and not self.held.get((layer, unit)):
                raise CompileError(f"node {self.node}: attend reads replica ({layer},{unit}) without holding it")
            for b in self.program.golden_blocks(unit):
                if max(b * self.block, u["t0"]) > rows[1] - 1:
                    continue                        # entirely in the future: skipped, as golden
                try:
                    rs["fold"].add(b, (layer, unit))
                except ValueError as e:
                    raise CompileError(f"node {self.node}: rows {rows} layer {layer}: {e}") from None
        self.emit_fold(rs, rows, rs["fold"].advance())

    def fold_instrs(self, rs, rows, steps):
        """Engine instructions of ``host.prefill_fold`` steps, one per KV head group: an ATT of one
        golden block into a partial slot (acc: merged into the running fold there), or a FOLD of
        consecutive slots (final: into the attention output)."""
        T, W, rep, Hk, d, Q = rs["T"], self.partial_words, self.gqa, self.kv_heads, self.head_dim, self.q_width
        P, read = [], set()
        for st in steps:
            if isinstance(st, Att):
                u = self.units[st.key]
                k0, k1 = max(st.block * self.block, u["t0"]), min((st.block + 1) * self.block, u["t1"])
                for g in range(Hk):          # acc (sub bit1): onto the running fold at dst, in place
                    dst = st.dst + g * T * rep * W
                    P.append(instr(EngineOpcode.ATT, sub=2 if st.acc else 0, flags=AttFlags(causal=True),
                                   a=rs["q"] + g * rep * d, so=Q, len=d, n0=T, n1=rep, ea=rs["eq"] + g * rep,
                                   eo=self.heads, ei=1, pos0=rows[0],
                                   kvb=u["row"] + g * u["stride"] + (k0 - u["t0"]), nblk=1, bs=self.block,
                                   ntok=k1 - k0, kpos=k0, b=dst if st.acc else 0, dst=dst))
                read.add(st.key)
            else:
                final = st.dst is None
                for g in range(Hk):
                    P.append(instr(EngineOpcode.FOLD, flags=FoldFlags(final=final), a=st.a + g * T * rep * W,
                                   b=Hk * T * rep * W, nblk=st.nblk, n0=T, n1=rep, so=Q, len=d,
                                   dst=self.scratch.attn.base + g * rep * d if final else st.dst + g * T * rep * W))
        return P, read

    def emit_fold(self, rs, rows, steps, then=()):
        """Emit the fold steps' instructions (and ``then``); the units their ATTs read are in use
        until these retire."""
        P, read = self.fold_instrs(rs, rows, steps)
        self.emit(P + list(then))
        for key in read:
            self.used_until(*key)

    def settle(self, layer, unit):
        """Before (layer, unit) may leave the node: every row set's ATTs that read it are queued
        (those whose turn in the fold has not come are parked, ``PrefillFold.settle``)."""
        for (_req, rows), rs in self.rowsets.items():
            if rs["fold"] is not None:
                self.emit_fold(rs, rows, rs["fold"].settle({(layer, unit)}))

    def op_finish(self, req, layer, rows):
        rs = self.rowsets[(req, rows)]
        if rs["fold"] is None:
            raise CompileError(f"node {self.node}: rows {rows} layer {layer} finish without attend")
        try:
            steps = rs["fold"].finish()
        except ValueError as e:
            raise CompileError(f"node {self.node}: rows {rows} layer {layer}: {e}") from None
        h0, h2 = rs["h"][rs["cur"]], rs["h"][1 - rs["cur"]]
        self.emit_fold(rs, rows, steps, then=self.tail(layer, h0, h2, rs["T"]))
        rs["cur"] = 1 - rs["cur"]
        rs["fold"] = None

    def tail(self, layer, h0, h2, T):
        """After attention (y in S['A']): o-projection, residual, FFN, residual -> h2."""
        S, E, D, Q, I = self.scratch, self.exps, self.hidden, self.q_width, self.intermediate
        return [self.vec(VecOp.QUANT, S.attn.base, S.attn_q.base, T, Q, ed=E.attn.base),
                self.gemm(layer, "o", S.attn_q.base, E.attn.base, T, Q, D, S.o_proj.base),
                self.vec(VecOp.ADD, h0, S.h1.base, T, D, b=S.o_proj.base),
                self.vec(VecOp.RMSNORM, S.h1.base, S.x2.base, T, D, ed=E.x2.base),
                self.gemm(layer, "gate", S.x2.base, E.x2.base, T, D, I, S.gate.base),
                self.gemm(layer, "up", S.x2.base, E.x2.base, T, D, I, S.up.base, reuse=True),
                # SWIGLU in place over the gate rows (element-wise: each word is read before it is
                # written), its quantisation into the up rows: the MLP needs two T x I regions
                self.vec(VecOp.SWIGLU, S.gate.base, S.gate.base, T, I, b=S.up.base),
                self.vec(VecOp.QUANT, S.gate.base, S.up.base, T, I, ed=E.swiglu.base),
                self.gemm(layer, "down", S.up.base, E.swiglu.base, T, I, D, S.down.base),
                self.vec(VecOp.ADD, S.h1.base, h2, T, D, b=S.down.base)]

    def op_logits(self, req, rows):
        rs = self.rowsets.pop((req, rows))
        S, E = self.scratch, self.exps
        hr = self.program.head_rows(req, rows)       # Program.logits: every row, or the last one
        T = hr[1] - hr[0]
        if T:
            h = rs["h"][rs["cur"]] + (hr[0] - rows[0]) * self.hidden
            self.emit([self.vec(VecOp.RMSNORM, h, S.x_final.base, T, self.hidden, ed=E.x.base),
                       self.gemm(None, "head", S.x_final.base, E.x.base, T, self.hidden, self.vocab, S.logits.base),
                       instr(EngineOpcode.SPR, a=S.logits.base, n0=T * self.vocab)])
        for a in rs["h"]:
            self.sp.free(a)
        if rs["q"] is not None:
            self.sp.free(rs["q"])
            self.em.free(rs["eq"])
        if T:
            self.out(Logits(req, tuple(hr)))

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
            H, Hk, W, rep = self.heads, self.kv_heads, self.partial_words, self.gqa
            nblocks = min(DECODE_FOLD_SLOTS, max(-(-(n + k) // self.block) for n, k in self.program.reqs))
            kvw, ew = pad_values(self.kv_width, self.kv_bits), pad_values(Hk, 8)
            sp, em = self.sp.alloc, self.em.alloc
            dd = self.dds[req] = {
                "h": [sp(self.hidden, "decode h"), sp(self.hidden, "decode h")], "cur": 0,
                "q": sp(self.q_width, "decode q"), "eq": em(pad_values(H, 8), "decode q exps"),
                "kt": sp(kvw, "token K"), "vt": sp(kvw, "token V"), "ekt": em(ew, "token K exps"),
                "evt": em(ew, "token V exps"), "parts": sp(nblocks * Hk * rep * W, "decode partials"),
                "ploc": sp(H * W, "local partial"), "M": sp(H, "global max"), "pm": sp(H * W, "merged partial"),
                "blocks": self.dblocks, "pos": None}
            if self.split is not None:      # the gathered vectors of a W group
                dd["h1"], dd["s"] = sp(self.hidden, "decode h1"), sp(self.intermediate, "decode FFN vector")
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
            for b in self.program.golden_blocks(unit):
                k0, k1 = max(b * self.block, u["t0"]), min((b + 1) * self.block, u["t1"])
                out.setdefault((self.program.req_of(unit), layer), {})[b] = [
                    u["row"] + (b * self.block - u["t0"]), u["stride"], k1 - k0, None]
        return out

    def held_kv(self) -> list:
        """Every KV row this node holds for decode at the end of the stream: ``(req, layer, block,
        row0, stride, count)`` (the decode blocks once decode began, else the owner units)."""
        blocks = self.dblocks if self.dblocks is not None else self.owner_blocks()
        return [(req, layer, b, v[0], v[1], v[2]) for (req, layer), bl in sorted(blocks.items())
                for b, v in sorted(bl.items()) if v[2] > 0]

    def op_dembed(self, req):
        dd = self.dinit()
        self.emit([instr(EngineOpcode.SPW, dst=dd["h"][dd["cur"]], n0=self.hidden)])
        self.out(EmbedToken(req))

    def op_dproject(self, layer, pos):
        dd, S, E = self.dinit(), self.scratch, self.exps
        D, Q, KV, H, Hk, d = self.hidden, self.q_width, self.kv_width, self.heads, self.kv_heads, self.head_dim
        self.emit([instr(EngineOpcode.SPW, dst=S.rope.base, n0=d // 2)])
        self.out(Rope(pos, pos + 1))
        if self.query_first:
            # Q first: norm, W_Q, RoPE, quantise; the q send (the next op) is queued right after
            # it and the K/V projection behind the send (the weight stream follows the same order)
            self.emit([self.vec(VecOp.RMSNORM, dd["h"][dd["cur"]], S.x.base, 1, D, ed=E.x.base),
                       self.gemm(layer, "q", S.x.base, E.x.base, 1, D, Q, S.q.base),
                       self.vec(VecOp.ROPE, S.q.base, S.q_rope.base, 1, d, b=S.rope.base, n1=H),
                       self.vec(VecOp.QUANT, S.q_rope.base, dd["q"], H, d, ed=dd["eq"])])
            self.deferred = (layer, pos, dd)
            return
        self.emit([self.vec(VecOp.RMSNORM, dd["h"][dd["cur"]], S.x.base, 1, D, ed=E.x.base),
                   self.gemm(layer, "q", S.x.base, E.x.base, 1, D, Q, S.q.base),
                   self.gemm(layer, "k", S.x.base, E.x.base, 1, D, KV, S.k.base, reuse=True),
                   self.gemm(layer, "v", S.x.base, E.x.base, 1, D, KV, S.v.base, reuse=True),
                   self.vec(VecOp.ROPE, S.q.base, S.q_rope.base, 1, d, b=S.rope.base, n1=H),
                   self.vec(VecOp.ROPE, S.k.base, S.k_rope.base, 1, d, b=S.rope.base, n1=Hk),
                   self.vec(VecOp.QUANT, S.q_rope.base, dd["q"], H, d, ed=dd["eq"]),
                   self.vec(VecOp.QUANT, S.k_rope.base, dd["kt"], Hk, d, ed=dd["ekt"], bits=self.kv_bits),
                   self.vec(VecOp.QUANT, S.v.base, dd["vt"], Hk, d, ed=dd["evt"], bits=self.kv_bits)])

    def flush_kv_projection(self):
        """Query-first: queue the K/V projection held back by ``op_dproject`` (after the q send).
        W_K and W_V reuse the activations W_Q loaded into the GEMM array (the VEC ops and the
        EMIT between do not touch them; reloading would read X's exponents, which the Q RoPE
        has overwritten: a VEC writes exponents at ``ed``, 0 = E['EX'])."""
        if self.deferred is None:
            return
        (layer, pos, dd), self.deferred = self.deferred, None
        S, E = self.scratch, self.exps
        D, KV, Hk, d = self.hidden, self.kv_width, self.kv_heads, self.head_dim
        self.emit([self.gemm(layer, "k", S.x.base, E.x.base, 1, D, KV, S.k.base, reuse=True),
                   self.gemm(layer, "v", S.x.base, E.x.base, 1, D, KV, S.v.base, reuse=True),
                   self.vec(VecOp.ROPE, S.k.base, S.k_rope.base, 1, d, b=S.rope.base, n1=Hk),
                   self.vec(VecOp.QUANT, S.k_rope.base, dd["kt"], Hk, d, ed=dd["ekt"], bits=self.kv_bits),
                   self.vec(VecOp.QUANT, S.v.base, dd["vt"], Hk, d, ed=dd["evt"], bits=self.kv_bits)])

    def _dsets(self, what):
        dd = self.dd
        if what == "q":
            return ((dd["q"], self.q_width, False, 8), (dd["eq"], pad_values(self.heads, 8), True, 8))
        kvw, ew = pad_values(self.kv_width, self.kv_bits), pad_values(self.kv_heads, 8)
        return ((dd["kt"], kvw, False, self.kv_bits), (dd["ekt"], ew, True, 8),
                (dd["vt"], kvw, False, self.kv_bits), (dd["evt"], ew, True, 8))

    def op_dsend(self, op):
        self.dinit()
        if op.what == "token":
            a = self.sp.alloc(1, "token")
            self.emit([instr(EngineOpcode.SPW, dst=a, n0=1)])
            self.out(TokenWord(op.req))
            self.emit([instr(EngineOpcode.EMIT, a=a, n0=1, meta=pack_int(op.meta))])
            self.sp.free(a)                 # the engine runs in order: the SPW/EMIT pair is done first
            return
        P = []
        for a, n, em, bits in self._dsets(op.what):
            P += self.emit_packed(a, n, em, bits, op.meta)
        self.emit(P)

    def op_drecv(self, op):
        self.dinit()
        if op.what == "token":
            # the token as the pair (token, token) through the scratchpad: its SPR frame is the
            # host's record of it and, on a node with a token picker, a pairs-mode pick's input
            a = self.sp.alloc(2, "token pair")
            self.out(Recv(("data", op.peer, 0, 0), (4,), f"token from {op.peer}"))
            self.emit([instr(EngineOpcode.SPW, dst=a, n0=2)])
            self.out(FeedRecv(2))
            self.emit([instr(EngineOpcode.SPR, a=a, n0=2)])
            self.out(RecvToken(op.req))
            self.sp.free(a)                 # the engine runs in order: the SPW/SPR pair is done first
            return
        sets = self._dsets(op.what)
        sizes = [sz for _a, n, _em, bits in sets for sz in self.parts_of(n, bits)]
        kind = "q" if op.what == "q" else "data"
        self.out(Recv((kind, op.peer, op.layer, 0), tuple(sizes), f"{op.what} from {op.peer}"))
        self.emit([instr(EngineOpcode.SPW, flags=SpwFlags(em=em, packed=True), bits=bits % 16, dst=a, n0=n)
                   for a, n, em, bits in sets])
        self.out(FeedRecv())

    def op_append(self, req, layer, pos):
        dd = self.dinit()
        b = pos // self.block
        blk = dd["blocks"].setdefault((req, layer), {}).get(b)
        if blk is None:
            if pos % self.block:
                raise CompileError(f"node {self.node}: token {pos} appended to a block it does not hold")
            row = self.kvrows.alloc(self.kv_heads * self.block, "decode block")
            blk = dd["blocks"][(req, layer)][b] = [row, self.block, 0, row]
        if b * self.block + blk[2] != pos:
            raise CompileError(f"node {self.node}: append of position {pos} to block {b} holding {blk[2]} tokens")
        P = []
        for v, a, e in ((False, dd["kt"], dd["ekt"]), (True, dd["vt"], dd["evt"])):
            P.append(instr(EngineOpcode.KVW, flags=KvwFlags(v=v), a=a, n0=1, n1=self.kv_heads, so=self.kv_width,
                           len=self.head_dim, ea=e, eo=self.kv_heads, ei=1, kvb=blk[0] + blk[2], kvs=blk[1]))
        self.emit(P)
        blk[2] += 1

    def _dlocal_plan(self, req, layer, pos, ext: bool, out):
        """The instructions of ``_dlocal`` (None: the node holds no block of the request)."""
        dd, rep, Hk, W, d = self.dd, self.gqa, self.kv_heads, self.partial_words, self.head_dim
        blocks = sorted((b, v) for b, v in dd["blocks"].get((req, layer), {}).items() if v[2] > 0)
        if not blocks:
            return None
        P = []
        batches = fold_batches(len(blocks))
        for j0, k, carried in batches:
            for i, (b, (row, stride, cnt, _own)) in enumerate(blocks[j0:j0 + k]):
                slot = i + carried
                for g in range(Hk):
                    P.append(instr(EngineOpcode.ATT, flags=AttFlags(causal=True, flat=True, ext_m=ext),
                                   a=dd["q"] + g * rep * d, so=self.q_width, len=d, n0=1, n1=rep, ea=dd["eq"] + g * rep, eo=self.heads, ei=1,
                                   pos0=pos, kvb=row + g * stride, nblk=1, bs=self.block, ntok=cnt,
                                   kpos=b * self.block, b=dd["M"] + g * rep,
                                   dst=dd["parts"] + (slot * Hk + g) * rep * W))
            last = j0 + k == len(blocks)
            for g in range(Hk):
                # FOLD reads row r's partials before it writes row r, so slot 0 may be its own target
                P.append(instr(EngineOpcode.FOLD, a=dd["parts"] + g * rep * W, b=Hk * rep * W, nblk=k + carried, n0=1,
                               n1=rep, so=self.q_width, len=d,
                               dst=(out if last else dd["parts"]) + g * rep * W))
        return P

    def _dlocal(self, req, layer, pos, ext: bool, out, then=()):
        """ATT (flat; with the global max when ``ext``) over every local block of the request, then
        FOLD -> out (H partial rows). A node without blocks contributes the empty partial (M when ext).
        ``then``: ATT jobs of the next op whose block loads are queued after the last ATT."""
        P = self._dlocal_plan(req, layer, pos, ext, out)
        if P is None:
            self.emit([instr(EngineOpcode.SPW, dst=out, n0=self.heads * self.partial_words)], then)
            self.out(EmptyPartial(req, ext))
            return
        self.emit(P, then)

    def next_local_atts(self) -> list:
        """K/V in DDR: the first ATT jobs (at most one per staging window) of the next op of this
        node that attends its local decode blocks, an ``AllReduce`` of the current op's request and
        layer, when every op before it runs no ATT and writes no K/V but the token's ``Append``
        (whose block is left out, with every job after it): their blocks can load now. Empty
        otherwise (on-chip K/V too)."""
        if self.ddr is None or not self.kv_preload:
            return []
        O = program_ops
        ops = self.program.ops[self.node]
        cur = ops[self.idx]
        appended = set()
        for op in ops[self.idx + 1:]:
            same = op.req == cur.req and getattr(op, "layer", None) == cur.layer
            if isinstance(op, O.AllReduce) and same:
                if op.name == "sum" and self.node == op.root and self.program.stats.get("w_only"):
                    return []
                P = self._dlocal_plan(op.req, op.layer, self.dd["pos"], op.name == "sum", 0) or []
                lead = itertools.takewhile(lambda a: a["kpos"] // self.block not in appended,
                                           (i for i in P if i["op"] == EngineOpcode.ATT))
                return list(lead)[:self.ddr.n_win]
            if isinstance(op, O.Append) and same:
                appended.add(op.rows[0] // self.block)
            elif not (isinstance(op, (O.Send, O.Recv)) and op.what not in ("kv", "credit")
                      or isinstance(op, O.DecodeAttend) and same):
                return []
        return []

    def op_allreduce(self, op):
        """Two-phase flat merge through the NIC (docs/numerics.md, decode): ``max``: every holder's
        local maxima (the low m words of its H partial rows, one gathering EMIT) are
        max-all-reduced in 32-bit lanes (``op=REDUCTION``); ``sum``: every holder's partial rows
        rescaled to that max (ATT ext_m), all H partial rows' words, go to the root as ``n_sum`` SUM
        groups of at most max_payload bytes (64-bit lanes, the last packet shorter); the root reassembles the rows: the integer sum of
        (l, o) over the holders is golden ``flat_merge``, and every m word summed to (holders)*M,
        which it replaces by M (what a softmax merge of equal maxima gives)."""
        dd, H, W = self.dinit(), self.heads, self.partial_words
        layer = op.layer
        root = op.root
        base = op.req * (1 + self.n_sum)   # reduction ids of the request: concurrent requests never mix
        w_root = self.node == root and self.program.stats.get("w_only")
        if op.name == "max":
            # the sum phase's blocks load while the maxima are reduced (its first jobs: one per window)
            self._dlocal(op.req, layer, dd["pos"], False, dd["ploc"], then=self.next_local_atts())
            meta = MetaFields(op=MetaOp.REDUCTION, stage=Stage.DECODE, src=self.node, dst=root, kv_id=(layer, base),
                              route_id=self.rid_max[(op.req, self.node)], collective=Collective.ALL_REDUCE,
                              reduce_op=ReduceOp.MAX, length=0)
            # the m words' low halves (an int32 lane per head): the NIC's REDUCTION max in 32-bit lanes
            self.emit([instr(EngineOpcode.EMIT, a=dd["ploc"], n0=1, n1=H, so=W, meta=pack_int(meta))])
            self.out(RecvMax(op.req, ("max", self.node, layer, base)))
            self.emit([instr(EngineOpcode.SPW, dst=dd["M"], n0=H)])
            self.out(FeedRecv())
            return
        if not w_root:              # a W node without KV only receives the merged partial
            self._dlocal(op.req, layer, dd["pos"], True, dd["ploc"])
            P = []
            for j, w0 in enumerate(range(0, H * W, self.sum_words)):
                meta = MetaFields(op=MetaOp.PARTIAL_STATE, stage=Stage.DECODE, src=self.node, dst=root,
                                  kv_id=(layer, base + 1 + j), route_id=self.rid_sum[(op.req, self.node)],
                                  collective=Collective.ALL_REDUCE, reduce_op=ReduceOp.SUM, length=0)
                P.append(instr(EngineOpcode.EMIT, a=dd["ploc"] + w0, n0=min(self.sum_words, H * W - w0),
                               meta=pack_int(meta)))
            self.emit(P)
        if self.node == root:
            holders = len(op.dsts) - (1 if w_root and root in op.dsts else 0)
            self.out(RecvSum(op.req, tuple(("sum", self.node, layer, base + 1 + j) for j in range(self.n_sum)),
                             holders, bool(w_root)))
            self.emit([instr(EngineOpcode.SPW, dst=dd["pm"], n0=H * W)])
            self.out(FeedRecv())

    def op_dfinish(self, layer):
        dd, rep, W, d = self.dd, self.gqa, self.partial_words, self.head_dim
        P = [instr(EngineOpcode.FOLD, flags=FoldFlags(final=True), a=dd["pm"] + g * rep * W, b=0, nblk=1, n0=1,
                   n1=rep, so=self.q_width, len=d, dst=self.scratch.attn.base + g * rep * d) for g in range(self.kv_heads)]
        h0, h2 = dd["h"][dd["cur"]], dd["h"][1 - dd["cur"]]
        P += self.tail(layer, h0, h2, 1)
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
            if self.program.req_of(unit) == req:
                if u["kind"] != "owner":
                    raise CompileError(f"node {self.node}: dfree of request {req}: ({layer},{unit}) is {u['kind']}")
                r = self.kvcmd(Opcode.FREE_OWNER, layer, unit, "dfree")
                if r.freed:
                    self.drop_unit(layer, unit)

    def op_dlogits(self, req):
        dd, S, E = self.dd, self.scratch, self.exps
        self.emit([self.vec(VecOp.RMSNORM, dd["h"][dd["cur"]], S.x_final.base, 1, self.hidden, ed=E.x.base),
                   self.gemm(None, "head", S.x_final.base, E.x.base, 1, self.hidden, self.vocab, S.logits.base),
                   instr(EngineOpcode.SPR, a=S.logits.base, n0=self.vocab)])
        self.out(DLogits(req))

    # ------------------------------------------------------------------ tensor-parallel decode (host.tp)
    def tp_dproject(self, op):
        """W node j: RMSNorm of the whole h, W_Q rows of its query heads, W_K/W_V rows of its KV
        heads (if any), RoPE, quantisation into its slice of the token's q and K/V."""
        dd, S, E, sp, j = self.dd, self.scratch, self.exps, self.split, op.part[0]
        layer, pos = op.layer, op.rows[0]
        D, d = self.hidden, self.head_dim
        (h0, h1), (g0, g1) = sp.heads(j), sp.kv_heads(j)
        nh, nk = h1 - h0, g1 - g0
        self.emit([instr(EngineOpcode.SPW, dst=S.rope.base, n0=d // 2)])
        self.out(Rope(pos, pos + 1))
        P = [self.vec(VecOp.RMSNORM, dd["h"][dd["cur"]], S.x.base, 1, D, ed=E.x.base),
             self.gemm(layer, "q", S.x.base, E.x.base, 1, D, nh * d, S.q.base, rows=sp.rows("q", j))]
        if nk:
            P += [self.gemm(layer, "k", S.x.base, E.x.base, 1, D, nk * d, S.k.base, reuse=True, rows=sp.rows("k", j)),
                  self.gemm(layer, "v", S.x.base, E.x.base, 1, D, nk * d, S.v.base, reuse=True, rows=sp.rows("v", j))]
        P += [self.vec(VecOp.ROPE, S.q.base, S.q_rope.base, 1, d, b=S.rope.base, n1=nh)]
        if nk:
            P += [self.vec(VecOp.ROPE, S.k.base, S.k_rope.base, 1, d, b=S.rope.base, n1=nk)]
        P += [self.vec(VecOp.QUANT, S.q_rope.base, dd["q"] + h0 * d, nh, d, ed=dd["eq"] + h0)]
        if nk:
            P += [self.vec(VecOp.QUANT, S.k_rope.base, dd["kt"] + g0 * d, nk, d, ed=dd["ekt"] + g0, bits=self.kv_bits),
                  self.vec(VecOp.QUANT, S.v.base, dd["vt"] + g0 * d, nk, d, ed=dd["evt"] + g0, bits=self.kv_bits)]
        self.emit(P)

    def tp_dfinish(self, op):
        """One stage of the W side after the merge (``DecodeFinish.name``): ``attn`` (FOLD final of the merged
        partial rows of its query heads -> its slice of A), ``o`` (quantise the gathered A, W_O rows
        of the hidden slice + residual -> h1 slice),
        ``ffn`` (RMSNorm of the gathered h1, W_gate/W_up rows of the intermediate slice, SwiGLU -> s
        slice), ``down`` (quantise the gathered s, W_down rows + residual -> the next h's slice)."""
        dd, S, E, sp, j = self.dd, self.scratch, self.exps, self.split, op.part[0]
        layer = op.layer
        D, Q, I = self.hidden, self.q_width, self.intermediate
        a, b = sp.hidden(j)
        if op.name == "attn":
            h0, h1 = sp.heads(j)
            P = [instr(EngineOpcode.FOLD, flags=FoldFlags(final=True), a=dd["pm"] + h0 * self.partial_words, b=0,
                       nblk=1, n0=1, n1=h1 - h0, so=Q, len=self.head_dim, dst=S.attn.base + h0 * self.head_dim)]
        elif op.name == "o":
            P = [self.vec(VecOp.QUANT, S.attn.base, S.attn_q.base, 1, Q, ed=E.attn.base),
                 self.gemm(layer, "o", S.attn_q.base, E.attn.base, 1, Q, b - a, S.o_proj.base, rows=(a, b)),
                 self.vec(VecOp.ADD, dd["h"][dd["cur"]] + a, dd["h1"] + a, 1, b - a, b=S.o_proj.base)]
        elif op.name == "ffn":
            c, e = sp.inter(j)
            P = [self.vec(VecOp.RMSNORM, dd["h1"], S.x2.base, 1, D, ed=E.x2.base),
                 self.gemm(layer, "gate", S.x2.base, E.x2.base, 1, D, e - c, S.gate.base, rows=(c, e)),
                 self.gemm(layer, "up", S.x2.base, E.x2.base, 1, D, e - c, S.up.base, reuse=True, rows=(c, e)),
                 self.vec(VecOp.SWIGLU, S.gate.base, dd["s"] + c, 1, e - c, b=S.up.base)]
        elif op.name == "down":
            P = [self.vec(VecOp.QUANT, dd["s"], S.up.base, 1, I, ed=E.swiglu.base),
                 self.gemm(layer, "down", S.up.base, E.swiglu.base, 1, I, b - a, S.down.base, rows=(a, b)),
                 self.vec(VecOp.ADD, dd["h1"] + a, dd["h"][1 - dd["cur"]] + a, 1, b - a, b=S.down.base)]
            dd["cur"] = 1 - dd["cur"]
        else:
            raise CompileError(f"node {self.node}: unknown dfinish stage {op.name!r}")
        self.emit(P)

    def tp_dlogits(self, op):
        """W node j: RMSNorm of the whole h, the head's rows of its vocabulary slice, SPR; the host
        keeps the slice's best (value, token id; lowest id on ties)."""
        dd, S, E, sp, j = self.dd, self.scratch, self.exps, self.split, op.part[0]
        v0, v1 = sp.vocab(j)
        self.emit([self.vec(VecOp.RMSNORM, dd["h"][dd["cur"]], S.x_final.base, 1, self.hidden, ed=E.x.base),
                   self.gemm(None, "head", S.x_final.base, E.x.base, 1, self.hidden, v1 - v0, S.logits.base,
                             rows=(v0, v1)),
                   instr(EngineOpcode.SPR, a=S.logits.base, n0=v1 - v0)])
        self.out(TpLogits(op.req, j, v0, v1))

    def _tp_sets(self, what, j):
        """(address, count, exponent memory?, bits) of every EMIT set of ``what`` from slice j
        (``WeightSplit.wire``; bits 32: plain words)."""
        dd = self.dd
        base = {"q": (dd["q"], False), "eq": (dd["eq"], True), "kt": (dd["kt"], False), "ekt": (dd["ekt"], True),
                "vt": (dd["vt"], False), "evt": (dd["evt"], True), "pm": (dd["pm"], False),
                "a": (self.scratch.attn.base, False), "h1": (dd.get("h1"), False), "s": (dd.get("s"), False),
                "h": (dd["h"][dd["cur"]], False)}
        return [(base[f][0] + off, n, base[f][1], bits) for f, off, n, bits in self.split.wire(what, j)]

    def best_pairs(self) -> int:
        """The scratch of the current request's W group (value, token) pairs, slice j's at 2j
        (allocated by the step's first best, freed by its ``dpick``)."""
        dd = self.dd
        if dd.get("pairs") is None:
            dd["pairs"] = self.sp.alloc(2 * self.split.W, "best pairs")
        return dd["pairs"]

    def tp_pick(self, op):
        """The W group's pick: the pairs' SPR frame (``Pick``)."""
        self.dinit()
        a = self.best_pairs()
        self.emit([instr(EngineOpcode.SPR, a=a, n0=2 * self.split.W)])
        self.out(Pick(op.req, self.split.W))
        self.sp.free(a)                     # the engine runs in order: the SPR is done first
        self.dd["pairs"] = None

    def tp_send(self, op):
        j = op.part[0]
        if op.what == "best":
            a = self.best_pairs() + 2 * j   # its own pair's place among the W group's
            self.emit([instr(EngineOpcode.SPW, dst=a, n0=2)])
            self.out(BestWords(op.req, j))
            self.emit([instr(EngineOpcode.EMIT, a=a, n0=2, meta=pack_int(op.meta))])
            return
        P = []
        for a, n, em, bits in self._tp_sets(op.what, j):
            if bits == 32:
                per = self.max_payload // 4
                P += [instr(EngineOpcode.EMIT, flags=EmitFlags(em=em), a=a + i, n0=min(per, n - i),
                            meta=pack_int(op.meta)) for i in range(0, n, per)]
            else:
                P += self.emit_packed(a, n, em, bits, op.meta)
        self.emit(P)

    def tp_recv(self, op):
        j = op.part[0]
        kind = "q" if op.what == "q" else "data"
        key = (kind, op.peer, op.layer, op.unit)
        if op.what == "best":
            a = self.best_pairs() + 2 * j
            self.out(Recv(key, (8,), f"best of slice {j} from {op.peer}"))
            self.emit([instr(EngineOpcode.SPW, dst=a, n0=2)])
            self.out(FeedRecv())
            return
        sets = self._tp_sets(op.what, j)
        sizes = [sz for _a, n, _em, bits in sets for sz in self.parts_of(n, bits)]
        self.out(Recv(key, tuple(sizes), f"{op.what} slice {j} from {op.peer}"))
        P = []
        for a, n, em, bits in sets:
            if bits == 32:
                P.append(instr(EngineOpcode.SPW, flags=SpwFlags(em=em), dst=a, n0=n))
            else:
                P.append(instr(EngineOpcode.SPW, flags=SpwFlags(em=em, packed=True), bits=bits % 16, dst=a, n0=n))
        self.emit(P)
        self.out(FeedRecv())

    # ------------------------------------------------------------------ the ops
    def compile(self):
        """Compile every op of the node; returns ``self.stream``."""
        for idx, op in enumerate(self.program.ops[self.node]):
            self.idx = idx
            try:
                self.compile_op(op)
            except ValueError as e:           # an arena or parameter limit: name the op
                if isinstance(e, CompileError):
                    raise
                raise CompileError(f"node {self.node} op {idx} ({op.kind}): {e}") from None
            self.out(OpDone(idx, op.kind))
            self.pool_trace.append((self.pool_taken, self.pool_freed))
        return self.stream

    def compile_op(self, op):
        O = program_ops
        if self.deferred is not None and not (isinstance(op, O.Send) and op.what == "q"):
            self.flush_kv_projection()
        self.cur_req = op.req
        if isinstance(op, (*O.DECODE_OPS, O.DecodeFree)) or (isinstance(op, (O.Send, O.Recv))
                                                             and op.what not in ("kv", "credit")):
            self.dinit(op.req)
        if isinstance(op, (O.DecodeProject, O.DecodeAttend)):
            self.out(Version(op.req, op.rows[0], op.layer))
        match op:
            case O.Embed():
                self.op_embed(op.req, op.rows)
            case O.Project():
                self.op_project(op.req, op.layer, op.rows, op.unit)
            case O.Acquire():
                for u in op.units:
                    self.kvcmd(Opcode.ACQUIRE, op.layer, u, op.kind)
                    self.held[(op.layer, u)] = self.held.get((op.layer, u), 0) + 1
            case O.Release():
                self.op_release(op)
            case O.Drain():
                self.wait_unused(op.layer, op.unit)
                if self.kvcmd(Opcode.MARK_DRAINING, op.layer, op.unit, op.kind).freed:
                    self.drop_unit(op.layer, op.unit)
            case O.Attend():
                self.op_attend(op.req, op.layer, op.rows, op.units)
            case O.Finish():
                self.op_finish(op.req, op.layer, op.rows)
            case O.Logits():
                self.op_logits(op.req, op.rows)
            case O.Send():
                self.op_send(op)
            case O.Recv():
                if op.what == "kv":
                    self.op_recv_kv(op)
                elif op.what == "credit":     # host.install_credits: the wait for the receiver's room
                    self.out(Recv(credit_key(op.peer), (CREDIT_BYTES,), f"install credit from {op.peer}", fed=False))
                elif op.part:
                    self.tp_recv(op)
                else:
                    self.op_drecv(op)
            case O.Unstage():
                self.op_unstage(op)
            case O.Free():
                self.wait_unused(op.layer, op.unit)
                if self.kvcmd(Opcode.FREE_OWNER, op.layer, op.unit, op.kind).freed:
                    self.drop_unit(op.layer, op.unit)
            case O.Mark():
                self.out(Mark(op.name))
            case O.Publish():
                self.out(Publish(op.step))
            case O.DecodeFree():
                self.op_dfree(op.req)
            case _:
                self.compile_decode_op(op)

    def op_release(self, op):
        for u in op.units:
            if not self.held.get((op.layer, u)):
                raise CompileError(f"node {self.node} op {self.idx}: release of ({op.layer},{u}) not held")
            self.wait_unused(op.layer, u)
            self.held[(op.layer, u)] -= 1
            if self.kvcmd(Opcode.RELEASE, op.layer, u, op.kind).freed:
                self.drop_unit(op.layer, u)

    def op_send(self, op):
        if op.what == "kv":
            self.op_send_kv(op)
        elif op.what == "credit":
            # host.install_credits: one word, after the frees that make room (the stream is in
            # order); its value is never read (scratchpad word 0)
            self.emit([instr(EngineOpcode.EMIT, a=0, n0=CREDIT_BYTES // 4, meta=pack_int(op.meta))])
        elif op.part:
            self.tp_send(op)
        else:
            self.op_dsend(op)
            if op.what == "q":
                self.flush_kv_projection()

    def op_unstage(self, op):
        u = self.units.get((op.layer, op.unit))
        if u is None or u["kind"] != "stage":
            raise CompileError(f"node {self.node} op {self.idx}: unstage of ({op.layer},{op.unit}) not staged")
        self.wait_unused(op.layer, op.unit)
        if self.install:             # a staged unit is a pool entry the NIC installed
            self.kvcmd(Opcode.INVALIDATE, op.layer, op.unit, op.kind)
        self.drop_unit(op.layer, op.unit)

    def compile_decode_op(self, op):
        O = program_ops
        match op:
            case O.DecodeEmbed():
                self.op_dembed(op.req)
            case O.DecodeProject():
                self.dd["pos"] = op.rows[0]
                # K/V in DDR: the blocks of the layer's first attention jobs load beside the projection
                self.emit([], then=self.next_local_atts())
                if op.part:
                    self.tp_dproject(op)
                else:
                    self.op_dproject(op.layer, op.rows[0])
            case O.Append():
                self.op_append(op.req, op.layer, op.rows[0])
            case O.DecodeAttend():
                self.dd["pos"] = op.rows[0]         # the local work happens in the all-reduce phases
            case O.AllReduce():
                self.op_allreduce(op)
            case O.DecodeFinish():
                if op.part:
                    self.tp_dfinish(op)
                else:
                    self.op_dfinish(op.layer)
            case O.DecodeLogits():
                if op.part:
                    self.tp_dlogits(op)
                else:
                    self.op_dlogits(op.req)
            case O.DecodePick():
                self.tp_pick(op)
            case _:
                raise CompileError(f"node {self.node}: op {op.kind!r} ({type(op).__name__}) is not supported by the "
                                   f"compiler")


def program_facts(program) -> tuple:
    """(the most rows any op of ``program`` takes at once (1 if none), {KV message: the install
    kinds its receivers give it}) -- the sender's KVS header says owner or not."""
    rows, kinds = 1, collections.defaultdict(set)
    for ops in program.ops:
        for o in ops:
            r = getattr(o, "rows", None)
            if r:
                rows = max(rows, r[1] - r[0])
            if isinstance(o, program_ops.Recv) and o.what == "kv":
                kinds[o.msg].add(o.install)
    return rows, kinds


def compile_program(program, ncfg, *, query_first: bool = False, rid_max=None, rid_sum=None,
                    kvs_shapes: bool = False, kv_budget: int | None = None) -> list:
    """Every node's :class:`NodeCompiler` after compiling (``.stream`` the records), in node
    order. ``rid_max`` / ``rid_sum``: decode's reduction route ids per (req, node) (the RTL
    executor's ``_decode_routes``; needed only by programs with decode). ``kvs_shapes``: each KV
    unit's KVS sends as one :class:`KvsRun` of their record counts (the performance model's
    stream; no executor runs it). ``kv_budget``: every node's pool budget (None: its slots; the
    program's installs ordered to fit it: host.install_credits)."""
    out = []
    facts = program_facts(program)
    for n in range(program.nodes):
        c = NodeCompiler(n, program, ncfg, query_first=query_first, kvs_shapes=kvs_shapes, facts=facts,
                         kv_budget=kv_budget)
        c.rid_max = {} if rid_max is None else rid_max
        c.rid_sum = {} if rid_sum is None else rid_sum
        c.compile()
        out.append(c)
    return out


# ---------------------------------------------------------------------- the fetcher's stream

#: the command fetcher's counters (``hdl.cmdfetch`` ``counters`` input) the streams wait on
COUNTER_RETIRED = 0     #: the engine's retired instructions (its RETIRED register)
COUNTER_HOST = 1        #: the host's doorbell: publishes it completed (route updates at a token boundary)
COUNTER_PICKS = 2       #: greedy picks the token picker completed (``hdl.token_picker``)
COUNTER_RX0 = 3         #: + e: packets the RX placer landed for its entry e (``hdl.rx_placer``)

#: receiving records whose packets the node's RX placer can land in DDR (``placed_records``)
PLACEABLE = (Recv, RecvMax, RecvSum)


def rx_entry_key(key) -> tuple:
    """The RX placer entry a receive key lands through: its kind, src and block with any layer
    (``key_any_layer``: one entry per message stream for all the model's layers, whose packets
    come from one source in order, so the entries do not grow with the layers)."""
    return (key[0], key[1], None, key[3])


def _rx_keys(r) -> tuple:
    return tuple(rx_entry_key(k) for k in (r.keys if isinstance(r, RecvSum) else (r.key,)))


def placed_records(stream) -> set:
    """Indices of the records of ``stream`` that a node with an RX placer serves itself
    (RX placement): a ``Recv`` with known sizes in whole 32-bit words (not a KV unit: the
    NIC's KV installer puts those in the pool, ``NodeConfig.kv_install``), a ``RecvMax`` or a
    ``RecvSum`` -- unless one of its keys is also the key of a ``Recv`` the host must serve (a KV
    unit's, or sizes it cannot place) -- and the ``FeedRecv`` that feeds each one's words, and every ``EmptyPartial`` (a constant of
    the image: its m words only ever reach an m the leader's final FOLD ignores, docs/numerics.md).
    """
    def whole(r):
        return not isinstance(r, Recv) or ((r.key[0] != "kv" or not r.fed) and
                                           all(sz is not None and sz > 0 and sz % 4 == 0 for sz in r.sizes))
    host_keys = {k for r in stream if isinstance(r, Recv) and not whole(r)
                 for k in _rx_keys(r)}          # (entry keys: any layer)
    out, last = set(), None
    for i, r in enumerate(stream):
        if isinstance(r, PLACEABLE):
            ok = whole(r) and not host_keys.intersection(_rx_keys(r))
            last = i if ok else None
            if ok:
                out.add(i)
        elif isinstance(r, FeedRecv):
            if last is not None:
                out.add(i)
            last = None
        elif isinstance(r, EmptyPartial):
            out.add(i)
    return out


#: directory states an instruction may address a unit in (OWNER, REPLICA_VALID, REPLICA_DRAINING)
READABLE = (1 << 1) | (1 << 2) | (1 << 3)
#: states a committed install leaves (OWNER, REPLICA_VALID)
INSTALLED = (1 << 1) | (1 << 2)


def to_cmdstream(stream, image=None) -> list:
    """The node's part of a compiled stream in the command fetcher's format (``hdl.cmdstream``
    records, ``END`` last): every engine instruction (``ENGINE``; with a symbolic KV address
    ``ENGINE_KV``: the fetcher looks the unit up and patches ``kvb`` += slot x slot_rows or
    ``b`` := slot), every directory command (``KVCMD``, expecting OK), ``WaitRetired`` as a
    ``WAIT`` on :data:`COUNTER_RETIRED`, ``WaitInstalled`` as ``WAIT_KV`` (committed: OWNER or
    REPLICA_VALID), a publish as a ``WAIT`` on the host's doorbell (:data:`COUNTER_HOST`), and
    the program's marks as ``MARK`` (value: 1 for the first, 2 for the next ...; with an interrupt).

    Without ``image`` the data records (weights, rows, received words) are not in it: the node's
    input streams carry them from the host, and the engine waits for them in order. With
    ``image`` (``host.node_image.plan_image`` of the same stream) the node loads them itself:
    weight tiles, prompt embedding rows and RoPE rows as ``LOAD`` records from the preloaded
    image (a matrix's tiles right after the GEMM that takes them), a run-time feed (received
    words, the next token's embedding, ...) as a ``WAIT`` for
    the host's doorbell to reach the entry's event number, then a ``LOAD`` from its mailbox
    entry. Publishes and mailbox entries share the doorbell's count, in stream order. On a node
    with an RX placer (``image.rx``) a placed record's words are loaded from where the placer
    landed its packets, after a ``WAIT`` for each packet's landed count (:data:`COUNTER_RX0` +
    entry), and an empty partial from the image's constant."""
    from mcf_fpga.hdl.cmdstream import (Engine, EngineKV, End, KvCmd as FKvCmd, Load as FLoad, LoadX,
                               Mark as FMark, Pick as FPick, Put, Wait, WaitKV)
    from mcf_fpga.spec.cmdstream import Patch
    from mcf_fpga.spec.loader import Dest
    out, events, marks = [], 0, 0

    def kid(v):
        return kv_id_from(v.layer, v.unit, DEFAULT_PARAMS.layer_bits)

    def loads(i):
        return [FLoad(int(ld.dest), ld.count, ld.addr) for ld in image.loads[i]]
    wloads = collections.deque()     # weight tiles wait for their GEMM (see below)
    arms = image.picks.arms if image is not None and image.picks is not None else {}
    for i, r in enumerate(stream):
        if isinstance(r, Ins):
            f = r.fields
            if i in arms:                # the picker is armed before the logits' SPR is queued
                out.append(FPick(*arms[i]))
            sym = [(k, v) for k, v in f.items() if isinstance(v, (KvRow, KvSlot))]
            if not sym:
                out.append(Engine(f))
                if f["op"] == EngineOpcode.GEMM and image is not None:
                    if not wloads:
                        raise CompileError(f"record {i}: a GEMM without its weights record")
                    out.extend(wloads.popleft())
                continue
            if len(sym) > 1:
                raise CompileError(f"an instruction addresses two KV units ({sym}); the fetcher patches one")
            (k, v), = sym
            if isinstance(v, KvSlot) and k == "b":
                out.append(EngineKV(dict(f, b=0), kid(v), Patch.SLOT_B, READABLE))
            elif isinstance(v, KvRow) and k == "kvb":
                out.append(EngineKV(dict(f, kvb=v.off), kid(v), Patch.KVB_ROWS, READABLE))
            else:
                raise CompileError(f"a symbolic KV address in field {k!r}: the fetcher patches only b "
                                   f"(a slot) and kvb (a row)")
        elif isinstance(r, KvCmd):
            from mcf_fpga.spec.kvpool import Status
            out.append(FKvCmd(r.opcode, kv_id_from(r.layer, r.unit, DEFAULT_PARAMS.layer_bits), Status.OK))
        elif isinstance(r, WaitRetired):
            out.append(Wait(COUNTER_RETIRED, r.count))
        elif isinstance(r, WaitInstalled):
            out.append(WaitKV(kv_id_from(r.layer, r.unit, DEFAULT_PARAMS.layer_bits), INSTALLED))
        elif isinstance(r, Publish):
            events += 1
            out.append(Wait(COUNTER_HOST, events))
        elif isinstance(r, Mark):
            marks += 1
            out.append(FMark(marks, True))
        if image is not None and isinstance(r, Weights):
            # a GEMM takes the tiles of the Weights record output with it, in order; the loads go
            # right after the GEMM instruction, not before the projection's instructions: the
            # loader serves loads in order and holds few, so tiles loaded ahead of the GEMMs that
            # precede their own would block the stream (the engine takes weight beats only in
            # a GEMM)
            wloads.append(loads(i))
        elif image is not None and i in image.loads:
            out.extend(Wait(ctr, k) for ctr, k in image.waits.get(i, ()))
            if image.picks is not None and i in image.picks.embeds:    # the picked token's row
                addr, words, stride = image.picks.table
                out.append(LoadX(int(Dest.SP), words, addr, stride, image.picks.embeds[i][1]))
            if image.picks is not None and i in image.picks.puts:      # the picked token's words
                _k, slot, words = image.picks.puts[i]
                out.extend(Put(slot, src, add) for src, add in words)
            if i in image.mail:
                events += 1
                if image.mail[i][2] != events:
                    raise CompileError(f"record {i}: mailbox event {image.mail[i][2]}, the stream counts {events} "
                                       f"(an image of another stream?)")
                out.append(Wait(COUNTER_HOST, events))
            out.extend(loads(i))
    if wloads:
        raise CompileError(f"{len(wloads)} weights records without a GEMM")
    out.append(End())
    return out
