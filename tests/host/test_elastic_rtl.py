"""Elastic decode (KernelFlume) on the simulated cluster: weightless A nodes join the decode
group mid-generation by route updates published at token boundaries (NIC shadow bank + flip);
the tokens equal golden's IntModel on the golden, torch.distributed and RTL executors, and no
packet is ever dropped by a half-updated route."""
import pytest
import torch

from golden.config import get_config
from golden.int_model import IntModel, quantize_model
from golden.model import random_weights
from host.config import ClusterConfig
from host.elastic.program import elastic_program
from host.executors import run
from host.scenario import sim_hardware

torch.set_num_threads(1)
CFG = get_config("micro").replace(num_layers=1)
IM = IntModel(quantize_model(random_weights(CFG, seed=9), block=16))


def reference(prompt, k):
    return IM.forward(torch.tensor(prompt)), IM.generate(prompt, k)


def test_two_scale_ups_on_rtl_equal_golden():
    K = 22
    prog = elastic_program(CFG, ClusterConfig(nodes=4, kv_bytes_per_node=30000), sim_hardware(), 40, K,
                           prefill_nodes=2, scale_ups={2: 2, 9: 3}, chunk=32)
    prompt = torch.randint(0, 256, (40,), generator=torch.Generator().manual_seed(4)).tolist()
    lg, toks = reference(prompt, K)
    assert prog.stats["decode_groups"][0] == (0, 1) and prog.stats["decode_groups"][-1] == (0, 1, 2, 3)
    for backend in ("golden", "dist"):
        assert run(prog, IM, prompt, backend=backend).tokens == toks, backend
    r = run(prog, IM, prompt, backend="rtl")
    assert torch.equal(r.logits, lg) and r.tokens == toks
    assert [p["step"] for p in r.publishes] == [2, 9]
    assert [p["group"] for p in r.publishes] == [(0, 1, 2), (0, 1, 2, 3)]
    assert all(p["cycles"] > 0 for p in r.publishes)
    for n, c in r.nic_counters.items():              # nothing dropped: no stale or partial route
        assert set(c) == {"rx_frames"}, (n, c)


def test_bad_scale_up_refused():
    cl = ClusterConfig(nodes=4, kv_bytes_per_node=30000)
    with pytest.raises(ValueError, match="A-node pool"):
        elastic_program(CFG, cl, sim_hardware(), 40, 8, prefill_nodes=2, scale_ups={2: 1}, chunk=32)
    with pytest.raises(ValueError, match="decode steps"):
        elastic_program(CFG, cl, sim_hardware(), 40, 8, prefill_nodes=2, scale_ups={7: 2}, chunk=32)
    with pytest.raises(ValueError, match="prefill_nodes"):
        elastic_program(CFG, cl, sim_hardware(), 40, 8, prefill_nodes=4, scale_ups={}, chunk=32)
