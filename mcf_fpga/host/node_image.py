"""A node's data image: what its stream loader reads from DDR besides the command stream.

With a command fetcher (``hdl.node.NodeConfig.fetcher``) the node reads its input data itself:
the fetcher's ``LOAD`` records (``hdl.cmdstream.Load``) have the stream loader
(``hdl.dma.loader``) read weight tiles and scratchpad words from this image and feed the engine.
:func:`plan_image` lays the image out from a compiled stream alone (no weights, no prompt):

* **preloaded** regions, written by the host before it starts the node: every weight matrix the
  stream uses (``("w", layer, name, rows)``: its GEMM tiles, one load each, the tile's beats
  ``hdl.compute.gemm.tile_beats``), every prompt embedding block (``("embed", req, rows)``) and
  every RoPE block (``("rope", t0, t1)``), each once however often the stream reads it;
* **landing zones** ``("rx", key)`` (with an RX placer, below): the placer writes them;
* the **mailbox**: one entry per record whose words exist only at run time (received payloads,
  the next token's embedding, a decode partial, ...), in stream order. The host writes entry
  ``k`` and then sets the fetcher's doorbell (counter ``COUNTER_HOST``) to its event number; the
  stream waits for that number before the load. Entries are not reused (the image grows with the
  run: :attr:`NodeImage.mail_bytes`), so the host never waits for the node to free one.

With an RX placer (``NodeConfig.rx_entries``, ``hdl.rx_placer``) received payloads do not pass
through the host: every receive key the node serves itself (``host.compiler.placed_records``)
gets an entry of the placer (one per kind, source and block, for every layer:
``host.compiler.rx_entry_key``) and a **landing zone** in the image, one bus-beat-aligned slot per
packet of the key over the whole run, in arrival order (a key's packets come from one source in
order, layer after layer); the stream waits for the entry's landed count, then loads the
packet's words from its slot. Zones are not reused either. The empty partial of a node without K/V for a request is a
preloaded constant (``("empty",)``).

Every load starts on a bus beat (``spec.loader.load_bytes``). The host fills the bytes
(``host.executors.rtl``); a unit's image is ``spec.loader.unit_stride_bytes`` wide.
"""
from __future__ import annotations

import dataclasses

from mcf_fpga.golden.model import linear_shape
from mcf_fpga.hdl.compute.gemm import tile_beats
from mcf_fpga.spec.loader import Dest, SP_BITS, load_bytes
from mcf_fpga.spec.cmdstream import PutSrc
from mcf_fpga.spec.token_picker import PickMode
from mcf_fpga.spec.instr import EngineOpcode

from . import compiler as C

__all__ = ["Load", "RxEntry", "PickPlan", "plan_picks", "node_served", "embed_row_bytes", "NodeImage", "plan_image",
           "mail_words", "unit_image", "empty_partial_words", "rx_packet_sizes"]


@dataclasses.dataclass(frozen=True)
class Load:
    """One ``LOAD`` of the image: ``count`` units for ``dest`` from byte address ``addr``."""
    dest: Dest
    count: int
    addr: int


@dataclasses.dataclass(frozen=True)
class RxEntry:
    """One entry of the node's RX placer (``hdl.rx_placer``): packets of ``key`` (kind, src,
    layer, block; layer None: any layer, ``host.compiler.rx_entry_key``) land from byte ``addr``
    on, ``limit`` bytes in all (every packet of the key over the run, each on a bus beat)."""
    index: int
    key: tuple
    addr: int
    limit: int


#: pick modes of an arm (``spec.token_picker.PickMode``): the argmax's index, or the id of the best pair
ARGMAX, PAIRS = PickMode.ARGMAX, PickMode.PAIRS
#: what a PUT feeds (``spec.cmdstream.PutSrc``): a slot's token or its value
PUT_TOKEN, PUT_VALUE = PutSrc.TOKEN, PutSrc.VALUE


@dataclasses.dataclass(frozen=True)
class PickPlan:
    """The node's greedy picks (``hdl.token_picker``): ``arms`` maps the stream index of an
    ``SPR`` to its pick ``(frame, skip, n, slot, mode)`` (armed just before the SPR: over words
    ``skip .. skip+n-1`` of the node's ``frame``-th SPR output, :data:`ARGMAX` of the logits or
    the id of the best of the :data:`PAIRS`); ``embeds`` maps the index of an ``EmbedToken`` the
    node serves itself to ``(pick number, slot)``: wait until that many picks are done, then load
    the row of the token in ``slot`` from the embedding table; ``puts`` maps the index of a
    ``TokenWord`` / ``BestWords`` the node serves itself to ``(pick number, slot, ((src, add),
    ...))``: wait likewise, then feed each word ``src`` (:data:`PUT_TOKEN` / :data:`PUT_VALUE`)
    of the slot plus ``add`` (``hdl.cmdstream.Put``); ``served``: those records plus the frames
    whose token the node picks (the host still reads them, but nothing waits for it)."""
    arms: dict
    embeds: dict
    served: frozenset
    table: tuple = None     #: (address, words per row, row stride in bytes) of the embedding table
    puts: dict = dataclasses.field(default_factory=dict)


def plan_picks(c, slots: int) -> PickPlan:
    """Which tokens node compiler ``c``'s node picks itself with a picker of ``slots`` slots
    (slot = request mod ``slots``): the argmax of the last prompt row's logits and of every decode
    step's (``Logits`` of a request's final rows, ``DLogits``), of a W node's vocabulary slice
    (``TpLogits``: the slice's best, fed to its ``BestWords`` as (value, v0 + index)), and the
    id of the best pair of a ``Pick`` (the W group's token) or of a ``RecvToken`` (a token another
    node sent, as the pair (token, token)). A ``TokenWord`` / ``EmbedToken`` is served by the node
    when the request's latest token is one the node picked and the slot still holds it (likewise
    a ``BestWords`` and its slice's pick); otherwise the host feeds it as before."""
    arms, embeds, puts, served = {}, {}, {}, set()
    frame = npick = 0
    spr = None                          # (index, frame) of the last SPR instruction
    latest = {}                         # req -> (pick number, slot) of its latest token, or None
    best = {}                           # req -> (pick number, slot, v0) of its slice's best
    holder = {}                         # slot -> pick number it holds

    def arm(i, r, skip, n, mode):
        nonlocal npick
        if spr is None:
            raise C.CompileError(f"node {c.node}: record {i} reads a frame without an SPR")
        npick += 1
        slot = r.req % slots
        arms[spr[0]] = (spr[1], skip, n, slot, mode)
        holder[slot] = npick
        served.add(i)
        return npick, slot

    def held(got):
        return got is not None and holder.get(got[1]) == got[0]

    for i, r in enumerate(c.stream):
        if isinstance(r, C.Ins) and r.fields["op"] == EngineOpcode.SPR:
            spr = (i, frame)
            frame += 1
        elif isinstance(r, C.Logits):
            if r.rows[1] == c.program.reqs[r.req][0]:         # the prompt's last rows: the first token
                latest[r.req] = arm(i, r, (r.rows[1] - r.rows[0] - 1) * c.vocab, c.vocab, ARGMAX)
        elif isinstance(r, C.DLogits):
            latest[r.req] = arm(i, r, 0, c.vocab, ARGMAX)
        elif isinstance(r, C.TpLogits):
            best[r.req] = arm(i, r, 0, r.v1 - r.v0, ARGMAX) + (r.v0,)
            latest[r.req] = None                        # the token is the group's pick
        elif isinstance(r, C.Pick):
            latest[r.req] = arm(i, r, 0, 2 * r.parts, PAIRS)
        elif isinstance(r, C.RecvToken):
            latest[r.req] = arm(i, r, 0, 2, PAIRS)
        elif isinstance(r, C.BestWords):
            got = best.get(r.req)
            if held(got):
                puts[i] = (got[0], got[1], ((PUT_VALUE, 0), (PUT_TOKEN, got[2])))
                served.add(i)
        elif isinstance(r, C.TokenWord):
            got = latest.get(r.req)
            if held(got):
                puts[i] = (got[0], got[1], ((PUT_TOKEN, 0),))
                served.add(i)
        elif isinstance(r, C.EmbedToken):
            got = latest.get(r.req)
            if held(got):
                embeds[i] = got
                served.add(i)
    return PickPlan(arms, embeds, frozenset(served), puts=puts)


def node_served(c, rx: bool, pick_slots: int) -> frozenset:
    """Indices of the records of compiler ``c``'s stream the node serves itself: with an RX placer
    (``rx``) ``host.compiler.placed_records``, with a picker of ``pick_slots`` slots
    :func:`plan_picks`' (``NodeImage.placed`` of such a node)."""
    out = set(C.placed_records(c.stream)) if rx else set()
    if pick_slots:
        out |= plan_picks(c, pick_slots).served
    return frozenset(out)


def embed_row_bytes(c, data_width: int) -> int:
    """Bytes of one row of the image's embedding table (``("embtab",)``): D words on whole beats."""
    return load_bytes(c.hidden, SP_BITS, data_width)


@dataclasses.dataclass
class NodeImage:
    """``regions``: preloaded key -> (addr, bytes); ``loads``: stream record index -> its loads;
    ``mail``: stream record index -> (addr, words, event number) of its mailbox entry;
    ``rx``: receive key -> :class:`RxEntry` (empty without an RX placer); ``waits``: stream
    record index -> ``[(counter, target), ...]`` the fetcher waits for before its loads (the RX
    placer's landed counts); ``placed``: the records the node serves itself
    (``host.compiler.placed_records``, and with a picker the picked logits and the embeddings of
    picked tokens); ``picks``: the :class:`PickPlan` (None without a picker); its embedding rows are
    read from the ``("embtab",)`` region (every token's row, :func:`embed_row_bytes` apart)."""
    base: int
    data_width: int
    w_bits: int
    regions: dict
    loads: dict
    mail: dict
    size: int
    rx: dict = dataclasses.field(default_factory=dict)
    waits: dict = dataclasses.field(default_factory=dict)
    placed: frozenset = frozenset()
    picks: PickPlan | None = None

    @property
    def mail_bytes(self) -> int:
        return sum(load_bytes(w, SP_BITS, self.data_width) for _a, w, _e in self.mail.values())


def mail_words(rec, prev_words, c) -> int | None:
    """Words a run-time record feeds into the scratchpad (None: the record feeds nothing):
    ``prev_words`` is what the last ``Recv`` / ``RecvMax`` / ``RecvSum`` stashed for
    ``FeedRecv``; ``c`` the node's :class:`host.compiler.NodeCompiler` (model sizes)."""
    if isinstance(rec, C.FeedRecv):
        return None if prev_words is None else prev_words * rec.copies
    if isinstance(rec, C.EmbedToken):
        return c.hidden
    if isinstance(rec, C.TokenWord):
        return 1
    if isinstance(rec, C.BestWords):
        return 2
    if isinstance(rec, C.EmptyPartial):
        return c.heads * c.partial_words
    return None


def _stash_words(rec, c):
    """Words a receiving record stashes for the next ``FeedRecv`` (None: not a stashing record)."""
    if isinstance(rec, C.Recv):
        if any(s is None or s % 4 for s in rec.sizes):
            raise C.CompileError(f"node {c.node}: {rec.what}: packets of {rec.sizes} bytes are not whole "
                                 f"32-bit words; the mailbox needs their size")
        return sum(rec.sizes) // 4
    if isinstance(rec, C.RecvMax):
        return c.heads
    if isinstance(rec, C.RecvSum):
        return c.heads * c.partial_words
    return None


def plan_image(c, ncfg, base: int, *, data_width: int = 128) -> NodeImage:
    """The image of node compiler ``c``'s stream (``ncfg``: its ``NodeConfig``) at byte address
    ``base`` for a ``data_width``-bit loader. Mailbox events are numbered from
    1 in stream order, counting the stream's publishes too (one doorbell)."""
    e = ncfg.engine
    pn, pk, group = e["pn"], e["pk"], e["group"]
    w_bits = pn * pk * 4
    beat = data_width // 8
    if base % beat:
        raise ValueError(f"image base {base:#x} is not a multiple of the {beat}-byte bus beat")
    top = base
    regions, loads, mail = {}, {}, {}

    def region(key, nbytes):
        nonlocal top
        if key not in regions:
            regions[key] = (top, nbytes)
            top += -(-nbytes // beat) * beat
        return regions[key][0]

    rx, waits, rx_loads = _plan_rx(c, ncfg, data_width, region) if getattr(ncfg, "rx_entries", 0) else ({}, {}, {})
    slots = getattr(ncfg, "pick_slots", 0)
    picks = plan_picks(c, slots) if slots else None
    if picks is not None and picks.embeds:
        stride = embed_row_bytes(c, data_width)
        picks = dataclasses.replace(picks, table=(region(("embtab",), c.vocab * stride), c.hidden, stride))
    for i, (k, *_rest) in list(picks.embeds.items()) + list(picks.puts.items()) if picks else ():
        waits[i] = [(C.COUNTER_PICKS, k)]
        rx_loads[i] = []                # LOADX / PUT (to_cmdstream), no mailbox entry
    event = 0
    stash = None
    for i, r in enumerate(c.stream):
        if i in rx_loads:
            if rx_loads[i]:
                loads[i] = rx_loads[i]
            elif i in waits:
                loads[i] = []           # a picked token's embedding or words: to_cmdstream's LOADX / PUTs
            if isinstance(r, C.FeedRecv):
                stash = None
            continue
        if isinstance(r, C.Weights):
            out, k = linear_shape(c.cfg, r.name)
            if r.rows is not None:
                out = r.rows[1] - r.rows[0]
            if out % pn or k % group:
                raise C.CompileError(f"node {c.node}: weight {r.name} of {out} x {k} is not whole {pn}-row tiles "
                                     f"of {group}-column groups")
            nb = tile_beats(k // pk, group // pk, pk)
            tb = load_bytes(nb, w_bits, data_width)
            a = region(("w", r.layer, r.name, r.rows), (out // pn) * tb)
            loads[i] = [Load(Dest.W, nb, a + t * tb) for t in range(out // pn)]
        elif isinstance(r, C.Embed):
            n = (r.rows[1] - r.rows[0]) * c.hidden
            loads[i] = [Load(Dest.SP, n, region(("embed", r.req, r.rows), load_bytes(n, SP_BITS, data_width)))]
        elif isinstance(r, C.Rope):
            n = (r.t1 - r.t0) * (c.head_dim // 2)
            loads[i] = [Load(Dest.SP, n, region(("rope", r.t0, r.t1), load_bytes(n, SP_BITS, data_width)))]
        elif isinstance(r, C.Publish):
            event += 1
        else:
            s = _stash_words(r, c)
            if s is not None:
                stash = s
                continue
            n = mail_words(r, stash, c)
            if n is None:
                continue
            if n <= 0:
                raise C.CompileError(f"node {c.node}: record {i} ({type(r).__name__}) feeds {n} words")
            event += 1
            a = top
            top += load_bytes(n, SP_BITS, data_width)
            mail[i] = (a, n, event)
            loads[i] = [Load(Dest.SP, n, a)]
            if isinstance(r, C.FeedRecv):
                stash = None
    return NodeImage(base, data_width, w_bits, regions, loads, mail, top - base, rx, waits,
                     frozenset(rx_loads) | (picks.served if picks else frozenset()), picks)


def empty_partial_words(c) -> list:
    """The image's empty partial (``EmptyPartial`` on a node with an RX placer): H rows of
    ``(m = M_EMPTY, l = 0, o = 0)`` as int64 words (lo, hi)."""
    from mcf_fpga.golden.numerics import M_EMPTY
    row = [M_EMPTY & 0xFFFFFFFF, 0xFFFFFFFF] + [0] * (c.partial_words - 2)
    return row * c.heads


def rx_packet_sizes(rec, c) -> list:
    """``[(key, payload bytes), ...]`` of a placeable receiving record, in arrival order."""
    if isinstance(rec, C.Recv):
        return [(rec.key, sz) for sz in rec.sizes]
    if isinstance(rec, C.RecvMax):
        return [(rec.key, 4 * c.heads)]
    total = c.heads * c.partial_words
    return [(k, 4 * min(c.sum_words, total - j * c.sum_words)) for j, k in enumerate(rec.keys)]


def _plan_rx(c, ncfg, data_width, region):
    """The RX placer's entries (a landing zone per key, allocated with ``region``), the waits
    and loads of each placed ``FeedRecv`` and the constant ``EmptyPartial`` loads."""
    from mcf_fpga.spec.rx_placer import land_bytes
    beat = data_width // 8                         # the placer's alignment: the loader's beat
    placed = C.placed_records(c.stream)
    per_key = {}                                   # key -> [landed sizes]
    for i in sorted(placed):
        r = c.stream[i]
        if isinstance(r, C.PLACEABLE):
            for key, sz in rx_packet_sizes(r, c):
                per_key.setdefault(C.rx_entry_key(key), []).append(sz)
    if len(per_key) > ncfg.rx_entries:
        raise C.CompileError(f"node {c.node}: {len(per_key)} receive keys, the RX placer has "
                             f"rx_entries={ncfg.rx_entries}")
    rx = {}
    for e, (key, sizes) in enumerate(per_key.items()):
        limit = sum(land_bytes(sz, beat) for sz in sizes)
        rx[key] = RxEntry(e, key, region(("rx", key), limit), limit)
    seen = dict.fromkeys(per_key, 0)               # packets of the key so far
    used = dict.fromkeys(per_key, 0)               # landing bytes of the key so far
    waits, loads, pending = {}, {}, None
    for i in sorted(placed):
        r = c.stream[i]
        if isinstance(r, C.PLACEABLE):
            pending = []
            for key, sz in rx_packet_sizes(r, c):
                key = C.rx_entry_key(key)
                ent = rx[key]
                seen[key] += 1
                pending.append((C.COUNTER_RX0 + ent.index, seen[key],
                                Load(Dest.SP, sz // 4, ent.addr + used[key])))
                used[key] += land_bytes(sz, beat)
            loads[i] = []
            if isinstance(r, C.Recv) and not r.fed:     # a wait only (an install credit)
                waits[i] = [(ctr, k) for ctr, k, _ld in pending]
                pending = None
        elif isinstance(r, C.FeedRecv):
            waits[i] = [(ctr, k) for ctr, k, _ld in pending]
            loads[i] = [ld for _c, _k, ld in pending] * r.copies
            pending = None
        elif isinstance(r, C.EmptyPartial):
            n = c.heads * c.partial_words
            loads[i] = [Load(Dest.SP, n, region(("empty",), load_bytes(n, SP_BITS, data_width)))]
    return rx, waits, loads


def unit_image(values, bits: int, data_width: int) -> bytes:
    """The image of one load's units (``hdl.dma.loader``'s rule): each value little-endian in
    ``bits / 8`` bytes, padded to its stride; the whole padded to bus beats. Values are taken
    modulo ``2**bits`` (negative words as two's complement)."""
    from mcf_fpga.spec.loader import unit_stride_bytes
    nb, stride, beat = bits // 8, unit_stride_bytes(bits, data_width), data_width // 8
    mask = (1 << bits) - 1
    out = bytearray()
    for v in values:
        out += (int(v) & mask).to_bytes(nb, "little") + bytes(stride - nb)
    out += bytes(-len(out) % beat)
    return bytes(out)
