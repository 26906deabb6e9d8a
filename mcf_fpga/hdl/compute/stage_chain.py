"""A control record carried along a pipeline's register stages (the pipelined units' flags)."""
from amaranth import Cat, Signal

__all__ = ["StageChain"]


class StageChain:
    """``chain(prev)`` registers ``prev`` (a value of ``layout``) as the next stage, a register
    named ``fmt.format(i)`` (stages numbered from ``first``) with no enable, and returns it;
    ``append`` adds a stage registered by hand. ``any(*fields)``: is there a stage whose
    ``fields`` are all set (e.g. ``any("v", "last")``: a block's last key in flight)."""

    def __init__(self, m, layout, fmt, first=0):
        self.m, self.layout, self.fmt, self.first = m, layout, fmt, first
        self.stages = []

    def __call__(self, prev):
        r = Signal(self.layout, name=self.fmt.format(len(self.stages) + self.first))
        self.m.d.sync += r.eq(prev)
        self.stages.append(r)
        return r

    def append(self, r):
        self.stages.append(r)

    def any(self, *fields):
        def held(st):
            v = getattr(st, fields[0])
            for f in fields[1:]:
                v = v & getattr(st, f)
            return v
        return Cat(*[held(st) for st in self.stages]).any()
