"""A DDR controller with several AXI4 slave ports: one byte image, one bandwidth budget.

The node gives every DDR user its own PS HP port (docs/memory.md, "AXI ports and arbitration");
the PS's DDR controller arbitrates among the ports. :class:`SharedAXI4Memory` is the simulation
model of that: ``N`` ports, each an :class:`~sim.axi4_memory.AXI4Memory` with its own
``latency``, ``max_outstanding``, ``ready_seed`` (AR/AW/W ready stalls) and port rate
``bytes_per_cycle`` (default: the bus width, 16 B/cycle on a 128-bit HP port), all over the same
bytes, and a shared budget of ``bytes_per_cycle`` for the whole controller.

Contract (each port follows the ``AXI4Memory`` contract, plus):

* **One image.** Every port reads and writes the same ``size`` bytes at ``[base, base + size)``
  (``load``/``dump``). A write's bytes land at its last W beat (as ``AXI4Memory``); a read beat's
  data are read from the image while it is offered. Ports are applied in port order within a
  cycle; there is no other ordering between ports (as between two HP ports: a master that needs
  its write seen by another port waits for the B response).
* **Shared budget.** A token bucket of the shared ``bytes_per_cycle`` (capacity
  ``max(bytes_per_cycle, bus bytes)``, full at the start) pays for every *DRAM transfer*: an R beat
  when it is first offered on its port (the controller moved it into the port's one-beat read
  buffer), a W beat when it is accepted. An R beat held because the master's RREADY is low costs
  nothing more: a stalled master does not hold the DRAM. So in any window of cycles ``[a, b]`` the
  bytes transferred are at most ``capacity + bytes_per_cycle * (b - a)``; R beats *accepted* in a
  window can exceed that by at most one held beat per port.
* **Round-robin grant.** Each cycle the ports' new candidates (a port's next R beat once its own
  rules allow it: latency elapsed, port bucket; a W beat while the port expects one) are granted in
  port order starting at the round-robin pointer, each one while the shared bucket still holds a
  beat's bytes; the pointer then moves one past the last granted port. A port's R beat offered and
  not yet accepted stays offered (AXI: VALID is not withdrawn), before any new grant. A granted W
  ready the master does not use costs nothing but took its turn that cycle. With every port busy,
  each gets a grant within ``N`` grants: none is starved.
* **One port** (or ``bytes_per_cycle=None``: no shared limit): exactly ``AXI4Memory``'s behaviour
  whenever the shared bucket cannot bind -- unlimited, or at least the port's rate with reads only,
  or at least two beats per cycle with reads and writes.
* ``log``: each port's ``AXI4Memory.log`` (``ports[i].log``); ``bytes_read[i]`` /
  ``bytes_written[i]``: bytes of R beats accepted / W beats accepted on port ``i``.

What it does not model: DRAM banks, pages and bank conflicts, refresh, read/write bus
turnaround, the controller's own queue depths and QoS priorities, and reordering between ports
(grants are round robin, transfers cost only their bytes). It is a test and benchmark model of
*how much* the ports share, not a DDR4 timing model.
"""
from typing import Sequence

from .axi4_memory import AXI4Memory, check_port_width, drive_port, parse_samples, port_samples

__all__ = ["SharedAXI4Memory"]

_PORT_KEYS = ("latency", "bytes_per_cycle", "max_outstanding", "ready_seed")


class SharedAXI4Memory:
    """``ports``: a number of ports with ``AXI4Memory``'s defaults, or one dict per port with any of
    ``latency``, ``bytes_per_cycle`` (the port's own rate), ``max_outstanding``, ``ready_seed``.
    ``bytes_per_cycle``: the controller's shared budget (``None``: no shared limit).
    ``size``, ``data_width``, ``base``, ``error_ranges``: as ``AXI4Memory``, for every port."""

    def __init__(self, size: int, *, ports: int | Sequence[dict], data_width: int = 128, base: int = 0,
                 bytes_per_cycle: int | None = None, error_ranges=()):
        if isinstance(ports, int):
            if ports < 1:
                raise ValueError(f"ports must be >= 1, got {ports}")
            ports = [{}] * ports
        ports = list(ports)
        if not ports:
            raise ValueError("ports must name at least one port")
        for i, kw in enumerate(ports):
            bad = sorted(set(kw) - set(_PORT_KEYS))
            if bad:
                raise ValueError(f"ports[{i}]: unknown parameter(s) {bad}, expected some of {list(_PORT_KEYS)}")
        if bytes_per_cycle is not None and bytes_per_cycle < 1:
            raise ValueError(f"bytes_per_cycle (shared) must be >= 1 or None, got {bytes_per_cycle}")
        self.ports = [AXI4Memory(size, data_width=data_width, base=base, error_ranges=error_ranges, **kw)
                      for kw in ports]
        self.mem = self.ports[0].mem
        for p in self.ports[1:]:
            p.mem = self.mem
        self.size, self.base, self.data_width = size, base, data_width
        self.bytes_per_beat = data_width // 8
        self.bytes_per_cycle = bytes_per_cycle
        self.reset()

    # ---------------------------------------------------------------- memory access
    def load(self, addr: int, data: bytes):
        self.ports[0].load(addr, data)

    def dump(self, addr: int, n: int) -> bytes:
        return self.ports[0].dump(addr, n)

    @property
    def capacity(self) -> int | None:
        """The shared bucket's capacity in bytes (None: unlimited)."""
        if self.bytes_per_cycle is None:
            return None
        return max(self.bytes_per_cycle, self.bytes_per_beat)

    # ---------------------------------------------------------------- model core
    def reset(self):
        """Back to the start state (every port's too); the image is kept."""
        for p in self.ports:
            p._reset_state()
            p.log.clear()
        n = len(self.ports)
        self.cycle = 0
        self._tokens = self.capacity
        self._rr = 0
        self._held = [False] * n
        self.bytes_read = [0] * n
        self.bytes_written = [0] * n

    def outputs(self):
        """This cycle's slave outputs: a list with one ``AXI4Memory.outputs`` tuple per port (after
        the grant), plus the grant itself; pass the whole value back to :meth:`edge`."""
        outs = [p.outputs() for p in self.ports]
        n, B = len(outs), self.bytes_per_beat
        if self._tokens is None:
            return {"ports": outs, "new_r": [o[3] is not None and not h for o, h in zip(outs, self._held)],
                    "rr": self._rr}
        avail = self._tokens
        new_r, grant_w = [False] * n, [False] * n
        last = None
        for k in range(n):
            i = (self._rr + k) % n
            _, _, w_ready, r, _ = outs[i]
            if r is not None and not self._held[i] and avail >= B:
                new_r[i], avail, last = True, avail - B, i
            if w_ready and avail >= B:
                grant_w[i], avail, last = True, avail - B, i
        masked = []
        for i, (ar_ready, aw_ready, w_ready, r, b) in enumerate(outs):
            if self._held[i] and r is None:        # the port rules keep an offered beat offered
                raise RuntimeError(f"SharedAXI4Memory port {i}: an offered R beat was withdrawn")
            r_ok = r is not None and (self._held[i] or new_r[i])
            masked.append((ar_ready, aw_ready, w_ready and grant_w[i], r if r_ok else None, b))
        rr = self._rr if last is None else (last + 1) % n
        return {"ports": masked, "new_r": new_r, "rr": rr}

    def edge(self, out, inputs):
        """Advance one clock edge. ``out``: what :meth:`outputs` returned this cycle; ``inputs``:
        per port the ``ar, aw, w, r_ready, b_ready`` arguments of ``AXI4Memory.edge``."""
        if len(inputs) != len(self.ports):
            raise ValueError(f"edge: {len(inputs)} port inputs for {len(self.ports)} ports")
        B = self.bytes_per_beat
        spent = 0
        for i, (p, o, (ar, aw, w, r_ready, b_ready)) in enumerate(zip(self.ports, out["ports"], inputs)):
            _, _, w_ready, r, _ = o
            if out["new_r"][i]:
                spent += B
            if w is not None and w_ready:
                spent += B
                self.bytes_written[i] += B
            if r is not None and r_ready:
                self.bytes_read[i] += B
            self._held[i] = r is not None and not r_ready
            p.edge(o, ar, aw, w, r_ready, b_ready)
        if self._tokens is not None:
            self._tokens = min(self.capacity, self._tokens - spent + self.bytes_per_cycle)
        self._rr = out["rr"]
        self.cycle += 1

    # ---------------------------------------------------------------- Amaranth testbench
    def testbench(self, *axi_ports):
        """One process serving every port: ``axi_ports[i]`` is the DUT's AXI4 master on port ``i``
        (``hdl.bus.AXI4Signature``), or ``None`` for a port nobody uses. Pass it to
        ``run_simulation(..., background=[mem.testbench(a, b)])``."""
        if len(axi_ports) != len(self.ports):
            raise ValueError(f"testbench: {len(axi_ports)} AXI ports for a memory of {len(self.ports)} ports")

        async def serve(ctx):
            used = [(i, a) for i, a in enumerate(axi_ports) if a is not None]
            for _, a in used:
                check_port_width(a, self.data_width, "SharedAXI4Memory")
            self.reset()
            sampled = [s for _, a in used for s in port_samples(a)]
            idle = (None, None, None, False, False)
            while True:
                out = self.outputs()
                for i, a in used:
                    drive_port(ctx, a, out["ports"][i])
                _, _, *v = await ctx.tick().sample(*sampled)
                inputs = [idle] * len(self.ports)
                for k, (i, _) in enumerate(used):
                    inputs[i] = parse_samples(v[17 * k:17 * (k + 1)])
                self.edge(out, inputs)
        return serve
