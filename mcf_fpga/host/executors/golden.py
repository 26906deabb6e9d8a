"""Golden executor: every node of a program in one process, interleaved cooperatively.

Each node's ``NodeRuntime.run()`` generator runs until it waits (a message not yet sent, a
collective not yet complete); the scheduler cycles through the nodes until all finish. A full
cycle without progress is a deadlock in the program and raises ``ExecError`` (never hangs).
Messages are delivered by id (the tag), so delivery order between nodes is irrelevant, as on
the torch.distributed executor.
"""
from __future__ import annotations

import torch

from mcf_fpga.golden.int_model import IntModel

from .result import ExecResult, collect
from .runtime import ExecError, NodeRuntime

__all__ = ["run_golden", "MailboxTransport"]


class MailboxTransport:
    def __init__(self, shared: dict, node: int):
        self.s, self.node = shared, node

    def send(self, msg, dsts, payload):
        for d in dsts:
            key = (msg, d)
            if key in self.s["mail"]:
                raise ExecError(f"message {msg} to node {d} sent twice")
            self.s["mail"][key] = (self.node, payload.clone())
        self.s["sent"] += 1

    def recv(self, msg, src, numel):
        key = (msg, self.node)
        while key not in self.s["mail"]:
            yield
        who, data = self.s["mail"].pop(key)
        if who != src or data.numel() != numel:
            raise ExecError(f"node {self.node}: message {msg} from {who} with {data.numel()} words, "
                            f"expected from {src} with {numel}")
        return data

    def allreduce(self, msg, group, tensor, op):
        c = self.s["coll"].setdefault(msg, {"in": {}, "out": None, "left": set(group)})
        if self.node not in group:
            raise ExecError(f"node {self.node} is not in all-reduce group {group}")
        c["in"][self.node] = tensor.clone()
        while c["out"] is None:
            if len(c["in"]) == len(group):
                vals = [c["in"][g] for g in sorted(group)]
                acc = vals[0]
                for v in vals[1:]:
                    acc = torch.maximum(acc, v) if op == "max" else acc + v
                c["out"] = acc
                break
            yield
        c["left"].discard(self.node)
        out = c["out"].clone()
        if not c["left"]:
            del self.s["coll"][msg]
        return out

    def finish(self):
        pass


def run_golden(program, im: IntModel | None, prompt, dry: bool = False) -> ExecResult:
    """Execute ``program`` on one process. ``dry=True`` skips all arithmetic (pool, messages and
    lifecycle only: fast layout/memory checks)."""
    program.prompts(prompt)          # refused before any work: wrong count or length
    shared = {"mail": {}, "coll": {}, "sent": 0}
    nodes = [NodeRuntime(n, program, im, prompt, MailboxTransport(shared, n), dry=dry)
             for n in range(program.nodes)]
    gens = {n: rt.run() for n, rt in enumerate(nodes)}
    while gens:
        before = sum(rt.done_ops for rt in nodes)
        for n in list(gens):
            try:
                next(gens[n])
            except StopIteration:
                del gens[n]
        if gens and sum(rt.done_ops for rt in nodes) == before:
            # one more pass: a collective may have completed on this pass
            stuck = True
            for n in list(gens):
                b2 = nodes[n].done_ops
                try:
                    next(gens[n])
                except StopIteration:
                    del gens[n]
                    stuck = False
                    continue
                if nodes[n].done_ops != b2:
                    stuck = False
            if stuck and gens:
                where = {n: (nodes[n].done_ops, program.ops[n][nodes[n].done_ops].kind) for n in gens}
                raise ExecError(f"program deadlocks: nodes waiting at (op index, kind) {where}")
    if shared["mail"]:
        raise ExecError(f"{len(shared['mail'])} messages were sent but never received")
    return collect(program, [rt.result() for rt in nodes])
