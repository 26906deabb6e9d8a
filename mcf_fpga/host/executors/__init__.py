"""Executors of ``host.program.Program``: ``golden`` (one process, cooperative), ``dist``
(torch.distributed, one gloo rank per node) — both run ``runtime.NodeRuntime`` per node and
return an ``ExecResult`` — ``rtl`` (the simulated hardware cluster, ``rtl.run_rtl``) and ``board``
(node boards through their DMA front-ends, ``board.run_board``; ``cluster="sim"``: simulated ones)."""
from .result import ExecResult  # noqa: F401

BACKENDS = ("golden", "dist", "rtl", "board")


def run(program, int_model, prompt, backend: str = "golden", **kw) -> ExecResult:
    """Run ``program`` on ``backend`` ('golden' | 'dist' | 'rtl' | 'board')."""
    if backend == "golden":
        from .golden import run_golden
        return run_golden(program, int_model, prompt, **kw)
    if backend == "dist":
        from .dist import run_dist
        return run_dist(program, int_model, prompt, **kw)
    if backend == "rtl":
        from .rtl import run_rtl
        return run_rtl(program, int_model, prompt, **kw)
    if backend == "board":
        from .board import run_board
        return run_board(program, int_model, prompt, **kw)
    raise ValueError(f"backend={backend!r}, expected one of {BACKENDS}")
