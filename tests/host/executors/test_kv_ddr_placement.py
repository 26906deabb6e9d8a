"""host.executors.kv_ddr on its own (no simulation): the DDR engine's instruction rewrite and the
DDR image check.

The rewrite must (1) give every ATT exactly its rows through one KVL into the window the ATT then
reads, (2) never queue a KVL of a window that an earlier ATT still holds (the in-order engine
refuses it with ERR_SHAPE: only that later ATT would free it), (3) never move a load ahead of a
KVW (it may write those rows), (4) turn KVW's flat rows into (slot, row) naming the same rows.
Checked by replaying the rewritten stream through a model of the engine's windows."""
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


@settings(max_examples=200, deadline=None)
@given(batches(), st.sampled_from([2, 4]))
def test_rewrite_loads_every_att_without_deadlock(bs, n_win):
    win_rows = 8
    kv = DdrKV(region(), win_rows=win_rows, n_win=n_win, unit_rows=R, pool_slots=4)
    claimed = set()                     # windows loading or loaded and not yet released
    loaded = {}                         # window -> (slot, row, n) of its load
    written_since = {}                  # window -> a KVW came after its KVL (in queue order)
    for batch in bs:
        out = kv.rewrite(batch)
        orig = iter(batch)
        for ins in out:
            op = ins["op"]
            if op == EngineOpcode.KVL:
                w = ins["dst"]
                assert w not in claimed, "KVL of a window an earlier ATT still holds"
                claimed.add(w)
                loaded[w] = (ins["b"], ins["kvb"], ins["ntok"])
                written_since[w] = False
                continue
            o = next(orig)
            if op == EngineOpcode.ATT:
                w, r = divmod(ins["kvb"], win_rows)
                assert r == 0 and w in claimed
                slot, row = divmod(o["kvb"], R)
                assert loaded[w] == (slot, row, o["ntok"]), "the window holds other rows"
                assert not written_since[w], "the load was moved ahead of a KVW"
                assert ins["sub"] & 1
                claimed.discard(w)
                assert {k: v for k, v in ins.items() if k not in ("kvb", "sub")} == \
                    {k: v for k, v in o.items() if k not in ("kvb", "sub")}
            elif op == EngineOpcode.KVW:
                assert ins["b"] * R + ins["kvb"] == o["kvb"]
                assert ins["kvb"] + (ins["n1"] - 1) * ins["kvs"] + ins["n0"] <= R
                for w in written_since:
                    written_since[w] = True
            else:
                assert ins == o
        assert next(orig, None) is None, "an instruction was lost"
    assert not claimed                  # every window was released by its ATT


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
