"""Minimal AXI4-Lite master and stream helpers for the memory-system tests."""


async def axil_read(ctx, bus, addr):
    """Read one 32-bit register through an AXI4-Lite slave port; returns (data, resp)."""
    ctx.set(bus.ar.payload.addr, addr)
    ctx.set(bus.ar.valid, 1)
    await ctx.tick().until(bus.ar.ready)
    ctx.set(bus.ar.valid, 0)
    ctx.set(bus.r.ready, 1)
    data, resp = await ctx.tick().sample(bus.r.payload.data, bus.r.payload.resp).until(bus.r.valid)
    ctx.set(bus.r.ready, 0)
    return data, resp


async def axil_write(ctx, bus, addr, value):
    """Write one 32-bit register; returns the B response."""
    ctx.set(bus.aw.payload.addr, addr)
    ctx.set(bus.w.payload.data, value)
    ctx.set(bus.w.payload.strb, 0xF)
    ctx.set(bus.aw.valid, 1)
    ctx.set(bus.w.valid, 1)
    await ctx.tick().until(bus.aw.ready)
    ctx.set(bus.aw.valid, 0)
    ctx.set(bus.w.valid, 0)
    ctx.set(bus.b.ready, 1)
    resp, = await ctx.tick().sample(bus.b.payload.resp).until(bus.b.valid)
    ctx.set(bus.b.ready, 0)
    return resp
