"""TxIngest (hdl/nic/link/tx_ingest.py) against a Python model of the retransmit-buffer
ingest: which beats are written where (masked by keep), which packets are numbered (``done``)
or dropped (``bad_len``), and the byte count kept per slot; random packet lengths (empty and
oversize included), random valid gaps, random ``allow`` and random slots."""
import random

from hypothesis import given, settings, strategies as st

from mcf_fpga.hdl.nic.link import LinkParams
from mcf_fpga.hdl.nic.link.tx_ingest import TxIngest
from mcf_fpga.sim.kit import run_simulation


@settings(max_examples=12, deadline=None)
@given(width=st.sampled_from([8, 16, 32, 64]), window=st.sampled_from([1, 2, 4]),
       max_packet=st.integers(1, 40), seed=st.integers(0, 2**32 - 1))
def test_ingest_matches_model(width, window, max_packet, seed):
    p = LinkParams(data_width=width, window=window, max_packet=max_packet)
    dut = TxIngest(p)
    rng = random.Random(seed)
    B, tsb = p.beat_bytes, p.tx_slot_beats
    lengths = [0] * window          # model of the per-slot byte counts
    seen = {"done": 0, "bad": 0}

    async def tb(ctx):
        beat = 0
        for _ in range(400):
            valid, allow = rng.random() < 0.7, rng.random() < 0.7
            last = rng.random() < (0.5 if beat >= tsb else 0.25)
            k = rng.choice([0, rng.randint(1, B), B]) if last else B
            data = rng.getrandbits(width)
            slot, rd_slot = rng.randrange(window), rng.randrange(window)
            for sig, v in ((dut.s_axis.valid, valid), (dut.allow, allow), (dut.s_axis.payload.last, last),
                           (dut.s_axis.payload.keep, (1 << k) - 1), (dut.s_axis.payload.data, data),
                           (dut.slot, slot), (dut.rd_slot, rd_slot)):
                ctx.set(sig, v)
            assert ctx.get(dut.s_axis.ready) == allow
            assert ctx.get(dut.rd_length) == lengths[rd_slot]
            xfer = valid and allow
            assert ctx.get(dut.wr_en) == (xfer and beat < tsb)
            if xfer and beat < tsb:
                assert ctx.get(dut.wr_addr) == slot * tsb + beat
                assert ctx.get(dut.wr_data) == data & ((1 << 8 * k) - 1)
            nbytes = beat * B + k
            bad = xfer and last and (nbytes == 0 or nbytes > max_packet or beat >= tsb)
            done = xfer and last and not bad
            assert (ctx.get(dut.done), ctx.get(dut.bad_len)) == (done, bad)
            seen["done"] += done
            seen["bad"] += bad
            if done:
                lengths[slot] = nbytes
            if xfer:
                beat = 0 if last else min(beat + 1, tsb)
            await ctx.tick()

    run_simulation(dut, [tb])
    assert seen["done"] + seen["bad"] > 0
