"""PartialRowAssembler vs spec.partial.PartialRow: random partial rows (m, l, o) as their 2d+4
scratchpad words (the host's ``program.partial_words``) come out as {m, l, o[d]} beats, under
random gaps and back-pressure; with two ports, each row's first and second half on its own
stream (independent gaps), taking a pair per cycle; with two ports and ``serial`` set, one stream
of words offered on both ports (the engine's acc ATT): a row's first half taken on ``word``, its
second half on ``word_b``, never both ports ready."""
import random

from hypothesis import given, settings, strategies as st

from mcf_fpga.hdl.compute.partial_row_assembler import PartialRowAssembler
from mcf_fpga.hdl.compute.program import partial_words
from mcf_fpga.sim.kit import StreamSink, StreamSource, run_simulation
from mcf_fpga.spec.numerics import ACC_BITS

D = 4
acc = st.integers(-2 ** (ACC_BITS - 1), 2 ** (ACC_BITS - 1) - 1)
rows_st = st.lists(st.tuples(st.integers(-2 ** 31, 2 ** 31 - 1), st.integers(0, 2 ** ACC_BITS - 1),
                             st.lists(acc, min_size=D, max_size=D)), min_size=1, max_size=3)


def signed(v, bits):
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


@given(rows=rows_st, seed=st.integers(0, 2 ** 16), vp=st.sampled_from([1.0, 0.5]),
       rp=st.sampled_from([1.0, 0.3]), ports=st.sampled_from([1, 2, "2 serial"]))
@settings(max_examples=30, deadline=None)
def test_assembler_matches_partial_rows(rows, seed, vp, rp, ports):
    serial = ports == "2 serial"
    dut = PartialRowAssembler(D, ports=2 if serial else ports)
    row_words = [partial_words(m_, l_, o_) for m_, l_, o_ in rows]
    nport = 2 if serial else ports
    half = len(row_words[0]) // nport
    streams = [[w for ws in row_words for w in ws[j * half:(j + 1) * half]] for j in range(nport)]
    srcs = [StreamSource(port, seed=seed + 7 * j, valid_prob=vp)
            for j, port in enumerate([dut.word] + ([dut.word_b] if nport == 2 else []))]
    snk = StreamSink(dut.row, seed=seed + 1, ready_prob=rp)
    out = {}

    def sender(src, words):
        async def send(ctx):
            await src.send(ctx, [{"data": w} for w in words])
        return send

    async def rx(ctx):
        out["rows"] = await snk.collect(ctx, len(rows))

    async def one_stream(ctx):          # serial, as the engine's acc ATT: one stream of the rows'
        ctx.set(dut.serial, 1)          # words offered on both ports, taken by the ready one
        rng = random.Random(seed)
        words = [w for ws in row_words for w in ws]
        while words:
            v = rng.random() < vp
            for port in (dut.word, dut.word_b):
                ctx.set(port.valid, v)
                ctx.set(port.payload.data, words[0])
            _, _, ra, rb = await ctx.tick().sample(dut.word.ready, dut.word_b.ready)
            assert not (ra and rb), "serial: both ports ready"
            if v and (ra or rb):
                words.pop(0)
        for port in (dut.word, dut.word_b):
            ctx.set(port.valid, 0)
    run_simulation(dut, ([one_stream] if serial else [sender(s, w) for s, w in zip(srcs, streams)]) + [rx],
                   vcd=False, max_cycles=3000)
    got = [(signed(r["m"], 32), r["l"], [signed(r["o"] >> ACC_BITS * i & (2 ** ACC_BITS - 1), ACC_BITS)
                                         for i in range(D)]) for r in out["rows"]]
    assert got == [(m_, l_, o_) for m_, l_, o_ in rows]


def test_two_ports_take_a_row_in_half_the_cycles():
    """At full rate a row's words are taken in d+2 cycles with two ports, 2d+4 with one."""
    for ports, expect in ((1, 2 * D + 4), (2, D + 2)):
        dut = PartialRowAssembler(D, ports=ports)
        words = partial_words(5, 6, list(range(D)))
        half = len(words) // ports
        out = {}

        def sender(port, ws):
            async def send(ctx):
                await StreamSource(port).send(ctx, [{"data": w} for w in ws])
            return send

        async def rx(ctx):
            n = 0
            while not ctx.get(dut.row.valid):
                await ctx.tick()
                n += 1
            out["cycles"] = n
        ports_ = [dut.word] + ([dut.word_b] if ports == 2 else [])
        run_simulation(dut, [sender(p, words[j * half:(j + 1) * half]) for j, p in enumerate(ports_)] + [rx],
                       vcd=False, max_cycles=200)
        assert out["cycles"] == expect, (ports, out)
