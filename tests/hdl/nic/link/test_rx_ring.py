"""RxRing (hdl/nic/link/rx_ring.py) against a Python model of the receive ring: packets
pushed while not full come out on ``m_axis`` whole, in order and unchanged (``keep`` partial
on the last beat only), ``full`` and ``wr_base`` track the ring, and ``delivered`` marks
each last beat taken; random lengths, push timing and ``m_axis`` back-pressure. The receive
buffer is modelled in the testbench as a synchronous-read memory."""
import random

from hypothesis import given, settings, strategies as st

from mcf_fpga.hdl.nic.link import LinkParams
from mcf_fpga.hdl.nic.link.rx_ring import RxRing
from mcf_fpga.sim.kit import run_simulation


@settings(max_examples=12, deadline=None)
@given(width=st.sampled_from([8, 16, 32, 64]), rx_slots=st.sampled_from([1, 2, 4]),
       max_packet=st.integers(1, 40), n=st.integers(1, 8), push_p=st.sampled_from([0.2, 0.8]),
       ready_p=st.sampled_from([0.3, 1.0]), seed=st.integers(0, 2**32 - 1))
def test_ring_delivers_pushed_packets_in_order(width, rx_slots, max_packet, n, push_p, ready_p, seed):
    p = LinkParams(data_width=width, rx_slots=rx_slots, max_packet=max_packet)
    dut = RxRing(p)
    rng = random.Random(seed)
    B, rsb = p.beat_bytes, p.rx_slot_beats
    packets = [rng.randbytes(rng.randint(1, max_packet)) for _ in range(n)]
    mem = [0] * (rx_slots * rsb)
    got, beats = [], []

    async def tb(ctx):
        pushed, wr, rd_data = 0, 0, 0
        while len(got) < n:
            ctx.set(dut.rd_data, rd_data)
            ready = rng.random() < ready_p
            ctx.set(dut.m_axis.ready, ready)
            occupied = pushed - len(got)
            assert ctx.get(dut.full) == (occupied == rx_slots)
            assert ctx.get(dut.wr_base) == (wr % rx_slots) * rsb
            push = pushed < n and occupied < rx_slots and rng.random() < push_p
            ctx.set(dut.push, push)
            if push:           # the deframer wrote the packet into the slot before
                pk = packets[pushed]
                for i in range(0, len(pk), B):
                    mem[ctx.get(dut.wr_base) + i // B] = int.from_bytes(pk[i:i + B], "little")
                ctx.set(dut.push_length, len(pk))
            delivered = False
            if ctx.get(dut.m_axis.valid) and ready:
                last, keep = ctx.get(dut.m_axis.payload.last), ctx.get(dut.m_axis.payload.keep)
                if not last:
                    assert keep == (1 << B) - 1
                nb = bin(keep).count("1")
                assert keep == (1 << nb) - 1
                beats.append(ctx.get(dut.m_axis.payload.data).to_bytes(B, "little")[:nb])
                if last:
                    got.append(b"".join(beats))
                    beats.clear()
                    delivered = True
            assert ctx.get(dut.delivered) == delivered
            rd_data = mem[ctx.get(dut.rd_addr)]
            pushed, wr = pushed + push, wr + push
            await ctx.tick()

    run_simulation(dut, [tb], max_cycles=20_000)
    assert got == packets
