"""The NIC of one node: metadata-driven forwarding, multicast, all-to-all and reductions.

Ports (AMBA names in Verilog, ``mcf_fpga/hdl/verilog.py``):

* ``s_axis`` / ``m_axis``: the local node (packetizer in, compute / KV pool out);
* ``s_axis_net<p>`` / ``m_axis_net<p>``, p = 1..n_net: network ports (to the link layers;
  numbering in ``mcf_fpga/spec/topology.py``);
* ``m_axis_inval``: kv_id of every ``replica_invalidate`` delivered here (``tdata`` holds
  ``hdl.meta.kv_id_layout`` bits), for the KV pool's replica directory;
* ``s_axi``: AXI4-Lite registers (``spec.nic.Reg``, docs/nic.md);
* ``crc_err``: one pulse per bad-FCS frame from each link layer (counted as ``CRC``).

Trust: a frame's ``src`` is checked against the port it arrived on (``SRC_ALLOW_<p>``, reset 0:
a network port accepts nothing until the host writes the sources its routes deliver there,
``spec.topology.src_masks``; the local port always accepts ``NODE_ID``), and a reduction
group that does not complete within ``REDUCE_TIMEOUT`` cycles is freed (``TIMEOUT``). Every
drop counts in its ``ERR_c`` counter and sets sticky bit c of ``ERR_FLAGS``.

Datapath: every input port has an ``IngressPort`` (parse, validate, route lookup,
store-and-forward). The local port's packets pass the ``AllToAllSplitter``. A
``MulticastSwitch`` sends each packet to all ports of its route mask in one pass. The local
output goes through ``LocalEgress`` (invalidations, reductions) and a 2-input packet merge
with the ``ReductionEngine``'s results. Behaviour is specified by ``mcf_fpga/golden/nic.py``.
"""
from amaranth import Cat, Const, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.hdl.bus import AXI4LiteRegisterFile, AXI4LiteSignature, Access, PacketSignature, Register
from mcf_fpga.hdl.meta import kv_id_layout

from .all_to_all import AllToAllSplitter
from mcf_fpga.spec.nic import NIC_ID, ErrorCause, NicConfig, Reg, src_allow_reg
from .egress import LocalEgress
from .ingress import IngressPort, RegsSignature, route_user_layout
from .reduce import ReductionEngine
from .route_table import RouteTable
from .switch import MulticastSwitch

__all__ = ["Nic", "nic_registers"]


def nic_registers(cfg: NicConfig):
    """The register file's ``Register`` list (offsets from ``Reg``)."""
    mp = cfg.meta
    nodes_bits = cfg.max_nodes.bit_length()
    regs = [
        Register("id", Reg.ID, Access.RO, doc="NIC_ID"),
        Register("node_id", Reg.NODE_ID, width=mp.node_bits),
        Register("num_nodes", Reg.NUM_NODES, width=nodes_bits, reset=cfg.max_nodes),
        Register("members", Reg.MEMBERS, width=cfg.max_nodes, reset=(1 << cfg.max_nodes) - 1),
        Register("num_layers", Reg.NUM_LAYERS, reset=min(1 << mp.layer_bits, 2 ** 32 - 1)),
        Register("num_blocks", Reg.NUM_BLOCKS, reset=min(1 << mp.block_bits, 2 ** 32 - 1)),
        Register("route_index", Reg.ROUTE_INDEX, width=max((cfg.n_routes - 1).bit_length(), 1)),
        Register("route_data", Reg.ROUTE_DATA, Access.WO, width=16),
        Register("route_read", Reg.ROUTE_READ, Access.RO, width=16),
        Register("bank", Reg.BANK, Access.RO, width=1),
        Register("bank_flip", Reg.BANK_FLIP, Access.WO, width=1),
        Register("rx_frames", Reg.RX_FRAMES, Access.RO),
        Register("err_flags", Reg.ERR_FLAGS, Access.RO, width=len(ErrorCause)),
        Register("err_clear", Reg.ERR_CLEAR, Access.WO, width=len(ErrorCause)),
        Register("reduce_timeout", Reg.REDUCE_TIMEOUT, reset=cfg.reduce_timeout),
    ]
    regs += [Register(f"err_{c.name.lower()}", Reg.ERR_BASE + 4 * c, Access.RO) for c in ErrorCause]
    regs += [Register(f"src_allow{p}", src_allow_reg(p), width=cfg.max_nodes) for p in range(cfg.n_ports)]
    return regs


class Nic(wiring.Component):
    """One node's NIC (see module docstring). ``cfg``: ``NicConfig``."""

    def __init__(self, cfg: NicConfig = NicConfig()):
        self.cfg = cfg
        dw = cfg.data_width
        members = {
            "s_axis": In(PacketSignature(dw)),
            "m_axis": Out(PacketSignature(dw)),
        }
        for p in range(1, cfg.n_net + 1):
            members[f"s_axis_net{p}"] = In(PacketSignature(dw))
            members[f"m_axis_net{p}"] = Out(PacketSignature(dw))
        members["m_axis_inval"] = Out(stream.Signature(kv_id_layout(cfg.meta).size))
        members["s_axi"] = In(AXI4LiteSignature(8, 32))
        members["crc_err"] = In(cfg.n_net)
        super().__init__(members)

    def in_port(self, p):
        return self.s_axis if p == 0 else getattr(self, f"s_axis_net{p}")

    def out_port(self, p):
        return self.m_axis if p == 0 else getattr(self, f"m_axis_net{p}")

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        n = cfg.n_ports
        uw = route_user_layout(cfg).size

        m.submodules.regfile = rf = AXI4LiteRegisterFile(nic_registers(cfg), addr_width=8)
        wiring.connect(m, wiring.flipped(self.s_axi), rf.bus)
        m.d.comb += rf.id.eq(NIC_ID)

        m.submodules.routes = rt = RouteTable(cfg, n_lookup=n + 1)
        w_ok = (rf.route_index < cfg.n_routes) if cfg.n_routes & (cfg.n_routes - 1) else 1
        m.d.comb += [rt.w_addr.eq(rf.route_index), rt.w_data.eq(rf.route_data),
                     rt.w_en.eq(rf.route_data_wstb & w_ok), rt.r_addr.eq(rf.route_index),
                     rf.route_read.eq(rt.r_data), rt.flip.eq(rf.bank_flip_wstb), rf.bank.eq(rt.active)]

        def drive_regs(iface):
            m.d.comb += [iface.node_id.eq(rf.node_id), iface.num_nodes.eq(rf.num_nodes),
                         iface.members.eq(rf.members), iface.num_layers.eq(rf.num_layers),
                         iface.num_blocks.eq(rf.num_blocks)]

        m.submodules.switch = sw = MulticastSwitch(n, n, cfg.data_width, uw, cfg.out_depth)
        ingress = []
        for p in range(n):
            ig = IngressPort(cfg, local=(p == 0))
            m.submodules[f"ingress{p}"] = ig
            ingress.append(ig)
            wiring.connect(m, wiring.flipped(self.in_port(p)), ig.s)
            wiring.connect(m, ig.lookup, rt.lookup[p])
            drive_regs(ig.regs)
            m.d.comb += ig.src_allow.eq(getattr(rf, f"src_allow{p}"))
        m.submodules.all_to_all = a2a = AllToAllSplitter(cfg)
        wiring.connect(m, ingress[0].out, a2a.s)
        wiring.connect(m, a2a.lookup, rt.lookup[n])
        drive_regs(a2a.regs)
        wiring.connect(m, a2a.m, sw.s[0])
        for p in range(1, n):
            wiring.connect(m, ingress[p].out, sw.s[p])

        for p in range(1, n):
            out, src = self.out_port(p), sw.m[p]
            m.d.comb += [out.valid.eq(src.valid), out.payload.data.eq(src.payload.data),
                         out.payload.keep.eq(src.payload.keep), out.payload.last.eq(src.payload.last),
                         src.ready.eq(out.ready)]

        m.submodules.egress = eg = LocalEgress(cfg)
        wiring.connect(m, sw.m[0], eg.s)
        wiring.connect(m, eg.inval, wiring.flipped(self.m_axis_inval))
        m.submodules.reduce = red = ReductionEngine(cfg)
        wiring.connect(m, eg.reduce, red.s)
        m.d.comb += [red.node_id.eq(rf.node_id), red.timeout.eq(rf.reduce_timeout)]
        m.submodules.merge = mg = MulticastSwitch(2, 1, cfg.data_width, 1, cfg.out_depth)
        for i, src in enumerate([eg.fwd, red.m]):
            dst = mg.s[i]
            m.d.comb += [dst.valid.eq(src.valid), dst.payload.data.eq(src.payload.data),
                         dst.payload.keep.eq(src.payload.keep), dst.payload.last.eq(src.payload.last),
                         dst.payload.user.eq(1), src.ready.eq(dst.ready)]
        out = self.m_axis
        m.d.comb += [out.valid.eq(mg.m[0].valid), out.payload.data.eq(mg.m[0].payload.data),
                     out.payload.keep.eq(mg.m[0].payload.keep), out.payload.last.eq(mg.m[0].payload.last),
                     mg.m[0].ready.eq(out.ready)]

        # ---- counters and sticky flags (ERR_CLEAR clears a flag unless its cause fires then)
        flags = Signal(len(ErrorCause))
        for c in ErrorCause:
            pulses = []
            for ig in ingress:
                pulses.append(ig.err & (ig.err_cause == c))
            if c == ErrorCause.ROUTE:
                pulses.append(a2a.err)
            if c == ErrorCause.REDUCE:
                pulses.append(red.err)
            if c == ErrorCause.TIMEOUT:
                pulses += [red.expired[k] for k in range(len(red.expired))]
            if c == ErrorCause.CRC:
                pulses += [self.crc_err[i] for i in range(cfg.n_net)]
            self._counter(m, getattr(rf, f"err_{c.name.lower()}"), pulses, f"err_{c.name.lower()}")
            clear = rf.err_clear_wstb & rf.err_clear[c]
            m.d.sync += flags[c].eq((flags[c] & ~clear) | Cat(*pulses).any())
        m.d.comb += rf.err_flags.eq(flags)
        self._counter(m, rf.rx_frames, [ig.ok for ig in ingress], "rx_frames")
        return m

    @staticmethod
    def _counter(m, reg_in, pulses, name):
        """Saturating 32-bit counter of the pulses (several may come in one cycle)."""
        cnt = Signal(32, name=f"{name}_cnt")
        inc = Signal(range(len(pulses) + 1), name=f"{name}_inc")
        total = Const(0, inc.shape())
        for p in pulses:
            total = total + p
        m.d.comb += inc.eq(total)
        nxt = Signal(33, name=f"{name}_nxt")
        m.d.comb += nxt.eq(cnt + inc)
        m.d.sync += cnt.eq(nxt[32].replicate(32) | nxt[:32])
        m.d.comb += reg_in.eq(cnt)


def make_nic(**params) -> Nic:
    """Block-registry factory: ``Nic(NicConfig(**params))``."""
    return Nic(NicConfig(**params))
