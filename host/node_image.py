"""A node's data image: what its stream loader reads from DDR besides the command stream.

With a command fetcher (``hdl.node.NodeConfig.fetcher``) the node reads its input data itself
(issue #19): the fetcher's ``LOAD`` records (``hdl.cmdstream.Load``) have the stream loader
(``hdl.dma.loader``) read weight tiles and scratchpad words from this image and feed the engine.
:func:`plan_image` lays the image out from a compiled stream alone (no weights, no prompt):

* **preloaded** regions, written by the host before it starts the node: every weight matrix the
  stream uses (``("w", layer, name, rows)``: its GEMM tiles, one load each, the tile's beats
  ``hdl.compute.gemm.tile_beats``), every prompt embedding block (``("embed", req, rows)``) and
  every RoPE block (``("rope", t0, t1)``), each once however often the stream reads it;
* the **mailbox**: one entry per record whose words exist only at run time (received payloads,
  the next token's embedding, a decode partial, ...), in stream order. The host writes entry
  ``k`` and then sets the fetcher's doorbell (counter ``COUNTER_HOST``) to its event number; the
  stream waits for that number before the load. Entries are not reused (the image grows with the
  run: :attr:`NodeImage.mail_bytes`), so the host never waits for the node to free one.

Every load starts on a bus beat (``hdl.dma.loader.load_bytes``). The host fills the bytes
(``host.executors.rtl``); a unit's image is ``hdl.dma.loader.unit_stride_bytes`` wide.
"""
from __future__ import annotations

import dataclasses

from golden.model import linear_shape
from hdl.compute.gemm import tile_beats
from hdl.dma.loader import Dest, SP_BITS, load_bytes

from . import compiler as C

__all__ = ["Load", "NodeImage", "plan_image", "mail_words", "unit_image"]


@dataclasses.dataclass(frozen=True)
class Load:
    """One ``LOAD`` of the image: ``count`` units for ``dest`` from byte address ``addr``."""
    dest: Dest
    count: int
    addr: int


@dataclasses.dataclass
class NodeImage:
    """``regions``: preloaded key -> (addr, bytes); ``loads``: stream record index -> its loads;
    ``mail``: stream record index -> (addr, words, event number) of its mailbox entry."""
    base: int
    data_width: int
    w_bits: int
    regions: dict
    loads: dict
    mail: dict
    size: int

    @property
    def mail_bytes(self) -> int:
        return sum(load_bytes(w, SP_BITS, self.data_width) for _a, w, _e in self.mail.values())


def mail_words(rec, prev_words, c) -> int | None:
    """Words a run-time record feeds into the scratchpad (None: the record feeds nothing):
    ``prev_words`` is what the last ``Recv`` / ``RecvMax`` / ``RecvSum`` stashed for
    ``FeedRecv``; ``c`` the node's :class:`host.compiler.NodeCompiler` (model sizes)."""
    if isinstance(rec, C.FeedRecv):
        return prev_words
    if isinstance(rec, C.EmbedToken):
        return c.D
    if isinstance(rec, C.TokenWord):
        return 1
    if isinstance(rec, C.BestWords):
        return 2
    if isinstance(rec, C.EmptyPartial):
        return c.H * c.W
    return None


def _stash_words(rec, c):
    """Words a receiving record stashes for the next ``FeedRecv`` (None: not a stashing record)."""
    if isinstance(rec, C.Recv):
        if any(s is None or s % 4 for s in rec.sizes):
            raise C.CompileError(f"node {c.n}: {rec.what}: packets of {rec.sizes} bytes are not whole "
                                 f"32-bit words; the mailbox needs their size")
        return sum(rec.sizes) // 4
    if isinstance(rec, C.RecvMax):
        return c.H
    if isinstance(rec, C.RecvSum):
        return c.H * c.W
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

    event = 0
    stash = None
    for i, r in enumerate(c.stream):
        if isinstance(r, C.Weights):
            out, k = linear_shape(c.cfg, r.name)
            if r.rows is not None:
                out = r.rows[1] - r.rows[0]
            if out % pn or k % group:
                raise C.CompileError(f"node {c.n}: weight {r.name} of {out} x {k} is not whole {pn}-row tiles "
                                     f"of {group}-column groups")
            nb = tile_beats(k // pk, group // pk, pk)
            tb = load_bytes(nb, w_bits, data_width)
            a = region(("w", r.layer, r.name, r.rows), (out // pn) * tb)
            loads[i] = [Load(Dest.W, nb, a + t * tb) for t in range(out // pn)]
        elif isinstance(r, C.Embed):
            n = (r.rows[1] - r.rows[0]) * c.D
            loads[i] = [Load(Dest.SP, n, region(("embed", r.req, r.rows), load_bytes(n, SP_BITS, data_width)))]
        elif isinstance(r, C.Rope):
            n = (r.t1 - r.t0) * (c.d // 2)
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
                raise C.CompileError(f"node {c.n}: record {i} ({type(r).__name__}) feeds {n} words")
            event += 1
            a = top
            top += load_bytes(n, SP_BITS, data_width)
            mail[i] = (a, n, event)
            loads[i] = [Load(Dest.SP, n, a)]
            if isinstance(r, C.FeedRecv):
                stash = None
    return NodeImage(base, data_width, w_bits, regions, loads, mail, top - base)


def unit_image(values, bits: int, data_width: int) -> bytes:
    """The image of one load's units (``hdl.dma.loader``'s rule): each value little-endian in
    ``bits / 8`` bytes, padded to its stride; the whole padded to bus beats. Values are taken
    modulo ``2**bits`` (negative words as two's complement)."""
    from hdl.dma.loader import unit_stride_bytes
    nb, stride, beat = bits // 8, unit_stride_bytes(bits, data_width), data_width // 8
    mask = (1 << bits) - 1
    out = bytearray()
    for v in values:
        out += (int(v) & mask).to_bytes(nb, "little") + bytes(stride - nb)
    out += bytes(-len(out) % beat)
    return bytes(out)
