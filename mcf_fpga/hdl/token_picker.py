"""Token picker: the greedy pick -- argmax of a decode step's logits, or of the
shards' ``(value, id)`` pairs in tensor-parallel decode -- on the node.

The picker sits on the compute engine's scratchpad output (``sp_out``) between the engine and
the node's ``m_axis_sp`` and watches the words go by; the host (or the command fetcher) arms a
pick for a coming frame and reads the picked token afterwards instead of every logit.
The rules are :mod:`golden.token_picker`'s, bit for bit.

Contract
--------
* ``s_axis`` -> ``m_axis`` (stream ``{data: 32, last: 1}``, the engine's ``sp_out`` words): a
  combinational pass-through -- ``valid`` and ``payload`` forwarded, ``ready`` returned. Every
  word goes out unchanged and in order; the picker never stalls or drops a word. A word
  *passes* when ``s_axis.valid & s_axis.ready``. A *frame* is the words up to and including a
  ``last`` word (one SPR instruction's output); frames are numbered 0, 1, ... since ``clear``
  and word ``j`` of a frame counts from 0.
* ``arm`` (In stream :func:`arm_layout` ``{frame, skip, n, slot, mode}``): a pick to do over
  the window, words ``j`` in ``[skip, skip + n)`` of frame ``frame``; ``mode`` (:class:`PickMode`):

  - ``ARGMAX`` (0): the token is ``j - skip`` of the maximum word as a *signed* 32-bit value,
    the *first* one on ties (``torch.argmax``); the value is that word.
  - ``PAIRS`` (1): the window is ``n / 2`` pairs ``(value, id)`` = words ``(skip + 2i, skip +
    2i + 1)`` (e.g. each tensor-parallel shard's own argmax); the token is the ``id`` of the
    pair whose ``value`` is the signed maximum, the *first* such pair in frame order on ties;
    the value is that ``value``. ``n`` must be even.

  ``arm.ready`` is low while the queue of ``arm_depth`` picks is full (and in a ``clear``
  cycle): arming is the only back-pressure the picker applies, and only to ``arm``.
* Outcome. When an arm is accepted: ``slot >= slots``, ``n == 0``, or ``PAIRS`` with an odd
  ``n`` is ``BAD_ARM``; a frame that already passed -- or that is not after the frame of every
  pick still queued (the queue is served in order, one frame per pick) -- is ``MISSED``. Either is counted at once and takes
  no place in the queue; the others wait there (so ``arm_depth`` picks may wait for future
  frames). When its frame's ``last`` word passes, a queued pick is done: a frame of fewer than
  ``skip + n`` words is ``SHORT`` (the slot keeps its old token); else
  ``tokens[slot]``/``values[slot]`` take the result and ``picks`` counts it. (The same outcomes
  as resolving the queue's head pick by pick; only a refusal is known, and counted, earlier.)

  ``errors`` counts failed picks, ``error_cause`` (:class:`PickError`) is the cause of the first
  one detected (a pick finishing and an arm refused in the same cycle: the pick's);
  ``picks`` and ``errors`` saturate at 2**32 - 1.
* ``clear`` (a 1-cycle pulse): frame number, word index, queue, counters, ``error_cause``,
  ``tokens`` and ``values`` back to 0. A word passing in that cycle is not counted (it still
  passes), no arm is accepted.

Caller's rule: arm a pick before its frame's first word passes; then the result is exact
whatever the timing of the stream. Arming mid-frame for the current frame (nothing ahead of it
in the queue) is deterministic: the pick sees only the words that pass after the cycle its arm
was accepted (``j`` still counts from the frame's start; a ``PAIRS`` pair counts only if both
its words passed after that cycle); if it saw none of its window (no whole pair) it is
``MISSED`` at the frame's end (after the ``SHORT`` check). In hardware only, an arm accepted in
the very cycle its frame's ``last`` word passes is ``MISSED`` when it reaches the queue's head.
Frame numbers and word indices are 32 bits: at most 2**32 - 1 frames since ``clear`` and
frames shorter than 2**32 words.
"""
from amaranth import Module, Mux, ResetInserter, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.token_picker import PickError, PickMode, check_params

__all__ = ["arm_layout", "word_layout", "TokenPicker"]

_MAX32 = 2 ** 32 - 1


def arm_layout() -> data.StructLayout:
    """A pick: ``n`` words from word ``skip`` of frame ``frame`` into ``tokens[slot]``, read as
    ``mode`` (:class:`PickMode`) says."""
    return data.StructLayout({"frame": 32, "skip": 32, "n": 32, "slot": 4, "mode": 1})


def word_layout() -> data.StructLayout:
    """An ``sp_out`` word (:class:`hdl.compute.engine.ComputeEngine`), ``last`` ends a frame."""
    return data.StructLayout({"data": 32, "last": 1})


def _sat_add(m, counter, inc):
    total = Signal(34)
    m.d.comb += total.eq(counter + inc)
    m.d.sync += counter.eq(Mux(total > _MAX32, _MAX32, total))


class TokenPicker(wiring.Component):
    """Argmax / pairs picks over frames of the engine's ``sp_out`` stream (module docstring: the contract).

    Parameters: ``slots`` (1..16, default 4): result slots; ``arm_depth`` (1..64, default 4):
    picks that may wait in the queue. Members: ``s_axis`` (In), ``m_axis`` (Out) stream
    :func:`word_layout`; ``arm`` (In stream :func:`arm_layout`); ``tokens``, ``values`` (Out
    ``ArrayLayout(32, slots)``); ``picks``, ``errors`` (Out 32); ``error_cause`` (Out 2,
    :class:`PickError`); ``clear`` (In 1).
    """

    def __init__(self, slots: int = 4, arm_depth: int = 4):
        check_params(slots, arm_depth)
        self.slots, self.arm_depth = slots, arm_depth
        super().__init__({
            "s_axis": In(stream.Signature(word_layout())),
            "m_axis": Out(stream.Signature(word_layout())),
            "arm": In(stream.Signature(arm_layout())),
            "tokens": Out(data.ArrayLayout(32, slots)),
            "values": Out(data.ArrayLayout(32, slots)),
            "picks": Out(32),
            "errors": Out(32),
            "error_cause": Out(2),
            "clear": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        P = self.slots
        alay = arm_layout()
        s, o, a = self.s_axis, self.m_axis, self.arm
        clear = self.clear

        # ---- pass-through ----
        m.d.comb += [o.valid.eq(s.valid), o.payload.eq(s.payload), s.ready.eq(o.ready)]
        xfer = Signal()
        m.d.comb += xfer.eq(s.valid & s.ready)
        word = s.payload
        frame = Signal(32)           # frames whose last word passed since clear
        j = Signal(32)               # words of the current frame passed so far
        with m.If(xfer):
            m.d.sync += j.eq(Mux(word.last, 0, j + 1))
            with m.If(word.last):
                m.d.sync += frame.eq(frame + 1)

        # ---- the queue of picks still to do (good ones only) ----
        q = fifo.SyncFIFO(width=alay.size, depth=self.arm_depth)
        m.submodules.q = ResetInserter(clear)(q)
        head = data.View(alay, q.r_data)

        # ---- the head pick: accumulate its window, resolve at its frame's last word ----
        have = Signal()              # a candidate was taken (a window word; PAIRS: a whole pair)
        best = Signal(32)            # the window's max so far (compared signed)
        tok = Signal(32)
        pval = Signal(32)            # PAIRS: the value word of the pair under way
        pend = Signal()              # PAIRS: pval holds a value word seen by this pick
        active = q.r_rdy & (head.frame == frame)
        late = q.r_rdy & (head.frame < frame)        # only if armed as its frame ended
        d = Signal(32)
        m.d.comb += d.eq(j - head.skip)
        in_win = (j >= head.skip) & (d < head.n)
        pairs = head.mode == PickMode.PAIRS
        # the candidate this word offers: ARGMAX (word, its index) on every window word; PAIRS
        # (the pending value, this id word) on a pair's second word, if its first was seen
        offer = Signal()
        cand = Signal(32)
        m.d.comb += [offer.eq(active & xfer & in_win & Mux(pairs, d[0] & pend, 1)),
                     cand.eq(Mux(pairs, pval, word.data))]
        take = Signal()
        m.d.comb += take.eq(offer & (~have | (cand.as_signed() > best.as_signed())))
        n_best, n_tok, n_have = Signal(32), Signal(32), Signal()
        m.d.comb += [n_best.eq(Mux(take, cand, best)), n_tok.eq(Mux(take, Mux(pairs, word.data, d), tok)),
                     n_have.eq(have | take)]
        with m.If(active & xfer & in_win & pairs):
            m.d.sync += [pval.eq(word.data), pend.eq(~d[0])]
        ends = active & xfer & word.last
        complete = Signal()
        m.d.comb += complete.eq((j + 1) >= (head.skip + head.n))    # 33-bit compare
        pop = Signal()
        ok = Signal()
        head_cause = Signal(2)
        m.d.comb += [pop.eq(ends | late), ok.eq(ends & complete & n_have),
                     head_cause.eq(Mux(late, PickError.MISSED,
                                       Mux(~complete, PickError.SHORT, PickError.MISSED))),
                     q.r_en.eq(pop)]
        with m.If(active & xfer):
            m.d.sync += [best.eq(n_best), tok.eq(n_tok), have.eq(n_have)]
        with m.If(pop):
            m.d.sync += [best.eq(0), tok.eq(0), have.eq(0), pend.eq(0)]
        with m.If(ok):
            with m.Switch(head.slot):
                for i in range(P):
                    with m.Case(i):
                        m.d.sync += [self.tokens[i].eq(n_tok), self.values[i].eq(n_best)]

        # ---- arms: refused / missed ones are counted at once, good ones queued ----
        nxt = Signal(33)             # frame after the last queued pick's frame
        floor = Signal(33)
        m.d.comb += floor.eq(Mux(nxt > frame, nxt, frame))
        arm_in = a.valid & a.ready
        bad = (a.payload.slot >= P) | (a.payload.n == 0) | ((a.payload.mode == PickMode.PAIRS) & a.payload.n[0])
        missed = a.payload.frame < floor
        arm_fail = Signal()
        arm_cause = Signal(2)
        m.d.comb += [a.ready.eq(q.w_rdy & ~clear),
                     q.w_data.eq(a.payload), q.w_en.eq(arm_in & ~bad & ~missed),
                     arm_fail.eq(arm_in & (bad | missed)),
                     arm_cause.eq(Mux(bad, PickError.BAD_ARM, PickError.MISSED))]
        with m.If(q.w_en):
            m.d.sync += nxt.eq(a.payload.frame + 1)

        # ---- counters; error_cause: the first failure detected (the older one first) ----
        head_fail = pop & ~ok
        _sat_add(m, self.picks, ok)
        _sat_add(m, self.errors, head_fail + arm_fail)
        with m.If(self.error_cause == PickError.NONE):
            with m.If(head_fail):
                m.d.sync += self.error_cause.eq(head_cause)
            with m.Elif(arm_fail):
                m.d.sync += self.error_cause.eq(arm_cause)

        with m.If(clear):
            m.d.sync += [frame.eq(0), j.eq(0), nxt.eq(0), have.eq(0), best.eq(0), tok.eq(0), pend.eq(0),
                         self.picks.eq(0), self.errors.eq(0), self.error_cause.eq(0),
                         self.tokens.eq(0), self.values.eq(0)]
        return m
