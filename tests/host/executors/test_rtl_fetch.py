"""The node runs its own stream: with ``NodeConfig.fetcher`` the RTL executor loads each
node's part of the compiled stream (``host.compiler.to_cmdstream``) into the fetcher's memory and
its data image (``host.node_image``: weights, prompt and RoPE rows, a mailbox) into the loader's;
the node queues its engine instructions and directory commands itself, patching the DDR slots
the directory chose, and loads its weights and rows; the host writes run-time feeds into the
mailbox, rings the doorbell, publishes routes and reads logits; the node's RX placer lands the
received queries, max results and merged partials in DDR and the node loads them; its token
picker picks each token and the node loads the token's embedding row. Every schedule (MARS, ring,
zigzag, PD), NIC installs, elastic publishes and a tensor-parallel W group: the same logits,
tokens and DDR contents as IntModel; fewer host interactions; a bad stream or a wait that can
never be satisfied stops the node with the cause and the record, reported in one line, nothing
hangs."""
import dataclasses

import pytest
import torch

from mcf_fpga.golden.config import get_config
from mcf_fpga.golden.int_model import IntModel, quantize_model
from mcf_fpga.golden.model import random_weights
from mcf_fpga.spec.cmdstream import Cause
from mcf_fpga.hdl.cmdstream import Raw, Wait
from mcf_fpga.host.executors import run
from mcf_fpga.host.executors.rtl import run_rtl, sim_ddr_node_config, sim_fetch_node_config
from mcf_fpga.host.executors.runtime import ExecError
from mcf_fpga.host.install_credits import min_budget
from mcf_fpga.host.scenario import build_programs
from mcf_fpga.host.program_ops import Recv

#: one worker runs this module's tests: they share Verilator builds, which the other worker would
#: otherwise sit waiting for (tests/conftest.py, "Shared builds")
pytestmark = pytest.mark.xdist_group("test_rtl_fetch")

torch.set_num_threads(1)

CFG = get_config("micro").replace(num_layers=1)
IM = IntModel(quantize_model(random_weights(CFG, seed=5), block=16))
FETCH = sim_fetch_node_config("ring")


def prog_and_prompt(schedule="mars", nodes=2, S=40, K=3):
    progs, _ = build_programs(CFG, nodes=nodes, topology="ring", prompt_len=S, max_new_tokens=K, schedules=[schedule],
                              chunk=16, block=16, kv_headroom=2.0)
    prompt = torch.randint(0, CFG.vocab_size, (S,), generator=torch.Generator().manual_seed(5)).tolist()
    return progs[schedule], prompt


@pytest.mark.parametrize("schedule,nodes", [("mars", 2), ("ring", 3)])
def test_fetched_streams_equal_int_model(schedule, nodes):
    prog, prompt = prog_and_prompt(schedule, nodes)
    r = run_rtl(prog, IM, prompt, node_cfg=FETCH)
    assert torch.equal(r.logits, IM.forward(torch.tensor(prompt)))
    assert r.tokens == IM.generate(prompt, 3)
    assert all(n > 0 for n in r.kv_rows_checked)          # DDR rows compared with IntModel
    # the host no longer pushes instructions, sends directory commands or waits for their answers
    plain = run_rtl(prog, IM, prompt, node_cfg=sim_ddr_node_config("ring"))
    assert plain.tokens == r.tokens
    assert [[op for op, _i in per] for per in plain.issued] == [[op for op, _i in per] for per in r.issued]
    assert r.host_rates[0] < plain.host_rates[0] and r.host_rates[1] < plain.host_rates[1]
    # RX placement: queries and merged partials land in DDR, the host collects none of them; the
    # token picker picks every token and the node loads its embedding (run_rtl checks the picker
    # made exactly the picks the stream armed): no host interaction per decode token is left
    assert [log for log in r.rx_log if log] == [] and [log for log in plain.rx_log if log] != []
    assert r.host_rates[1] == 0.0


def test_bad_record_stops_the_node_and_names_it():
    prog, prompt = prog_and_prompt(K=1)

    def corrupt(node, recs):
        return recs[:5] + [Raw(0x7E)] + recs[5:] if node == 0 else recs
    with pytest.raises(ExecError, match=r"node 0: the command fetcher stopped with ILLEGAL_KIND at record 5 of"):
        run_rtl(prog, IM, prompt, node_cfg=FETCH, cmdstream_edit=corrupt)


def test_unsatisfiable_wait_ends_by_the_watchdog():
    prog, prompt = prog_and_prompt(K=1)

    def stall(node, recs):
        return recs[:3] + [Wait(7, 1)] + recs[3:] if node == 1 else recs      # counter 7 stays 0
    with pytest.raises(ExecError, match=rf"node 1: the command fetcher stopped with {Cause.WATCHDOG.name} at record 3"):
        run_rtl(prog, IM, prompt, node_cfg=FETCH, cmdstream_edit=stall, stall_cycles=20_000)


def test_refused_before_work():
    from mcf_fpga.hdl.node import NodeConfig
    with pytest.raises(ValueError, match=r"NodeConfig.fetcher needs an engine that keeps K/V in DDR"):
        NodeConfig(fetcher=True)
    with pytest.raises(ValueError, match=r"NodeConfig.rx_entries needs fetcher=True"):
        dataclasses.replace(FETCH, fetcher=False, pick_slots=0)
    with pytest.raises(ValueError, match=r"NodeConfig.pick_slots must be an int in 0..16, got 17"):
        dataclasses.replace(FETCH, pick_slots=17)
    with pytest.raises(ValueError, match=r"NodeConfig.rx_entries must be an int in 0..253 \(fetcher counters 3 \+ e\), got 254"):
        dataclasses.replace(FETCH, rx_entries=254)
    prog, prompt = prog_and_prompt(K=1)
    with pytest.raises(ValueError, match="NodeConfig.kv_slots=200 must not exceed the engine's kv_region.n_slots"):
        dataclasses.replace(FETCH, kv_install=True, kv_slots=200)


def test_fetched_streams_with_nic_installs():
    """The NIC installs every received KV unit; the fetched stream waits for the installs
    (WAIT_KV) and for the engine before a command that may free a slot (WAIT on its retired
    count), and patches the slots the installer chose."""
    prog, prompt = prog_and_prompt("ring", 3)
    r = run_rtl(prog, IM, prompt, node_cfg=dataclasses.replace(FETCH, kv_install=True))
    assert torch.equal(r.logits, IM.forward(torch.tensor(prompt)))
    assert r.tokens == IM.generate(prompt, 3)
    recvs = [sum(isinstance(op, Recv) and op.what == "kv" for op in ops) for ops in prog.ops]
    assert [c["committed"] for c in r.kv_installs] == recvs and sum(recvs) > 0


def test_install_credits_fetched():
    """Install credits on nodes that run their own streams: each pool's budget is the least the
    program can run in (host.install_credits.min_budget); the receiver's credit is one EMIT word
    after its free, the sender's fetcher waits for its RX placer to land it before the KVS. No
    host serves a credit, no unit finds a pool full, the same logits and tokens."""
    progs, _ = build_programs(CFG, nodes=3, topology="ring", prompt_len=64, max_new_tokens=2, schedules=["ring"],
                              chunk=16, block=16, kv_headroom=2.0)
    prog = progs["ring"]
    prompt = torch.randint(0, CFG.vocab_size, (64,), generator=torch.Generator().manual_seed(6)).tolist()
    cfg = dataclasses.replace(FETCH, kv_install=True)
    budget = min_budget(prog, cfg)
    r = run_rtl(prog, IM, prompt, node_cfg=cfg, kv_budget=budget)
    assert torch.equal(r.logits, IM.forward(torch.tensor(prompt)))
    assert r.tokens == IM.generate(prompt, 2)
    assert r.credits > 0 and max(r.peak_slots) <= budget
    assert all(c["drop_full"] == 0 for c in r.kv_installs)
    assert all(k != "recv" for per in r.host_interactions for k in per)      # credits: RX-placed


@pytest.mark.parametrize("schedule,nodes", [("zigzag", 2), ("pd", 4)])
def test_every_schedule_runs_fetched(schedule, nodes):
    """Zigzag and prefill/decode disaggregation on loading nodes: the same logits, tokens and DDR
    rows as IntModel. PD hands the first token from the prefill node to the decode leader on the
    node: the sender PUTs its picked token into the EMIT, the receiver's placer lands it and its
    picker takes it (a pair pick) for the embedding row: no host interaction per decode token."""
    prog, prompt = prog_and_prompt(schedule, nodes)
    r = run_rtl(prog, IM, prompt, node_cfg=FETCH)
    assert torch.equal(r.logits, IM.forward(torch.tensor(prompt)))
    assert r.tokens == IM.generate(prompt, 3)
    assert all(n >= 0 for n in r.kv_rows_checked) and sum(r.kv_rows_checked) > 0
    assert r.host_rates[1] == 0.0


def test_elastic_publishes_with_fetched_streams():
    """KernelFlume scale-ups on loading nodes: each publish is a WAIT on the fetcher's doorbell;
    the orchestrator publishes only when every fetcher waits there and the engines are idle, then
    rings. Tokens equal IntModel, every step under one routing version, nothing dropped."""
    from mcf_fpga.host.config import ClusterConfig
    from mcf_fpga.host.elastic.program import elastic_program
    from mcf_fpga.host.scenario import sim_hardware
    from tests.host._common import assert_one_route_version_per_step
    K = 8
    prog = elastic_program(CFG, ClusterConfig(nodes=4, kv_bytes_per_node=30000), sim_hardware(), 40, K,
                           prefill_nodes=2, scale_ups={2: 2, 5: 3}, chunk=32)
    prompt = torch.randint(0, 256, (40,), generator=torch.Generator().manual_seed(4)).tolist()
    r = run_rtl(prog, IM, prompt, node_cfg=FETCH)
    assert torch.equal(r.logits, IM.forward(torch.tensor(prompt))) and r.tokens == IM.generate(prompt, K)
    assert [p["step"] for p in r.publishes] == [2, 5]
    assert_one_route_version_per_step(r.step_versions, prog)
    for n, c in r.nic_counters.items():
        assert set(c) == {"rx_frames"}, (n, c)


def test_tensor_parallel_w_group_fetched():
    """A tensor-parallel W group (host.tp: every linear layer split over nodes 1 and 0) on loading
    nodes: each node loads only its weight slices' tiles; tokens equal IntModel."""
    progs, _ = build_programs(CFG, nodes=2, topology="ring", prompt_len=40, max_new_tokens=3,
                              schedules=["mars"], chunk=16, block=16, kv_headroom=2.0, w_group=(1, 0))
    prog = progs["mars"]
    prompt = torch.randint(0, CFG.vocab_size, (40,), generator=torch.Generator().manual_seed(6)).tolist()
    assert prog.wsplit is not None
    r = run_rtl(prog, IM, prompt, node_cfg=FETCH)
    assert r.tokens == IM.generate(prompt, 3)
    # every W node picks its slice's best, PUTs it into its best pair and picks the group's token
    # from the pairs (its own and the placed ones): no host interaction per decode token
    assert r.host_rates[1] == 0.0
    assert r.req_picked == run(prog, IM, prompt, backend="golden").req_picked
    # the decode projections load weight slices (output rows of a matrix), not whole matrices
    from mcf_fpga.host import compiler as C
    from mcf_fpga.host.executors.rtl import _decode_routes
    _r, rm, rs = _decode_routes(prog)
    for c in C.compile_program(prog, FETCH, rid_max=rm, rid_sum=rs):
        assert any(isinstance(x, C.Weights) and x.rows is not None for x in c.stream), c.node


def test_a_packet_the_placer_cannot_land_ends_the_run_in_one_line(monkeypatch):
    """Fault: every RX placer entry programmed with room for one bus beat only, so the first packet
    longer than that overruns its zone: the placer drops and counts it, the stream's WAIT for its
    landed count ends by the watchdog (on whichever node waits longest first: here the leader,
    waiting for a partner whose query was dropped), and the one-line error names the WAIT and the
    node whose placer dropped the packet."""
    import mcf_fpga.host.executors.rtl as rtl
    from mcf_fpga.host.node_image import RxEntry
    orig = rtl._program_rx_placer

    def small(drv, img, latency):
        img.rx = {k: RxEntry(e.index, e.key, e.addr, 16) for k, e in img.rx.items()}
        return orig(drv, img, latency)
    monkeypatch.setattr(rtl, "_program_rx_placer", small)
    prog, prompt = prog_and_prompt(K=3)
    with pytest.raises(ExecError, match=rf"command fetcher stopped with {Cause.WATCHDOG.name} at record \d+ .*"
                                        r"node \d's RX placer: drop_overrun [1-9]"):
        run_rtl(prog, IM, prompt, node_cfg=FETCH)
