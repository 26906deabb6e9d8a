"""A node's data image (host.node_image) and the LOAD records that read it (host.compiler.to_cmdstream):
the layout follows from the compiled stream alone, and the golden fetcher + golden stream loader
over the image feed the engine exactly the bytes the host-driven RTL executor pushed."""
import pytest

from mcf_fpga.golden.config import get_config
from mcf_fpga.golden.int_model import IntModel, quantize_model
from mcf_fpga.golden.model import linear_shape, random_weights
from mcf_fpga.hdl.compute.gemm import tile_beats
from mcf_fpga.spec.loader import Dest, SP_BITS, load_bytes
from mcf_fpga.spec.instr import EngineOpcode
from mcf_fpga.host import compiler as C
from mcf_fpga.host.executors.rtl import NodeDriver, _decode_routes, sim_ddr_node_config, sim_node_config
from mcf_fpga.host.node_image import plan_image, unit_image
from mcf_fpga.host.scenario import build_programs

CFG = get_config("micro").replace(num_layers=1)
DW = 128


def program(nodes=2, S=40, K=2, schedule="mars", chunk=16):
    progs, _ = build_programs(CFG, nodes=nodes, topology="ring", prompt_len=S, max_new_tokens=K,
                              schedules=[schedule], chunk=chunk, block=16, kv_headroom=2.0)
    return progs[schedule]


def compiled(prog, ncfg):
    _r, rm, rs = _decode_routes(prog)
    return C.compile_program(prog, ncfg, rid_max=rm, rid_sum=rs)


@pytest.mark.parametrize("schedule", ["mars", "pd"])
def test_layout_from_the_stream_alone(schedule):
    """Regions are disjoint, beat-aligned and hold what their loads read; every weight load is one
    tile of the shape-derived beat count, and the model's own tiles agree (count and beats); the
    mailbox numbers its entries 1, 2, ... in stream order, counting publishes."""
    prog = program(nodes=4 if schedule == "pd" else 2, schedule=schedule)
    ncfg = sim_ddr_node_config("ring")
    im = IntModel(quantize_model(random_weights(CFG, seed=3), block=16))
    prompt = list(range(40))
    base = 0x30_0000_0000
    for c in compiled(prog, ncfg):
        img = plan_image(c, ncfg, base, data_width=DW)
        spans = sorted([(a, a + n) for a, n in img.regions.values()]
                       + [(a, a + load_bytes(w, SP_BITS, DW)) for a, w, _e in img.mail.values()])
        for (a0, a1), (b0, _b1) in zip(spans, spans[1:]):
            assert a1 <= b0, "regions overlap"
        assert all(a % (DW // 8) == 0 for a, _ in spans)
        assert spans[-1][1] - base <= img.size
        drv = NodeDriver(c, im, prompt, ncfg)
        e = ncfg.engine
        for i, r in enumerate(c.stream):
            if isinstance(r, C.Weights):
                tiles = drv.weight_tiles((r.layer, r.name, r.rows))
                lds = img.loads[i]
                assert [ld.count for ld in lds] == [len(t) for t in tiles]
                k = linear_shape(CFG, r.name)[1]
                assert {ld.count for ld in lds} == {tile_beats(k // e["pk"], e["group"] // e["pk"], e["pk"])}
                assert all(ld.dest == Dest.W for ld in lds)
                a, n = img.regions[("w", r.layer, r.name, r.rows)]
                assert lds[0].addr == a and n == sum(load_bytes(ld.count, img.w_bits, DW) for ld in lds)
            elif isinstance(r, (C.Embed, C.Rope)):
                (ld,) = img.loads[i]
                assert ld.dest == Dest.SP
                words = (drv.im.embed(drv.prompts[r.req][r.rows[0]:r.rows[1]]).numel() if isinstance(r, C.Embed)
                         else len(drv.cs_words(r.t0, r.t1)))
                assert ld.count == words
        ev = 0
        for i, r in enumerate(c.stream):
            if isinstance(r, C.Publish):
                ev += 1
            if i in img.mail:
                ev += 1
                assert img.mail[i][2] == ev
                assert isinstance(r, (C.FeedRecv, C.EmbedToken, C.TokenWord, C.BestWords, C.EmptyPartial))
        assert img.mail, "a program with decode has run-time feeds"


def test_unit_image_is_the_loader_rule():
    """unit_image pads each unit to its stride and the whole to beats; negative words wrap."""
    assert unit_image([1, -1], 32, 128) == (b"\x01\0\0\0" + b"\xff" * 4 + bytes(8))
    img = unit_image([(1 << 255) | 5], 256, 128)
    assert len(img) == 32 and img[0] == 5 and img[31] == 0x80
    assert len(unit_image([0] * 3, 24, 64)) == 16       # 3-byte units on a 4-byte stride, one 8-byte beat pads


def test_host_driven_node_has_no_image():
    """Without a fetcher the node keeps its input streams: plan_image still lays the stream out, but
    to_cmdstream without an image has no LOAD record."""
    from mcf_fpga.hdl.cmdstream import Load
    prog = program()
    (c, *_) = compiled(prog, sim_node_config("ring"))
    assert not any(isinstance(r, Load) for r in C.to_cmdstream(c.stream))


def test_golden_fetcher_and_loader_feed_what_the_host_pushed(monkeypatch):
    """MARS (prefill + 2 decode steps, 2 nodes) runs host-driven on the Verilated DDR node, which
    records every weight beat and scratchpad word the host pushed. Each node's fetched stream with
    its image (``to_cmdstream(stream, plan_image(...))``) run through the golden fetcher and the
    golden stream loader, over the image the executor writes (weights, prompt rows, RoPE rows;
    the mailbox entries filled with the run-time words the host fed), gives the engine exactly
    those beats and words, in order."""
    import torch
    from mcf_fpga.golden.cmdfetch import run as fetch
    from mcf_fpga.golden.kvpool import KVPool
    from mcf_fpga.golden.loader import run as load
    from mcf_fpga.hdl.cmdstream import encode
    from mcf_fpga.hdl.node import LOAD_DATA_WIDTH
    from mcf_fpga.host.executors import rtl
    pushed = {}
    orig = rtl.NodeDriver.push

    def record(self, port, data):
        pushed.setdefault((self.node, port), []).append(bytes(data))
        return orig(self, port, data)
    monkeypatch.setattr(rtl.NodeDriver, "push", record)
    prog = program()
    ncfg = sim_ddr_node_config("ring")
    im = IntModel(quantize_model(random_weights(CFG, seed=2), block=16))
    prompt = torch.randint(0, CFG.vocab_size, (40,), generator=torch.Generator().manual_seed(2)).tolist()
    r = rtl.run_rtl(prog, im, prompt, node_cfg=ncfg)
    assert r.tokens == im.generate(prompt, 2)
    base = rtl.LOAD_BASE
    sp_records = (C.Embed, C.Rope, C.FeedRecv, C.EmbedToken, C.TokenWord, C.BestWords, C.EmptyPartial)
    for c in compiled(prog, ncfg):
        img = plan_image(c, ncfg, base, data_width=LOAD_DATA_WIDTH)
        drv = NodeDriver(c, im, prompt, ncfg)
        drv.image = img
        mem = {}

        def put(addr, data):
            mem.update((addr + k, b) for k, b in enumerate(data))
        for key, (addr, _n) in img.regions.items():
            put(addr, drv.image_bytes(key))
        sp_pushes = list(pushed.get((c.node, "s_axis_sp"), []))
        feeds = [i for i, x in enumerate(c.stream) if isinstance(x, sp_records)]
        assert len(feeds) == len(sp_pushes), f"node {c.node}: one push per feed"
        for i, data in zip(feeds, sp_pushes):
            if i in img.mail:
                addr, n, _e = img.mail[i]
                assert len(data) == 4 * n, f"node {c.node} record {i}: mailbox of {n} words, the host fed {len(data) // 4}"
                put(addr, unit_image([int.from_bytes(data[k:k + 4], "little") for k in range(0, len(data), 4)],
                                     32, LOAD_DATA_WIDTH))
        events = max([e for _a, _n, e in img.mail.values()] + [0])
        pool = KVPool(c.pool_slots, prog.slot_bytes, kv_id_width=32, max_readers=15)
        res = fetch(encode(C.to_cmdstream(c.stream, img)), pool=pool,
                    counters=[c.cmd_count, events, 0, 0, 0, 0, 0, 0], slot_rows=c.slot_rows)
        assert res.done and not res.error, (c.node, res.err_cause, res.err_index, res.err_info)
        got = load(mem, base, res.loads, w_bits=img.w_bits, data_width=LOAD_DATA_WIDTH)
        assert all(code == 0 for code, _a in got.status)
        nb = img.w_bits // 8
        w_bytes = b"".join(pushed.get((c.node, "s_axis_w"), []))
        assert b"".join(d.to_bytes(nb, "little") for d, _last in got.w) == w_bytes, f"node {c.node}: weights"
        tiles = [len(t) for t in (x for x in pushed.get((c.node, "s_axis_w"), []))]
        assert [k for k, (_d, last) in enumerate(got.w) if last] == \
            [sum(tiles[:j + 1]) // nb - 1 for j in range(len(tiles))], f"node {c.node}: one tile per load"
        sp_bytes = b"".join(sp_pushes)
        assert b"".join((w & 0xFFFFFFFF).to_bytes(4, "little") for w in got.sp) == sp_bytes, f"node {c.node}: words"


@pytest.mark.parametrize("schedule,nodes", [("mars", 2), ("pd", 4)])
def test_rx_landing_zones(schedule, nodes):
    """With an RX placer every placed receive key gets an entry and a beat-aligned landing zone
    of one slot per packet over the run (disjoint from every other region and the mailbox); a
    placed FeedRecv waits for each packet's landed count on its entry's counter (1, 2, ... per
    key, in stream order) and loads the packet's words from its slot; placed records have no
    mailbox entry; the empty partial is the ("empty",) constant; to_cmdstream puts the waits
    right before the loads."""
    from mcf_fpga.spec.rx_placer import land_bytes
    from mcf_fpga.hdl.cmdstream import Load as FLoad, Wait
    from mcf_fpga.host.executors.rtl import sim_fetch_node_config
    from mcf_fpga.host.node_image import empty_partial_words, rx_packet_sizes
    ncfg = sim_fetch_node_config("ring")
    base, beat = 0x30_0000_0000, DW // 8
    for c in compiled(program(nodes=nodes, schedule=schedule, K=3), ncfg):
        img = plan_image(c, ncfg, base, data_width=DW)
        placed = C.placed_records(c.stream)
        assert img.placed == placed | img.picks.served and not img.placed & set(img.mail)
        spans = sorted([(a, a + n) for a, n in img.regions.values()]
                       + [(a, a + load_bytes(w, SP_BITS, DW)) for a, w, _e in img.mail.values()])
        for (a0, a1), (b0, _b1) in zip(spans, spans[1:]):
            assert a1 <= b0, "regions overlap"
        assert sorted(e.index for e in img.rx.values()) == list(range(len(img.rx))) <= list(range(ncfg.rx_entries))
        seen, pending = {}, None
        for i, r in enumerate(c.stream):
            if i in placed and isinstance(r, (C.Recv, C.RecvMax, C.RecvSum)):
                pending = rx_packet_sizes(r, c)
            elif i in placed and isinstance(r, C.FeedRecv):
                # each packet waited for once, its words loaded `copies` times (PD's token pair)
                assert len(img.waits[i]) * r.copies == len(img.loads[i]) == len(pending) * r.copies
                assert img.loads[i] == img.loads[i][:len(pending)] * r.copies
                for (key, size), (ctr, k), ld in zip(pending, img.waits[i], img.loads[i]):
                    key = C.rx_entry_key(key)
                    ent = img.rx[key]
                    seen[key] = seen.get(key, 0) + 1
                    assert (ctr, k) == (C.COUNTER_RX0 + ent.index, seen[key])
                    assert ld.dest == Dest.SP and ld.count == size // 4
                    assert ent.addr <= ld.addr and ld.addr + land_bytes(size, beat) <= ent.addr + ent.limit
                    assert ld.addr % beat == 0
                pending = None
            elif isinstance(r, C.EmptyPartial):
                (ld,) = img.loads[i]
                assert (ld.addr, ld.count) == (img.regions[("empty",)][0], len(empty_partial_words(c)))
        for key, ent in img.rx.items():       # the zone holds every packet of the key, nothing more
            assert ent.limit == sum(land_bytes(sz, beat) for j in sorted(placed)
                                    if isinstance(c.stream[j], (C.Recv, C.RecvMax, C.RecvSum))
                                    for k, sz in rx_packet_sizes(c.stream[j], c) if C.rx_entry_key(k) == key)
        recs = C.to_cmdstream(c.stream, img)
        for k, rec in enumerate(recs):
            if isinstance(rec, Wait) and rec.counter >= C.COUNTER_RX0:
                assert isinstance(recs[k + 1], (Wait, FLoad))
        n_rx_waits = sum(isinstance(x, Wait) and x.counter >= C.COUNTER_RX0 for x in recs)
        assert n_rx_waits == sum(ctr >= C.COUNTER_RX0 for w in img.waits.values() for ctr, _k in w)
        if schedule == "mars":
            assert img.rx, f"node {c.node}: decode receives are placed"


def test_rx_entries_limit_is_a_compile_error():
    """More receive keys than placer entries: the image is refused, naming the limit."""
    import dataclasses
    from mcf_fpga.host.executors.rtl import sim_fetch_node_config
    ncfg = dataclasses.replace(sim_fetch_node_config("ring"), rx_entries=1)
    c = compiled(program(K=3), ncfg)[0]
    with pytest.raises(C.CompileError, match=r"node 0: 2 receive keys, the RX placer has rx_entries=1"):
        plan_image(c, ncfg, 0, data_width=DW)


@pytest.mark.parametrize("schedule,nodes,w_group", [("mars", 2, None), ("pd", 4, None), ("mars", 2, (1, 0))])
def test_pick_plan(schedule, nodes, w_group):
    """With a token picker the node arms a pick right before the SPR of every frame that carries a
    token (frame = the SPR's ordinal among the node's SPRs, slot = request mod 4): the argmax of
    the prompt's last logits row (skip (T-1)*V), of every decode step's logits and of a W node's
    vocabulary slice; the best pair of the W group's pairs (2W words) and of a received token's
    pair (token, token). Every token the decode needs is then the node's: each EmbedToken waits
    for its pick (COUNTER_PICKS) and LOADXes its row from the embedding table; each TokenWord
    (PD's hand-over) PUTs the slot's token, each BestWords its slice's value and v0 + index. The
    host feeds none of them (no mailbox entry)."""
    from mcf_fpga.hdl.cmdstream import LoadX, Pick, Put, Wait
    from mcf_fpga.host.executors.rtl import sim_fetch_node_config
    from mcf_fpga.host.node_image import ARGMAX, PAIRS, PUT_TOKEN, PUT_VALUE, embed_row_bytes
    ncfg = sim_fetch_node_config("ring")
    if w_group is None:
        prog = program(nodes=nodes, schedule=schedule, K=3)
    else:
        progs, _ = build_programs(CFG, nodes=nodes, topology="ring", prompt_len=40, max_new_tokens=3,
                                  schedules=[schedule], chunk=16, block=16, kv_headroom=2.0, w_group=w_group)
        prog = progs[schedule]
    seen = set()
    for c in compiled(prog, ncfg):
        img = plan_image(c, ncfg, 0x30_0000_0000, data_width=DW)
        pk = img.picks
        sprs = [i for i, r in enumerate(c.stream) if isinstance(r, C.Ins) and r.fields["op"] == EngineOpcode.SPR]
        expect = {}                        # frame record index -> (skip, n, mode)
        for i, r in enumerate(c.stream):
            if isinstance(r, C.Logits) and r.rows[1] == prog.reqs[r.req][0]:
                expect[i] = ((r.rows[1] - r.rows[0] - 1) * c.vocab, c.vocab, ARGMAX)
            elif isinstance(r, C.DLogits):
                expect[i] = (0, c.vocab, ARGMAX)
            elif isinstance(r, C.TpLogits):
                expect[i] = (0, r.v1 - r.v0, ARGMAX)
            elif isinstance(r, C.Pick):
                expect[i] = (0, 2 * r.parts, PAIRS)
            elif isinstance(r, C.RecvToken):
                expect[i] = (0, 2, PAIRS)
        assert len(pk.arms) == len(expect)
        for i, (skip, n, mode) in expect.items():
            j = max(s for s in sprs if s < i)
            assert pk.arms[j] == (sprs.index(j), skip, n, c.stream[i].req % 4, mode)
            assert i in img.placed
            seen.add(type(c.stream[i]))
        for i, r in enumerate(c.stream):
            if isinstance(r, (C.EmbedToken, C.TokenWord, C.BestWords)):
                got = pk.embeds.get(i) or pk.puts.get(i)
                assert got is not None and i not in img.mail and i in img.placed, (c.node, i, r)
                assert img.waits[i] == [(C.COUNTER_PICKS, got[0])]
                seen.add(type(r))
            if isinstance(r, C.TokenWord):
                assert pk.puts[i][2] == ((PUT_TOKEN, 0),)
            elif isinstance(r, C.BestWords):
                v0 = prog.wsplit.vocab(r.part)[0]
                assert pk.puts[i][2] == ((PUT_VALUE, 0), (PUT_TOKEN, v0))
        if pk.embeds:
            addr, words, stride = pk.table
            assert img.regions[("embtab",)] == (addr, c.vocab * stride) and words == c.hidden
            assert stride == embed_row_bytes(c, DW)
        recs = C.to_cmdstream(c.stream, img)
        assert sum(isinstance(x, Pick) for x in recs) == len(pk.arms)
        assert sum(isinstance(x, Put) for x in recs) == sum(len(w) for _k, _s, w in pk.puts.values())
        for k, x in enumerate(recs):
            if isinstance(x, (LoadX, Put)):
                before = recs[k - 1] if isinstance(recs[k - 1], Wait) else recs[k - 2]
                assert isinstance(before, Wait) and before.counter == C.COUNTER_PICKS
    want = {"mars": {C.Logits, C.DLogits, C.EmbedToken}, "pd": {C.Logits, C.DLogits, C.EmbedToken, C.TokenWord,
                                                                C.RecvToken}}[schedule]
    if w_group:
        want = {C.Logits, C.TpLogits, C.Pick, C.EmbedToken, C.BestWords, C.TokenWord, C.RecvToken}
    assert want <= seen, want - seen


def test_rx_entries_do_not_grow_with_layers():
    """One placer entry per message stream (kind, source, block) serves every layer: a 3-layer
    model needs as many entries as a 1-layer one, its zones hold 3x the packets."""
    from mcf_fpga.host.executors.rtl import sim_fetch_node_config
    ncfg = sim_fetch_node_config("ring")
    sizes = {}
    for layers in (1, 3):
        cfg = get_config("micro").replace(num_layers=layers)
        progs, _ = build_programs(cfg, nodes=2, topology="ring", prompt_len=40, max_new_tokens=3,
                                  schedules=["mars"], chunk=16, block=16, kv_headroom=2.0)
        for c in compiled(progs["mars"], ncfg):
            img = plan_image(c, ncfg, 0, data_width=DW)
            assert all(key[2] is None for key in img.rx)
            sizes[(layers, c.node)] = (len(img.rx), sum(e.limit for e in img.rx.values()))
    for n in (0, 1):
        assert sizes[(3, n)][0] == sizes[(1, n)][0] > 0
        assert sizes[(3, n)][1] == 3 * sizes[(1, n)][1]
