"""The table directory of :class:`hdl.kvpool.KVPool` (``directory="table"``): a KV pool whose
directory scales to the KV region in DDR (KR260: 7,281 slots at INT8, 13,107 at INT4).

Same commands, answers, counters, registers, NIC path and event stream as the register CAM; the rules are
the shared :func:`hdl.kvpool.decide`, so :mod:`golden.kvpool` (built with ``table=(layers,
blocks)``) answers both bit for bit. Only the storage differs:

* **Directory**: a direct-mapped table in a ``lib.memory`` Memory (block RAM), one entry per
  kv_id of the configured range, at index ``block * layers + layer`` (``layer`` = kv_id bits
  ``0..layer_bits-1``, ``block`` the bits above: ``hdl.meta.kv_id_layout``). An entry is
  ``{valid, slot, state:3, readers}``. A kv_id with ``layer >= layers`` or
  ``block >= blocks`` has no entry: allocations of it answer ``OUT_OF_RANGE``, every other
  command answers as for an unknown kv_id (``UNKNOWN``; a NIC message is dropped).
* **Free slots**: a bitmap (1 = free) of ``ceil(n_slots / word_bits)`` words in a second
  Memory, plus a register with one bit per word (1 = the word has a free slot). Allocation
  takes the first set bit of that register, reads its word and takes the word's first set
  bit: the lowest-numbered free slot, golden's rule (a two-level find-first-set).

Timing: after reset the table and bitmap are cleared, one entry per cycle
(``max(layers * blocks, words)`` cycles, ``cmd``/``nic`` not ready meanwhile). A command then
takes 4 cycles to its answer (accept, read the entry and the bitmap word, decide and write
back, answer valid) and the next command is accepted the cycle after the answer is taken; a
command (or NIC message) that frees a slot adds 2 cycles before the next accept (read-modify-
write of the freed slot's bitmap word; the answer is already valid meanwhile). The stream
contract is the CAM's: one command in flight, back-pressure on ``resp`` stalls ``cmd``.
"""
from amaranth import Module, Signal, Const, Cat, Mux
from amaranth.lib import data, memory, wiring

from mcf_fpga.spec.kvpool import State
from mcf_fpga.hdl.kvpool import accept, respond, decide, answer, event_port, Counters, connect_counters

__all__ = ["elaborate_table", "entry_layout", "table_index"]


def entry_layout(n_slots, max_readers):
    """One directory entry: ``{valid:1, slot, state:3, readers}`` (slot/readers as in ``resp``)."""
    return data.StructLayout({"valid": 1, "slot": max(1, (n_slots - 1).bit_length()), "state": 3,
                              "readers": max_readers.bit_length()})


def table_index(kv_id, layers, layer_bits=8):
    """Table entry of an in-range kv_id (the integer the hardware computes)."""
    return (kv_id >> layer_bits) * layers + (kv_id & ((1 << layer_bits) - 1))


def _first_set(m, vec, name):
    """Index of the lowest set bit of ``vec`` (0 when none), combinational."""
    idx = Signal(range(max(2, len(vec))), name=name)
    for i in reversed(range(len(vec))):
        with m.If(vec[i]):
            m.d.comb += idx.eq(i)
    return idx


def elaborate_table(pool):
    """Build the module of ``pool`` (a :class:`hdl.kvpool.KVPool` with ``directory="table"``)."""
    m = Module()
    n, wb = pool.n_slots, pool.word_bits
    n_words = -(-n // wb)
    layers, blocks = pool.layers, pool.blocks
    lb = min(pool.layer_bits, pool.kv_id_width)
    depth = layers * blocks
    m.submodules.regs = regs = pool._regs
    wiring.connect(m, wiring.flipped(pool.csr), regs.bus)

    entry = entry_layout(n, pool.max_readers)
    m.submodules.table = table = memory.Memory(shape=entry, depth=depth, init=[])
    t_rd, t_wr = table.read_port(), table.write_port()
    m.submodules.bitmap = bitmap = memory.Memory(shape=wb, depth=n_words, init=[])
    b_rd, b_wr = bitmap.read_port(), bitmap.write_port()
    has_free = Signal(n_words)           # bit w: bitmap word w has a free slot
    word_w = max(0, (wb - 1).bit_length())   # wb is a power of two

    resp_valid = Signal()
    in_idle = Signal()
    ev = event_port(m, pool)
    acc = accept(m, pool, idle=in_idle & ~resp_valid & ev.free)
    respond(m, pool, acc, resp_valid)

    # ---- the latched kv_id: range check and table index ----
    layer = acc.key[:lb]
    block = acc.key[lb:] if pool.kv_id_width > lb else Const(0, 1)
    in_range = Signal()
    idx = Signal(range(depth))
    m.d.comb += [in_range.eq((layer < layers) & (block < blocks)),
                 idx.eq(block * layers + layer)]

    # ---- the entry and the allocation candidate, valid in DECIDE ----
    ent = t_rd.data
    hit = Signal()
    m.d.comb += hit.eq(in_range & ent.valid)
    alloc_word = _first_set(m, has_free, "alloc_word")
    alloc_word_r = Signal.like(alloc_word)
    alloc_bit = _first_set(m, b_rd.data, "alloc_bit")
    alloc_slot = Signal(range(max(2, n)))
    m.d.comb += alloc_slot.eq(Cat(alloc_bit[:word_w], alloc_word_r))
    free_slot = Signal(range(max(2, n)))

    cnt = Counters(n, pool.block_bytes)
    m.submodules.counters = cnt
    d = decide(m, acc.op, hit=hit, in_range=in_range, full=cnt.full, cur_state=ent.state,
               cur_readers=ent.readers, max_readers=pool.max_readers)
    apply = Signal()
    connect_counters(m, cnt, regs, d, apply=apply, from_nic=acc.from_nic, cur_state=ent.state)

    clr = Signal(range(max(depth, n_words) + 1))
    last_mask = (1 << (n - (n_words - 1) * wb)) - 1
    with m.FSM(init="CLEAR"):
        with m.State("CLEAR"):
            m.d.comb += [t_wr.addr.eq(clr), t_wr.data.eq(0), t_wr.en.eq(clr < depth),
                         b_wr.addr.eq(clr), b_wr.en.eq(clr < n_words),
                         b_wr.data.eq(Mux(clr == n_words - 1, last_mask, (1 << wb) - 1))]
            m.d.sync += clr.eq(clr + 1)
            with m.If(clr == max(depth, n_words) - 1):
                m.d.sync += [clr.eq(0), has_free.eq((1 << n_words) - 1)]
                m.next = "IDLE"
        with m.State("IDLE"):
            m.d.comb += in_idle.eq(1)
            with m.If(acc.taken):
                m.next = "LOOK"
        with m.State("LOOK"):
            m.d.comb += [t_rd.addr.eq(idx), t_rd.en.eq(1), b_rd.addr.eq(alloc_word), b_rd.en.eq(1)]
            m.d.sync += alloc_word_r.eq(alloc_word)
            m.next = "DECIDE"
        with m.State("DECIDE"):
            m.d.comb += apply.eq(1)
            ev.record(m, acc, d, alloc_slot=alloc_slot, hit_slot=ent.slot)
            with m.If(~acc.from_nic):
                m.d.sync += resp_valid.eq(1)
                answer(m, pool.resp.payload, d, alloc_slot=alloc_slot, hit_slot=ent.slot)
            m.d.comb += t_wr.addr.eq(idx)
            with m.If(d.do_alloc):
                new_word = Signal(wb)
                m.d.comb += [new_word.eq(b_rd.data & ~(Const(1, wb) << alloc_bit)),
                             t_wr.en.eq(1), t_wr.data.valid.eq(1), t_wr.data.slot.eq(alloc_slot),
                             t_wr.data.state.eq(d.new_state), t_wr.data.readers.eq(0),
                             b_wr.addr.eq(alloc_word_r), b_wr.data.eq(new_word), b_wr.en.eq(1)]
                m.d.sync += has_free.bit_select(alloc_word_r, 1).eq(new_word.any())
            with m.Elif(d.do_set):
                m.d.comb += [t_wr.en.eq(1), t_wr.data.valid.eq(1), t_wr.data.slot.eq(ent.slot),
                             t_wr.data.state.eq(d.new_state), t_wr.data.readers.eq(d.new_readers)]
            with m.Elif(d.do_free):
                m.d.comb += [t_wr.en.eq(1), t_wr.data.eq(0)]
            with m.If(d.do_free):
                m.d.sync += free_slot.eq(ent.slot)
                m.next = "FREE_RD"
            with m.Else():
                m.next = "IDLE"
        with m.State("FREE_RD"):
            m.d.comb += [b_rd.addr.eq(free_slot >> word_w), b_rd.en.eq(1)]
            m.next = "FREE_WR"
        with m.State("FREE_WR"):
            word = free_slot >> word_w
            m.d.comb += [b_wr.addr.eq(word), b_wr.en.eq(1),
                         b_wr.data.eq(b_rd.data | (Const(1, wb) << free_slot[:word_w]))]
            m.d.sync += has_free.bit_select(word, 1).eq(1)
            m.next = "IDLE"
    return m


assert State.FREE == 0   # a cleared entry (all zeros) is "no entry"
