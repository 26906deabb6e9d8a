"""The one compiler (host.compiler): a program's per-node streams, checked against a listing derived
by hand from the lowering rules (docs/compiler.md), symbolic KV addresses, host interactions,
refusals naming their limit, and the ``mcf compile`` view. That the RTL executor runs these
streams bit-exact to IntModel is tests/host/executors/test_rtl_executor.py and test_rtl_ddr.py."""
import dataclasses

import pytest

from mcf_fpga.golden import numerics as nx
from mcf_fpga.golden.config import get_config
from mcf_fpga.spec.kvpool import Opcode
from mcf_fpga.spec.instr import AttFlags, EngineOpcode, FoldFlags, GemmFlags, KvwFlags
from mcf_fpga.hdl.compute.program import instr
from mcf_fpga.hdl.compute.vector import VecOp
from mcf_fpga.host import compiler as C
from mcf_fpga.host.cli import main
from mcf_fpga.host.executors.rtl import _decode_routes, sim_ddr_node_config, sim_node_config
from mcf_fpga.host.scenario import build_programs

CFG = get_config("micro").replace(num_layers=1)


def program(nodes=2, S=16, K=1, schedule="mars", chunk=16):
    progs, _ = build_programs(CFG, nodes=nodes, topology="ring", prompt_len=S, max_new_tokens=K,
                              schedules=[schedule], chunk=chunk, block=16, kv_headroom=2.0)
    return progs[schedule]


def compiled(prog, ncfg=None):
    _r, rm, rs = _decode_routes(prog)
    return C.compile_program(prog, ncfg or sim_node_config("ring"), rid_max=rm, rid_sum=rs)


def test_small_program_equals_the_hand_derived_listing():
    """MARS, one 16-token chunk on 2 nodes (micro: D=64, I=128, H=4, Hk=2, d=16, V=256, T=16).
    Scratch regions (host.scratch_layout, T x each): rope 0 (128), x 128, q 1152, k 2176, v 2688,
    q_rope 3200, k_rope 4224; attn 0, attn_q 1024, o_proj 2048, h1 3072, x2 4096, gate 5120, up 7168,
    down 9216 (end 10240); x_final 0, logits 1024.
    Arena from 10240: h 10240 / 11264, K copy 12288, V copy 12800 (16 tokens x 32 values, one per
    word), q 13312 (16 x 64), partials 14336 (1 block x 2 KV heads x 16 rows x gqa 2 x 2d+4 = 36).
    EM: x 0, attn 16, x2 32, swiglu 48; K exps 64, V exps 96 (32 rows each), q exps 128."""
    prog = program()
    streams = compiled(prog)
    eps = int(round(CFG.rms_norm_eps * 2 ** (2 * nx.FA)))

    def vec(sub, a, dst, n0, ln, **kw):
        return instr(EngineOpcode.VEC, sub=sub, a=a, dst=dst, n0=n0, len=ln, frac=nx.FA, bits=8, eps_q=eps, **kw)

    def gemm(a, ea, K, N, dst, reuse=False):
        return instr(EngineOpcode.GEMM, flags=GemmFlags(reuse=reuse), a=a, ea=ea, n0=16, len=K, n1=N, dst=dst)

    R = C.KvRow(0, 0)
    att = [instr(EngineOpcode.ATT, flags=AttFlags(causal=True), a=13312 + 32 * g, so=64, len=16, n0=16, n1=2, ea=128 + 2 * g, eo=4, ei=1,
                 pos0=0, kvb=R + 16 * g, nblk=1, bs=16, ntok=16, kpos=0, dst=14336 + 1152 * g) for g in (0, 1)]
    kvw = [instr(EngineOpcode.KVW, flags=KvwFlags(v=v), a=a, n0=16, n1=2, so=32, len=16, ea=e, eo=2, ei=1, kvb=R, kvs=16)
           for v, a, e in ((False, 12288, 64), (True, 12800, 96))]
    fold = [instr(EngineOpcode.FOLD, flags=FoldFlags(final=True), a=14336 + 1152 * g, b=2304, nblk=1, n0=16, n1=2, so=64, len=16, dst=32 * g)
            for g in (0, 1)]
    want = [
        instr(EngineOpcode.SPW, dst=10240, n0=1024), C.Embed(0, (0, 16)), C.OpDone(0, "embed"),
        C.KvCmd(Opcode.ALLOC_OWNER, 0, 0, "project", False),
        instr(EngineOpcode.SPW, dst=0, n0=128), C.Rope(0, 16),
        C.Weights(0, "q"), C.Weights(0, "k"), C.Weights(0, "v"),
        vec(VecOp.RMSNORM, 10240, 128, 16, 64, ed=0),
        gemm(128, 0, 64, 64, 1152), gemm(128, 0, 64, 32, 2176, True), gemm(128, 0, 64, 32, 2688, True),
        vec(VecOp.ROPE, 1152, 3200, 16, 16, b=0, n1=4), vec(VecOp.ROPE, 2176, 4224, 16, 16, b=0, n1=2),
        vec(VecOp.QUANT, 3200, 13312, 64, 16, ed=128), vec(VecOp.QUANT, 4224, 12288, 32, 16, ed=64),
        vec(VecOp.QUANT, 2688, 12800, 32, 16, ed=96), *kvw, C.OpDone(1, "project"),
        C.KvCmd(Opcode.ACQUIRE, 0, 0, "acquire", False), C.OpDone(2, "acquire"),
        *att, C.OpDone(3, "attend"),
        C.KvCmd(Opcode.RELEASE, 0, 0, "release", False), C.OpDone(4, "release"),
        C.Weights(0, "o"), C.Weights(0, "gate"), C.Weights(0, "up"), C.Weights(0, "down"),
        *fold, vec(VecOp.QUANT, 0, 1024, 16, 64, ed=16), gemm(1024, 16, 64, 64, 2048),
        vec(VecOp.ADD, 10240, 3072, 16, 64, b=2048), vec(VecOp.RMSNORM, 3072, 4096, 16, 64, ed=32),
        gemm(4096, 32, 64, 128, 5120), gemm(4096, 32, 64, 128, 7168, True),
        vec(VecOp.SWIGLU, 5120, 5120, 16, 128, b=7168), vec(VecOp.QUANT, 5120, 7168, 16, 128, ed=48),
        gemm(7168, 48, 128, 64, 9216), vec(VecOp.ADD, 3072, 11264, 16, 64, b=9216), C.OpDone(5, "finish"),
        C.Weights(None, "head"), vec(VecOp.RMSNORM, 11264, 0, 16, 64, ed=0),
        instr(EngineOpcode.GEMM, a=0, ea=0, n0=16, len=64, n1=256, dst=1024), instr(EngineOpcode.SPR, a=1024, n0=4096),
        C.Logits(0, (0, 16)), C.OpDone(6, "logits"),
        C.Mark("prefill_done"), C.OpDone(7, "mark"),
    ]
    want = [C.Ins(w, None) if isinstance(w, dict) else w for w in want]
    got = [dataclasses.replace(r, op=None) if isinstance(r, C.Ins) else r for r in streams[0].stream]
    assert C.listing(got) == C.listing(want)
    assert got == want
    assert streams[1].stream == [C.Mark("prefill_done"), C.OpDone(0, "mark")]
    # a push per run of instructions, one per directory command, feed, read (not the mark)
    assert C.host_interactions(streams[0].stream) == {"embed": 2, "project": 7, "acquire": 1, "attend": 1,
                                                      "release": 1, "finish": 5, "logits": 3}
    assert C.host_interaction_rates(prog, [c.stream for c in streams]) == (20.0, None)   # 1 unit, no decode


def test_kv_addresses_are_symbolic_where_the_directory_decides():
    """On-chip KV: a pool unit's rows are KvRow (slot x slot_rows + k at run time), staged units
    get numbers. K/V in DDR with NIC installs: every KVW / KVL / KVS names its slot as KvSlot in
    ``b`` and its row in the slot as a number; nothing else is symbolic."""
    prog = program(nodes=3, S=48, K=2)
    kv_ops = (EngineOpcode.KVW, EngineOpcode.ATT)
    for c in compiled(prog):
        for r in c.stream:
            if isinstance(r, C.Ins):
                syms = {k for k, v in r.fields.items() if isinstance(v, (C.KvRow, C.KvSlot))}
                assert syms <= ({"kvb"} if r.fields["op"] in kv_ops else set()), (r.fields["op"], syms)
    ncfg = dataclasses.replace(sim_ddr_node_config("ring"), kv_install=True)
    seen = set()
    for c in compiled(prog, ncfg):
        for r in c.stream:
            if isinstance(r, C.Ins):
                f = r.fields
                assert not any(isinstance(v, C.KvRow) for v in f.values())
                if isinstance(f["b"], C.KvSlot):
                    assert f["op"] in (EngineOpcode.KVW, EngineOpcode.KVL, EngineOpcode.KVS)
                    assert isinstance(f["kvb"], int)
                    seen.add(f["op"])
    assert seen == {EngineOpcode.KVW, EngineOpcode.KVL, EngineOpcode.KVS}


def test_driver_resolves_symbolic_addresses_from_the_directory():
    from mcf_fpga.host.executors.rtl import NodeDriver
    from mcf_fpga.host.executors.runtime import ExecError
    from mcf_fpga.golden.int_model import IntModel, quantize_model
    from mcf_fpga.golden.model import random_weights
    prog = program()
    c = compiled(prog)[0]
    im = IntModel(quantize_model(random_weights(CFG, seed=1), block=16))
    drv = NodeDriver(c, im, [1] * 16, sim_node_config("ring"))
    drv.slots[(0, 0)] = 3
    assert drv.resolve(C.KvRow(0, 0, 5)) == 3 * c.slot_rows + 5
    assert drv.resolve(C.KvSlot(0, 0)) == 3
    assert drv.resolve(17) == 17
    with pytest.raises(ExecError, match=r"\(0,1\) is addressed but holds no slot"):
        drv.resolve(C.KvRow(0, 1))


def test_streams_depend_on_the_program_and_node_only():
    prog = program(nodes=3, S=48, K=3)
    a, b = compiled(prog), compiled(prog)
    assert [C.listing(x.stream) for x in a] == [C.listing(x.stream) for x in b]


def test_refusals_name_the_limit():
    prog = program(nodes=2, S=64)
    small = dataclasses.replace(sim_node_config("ring"), kv_slots=1)
    with pytest.raises(C.CompileError, match=r"needs \d+ slots, the node has 1 \(NodeConfig.kv_slots\)"):
        compiled(prog, small)
    tiny = dataclasses.replace(sim_node_config("ring"), engine=dict(sim_node_config("ring").engine, t_max=8))
    with pytest.raises(C.CompileError, match=r"exceed the engine's t_max=8"):
        compiled(prog, tiny)
    sp = dataclasses.replace(sim_node_config("ring"), engine=dict(sim_node_config("ring").engine, sp_depth=12000))
    with pytest.raises(C.CompileError, match=r"op \d+ \(\w+\): node memory scratchpad: no room"):
        compiled(prog, sp)


def test_mcf_compile_prints_the_listing_and_counts(capsys):
    assert main(["compile", "--nodes", "2", "--prompt-len", "16", "--max-new-tokens", "1", "--layers", "1",
                 "--node", "0"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("# node 0: 8 program ops, 53 records, 30 engine instructions, 3 directory commands, "
                      "20 host interactions (acquire 1, attend 1, embed 2, finish 5, logits 3, project 7, "
                      "release 1)")
    assert "  kv ALLOC_OWNER (0,0)" in out and "# op 7 mark done" in out
    assert any(line.startswith("  ATT ") and "kvb=row(0,0)+16" in line for line in out)
    assert main(["compile", "--nodes", "2", "--node", "2"]) == 2
    assert "--node=2 must be in 0..1" in capsys.readouterr().err


@pytest.mark.parametrize("schedule", ["mars"])
def test_fetcher_stream_pushes_what_the_executor_queued(schedule):
    """A compiled program in the command fetcher's format (``to_cmdstream``), run by the golden
    fetcher against a golden KV pool, pushes exactly the engine instructions the RTL executor
    queued on the Verilated cluster, where the hardware directory chose the slots: the fetcher's
    lookups and patches resolve every symbolic KV address as the executor did, and it sends the
    same directory commands."""
    import torch
    from mcf_fpga.golden.cmdfetch import run as fetch
    from mcf_fpga.golden.int_model import IntModel, quantize_model
    from mcf_fpga.golden.kvpool import KVPool
    from mcf_fpga.spec.kvpool import kv_id_from
    from mcf_fpga.golden.model import random_weights
    from mcf_fpga.hdl.cmdstream import encode
    from mcf_fpga.spec.instr import instr_value
    from mcf_fpga.spec.meta import DEFAULT_PARAMS
    from mcf_fpga.host.executors import run
    prog = program(nodes=4 if schedule == "pd" else 2, S=40, K=2, schedule=schedule)
    im = IntModel(quantize_model(random_weights(CFG, seed=2), block=16))
    prompt = torch.randint(0, CFG.vocab_size, (40,), generator=torch.Generator().manual_seed(2)).tolist()
    r = run(prog, im, prompt, backend="rtl")
    assert r.tokens == im.generate(prompt, 2)
    for c, issued in zip(compiled(prog), r.issued):
        pool = KVPool(c.pool_slots, prog.slot_bytes, kv_id_width=32, max_readers=15)
        res = fetch(encode(C.to_cmdstream(c.stream)), pool=pool, counters=[c.cmd_count, 0, 0, 0, 0, 0, 0, 0],
                    slot_rows=c.slot_rows)
        assert res.done and not res.error, (c.node, res.err_cause, res.err_index, res.err_info)
        assert res.engine == [instr_value(ins) for _op, ins in issued], f"node {c.node}"
        kv = [(int(x.opcode), kv_id_from(x.layer, x.unit, DEFAULT_PARAMS.layer_bits))
              for x in c.stream if isinstance(x, C.KvCmd)]
        assert [(int(o), k) for o, k in res.kv if o != 0] == kv      # LOOKUPs (opcode 0) are the patches'


def _kvs_reference(c, u, op) -> list:
    """``NodeCompiler.kvs_unit`` as first written: every instruction built by ``instr``."""
    from mcf_fpga.golden.header import pack_int
    from mcf_fpga.spec.instr import KvsFlags
    from mcf_fpga.spec.meta import MetaOp
    kinds = c.recv_install.get(op.msg, set())
    owner = kinds == {"owner"}
    slot, row0 = c.ddr.slot_row(u["row"], c.kv_heads * u["stride"])
    meta = pack_int(dataclasses.replace(op.meta, op=MetaOp.KV_REPLICA))
    counts = c.install_packets(u["stride"])
    starts = [row0 + sum(counts[:i]) for i in range(len(counts) // 2)]
    runs = list(zip(starts + [c.ddr.R + r for r in starts], counts))
    return [instr(EngineOpcode.KVS, flags=KvsFlags(last=i == len(runs) - 1, first=i == 0, owner=owner), b=slot,
                  kvb=rec, ntok=n, meta=meta) for i, (rec, n) in enumerate(runs)]


@pytest.mark.parametrize("schedule,nodes,S,K,max_payload",
                         [("mars", 3, 48, 2, 96), ("pd", 4, 40, 3, 256), ("zigzag", 3, 64, 1, 2048)])
def test_kvs_shapes_stream_is_the_full_stream_folded(schedule, nodes, S, K, max_payload, monkeypatch):
    """``compile_program(kvs_shapes=True)`` (the performance model's stream) is the full stream
    with each unit's run of KVS instructions replaced by one KvsRun of their ``ntok``s, and
    ``kvs_unit`` gives the instructions ``instr`` builds one by one (``_kvs_reference``)."""
    prog = program(nodes=nodes, S=S, K=K, schedule=schedule)
    ncfg = dataclasses.replace(sim_ddr_node_config("ring"), kv_install=True)
    ncfg = dataclasses.replace(ncfg, nic=dataclasses.replace(ncfg.nic, max_payload=max_payload))
    kvs_unit, checked = C.NodeCompiler.kvs_unit, []

    def check(self, u, op):               # every unit sent: the instructions built one by one
        out = kvs_unit(self, u, op)
        assert out == _kvs_reference(self, u, op)
        checked.append(len(out))
        return out
    monkeypatch.setattr(C.NodeCompiler, "kvs_unit", check)
    full = compiled(prog, ncfg)
    _r, rm, rs = _decode_routes(prog)
    short = C.compile_program(prog, ncfg, rid_max=rm, rid_sum=rs, kvs_shapes=True)
    runs = 0
    for fc, sc in zip(full, short):
        it = iter(fc.stream)
        for r in sc.stream:
            if isinstance(r, C.KvsRun):
                got = [next(it) for _ in r.fields["ntoks"]]
                assert all(type(g) is C.Ins and g.fields["op"] == EngineOpcode.KVS and g.op == r.op for g in got)
                assert tuple(g.fields["ntok"] for g in got) == r.fields["ntoks"]
                assert got[0].fields["flags"] & 2 and got[-1].fields["flags"] & 1      # first ... last
                runs += 1
            else:
                assert next(it) == r
        assert next(it, None) is None
        assert fc.cmd_count == sc.cmd_count
    assert runs == len(checked) > 0 and (max(checked) > 2 or max_payload == 2048)
