"""Attention over K/V in DDR: an :class:`~hdl.compute.attention.AttentionUnit` built with
``kv_ports=True`` reading its K/V rows from a :class:`~hdl.dma.kvstream.KVStreamer`'s staging
windows (docs/memory.md, "KV in DDR").

Members: the attention unit's ``cmd``, ``q_in``, ``blk_in``, ``p_in``, ``o_out``, ``error``,
``error_clr``, ``busy`` and the streamer's ``load``, ``release``, ``full``, ``kv_wr``, ``m_axi``,
with its ``loading``/``error``/``error_addr``/``error_clr``/``busy`` as ``kv_loading``,
``kv_error``, ``kv_error_addr``, ``kv_error_clr``, ``kv_busy``, and its raw read path (records
straight from DDR, for KV sends) ``raw``/``raw_out``/``raw_busy`` as ``kv_raw``, ``kv_raw_out``,
``kv_raw_busy``. A job's blocks address window ``w`` as rows ``w * win_rows + r``;
the controller starts a job on window ``w`` only while ``full[w]`` is set (or gives up on
``kv_error``), and releases ``w`` after the job's last ``o_out`` beat. Loads queued on ``load``
fill the other windows meanwhile.
"""
from amaranth import Module
from amaranth.lib import wiring

from .attention import AttentionUnit
from mcf_fpga.hdl.dma.kvstream import KVStreamer

__all__ = ["StreamedAttention"]

_ATT = ("cmd", "q_in", "blk_in", "p_in", "o_out", "error", "error_clr", "busy")
_KV = {"load": "load", "release": "release", "full": "full", "kv_loading": "loading", "kv_wr": "kv_wr",
       "kv_raw": "raw", "kv_raw_out": "raw_out", "kv_raw_busy": "raw_busy", "m_axi": "m_axi",
       "kv_error": "error", "kv_error_addr": "error_addr", "kv_error_clr": "error_clr", "kv_busy": "busy"}


class StreamedAttention(wiring.Component):
    """Parameters: ``region`` (:class:`spec.kvregion.KVRegion`), ``win_rows``, ``n_win`` and
    ``dma`` (a dict of AXI parameters) for the streamer; ``att`` (a dict) for the attention unit
    (``d`` is the region's, ``kv_depth`` is ``n_win * win_rows``); with ``keys_per_cycle=2`` in
    ``att`` the streamer gets a second pair of read ports (``k_rd1``/``v_rd1``, two rows per cycle)."""

    def __init__(self, region, *, win_rows=16, n_win=2, dma=None, att=None):
        kpc = (att or {}).get("keys_per_cycle", 1)
        self.kv = KVStreamer(region, win_rows=win_rows, n_win=n_win, read_ports=kpc, **(dma or {}))
        self.att = AttentionUnit(d=region.d, kv_depth=n_win * win_rows, kv_ports=True, **(att or {}))
        members = {n: self.att.signature.members[n] for n in _ATT}
        members.update({n: self.kv.signature.members[k] for n, k in _KV.items()})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.kv, m.submodules.att = kv, att = self.kv, self.att
        wiring.connect(m, kv.k_rd, att.k_rd)
        wiring.connect(m, kv.v_rd, att.v_rd)
        if att.keys_per_cycle == 2:
            wiring.connect(m, kv.k_rd1, att.k_rd1)
            wiring.connect(m, kv.v_rd1, att.v_rd1)
        for name, sub, k in [(n, att, n) for n in _ATT] + [(n, kv, k) for n, k in _KV.items()]:
            mine, theirs = getattr(self, name), getattr(sub, k)
            member = self.signature.members[name]
            if member.is_signature:
                wiring.connect(m, wiring.flipped(mine), theirs)
            elif member.flow == wiring.In:
                m.d.comb += theirs.eq(mine)
            else:
                m.d.comb += mine.eq(theirs)
        return m
