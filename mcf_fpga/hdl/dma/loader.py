"""Stream loader: the node reads its input data (weight tiles, scratchpad words) from DDR.

A load descriptor, :func:`load_layout`, is ``{dest, addr, count}``; its meaning, the memory image
of a load and the legality check are ``spec.loader``'s.
"""

from amaranth import Module, Signal, Mux
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import AXI4Signature
from mcf_fpga.spec.dma import DmaParams, DmaStatus
from mcf_fpga.spec.loader import COUNT_BITS, DEST_BITS, SP_BITS, Dest, unit_stride_bytes
from mcf_fpga.hdl.dma.common import descriptor_check, status_layout
from .reader import DMAReader

__all__ = ["load_layout", "w_layout", "sp_layout", "UnitGearbox", "StreamLoader"]


def load_layout(addr_width: int) -> data.StructLayout:
    return data.StructLayout({"dest": DEST_BITS, "addr": addr_width, "count": COUNT_BITS})


# ---------------------------------------------------------------- the block
def w_layout(w_bits: int) -> data.StructLayout:
    """The ``w`` output (the engine's ``w_in``): one weight beat, ``last`` on a load's final unit."""
    return data.StructLayout({"data": w_bits, "last": 1})


def sp_layout(pairs: bool = False) -> data.StructLayout:
    """The ``sp`` output (the engine's ``sp_in``): one scratchpad word; ``pairs``: one or two
    (``two``: ``data`` then ``data1``; one: ``data``)."""
    return data.StructLayout({"data": SP_BITS, **({"data1": SP_BITS, "two": 1} if pairs else {})})


class UnitGearbox(wiring.Component):
    """Bus beats of one destination in, units of ``bits`` out (the image rule of
    :func:`unit_stride_bytes`).

    * Units whose stride is a beat or more: ``stride / beat`` beats make one unit, assembled in a
      ``bits``-wide register (each beat writes its own fixed slice; the tail of the last beat
      beyond ``bits`` is dropped). The unit is offered after its last beat; the next unit's
      first beat is taken in the cycle the unit goes out.
    * Shorter strides: ``beat / stride`` units per beat, cut from one beat-wide register that
      shifts by the stride per unit out. A beat with ``last`` set (a load's final beat) yields
      only ``tail + 1`` units; the rest of it is discarded. ``tail`` is read with that beat.

    Members: ``beats`` In stream ``{data: data_width, last: 1}``, ``units`` Out stream
    ``bits``, ``tail`` In (``max(1, log2(beat / stride))`` bits; unused for wide units).
    """

    def __init__(self, bits: int, data_width: int):
        self.bits, self.data_width = bits, data_width
        self.stride = unit_stride_bytes(bits, data_width)
        bpb = data_width // 8
        self.upb = max(1, bpb // self.stride)                # units per beat (narrow)
        self.bpu = max(1, self.stride // bpb)                # beats per unit (wide)
        self.lgu = self.upb.bit_length() - 1
        super().__init__({
            "beats": In(stream.Signature(data.StructLayout({"data": data_width, "last": 1}))),
            "units": Out(stream.Signature(bits)),
            "tail": In(max(1, self.lgu)),
        })

    def elaborate(self, platform):
        m = Module()
        dw, bits = self.data_width, self.bits
        bi, uo = self.beats, self.units
        take = bi.valid & bi.ready
        if self.upb == 1:                                    # one unit = bpu >= 1 whole beats
            acc = Signal(bits)
            full = Signal()
            k = Signal(range(self.bpu + 1))
            m.d.comb += [uo.valid.eq(full), uo.payload.eq(acc), bi.ready.eq(~full | uo.ready)]
            with m.If(uo.valid & uo.ready):
                m.d.sync += full.eq(0)
            with m.If(take):
                with m.Switch(k):
                    for j in range(self.bpu):
                        lo, hi = j * dw, min((j + 1) * dw, bits)
                        with m.Case(j):
                            m.d.sync += acc[lo:hi].eq(bi.payload.data[:hi - lo])
                            if j == self.bpu - 1:
                                m.d.sync += [full.eq(1), k.eq(0)]
                            else:
                                m.d.sync += k.eq(j + 1)
        else:                                                # upb units cut from one beat
            buf = Signal(dw)
            n = Signal(range(self.upb + 1))                  # units left in buf
            m.d.comb += [uo.valid.eq(n != 0), uo.payload.eq(buf[:bits]),
                         bi.ready.eq((n == 0) | ((n == 1) & uo.ready))]
            with m.If(uo.valid & uo.ready):
                m.d.sync += [buf.eq(buf >> (8 * self.stride)), n.eq(n - 1)]
            with m.If(take):
                m.d.sync += [buf.eq(bi.payload.data),
                             n.eq(Mux(bi.payload.last, self.tail[:self.lgu] + 1, self.upb))]
        return m


def _job_layout(addr_width):
    """A descriptor between the check and the output side: ``code`` (OK: its units come from the
    reader), ``addr`` (for a refused one's status), ``last_idx = count - 1``. ``imm``: a ``put``
    word instead (``sp`` 1, ``code`` OK): the word is in ``last_idx``, no reader, no status."""
    return data.StructLayout({"sp": 1, "imm": 1, "code": 4, "addr": addr_width, "last_idx": COUNT_BITS})


class StreamLoader(wiring.Component):
    """Load descriptors (and immediate scratchpad words) in, the engine's weight and scratchpad
    streams out, read from DDR.

    Contract
    --------
    * ``desc`` ``{dest, addr, count}`` (:func:`load_layout`), served in order: unit ``i`` is the
      low ``bits`` of the bytes at ``addr + i*stride`` little-endian (``bits`` = ``w_bits`` for
      ``Dest.W``, 32 for ``Dest.SP``; ``stride`` = :func:`unit_stride_bytes`); padding and the
      tail of the final beat are dropped. W units go out on ``w`` (``last`` on the load's final
      unit), SP units on ``sp``. One DMA descriptor ``{addr, load_bytes(...)}`` per load.
    * Exactly one ``status`` ``{code, addr}`` per descriptor, in order, offered only after the
      load's final unit was accepted: ``OK`` and ``addr``; ``SLVERR``/``DECERR`` with the first
      failing beat (every unit still delivered). Refused (:func:`check_load`: ``BAD_DEST``,
      ``ZERO_LENGTH``, ``MISALIGNED``, ``TOO_LONG``, ``OUT_OF_WINDOW``): status only, no bus
      transaction, no unit.
    * ``put`` ``{data}`` (:func:`sp_layout`): an immediate SP unit (the command fetcher's ``PUT``,
      a picked token). It joins the descriptors' queue in the order taken -- after every
      descriptor taken before it, before every one taken after -- and goes out on ``sp`` when
      its turn comes: after every unit of the earlier loads, before any unit of a later one. No
      bus transaction, no ``status``. ``put.ready`` is high only while no descriptor is held
      for its check, none is offered on ``desc`` (a descriptor offered in the same cycle goes
      first) and the queue has room.
    * Back-pressure on ``w``/``sp`` stalls RREADY; on ``status`` it holds only a load's final
      unit (and a refused load's status). Nothing is dropped; bursts of later loads are
      prefetched (up to ``max_outstanding`` in flight).
    * ``sp_pairs``: ``sp`` beats carry two words (``sp_layout(pairs=True)``): an SP load's words
      0-1, 2-3, ... (``two`` = 1), an odd count's final word alone (``two`` = 0); a put word
      alone. The same bytes are read; the words are the same, in the same order.

    Parameters: those of :class:`spec.dma.DmaParams`, ``w_bits`` (the weight beat, ``pn*pk*4``:
    a positive multiple of 8) and ``sp_pairs`` (a bus of 64 bits or more). Members: ``desc``,
    ``put`` (In), ``w``, ``sp``, ``status`` (Out streams), ``m_axi`` (Out ``AXI4Signature``;
    write channels idle).
    """

    def __init__(self, *, w_bits: int, sp_pairs: bool = False, **params):
        if not isinstance(w_bits, int) or w_bits <= 0 or w_bits % 8:
            raise ValueError(f"w_bits must be a positive multiple of 8 (pn*pk*4), got {w_bits!r}")
        self.p = p = DmaParams(**params)
        if sp_pairs and p.data_width < 2 * SP_BITS:
            raise ValueError(f"sp_pairs needs a data_width of at least {2 * SP_BITS} bits (a pair of words "
                             f"a beat reads the same bytes as the words), got {p.data_width}")
        self.w_bits, self.sp_pairs, self._params = w_bits, bool(sp_pairs), dict(params)
        super().__init__({
            "desc": In(stream.Signature(load_layout(p.addr_width))),
            "put": In(stream.Signature(sp_layout())),
            "w": Out(stream.Signature(w_layout(w_bits))),
            "sp": Out(stream.Signature(sp_layout(self.sp_pairs))),
            "status": Out(stream.Signature(status_layout(p.addr_width))),
            "m_axi": Out(AXI4Signature(p.addr_width, p.data_width, p.id_width)),
        })

    @staticmethod
    def _load_beats(count, gb):
        """Beats of a load of ``count`` units through gearbox ``gb`` (exactly
        :func:`spec.loader.load_bytes` / beat)."""
        if gb.upb > 1:
            return (count + (gb.upb - 1)) >> gb.lgu
        return count * gb.bpu

    def elaborate(self, platform):
        m = Module()
        p = self.p
        lg = p.size_log2
        m.submodules.reader = rd = DMAReader(**self._params)
        wiring.connect(m, rd.m_axi, wiring.flipped(self.m_axi))
        m.submodules.gw = gw = UnitGearbox(self.w_bits, p.data_width)
        # SP units: words, or (sp_pairs) pairs of words (the last of an odd count alone)
        m.submodules.gs = gs = UnitGearbox(SP_BITS * (1 + self.sp_pairs), p.data_width)
        jlay = _job_layout(p.addr_width)
        m.submodules.jobs = q = fifo.SyncFIFO(width=jlay.size, depth=p.max_outstanding + 1)

        # ---- check: one descriptor held in `r`, then into the job FIFO (and the reader if OK) ----
        pend = Signal()
        r = Signal(load_layout(p.addr_width))
        sp_units = (r.count + 1) >> 1 if self.sp_pairs else r.count
        nbeats = Mux(r.dest == Dest.SP, self._load_beats(sp_units, gs), self._load_beats(r.count, gw))
        wide = max(gw.bpu, gs.bpu).bit_length()                 # count * beats per unit never wraps
        full_len = Signal(max(COUNT_BITS + wide + lg, p.len_width + 1))
        m.d.comb += full_len.eq(nbeats << lg)
        length = full_len[:p.len_width]
        chk = descriptor_check(m, p, r.addr, length)
        code = Signal(4)
        with m.If(r.dest >= 2):
            m.d.comb += code.eq(DmaStatus.BAD_DEST)
        with m.Elif(r.count == 0):
            m.d.comb += code.eq(DmaStatus.ZERO_LENGTH)
        with m.Elif(r.addr[:lg] != 0 if lg else 0):
            m.d.comb += code.eq(DmaStatus.MISALIGNED)
        with m.Elif(full_len[p.len_width:] != 0):
            m.d.comb += code.eq(DmaStatus.TOO_LONG)
        with m.Else():
            m.d.comb += code.eq(chk)
        ok = code == DmaStatus.OK
        push = Signal()
        put_in = Signal()               # a put word into the queue (nothing held, no descriptor offered)
        m.d.comb += [
            rd.desc.valid.eq(pend & q.w_rdy & ok),
            rd.desc.payload.addr.eq(r.addr), rd.desc.payload.length.eq(length),
            push.eq(pend & q.w_rdy & (~ok | rd.desc.ready)),
            self.put.ready.eq(~pend & ~self.desc.valid & q.w_rdy),
            put_in.eq(self.put.valid & self.put.ready),
            q.w_en.eq(push | put_in),
            self.desc.ready.eq(~pend | push),
        ]
        job_in = data.View(jlay, q.w_data)
        with m.If(put_in):
            m.d.comb += [job_in.sp.eq(1), job_in.imm.eq(1), job_in.code.eq(DmaStatus.OK),
                         job_in.last_idx.eq(self.put.payload.data)]
        with m.Else():
            m.d.comb += [job_in.sp.eq(r.dest == Dest.SP), job_in.code.eq(code),
                         job_in.addr.eq(r.addr), job_in.last_idx.eq(r.count - 1)]
        with m.If(self.desc.valid & self.desc.ready):
            m.d.sync += [r.eq(self.desc.payload), pend.eq(1)]
        with m.Elif(push):
            m.d.sync += pend.eq(0)

        # ---- output side: the head job's beats through its gearbox, then its status ----
        head = data.View(jlay, q.r_data)
        st_valid = Signal()
        st = self.status.payload
        m.d.comb += self.status.valid.eq(st_valid)
        with m.If(self.status.valid & self.status.ready):
            m.d.sync += st_valid.eq(0)
        sent = Signal(COUNT_BITS)       # units of the head job accepted so far
        drained = Signal()              # its final beat has been taken from the reader
        done = Signal()                 # its final unit has been accepted
        # the head's last unit: its last word's, or (sp_pairs, an SP load) its last pair's
        last_u = Mux(head.sp, head.last_idx >> 1, head.last_idx) if self.sp_pairs else head.last_idx
        final = sent == last_u
        gate = ~final | ~st_valid       # the final unit waits for a free status slot
        imm = q.r_rdy & head.imm        # a put word at the head: it goes out on sp, then pops
        loading = q.r_rdy & (head.code == DmaStatus.OK) & ~drained & ~head.imm
        for gb, sel in ((gw, ~head.sp), (gs, head.sp)):
            m.d.comb += [gb.beats.valid.eq(rd.data.valid & loading & sel),
                         gb.beats.payload.data.eq(rd.data.payload.data),
                         gb.beats.payload.last.eq(rd.data.payload.last),
                         gb.tail.eq(last_u)]
        m.d.comb += rd.data.ready.eq(loading & Mux(head.sp, gs.beats.ready, gw.beats.ready))
        with m.If(rd.data.valid & rd.data.ready & rd.data.payload.last):
            m.d.sync += drained.eq(1)
        m.d.comb += [
            self.w.valid.eq(gw.units.valid & gate), self.w.payload.data.eq(gw.units.payload),
            self.w.payload.last.eq(final), gw.units.ready.eq(self.w.ready & gate),
            self.sp.valid.eq(Mux(imm, 1, gs.units.valid & gate)),
            self.sp.payload.data.eq(Mux(imm, head.last_idx, gs.units.payload[:SP_BITS])),
            gs.units.ready.eq(self.sp.ready & gate & ~imm),
        ]
        if self.sp_pairs:               # a pair, but a put word and an odd count's last word alone
            m.d.comb += [self.sp.payload.data1.eq(gs.units.payload[SP_BITS:]),
                         self.sp.payload.two.eq(~imm & (~final | head.last_idx[0]))]
        with m.If(imm & self.sp.ready):
            m.d.comb += q.r_en.eq(1)
        with m.If((self.w.valid & self.w.ready) | (self.sp.valid & self.sp.ready & ~imm)):
            m.d.sync += sent.eq(sent + 1)
            with m.If(final):
                m.d.sync += done.eq(1)
        m.d.comb += rd.status.ready.eq(done & ~st_valid)
        with m.If(rd.status.valid & rd.status.ready):
            m.d.comb += q.r_en.eq(1)
            m.d.sync += [st.eq(rd.status.payload), st_valid.eq(1),
                         sent.eq(0), drained.eq(0), done.eq(0)]
        with m.If(q.r_rdy & (head.code != DmaStatus.OK) & ~st_valid):
            m.d.comb += q.r_en.eq(1)
            m.d.sync += [st.code.eq(head.code), st.addr.eq(head.addr), st_valid.eq(1)]
        return m
