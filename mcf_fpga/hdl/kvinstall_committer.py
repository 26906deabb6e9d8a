"""KVInstallCommitter: the KV installer's status FSM (DMA outcomes, failed-unit set, commits).

Contract
--------
* ``status`` (the DMA writer's ``{code, addr}``) is taken only together with ``pend`` (the
  written packet's ``{kv_id, last, owner}``, in the same order). OKAY raises ``installed``;
  an error raises ``axi_err``, latches the first error's ``err_code``/``err_addr`` and
  marks the packet's unit failed (rule 4 of :mod:`golden.kvinstall`): its kv_id enters the
  ``max_failed``-entry set, or ``overflow`` is set when the set is full.
* On a unit's last packet: if the unit failed (in the set, the last write failed, or
  ``overflow``) its set entry is freed and ``unit_done`` pulses; otherwise one ``dir_cmd``
  (``COMMIT_OWNER`` if ``owner``, else ``COMMIT_INSTALL``) is sent and, when its
  ``dir_resp`` arrives, ``unit_done`` pulses and ``committed`` is high if it answered OK.
* ``clear`` empties the set and zeroes ``err_code``, ``err_addr`` and ``overflow``.
* Back-pressure on ``dir_cmd``/``dir_resp`` stalls it (then ``status``). ``busy``: not idle.
"""
from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from mcf_fpga.spec.dma import DmaStatus
from mcf_fpga.spec.kvpool import Opcode, Status
from mcf_fpga.hdl.dma.common import status_layout
from mcf_fpga.hdl.kvinstall_writer import pending_layout
from mcf_fpga.hdl.kvpool import cmd_layout, resp_layout

__all__ = ["KVInstallCommitter"]


class KVInstallCommitter(wiring.Component):
    """See module docstring. ``kv_bits``: kv_id bits on the wire; ``kv_id_width``, ``n_slots``,
    ``max_readers``: the pool's; ``addr_width``: the DMA's; ``max_failed``: entries of the set."""

    def __init__(self, *, kv_bits: int, kv_id_width: int, n_slots: int, max_readers: int, addr_width: int,
                 max_failed: int):
        self.kv_bits, self.max_failed, self.addr_width = kv_bits, max_failed, addr_width
        super().__init__({
            "status": In(stream.Signature(status_layout(addr_width))),
            "pend": In(stream.Signature(pending_layout(kv_bits))),
            "dir_cmd": Out(stream.Signature(cmd_layout(kv_id_width))),
            "dir_resp": In(stream.Signature(resp_layout(n_slots, max_readers))),
            "clear": In(1),
            "installed": Out(1),
            "axi_err": Out(1),
            "committed": Out(1),
            "unit_done": Out(1),
            "err_code": Out(4),
            "err_addr": Out(addr_width),
            "overflow": Out(1),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        kvw, P = self.kv_bits, self.max_failed
        phead, st, clear = self.pend.payload, self.status.payload, self.clear
        err_code, err_addr, overflow = self.err_code, self.err_addr, self.overflow
        c_kv, c_owner = Signal(kvw), Signal()
        m.d.comb += [self.dir_cmd.payload.opcode.eq(Mux(c_owner, Opcode.COMMIT_OWNER, Opcode.COMMIT_INSTALL)),
                     self.dir_cmd.payload.kv_id.eq(c_kv)]
        f_valid = Signal(P)
        f_kv = [Signal(kvw, name=f"failed_kv{i}") for i in range(P)]
        hit_vec = Signal(P)
        m.d.comb += hit_vec.eq(Cat(f_valid[i] & (f_kv[i] == phead.kv_id) for i in range(P)))
        hit = hit_vec.any()
        free_idx = Signal(range(max(2, P)))
        for i in reversed(range(P)):
            with m.If(~f_valid[i]):
                m.d.comb += free_idx.eq(i)
        f_set, f_clr = Signal(P), Signal(P)
        m.d.sync += f_valid.eq(Mux(clear, 0, (f_valid | f_set) & ~f_clr))
        with m.FSM(name="st") as fsm:
            with m.State("IDLE"):
                m.d.comb += self.status.ready.eq(self.pend.valid)
                with m.If(self.status.valid & self.status.ready):
                    m.d.comb += self.pend.ready.eq(1)
                    with m.If(st.code != DmaStatus.OK):
                        m.d.comb += self.axi_err.eq(1)
                        with m.If(err_code == 0):
                            m.d.sync += [err_code.eq(st.code), err_addr.eq(st.addr)]
                        with m.If(phead.last):
                            m.d.comb += [f_clr.eq(hit_vec), self.unit_done.eq(1)]
                        with m.Elif(~hit):
                            with m.If(~f_valid.all()):
                                m.d.comb += f_set.eq(Const(1, P) << free_idx)
                            with m.Else():
                                m.d.sync += overflow.eq(1)
                    with m.Else():
                        m.d.comb += self.installed.eq(1)
                        with m.If(phead.last):
                            with m.If(hit | overflow):
                                m.d.comb += [f_clr.eq(hit_vec), self.unit_done.eq(1)]
                            with m.Else():
                                m.d.sync += [c_kv.eq(phead.kv_id), c_owner.eq(phead.owner)]
                                m.next = "COMMIT"
            with m.State("COMMIT"):
                m.d.comb += self.dir_cmd.valid.eq(1)
                with m.If(self.dir_cmd.ready):
                    m.next = "CWAIT"
            with m.State("CWAIT"):
                m.d.comb += self.dir_resp.ready.eq(1)
                with m.If(self.dir_resp.valid):
                    m.d.comb += [self.committed.eq(self.dir_resp.payload.status == Status.OK),
                                 self.unit_done.eq(1)]
                    m.next = "IDLE"
        for i in range(P):
            with m.If(f_set[i]):
                m.d.sync += f_kv[i].eq(phead.kv_id)
        with m.If(clear):
            m.d.sync += [err_code.eq(0), err_addr.eq(0), overflow.eq(0)]
        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE"))
        return m
