"""Executors of ``host.program.Program``: ``golden`` (one process, cooperative) and ``dist``
(torch.distributed, one gloo rank per node). Both run ``runtime.NodeRuntime`` per node and
return an ``ExecResult``."""
from .result import ExecResult  # noqa: F401

BACKENDS = ("golden", "dist")


def run(program, int_model, prompt, backend: str = "golden", **kw) -> ExecResult:
    """Run ``program`` on ``backend`` ('golden' | 'dist')."""
    if backend == "golden":
        from .golden import run_golden
        return run_golden(program, int_model, prompt, **kw)
    if backend == "dist":
        from .dist import run_dist
        return run_dist(program, int_model, prompt, **kw)
    raise ValueError(f"backend={backend!r}, expected one of {BACKENDS}")
