"""Flow control for the NIC's KV installs: the receiver's credits.

With NIC installs (``NodeConfig.kv_install``) a received KV unit takes a pool slot when its first
packet arrives (the installer's ``BEGIN_INSTALL``), not when the receiver's program reaches its
``recv``. Senders run ahead, so a unit can arrive before the receiver has freed the slot the
program expects it to reuse. Without flow control the pool needs headroom over the program's
peak: a unit that finds the pool full is dropped (the installer's ``drop_full``).

:func:`install_credits` returns the program with credits that keep every pool within
``budget`` slots, whatever the timing:

* **Rule.** On receiver r, ``taken(p)`` and ``freed(p)`` are the slots r's pool has taken and
  freed in r's program order up to op p (the compiler's pool model, ``NodeCompiler.pool_trace``).
  A KV unit received at op p may install at any time after its send; at worst every slot r
  takes up to p has been taken by then. So if ``k = taken(p) - budget > 0``, r's first k frees
  must come first: the sender waits, before its KV send, for a credit that r sends right after
  the op that makes its k-th free. At any moment r then holds at most ``taken(p*) - k(p*) <=
  budget`` slots (p*: the latest op whose slot has been taken; r's own ops run in order).
* **Only where needed.** No credit when the send already comes after that op through the
  program's own messages (vector clocks over sends, receives, all-reduces and route publishes),
  or after an earlier credit of the same receiver for a later free.
* **Order.** A receiver's credits to one sender leave in the order of its frees; the sender waits
  for them in the order of its sends, the same order (``k`` grows with p).
* **Deadlock.** A credit whose free itself waits for something after the send cannot be met:
  :class:`~host.compiler.CompileError` naming the budget and the units.

A credit is a one-word ``DATA`` packet of the prefill stage with ``kv_id = (0,``
:data:`CREDIT_BLOCK` ``)`` from r to the sender (:func:`credit_meta`): the sender's host, or its RX
placer (counted per source), receives it; no KV unit has that block number. Its program ops are a
``Send`` / ``Recv`` with ``what="credit"`` (the compiler: an ``EMIT`` of one word / a wait).
"""
from __future__ import annotations

import collections
import dataclasses

from mcf_fpga.host import program_ops as O
from mcf_fpga.spec.meta import DEFAULT_PARAMS, Collective, MetaFields, MetaOp, ReduceOp, Stage
from mcf_fpga.spec.rx_placer import packet_key

__all__ = ["CREDIT_BLOCK", "CREDIT_BYTES", "credit_meta", "credit_key", "install_credits", "min_budget",
           "happens_before", "collective_key"]

#: the kv_id block of every credit packet: the largest block number, never a KV unit's
CREDIT_BLOCK = (1 << DEFAULT_PARAMS.block_bits) - 1
#: a credit's payload (one word; its value is not read)
CREDIT_BYTES = 4


def credit_meta(src: int, dst: int) -> MetaFields:
    """The Meta of a credit from receiver ``src`` to sender ``dst`` (the shortest-path route
    ``dst``, as every unicast of a program)."""
    return MetaFields(op=MetaOp.DATA, stage=Stage.PREFILL, src=src, dst=dst, kv_id=(0, CREDIT_BLOCK),
                      route_id=dst, collective=Collective.P2P, reduce_op=ReduceOp.NONE, length=CREDIT_BYTES)


def credit_key(src: int) -> tuple:
    """The receive key (kind, src, layer, block) of the credits from ``src`` (the RTL executor's
    inbox key; ``spec.rx_placer.packet_key``)."""
    kind, s, layer, block = packet_key(credit_meta(src, 0))
    return (kind.name.lower(), s, layer, block)


def collective_key(op):
    """The key of a collective every member's op waits for (all-reduce, route publish), or None."""
    if isinstance(op, O.AllReduce):
        return ("allreduce", op.msg)
    if isinstance(op, O.Publish):
        return ("publish", op.step)
    return None


def _walk(program) -> tuple:
    """Run ``program``'s ops as far as its messages and collectives let them: ``(ptr, before)``,
    ``ptr[n]`` the ops node n got through and ``before[n][i]`` the vector clock before op i
    (``[m]``: how many of node m's first ops are ordered before it)."""
    ops = program.ops
    N = len(ops)
    members = collections.Counter(k for node_ops in ops for k in {collective_key(o) for o in node_ops} if k)
    ptr, vc = [0] * N, [[0] * N for _ in range(N)]
    before = [[None] * len(o) for o in ops]
    sent = {}                                 # (msg, dst) -> the sender's clock after the send
    waiting = collections.defaultdict(list)   # barrier -> nodes at it
    moved = True
    while moved:
        moved = False
        for n in range(N):
            while ptr[n] < len(ops[n]):
                op, i = ops[n][ptr[n]], ptr[n]
                bar = collective_key(op)
                if isinstance(op, O.Recv) and (op.msg, n) not in sent:
                    break
                if bar is not None:
                    if n not in waiting[bar]:
                        waiting[bar].append(n)
                        before[n][i] = list(vc[n])
                    if len(waiting[bar]) < members[bar]:
                        break
                    joined = [max(c) for c in zip(*(vc[m] for m in waiting[bar]))]
                    for m in waiting.pop(bar):       # every member passes the collective at once
                        vc[m] = list(joined)
                        vc[m][m] = ptr[m] + 1
                        ptr[m] += 1
                    moved = True
                    continue
                before[n][i] = list(vc[n])
                if isinstance(op, O.Recv):
                    vc[n] = [max(a, b) for a, b in zip(vc[n], sent[(op.msg, n)])]
                vc[n][n] = i + 1
                if isinstance(op, O.Send):
                    for d in op.dsts:
                        sent[(op.msg, d)] = list(vc[n])
                ptr[n] += 1
                moved = True
    return ptr, before


def happens_before(program) -> list | None:
    """Per node, per op: the vector clock before the op (``vc[n][i][m]``: how many of node m's
    first ops the program's messages and collectives order before op i of node n); None when the
    program cannot run to its end (a receive whose send never comes, a collective some member
    never reaches: a deadlock)."""
    ptr, before = _walk(program)
    return before if all(ptr[n] == len(o) for n, o in enumerate(program.ops)) else None


def _stuck(program) -> str:
    """Where each node of a deadlocked program stops (for the error)."""
    ptr, _ = _walk(program)
    out = []
    for n, node_ops in enumerate(program.ops):
        if ptr[n] < len(node_ops):
            o = node_ops[ptr[n]]
            out.append(f"node {n} at op {ptr[n]} ({o.kind} {getattr(o, 'what', '')} "
                       f"({getattr(o, 'layer', '')},{getattr(o, 'unit', '')}))")
    return "; ".join(out)


def install_credits(program, ncfg, budget: int | None = None):
    """``program`` with the credits that keep every node's KV pool within ``budget`` slots (None:
    ``ncfg.kv_slots``) under NIC installs (module docstring); ``(program, credits)``, credits the
    list of ``(receiver, free op, sender, send op)`` added (indices into the original program).
    The program unchanged (and no credits) when no pool ever needs one. ``CompileError`` when
    the program's own order needs more than ``budget`` slots somewhere, or when the budget has
    no room for the units in flight and a credit would deadlock (:func:`min_budget`)."""
    budget = ncfg.kv_slots if budget is None else budget
    comps = _compiled(program, ncfg, budget)
    return _plan(program, [c.pool_trace for c in comps], budget)


def min_budget(program, ncfg) -> int:
    """The smallest pool budget :func:`install_credits` can keep ``program`` within: at least the
    most slots any node holds in its own program order, plus room for the units in flight where
    a receiver can free nothing before a unit it needs arrives (a ring's pass-on). ``CompileError``
    when even ``ncfg.kv_slots`` is not enough."""
    from mcf_fpga.host.compiler import CompileError
    comps = _compiled(program, ncfg, None)
    traces = [c.pool_trace for c in comps]
    for budget in range(max(c.pool.peak_slots for c in comps), ncfg.kv_slots + 1):
        try:
            _plan(program, traces, budget)
        except CompileError:
            continue
        return budget
    raise CompileError(f"install_credits: no pool budget up to NodeConfig.kv_slots={ncfg.kv_slots} runs the "
                       f"program without deadlock")


def _compiled(program, ncfg, budget):
    from mcf_fpga.host.compiler import compile_program
    rid = collections.defaultdict(int)            # route ids: not needed for the pool's trace
    return compile_program(program, ncfg, rid_max=rid, rid_sum=rid, kv_budget=budget)


def _plan(program, traces, budget: int):
    """:func:`install_credits` from every node's pool trace (``NodeCompiler.pool_trace``)."""
    from mcf_fpga.host.compiler import CompileError
    hb = happens_before(program)
    if hb is None:
        raise CompileError("install_credits: the program itself cannot run to its end (a receive without "
                           "its send, or a collective a member never reaches)")
    sends = {}                                    # (msg, dst) -> (sender, op index)
    for s, node_ops in enumerate(program.ops):
        for j, op in enumerate(node_ops):
            if isinstance(op, O.Send) and op.what == "kv":
                for d in op.dsts:
                    sends[(op.msg, d)] = (s, j)
    credits = []
    granted = {}                                  # (r, s) -> (free op credited, send op it precedes)
    for r, node_ops in enumerate(program.ops):
        trace = traces[r]
        f = 0                                     # the op making the k-th free (k grows with p)
        for p, op in enumerate(node_ops):
            if not (isinstance(op, O.Recv) and op.what == "kv"):
                continue
            k = trace[p][0] - budget
            if k <= 0:
                continue
            while f < p and trace[f][1] < k:
                f += 1
            if f == p:
                raise CompileError(f"install_credits: node {r} op {p} receives ({op.layer},{op.unit}) with "
                                   f"{trace[p][0] - trace[p][1]} slots in use in its own order, over the budget "
                                   f"of {budget}")
            s, j = sends[(op.msg, r)]
            if hb[s][j][r] > f:                   # the send already comes after r's op f
                continue
            g = granted.get((r, s))
            if g is not None and g[0] >= f and g[1] <= j:
                continue                          # an earlier credit to s already covers it
            credits.append((r, f, s, j))
            granted[(r, s)] = (f, j)
    if not credits:
        return program, []
    after = collections.defaultdict(list)         # (r, f) -> credit sends right after op f
    before = collections.defaultdict(list)        # (s, j) -> credit receives right before op j
    msg = 1 + max((o.msg for node_ops in program.ops for o in node_ops if isinstance(o, O.MessageOp)), default=-1)
    for r, f, s, j in credits:
        hops = len(program.topo.path(r, s)) - 1
        meta, req, guarded = credit_meta(r, s), program.ops[r][f].req, program.ops[s][j]
        after[(r, f)].append(O.Send(req=req, what="credit", layer=guarded.layer, unit=guarded.unit, dsts=(s,),
                                    msg=msg, meta=meta, nbytes=CREDIT_BYTES, link_bytes=CREDIT_BYTES * hops,
                                    depth=hops))
        before[(s, j)].append(O.Recv(req=req, what="credit", layer=guarded.layer, unit=guarded.unit, peer=r,
                                     msg=msg, install="stage", meta=meta, nbytes=CREDIT_BYTES))
        msg += 1
    new_ops = []
    for n, node_ops in enumerate(program.ops):
        out = []
        for i, op in enumerate(node_ops):
            out += before.get((n, i), [])
            out.append(op)
            out += after.get((n, i), [])
        new_ops.append(out)
    credited = dataclasses.replace(program, ops=new_ops)
    if happens_before(credited) is None:
        raise CompileError(f"install_credits: a pool budget of {budget} slots has no room for the units in "
                           f"flight: a credit waits for a free that waits for the send it guards "
                           f"({_stuck(credited)}); raise the budget (install_credits.min_budget)")
    return credited, credits
