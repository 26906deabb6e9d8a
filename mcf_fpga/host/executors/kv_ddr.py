"""Where a node's KV rows live when its engine keeps K/V in DDR (docs/memory.md, "KV in
DDR"), and how the executor's instructions reach them.

The executor addresses KV as flat *rows* (``hdl.compute.engine`` ``KVW`` / ``ATT`` field ``kvb``):
with the on-chip KV memory a flat row is a memory word. With a KV region
(:class:`spec.kvregion.KVRegion`) a flat row ``f`` is row ``f % R`` of region slot ``f // R``
(``R`` = the region's ``slot_rows``): the KV pool's slot ``s`` owns flat rows
``[s * R, (s + 1) * R)`` as before, and staged units and decode blocks get whole slots above the
pool's (one unit or one decode block never spans two slots).

:class:`DdrKV` turns one batch of instructions for the on-chip engine into the DDR engine's:

* ``KVW`` rows ``kvb + i * kvs + o`` -> slot ``kvb // R`` (field ``b``), rows from ``kvb % R``;
* every ``ATT`` reads one staging window: a ``KVL`` (load rows ``r .. r + ntok - 1`` of the slot
  into window ``w``) is queued before it, the ``ATT`` reads ``kvb = w * win_rows`` and releases
  the window when it ends. Windows are used round robin, and the ``KVL`` of the next ``ATT`` of
  the batch is queued before this ``ATT`` (its block loads while this one computes) unless a
  ``KVW`` lies between them (it might write those rows). A ``KVL`` of window ``w`` is therefore
  always queued after the ``ATT`` that released ``w``'s previous block: the in-order engine never
  waits on a window that only a later instruction would free.
* a batch may also queue the loads of a *later* batch's first ATT jobs (``rewrite(..., then=atts)``
  or ``preload``): after its own last ATT (or first, when it has none), one per window, so the
  blocks load while the instructions in between run. Those ATTs then take the windows without a
  ``KVL`` of their own; they must be the next ATTs rewritten, in that order, and no ``KVW`` before
  them may write their rows (``ValueError`` otherwise: the compiler chooses what to preload).
"""
from __future__ import annotations

from mcf_fpga.spec.instr import EngineOpcode
from mcf_fpga.hdl.compute.program import instr

__all__ = ["DdrKV", "load_order"]


class DdrKV:
    """Parameters: ``region`` (:class:`spec.kvregion.KVRegion`), ``win_rows`` and ``n_win`` (the
    engine's staging windows), ``unit_rows`` (rows one KV unit or decode block needs: at most the
    region's ``slot_rows``), ``pool_slots`` (slots the KV pool hands out; the rest stage)."""

    def __init__(self, region, win_rows: int, n_win: int, unit_rows: int, pool_slots: int):
        if unit_rows > region.slot_rows:
            raise ValueError(f"a KV unit needs {unit_rows} rows; the KV region's slots hold "
                             f"{region.slot_rows} (KVRegion.slot_rows)")
        if pool_slots >= region.n_slots:
            raise ValueError(f"the KV pool's {pool_slots} slots leave no staging slot in the KV region "
                             f"of {region.n_slots} (KVRegion.n_slots)")
        self.region, self.win_rows, self.n_win = region, win_rows, n_win
        self.R = region.slot_rows
        self.pool_slots = pool_slots
        self.win = 0                 # the window the next load takes
        self.loads = 0               # KVL queued (statistics)
        self.ahead = []              # ((kvb, ntok), window) of loads queued for ATTs not yet rewritten

    @property
    def stage_rows(self) -> tuple:
        """(base, size) of the flat rows staged units and decode blocks take (whole slots)."""
        return self.pool_slots * self.R, (self.region.n_slots - self.pool_slots) * self.R

    def slot_row(self, flat: int, n: int = 1) -> tuple:
        """(slot, row) of flat row ``flat``; the ``n`` rows from it must stay in that slot. A
        symbolic row (``host.compiler.KvRow``: a pool unit's, whose slot the directory chooses
        at run time) gives a symbolic slot (``KvSlot``)."""
        if hasattr(flat, "unit"):
            from mcf_fpga.host.compiler import KvSlot
            slot, row = KvSlot(flat.layer, flat.unit), flat.off
        else:
            slot, row = divmod(flat, self.R)
        if row + n > self.R:
            raise ValueError(f"KV rows {flat}..{flat + n - 1} cross a region slot of {self.R} rows")
        return slot, row

    def _kvl(self, att) -> tuple:
        """The load of ``att``'s rows: (KVL instruction, window)."""
        n = att["ntok"]
        if att["nblk"] != 1 or n > self.win_rows:
            raise ValueError(f"ATT of {att['nblk']} blocks / {n} rows: the DDR engine reads one block of "
                             f"at most win_rows={self.win_rows} rows per job")
        slot, row = self.slot_row(att["kvb"], n)
        w = self.win
        self.win = (self.win + 1) % self.n_win
        self.loads += 1
        return instr(EngineOpcode.KVL, b=slot, kvb=row, ntok=n, dst=w), w

    def preload(self, atts) -> list:
        """The KVLs of ATT jobs ``atts`` (on-chip form, the first ATTs of a later batch), at most
        one per window, in the windows ``rewrite`` would give them; ``rewrite`` then gives those
        ATTs their windows without a KVL. Only when no earlier preload is pending."""
        if self.ahead:
            raise ValueError(f"a preload while {len(self.ahead)} preloaded ATT jobs are not yet queued")
        out = []
        for att in list(atts)[:self.n_win]:
            kvl, w = self._kvl(att)
            self.ahead.append(((att["kvb"], att["ntok"]), w))
            out.append(kvl)
        return out

    def _preloaded(self, att, j):
        """The window of ATT ``att`` (batch index ``j``) if its load was preloaded (else None)."""
        if not self.ahead:
            return None
        (kvb, n), w = self.ahead[0]
        if (att["kvb"], att["ntok"]) != (kvb, n):
            raise ValueError(f"ATT {j} of rows {att['kvb']}+{att['ntok']} is not the job whose block was "
                             f"preloaded next (rows {kvb}+{n}, window {w})")
        self.ahead.pop(0)
        return w

    def _check_kvw(self, ins, j):
        """A KVW queued while preloads are pending must not write their rows."""
        for (kvb, n), w in self.ahead:
            for i in range(max(1, ins["n1"])):
                r0 = ins["kvb"] + i * ins["kvs"]
                if _overlap(r0, ins["n0"], kvb, n):
                    raise ValueError(f"KVW {j} writes rows {r0}..{r0 + ins['n0'] - 1}, which the preload of "
                                     f"window {w} (rows {kvb}..{kvb + n - 1}) has already read")

    def rewrite(self, instrs: list, then=()) -> list:
        """The DDR engine's form of the batch ``instrs``; ``then``: ATT jobs of a later batch whose
        loads are queued after this batch's last ATT (before its first instruction if it has none)."""
        out = []
        win = {}                         # ATT index -> the window its KVL loads
        atts = [j for j, ins in enumerate(instrs) if ins["op"] == EngineOpcode.ATT]
        if then and not atts:
            out += self.preload(then)
        for what, j in load_order([ins["op"] for ins in instrs]):
            ins = instrs[j]
            if what == "kvl":
                w = self._preloaded(ins, j)
                if w is None:
                    kvl, w = self._kvl(ins)
                    out.append(kvl)
                win[j] = w
            elif ins["op"] == EngineOpcode.KVW:
                self._check_kvw(ins, j)
                span = (ins["n1"] - 1) * ins["kvs"] + ins["n0"]
                slot, row = self.slot_row(ins["kvb"], span)
                out.append(dict(ins, b=slot, kvb=row))
            elif ins["op"] == EngineOpcode.ATT:
                out.append(dict(ins, kvb=win.pop(j) * self.win_rows, sub=ins["sub"] | 1))
                if j == atts[-1]:
                    if self.ahead:
                        raise ValueError(f"{len(self.ahead)} preloaded ATT jobs are not in the batch that "
                                         f"follows the preload")
                    if then:
                        out += self.preload(then)
            else:
                out.append(ins)
        return out


def _overlap(a, n, b, m) -> bool:
    """Whether ``n`` KV rows from ``a`` and ``m`` from ``b`` share a row: flat rows (int) are the
    staging slots, a pool unit's rows (``host.compiler.KvRow``) its own slot, so only two of the
    same kind, and of the same unit, can."""
    if isinstance(a, int) != isinstance(b, int):
        return False
    if not isinstance(a, int):
        if (a.layer, a.unit) != (b.layer, b.unit):
            return False
        a, b = a.off, b.off
    return a < b + m and b < a + n


def load_order(ops) -> list:
    """Queue order of one batch of instructions (opcodes ``ops``) on the DDR engine: a list of
    ``("kvl", j)`` (the load of ATT ``j``'s rows) and ``("ins", j)`` (instruction ``j``). Every ATT
    gets one KVL; the first of a batch (or one right after a KVW) is queued right before it, every
    next ATT's is queued before the ATT ahead of it (prefetched one job ahead) unless a KVW lies
    between the two. The one definition of the order ``DdrKV.rewrite`` queues and the performance
    model times (``host.perfmodel``, K/V in DDR)."""
    ops = list(ops)
    out, pending = [], None
    for j, op in enumerate(ops):
        if op == EngineOpcode.ATT:
            if pending != j:
                out.append(("kvl", j))
            pending = None
            nxt = next((k for k in range(j + 1, len(ops)) if ops[k] in (EngineOpcode.ATT, EngineOpcode.KVW)), None)
            if nxt is not None and ops[nxt] == EngineOpcode.ATT:
                out.append(("kvl", nxt))
                pending = nxt
        out.append(("ins", j))
    return out


def expected_kv(im, prompt, generated) -> "IntKVCache":
    """IntModel's KV cache of one request as the cluster computes it: the prompt as prefill, then
    one decode step per generated token but the last (whose K/V nobody computes)."""
    cache = im.new_cache()
    im.forward(prompt, cache)
    for tok in list(generated)[:-1]:
        im.forward([tok], cache)
    return cache


def ddr_mismatches(region, held, caches, block: int, n_kv_heads: int, read, limit: int = 5) -> list:
    """Compare a node's DDR image with IntModel's K/V: ``held`` is ``NodeDriver.held_kv()``
    (req, layer, block, row0, stride, count), ``caches`` req -> ``IntKVCache``, ``read(addr, n)``
    the memory's bytes. Returns up to ``limit`` descriptions of differing rows (empty: equal)."""
    out = []
    for req, layer, b, row0, stride, count in held:
        cache = caches[req]
        for g in range(n_kv_heads):
            for i in range(count):
                pos = b * block + i
                slot, row = divmod(row0 + g * stride + i, region.slot_rows)
                for sel, (vals, exps) in enumerate((cache.k[layer], cache.v[layer])):
                    want = region.pack_row(vals[g, pos].tolist(), int(exps[g, pos]))
                    got = read(region.row_addr(slot, sel, row), region.row_bytes)
                    if got != want:
                        out.append(f"request {req} layer {layer} position {pos} KV head {g} "
                                   f"{'KV'[sel]}: slot {slot} row {row} holds {got.hex()}, "
                                   f"IntModel {want.hex()}")
                        if len(out) >= limit:
                            return out
    return out
