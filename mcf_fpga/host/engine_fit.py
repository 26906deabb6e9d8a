"""Whether a model shape fits a node's compute engine (``hdl.compute.engine.ComputeEngine``).

The engine's parameters (``NodeConfig.engine``) fix what it can compute: the attention unit's
head width, the GEMM array's scale group, input length and tile rows, the vector unit's row width.
An instruction outside them is refused by the engine at run time (its error flag); this checks
the model against them before a program is compiled or a node is built, naming the model's
dimension and the engine's limit. The per-instruction limits that depend on a program's row
counts (``t_max``, ``nq_max``, ``blk_max``, KV and scratch sizes) are the compiler's
(``host.compiler.NodeCompiler``).
"""
from __future__ import annotations

__all__ = ["check_engine_fits"]


def check_engine_fits(cfg, engine: dict, node: str = "the node") -> None:
    """Raise ValueError ``the model's DIM=... does not fit the engine of {node}: LIMIT`` if model ``cfg`` (a ``golden.config.ModelConfig``)
    does not fit ``engine`` (the ``NodeConfig.engine`` dict): the attention unit computes exactly
    ``head_dim``; the GEMM's scale ``group`` must divide the model's INT4 ``group_size`` (a finer
    group runs the coarser one exactly, ``golden.int_model.QuantModel.regroup``); every GEMM input
    (hidden_size, num_heads*head_dim, intermediate_size) is at most ``pk * kc_max`` and every
    vector row at most ``d_max``; every GEMM output (vocab_size, hidden_size, num_heads*head_dim,
    num_kv_heads*head_dim, intermediate_size) is whole tiles of ``pn`` rows."""
    e = engine
    where = f"the engine of {node}"
    if cfg.head_dim != e["head_dim"]:
        raise ValueError(f"the model's head_dim={cfg.head_dim} does not fit {where}: its attention unit "
                         f"computes head_dim={e['head_dim']} exactly")
    if cfg.group_size % e["group"]:
        raise ValueError(f"the model's INT4 weight group_size={cfg.group_size} does not fit {where}: not a "
                         f"multiple of its GEMM group={e['group']}")
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    k_max = e["pk"] * e["kc_max"]
    for name, k in (("hidden_size", cfg.hidden_size), ("num_heads*head_dim", q),
                    ("intermediate_size", cfg.intermediate_size)):
        if k > k_max:
            raise ValueError(f"the model's {name}={k} does not fit {where}: GEMM inputs are at most "
                             f"pk*kc_max={k_max}")
        if k > e["d_max"]:
            raise ValueError(f"the model's {name}={k} does not fit {where}: vector rows are at most "
                             f"d_max={e['d_max']}")
    for name, n in (("vocab_size", cfg.vocab_size), ("hidden_size", cfg.hidden_size),
                    ("num_heads*head_dim", q), ("num_kv_heads*head_dim", kv),
                    ("intermediate_size", cfg.intermediate_size)):
        if n % e["pn"]:
            raise ValueError(f"the model's {name}={n} does not fit {where}: GEMM outputs are whole tiles "
                             f"of pn={e['pn']} rows")
