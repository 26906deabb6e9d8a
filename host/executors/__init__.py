"""Executors of ``host.program.Program``: ``golden`` (one process, cooperative) and ``dist``
(torch.distributed, one gloo rank per node). Both run ``runtime.NodeRuntime`` per node and
return an ``ExecResult``."""
from .result import ExecResult  # noqa: F401
