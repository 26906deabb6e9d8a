"""The token picker's contract: pick modes, error causes and parameter limits.

What the hardware picker (:class:`hdl.token_picker.TokenPicker`), its golden model
(``golden.token_picker``) and the command streams (``PICK`` records) agree on.
"""
import enum

__all__ = ["PickError", "PickMode", "check_params", "MAX_SLOTS", "MAX_ARM_DEPTH"]

MAX_SLOTS = 16
MAX_ARM_DEPTH = 64


class PickError(enum.IntEnum):
    """``error_cause``: why the first failed pick failed (2 bits)."""
    NONE = 0      #: no failure since clear
    MISSED = 1    #: its frame had already passed (or saw none of its window: armed too late)
    SHORT = 2     #: its frame ended before word ``skip + n - 1``
    BAD_ARM = 3   #: ``slot >= slots``, ``n == 0``, or ``PAIRS`` with an odd ``n``


class PickMode(enum.IntEnum):
    """An arm's ``mode`` (1 bit): how the window's words are read."""
    ARGMAX = 0    #: ``n`` logits: the token is the index of the (first) signed maximum
    PAIRS = 1     #: ``n / 2`` pairs (value, id): the token is the id of the (first) pair of maximum value


def check_params(slots: int, arm_depth: int):
    """ValueError naming the field and its limit unless ``1 <= slots <= 16`` and
    ``1 <= arm_depth <= 64``."""
    if not isinstance(slots, int) or isinstance(slots, bool) or not 1 <= slots <= MAX_SLOTS:
        raise ValueError(f"slots must be an int in 1..{MAX_SLOTS}, got {slots!r}")
    if (not isinstance(arm_depth, int) or isinstance(arm_depth, bool)
            or not 1 <= arm_depth <= MAX_ARM_DEPTH):
        raise ValueError(f"arm_depth must be an int in 1..{MAX_ARM_DEPTH}, got {arm_depth!r}")
