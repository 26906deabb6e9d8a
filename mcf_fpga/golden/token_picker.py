"""Golden model of the token picker (the hardware twin is
:class:`hdl.token_picker.TokenPicker`): greedy picks (argmax of a frame of logit words) armed
ahead of the engine's ``sp_out`` stream.

Timing-free: fed events in order -- an arm, a word that passes, a clear. An arm is refused at
once (``BAD_ARM``: slot or ``n``; ``MISSED``: its frame has passed, or a queued pick takes that
frame or a later one) or queued (``arm_depth`` places); the queue's head
looks at its frame's window and is done when that frame's ``last`` word passes (``SHORT`` if
the frame was shorter than ``skip + n`` words). ``error_cause`` is the first failure's, in
that order of detection.
An arm's ``mode`` (:class:`PickMode`) reads the window as logits (``ARGMAX``: the token is the
index of the first signed maximum) or as ``(value, id)`` word pairs (``PAIRS``: the token is the
id of the first pair of maximum value; ``n`` even, else ``BAD_ARM``; a pair counts only if the
pick saw both its words).
``PickError``, ``PickMode``, :func:`~hdl.token_picker.arm_layout` and the parameter limits are
the hardware's definitions (:mod:`hdl.token_picker`).
"""
from collections import deque
from dataclasses import dataclass, field

from mcf_fpga.spec.token_picker import PickError, PickMode, check_params

__all__ = ["TokenPicker", "Result", "run", "signed32", "PickMode", "PickError"]

_MAX32 = 2 ** 32 - 1


def signed32(x: int) -> int:
    x &= _MAX32
    return x - 2 ** 32 if x >> 31 else x


@dataclass
class _Pick:
    frame: int
    skip: int
    n: int
    slot: int
    mode: int = PickMode.ARGMAX
    have: bool = False             #: took a candidate (a word of its window; PAIRS: a whole pair)
    best: int = 0                  #: the max so far (the 32-bit word)
    tok: int = 0
    pval: int = 0                  #: PAIRS: the value word of the pair under way
    pend: bool = False             #: PAIRS: ``pval`` was seen by this pick


class TokenPicker:
    """One picker. ``arm(...)`` -> accepted? (``False``: the queue is full, arm again later);
    ``word(data, last)``; ``clear()``. State: ``tokens``, ``values``, ``picks``, ``errors``,
    ``error_cause``, ``words`` (every passed word ``(data, last)``, in order), ``frame``, ``j``."""

    def __init__(self, slots: int = 4, arm_depth: int = 4):
        check_params(slots, arm_depth)
        self.slots, self.arm_depth = slots, arm_depth
        self.words = []
        self.clear()

    def clear(self):
        self.frame = self.j = 0
        self.queue = deque()
        self.tokens, self.values = [0] * self.slots, [0] * self.slots
        self.picks = self.errors = 0
        self.error_cause = PickError.NONE

    # ---- queue ----
    def full(self) -> bool:
        return len(self.queue) >= self.arm_depth

    def _fail(self, cause):
        self.errors = min(self.errors + 1, _MAX32)
        if self.error_cause == PickError.NONE:
            self.error_cause = PickError(cause)

    def arm(self, frame: int, skip: int, n: int, slot: int, mode: int = PickMode.ARGMAX) -> bool:
        for name, v, bits in (("frame", frame, 32), ("skip", skip, 32), ("n", n, 32), ("slot", slot, 4),
                              ("mode", mode, 1)):
            if not 0 <= v < 2 ** bits:
                raise ValueError(f"arm field {name} must fit {bits} bits (0..{2 ** bits - 1}), got {v}")
        if self.full():
            return False
        if slot >= self.slots or n == 0 or (mode == PickMode.PAIRS and n % 2):
            self._fail(PickError.BAD_ARM)
        elif frame < max([self.frame] + [p.frame + 1 for p in self.queue]):
            self._fail(PickError.MISSED)          # passed, or a pick ahead takes a later frame
        else:
            self.queue.append(_Pick(frame, skip, n, slot, PickMode(mode)))
        return True

    @staticmethod
    def _offer(h, d, data):
        """Window word ``d`` of head pick ``h`` passes: the candidate ``(value, token)`` it
        completes, or None."""
        if h.mode == PickMode.ARGMAX:
            return data, d
        if d % 2 == 0:                              # a pair's value word: wait for its id
            h.pval, h.pend = data, True
            return None
        seen, h.pend = h.pend, False                # its id word: a candidate if the value was seen
        return (h.pval, data) if seen else None

    def word(self, data: int, last: int):
        data &= _MAX32
        self.words.append((data, int(bool(last))))
        h = self.queue[0] if self.queue else None
        if h is not None and h.frame == self.frame:
            d = self.j - h.skip
            c = self._offer(h, d, data) if 0 <= d < h.n else None
            if c is not None and (not h.have or signed32(c[0]) > signed32(h.best)):
                h.have, (h.best, h.tok) = True, c
            if last:
                self.queue.popleft()
                if self.j + 1 < h.skip + h.n:
                    self._fail(PickError.SHORT)
                elif not h.have:                    # armed mid-frame, after its window
                    self._fail(PickError.MISSED)
                else:
                    self.tokens[h.slot], self.values[h.slot] = h.tok, h.best
                    self.picks = min(self.picks + 1, _MAX32)
        if last:
            self.frame, self.j = self.frame + 1, 0
        else:
            self.j += 1
        assert not self.queue or self.queue[0].frame >= self.frame   # queued in frame order


@dataclass
class Result:
    tokens: list
    values: list
    picks: int
    errors: int
    error_cause: int
    words: list = field(default_factory=list)      #: the passed words ``(data, last)``
    waited: list = field(default_factory=list)     #: indices (in ``events``) of arms that waited


def run(events, slots: int = 4, arm_depth: int = 4) -> Result:
    """Apply ``events`` in order: ``("arm", frame, skip, n, slot[, mode])``, ``("word", data, last)``,
    ``("clear",)``. An arm finding the queue full waits (with every later arm, in order) and is
    accepted right after the first word or clear that makes room -- what a caller that keeps
    the arm offered while the stream runs sees."""
    g = TokenPicker(slots, arm_depth)
    waiting = deque()
    waited = []

    def admit():
        while waiting and g.arm(*waiting[0][1]):
            waiting.popleft()

    for i, ev in enumerate(events):
        if ev[0] == "arm":
            if waiting or not g.arm(*ev[1:]):
                waiting.append((i, ev[1:]))
                waited.append(i)
        elif ev[0] == "word":
            g.word(*ev[1:])
            admit()
        elif ev[0] == "clear":
            g.clear()
            admit()
        else:
            raise ValueError(f"unknown event {ev!r}")
    return Result(list(g.tokens), list(g.values), g.picks, g.errors, int(g.error_cause),
                  list(g.words), waited)
