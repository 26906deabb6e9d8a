"""host.prefill_fold: whatever order the blocks arrive in and whenever their units leave, the steps
compute every block once, read only partials that exist, and fold them in ascending order
through at most ``slots`` run slots plus the parked ones -- evaluated symbolically (a partial is
the tuple of blocks folded into it; a FOLD must see consecutive ascending runs, an ATT acc a
running fold that ends just before its block), with the in-place ATT acc (the default) or
without it."""
from hypothesis import given, settings, strategies as st
import pytest

from mcf_fpga.host.executors.rtl_memory import Arena
from mcf_fpga.host.prefill_fold import MAX_FOLD_SLOTS, Att, Fold, PrefillFold, fold_slots

W = 10          # words per slot


def run(n_blocks, slots, arrivals, leaves, acc_att=True):
    """``arrivals``: groups of blocks added together (one attend op each); ``leaves``: after
    arrival group i, the keys (blocks) that leave. Returns (steps, final value, words in use)."""
    sp = Arena("sp", 10_000)
    f = PrefillFold(n_blocks, slots, W, sp, acc_att=acc_att)
    mem, steps, out, present = {}, [], [], set()

    def apply(new):
        for s in new:
            steps.append(s)
            if isinstance(s, Att):
                assert s.key in present, f"ATT of block {s.block} after its unit left"
                if s.acc:
                    assert mem[s.dst] == tuple(range(s.block)), f"ATT acc of {s.block} onto {mem[s.dst]}"
                    mem[s.dst] += (s.block,)
                else:
                    mem[s.dst] = (s.block,)
            else:
                parts = [mem[s.a + j * W] for j in range(s.nblk)]
                seq = sum(parts, ())
                assert list(seq) == list(range(seq[0], seq[0] + len(seq))), f"FOLD out of order: {parts}"
                if s.dst is None:
                    out.append(seq)
                else:
                    mem[s.dst] = seq
    for i, group in enumerate(arrivals):
        for b in group:
            present.add(b)
            f.add(b, b)
        apply(f.advance())
        for k in leaves.get(i, ()):
            if k in present:
                apply(f.settle({k}))
                present.discard(k)
    apply(f.finish())
    return steps, out, sp


@st.composite
def schedules(draw):
    n = draw(st.integers(1, 24))
    order = draw(st.permutations(range(n)))
    cuts = sorted(draw(st.sets(st.integers(1, max(n - 1, 1)), max_size=n)))
    groups = [list(order[a:b]) for a, b in zip([0] + cuts, cuts + [n]) if a < b]
    leaves = {}
    for i in range(len(groups)):
        seen = [b for g in groups[:i + 1] for b in g]
        leaves[i] = draw(st.sets(st.sampled_from(seen))) if seen else set()
    slots = 1 if n == 1 else draw(st.integers(2, MAX_FOLD_SLOTS))
    return n, slots, groups, leaves, draw(st.booleans())


@settings(max_examples=300, deadline=None)
@given(schedules())
def test_any_arrival_order_folds_ascending_once(sched):
    n, slots, groups, leaves, acc_att = sched
    steps, out, sp = run(n, slots, groups, leaves, acc_att)
    assert acc_att or not any(isinstance(s, Att) and s.acc for s in steps)
    assert out == [tuple(range(n))]                          # one final fold of every block, in order
    assert sorted(s.block for s in steps if isinstance(s, Att)) == list(range(n))   # each block once
    assert all(s.nblk <= slots for s in steps if isinstance(s, Fold))
    assert sp.used == {}                                     # every slot freed at the end


def test_in_order_arrivals_fold_in_place():
    """ATT acc: block 0 into slot 0, then every later block merged into it in place; the only
    FOLD is the final one (one partial, finalised)."""
    steps, out, _ = run(10, 4, [[b] for b in range(10)], {})
    assert [(s.block, s.acc) for s in steps if isinstance(s, Att)] == [(0, False)] + [(b, True) for b in range(1, 10)]
    assert len({s.dst for s in steps if isinstance(s, Att)}) == 1
    assert [(f.nblk, f.dst) for f in steps if isinstance(f, Fold)] == [(1, None)]
    # a block that comes early sits in the window; the run goes on in place once the window is folded
    steps, out, _ = run(6, 3, [[0], [2], [1], [3], [4], [5]], {})
    assert [(s.block, s.acc) for s in steps if isinstance(s, Att)] == \
        [(0, False), (2, False), (1, False), (3, True), (4, True), (5, True)]
    assert [f.nblk for f in steps if isinstance(f, Fold)] == [3, 1]


def test_in_order_arrivals_never_park_and_fold_every_slots_minus_one():
    steps, out, _ = run(10, 4, [[b] for b in range(10)], {}, acc_att=False)
    folds = [s for s in steps if isinstance(s, Fold)]
    # slots 0..3 (4 partials), then the running fold + 3 new ones; the last fold is final
    assert [f.nblk for f in folds] == [4, 4, 4]
    assert folds[-1].dst is None and all(f.dst is not None for f in folds[:-1])
    assert all(s.dst < 10_000 for s in steps if isinstance(s, Att))


def test_descending_arrivals_wait_until_block_0_unless_their_unit_leaves():
    # ring-like: blocks arrive 3, 2, 1, 0; nothing leaves -> 3 and 2 wait until the window of two
    # slots reaches them; 1 and 0 are computed as they come
    steps, out, _ = run(4, 2, [[3], [2], [1], [0]], {})
    assert [s.block for s in steps if isinstance(s, Att)] == [1, 0, 2, 3]
    # as many slots as blocks: every block computed as it comes, one final FOLD (no copies)
    steps, out, _ = run(4, 4, [[3], [2], [1], [0]], {0: {3}, 1: {2}})
    assert [s.block for s in steps if isinstance(s, Att)] == [3, 2, 1, 0]
    assert [(f.nblk, f.dst) for f in steps if isinstance(f, Fold)] == [(4, None)]
    # block 3's unit leaves right after it arrived: it is computed at once (parked), then copied
    steps, out, _ = run(4, 2, [[3], [2], [1], [0]], {0: {3}})
    atts = [s.block for s in steps if isinstance(s, Att)]
    assert atts[0] == 3 and sorted(atts) == [0, 1, 2, 3]
    assert any(isinstance(s, Fold) and s.nblk == 1 and s.dst is not None for s in steps)   # the copy
    assert out == [(0, 1, 2, 3)]


def test_bad_blocks_are_refused():
    f = PrefillFold(3, 2, W, Arena("sp", 100))
    f.add(0, "u")
    with pytest.raises(ValueError, match="attended twice"):
        f.add(0, "u")
    with pytest.raises(ValueError, match="outside"):
        f.add(3, "u")
    with pytest.raises(ValueError, match=r"blocks \[1, 2\] missing"):
        f.finish()
    with pytest.raises(ValueError, match="2 slots"):
        PrefillFold(3, 1, W, Arena("sp", 100))


@pytest.mark.parametrize("slot_words, depth, nb, want", [
    (100, 100_000, 50, 8), (100, 100_000, 3, 3), (100, 100_000, 1, 1),
    (8320, 32768, 10, 2),        # a quarter of the arena holds less than one slot: the minimum, 2
    (1000, 16_000, 10, 4)])
def test_fold_slots(slot_words, depth, nb, want):
    assert fold_slots(slot_words, depth, nb) == want
