"""The planners size a node's KV from its KV region in DDR (``ClusterConfig.from_region``,
``host.kvcapacity``): a KV unit of one layer occupies one slot of
the region's ``slot_bytes`` (row records padded to the bus width), admission counts slots and a
refusal names the region. Expected figures are computed here from the model's shape, not taken
from the code under test."""
import pytest

from mcf_fpga.golden.config import get_config
from mcf_fpga.spec.kvregion import GIB, KVRegion, kr260_region
from mcf_fpga.host import baselines, mars
from mcf_fpga.host.config import ClusterConfig, HardwareConfig
from mcf_fpga.host.elastic.program import elastic_program
from mcf_fpga.host.scenario import sim_hardware

QWEN = get_config("qwen2.5-1.5b")          # 28 layers, 2 KV heads, head_dim 128
MICRO = get_config("micro")                # 2 layers, 2 KV heads, head_dim 16


def _cdiv(a, b):
    return -(-a // b)


def _kr260_slots(kv_bits):
    """By hand: a row is 128 values of kv_bits + an 8-bit exponent, padded to 16-byte beats; a slot
    holds 256 tokens x 2 KV heads rows of K and of V; 1 GiB holds whole slots."""
    row = _cdiv(128 * kv_bits + 8, 128) * 16          # 144 B at INT8, 80 B at INT4
    slot = 2 * 256 * 2 * row
    return slot, (1 << 30) // slot


def test_kr260_region_sizes_by_hand():
    assert _kr260_slots(8) == (147_456, 7_281) and _kr260_slots(4) == (81_920, 13_107)   # docs/memory.md
    for kv_bits in (8, 4):
        r = kr260_region(kv_bits=kv_bits)
        assert (r.slot_bytes, r.n_slots) == _kr260_slots(kv_bits)
        cl = ClusterConfig.from_region(r, nodes=16)
        assert cl.kv_bytes_per_node == r.size and cl.kv_region == r


@pytest.mark.parametrize("kv_bits", [8, 4])
def test_128k_qwen_prompt_fits_kr260_region_on_16_nodes(kv_bits):
    """131,072 tokens in 256-token chunks on 16 nodes: 512 chunks, 32 per node, x 28 layers = 896
    owner slots per node (+ 1,024 new tokens: 64 golden blocks of 16, 4 per node x 28 = 112)."""
    S, K, N, B, blk = 131_072, 1_024, 16, 256, 16
    cl = ClusterConfig.from_region(kr260_region(kv_bits=kv_bits), nodes=N)
    owner = _cdiv(_cdiv(S, B), N) * QWEN.num_layers
    assert owner == 896
    dec = _cdiv(_cdiv(S + K - 1, blk) - _cdiv(S, blk), N) * QWEN.num_layers
    assert owner + dec <= _kr260_slots(kv_bits)[1]
    mars.check_fits(QWEN, cl, S, K, kv_bits, owner, B, blk)           # admission: no error
    # eq. 8 at paper scale never picks a chunk longer than a slot (256 tokens)
    hw = HardwareConfig.kr260(kv_buffer_bytes=1 << 28)
    ch = mars.choose_chunk(QWEN, cl, hw, S, blk, kv_bits)
    assert ch["B"] <= 256 and ch["B_eq8"] <= 256
    # eq. 11 counts slots: r_mem(c) = N n_slots // (c L) for one-slot units
    f = mars.replica_factors(_cdiv(S, B), N, cl.kv_region.size, QWEN.num_layers * cl.kv_region.slot_bytes, 0.5)
    n_slots = _kr260_slots(kv_bits)[1]
    assert [r_mem for r_mem, _, _ in f[:3]] == [N * n_slots // (c * QWEN.num_layers) for c in (1, 2, 3)]


def test_prompt_beyond_the_region_is_refused_naming_it():
    """163,840 tokens on 2 nodes: 640 chunks of 256, 320 per node x 28 layers = 8,960 slots > 7,281."""
    cl = ClusterConfig.from_region(kr260_region(kv_bits=8), nodes=2)
    S = 163_840
    owner = _cdiv(_cdiv(S, 256), 2) * QWEN.num_layers
    assert owner == 8_960
    with pytest.raises(ValueError, match=r"needs 8,960 slots per node .* the KV region kr260_region\(kv_bits=8\) "
                                         r"holds 7,281 slots of 147,456 B .* at 0x8_0000_0000.*"
                                         r"ClusterConfig\.kv_region\.n_slots=7281"):
        mars.check_fits(QWEN, cl, S, 0, 8, owner, 256, 16)


def _micro_region(n_slots, kv_bits=8):
    """A region of slots of 16 tokens x 2 KV heads of the micro model (d = 16)."""
    return KVRegion(0x1000, n_slots, 16 * MICRO.num_kv_heads, MICRO.head_dim, kv_bits)


@pytest.mark.parametrize("N,k,K", [(2, 2, 0), (3, 2, 9), (4, 1, 17)])
def test_boundary_exactly_the_regions_slots_fit(N, k, K):
    """MARS and ring, prompt N k 16 tokens in 16-token units (k per node), K new tokens in golden
    blocks of 8 (round robin): need = k L + ceil(new blocks / N) L slots. A region of exactly
    ``need`` slots plans; one slot fewer is refused naming the region and the slot count."""
    from tests.host._common import BLOCK
    L, S = MICRO.num_layers, N * k * 16
    new_blocks = _cdiv(S + K - 1, BLOCK) - _cdiv(S, BLOCK)
    need = k * L + _cdiv(new_blocks, N) * L
    # d = 16 INT8: 136 bits -> 17 B -> 32 B records; 32 rows of K and of V per slot
    assert _micro_region(1).slot_bytes == 2 * 32 * 32
    hw = HardwareConfig()
    for sched, chunk in (("mars", 16), ("ring", 16 * N)):
        def build(n_slots):
            cl = ClusterConfig.from_region(_micro_region(n_slots), nodes=N)
            if sched == "mars":
                return mars.plan(MICRO, cl, hw, S, K, block=BLOCK, params=mars.MarsParams(chunk=chunk))
            return baselines.ring(MICRO, cl, hw, S, K, chunk=chunk, block=BLOCK)
        prog = build(need)
        assert (prog.n_slots, prog.slot_bytes) == (need, 2048)
        with pytest.raises(ValueError, match=rf"needs {need} slots per node .*holds {need - 1} slots of 2,048 B"):
            build(need - 1)


def test_replicas_use_the_room_left_in_the_region():
    """MARS with room for replicas: every step's occupancy (owner + replicas) stays within the
    region's slots (with exactly the owner slots, replicas live only in the room that owner
    units have not taken yet), and more room makes more replicas."""
    N, k, L = 4, 4, MICRO.num_layers
    S = N * k * 16
    hw = HardwareConfig()
    tight = mars.plan(MICRO, ClusterConfig.from_region(_micro_region(k * L), nodes=N), hw, S, 0, block=8,
                      params=mars.MarsParams(chunk=16, alpha=1.0))
    tp = tight.stats["plan"]
    assert max(m for step in tp.step_mem for m in step) <= k * L * 2048
    room = _micro_region(3 * k * L)
    prog = mars.plan(MICRO, ClusterConfig.from_region(room, nodes=N), hw, S, 0, block=8,
                     params=mars.MarsParams(chunk=16, alpha=1.0))
    plan = prog.stats["plan"]
    assert sum(map(len, plan.holders)) > sum(map(len, tp.holders))
    assert max(m for step in plan.step_mem for m in step) <= room.n_slots * room.slot_bytes
    assert max(m for step in plan.step_mem for m in step) > k * L * room.slot_bytes   # replicas were made


def test_region_must_match_the_model_and_hold_a_chunk():
    N = 2
    cl = ClusterConfig.from_region(_micro_region(64), nodes=N)
    with pytest.raises(ValueError, match=r"KV unit of 32 tokens does not fit one slot .*kv_region\.slot_rows=32"):
        mars.plan(MICRO, cl, HardwareConfig(), 128, 0, block=8, params=mars.MarsParams(chunk=32))
    with pytest.raises(ValueError, match=r"kv_region\.kv_bits=8, expected the program's kv_bits=4"):
        mars.plan(MICRO, cl, HardwareConfig(), 64, 0, block=8, kv_bits=4, params=mars.MarsParams(chunk=16))
    with pytest.raises(ValueError, match=r"kv_region\.d=128, expected the model's head_dim=16"):
        mars.plan(MICRO, ClusterConfig.from_region(kr260_region(), nodes=N), HardwareConfig(), 64, 0, block=8,
                  params=mars.MarsParams(chunk=16))
    with pytest.raises(ValueError, match=r"kv_bytes_per_node=1024, expected kv_region.size="):
        ClusterConfig(nodes=N, kv_bytes_per_node=1024, kv_region=_micro_region(4))
    assert GIB == 1 << 30


def test_elastic_mars_prefill_counts_region_slots():
    """Elastic MARS prefill of two 64-token requests on nodes 0-1 (micro, 1 layer, 16-token
    chunks): each alone needs 2 owner slots per node + 1 decode block; the second request's owner
    chunks come on top of the first's: 4 slots per node. A 3-slot region takes one request and
    refuses two, naming the region."""
    cfg = MICRO.replace(num_layers=1)
    cl = ClusterConfig.from_region(_micro_region(3), nodes=3)
    prog = elastic_program(cfg, cl, sim_hardware(), 64, 2, prefill_nodes=2, scale_ups={}, chunk=16, prefill="mars")
    assert prog.n_slots == 3
    with pytest.raises(ValueError, match=r"node 0 would hold 4 KV slots of 2048 bytes.*holds 3 slots"):
        elastic_program(cfg, cl, sim_hardware(), (64, 64), (2, 2), prefill_nodes=2, scale_ups={}, chunk=16,
                        prefill="mars")
