"""Compute engine: layer sequencer + scratchpad + GEMM array, vector unit and attention unit.

The host pushes instructions (:data:`INSTR`, one ``cmd`` beat each) into the command FIFO; the
sequencer executes them in order, one at a time, moving data between the scratchpad (``SP``,
int32 words) / exponent memory (``EM``, int8 row exponents) and the units. One decoder layer is
one program (the instruction set: :mod:`spec.instr`, docs/compute.md; see :mod:`hdl.compute.program`).

Address patterns: every mover walks ``for o < n_o: for i < n_i: for j < n_j``:
``SP[base + o*so + i*si + j]`` for the words and ``EM[ebase + o*eo + i*ei]`` per row.

Streams: ``w_in`` weight tiles for the GEMM array (from the weight loader, in program order),
``sp_in`` words for SPW, ``sp_out`` words of SPR (``last`` on the final word), ``meta_out`` one
Meta per EMIT then its payload words on ``emit_out`` (``last`` on the final word). Every output
stream may be back-pressured at any time; the sequencer waits, nothing is dropped.

Attention partials in the scratchpad (ATT non-final output, FOLD input/output) are
:class:`spec.partial.PartialRow` rows of ``2d+4`` words: m, l, o[0..d-1], each an int64 as (lo
word, hi word) -- the NIC's SOFTMAX_MERGE payload (host twins ``program.partial_words`` /
``program.words_partial``). ATT feeds the unit its q rows (reader A, d words each) while the
unit computes the earlier rows, and takes its output rows through ``AttentionRowSerializer`` to
the writer at one word per cycle while the unit computes the next row; the instruction retires
when the writer has written the last word (so ``sub`` bit0's window release follows it).

Bad input: an unknown opcode, or shapes/addresses beyond the configured limits, set an ``error``
bit (readable over AXI-Lite ``STATUS``) and *halt* the sequencer before the instruction touches
any state; nothing hangs (the units are never started with a shape they would refuse). Writing
1 to ``CTRL`` bit 0 clears the errors and resumes with the next instruction.
AXI-Lite registers: 0x00 STATUS (RO: bit0 busy, bit1 halted, bits 8..15 error),
0x04 RETIRED (RO: instructions completed), 0x08 CTRL (RW: bit0 resume/clear).

K/V in DDR (docs/memory.md "KV in DDR", docs/compute.md): built with ``kv_region`` (a
:class:`spec.kvregion.KVRegion`) the engine's attention is a
:class:`~hdl.compute.streamed.StreamedAttention` (no K/V memories: ``n_win`` staging windows of
``win_rows`` rows, kv_depth ``n_win * win_rows``) and the engine gains the AXI4 master ``m_axi_kv``
(the :class:`~hdl.dma.kvstream.KVStreamer`'s). Then:

* KVW writes each row to DDR: slot ``b``, row ``kvb + i*kvs + o`` (K: flags.0 = 0, V: 1); the
  rows must lie in the slot and the slot in the region (else ERR_SHAPE before anything moves).
  KVW retires when its rows are handed to the streamer (which orders later loads after their B
  responses).
* KVL (op 9) loads rows ``kvb .. kvb+ntok-1`` of slot ``b`` into staging window ``dst`` and
  retires as soon as the streamer took the command; the load proceeds while later instructions
  run. ERR_SHAPE (nothing happens) when ``ntok`` is 0 or > ``win_rows``, ``dst >= n_win``, the
  rows leave the slot, the slot leaves the region, or the window is still loading or loaded (not
  yet released: the load would wait for ever behind this very instruction).
* ATT reads staging rows ``kvb .. kvb+ntok-1``: they must lie in one window ``w`` (else
  ERR_SHAPE), and ``w`` must be loading or loaded (else ERR_SHAPE: nothing would ever fill it).
  The sequencer waits for ``full[w]`` before it starts the job (and gives up on a streamer
  error); ``sub`` bit0 releases ``w`` after the job's last output (query tiles without it reuse
  the window). FOLD is unchanged.
* A streamer error sets ERR_KV, halts the sequencer (no new instruction starts; a KVW in progress
  drops its remaining rows and a waiting KVL/ATT gives up, neither retires) and is reported in
  0x0C KV_ERR (RO: the streamer's DmaStatus code), 0x10/0x14 KV_ERR_ADDR_LO/HI (RO: its address).
  CTRL bit0 also clears the streamer's error. ``busy`` includes the streamer's (loads and writes
  in flight), so a host waiting for idle sees written rows land.
* KVS (op 10) sends a KV unit's records from DDR (no scratchpad copy): records ``kvb ..
  kvb+ntok-1`` of slot ``b`` (K rows ``0..slot_rows-1`` then V rows) as one install packet
  (:mod:`hdl.kvinstall_header`): ``meta`` with ``length = 8 + ntok * row_bytes`` on ``meta_out``,
  then on ``emit_out`` the header ``{row0 = kvb, n = ntok, last = flags.0, first = flags.1,
  owner = flags.2}`` as two 32-bit words (low first) and the records' bytes as 32-bit
  little-endian words, ``last`` on the final one -- the byte stream the node's 32->64 packer and
  packetizer turn into the wire payload (the receiver's rules for ``first``/``owner``:
  :mod:`golden.kvinstall`). The streamer's raw read (``kv_raw``) is issued first (behind earlier
  KVW rows' B responses), the Meta and header go out while it is in flight, then each bus beat is
  cut into words; back-pressure on ``meta_out``/``emit_out`` stalls the read (RREADY), nothing is
  dropped. ERR_SHAPE (nothing
  happens) when ``ntok = 0``, ``kvb + ntok > 2 * slot_rows``, ``b >= n_slots`` or ``8 + ntok *
  row_bytes >= 2**16`` (the Meta length field). Retires after its last word once its read's status
  is in; if the streamer reported an error by then (SLVERR/DECERR in this run, or an earlier
  load's), ERR_KV halts the sequencer and the KVS does not retire -- the packet already started
  still completes with the beats the slave sent (the packetizer never waits). A KVS that finds the
  streamer already halted gives up before sending anything (not retired).
In the default mode (no region) KVL and KVS are unknown opcodes and the engine is today's.
"""
from contextlib import contextmanager
from types import SimpleNamespace

from amaranth import Module, ResetInserter, Signal, Cat, Const, Mux, signed
from amaranth.utils import exact_log2
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import AXI4LiteRegisterFile, AXI4LiteSignature, Register, Access
from mcf_fpga.spec.regmap import Field
from mcf_fpga.spec.instr import EngineOpcode
from mcf_fpga.spec.partial import PartialRow
from mcf_fpga.spec.meta import DEFAULT_PARAMS
from mcf_fpga.hdl.meta import meta_layout
from mcf_fpga.hdl.kvinstall_header import install_header_layout
from mcf_fpga.hdl.dma.loader import sp_layout
from .address_walker import AddressWalker
from .attention_row_serializer import AttentionRowSerializer
from .beat_splitter import BeatSplitter
from .gemm import GemmArray, GemmOp
from .instr import INSTR, ERR_OPCODE, ERR_SHAPE, ERR_UNIT, ERR_KV
from .instr_check import InstrCheck, window_refused
from .paired_scratchpad import PairedScratchpad
from .lane_packer import LanePacker
from .partial_row_assembler import PartialRowAssembler
from .scratchpad_reader import ScratchpadReader
from .value_packer import ValuePacker
from .value_unpacker import ValueUnpacker
from .vector import VectorUnit, VecOp
from .word_realigner import WordRealigner
from .attention import AttentionUnit
from .streamed import StreamedAttention

__all__ = ["ComputeEngine", "INSTR", "ERR_OPCODE", "ERR_SHAPE", "ERR_UNIT", "ERR_KV", "KR260", "KR260_KV_DDR",
           "kr260_ddr_engine"]

#: KR260 defaults (Qwen2.5-1.5B shapes): 512 MACs/cycle GEMM (pn 16 x pk 32, group 128, K <= 8960),
#: 256-token x buffer at K=1536, head_dim 128 attention over 4096 local KV rows. One requantizer
#: (``rq_lanes`` 1: 16 cycles per output row) keeps up with the array for K >= 16*pk = 512 (every
#: Qwen shape; smaller K stalls the array, nothing is lost) and costs ~2k LUT less than 4. The
#: GEMM's weight ring has 512 rows instead of 2 * kc_max = 560 (2048 bits wide: 57 RAMB18 instead
#: of 57 RAMB36); at one weight beat per cycle it costs no cycles (see mcf_fpga/hdl/compute/gemm.py).
#: Every unit's datapath in register stages (the vector unit, the attention unit, the GEMM's dot
#: products and requantizer: docs/compute.md "Timing estimate"), latency for clock, not cycles per
#: element (the attention unit's rows: ``attention.row_cycles``). The scratchpad in rows of two words
#: (``sp_pairs``, same URAM): LOAD_X, ADD and SWIGLU move two words a cycle at even addresses, QUANT
#: and RMSNORM too (``quant_pairs``, ``rms_pairs``: the vector unit's row ring paired), and EMIT of
#: even-aligned words (``emit_pairs``), SPW of the loader's words to an even address, an even
#: count (``spw_pairs``), and ATT's / FOLD's output rows to an even address (``att_pairs``).
#: The timing cuts that cost cycles (docs/compute.md "Timing estimate"): the GEMM's dot products
#: summed 4 terms a stage (``mac_tree_arity``: a cycle more per RUN), the attention unit's EMIT
#: only into an empty ``o_out`` (a cycle more per output-paced row), the vector row's
#: max|a| bit length in two cycles (``vec_bitlen_stages``: the later stages see a row a cycle
#: later) and the vector command checked from a register (``vec_cmd_stage``: a cycle per VEC).
KR260 = dict(pn=16, pk=32, group=128, kc_max=280, x_depth=12288, t_max=256, pack2=True,
             d_max=8960, head_dim=128, nq_max=96, kv_depth=4096, nb_max=256, z_max=4096, blk_max=256,
             sp_depth=65536, em_depth=4096, cmd_depth=64, rq_lanes=1, w_rows=512,
             vec_pipelined=True, fold_ports=2, loadx_ports=2, att_pipelined=True, rq_stages=4, mac_pipelined=True,
             check_pipelined=True, sp_pairs=True, quant_pairs=True, rms_pairs=True, emit_pairs=True,
             spw_pairs=True, att_pairs=True, mac_tree_arity=4, att_emit_on_empty=True, vec_bitlen_stages=2,
             vec_cmd_stage=True)

#: The KR260 node's K/V in DDR (docs/memory.md "KV in DDR"): the KV streamer's staging
#: buffer of 2 windows x ``blk_max`` = 256 rows (the same 30 URAM as the 4,096-row kmem/vmem it
#: replaces) and its AXI master on S_AXI_HP3_FPD: bursts of 16 beats (the HP ports' limit),
#: 8 in flight (128 beats cover a 100-cycle DDR latency at 16 B/cycle).
KR260_KV_DDR = dict(kv_win_rows=256, kv_n_win=2, kv_dma=dict(max_burst=16, max_outstanding=8))


def kr260_ddr_engine(region=None) -> dict:
    """The KR260 engine (:data:`KR260`) keeping K/V in ``region`` (a :class:`spec.kvregion.KVRegion`;
    default ``spec.kvregion.kr260_region()``: 1 GiB at 0x8_0000_0000) through the KV streamer
    (:data:`KR260_KV_DDR`). ``kv_depth`` is then unused: the context is bounded by the region."""
    if region is None:
        from mcf_fpga.spec.kvregion import kr260_region
        region = kr260_region()
    return dict(KR260, kv_region=region, **KR260_KV_DDR)


#: the one-hot ``cur`` register's bits (one per opcode)
_CUR_BITS = 16
assert max(EngineOpcode) < _CUR_BITS


def _walk(w, base, so, si, no, ni, nj, ebase=0, eo=0, ei=0):
    """Statements starting walker (or reader) ``w`` on a walk (:data:`address_walker.WALK`)."""
    c = w.cfg
    return [w.start.eq(1), c.base.eq(base), c.so.eq(so), c.si.eq(si), c.no.eq(no), c.ni.eq(ni), c.nj.eq(nj),
            c.ebase.eq(ebase), c.eo.eq(eo), c.ei.eq(ei)]


#: the nets only an engine with K/V in DDR has (None in ``elaborate``'s namespace without a region)
_DDR_NETS = ("kv_err", "region", "kvs_len", "att_w", "kv_dropped", "kvs_words", "kvs_hdr", "kvs_hi")


class ComputeEngine(wiring.Component):
    """See module docstring. Unit parameters are passed through; ``sp_depth`` scratchpad words,
    ``em_depth`` exponent rows, ``cmd_depth`` command FIFO entries.

    K/V in DDR: ``kv_region`` (a :class:`spec.kvregion.KVRegion`; its ``d`` must be ``head_dim``)
    builds the streamed attention with ``kv_n_win`` windows of ``kv_win_rows`` rows (default
    ``blk_max``; ``kv_depth`` is then ``kv_n_win * kv_win_rows`` and the ``kv_depth`` argument is
    not used) and ``kv_dma`` (a dict of the streamer's AXI parameters: ``addr_width``,
    ``max_burst``, ``max_outstanding``, ``id_width``). ``None`` (default): on-chip K/V memories.
    ``att_keys``: the attention unit's ``keys_per_cycle`` (1 or 2; 2: two keys per cycle in its
    phases S and P, two K/V rows read per cycle). ``att_rows``: its ``rows_per_cycle`` (1 or 2; 2: a
    pair of query rows shares each K and V read, with ``att_pipelined`` and ``att_keys=1``).
    ``rq_stages``: the GEMM requantizer's pipeline
    (1 or 4; ``GemmRequantizer``). ``vec_pipelined``: the vector unit's result path in registered
    stages (``VectorUnit(pipelined=True)``, ``VectorResultPipe``). ``fold_ports``: the scratchpad
    readers FOLD reads a partial row with (1: reader A, ``2d+4`` cycles per partial; 2: A the
    row's first half and B its second at once, ``d+2`` cycles). ``loadx_ports``: the readers
    GEMM's LOAD_X reads the activations with (1: reader A, one word per cycle; 2: A the even
    ``pk``-word chunks of each row and B the odd ones, each into its own lane packer, the beats
    merged back in order: two words per cycle). ``att_pipelined``: the attention unit's phases S and
    P in register stages (``AttentionUnit(pipelined=True)``). ``mac_pipelined``: the GEMM's dot
    products in register stages (``GemmMacPipeline(pipelined=True)``; ``mac_tree_arity`` terms per
    stage of its adder tree). ``check_pipelined``: the
    instruction check's products registered (``InstrCheck(pipelined=True)``): FETCH takes the
    command FIFO's head once it has been there ``latency`` = 2 cycles (the check of an instruction
    that waited in the FIFO is ready; one that arrives at an empty FIFO waits 2 cycles); the GEMM
    array's own LOAD_X check too (``GemmArray(check_pipelined=True)``: a cycle more per LOAD_X).
    ``sp_pairs``: the scratchpad in rows of two words (:class:`PairedScratchpad`: each reader and
    the writer can take an even-aligned pair of words a cycle, at no more URAM): LOAD_X's readers
    read two words a cycle into their lane packers, and with ``vec_pipelined`` ADD and SWIGLU read
    and write two (each when its addresses are even; else one word a cycle). ``quant_pairs`` (with
    ``sp_pairs`` and ``vec_pipelined``): QUANT too (``VectorUnit(quant_pairs=True)``); ``rms_pairs``
    (with ``quant_pairs``): RMSNORM too (``VectorUnit(rms_pairs=True)``). ``emit_pairs`` (with
    ``sp_pairs``): ``emit_out`` gains ``data1`` and ``two``, and an EMIT of scratchpad words
    (not packed, not EM) whose ``a``, ``n0`` and (several rows) ``so`` are even reads two words a
    cycle and sends them as one beat (``two`` = 1: ``data`` the first word, ``data1`` the second);
    every other beat has ``two`` = 0, so a packet's pair beats start at an even word.
    ``spw_pairs`` (with ``sp_pairs`` and ``vec_pipelined``): ``sp_in`` beats carry one word or
    two (``hdl.dma.loader.sp_layout(pairs=True)``: ``two``, ``data`` then ``data1``); sp_in is
    still one stream of words, which SPW takes through a :class:`WordRealigner` (a beat may
    straddle two SPWs), and an SPW of scratchpad words (not packed, not EM) whose ``dst`` and
    ``n0`` are even writes two a cycle (one a cycle while only single-word beats come).
    ``att_pairs`` (with ``sp_pairs`` and ``vec_pipelined``): ATT's and FOLD's output rows go to the
    scratchpad two words a cycle (``AttentionRowSerializer(pairs=True)``) when every row starts
    at an even word: ``dst`` even and, for finalized rows, ``so`` even (partial rows are ``2d+4``
    words, ``d`` rows of ``len`` = ``d`` words); else one word a cycle. ``att_emit_on_empty``:
    the attention unit's ``emit_on_empty`` (EMIT waits for an empty ``o_out``: the serializer's
    handshake off the row state, a cycle more per output-paced row). ``vec_bitlen_stages`` (1 or
    2, 2 with ``vec_pipelined``): the vector unit's ``bitlen_stages`` (a row's max|a| bit length
    in two cycles: the later stages see the row a cycle later). ``vec_cmd_stage``: the vector
    unit's ``cmd_stage`` (its command checked and started from a register a cycle after it is
    taken: a cycle more per VEC)."""

    def __init__(self, *, pn=4, pk=16, group=32, kc_max=8, x_depth=64, t_max=8, pack2=True,
                 d_max=128, head_dim=16, nq_max=16, kv_depth=64, nb_max=4, z_max=64, blk_max=16,
                 sp_depth=4096, em_depth=256, cmd_depth=16, rq_lanes=None, w_rows=None,
                 kv_region=None, kv_win_rows=None, kv_n_win=2, kv_dma=None, att_keys=1, att_rows=1, rq_stages=1,
                 sp_pairs=False, quant_pairs=False, rms_pairs=False, emit_pairs=False, spw_pairs=False,
                 att_pairs=False, vec_pipelined=False, fold_ports=1, loadx_ports=1, att_pipelined=False, mac_pipelined=False,
                 check_pipelined=False, mac_tree_arity=8, att_emit_on_empty=False, vec_bitlen_stages=1,
                 vec_cmd_stage=False):
        for name, v in (("fold_ports", fold_ports), ("loadx_ports", loadx_ports)):
            if v not in (1, 2):
                raise ValueError(f"{name}={v}: 1 or 2")
        if sp_pairs and sp_depth % 2:
            raise ValueError(f"sp_depth={sp_depth} must be even with sp_pairs")
        self.fold_ports, self.loadx_ports, self.sp_pairs = fold_ports, loadx_ports, bool(sp_pairs)
        if kv_region is not None and kv_region.bus_bytes % 4:
            raise ValueError(f"kv_region.bus_bytes={kv_region.bus_bytes} must be a multiple of 4 "
                             "(KVS cuts bus beats into 32-bit words)")
        self.gemm = GemmArray(pn=pn, pk=pk, group=group, kc_max=kc_max, x_depth=x_depth,
                              t_max=t_max, pack2=pack2, rq_lanes=rq_lanes, w_rows=w_rows, rq_stages=rq_stages,
                              mac_pipelined=mac_pipelined, check_pipelined=check_pipelined,
                              mac_tree_arity=mac_tree_arity)
        # sp_pairs with the pipelined vector unit: ADD / SWIGLU two elements a cycle
        self.vec_pairs = bool(sp_pairs and vec_pipelined)
        if quant_pairs and not self.vec_pairs:
            raise ValueError("quant_pairs=True needs sp_pairs=True and vec_pipelined=True")
        if rms_pairs and not quant_pairs:
            raise ValueError("rms_pairs=True needs quant_pairs=True")
        self.quant_pairs, self.rms_pairs = bool(quant_pairs), bool(rms_pairs)
        # the pipelined attention unit's rows reach the writer through a register stage (timing)
        self.att_words_reg = bool(att_pipelined)
        if emit_pairs and not sp_pairs:
            raise ValueError("emit_pairs=True needs sp_pairs=True")
        self.emit_pairs = bool(emit_pairs)
        if spw_pairs and not self.vec_pairs:
            raise ValueError("spw_pairs=True needs sp_pairs=True and vec_pipelined=True (the writer's pair walks)")
        self.spw_pairs = bool(spw_pairs)
        if att_pairs and not self.vec_pairs:
            raise ValueError("att_pairs=True needs sp_pairs=True and vec_pipelined=True (the writer's pair walks)")
        if att_pairs and head_dim % 2:
            raise ValueError(f"att_pairs=True needs an even head_dim (head_dim={head_dim})")
        self.att_pairs = bool(att_pairs)
        self.vec = VectorUnit(d_max=d_max, pipelined=vec_pipelined, pairs=self.vec_pairs, quant_pairs=self.quant_pairs,
                              rms_pairs=self.rms_pairs, bitlen_stages=vec_bitlen_stages,
                              cmd_stage=vec_cmd_stage)
        self.kv_region = kv_region
        if kv_region is None:
            self.att = self.att_unit = AttentionUnit(d=head_dim, nq_max=nq_max, kv_depth=kv_depth,
                                                     nb_max=nb_max, z_max=z_max, blk_max=blk_max,
                                                     keys_per_cycle=att_keys, pipelined=att_pipelined,
                                                     rows_per_cycle=att_rows, emit_on_empty=att_emit_on_empty)
        else:
            if kv_region.d != head_dim:
                raise ValueError(f"kv_region.d={kv_region.d} must equal head_dim={head_dim}")
            self.kv_win_rows = blk_max if kv_win_rows is None else kv_win_rows
            self.kv_n_win = kv_n_win
            self.att = StreamedAttention(kv_region, win_rows=self.kv_win_rows, n_win=kv_n_win,
                                         dma=kv_dma, att=dict(nq_max=nq_max, nb_max=nb_max,
                                                              z_max=z_max, blk_max=blk_max,
                                                              keys_per_cycle=att_keys,
                                                              pipelined=att_pipelined,
                                                              rows_per_cycle=att_rows,
                                                              emit_on_empty=att_emit_on_empty))
            self.att_unit = self.att.att
        self.sp_depth, self.em_depth, self.cmd_depth = sp_depth, em_depth, cmd_depth
        self.check_pipelined = check_pipelined
        regs = [
            Register("status", 0x0, Access.RO, doc="bit0 busy, bit1 halted, bits 8..15 error",
                     fields=(Field("busy", 0), Field("halted", 1), Field("error", 8, 8))),
            Register("retired", 0x4, Access.RO, doc="instructions completed"),
            Register("ctrl", 0x8, Access.RW, doc="write bit0=1: clear errors and resume",
                     fields=(Field("resume", 0, doc="write 1: clear errors and resume"),))]
        if kv_region is not None:
            regs += [Register("kv_err", 0xC, Access.RO, doc="KV streamer error code (DmaStatus)"),
                     Register("kv_err_addr_lo", 0x10, Access.RO, doc="KV streamer error address, bits 0..31"),
                     Register("kv_err_addr_hi", 0x14, Access.RO, doc="KV streamer error address, bits 32..")]
        self.regs = AXI4LiteRegisterFile(regs, 12)
        members = {
            "cmd": In(stream.Signature(INSTR)),
            "w_in": In(stream.Signature(data.StructLayout({"data": pn * pk * 4, "last": 1}))),
            "sp_in": In(stream.Signature(sp_layout(self.spw_pairs))),
            "sp_out": Out(stream.Signature(data.StructLayout({"data": 32, "last": 1}))),
            "meta_out": Out(stream.Signature(meta_layout(DEFAULT_PARAMS))),
            "emit_out": Out(stream.Signature(data.StructLayout(
                {"data": 32, "last": 1, **({"data1": 32, "two": 1} if emit_pairs else {})}))),
            "bus": In(AXI4LiteSignature(12, 32)),
            "error": Out(8),
            "halted": Out(1),
            "busy": Out(1),
        }
        if kv_region is not None:
            members["m_axi_kv"] = self.att.signature.members["m_axi"]
        super().__init__(members)
        #: instructions retired (the RETIRED register's value; the node's command fetcher waits on it)
        self.retired = Signal(32, name="retired")

    @property
    def csr_registers(self):
        """The ``Register`` list its AXI-Lite register file decodes (``spec.regmap``)."""
        return self.regs.registers

    def elaborate(self, platform):
        m = Module()
        s = SimpleNamespace(**dict.fromkeys(_DDR_NETS))    # the nets the sections share
        self._core(m, s)
        self._movers(m, s)
        self._decode(m, s)
        self._datapath(m, s)
        self._kvs_words(m, s)
        self._sequencer(m, s)
        return m

    def _core(self, m, s):
        """The units, memories, command FIFO and status / error registers (K/V in DDR: a streamer
        error halts the sequencer)."""
        gemm, vec, att, au = self.gemm, self.vec, self.att, self.att_unit
        ddr = self.kv_region is not None
        m.submodules.gemm, m.submodules.vec, m.submodules.att = gemm, vec, att
        m.submodules.regs = regs = self.regs
        wiring.connect(m, wiring.flipped(self.bus), regs.bus)
        wiring.connect(m, wiring.flipped(self.w_in), gemm.w_in)
        pn, pk, d = gemm.pn, gemm.pk, au.d

        if self.sp_pairs:
            m.submodules.sp = sp = PairedScratchpad(self.sp_depth, attrs={"ram_style": "ultra"})
            sp_wp, sp_ra, sp_rb = sp.w, sp.ra, sp.rb
        else:
            m.submodules.sp = sp = Memory(shape=signed(32), depth=self.sp_depth, init=[], attrs={"ram_style": "ultra"})
            sp_wp, sp_ra, sp_rb = sp.write_port(), sp.read_port(), sp.read_port()
        m.submodules.em = em = Memory(shape=signed(8), depth=self.em_depth, init=[])
        em_wp, em_ra = em.write_port(), em.read_port()

        m.submodules.cfifo = cfifo = SyncFIFOBuffered(width=INSTR.size,
                                                      depth=self.cmd_depth)
        m.d.comb += [cfifo.w_data.eq(self.cmd.payload), cfifo.w_en.eq(self.cmd.valid),
                     self.cmd.ready.eq(cfifo.w_rdy)]
        ins = Signal(INSTR)
        err = Signal(8)
        halted = Signal()
        retired = self.retired
        busy = Signal()
        m.d.comb += [self.error.eq(err), self.halted.eq(halted), self.busy.eq(busy),
                     regs.status.eq(Cat(busy, halted, Const(0, 6), err)), regs.retired.eq(retired)]
        with m.If(regs.ctrl_wstb & regs.ctrl[0]):
            m.d.sync += [err.eq(0), halted.eq(0)]
        m.d.comb += [gemm.error_clr.eq(regs.ctrl_wstb), vec.error_clr.eq(regs.ctrl_wstb),
                     att.error_clr.eq(regs.ctrl_wstb)]
        with m.If((gemm.error | vec.error | att.error).any()):
            m.d.sync += err.eq(err | ERR_UNIT)
        if ddr:
            kv_err = Signal()              # KV in DDR: the streamer reports an error (halts)
            region = self.kv_region
            kv_clr = regs.ctrl_wstb & regs.ctrl[0]
            wiring.connect(m, wiring.flipped(self.m_axi_kv), att.m_axi)
            m.d.comb += [kv_err.eq(att.kv_error != 0), att.kv_error_clr.eq(kv_clr),
                         regs.kv_err.eq(att.kv_error), regs.kv_err_addr_lo.eq(att.kv_error_addr[:32]),
                         regs.kv_err_addr_hi.eq(att.kv_error_addr[32:])]
            with m.If(kv_err & ~kv_clr):
                m.d.sync += [err.eq(err | ERR_KV | Mux((gemm.error | vec.error | att.error).any(), ERR_UNIT, 0)),
                             halted.eq(1)]
            vars(s).update(kv_err=kv_err, region=region)
        vars(s).update(gemm=gemm, vec=vec, att=att, au=au, ddr=ddr, pn=pn, pk=pk, d=d, sp_wp=sp_wp,
                       sp_ra=sp_ra, sp_rb=sp_rb, em_wp=em_wp, em_ra=em_ra, cfifo=cfifo, ins=ins, err=err,
                       halted=halted, retired=retired, busy=busy)

    def _movers(self, m, s):
        """Readers A and B and the writer on the scratchpad / exponent memory, and the word
        (un)packers between them and the units."""
        pn, pk, d, sp_wp, sp_ra, sp_rb, em_wp = s.pn, s.pk, s.d, s.sp_wp, s.sp_ra, s.sp_rb, s.em_wp
        em_ra, ins = s.em_ra, s.ins
        paired = self.sp_pairs         # the readers and LOAD_X's packers: two words a cycle when asked
        m.submodules.ra = ra = ScratchpadReader(pairs=paired)      # reader A (SP port a + EM)
        m.submodules.rb = rb = ScratchpadReader(pairs=paired)      # reader B (SP port b)
        m.submodules.wr = wr = AddressWalker(pairs=self.vec_pairs)         # writer
        wr_em = Signal()           # writer also stores the row exponent at each row end
        ra_em_only = Signal()      # SPR/SPW of the exponent memory
        wr_em_only = Signal()
        m.d.comb += [sp_ra.addr.eq(ra.addr), em_ra.addr.eq(Mux(ra_em_only, ra.addr, ra.eaddr)),
                     ra.rdata.eq(sp_ra.data), ra.edata.eq(em_ra.data), ra.em_only.eq(ra_em_only),
                     sp_rb.addr.eq(rb.addr), rb.rdata.eq(sp_rb.data)]
        if paired:
            m.d.comb += [ra.rdata1.eq(sp_ra.data1), rb.rdata1.eq(sp_rb.data1)]
        A, B = ra.out, rb.out

        # writer input (selected per op)
        w_valid = Signal()
        w_data = Signal(signed(32))
        w_e = Signal(signed(8))
        w_take = Signal()
        m.d.comb += w_take.eq(w_valid & wr.active)
        w_data1 = w_pair = None
        if self.vec_pairs:             # a pair write: words addr, addr + 1
            w_data1, w_pair = Signal(signed(32), name="w_data1"), Signal(name="w_pair")
            m.d.comb += [sp_wp.data1.eq(w_data1), sp_wp.pair.eq(w_pair)]
        m.d.comb += [sp_wp.addr.eq(wr.addr), sp_wp.data.eq(w_data), sp_wp.en.eq(w_take & ~wr_em_only),
                     em_wp.addr.eq(Mux(wr_em_only, wr.addr, wr.eaddr)),
                     em_wp.data.eq(Mux(wr_em_only, w_data, w_e)),
                     em_wp.en.eq(w_take & (wr_em_only | (wr_em & wr.last_j))), wr.step.eq(w_take)]

        # packer: words from reader A -> lanes of 8 bits (GEMM x: pk lanes, KV/Q rows: d lanes)
        m.submodules.packer = packer = LanePacker(max(pk, d), pairs=paired)
        pk_n = Signal(range(max(pk, d) + 1))       # lanes per beat for the current op
        pk_full, pk_beat, pk_e = packer.beat.valid, packer.beat.payload.data, packer.beat.payload.e
        m.d.comb += [packer.n.eq(pk_n), packer.word.payload.data.eq(A.payload.data[:8]),
                     packer.word.payload.e.eq(A.payload.e)]
        x_pair = Signal(name="x_pair")         # sp_pairs: this LOAD_X reads two words a cycle
        s.e_pair = Signal(name="e_pair") if self.emit_pairs else None   # this EMIT sends two words a beat
        if paired:
            m.d.comb += [packer.word.payload.data1.eq(A.payload.data1[:8]), packer.pair.eq(x_pair)]
        packer_b = xc = None
        if self.loadx_ports == 2:      # LOAD_X's odd chunks: reader B -> pk lanes; xc: the row's chunk
            xc = Signal(16)
            m.submodules.packer_b = packer_b = LanePacker(pk, pairs=paired)
            m.d.comb += [packer_b.n.eq(pk), packer_b.word.payload.data.eq(B.payload.data[:8])]
            if paired:
                m.d.comb += [packer_b.word.payload.data1.eq(B.payload.data1[:8]), packer_b.pair.eq(x_pair)]

        # words into the writer / out of reader A: GEMM y tiles (up_idx: lane), narrow values, attention rows
        PW = PartialRow(d).words             # one partial row: m, l, o[d] as int64 lo/hi words
        up_idx = Signal(range(max(pn, PW) + 1))
        m.submodules.pack = pack = ValuePacker()         # EMIT pack: 32/bits values per word
        m.submodules.unpack = unpack = ValueUnpacker()   # SPW unpack: 32/bits values per sp_in word
        if self.spw_pairs:             # SPW: sp_in's beats of one or two words -> words one or two a cycle
            m.submodules.realign = realign = WordRealigner()
            wiring.connect(m, wiring.flipped(self.sp_in), realign.beat)
            m.d.comb += realign.pair.eq(w_pair)
            s.realign = realign
        s.spw_words = s.realign.word if self.spw_pairs else self.sp_in     # SPW's words: realigned or as they come
        m.submodules.att_words = att_words = AttentionRowSerializer(d, pairs=self.att_pairs)   # attention rows -> writer
        m.d.comb += [pack.bits.eq(ins.bits), unpack.bits.eq(ins.bits), att_words.final.eq(ins.flags[2])]
        # FOLD: reader A's words (and B's, with fold_ports=2) -> attention p_in beat
        m.submodules.fold = fold = PartialRowAssembler(d, ports=self.fold_ports)
        vars(s).update(x_pair=x_pair, paired=paired, w_data1=w_data1, w_pair=w_pair)
        vars(s).update(w_data=w_data, ra=ra, A=A, rb=rb, B=B, wr=wr, wr_em=wr_em, ra_em_only=ra_em_only,
                       wr_em_only=wr_em_only, w_valid=w_valid, w_e=w_e, w_take=w_take, packer=packer, packer_b=packer_b, xc=xc,
                       pk_n=pk_n, pk_full=pk_full, pk_beat=pk_beat, pk_e=pk_e, up_idx=up_idx, PW=PW, pack=pack,
                       unpack=unpack, att_words=att_words, fold=fold)

    def _decode(self, m, s):
        """The instruction's checks (``InstrCheck``) and the decoded quantities the sequencer uses.
        The check looks at the command FIFO's head (its output register) and its results are
        registered with the instruction when FETCH takes it, so DECODE starts from registers; only
        the KV windows' state (``claimed``, which the streamer changes on its own) is looked at in
        DECODE (``instr_check.window_refused``), registered there as ``win_bad`` and applied in
        the op's first state (KVL, ATT_KV), which refuses the instruction before it starts."""
        gemm, vec, att, au, ddr, ins = s.gemm, s.vec, s.att, s.au, s.ddr, s.ins
        op = ins.op
        K = ins.len
        m.submodules.check = check = InstrCheck(
            sp_depth=self.sp_depth, em_depth=self.em_depth, gemm=gemm, vec_d_max=vec.d_max, att=au,
            **(dict(region=self.kv_region, win_rows=self.kv_win_rows, n_win=self.kv_n_win) if ddr else {}),
            pipelined=self.check_pipelined)
        pop = Signal()                      # FETCH takes the FIFO's head into ins
        m.d.comb += check.ins.eq(s.cfifo.r_data)
        # the check holds for the head once it has been there check.latency cycles
        if check.latency:
            age = Signal(range(check.latency + 1), name="ck_age")
            with m.If(pop | ~s.cfifo.r_rdy):
                m.d.sync += age.eq(0)
            with m.Elif(age != check.latency):
                m.d.sync += age.eq(age + 1)
            ck_ready = age == check.latency
        else:
            ck_ready = 1
        held = ["rows_att", "emit_rows", "emit_len", "bad_op"] + (
            ["kvs_len", "att_w", "bad_shape", "win", "win_claim", "win_free"] if ddr else ["bad"])
        r = {n: Signal.like(getattr(check, n), name=f"ck_{n}") for n in held}
        with m.If(pop):
            m.d.sync += [r[n].eq(getattr(check, n)) for n in held]
        rows_att, emit_rows, emit_len, bad_op = r["rows_att"], r["emit_rows"], r["emit_len"], r["bad_op"]
        binop = (ins.sub == VecOp.ADD) | (ins.sub == VecOp.SWIGLU)
        vrows = Mux(ins.sub == VecOp.ROPE, rows_att, ins.n0)
        if ddr:
            kvs_len, att_w = r["kvs_len"], r["att_w"]
            # InstrCheck.bad (with its ``claimed`` input) is the check in one cycle; not used here.
            # The window term is registered at DECODE (win_bad) and applied in KVL / ATT_KV (timing)
            bad = r["bad_shape"]
            win_now = window_refused(att.full | att.kv_loading, r["win"], r["win_claim"], r["win_free"])
            win_bad = Signal()
            # the head just taken is a KVS that DECODE starts: its raw read is offered from DECODE
            # on, a cycle before KVS_RAW (the streamer takes a read from its second cycle of valid)
            kvs_go = Signal(name="kvs_go")
            m.d.sync += kvs_go.eq(pop & (check.ins.op == EngineOpcode.KVS) & ~check.bad_op & ~check.bad_shape)
            vars(s).update(kvs_len=kvs_len, att_w=att_w, win_now=win_now, win_bad=win_bad, kvs_go=kvs_go)
        else:
            bad = r["bad"]
        vars(s).update(op=op, K=K, rows_att=rows_att, emit_rows=emit_rows, emit_len=emit_len, bad=bad,
                       bad_op=bad_op, binop=binop, vrows=vrows, pop=pop, ck_ready=ck_ready)

    def _datapath(self, m, s):
        """Per-op glue: the streams reader A/B and the writer are connected to while ``cur`` runs;
        the row counters of packed beats."""
        gemm, vec, att, ddr, pn, pk, d, w_data = s.gemm, s.vec, s.att, s.ddr, s.pn, s.pk, s.d, s.w_data
        ins, kv_err, A, B, wr, w_valid, w_e = s.ins, s.kv_err, s.A, s.B, s.wr, s.w_valid, s.w_e
        w_take, packer, pk_full, pk_beat, pk_e = s.w_take, s.packer, s.pk_full, s.pk_beat, s.pk_e
        up_idx, pack, unpack, att_words, fold = s.up_idx, s.pack, s.unpack, s.att_words, s.fold
        # the op being executed, one-hot (bit ``op``; 0 when idle): every use of it (which stream
        # feeds which unit) is a flip-flop, not a compare of an opcode (timing: the whole engine's
        # path cur -> reader B's ready -> its FIFO level)
        cur = Signal(_CUR_BITS, name="cur")
        if self.fold_ports == 2:          # acc ATT: its partial rows come from reader B alone
            m.d.comb += s.fold.serial.eq(cur[EngineOpcode.ATT])
        row_cnt = Signal(16)              # rows sent by the packer (KVW/ATT)
        ro = Signal(16)
        ri = Signal(16)
        n1_m1 = Signal(signed(len(ins.n1) + 1))     # ins.n1 - 1, registered at DECODE (timing)
        kv_addr = Signal(32)
        bp = att.blk_in.payload             # ATT's next key block: blocks left, its fields, tokens left
        blk = SimpleNamespace(left=Signal.like(ins.nblk, name="blk_left"), addr=Signal.like(bp.addr, name="blk_addr"),
                              pos=Signal.like(bp.pos, name="blk_pos"), len=Signal.like(bp.len, name="blk_len"),
                              rem=Signal.like(bp.len, name="blk_rem"))
        if ddr:
            kv_dropped = Signal()         # this KVW dropped rows (streamer error)
        feed = [packer.word.valid.eq(A.valid)]     # reader A -> packer (its ready: a_ready below)
        self._unit_payloads(m, s, ro, kv_addr)
        # reader A's ready, an AND-OR over cur's one-hot bits (a Switch's cases are a priority
        # chain to synthesis, which does not know cur is one-hot: the path cur -> A.ready -> its FIFO level)
        a_ready = {EngineOpcode.SPR: self.sp_out.ready,
                   EngineOpcode.EMIT: Mux(ins.flags[1], pack.word.ready, self.emit_out.ready),
                   EngineOpcode.GEMM: packer.word.ready, EngineOpcode.KVW: packer.word.ready,
                   EngineOpcode.ATT: packer.word.ready, EngineOpcode.VEC: vec.a_in.ready,
                   EngineOpcode.FOLD: fold.word.ready}
        m.d.comb += A.ready.eq(Cat(cur[op] & r for op, r in a_ready.items()).any())
        # each op's glue under its own If(cur[op]) (cur one-hot: no two run), not a Switch's priority
        with m.If(cur[EngineOpcode.SPW]):
            # spw_pairs: sp_in's beats of one or two words through the realigner, its words
            # one a cycle or (a pair walk: w_pair) two
            sp = s.spw_words
            if self.spw_pairs:
                m.d.comb += s.realign.en.eq(1)
            with m.If(ins.flags[1]):          # unpack: 32/bits values per sp_in word
                m.d.comb += [unpack.packed.valid.eq(sp.valid), unpack.packed.payload.data.eq(sp.payload.data),
                             sp.ready.eq(unpack.packed.ready), unpack.value.ready.eq(wr.active)]
            with m.Else():
                m.d.comb += sp.ready.eq(wr.active)
        with m.If(cur[EngineOpcode.SPR]):
            m.d.comb += [self.sp_out.valid.eq(A.valid), self.sp_out.payload.data.eq(A.payload.data),
                         self.sp_out.payload.last.eq(A.payload.last)]
        with m.If(cur[EngineOpcode.EMIT]):
            with m.If(ins.flags[1]):          # pack: 32/bits source words per emitted word
                m.d.comb += [pack.word.valid.eq(A.valid), pack.word.payload.data.eq(A.payload.data),
                             pack.word.payload.last.eq(A.payload.last)]
                m.d.comb += [self.emit_out.valid.eq(pack.packed.valid), self.emit_out.payload.eq(pack.packed.payload),
                             pack.packed.ready.eq(self.emit_out.ready)]
            with m.Else():
                m.d.comb += [self.emit_out.valid.eq(A.valid), self.emit_out.payload.data.eq(A.payload.data),
                             self.emit_out.payload.last.eq(A.payload.last)]
                if self.emit_pairs:            # a pair walk: both words of each beat
                    m.d.comb += [self.emit_out.payload.data1.eq(A.payload.data1),
                                 self.emit_out.payload.two.eq(s.e_pair)]
        with m.If(cur[EngineOpcode.GEMM]):
            if self.loadx_ports == 2:
                self._loadx_two_ports(m, s, feed)
            else:
                m.d.comb += feed + [gemm.x_in.valid.eq(pk_full), packer.beat.ready.eq(gemm.x_in.ready)]
            yb = gemm.y_out.payload.data
            with m.Switch(up_idx):
                for i in range(pn):
                    with m.Case(i):
                        m.d.comb += w_data.eq(yb[i])
            m.d.comb += w_valid.eq(gemm.y_out.valid)
            m.d.comb += gemm.y_out.ready.eq(w_take & (up_idx == pn - 1))
            with m.If(w_take):
                m.d.sync += up_idx.eq(Mux(up_idx == pn - 1, 0, up_idx + 1))
        with m.If(cur[EngineOpcode.VEC]):
            m.d.comb += [vec.a_in.valid.eq(A.valid),
                         vec.b_in.valid.eq(B.valid), B.ready.eq(vec.b_in.ready),
                         w_valid.eq(vec.o_out.valid), w_data.eq(vec.o_out.payload.data),
                         w_e.eq(vec.o_out.payload.e), vec.o_out.ready.eq(wr.active)]
            if self.vec_pairs:       # a pair beat: both results out (words 2k, 2k + 1 in: _unit_payloads)
                m.d.comb += s.w_data1.eq(vec.o_out.payload.data1)
        with m.If(cur[EngineOpcode.KVW]):
            if ddr:     # rows to the streamer; dropped (not written) once it is in error
                kw = att.kv_wr
                m.d.comb += feed + [kw.valid.eq(pk_full & ~kv_err), packer.beat.ready.eq(kw.ready | kv_err)]
                with m.If(pk_full & kv_err):
                    m.d.sync += kv_dropped.eq(1)
            else:
                m.d.comb += feed + [att.kv_in.valid.eq(pk_full), packer.beat.ready.eq(att.kv_in.ready)]
        with m.If(cur[EngineOpcode.ATT]):
            # flags bit3 ext_m: row r's external max from SP[b + r] (reader B) rides with its q row
            m_ok = ~ins.flags[3] | B.valid
            m.d.comb += feed + [att.q_in.valid.eq(pk_full & m_ok),
                         packer.beat.ready.eq(att.q_in.ready & m_ok)]
            # sub bit1 acc: row r's partial from SP[b + r*W] (reader B) -> p_in, one word a cycle
            with m.If(ins.sub[1]):           # (fold_ports=2: each half of a row to its port, serially)
                m.d.comb += [fold.word.valid.eq(B.valid), fold.word.payload.data.eq(B.payload.data),
                             att.p_in.valid.eq(fold.row.valid), fold.row.ready.eq(att.p_in.ready)]
                if self.fold_ports == 2:
                    m.d.comb += [fold.word_b.valid.eq(B.valid), fold.word_b.payload.data.eq(B.payload.data),
                                 B.ready.eq(fold.word.ready | fold.word_b.ready)]
                else:
                    m.d.comb += B.ready.eq(fold.word.ready)
            with m.Else():
                m.d.comb += B.ready.eq(ins.flags[3] & pk_full & att.q_in.ready & B.valid)
            # block i: keys kvb + i*bs .. at positions kpos + i*bs, bs of them (the last: the rest
            # of ntok); every field a register, stepped by bs as each block is taken
            m.d.comb += [att.blk_in.valid.eq(blk.left != 0), att.blk_in.payload.addr.eq(blk.addr),
                         att.blk_in.payload.len.eq(blk.len), att.blk_in.payload.pos.eq(blk.pos)]
            with m.If(att.blk_in.valid & att.blk_in.ready):
                m.d.sync += [blk.left.eq(blk.left - 1), blk.addr.eq(blk.addr + ins.bs),
                             blk.pos.eq(blk.pos + ins.bs), blk.rem.eq(blk.rem - ins.bs),
                             blk.len.eq(Mux(blk.left == 2, blk.rem - ins.bs, ins.bs))]
        with m.If(cur[EngineOpcode.FOLD]):        # a partial row's PW words from reader A (and B) -> one p_in beat
            if self.fold_ports == 2:
                m.d.comb += [fold.word_b.valid.eq(B.valid), fold.word_b.payload.data.eq(B.payload.data),
                             B.ready.eq(fold.word_b.ready)]
            m.d.comb += [fold.word.valid.eq(A.valid), fold.word.payload.data.eq(A.payload.data),
                         att.p_in.valid.eq(fold.row.valid),
                         fold.row.ready.eq(att.p_in.ready)]
        words = att_words.word
        if self.att_words_reg:             # the serializer's word select registered before the writer's data mux
            wb = 64 if self.att_pairs else 32          # att_pairs: a beat's two words (data1 high)
            m.submodules.att_wq = wq = ResetInserter(att_words.clear)(SyncFIFOBuffered(width=wb, depth=3))
            m.d.comb += [wq.w_data.eq(words.payload.as_value()), wq.w_en.eq(words.valid), words.ready.eq(wq.w_rdy)]
            words = SimpleNamespace(valid=wq.r_rdy, payload=words.payload.shape()(wq.r_data), ready=wq.r_en)
        with m.If(cur[EngineOpcode.ATT] | cur[EngineOpcode.FOLD]):      # attention rows -> writer
            m.d.comb += [att_words.row.valid.eq(att.o_out.valid),
                         att.o_out.ready.eq(att_words.row.ready), w_valid.eq(words.valid),
                         w_data.eq(words.payload.data), words.ready.eq(wr.active)]
            if self.att_pairs:             # a pair walk (w_pair, set with the writer's walk): both words
                m.d.comb += [s.w_data1.eq(words.payload.data1), att_words.pair.eq(s.w_pair)]
        self._spw_writer_input(m, s, cur)
        # row counters of packed beats (KV address / query position)
        with m.If(packer.beat.valid & packer.beat.ready):
            m.d.sync += [ri.eq(ri + 1), kv_addr.eq(kv_addr + ins.kvs)]
            with m.If(ri == n1_m1):
                m.d.sync += [ri.eq(0), ro.eq(ro + 1), kv_addr.eq(ins.kvb + ro + 1)]
        vars(s).update(cur=cur, row_cnt=row_cnt, ro=ro, ri=ri, n1_m1=n1_m1, kv_addr=kv_addr, blk=blk)
        if ddr:
            vars(s).update(kv_dropped=kv_dropped)

    def _spw_writer_input(self, m, s, cur):
        """SPW's words into the writer, assigned after every other source: synthesis builds the
        writer's input as a chain of selects in assignment order, the last one nearest the
        memories, and SPW's data comes through the realigner and the unpacker (realign.hd -> em /
        sp.mem, 9 levels on 73f70fa; an AND-OR of every source instead was chained by ABC into
        LUT5s: 10 levels, 6.80 ns on 000a314)."""
        with m.If(cur[EngineOpcode.SPW]):
            sp = s.spw_words
            with m.If(s.ins.flags[1]):
                m.d.comb += [s.w_valid.eq(s.unpack.value.valid), s.w_data.eq(s.unpack.value.payload.data)]
            with m.Else():
                m.d.comb += [s.w_valid.eq(sp.valid), s.w_data.eq(sp.payload.data)]
                if self.spw_pairs:
                    m.d.comb += s.w_data1.eq(sp.payload.data1)

    def _unit_payloads(self, m, s, ro, kv_addr):
        """The units' wide input payloads, driven whatever the instruction: a unit reads a payload
        only with its ``valid``, which the instruction's case drives. (Assigned inside the opcode
        switch, each bit would be gated by the opcode: ~12.5k LUT for the two 6,244-bit partial-row
        buses alone.)"""
        att, gemm, vec, ins, pk, d = s.att, s.gemm, s.vec, s.ins, s.pk, s.d
        beat, e = s.pk_beat, s.pk_e
        # the vector unit's elements straight from readers A and B (timing: cur -> a_in's data ->
        # the load stage's max|a| was the whole engine's slowest path)
        m.d.comb += [vec.a_in.payload.data.eq(s.A.payload.data), vec.b_in.payload.data.eq(s.B.payload.data)]
        if self.vec_pairs:
            m.d.comb += [vec.a_in.payload.data1.eq(s.A.payload.data1), vec.b_in.payload.data1.eq(s.B.payload.data1)]
        m.d.comb += [att.p_in.payload.eq(s.fold.row.payload), s.att_words.row.payload.eq(att.o_out.payload),
                     att.q_in.payload.data.eq(beat[:d * 8]), att.q_in.payload.e.eq(e),
                     att.q_in.payload.pos.eq(ins.pos0 + ro),
                     att.q_in.payload.m_ext.eq(Mux(ins.flags[3], s.B.payload.data, 0))]
        if self.loadx_ports != 2:
            m.d.comb += [gemm.x_in.payload.data.eq(beat[:pk * 8]), gemm.x_in.payload.e.eq(e)]
        if s.ddr:
            kw = att.kv_wr
            m.d.comb += [kw.payload.data.eq(beat[:d * 8]), kw.payload.e.eq(e), kw.payload.sel.eq(ins.flags[0]),
                         kw.payload.slot.eq(ins.b), kw.payload.row.eq(kv_addr)]
        else:
            kv = att.kv_in
            m.d.comb += [kv.payload.data.eq(beat[:d * 8]), kv.payload.e.eq(e), kv.payload.sel.eq(ins.flags[0]),
                         kv.payload.addr.eq(kv_addr)]

    def _loadx_two_ports(self, m, s, feed):
        """LOAD_X with two readers: chunk c of a row (``pk`` words) comes from packer A (reader A)
        when c is even, from packer B (reader B) when odd; B's beats carry the row's exponent, which
        A's first beat of the row brought (reader B has no exponent port)."""
        gemm, pk, K, B, packer, packer_b = s.gemm, s.pk, s.K, s.B, s.packer, s.packer_b
        xc, e_row = s.xc, Signal(signed(8))
        from_b = xc[0]
        x = gemm.x_in
        m.d.comb += feed + [packer_b.word.valid.eq(B.valid), B.ready.eq(packer_b.word.ready),
                            x.valid.eq(Mux(from_b, packer_b.beat.valid, s.pk_full)),
                            x.payload.data.eq(Mux(from_b, packer_b.beat.payload.data, s.pk_beat[:pk * 8])),
                            x.payload.e.eq(Mux(from_b, e_row, s.pk_e)),
                            packer.beat.ready.eq(x.ready & ~from_b), packer_b.beat.ready.eq(x.ready & from_b)]
        with m.If(x.valid & x.ready):
            m.d.sync += xc.eq(Mux(xc == (K >> exact_log2(pk)) - 1, 0, xc + 1))
            with m.If(~from_b):
                m.d.sync += e_row.eq(s.pk_e)

    def _kvs_words(self, m, s):
        """K/V in DDR: KVS's words (the streamer's raw beats cut into words) and install header."""
        att, ddr, ins, region, cur = s.att, s.ddr, s.ins, s.region, s.cur
        # KVS: raw bus beats from the streamer -> 32-bit words on emit_out (low word first)
        if ddr:
            raw = att.kv_raw_out
            m.submodules.kvs_words = kvs_words = BeatSplitter(region.bus_bytes * 8)
            m.d.comb += [kvs_words.beat.valid.eq(raw.valid), kvs_words.beat.payload.eq(raw.payload),
                         raw.ready.eq(kvs_words.beat.ready), kvs_words.en.eq(cur[EngineOpcode.KVS])]
            kvs_hdr = Signal(install_header_layout())
            m.d.comb += [kvs_hdr.row0.eq(ins.kvb), kvs_hdr.n.eq(ins.ntok), kvs_hdr.last.eq(ins.flags[0]),
                         kvs_hdr.first.eq(ins.flags[1]), kvs_hdr.owner.eq(ins.flags[2])]
            kvs_hi = Signal()                # KVS_HDR: the header's high word is next
            vars(s).update(kvs_words=kvs_words, kvs_hdr=kvs_hdr, kvs_hi=kvs_hi)

    def _att_movers(self, m, s):
        """Start ATT's movers: q rows (reader A), ext_m (reader B)."""
        d, ins, ra, rb, pk_n, K, rows_att = s.d, s.ins, s.ra, s.rb, s.pk_n, s.K, s.rows_att
        m.d.comb += _walk(ra, ins.a, ins.so, K, ins.n0, ins.n1, K, ins.ea, ins.eo, ins.ei)
        with m.If(ins.flags[3]):       # external max M of row r at SP[b + r]
            m.d.comb += _walk(rb, ins.b, 0, 1, 1, rows_att, 1)
        with m.Elif(ins.sub[1]):       # acc: row r's partial at SP[b + r*W]
            m.d.comb += _walk(rb, ins.b, 0, s.PW, 1, rows_att, s.PW)
        m.d.sync += pk_n.eq(d)

    def _att_writer(self, m, s):
        """Start the writer for ATT/FOLD output rows (``att_pairs``: a pair walk when every row
        starts at an even word: ``dst`` even and, finalized, ``so`` even; ``len`` = d and ``2d+4``
        are even)."""
        ins, wr, PW, K = s.ins, s.wr, s.PW, s.K
        with m.If(ins.flags[2]):
            m.d.comb += _walk(wr, ins.dst, ins.so, K, ins.n0, ins.n1, K)
        with m.Else():
            m.d.comb += _walk(wr, ins.dst, ins.n1 * PW, PW, ins.n0, ins.n1, PW)
        if self.att_pairs:
            ap = ~ins.dst[0] & (~ins.flags[2] | ~ins.so[0])
            m.d.comb += wr.pair.eq(ap)
            m.d.sync += s.w_pair.eq(ap)

    def _sequencer(self, m, s):
        """The sequencer FSM (fetch, decode and check, then the instruction's steps) and ``busy``."""
        gemm, vec, att, ddr, cfifo, ins = s.gemm, s.vec, s.att, s.ddr, s.cfifo, s.ins
        halted, retired, busy, ra, wr, ra_em_only = s.halted, s.retired, s.busy, s.ra, s.wr, s.ra_em_only
        packer, pk_full, pack = s.packer, s.pk_full, s.pack
        emit_rows, emit_len, att_w, cur, kv_dropped = s.emit_rows, s.emit_len, s.att_w, s.cur, s.kv_dropped
        self._unit_commands(m, s)
        with m.FSM(name="seq") as fsm:
            with s.state("FETCH"):
                m.d.comb += cfifo.r_en.eq(~halted & s.ck_ready)
                with m.If(cfifo.r_rdy & ~halted & s.ck_ready):
                    m.d.comb += s.pop.eq(1)
                    m.d.sync += ins.eq(cfifo.r_data)
                    s.goto("DECODE")
            with s.state("DECODE"):
                self._seq_decode(m, s)
            if ddr:
                self._seq_kv_states(m, s)
            with s.state("GEMM_X"):
                with m.If(gemm.cmd.ready):
                    s.goto("GEMM_RUN")
            with s.state("GEMM_RUN"):
                with m.If(gemm.cmd.ready):
                    s.goto("WAIT_WR")
            with s.state("VEC_CMD"):
                with m.If(vec.cmd.ready):
                    s.goto("WAIT_WR")
            with s.state("ATT_CMD"):
                with m.If(att.cmd.ready):
                    s.goto("WAIT_WR")
            with s.state("WAIT_WR"):
                with m.If(~wr.active):
                    m.d.sync += [retired.eq(retired + 1), cur.eq(0)]
                    s.goto("FETCH")
                    if ddr:                    # ATT sub.0: the job's last output is written
                        with m.If(cur[EngineOpcode.ATT] & ins.sub[0]):
                            m.d.comb += [att.release.valid.eq(1), att.release.payload.win.eq(att_w)]
            with s.state("EMIT_META"):
                m.d.comb += [self.meta_out.valid.eq(1), self.meta_out.payload.eq(ins.meta),
                             self.meta_out.payload.length.eq(emit_len)]
                with m.If(self.meta_out.ready):
                    m.d.comb += _walk(ra, ins.a, ins.so, 0, emit_rows, 1, ins.n0)
                    m.d.sync += ra_em_only.eq(ins.flags[0])
                    if self.emit_pairs:            # SP words at even addresses: two a beat
                        ep = ~ins.flags[0] & ~ins.flags[1] & ~ins.a[0] & ~ins.n0[0] & (~ins.so[0] | (emit_rows == 1))
                        m.d.comb += ra.pair.eq(ep)
                        m.d.sync += s.e_pair.eq(ep)
                    s.goto("WAIT_SPR")
            with s.state("WAIT_SPR"):
                with m.If(ra.drained & ~pack.packed.valid):
                    m.d.sync += [retired.eq(retired + 1), cur.eq(0)]
                    s.goto("FETCH")
            with s.state("WAIT_KVW"):
                with m.If(ra.drained & ~pk_full & (packer.count == 0)):
                    if ddr:                    # a KVW that dropped rows does not retire
                        m.d.sync += [retired.eq(retired + ~kv_dropped), cur.eq(0)]
                    else:
                        m.d.sync += [retired.eq(retired + 1), cur.eq(0)]
                    s.goto("FETCH")
        if ddr:
            m.d.comb += busy.eq(~fsm.ongoing("FETCH") | cfifo.r_rdy & ~halted | att.kv_busy)
        else:
            m.d.comb += busy.eq(~fsm.ongoing("FETCH") | cfifo.r_rdy & ~halted)

    #: sequencer states that hand a unit its command (and KVS_DATA, which takes the KVS words): the
    #: command's ``valid`` (the words' ``ready``) is a register of "the sequencer is in this state"
    #: (:meth:`_unit_commands`), not a decode of the state register
    UNIT_CMD_STATES = ("GEMM_X", "GEMM_RUN", "VEC_CMD", "ATT_CMD", "KVL", "KVS_RAW", "KVS_DATA")

    def _unit_commands(self, m, s):
        """The units' command streams. Their payloads come from the instruction's registers and
        are driven in every state; each ``valid`` is a flip-flop set when the sequencer enters the
        command's state and cleared when it leaves (``s.goto`` moves the FSM and sets them), so a
        unit's command logic starts from registers, not from the decode of the sequencer's state
        (the whole-engine timing path ``seq_state`` -> the vector unit's FSM / the KV streamer).
        Returns the flags by state name."""
        gemm, vec, att, ins, pk, pn, K, op = s.gemm, s.vec, s.att, s.ins, s.pk, s.pn, s.K, s.op
        names = self.UNIT_CMD_STATES if s.ddr else self.UNIT_CMD_STATES[:4]
        at = {n: Signal(name=f"seq_at_{n.lower()}") for n in names}

        # each flag is set by the transitions into its state and cleared by those out of it, so
        # its logic sees only those states' conditions, not every transition of the sequencer
        # (the whole-engine timing path att.full -> ATT_KV's transition -> every flag)
        here = []

        @contextmanager
        def state(name):
            """``with m.State(name)``, noting the state ``goto`` leaves."""
            with m.State(name):
                here.append(name)
                try:
                    yield
                finally:
                    here.pop()

        def goto(target):
            m.next = target
            if target != here[-1]:
                m.d.sync += ([at[target].eq(1)] if target in at else []) + (
                    [at[here[-1]].eq(0)] if here[-1] in at else [])
        s.goto, s.state = goto, state
        m.d.comb += [gemm.cmd.valid.eq(at["GEMM_X"] | at["GEMM_RUN"]),
                     gemm.cmd.payload.op.eq(Mux(at["GEMM_RUN"], GemmOp.RUN, GemmOp.LOAD_X)),
                     gemm.cmd.payload.kc.eq(K // pk), gemm.cmd.payload.t.eq(ins.n0),
                     gemm.cmd.payload.tiles.eq(ins.n1 // pn)]
        # the vector command's payload: a register set at DECODE (:meth:`_seq_decode`), so the
        # unit's accept starts from flip-flops, not from the instruction's decode (timing)
        s.vcmd = Signal(vec.cmd_layout, name="vec_cmd_q")
        m.d.comb += [vec.cmd.valid.eq(at["VEC_CMD"]), vec.cmd.payload.eq(s.vcmd)]
        m.d.comb += [att.cmd.valid.eq(at["ATT_CMD"]), att.cmd.payload.nq.eq(s.rows_att),
                     att.cmd.payload.nblk.eq(ins.nblk),
                     att.cmd.payload.causal.eq(ins.flags[0]), att.cmd.payload.flat.eq(ins.flags[1]),
                     att.cmd.payload.final.eq(ins.flags[2]), att.cmd.payload.fold.eq(op == EngineOpcode.FOLD),
                     att.cmd.payload.ext_m.eq((op == EngineOpcode.ATT) & ins.flags[3]),
                     att.cmd.payload.acc.eq((op == EngineOpcode.ATT) & ins.sub[1])]
        if s.ddr:
            lp, rp = att.load.payload, att.kv_raw.payload
            m.d.comb += [att.load.valid.eq(at["KVL"] & ~s.kv_err & ~s.win_bad), lp.slot.eq(ins.b), lp.row.eq(ins.kvb),
                         lp.n.eq(ins.ntok), lp.win.eq(ins.dst),
                         att.kv_raw.valid.eq((at["KVS_RAW"] | s.kvs_go) & ~s.kv_err), rp.slot.eq(ins.b),
                         rp.rec0.eq(ins.kvb),
                         rp.n.eq(ins.ntok),
                         # KVS's words (the state KVS_DATA drives emit_out from them): the splitter's
                         # ready from a flip-flop (timing: seq_state -> its word shift)
                         s.kvs_words.word.ready.eq(at["KVS_DATA"] & self.emit_out.ready)]
        return at

    def _seq_decode(self, m, s):
        """Sequencer state DECODE: clear the per-op state, refuse a bad instruction (halt) or start
        its movers and go to its first state."""
        ddr, pn, pk, d, ins, err, halted = s.ddr, s.pn, s.pk, s.d, s.ins, s.err, s.halted
        retired, ra, rb, wr, wr_em, ra_em_only = s.retired, s.ra, s.rb, s.wr, s.wr_em, s.ra_em_only
        wr_em_only, op, packer, pk_n, up_idx, PW = s.wr_em_only, s.op, s.packer, s.pk_n, s.up_idx, s.PW
        pack, unpack, att_words, fold, K, rows_att = s.pack, s.unpack, s.att_words, s.fold, s.K, s.rows_att
        bad, bad_op, binop, vrows, cur, row_cnt = s.bad, s.bad_op, s.binop, s.vrows, s.cur, s.row_cnt
        ro, ri, kv_addr, blk, kv_dropped, kvs_hi = s.ro, s.ri, s.kv_addr, s.blk, s.kv_dropped, s.kvs_hi
        m.d.comb += [packer.clear.eq(1), fold.clear.eq(1)]
        if self.loadx_ports == 2:
            m.d.comb += s.packer_b.clear.eq(1)
            m.d.sync += s.xc.eq(0)
        m.d.comb += [pack.clear.eq(1), unpack.clear.eq(1), att_words.clear.eq(1)]
        m.d.sync += [up_idx.eq(0), row_cnt.eq(0), ro.eq(0), ri.eq(0), s.n1_m1.eq(ins.n1 - 1),
                     kv_addr.eq(ins.kvb),
                     blk.left.eq(ins.nblk), blk.addr.eq(ins.kvb), blk.pos.eq(ins.kpos), blk.rem.eq(ins.ntok),
                     blk.len.eq(Mux(ins.nblk == 1, ins.ntok, ins.bs)),
                     wr_em.eq(0), ra_em_only.eq(0), wr_em_only.eq(0)]
        if ddr:
            m.d.sync += [kv_dropped.eq(0), kvs_hi.eq(0), s.win_bad.eq(s.win_now)]
        if s.paired:
            m.d.sync += s.x_pair.eq(0)
        if self.vec_pairs:
            m.d.sync += s.w_pair.eq(0)
        if self.emit_pairs:
            m.d.sync += s.e_pair.eq(0)
        with m.If(bad_op):
            m.d.sync += [err.eq(err | ERR_OPCODE), halted.eq(1)]
            s.goto("FETCH")
        with m.Elif(bad):
            self._refuse(m, s)
        with m.Else():
            m.d.sync += cur.eq(Const(1, _CUR_BITS) << op)
            with m.Switch(op):
                with m.Case(EngineOpcode.NOP):
                    m.d.sync += [retired.eq(retired + 1), cur.eq(0)]
                    s.goto("FETCH")
                with m.Case(EngineOpcode.SPW):
                    m.d.comb += _walk(wr, ins.dst, 0, 0, 1, 1, ins.n0)
                    m.d.sync += wr_em_only.eq(ins.flags[0])
                    if self.spw_pairs:           # words to the SP (not packed), dst and n0 even: two a cycle
                        sp2 = ~ins.flags[0] & ~ins.flags[1] & ~ins.dst[0] & ~ins.n0[0]
                        m.d.comb += wr.pair.eq(sp2)
                        m.d.sync += s.w_pair.eq(sp2)
                    s.goto("WAIT_WR")
                with m.Case(EngineOpcode.SPR):
                    m.d.comb += _walk(ra, ins.a, 0, 0, 1, 1, ins.n0)
                    m.d.sync += ra_em_only.eq(ins.flags[0])
                    s.goto("WAIT_SPR")
                with m.Case(EngineOpcode.EMIT):
                    s.goto("EMIT_META")
                with m.Case(EngineOpcode.GEMM):
                    m.d.comb += _walk(wr, ins.dst, pn, ins.n1, ins.n1 // pn, ins.n0, pn)
                    m.d.sync += pk_n.eq(pk)
                    with m.If(ins.flags[0]):       # reuse the activations already loaded
                        s.goto("GEMM_RUN")
                    with m.Else():
                        if s.paired:                   # two words a cycle per reader: rows at even
                            xp = ~ins.a[0]             # addresses (pk and K are even)
                            m.d.comb += [ra.pair.eq(xp), rb.pair.eq(xp)]
                            m.d.sync += s.x_pair.eq(xp)
                        if self.loadx_ports == 2:      # A: even pk-chunks of each row, B: odd
                            kc = K >> exact_log2(pk)
                            m.d.comb += _walk(ra, ins.a, K, 2 * pk, ins.n0, (kc + 1) >> 1, pk, ins.ea, 1, 0)
                            with m.If(kc > 1):
                                m.d.comb += _walk(rb, ins.a + pk, K, 2 * pk, ins.n0, kc >> 1, pk)
                        else:
                            m.d.comb += _walk(ra, ins.a, 0, K, 1, ins.n0, K, ins.ea, 0, 1)
                        s.goto("GEMM_X")
                with m.Case(EngineOpcode.VEC):
                    m.d.comb += _walk(ra, ins.a, 0, K, 1, vrows, K)
                    with m.If(ins.sub == VecOp.ROPE):
                        m.d.comb += _walk(rb, ins.b, K >> 1, 0, ins.n0, ins.n1, K >> 1)
                    with m.Elif(binop):
                        m.d.comb += _walk(rb, ins.b, 0, K, 1, ins.n0, K)
                    m.d.comb += _walk(wr, ins.dst, 0, K, 1, vrows, K, ins.ed, 0, 1)
                    m.d.sync += wr_em.eq(1)
                    if self.vec_pairs:       # ADD / SWIGLU (QUANT, RMSNORM) of even rows at even addresses: two words
                        vp = binop & ~K[0] & ~ins.a[0] & ~ins.b[0] & ~ins.dst[0]    # a cycle each way
                        if self.quant_pairs:
                            rowop = (ins.sub == VecOp.QUANT) | (ins.sub == VecOp.RMSNORM) if self.rms_pairs \
                                else ins.sub == VecOp.QUANT
                            vp = vp | (rowop & ~K[0] & ~ins.a[0] & ~ins.dst[0])
                        m.d.comb += [ra.pair.eq(vp), rb.pair.eq(vp), wr.pair.eq(vp)]
                        m.d.sync += [s.w_pair.eq(vp), s.vcmd.pair.eq(vp)]
                    vc = s.vcmd
                    m.d.sync += [vc.op.eq(ins.sub), vc.len.eq(K), vc.rows.eq(vrows), vc.frac.eq(ins.frac),
                                 vc.bits.eq(ins.bits), vc.eps_q.eq(ins.eps_q)]
                    s.goto("VEC_CMD")
                with m.Case(EngineOpcode.KVW):
                    m.d.comb += _walk(ra, ins.a, ins.so, K, ins.n0, ins.n1, K, ins.ea, ins.eo, ins.ei)
                    m.d.sync += pk_n.eq(d)
                    s.goto("WAIT_KVW")
                with m.Case(EngineOpcode.ATT):
                    if ddr:                        # movers start once the window is full
                        s.goto("ATT_KV")
                    else:
                        self._att_movers(m, s)
                        s.goto("ATT_CMD")
                with m.Case(EngineOpcode.FOLD):
                    # row r, partial j, word w: SP[a + r*PW + j*b + w]; two ports: A w < PW/2, B the rest
                    half = PW // self.fold_ports
                    m.d.comb += _walk(ra, ins.a, PW, ins.b, rows_att, ins.nblk, half)
                    if self.fold_ports == 2:
                        m.d.comb += _walk(rb, ins.a + half, PW, ins.b, rows_att, ins.nblk, half)
                    s.goto("ATT_CMD")
                if ddr:
                    with m.Case(EngineOpcode.KVL):
                        s.goto("KVL")
                    with m.Case(EngineOpcode.KVS):
                        s.goto("KVS_RAW")
            with m.If((op == EngineOpcode.FOLD) if ddr else ((op == EngineOpcode.ATT) | (op == EngineOpcode.FOLD))):
                self._att_writer(m, s)

    def _refuse(self, m, s):
        """Refuse the instruction (at DECODE, or in its first state for the window check
        registered at DECODE): ERR_SHAPE, halt, nothing started, not retired."""
        m.d.sync += [s.err.eq(s.err | ERR_SHAPE), s.halted.eq(1), s.cur.eq(0)]
        s.goto("FETCH")

    def _seq_kv_states(self, m, s):
        """Sequencer states of K/V in DDR: KVL, KVS (raw read, Meta, header, data, end) and ATT_KV."""
        att, ins, retired, kv_err, kvs_len, att_w = s.att, s.ins, s.retired, s.kv_err, s.kvs_len, s.att_w
        cur, kvs_words, kvs_hdr, kvs_hi = s.cur, s.kvs_words, s.kvs_hdr, s.kvs_hi
        with s.state("KVL"):           # hand the load to the streamer; it runs on its own
            with m.If(s.win_bad):
                self._refuse(m, s)
            with m.Elif(att.load.valid & att.load.ready):
                m.d.sync += [retired.eq(retired + 1), cur.eq(0)]
                s.goto("FETCH")
            with m.Elif(kv_err):       # the streamer halted: give up (not retired)
                m.d.sync += cur.eq(0)
                s.goto("FETCH")
        with s.state("KVS_RAW"):       # the raw read first: it runs while Meta and header go
            with m.If(att.kv_raw.valid & att.kv_raw.ready):
                s.goto("KVS_META")
            with m.Elif(kv_err):       # the streamer is halted: nothing sent, not retired
                m.d.sync += cur.eq(0)
                s.goto("FETCH")
        with s.state("KVS_META"):
            m.d.comb += [self.meta_out.valid.eq(1), self.meta_out.payload.eq(ins.meta),
                         self.meta_out.payload.length.eq(kvs_len)]
            with m.If(self.meta_out.ready):
                s.goto("KVS_HDR")
        with s.state("KVS_HDR"):       # install header, low word then high word
            hv = kvs_hdr.as_value()
            m.d.comb += [self.emit_out.valid.eq(1), self.emit_out.payload.last.eq(0),
                         self.emit_out.payload.data.eq(Mux(kvs_hi, hv[32:64], hv[:32]))]
            with m.If(self.emit_out.ready):
                m.d.sync += kvs_hi.eq(1)
                with m.If(kvs_hi):
                    s.goto("KVS_DATA")
        with s.state("KVS_DATA"):      # the records: bus beats cut into words
            kw_out = kvs_words.word
            m.d.comb += [self.emit_out.valid.eq(kw_out.valid), self.emit_out.payload.eq(kw_out.payload)]
            with m.If(kw_out.valid & kw_out.ready & kw_out.payload.last):
                s.goto("KVS_END")
        with s.state("KVS_END"):       # the read's status is in: retire unless it failed
            with m.If(~att.kv_raw_busy):
                m.d.sync += [retired.eq(retired + ~kv_err), cur.eq(0)]
                s.goto("FETCH")
        with s.state("ATT_KV"):        # wait for the window (or give up on an error)
            with m.If(s.win_bad):
                self._refuse(m, s)
            with m.Elif(att.full.bit_select(att_w, 1)):
                self._att_movers(m, s)
                self._att_writer(m, s)
                s.goto("ATT_CMD")
            with m.Elif(kv_err):
                m.d.sync += cur.eq(0)
                s.goto("FETCH")
        return m
