"""The attention partial row: one query row's online-softmax state ``(m, l, o[0..d-1])`` as int32
words.

What the engine writes (ATT non-final) and reads and writes (FOLD), the NIC merges (a
``PARTIAL_STATE`` payload, ``SOFTMAX_MERGE``: int64 lanes), the host compiler lays out in the
scratchpad and golden's twins (``hdl.compute.program.partial_words`` / ``words_partial``) pack.
Every value is an int64 as two int32 words, low word first (the hi word sign-extended); the
values in order m, l, o[0], ..., o[d-1]:

=========================  ===========================================
words                      value
=========================  ===========================================
``M`` .. ``M + 1``         m, the row's running max (int32 in hardware)
``L`` .. ``L + 1``         l, the sum of exponentials (48-bit unsigned)
``O + 2i`` .. ``O + 2i+1`` o[i], the weighted value sum (48-bit signed)
=========================  ===========================================

so a row of head dimension ``d`` is ``2d + 4`` words (:attr:`PartialRow.words`).
"""
from dataclasses import dataclass

__all__ = ["PartialRow"]


@dataclass(frozen=True)
class PartialRow:
    """The word layout of one partial row of head dimension ``d`` (module docstring)."""
    d: int

    #: int32 words per value (an int64: lo word, hi word)
    VALUE_WORDS = 2
    #: word offset of m
    M = 0
    #: word offset of l
    L = M + VALUE_WORDS
    #: word offset of o[0] (= the words of m and l together)
    O = L + VALUE_WORDS

    @property
    def words(self) -> int:
        """int32 words of the row: ``2d + 4``."""
        return self.O + self.VALUE_WORDS * self.d

    def o_word(self, i: int) -> int:
        """Word offset of o[i] (its lo word)."""
        return self.O + self.VALUE_WORDS * i
