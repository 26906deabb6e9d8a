"""Ingress port: packet parser (header/payload split, validation, route lookup) and its
store-and-forward buffer.

Input ``s``: packets in the format of ``mcf_fpga/hdl/packetizer.py`` (header beats, then payload;
only the last beat's ``keep`` may be partial). The parser checks the header against the
registers and the route table (``docs/nic.md``, ``mcf_fpga/golden/nic.py: NicModel.classify``),
including the source check (``src`` must be allowed on this port: bit ``src`` of ``src_allow``,
or on the local port ``src == NODE_ID``; else ``SPOOF``), splits
the packet into a descriptor FIFO (Meta, routing sideband) and a payload FIFO, and checks
the payload size against ``length`` at the last beat. A packet leaves on ``out`` only
after its last beat was accepted and found good, so nothing invalid is ever forwarded; a bad
packet is dropped (a header fault: nothing is stored; a size fault: the stored words are
drained by the joiner) and ``err`` pulses with ``err_cause`` (an ``ErrorCause``).

``out`` carries the packet unchanged (header beats re-emitted from the descriptor) with the
``ROUTE_USER`` sideband on every beat: ``mask`` (output ports), ``cls`` (what the local port
does with it), ``fanin`` (reduction group size), ``a2a`` (all-to-all to split here).
Back-pressure on ``out`` fills the buffer, then stalls ``s``. Good packets leave back to
back at one beat per cycle.
"""
import enum

from amaranth import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, fifo, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import PacketSignature
from mcf_fpga.spec.meta import Collective, MetaOp, ReduceOp
from mcf_fpga.hdl.meta import meta_layout
from mcf_fpga.hdl.packetizer import PacketJoiner, joiner_desc_layout

from mcf_fpga.spec.nic import ERR_CAUSE_BITS, HEADER_CAUSE_ORDER, ErrorCause, NicConfig
from .route_table import LookupSignature

__all__ = ["Cls", "route_user_layout", "RegsSignature", "IngressPort"]


class Cls(enum.IntEnum):
    """What the local port does with a packet delivered to it."""
    FORWARD = 0     #: to the local packet output
    INVALIDATE = 1  #: kv_id to the KV pool's invalidation stream, payload dropped
    REDUCE = 2      #: into the reduction engine


def route_user_layout(cfg: NicConfig) -> data.StructLayout:
    return data.StructLayout({"mask": cfg.n_ports, "cls": 2, "fanin": 8, "a2a": 1})


class RegsSignature(wiring.Signature):
    """Configuration registers the parsers read (driven by the NIC's register file)."""

    def __init__(self, cfg: NicConfig):
        self.nodes_bits = cfg.max_nodes.bit_length()
        super().__init__({
            "node_id": Out(cfg.meta.node_bits),
            "num_nodes": Out(self.nodes_bits),
            "members": Out(cfg.max_nodes),
            "num_layers": Out(32),
            "num_blocks": Out(32),
        })


class IngressPort(wiring.Component):
    """One input port: parser + descriptor/payload FIFOs + joiner (see module docstring).

    Parameters
    ----------
    cfg : NicConfig
    local : bool
        True for port 0 (the local node): all-to-all packets are checked for splitting here,
        and ``src == regs.node_id`` is allowed whatever ``src_allow`` says.
    desc_depth : int
        Descriptors buffered (packets waiting to leave).
    """

    def __init__(self, cfg: NicConfig, local: bool = False, desc_depth: int = 16):
        self.cfg, self.local, self.desc_depth = cfg, local, desc_depth
        self.user_layout = route_user_layout(cfg)
        super().__init__({
            "s": In(PacketSignature(cfg.data_width)),
            "out": Out(PacketSignature(cfg.data_width, self.user_layout.size)),
            "lookup": Out(LookupSignature(cfg)),
            "regs": In(RegsSignature(cfg)),
            "src_allow": In(cfg.max_nodes),     # this port's SRC_ALLOW register
            "err": Out(1), "err_cause": Out(ERR_CAUSE_BITS), "ok": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, mp = self.cfg, self.cfg.meta
        dw, H = cfg.data_width, cfg.header_beats
        joiner = PacketJoiner(mp, dw, self.user_layout.size, nic_mode=True)
        m.submodules.joiner = joiner
        dlay = joiner_desc_layout(mp, self.user_layout.size, joiner.beat_bits)
        m.submodules.desc_fifo = df = fifo.SyncFIFOBuffered(width=dlay.size, depth=self.desc_depth)
        m.submodules.payload_fifo = pf = fifo.SyncFIFOBuffered(width=dw, depth=cfg.in_depth)
        m.d.comb += [joiner.desc.payload.eq(df.r_data), joiner.desc.valid.eq(df.r_rdy),
                     df.r_en.eq(joiner.desc.ready),
                     joiner.words.payload.eq(pf.r_data), joiner.words.valid.eq(pf.r_rdy),
                     pf.r_en.eq(joiner.words.ready)]
        wiring.connect(m, wiring.flipped(self.out), joiner.packet)

        s, regs = self.s, self.regs
        beat = s.payload
        # ---- header assembly
        hdr = [Signal(dw, name=f"hdr{i}") for i in range(H - 1)]
        hidx = Signal(range(H + 1))
        full = Signal(H * dw)
        m.d.comb += full.eq(Cat(*hdr, beat.data))
        hm = data.View(meta_layout(mp), full[:mp.header_bits])

        # ---- header checks (combinational, valid on the final header beat)
        op, rop, coll = Value.cast(hm.op), Value.cast(hm.reduce_op), Value.cast(hm.collective)
        is_reduce = rop != ReduceOp.NONE
        # golden.nic._REDUCE_PAIRS: SUM/MAX over REDUCTION (32-bit lanes) or PARTIAL_STATE
        # (64-bit lanes); SOFTMAX_MERGE over PARTIAL_STATE only
        pair_ok = ((op == MetaOp.PARTIAL_STATE)
                   | ((op == MetaOp.REDUCTION) & ((rop == ReduceOp.SUM) | (rop == ReduceOp.MAX))))
        e_op = (op >= 8) | (op == MetaOp.ACK) | (op == MetaOp.NAK) | (is_reduce & ~pair_ok)
        src_bits = (cfg.max_nodes - 1).bit_length()
        src_lo = hm.src[:src_bits]
        e_src = (hm.src >= cfg.max_nodes) | ~regs.members.bit_select(src_lo, 1)
        allowed = self.src_allow.bit_select(src_lo, 1)
        if self.local:
            allowed = allowed | (hm.src == regs.node_id)
        e_spoof = ~allowed
        e_dst = ((coll == Collective.P2P) | (coll == Collective.ALL_TO_ALL)) & (hm.dst >= regs.num_nodes)
        a2a = Signal()
        m.d.comb += a2a.eq((coll == Collective.ALL_TO_ALL) if self.local else 0)
        rid_ok = hm.route_id < cfg.n_routes
        m.d.comb += self.lookup.addr.eq(Mux(rid_ok, hm.route_id, 0))
        entry = self.lookup.entry
        mask = entry.mask[:cfg.n_ports]
        e_route = (~rid_ok | (a2a & (hm.route_id + regs.num_nodes > cfg.n_routes))
                   | (~a2a & (mask == 0))
                   | (~a2a & is_reduce & mask[0] & ((entry.fanin == 0) | (entry.fanin > cfg.max_nodes))))
        is_kv = (op == MetaOp.KV_REPLICA) | (op == MetaOp.REPLICA_INVALIDATE)
        e_kv = is_kv & ((hm.kv_id.layer >= regs.num_layers) | (hm.kv_id.block >= regs.num_blocks))
        length = hm.length
        a2a_len_bad = Signal()
        if self.local:
            unit = Signal(regs.num_nodes.shape().width + 3)
            m.d.comb += unit.eq(regs.num_nodes << 3)
            m.d.comb += a2a_len_bad.eq((regs.num_nodes == 0) | (length == 0)
                                       | (length % Mux(unit == 0, 1, unit) != 0))
        e_len = ((length > cfg.max_payload) | (is_reduce & ((length == 0) | (length[:3] != 0)))
                 | ((rop == ReduceOp.SOFTMAX_MERGE) & (length < 24)) | (a2a & a2a_len_bad))
        fault = {ErrorCause.OP: e_op, ErrorCause.SRC: e_src, ErrorCause.SPOOF: e_spoof,
                 ErrorCause.DST: e_dst, ErrorCause.ROUTE: e_route, ErrorCause.KV: e_kv,
                 ErrorCause.LENGTH: e_len}
        h_cause = Signal(ERR_CAUSE_BITS)
        h_bad = Signal()
        m.d.comb += h_bad.eq(Cat(*fault.values()).any())
        last = len(HEADER_CAUSE_ORDER) - 1
        for i, cause in enumerate(HEADER_CAUSE_ORDER):      # If / Elif ... / Else: the first wins
            with (m.If(fault[cause]) if i == 0 else m.Elif(fault[cause]) if i < last else m.Else()):
                m.d.comb += h_cause.eq(cause)
        h_user = Signal(self.user_layout)
        m.d.comb += [h_user.mask.eq(mask), h_user.fanin.eq(entry.fanin), h_user.a2a.eq(a2a),
                     h_user.cls.eq(Mux(op == MetaOp.REPLICA_INVALIDATE, 1, Mux(is_reduce, 2, 0)))]
        h_exp = Signal(joiner.beat_bits)
        m.d.comb += h_exp.eq((length + 7) >> 3)

        # ---- per-packet state latched at the end of the header
        meta_r = Signal(meta_layout(mp))
        user_r = Signal(self.user_layout)
        bad_r = Signal()
        cause_r = Signal(ERR_CAUSE_BITS)
        exp_r = Signal(joiner.beat_bits)
        keep_r = Signal(8)
        cnt = Signal(joiner.beat_bits + 1)    # payload beats seen
        wcnt = Signal(joiner.beat_bits)       # payload beats written

        def keep_of(len_):
            rem = len_[:3]
            return Mux(rem == 0, 0xFF, (Const(1, 9) << rem) - 1)

        # descriptor write data
        desc = Signal(dlay)
        m.d.comb += df.w_data.eq(desc)

        with m.If(hidx < H - 1):
            m.d.comb += s.ready.eq(1)
            with m.If(s.valid):
                for i in range(H - 1):
                    with m.If(hidx == i):
                        m.d.sync += hdr[i].eq(beat.data)
                with m.If(beat.last):          # runt: shorter than the header
                    m.d.comb += [self.err.eq(1), self.err_cause.eq(ErrorCause.LENGTH)]
                    m.d.sync += hidx.eq(0)
                with m.Else():
                    m.d.sync += hidx.eq(hidx + 1)
        with m.Elif(hidx == H - 1):
            with m.If(beat.last):
                # header-only packet: decide now; a partial final header beat is a runt
                runt = beat.keep != 0xFF
                good = ~runt & ~h_bad & (length == 0)
                m.d.comb += s.ready.eq(df.w_rdy)
                m.d.comb += [desc.meta.eq(hm), desc.meta["_rsvd0"].eq(0), desc.user.eq(h_user), desc.drop.eq(0),
                             desc.beats.eq(0)]
                with m.If(s.valid & s.ready):
                    m.d.sync += hidx.eq(0)
                    with m.If(good):
                        m.d.comb += [df.w_en.eq(1), self.ok.eq(1)]
                    with m.Else():
                        m.d.comb += [self.err.eq(1),
                                     self.err_cause.eq(Mux(~runt & h_bad, h_cause, ErrorCause.LENGTH))]
            with m.Else():
                m.d.comb += s.ready.eq(1)
                with m.If(s.valid):
                    m.d.sync += [hidx.eq(H), meta_r.eq(hm), user_r.eq(h_user), bad_r.eq(h_bad),
                                 cause_r.eq(h_cause), exp_r.eq(h_exp), keep_r.eq(keep_of(length)),
                                 cnt.eq(0), wcnt.eq(0)]
        with m.Else():
            write = Signal()
            m.d.comb += write.eq(~bad_r & (cnt < exp_r))
            m.d.comb += [pf.w_data.eq(beat.data),
                         s.ready.eq((~write | pf.w_rdy) & (~beat.last | df.w_rdy))]
            written = Signal.like(wcnt)
            m.d.comb += written.eq(wcnt + write)
            len_ok = (cnt + 1 == exp_r) & (beat.keep == keep_r)
            with m.If(s.valid & s.ready):
                m.d.comb += pf.w_en.eq(write)
                m.d.sync += [cnt.eq(cnt + 1), wcnt.eq(written)]
                with m.If(beat.last):
                    m.d.sync += hidx.eq(0)
                    with m.If(bad_r):
                        m.d.comb += [self.err.eq(1), self.err_cause.eq(cause_r)]
                    with m.Elif(len_ok):
                        m.d.comb += [df.w_en.eq(1), self.ok.eq(1),
                                     desc.meta.eq(meta_r), desc.meta["_rsvd0"].eq(0), desc.user.eq(user_r),
                                     desc.drop.eq(0), desc.beats.eq(exp_r)]
                    with m.Else():
                        m.d.comb += [self.err.eq(1), self.err_cause.eq(ErrorCause.LENGTH),
                                     df.w_en.eq(written != 0),
                                     desc.meta.eq(meta_r), desc.drop.eq(1), desc.beats.eq(written)]
        return m
