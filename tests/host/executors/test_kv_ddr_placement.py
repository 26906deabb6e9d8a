"""host.executors.kv_ddr on its own (no simulation): the DDR engine's instruction rewrite and the
DDR image check.

The rewrite must (1) give every ATT exactly its rows through one KVL into the window the ATT then
reads, (2) never queue a KVL of a window that an earlier ATT still holds (the in-order engine
refuses it with ERR_SHAPE: only that later ATT would free it), (3) never move a load ahead of a
KVW (it may write those rows), (4) turn KVW's flat rows into (slot, row) naming the same rows.
Checked by replaying the rewritten stream through a model of the engine's windows. A batch may
also preload the next batch's first ATT jobs (``rewrite(..., then=...)``): the same replay, and a
refusal exactly when a KVW queued between a preload and its ATT writes the rows it read."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from mcf_fpga.golden.int_model import IntKVCache
from mcf_fpga.spec.kvregion import KVRegion
from mcf_fpga.golden.kvstore import KVStore
from mcf_fpga.spec.instr import AttFlags, EngineOpcode, KvwFlags
from mcf_fpga.hdl.compute.program import instr
from mcf_fpga.host.executors.kv_ddr import DdrKV, ddr_mismatches

R = 32                                  # region slot rows


def region(n_slots=12, kv_bits=8):
    return KVRegion(base=0x1000, n_slots=n_slots, slot_rows=R, d=4, kv_bits=kv_bits)


@st.composite
def batches(draw):
    """Batches of ATT / KVW / other instructions over flat rows of 10 slots."""
    out = []
    for _ in range(draw(st.integers(1, 4))):
        batch = []
        for _ in range(draw(st.integers(0, 8))):
            kind = draw(st.sampled_from(["att", "att", "kvw", "vec"]))
            slot = draw(st.integers(0, 9))
            if kind == "att":
                n = draw(st.integers(1, 8))
                row = draw(st.integers(0, R - n))
                batch.append(instr(EngineOpcode.ATT, kvb=slot * R + row, ntok=n, nblk=1, bs=8, flags=AttFlags(causal=True),
                                   sub=draw(st.integers(0, 1)), a=draw(st.integers(0, 99))))
            elif kind == "kvw":
                n0, n1 = draw(st.integers(1, 8)), draw(st.integers(1, 2))
                kvs = 8
                row = draw(st.integers(0, R - ((n1 - 1) * kvs + n0)))
                batch.append(instr(EngineOpcode.KVW, kvb=slot * R + row, kvs=kvs, n0=n0, n1=n1,
                                   flags=KvwFlags(v=draw(st.booleans()))))
            else:
                batch.append(instr(4, a=draw(st.integers(0, 99))))
        out.append(batch)
    return out


def _overlaps(kvw, att) -> bool:
    return any(kvw["kvb"] + i * kvw["kvs"] < att["kvb"] + att["ntok"] and att["kvb"] < kvw["kvb"] + i * kvw["kvs"] + kvw["n0"]
               for i in range(kvw["n1"]))


class _Windows:
    """A replay of rewritten batches through the engine's windows: every ATT reads the rows its
    window was loaded with, no KVL takes a window an ATT queued before it still holds, and no KVW
    between a load and its ATT wrote them (``strict``: no KVW at all in between)."""

    def __init__(self, win_rows, strict):
        self.win_rows, self.strict = win_rows, strict
        self.claimed = set()             # windows loading or loaded and not yet released
        self.loaded = {}                 # window -> (slot, row, n, KVWs queued since its KVL)

    def replay(self, out, batch, released=lambda o: None):
        orig = iter(batch)
        for ins in out:
            op = ins["op"]
            if op == EngineOpcode.KVL:
                w = ins["dst"]
                assert w not in self.claimed, "KVL of a window an earlier ATT still holds"
                self.claimed.add(w)
                self.loaded[w] = (ins["b"], ins["kvb"], ins["ntok"], [])
                continue
            o = next(orig)
            if op == EngineOpcode.ATT:
                w, r = divmod(ins["kvb"], self.win_rows)
                assert r == 0 and w in self.claimed
                slot, row = divmod(o["kvb"], R)
                assert self.loaded[w][:3] == (slot, row, o["ntok"]), "the window holds other rows"
                kvws = self.loaded[w][3]
                assert not (kvws if self.strict else [k for k in kvws if _overlaps(k, o)]), \
                    "the load was moved ahead of a KVW"
                assert ins["sub"] & 1
                self.claimed.discard(w)
                released(o)
                assert {k: v for k, v in ins.items() if k not in ("kvb", "sub")} == \
                    {k: v for k, v in o.items() if k not in ("kvb", "sub")}
            elif op == EngineOpcode.KVW:
                assert ins["b"] * R + ins["kvb"] == o["kvb"]
                assert ins["kvb"] + (ins["n1"] - 1) * ins["kvs"] + ins["n0"] <= R
                for w in self.claimed:
                    self.loaded[w][3].append(o)
            else:
                assert ins == o
        assert next(orig, None) is None, "an instruction was lost"


@settings(max_examples=200, deadline=None)
@given(batches(), st.sampled_from([2, 4]))
def test_rewrite_loads_every_att_without_deadlock(bs, n_win):
    kv = DdrKV(region(), win_rows=8, n_win=n_win, unit_rows=R, pool_slots=4)
    wins = _Windows(8, strict=True)
    for batch in bs:
        wins.replay(kv.rewrite(batch), batch)
    assert not wins.claimed             # every window was released by its ATT


@settings(max_examples=300, deadline=None)
@given(batches(), st.sampled_from([2, 4]), st.data())
def test_preloads_give_the_next_atts_their_windows(bs, n_win, data):
    """Batch i preloads up to n_win of batch i+1's first ATTs. Replayed (``_Windows``; a KVW
    between a load and its ATT may write other rows); the rewrite refuses a batch exactly when a
    KVW queued between a preload and its ATT writes the rows it read."""
    kv = DdrKV(region(), win_rows=8, n_win=n_win, unit_rows=R, pool_slots=4)
    wins, pending = _Windows(8, strict=False), []      # pending: the preloaded ATTs not yet replayed
    for i, batch in enumerate(bs):
        nxt = bs[i + 1] if i + 1 < len(bs) else []
        then = [a for a in nxt if a["op"] == EngineOpcode.ATT][:data.draw(st.integers(0, n_win), label="then")]
        # the refusal rule: a KVW after the preload point (this batch's last ATT, or its start)
        # and before its ATT in the next batch that writes the ATT's rows
        atts = [j for j, ins in enumerate(batch) if ins["op"] == EngineOpcode.ATT]
        after = batch[atts[-1] + 1:] if atts else batch
        bad_old = any(_overlaps(w, a) for a in pending for w in batch[:batch.index(a)] if w["op"] == EngineOpcode.KVW)
        bad_new = any(_overlaps(w, a) for a in then for w in after + nxt[:nxt.index(a)]
                      if w["op"] == EngineOpcode.KVW)
        try:
            out = kv.rewrite(batch, then)
        except ValueError as e:
            assert "already read" in str(e) and (bad_old or bad_new), str(e)
            return
        assert not bad_old
        # (a refusal for bad_new comes with the next batch, or never when this one is the last)
        wins.replay(out, batch, lambda o: pending.pop(0) if pending and pending[0] is o else None)
        assert not pending
        pending = list(then)
    assert not wins.claimed and not pending


def test_preload_refuses_a_job_out_of_turn():
    """The ATT after a preload must be the preloaded job; a preload waits for the last one."""
    kv = DdrKV(region(), win_rows=8, n_win=2, unit_rows=R, pool_slots=4)
    a = [instr(EngineOpcode.ATT, kvb=4 * R + 8 * k, ntok=8, nblk=1, bs=8) for k in range(3)]
    pre = kv.rewrite([instr(4, a=1)], then=a[:2])
    assert [i["op"] for i in pre] == [EngineOpcode.KVL, EngineOpcode.KVL, 4]
    assert [(i["b"], i["kvb"], i["dst"]) for i in pre[:2]] == [(4, 0, 0), (4, 8, 1)]
    with pytest.raises(ValueError, match="not yet queued"):
        kv.preload(a[2:])
    with pytest.raises(ValueError, match="is not the job whose block was preloaded"):
        kv.rewrite([a[1]])
    kv = DdrKV(region(), win_rows=8, n_win=2, unit_rows=R, pool_slots=4)
    kv.rewrite([], then=a[:1])
    with pytest.raises(ValueError, match="already read"):
        kv.rewrite([instr(EngineOpcode.KVW, kvb=4 * R + 7, kvs=8, n0=1, n1=1), a[0]])
    kv = DdrKV(region(), win_rows=8, n_win=2, unit_rows=R, pool_slots=4)
    kv.rewrite([], then=a[:1])
    out = kv.rewrite([instr(EngineOpcode.KVW, kvb=4 * R + 8, kvs=8, n0=1, n1=1), a[0], a[2]])
    assert [i["op"] for i in out] == [EngineOpcode.KVW, EngineOpcode.KVL, EngineOpcode.ATT, EngineOpcode.ATT]
    assert out[2]["kvb"] == 0 and out[1]["dst"] == 1 and out[3]["kvb"] == 8   # a[0] in window 0, a[2] in 1


def test_rewrite_refuses_what_the_ddr_engine_cannot_run():
    kv = DdrKV(region(), win_rows=8, n_win=2, unit_rows=R, pool_slots=4)
    with pytest.raises(ValueError, match="cross a region slot"):
        kv.rewrite([instr(EngineOpcode.KVW, kvb=R - 2, kvs=8, n0=4, n1=1)])
    with pytest.raises(ValueError, match="win_rows=8"):
        kv.rewrite([instr(EngineOpcode.ATT, kvb=0, ntok=9, nblk=1, bs=16)])
    with pytest.raises(ValueError, match="one block"):
        kv.rewrite([instr(EngineOpcode.ATT, kvb=0, ntok=8, nblk=2, bs=4)])
    with pytest.raises(ValueError, match=r"KVRegion.slot_rows"):
        DdrKV(region(), win_rows=8, n_win=2, unit_rows=R + 1, pool_slots=4)
    with pytest.raises(ValueError, match=r"KVRegion.n_slots"):
        DdrKV(region(), win_rows=8, n_win=2, unit_rows=R, pool_slots=12)
    assert DdrKV(region(), 8, 2, R, 4).stage_rows == (4 * R, 8 * R)


@pytest.mark.parametrize("kv_bits", [8, 4])
def test_ddr_image_check_finds_a_changed_byte(kv_bits):
    """An image built from the cache passes; one changed bit of one record is reported with its
    request, layer, position, head and K/V."""
    reg = region(kv_bits=kv_bits)
    g = torch.Generator().manual_seed(1)
    lim = 2 ** (kv_bits - 1)
    T, Hk = 10, 2
    cache = IntKVCache()
    for layer in range(2):
        k = (torch.randint(-lim, lim, (Hk, T, 4), generator=g), torch.randint(-9, 9, (Hk, T), generator=g))
        v = (torch.randint(-lim, lim, (Hk, T, 4), generator=g), torch.randint(-9, 9, (Hk, T), generator=g))
        cache.append(layer, k, v)
    # block b of 8 tokens; layer l's blocks at slots 2l (block 0) and 2l+1 (block 1, 2 tokens)
    held = [(0, layer, b, (2 * layer + b) * R, 8, min(8, T - 8 * b)) for layer in range(2) for b in range(2)]
    store = KVStore(reg)
    for _req, layer, b, row0, stride, count in held:
        for h in range(Hk):
            for i in range(count):
                slot, row = divmod(row0 + h * stride + i, R)
                for sel, (vals, exps) in enumerate((cache.k[layer], cache.v[layer])):
                    store.write_row(slot, sel, row, vals[h, 8 * b + i].tolist(), int(exps[h, 8 * b + i]))
    read = lambda addr, n: bytes(store.image[addr - reg.base:addr - reg.base + n])
    assert ddr_mismatches(reg, held, {0: cache}, 8, Hk, read) == []
    slot, row = divmod(held[3][3] + 1 * 8 + 1, R)            # layer 1, block 1, head 1, token 9
    off = reg.row_addr(slot, 1, row) - reg.base
    store.image[off] ^= 0x10
    bad = ddr_mismatches(reg, held, {0: cache}, 8, Hk, read)
    assert len(bad) == 1 and "layer 1 position 9 KV head 1 V" in bad[0]
