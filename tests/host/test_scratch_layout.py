"""The compiler's fixed scratch (host.scratch_layout): three groups from word 0, regions stacked."""
import dataclasses

from mcf_fpga.host.scratch_layout import ExponentLayout, Region, ScratchLayout

GROUPS = (("rope", "x", "q", "k", "v", "q_rope", "k_rope"),
          ("attn", "attn_q", "o_proj", "h1", "x2", "gate", "up", "down"),
          ("x_final", "logits"))


def test_groups_stack_from_zero_and_share_the_scratch():
    T, D, I, H, Hk, d, V = 16, 64, 128, 4, 2, 16, 256
    s = ScratchLayout.for_rows(T, hidden=D, intermediate=I, q_width=H * d, kv_width=Hk * d, head_dim=d, vocab=V)
    assert {f.name for f in dataclasses.fields(s)} == {n for g in GROUPS for n in g}
    for group in GROUPS:
        regions = [getattr(s, n) for n in group]
        assert regions[0].base == 0
        assert all(a.end == b.base for a, b in zip(regions, regions[1:]))
    assert s.rope == Region(0, T * d // 2) and s.logits == Region(T * D, T * V)
    assert s.top == max(getattr(s, g[-1]).end for g in GROUPS) == 10240    # the micro model's (test_compiler)


def test_exponent_rows():
    e = ExponentLayout.for_rows(16)
    assert (e.x, e.attn, e.x2, e.swiglu) == (Region(0, 16), Region(16, 16), Region(32, 16), Region(48, 16))
    assert e.top == 64
