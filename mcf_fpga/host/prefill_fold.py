"""Prefill attention's merge through a bounded set of partial slots.

A row set (a chunk's rows of one layer) merges its KV blocks' partials as a left fold in
ascending block order (``golden.numerics.merge_partials``, the canonical prefill merge), but
the blocks become available in the program's order: ascending for MARS and PD, but descending
or interleaved for ring and zigzag (a block arrives as its unit comes round). Keeping one
partial per block, as the compiler did, takes ``blocks x rows x heads x (2d+4)`` scratchpad words:
it grows with the context (a 12-head, d = 128 row set at 2K tokens of context alone needs 6.4M
words against the KR260 engine's 64K).

:class:`PrefillFold` keeps ``slots`` partial slots instead, a window over the blocks: slot 0
holds the running fold (blocks ``< next``) once there is one, the other slots the partials of
blocks ``next ..`` at fixed positions. A block inside the window is computed (ATT) into its slot
the moment it is attended, in any order; when every slot holds its partial, one FOLD merges them
into slot 0 (FOLD reads row r's partials before it writes row r, so slot 0 may be its own
target) and the window moves on. A block beyond the window waits (its ATT is not emitted yet:
its K/V stays in the node's KV store) until the window reaches it; if its unit is to leave the
node before that (``settle``), it is computed into a *parked* slot of its own and copied into
its place (FOLD of one partial: the partial itself) when the window reaches it. Every FOLD reads
consecutive slots in ascending block order, so the result is ``merge_partials`` of all blocks in
ascending order, bit for bit, whatever the arrival order; with no more blocks than slots it is
the one final FOLD over all of them, as before.

The running fold takes its next block in place (``acc_att``, the default): while no later block
sits in the window, block ``next`` is computed by an ATT with ``acc`` (the engine's ATT ``sub``
bit1: each row's partial read from slot 0 first, the block merged into it, the result written
back to slot 0), so blocks that arrive in order -- MARS's and PD's -- need no FOLD but the final
one (the finalisation), and no slot but slot 0. Block 0 computed into slot 0 with nothing else in
the window starts the running fold.

The planner is bookkeeping only: it returns :class:`Att` / :class:`Fold` steps with scratchpad
addresses, which the compiler turns into engine instructions (one per KV head group).
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Att", "Fold", "PrefillFold", "fold_slots"]

#: most partial slots a row set uses (fewer when its slots would take over a quarter of the
#: scratchpad's arena); each FOLD then merges up to this many partials, the running fold included
MAX_FOLD_SLOTS = 8


def fold_slots(slot_words: int, arena_words: int, n_blocks: int) -> int:
    """Slots for a row set of ``n_blocks`` blocks whose partials take ``slot_words`` words each:
    as many as fit a quarter of the scratchpad's arena (``arena_words``: what the per-tile
    scratch leaves), between 2 and :data:`MAX_FOLD_SLOTS`, and no more than the blocks need (one
    slot when there is a single block)."""
    fit = arena_words // 4 // max(slot_words, 1)
    return max(1, min(n_blocks, max(2, min(MAX_FOLD_SLOTS, fit))))


@dataclass(frozen=True)
class Att:
    """Compute block ``block``'s partial (the attention of ``key``'s K/V) into ``dst``; ``acc``:
    merged into the running fold's partial at ``dst`` (ATT acc), in place."""
    block: int
    key: object
    dst: int
    acc: bool = False


@dataclass(frozen=True)
class Fold:
    """Left-fold the ``nblk`` partials at ``a``, ``a + stride``, ... into ``dst`` (``None``: the
    final fold, finalised into the attention output)."""
    a: int
    nblk: int
    dst: int | None


class PrefillFold:
    """The fold of one row set's ``n_blocks`` block partials through ``slots`` slots of
    ``slot_words`` words allocated from ``sp`` (``alloc(n, what)`` / ``free(addr)``).

    ``acc_att``: the running fold takes block ``next`` in place by an ATT acc when the window
    holds nothing else (False: every block through a window slot and a FOLD).

    ``add(block, key)`` makes a block available (``key``: what its ATT reads, e.g. its KV unit);
    ``advance()`` returns the steps that are possible now (the ATTs of blocks in the window, the
    folds of full windows); ``settle(keys)`` computes every waiting block of ``keys`` (units about
    to leave) into parked slots; ``finish()`` the last steps, the final fold included, and frees
    the slots. Raises ``ValueError`` on a block added twice or out
    of range, or a finish with blocks missing."""

    def __init__(self, n_blocks: int, slots: int, slot_words: int, sp, acc_att: bool = True):
        if n_blocks < 1 or slots < 1 or (slots < 2 and n_blocks > 1):
            raise ValueError(f"PrefillFold: n_blocks={n_blocks}, slots={slots}: need >= 1 block and "
                             f">= 2 slots when there are several blocks")
        self.n_blocks, self.slots, self.stride, self.sp = n_blocks, slots, slot_words, sp
        self.base = sp.alloc(slots * slot_words, "partials")
        self.next = 0            # blocks < next are folded into slot 0 (when acc)
        self.acc = False
        self.win: set[int] = set()       # blocks computed into their window slot
        self.waiting: dict[int, object] = {}
        self.parked: dict[int, int] = {}
        self.added: set[int] = set()
        self.acc_att = acc_att

    def slot(self, i: int) -> int:
        return self.base + i * self.stride

    def add(self, block: int, key) -> None:
        """Block ``block`` can be computed now (``key``: what its ATT reads); ``advance`` emits it."""
        if not 0 <= block < self.n_blocks:
            raise ValueError(f"block {block} outside the row set's {self.n_blocks} blocks")
        if block in self.added:
            raise ValueError(f"block {block} attended twice")
        self.added.add(block)
        self.waiting[block] = key

    def _pos(self, b: int) -> int:
        return (1 if self.acc else 0) + b - self.next

    def _width(self) -> int:
        """Blocks the window holds besides the running fold."""
        return self.slots - (1 if self.acc else 0)

    def _run_on(self, steps: list) -> None:
        """``acc_att``: block 0, alone, starts the running fold in slot 0; then the running fold
        takes block ``next`` in place while the window holds no other block."""
        if not self.acc and self.next == 0 and not self.win and 0 in self.waiting:
            steps.append(Att(0, self.waiting.pop(0), self.slot(0)))
            self.acc, self.next = True, 1
        while self.acc and not self.win and self.next in self.waiting:
            steps.append(Att(self.next, self.waiting.pop(self.next), self.slot(0), acc=True))
            self.next += 1

    def advance(self) -> list:
        steps = []
        while True:
            if self.acc_att:
                self._run_on(steps)
            for b in sorted(self.waiting):
                if self._pos(b) < self.slots:
                    steps.append(Att(b, self.waiting.pop(b), self.slot(self._pos(b))))
                    self.win.add(b)
            for b in sorted(self.parked):
                if self._pos(b) < self.slots:
                    a = self.parked.pop(b)
                    steps.append(Fold(a, 1, self.slot(self._pos(b))))   # the partial itself
                    self.sp.free(a)                                      # (read before any later use)
                    self.win.add(b)
            w = self._width()
            if self.next + w >= self.n_blocks or any(self.next + j not in self.win for j in range(w)):
                return steps                    # the last window folds at finish
            steps.append(Fold(self.slot(0), self.slots, self.slot(0)))
            self.next += w
            self.acc, self.win = True, set()

    def settle(self, keys) -> list:
        """Steps after which no waiting block reads any of ``keys``."""
        steps = self.advance()
        for b in sorted(self.waiting):
            if self.waiting[b] in keys:
                a = self.sp.alloc(self.stride, "parked partial")
                steps.append(Att(b, self.waiting.pop(b), a))
                self.parked[b] = a
        return steps

    def finish(self) -> list:
        steps = self.advance()
        missing = sorted(set(range(self.n_blocks)) - self.added)
        if missing or self.waiting or self.parked:
            raise ValueError(f"blocks {missing or sorted({*self.waiting, *self.parked})} missing at the fold")
        steps.append(Fold(self.slot(0), self._pos(self.n_blocks), None))
        self.sp.free(self.base)
        return steps
