"""MARS by search: the paper's objective (eq. 26) minimised over chunk size B, replica factors
r_i(c) and placement P_i(c), each candidate compiled to a ``Program`` and timed by the calibrated
performance model (``host.perfmodel.predict``: its TTFT is the objective, which eq. 26's
sum of max(T_comp, T_comm) approximates).

Candidates (:func:`candidates`), in stages so the number of plans timed stays small:

1. chunk-per-node MARS (``host.mars.plan``): every placement of ``host.mars.PLACEMENTS``, with and
   without ``partial_first``, at each chunk size (the baselines' piece, twice it, half it when that
   is whole blocks, and eq. 8's choice), with eq. 16 replication under the eq. 14 break-even;
2. the best ``refine`` of stage 1 again with replica caps r(c) <= 2 and r(c) = 1, and with the old
   replication rule (eq. 14 off); then smaller prefill groups (slow links and fast engines: fewer
   nodes, less traffic, as PD's prefill pool): the best plan so far on every group of 1..N-1
   nodes, and the next ``refine - 1`` distinct plans and the eq. 14 default (``MarsParams(chunk=
   base_chunk, eq14=True)``) on the groups of :func:`group_sizes` (1, 2, 3, 4, 6, 8, 12, ... < N),
   at most ``N - 1 + refine * len(group_sizes(N))`` plans (:func:`_group_stage`), and when a
   group plan is the best so far, its replica caps and eq. 14 variants (5 more);
3. streaming MARS: r = 1 for every block, each chunk split over all nodes with zigzag pairing (node
   j computes pieces j and 2N-1-j; the history streams around the ring, ``host.baselines``), at the
   piece sizes of stage 1 — zigzag's dataflow is MARS with r = 1 and that placement — and once with
   contiguous pieces (ring's split) at the baselines' piece.

Constraints (27)-(29) are enforced by the planners at planning time: a candidate they refuse
(S_node, the propagation buffer, a prompt that cannot fit) is skipped and counted. Every
candidate ends prefill in the owner-only layout. ``search`` returns the fastest Program (schedule
``mars``), its prediction, and a report: every candidate's TTFT (or why it was refused), the
winner's per-node compute and communication cycles, and the time the search took.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from . import baselines, mars, perfmodel_coarse
from .config import ClusterConfig, HardwareConfig, ModelConfig
from .tp import DEFAULT_TILE

__all__ = ["Candidate", "SearchResult", "candidates", "group_sizes", "search"]


@dataclass(frozen=True)
class Candidate:
    """One plan of the search: ``kind`` ``"mars"`` (``host.mars.plan`` with ``params``) or
    ``"stream"`` (r = 1, chunks of ``piece`` x 2N tokens split with zigzag pairing, or of ``piece``
    x N tokens in contiguous pieces without ``zigzag``)."""
    kind: str
    params: mars.MarsParams | None = None
    piece: int | None = None
    zigzag: bool = True

    def label(self) -> str:
        if self.kind == "stream":
            return f"stream {'zigzag' if self.zigzag else 'contiguous'} piece={self.piece}"
        p = self.params
        return (f"mars {p.placement}{'' if p.prefill_nodes is None else f' on {p.prefill_nodes} nodes'}{'+partial_first' if p.partial_first else ''} B={p.chunk} "
                f"cap={p.replica_cap} eq14={'on' if p.eq14 else 'off'}")


@dataclass
class SearchResult:
    program: object                   # the chosen Program (schedule "mars")
    prediction: object                # its perfmodel.Prediction
    candidate: Candidate
    report: list                      # per candidate: {"candidate", "ttft_cycles" | "refused", ...}
    skipped: int                      # candidates refused by (27)-(29) / eq. 5
    seconds: float
    why: dict = field(default_factory=dict)

    def summary(self) -> dict:
        """JSON-ready: the chosen plan, its predicted figures and why it won."""
        timed = sorted((r for r in self.report if "ttft_cycles" in r), key=lambda r: r["ttft_cycles"])
        return {"chosen": self.candidate.label(), "ttft_cycles": self.prediction.ttft_cycles,
                "candidates": len(self.report), "skipped": self.skipped, "search_seconds": round(self.seconds, 2),
                "runner_up": timed[1] if len(timed) > 1 else None, "why": self.why, "report": self.report}


def _chunks(base: int, block: int, eq8: int | None) -> list:
    out = [base, 2 * base]
    if base // 2 >= block and (base // 2) % block == 0:
        out.append(base // 2)
    if eq8:
        out.append(eq8)
    return sorted({b for b in out if b >= block and b % block == 0})


def candidates(chunks, placements=mars.PLACEMENTS) -> list:
    """Stage 1: chunk-per-node MARS over ``placements`` x partial_first x ``chunks`` (eq. 14 on)."""
    return [Candidate("mars", mars.MarsParams(chunk=B, placement=pl, partial_first=pf, eq14=True))
            for B in chunks for pl in placements for pf in (False, True)]


def _refinements(best: Candidate) -> list:
    p = best.params
    return [Candidate("mars", replace(p, replica_cap=cap, eq14=e14)) for cap in (None, 2, 1) for e14 in (True, False)
            if (cap, e14) != (p.replica_cap, p.eq14)]


def group_sizes(nodes: int) -> list:
    """Prefill group sizes below ``nodes`` the group stage tries for its other base plans: 1, 2, 3
    and then every power of two and 1.5 times one (4, 6, 8, 12, 16, 24, ...)."""
    out, p = {1, 2, 3}, 4
    while p < nodes:
        out |= {p, p * 3 // 2}
        p *= 2
    return sorted(k for k in out if k < nodes)


def _group_stage(timed, nodes: int, base_chunk: int, refine: int) -> list:
    """Candidates of the prefill-group stage from the plans ``timed`` so far ([(key, i, Candidate)]):
    the best MARS plan on all nodes on every group of 1..N-1 nodes, the next ``refine - 1`` distinct
    ones (another TTFT or wire bytes: ``partial_first`` is often the same plan) and the eq. 14
    default on the groups of :func:`group_sizes` (one base plan is not enough: the best plan on N
    nodes need not be the best on fewer)."""
    bases, seen = [], set()
    for key, _, c in sorted(timed, key=lambda x: x[:2]):
        if c.kind == "mars" and c.params.prefill_nodes is None and key not in seen:
            bases.append(c.params)       # distinct plans: equal (TTFT, wire bytes) is the same plan
            seen.add(key)
        if len(bases) == max(1, refine):
            break
    default = mars.MarsParams(chunk=base_chunk, eq14=True)
    if default not in bases:
        bases.append(default)
    out = [Candidate("mars", replace(bases[0], prefill_nodes=k)) for k in range(1, nodes)]
    out += [Candidate("mars", replace(p, prefill_nodes=k)) for p in bases[1:] for k in group_sizes(nodes)]
    return out


def _build(cand: Candidate, model, cluster, hw, prompt_len, max_new_tokens, kv_bits, block, w_group, w_tile):
    if cand.kind == "mars":
        return mars.plan(model, cluster, hw, prompt_len, max_new_tokens, kv_bits=kv_bits, block=block,
                         params=cand.params, w_group=w_group, w_tile=w_tile)
    split = 2 * cluster.nodes if cand.zigzag else cluster.nodes
    prog = baselines.ring(model, cluster, hw, prompt_len, max_new_tokens, chunk=split * cand.piece, kv_bits=kv_bits,
                          block=block, _zig=cand.zigzag, w_group=w_group, w_tile=w_tile)
    prog.schedule = "mars"
    prog.stats["streaming"] = True
    return prog


def _per_chunk(prog, pred) -> list:
    """Per prefill unit (chunk) of the winner, over every node: its token range, the nodes that
    spent engine time on it, its compute cycles (T_comp: projection, attention, fold) and its
    engine cycles of communication (T_comm: its KV sends and installs) (``Prediction.unit_busy``)."""
    out = []
    for u, (t0, t1) in enumerate(prog.units):
        got = [(n, nb[u]) for n, nb in enumerate(pred.unit_busy) if u in nb]
        out.append({"unit": u, "tokens": [t0, t1], "nodes": [n for n, _ in got],
                    "t_comp_cycles": round(sum(c for _, (c, _m) in got)),
                    "t_comm_cycles": round(sum(m for _, (_c, m) in got))})
    return out


def _rescreen(timed, k: int, report: list, build, exact, say=None):
    """The screened search's last stage: the best ``k`` distinct MARS plans by the coarse model
    (``timed``: [(key, i, Candidate)]) and every streaming plan, rebuilt (``build``) and timed by
    the exact model (``exact``); their report entries gain ``ttft_cycles``. Returns the best as
    ``search``'s ``best`` (key, candidate, program, prediction)."""
    from .perfmodel import compute_only
    picked, seen = [], set()
    for key, i, c in sorted(timed, key=lambda x: x[:2]):
        if c.kind == "stream" or (len(seen) < k and key not in seen):
            picked.append((i, c))
            if c.kind == "mars":
                seen.add(key)
    best = None
    recs = {r["candidate"]: r for r in report}
    for i, c in picked:
        prog = build(c)
        pred = exact(prog)
        recs[c.label()].update(ttft_cycles=round(pred.ttft_cycles), compute_bound_cycles=round(compute_only(pred)))
        if say:
            say(f"mars_search: {c.label()}: TTFT {round(pred.ttft_cycles)} cycles (exact)")
        key = (pred.ttft_cycles, pred.wire_bytes)
        if best is None or key < best[0]:
            best = (key, c, prog, pred)
    return best


def _why(prog, pred) -> dict:
    """Per node of the winner: compute cycles (T_comp), engine cycles spent on communication
    (T_comm: sends and installs), the rest of the time to first token (waits), and the plan's
    chunking; per chunk (prefill unit) its T_comp and T_comm (:func:`_per_chunk`)."""
    comm = [b - c for b, c in zip(pred.engine_busy, pred.compute_busy)]
    out = {"t_comp_cycles": [round(c) for c in pred.compute_busy], "t_comm_cycles": [round(c) for c in comm],
           "per_chunk": _per_chunk(prog, pred),
           "wait_cycles_before_ttft": [round(max(0.0, pred.ttft_cycles - b)) for b in pred.engine_busy],
           "wire_bytes": round(pred.wire_bytes), "units": len(prog.units),
           "unit_tokens": max(t1 - t0 for t0, t1 in prog.units)}
    plan = prog.stats.get("plan")
    if plan is not None:
        out["replicas"] = sum(len(h) for h in plan.holders)
        out["fetches"] = len(plan.fetches)
    return out


def search_sim_node(model: ModelConfig, cluster: ClusterConfig, prompt_len: int, max_new_tokens: int = 0, *,
                    base_chunk: int = 16, block: int = 16, logits: str = "all", screen: bool = False) -> SearchResult:
    """:func:`search` for the simulated node (``host.scenario.sim_hardware()``, the simulated
    node's calibration, the RTL executor's 64-cycle host step), as ``mcf run --mars-search`` and
    ``scripts/bench_prefill.py`` plan MARS for the Verilated cluster; the chosen Program carries the
    search's summary (with its predicted TTFT) in ``stats["search"]``."""
    from .perfmodel import load_params
    from .scenario import sim_hardware
    res = search(model, cluster, sim_hardware(), prompt_len, max_new_tokens, perf=load_params(),
                 base_chunk=base_chunk, block=block, predict_chunk=64, logits=logits, screen=screen)
    summary = res.summary()
    summary["predicted_ttft_cycles"] = round(res.prediction.ttft_cycles)
    res.program.stats["search"] = summary
    return res


def search(model: ModelConfig, cluster: ClusterConfig, hw: HardwareConfig, prompt_len: int,
           max_new_tokens: int = 0, *, perf: dict, base_chunk: int = 16, kv_bits: int = 8, block: int = 16,
           placements=mars.PLACEMENTS, refine: int = 2, streaming: bool = True, predict_chunk: int = 1,
           w_group=None, w_tile: int = DEFAULT_TILE, logits: str = "all", group: int | None = None,
           screen: bool = False, screen_k: int = 4, say=None) -> SearchResult:
    """The fastest plan among :func:`candidates` (module docstring) for ``perf`` (the performance
    model's parameters, ``host.perfmodel``; ``predict_chunk`` its host step, 1 = ideal host).
    ``base_chunk``: the piece size the baselines use (MARS's chunk in ``host.scenario``). Raises
    ValueError when every candidate is refused (the first refusal's message). ``logits``: every
    candidate's ``Program.logits`` (the rows the head runs on). ``group``: search only plans that
    prefill on nodes 0..group-1 (every MARS candidate's ``prefill_nodes``; no group stage, no
    streaming plans): the search restricted to a smaller group of the same cluster. ``screen``: time
    every candidate by the coarse model (``perfmodel_coarse.screen``: one train per link and KV
    unit, a few layers extrapolated), then the best ``screen_k`` distinct MARS plans and every
    streaming plan (the ring and zigzag dataflows) again by the exact model; the winner and its
    prediction are the exact model's (:func:`_rescreen`)."""
    from .perfmodel import compute_only, predict
    t0 = time.time()
    eq8 = None
    try:
        eq8 = mars.choose_chunk(model, cluster, hw, prompt_len, block, kv_bits)["B"]
    except ValueError:
        pass
    chunks = _chunks(base_chunk, block, eq8)
    report, best, first_err, timed = [], None, None, []

    def run(cand):
        nonlocal best, first_err
        if group is not None and cand.kind == "mars":
            cand = Candidate("mars", replace(cand.params, prefill_nodes=group))
        try:
            prog = replace(_build(cand, model, cluster, hw, prompt_len, max_new_tokens, kv_bits, block, w_group, w_tile),
                           logits=logits)
        except ValueError as exc:
            first_err = first_err or exc
            report.append({"candidate": cand.label(), "refused": str(exc)})
            return None
        if screen:
            key = perfmodel_coarse.screen(prog, perf, chunk=predict_chunk)
            rec = {"candidate": cand.label(), "screen_ttft_cycles": round(key[0]), "wire_bytes": round(key[1])}
        else:
            pred = predict(prog, perf, chunk=predict_chunk)
            key = (pred.ttft_cycles, pred.wire_bytes)
            rec = {"candidate": cand.label(), "ttft_cycles": round(pred.ttft_cycles),
                   "compute_bound_cycles": round(compute_only(pred)), "wire_bytes": round(pred.wire_bytes)}
        report.append(rec)
        if say:
            say(f"mars_search: {rec['candidate']}: TTFT {rec.get('ttft_cycles', rec.get('screen_ttft_cycles'))} cycles"
                f"{' (coarse)' if screen else ''}")
        timed.append((key, len(timed), cand))
        if best is None or key < best[0]:
            best = (key, cand, prog, None if screen else pred)
        return key

    stage1 = [(run(c), c) for c in candidates(chunks, placements)]
    ranked = sorted(((p, i, c) for i, (p, c) in enumerate(stage1) if p is not None))
    for _, _, c in ranked[:refine]:
        for r in _refinements(c):
            run(r)
    for c in _group_stage(timed, cluster.nodes, base_chunk, refine) if group is None else ():
        run(c)                                                           # smaller prefill groups
    if group is None and best and best[1].kind == "mars" and best[1].params.prefill_nodes:
        for r in _refinements(best[1]):                                  # the best group's caps, eq. 14
            run(r)
    if streaming and group is None:
        for piece in chunks:
            run(Candidate("stream", piece=piece))
        run(Candidate("stream", piece=base_chunk, zigzag=False))
    if best is None:
        raise ValueError(f"mars_search: every candidate was refused; the first: {first_err}")
    if screen:
        best = _rescreen(timed, screen_k, report, lambda c: replace(
            _build(c, model, cluster, hw, prompt_len, max_new_tokens, kv_bits, block, w_group, w_tile), logits=logits),
            lambda prog: predict(prog, perf, chunk=predict_chunk), say)
    _, cand, prog, pred = best
    skipped = sum(1 for r in report if "refused" in r)
    return SearchResult(prog, pred, cand, report, skipped, time.time() - t0, _why(prog, pred))
