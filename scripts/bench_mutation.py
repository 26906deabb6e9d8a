#!/usr/bin/env python3
"""Mutation-testing benchmark: kill rate of the fast tests on the core modules.

Each mutant is one small change to one core module (an operator swapped, a comparison moved by
one, a constant +-1, a condition negated, a loop emptied, ...); it is *killed* when the module's
covering fast tests fail (or time out) with the mutant in place, and *survives* when they pass.
The kill rate is killed / (mutants tested - known equivalent mutants).

    scripts/bench_mutation.py                 # the default deterministic sample (< 1 hour here, 2 jobs)
    scripts/bench_mutation.py --sample 40     # 40 mutants per module
    scripts/bench_mutation.py --all           # every mutant (many hours on 2 cores)
    scripts/bench_mutation.py --module mcf_fpga/hdl/kvpool.py --all
    scripts/bench_mutation.py --report        # print the cached results, run nothing

Tool: cosmic-ray (pinned in pyproject's ``test`` extra), used as a library. Why cosmic-ray:

* it mutates the module file in place and runs an arbitrary test command per mutant, so each
  module gets only its covering fast tests (``MODULES`` below), run with ``-x`` under the ``ci``
  Hypothesis profile (without its shrink phase: scripts/mutation_profile.py; the examples, and
  so every verdict, are the ``ci`` profile's) and a per-mutant timeout (derived from the
  module's clean run);
* Amaranth hardware generators are plain Python to it: a mutant changes the elaborated
  hardware, and the Amaranth-simulator tests see the changed circuit;
* its results live in one sqlite session per module (``cosmic_ray.work_db``), which this
  script keys by a hash of (module source, covering test files and helpers, operator set,
  cosmic-ray version): a re-run reuses every result whose key did not change and tests only
  what changed (a new sample size adds only the new mutants).

mutmut 3 was the alternative; it rewrites every function of the tree into trampolines and runs
the tests in its own ``mutants/`` copy, selecting tests by coverage of the mutated function.
That is fast for pure Python, but here most mutated code runs at *elaboration* time inside
Amaranth (``elaborate`` methods, layouts, enums with shapes), which its function-level coverage
maps poorly, and its layout rules fight the repository's editable install and test helpers
that are imported by path. cosmic-ray's one-file-at-a-time model needed no change to the tree.

Operators (``OPERATORS``): the realistic subset -- comparison boundary and negation swaps
(== != , < <=, > >=, < >, <= >=), arithmetic / bitwise neighbours (+ -, * //, << >>, & | ^),
unary minus / not / ~ removal, ``not`` added to conditions, True/False, and/or,
break/continue, numbers +-1, a for loop run zero times. Left out: replacements whose
result is almost always a type error at elaboration (``x + y`` -> ``x ** y`` on Amaranth values),
``==`` -> ``is`` (equivalent on small ints), variable replacement/insertion and decorator
removal (noisy, mostly trivially killed).

Equivalent mutants: scripts/mutation_equivalent.toml, one ``[[equivalent]]`` table each, with
``module``, ``operator``, ``line`` (the original source line, stripped), ``mutated`` (the
mutated line, stripped) and ``reason`` (one line). Matching is by text (whitespace ignored), not
line number, so an entry survives edits elsewhere in the module. Equivalents are left out of the denominator.

Cache: ``~/.cache/mcf/mutation`` (``--cache``); ``<module>-<key>.sqlite`` per module plus
``<module>-<key>.baseline.json`` (the clean run's time). Progress goes to stderr. The last
line printed is the overall kill rate in percent, first.

Runs under ``nice -n 15`` with one test process at a time: the machine is shared.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: module -> the fast test files (or node ids) that cover it, fastest / most specific first
#: (``-x`` stops at the first failure, so a kill is usually cheap; a survivor pays for all).
R = "tests/hdl/nic/test_nic_routing.py::"
C = "tests/hdl/nic/test_nic_collectives.py::"
B = "tests/hdl/nic/test_nic_boundaries.py::"
E = "tests/host/executors/test_executors.py::"
T = "tests/host/test_traffic_cost.py::"
MODULES = {
    "mcf_fpga/golden/numerics.py": ["tests/golden/test_numerics_boundaries.py", "tests/golden/test_numerics.py"],
    "mcf_fpga/golden/attention.py": ["tests/golden/test_attention_traffic.py", "tests/golden/test_attention.py"],
    "mcf_fpga/golden/kvpool.py": ["tests/hdl/test_kvpool_interleavings.py", "tests/hdl/test_kvpool.py",
                        "tests/hdl/test_kvdir_table.py"],
    "mcf_fpga/golden/nic.py": ["tests/hdl/nic/test_nic_boundaries.py", C + "test_lane_width_follows_the_op",
                      C + "test_op_reduce_op_pairs", C + "test_golden_pools_are_separate_and_a_full_pool_waits",
                      C + "test_softmax_merge_is_ascending_src_fold", C + "test_engine_bit_identical_to_golden",
                      C + "test_all_to_all_split_like_golden", R + "test_every_fault_counted_and_valid_traffic_unaffected",
                      R + "test_invalidation_reaches_kv_pool_only"],
    "mcf_fpga/hdl/kvpool.py": ["tests/hdl/test_kvpool_interleavings.py", "tests/hdl/test_kvpool.py",
                     "tests/hdl/test_kvdir_table.py",
                     "tests/hdl/test_kvinstall.py::test_install_port_keeps_host_responses_unmixed"],
    "mcf_fpga/hdl/kvinstall.py": ["tests/hdl/test_kvinstall.py"],
    "mcf_fpga/golden/kvinstall.py": ["tests/hdl/test_kvinstall.py"],
    "mcf_fpga/hdl/kvdir_table.py": ["tests/hdl/test_kvdir_table.py", "tests/hdl/test_kvpool.py",
                           "tests/hdl/test_kvpool_interleavings.py"],
    "mcf_fpga/hdl/nic/ingress.py": ["tests/hdl/nic/test_nic_boundaries.py", "tests/hdl/nic/test_nic_config_edges.py",
                           R + "test_every_fault_counted_and_valid_traffic_unaffected",
                           R + "test_invalidation_reaches_kv_pool_only", R + "test_ring_node_routes_like_golden",
                           C + "test_all_to_all_split_like_golden"],
    "mcf_fpga/hdl/nic/route_table.py": ["tests/hdl/nic/test_route_table_banks.py", B + "test_route_id_boundary_directly",
                               B + "test_route_table_last_entry_and_reduction_root_fanin_edges",
                               R + "test_bank_flip_between_packets",
                               R + "test_route_write_beyond_table_changes_nothing",
                               R + "test_every_fault_counted_and_valid_traffic_unaffected"],
    "mcf_fpga/hdl/nic/reduce.py": [B + "test_every_reduce_op_lane_width_and_source_count", C + "test_engine_bit_identical_to_golden",
                          C + "test_engine_full_pool_waits_without_loss", C + "test_conflicting_contribution_dropped_and_counted",
                          C + "test_two_groups_in_flight"],
    "mcf_fpga/hdl/dma/common.py": ["tests/hdl/dma/test_dma_boundaries.py", "tests/hdl/dma/test_dma.py"],
    "mcf_fpga/hdl/packetizer.py": ["tests/hdl/test_packetizer.py", B + "test_route_id_boundary_directly",
                          B + "test_every_reduce_op_lane_width_and_source_count",
                          R + "test_every_fault_counted_and_valid_traffic_unaffected"],
    "mcf_fpga/host/mars.py": ["tests/host/test_mars_invariants.py", "tests/host/test_mars_plan.py"],
    "mcf_fpga/host/program.py": ["tests/host/test_mars_invariants.py", "tests/host/test_mars_plan.py",
                        E + "test_golden_executor_equals_int_model", E + "test_tp_stages_gather_to_int_model",
                        E + "test_tp_decode_golden_equals_int_model", T + "test_ring_traffic_is_eq_21",
                        T + "test_pd_hand_off_moves_every_block_once"],
}

#: files every covering test run depends on besides the listed tests (part of the cache key)
HELPERS = ["tests/conftest.py", "tests/hdl/nic/frames.py", "tests/hdl/nic/nic_tb.py",
           "tests/host/_common.py", "pyproject.toml"]

_CMP = ["Eq_NotEq", "NotEq_Eq", "Lt_LtE", "LtE_Lt", "Gt_GtE", "GtE_Gt", "Lt_Gt", "Gt_Lt", "LtE_GtE", "GtE_LtE"]
_BIN = ["Add_Sub", "Sub_Add", "Mul_Add", "Mul_FloorDiv", "FloorDiv_Mul", "Div_Mul", "Mod_FloorDiv",
        "LShift_RShift", "RShift_LShift", "BitOr_BitAnd", "BitAnd_BitOr", "BitXor_BitOr", "BitOr_BitXor",
        "Pow_Mul"]
OPERATORS = ([f"core/ReplaceComparisonOperator_{x}" for x in _CMP]
             + [f"core/ReplaceBinaryOperator_{x}" for x in _BIN]
             + ["core/ReplaceUnaryOperator_USub_UAdd", "core/ReplaceUnaryOperator_Delete_Not",
                "core/ReplaceUnaryOperator_Delete_Invert", "core/AddNot", "core/ReplaceTrueWithFalse",
                "core/ReplaceFalseWithTrue", "core/ReplaceAndWithOr", "core/ReplaceOrWithAnd",
                "core/ReplaceBreakWithContinue", "core/ReplaceContinueWithBreak", "core/NumberReplacer",
                "core/ZeroIterationForLoop"])

#: default sample: mutants per module, weighted by cost so the whole sample finishes within an
#: hour on the 2-core machine with ``--jobs 2`` (docs/mutation.md has the measured times). Idle
#: per-mutant times: 4-10 s for the golden and host modules, 15-35 s for the KV pool golden, the
#: DMA, route table, reduction engine and packetizer, ~75 s for mcf_fpga/hdl/kvpool.py and mcf_fpga/hdl/kvdir_table.py
#: (their tests simulate the whole pool) and 60-200 s for mcf_fpga/hdl/nic/ingress.py (whole NICs).
DEFAULT_PER_MODULE = 12
DEFAULT_SAMPLE = {"mcf_fpga/hdl/kvpool.py": 8, "mcf_fpga/hdl/kvdir_table.py": 8, "mcf_fpga/hdl/nic/ingress.py": 8}


def sample_size(module, args) -> int:
    """Mutants of ``module`` in this run's sample (``--all`` is handled by the caller)."""
    return args.sample if args.sample is not None else DEFAULT_SAMPLE.get(module, DEFAULT_PER_MODULE)


EQUIV_FILE = ROOT / "scripts" / "mutation_equivalent.toml"
DEFAULT_CACHE = Path.home() / ".cache" / "mcf" / "mutation"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def sha(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else str(p).encode())
        h.update(b"\0")
    return h.hexdigest()


def test_files(tests):
    return sorted({t.split("::")[0] for t in tests})


def module_key(module: str) -> str:
    import cosmic_ray
    ver = getattr(cosmic_ray, "__version__", None)
    if ver is None:
        from importlib.metadata import version
        ver = version("cosmic-ray")
    parts = [ver, ",".join(OPERATORS), module, (ROOT / module).read_bytes()]
    for t in test_files(MODULES[module]) + HELPERS:
        parts += [t, (ROOT / t).read_bytes() if (ROOT / t).exists() else b""]
    parts.append(" ".join(MODULES[module]))
    return sha(*parts)[:16]


def slug(module: str) -> str:
    return module.replace("/", "_").removesuffix(".py")


def test_command(module: str) -> str:
    tests = " ".join(MODULES[module])
    return (f"nice -n 15 {shlex.quote(sys.executable)} -m pytest -p no:xdist -p no:cacheprovider -x -q "
            f"--no-header -p scripts.mutation_profile {tests}")


def work_items(module: str):
    """Every mutant of ``module`` under OPERATORS, as cosmic-ray WorkItems (as ``cosmic-ray init``
    makes them, restricted to the operator subset)."""
    import uuid
    import cosmic_ray.plugins
    from cosmic_ray.ast import ast_nodes, get_ast_from_path
    from cosmic_ray.ast.ast_query import ASTQuery
    from cosmic_ray.work_item import MutationSpec, WorkItem
    tree = get_ast_from_path(Path(module))
    for name in OPERATORS:
        op = cosmic_ray.plugins.get_operator(name)()
        positions = ((node, s, e) for node in ast_nodes(tree) for s, e in op.mutation_positions(node))
        for occ, (node, s, e) in enumerate(positions):
            yield WorkItem.single(job_id=uuid.uuid4().hex, mutation=MutationSpec(
                module_path=module, operator_name=name, occurrence=occ, start_pos=s, end_pos=e,
                definition_name=ASTQuery(node).get_definition_name()))


def order_key(module, item, lines):
    """Deterministic sample order, stable under edits elsewhere in the module: a hash of the
    operator, the mutated line's text and the column."""
    m = item.mutations[0]
    line = lines[m.start_pos[0] - 1].strip() if m.start_pos[0] - 1 < len(lines) else ""
    return sha(module, m.operator_name, line, m.start_pos[1], m.end_pos[0] - m.start_pos[0])


def diff_lines(diff: str):
    """(original line, mutated line), stripped, of a one-mutation unified diff."""
    old = [ln[1:].strip() for ln in diff.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    new = [ln[1:].strip() for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    return " / ".join(old), " / ".join(new)


def load_equivalents():
    if not EQUIV_FILE.exists():
        return []
    data = tomllib.loads(EQUIV_FILE.read_text())
    out = data.get("equivalent", [])
    for e in out:
        missing = {"module", "operator", "line", "mutated", "reason"} - set(e)
        if missing:
            raise SystemExit(f"{EQUIV_FILE}: an entry lacks {sorted(missing)}: {e}")
    return out


def _norm(text: str) -> str:
    """Line text without whitespace (cosmic-ray's number replacer may add a space)."""
    return "".join(text.split())


def is_equivalent(equivs, module, operator, old, new):
    for e in equivs:
        if (e["module"] == module and e["operator"] == operator and _norm(e["line"]) == _norm(old)
                and _norm(e["mutated"]) == _norm(new)):
            return e
    return None


def baseline(module, db_path, env):
    """Run the covering tests on the clean module once per key; returns seconds (cached)."""
    path = db_path.with_suffix(".baseline.json")
    if path.exists():
        return json.loads(path.read_text())["seconds"]
    log(f"[{module}] clean run of {' '.join(MODULES[module])} ...")
    t0 = time.monotonic()
    p = subprocess.run(shlex.split(test_command(module)), cwd=ROOT, env=env, capture_output=True, text=True)
    dt = time.monotonic() - t0
    if p.returncode != 0:
        raise SystemExit(f"[{module}] the covering tests fail on the clean tree (rc {p.returncode}):\n"
                         f"{p.stdout[-3000:]}\n{p.stderr[-2000:]}")
    path.write_text(json.dumps({"seconds": dt, "command": test_command(module)}))
    log(f"[{module}] clean run: {dt:.1f} s")
    return dt


def run_module(module, args, equivs, env):
    """Test the sampled mutants of one module (cached ones are not re-run); returns a summary."""
    from cosmic_ray.mutating import mutate_and_test
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome
    key = module_key(module)
    db_path = args.cache / f"{slug(module)}-{key}.sqlite"
    lines = (ROOT / module).read_text().splitlines()
    fresh = not db_path.exists()
    with use_db(str(db_path), WorkDB.Mode.create) as db:
        if fresh or db.num_work_items == 0:
            db.clear()
            db.add_work_items(list(work_items(module)))
        items = sorted(db.work_items, key=lambda it: order_key(module, it, lines))
        done = {job_id: res for job_id, res in db.results}
        n = len(items) if args.all else min(len(items), sample_size(module, args))
        chosen = items[:n]
        todo = [it for it in chosen if it.job_id not in done]
        if todo and not args.report:
            secs = baseline(module, db_path, env)
            timeout = max(60.0, 4 * secs + 30)
            log(f"[{module}] {len(items)} mutants, sample {n}, {len(todo)} to run "
                f"(timeout {timeout:.0f} s, key {key})")
            for i, it in enumerate(todo, 1):
                m = it.mutations[0]
                t0 = time.monotonic()
                res = mutate_and_test(it.mutations, test_command(module), timeout)
                db.set_result(it.job_id, res)
                done[it.job_id] = res
                outcome = res.test_outcome.value if res.test_outcome else res.worker_outcome.value
                log(f"[{module}] {i}/{len(todo)} {m.operator_name.split('/')[-1]} line {m.start_pos[0]}: "
                    f"{outcome} ({time.monotonic() - t0:.1f} s)")
        elif todo:
            chosen = [it for it in chosen if it.job_id in done]
    summary = {"module": module, "key": key, "mutants": len(items), "sampled": 0, "killed": 0,
               "survived": [], "equivalent": [], "no_test": 0}
    for it in chosen:
        res = done.get(it.job_id)
        if res is None:
            continue
        m = it.mutations[0]
        if res.worker_outcome in (WorkerOutcome.NO_TEST, WorkerOutcome.SKIPPED):
            summary["no_test"] += 1
            continue
        summary["sampled"] += 1
        old, new = diff_lines(res.diff or "")
        eq = is_equivalent(equivs, module, m.operator_name, old, new)
        if res.test_outcome == TestOutcome.SURVIVED:
            rec = {"line": m.start_pos[0], "operator": m.operator_name, "old": old, "new": new}
            if eq:
                summary["equivalent"].append({**rec, "reason": eq["reason"]})
            else:
                summary["survived"].append(rec)
        else:
            summary["killed"] += 1
    return summary


def _copy_tree(tmp: Path):
    """The files git tracks, as they are in the working tree (uncommitted edits included)."""
    import shutil
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = ROOT / rel
        if src.is_file():
            dst = tmp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)


def _estimated_cost(module, args) -> float:
    """Seconds a module's sample is expected to take, from its latest cached clean run (any key):
    the longest go first so the workers finish together."""
    caches = {args.cache, DEFAULT_CACHE}      # a fresh --cache still knows the usual costs
    runs = sorted((r for c in caches for r in c.glob(f"{slug(module)}-*.baseline.json")),
                  key=lambda p: p.stat().st_mtime)
    secs = json.loads(runs[-1].read_text())["seconds"] if runs else 30.0
    return secs * (1 + sample_size(module, args))


def _run_in_copies(argv, args) -> int:
    """Run the selected modules in ``--jobs`` scratch copies of the tree, one module at a time per
    copy (a mutant is written into its module file, so two mutants never share a copy), then print
    the combined report from the cache. The cache is keyed by content, so the copies share it.
    The copies are removed afterwards, also on Ctrl-C."""
    import queue
    import tempfile
    import threading
    modules = args.module or list(MODULES)
    jobs = max(1, min(args.jobs, len(modules)))
    passthrough = []
    if args.all:
        passthrough.append("--all")
    if args.sample is not None:
        passthrough += ["--sample", str(args.sample)]
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mcf-mutation-") as tmp:
        copies = [Path(tmp) / f"copy{k}" for k in range(1 if args.report else jobs)]
        for c in copies:
            _copy_tree(c)
        log(f"mutating {jobs} scratch cop{'y' if jobs == 1 else 'ies'} of the tree in {tmp}")
        todo = queue.Queue()
        for m in ([] if args.report else sorted(modules, key=lambda m: -_estimated_cost(m, args))):
            todo.put(m)
        failures = []

        def worker(copy):
            while True:
                try:
                    module = todo.get_nowait()
                except queue.Empty:
                    return
                cmd = [sys.executable, str(copy / "scripts" / "bench_mutation.py"), "--in-place",
                       "--cache", str(args.cache.resolve()), "--module", module, *passthrough]
                rc = subprocess.run(cmd, cwd=copy, stdout=subprocess.DEVNULL).returncode
                if rc != 0:
                    failures.append((module, rc))

        threads = [threading.Thread(target=worker, args=(c,)) for c in copies]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if failures:
            log("failed: " + ", ".join(f"{m} (rc {rc})" for m, rc in failures))
        report = [sys.executable, str(copies[0] / "scripts" / "bench_mutation.py"), "--in-place", "--report",
                  "--cache", str(args.cache.resolve()), "--wall", f"{time.monotonic() - t0:.1f}",
                  *passthrough, *sum((["--module", m] for m in modules), [])]
        if args.json is not None:
            report += ["--json", str(args.json.resolve())]
        rc = subprocess.run(report, cwd=copies[0]).returncode
        return rc or (1 if failures else 0)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sample", type=int, default=None,
                    help=f"mutants per module, a deterministic stratified sample (default {DEFAULT_PER_MODULE}, "
                         f"fewer for the costly modules: {DEFAULT_SAMPLE})")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="modules tested at once, each in its own scratch copy (default: the CPU count)")
    ap.add_argument("--wall", type=float, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--all", action="store_true", help="every mutant of every selected module")
    ap.add_argument("--module", action="append", choices=sorted(MODULES), help="only this module (repeatable)")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--report", action="store_true", help="print cached results only; run nothing")
    ap.add_argument("--json", type=Path, help="also write the summary as JSON to this file")
    ap.add_argument("--in-place", action="store_true",
                    help="mutate this tree itself (default: a scratch copy of it, so an interrupted "
                         "run never leaves a mutant behind)")
    args = ap.parse_args(argv)
    if not args.in_place:
        return _run_in_copies(argv if argv is not None else sys.argv[1:], args)
    args.cache.mkdir(parents=True, exist_ok=True)
    os.chdir(ROOT)                    # cosmic-ray mutates module paths relative to the cwd
    env = dict(os.environ, HYPOTHESIS_PROFILE="ci", PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
    os.environ.update(HYPOTHESIS_PROFILE="ci", PYTHONPATH=str(ROOT))
    equivs = load_equivalents()
    t0 = time.monotonic()
    rows = [run_module(mod, args, equivs, env) for mod in (args.module or MODULES)]
    elapsed = args.wall if args.wall is not None else time.monotonic() - t0
    sample = (f"sample of {args.sample} per module" if args.sample is not None else
              f"default sample ({DEFAULT_PER_MODULE} per module, "
              + ", ".join(f"{n} of {m}" for m, n in DEFAULT_SAMPLE.items()) + ")")

    print(f"{'module':26s} {'mutants':>7s} {'tested':>6s} {'equiv':>5s} {'killed':>6s} {'survived':>8s} {'kill %':>7s}")
    tk = tn = 0
    for r in rows:
        denom = r["sampled"] - len(r["equivalent"])
        rate = 100.0 * r["killed"] / denom if denom else float("nan")
        tk += r["killed"]
        tn += denom
        print(f"{r['module']:26s} {r['mutants']:7d} {r['sampled']:6d} {len(r['equivalent']):5d} {r['killed']:6d} "
              f"{len(r['survived']):8d} {rate:7.1f}")
    surv = [(r["module"], s) for r in rows for s in r["survived"]]
    print(f"\nsurviving mutants ({len(surv)}):")
    for mod, s in surv:
        print(f"  {mod}:{s['line']} {s['operator'].split('/')[-1]}: {s['old']}  ->  {s['new']}")
    eqs = [(r["module"], s) for r in rows for s in r["equivalent"]]
    if eqs:
        print(f"\nequivalent mutants excluded ({len(eqs)}):")
        for mod, s in eqs:
            print(f"  {mod}:{s['line']} {s['operator'].split('/')[-1]}: {s['reason']}")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "elapsed_s": elapsed}, indent=1))
    overall = 100.0 * tk / tn if tn else float("nan")
    rated = [r for r in rows if r["sampled"] > len(r["equivalent"])]
    worst = min(rated, key=lambda r: r["killed"] / (r["sampled"] - len(r["equivalent"]))) if rated else None
    low = (f"lowest {worst['module']} {100.0 * worst['killed'] / (worst['sampled'] - len(worst['equivalent'])):.1f} %"
           if worst else "no module rated")
    print(f"{overall:.1f} % overall kill rate ({tk}/{tn} non-equivalent mutants, "
          f"{'all' if args.all else sample}, {len(rated)} of {len(rows)} modules "
          f"rated, {low}, {elapsed / 60:.1f} min)")


if __name__ == "__main__":
    sys.exit(main())
