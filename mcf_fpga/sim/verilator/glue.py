"""Generates the per-design C++ glue between a Verilated top and the models in mcf_harness.h.

The design's AMBA buses come from ``hdl.verilog.amba_ports``: one AXI4-Lite slave
(``s_axi``) gets an ``AxilMaster``, every AXI4 master (``m_axi*``) a ``Mem``, every AXI-Stream
sink port (``s_axis*``) an ``AxisSource`` and every source port (``m_axis*``) an ``AxisSink``.
Plain signals up to 64 bits can be peeked/poked. Anything else raises ValueError naming it.
"""
from dataclasses import dataclass, field

__all__ = ["Layout", "plan", "generate_cpp"]


@dataclass
class Layout:
    """What the C ABI exposes, by index: ``mems``, ``sources``, ``sinks`` (AmbaPort lists),
    ``axil`` (AmbaPort or None), ``signals`` ([(name, width, is_input)])."""
    mems: list = field(default_factory=list)
    sources: list = field(default_factory=list)
    sinks: list = field(default_factory=list)
    axil: object = None
    signals: list = field(default_factory=list)


def plan(ports) -> Layout:
    lay = Layout()
    for p in ports:
        if p.kind == "axil" and p.is_input:
            if lay.axil is not None:
                raise ValueError(f"member {p.member!r}: the Verilator backend drives one AXI4-Lite "
                                 f"slave port; {lay.axil.member!r} is already one")
            lay.axil = p
        elif p.kind == "axi4" and not p.is_input:
            lay.mems.append(p)
        elif p.kind == "axis":
            for need in ("data", "valid", "ready"):
                if ("", need) not in p.fields:
                    raise ValueError(f"member {p.member!r}: stream has no {need!r}")
            if p.width("", "data") % 8:
                raise ValueError(f"member {p.member!r}: tdata width {p.width('', 'data')} is not "
                                 f"a multiple of 8 (the backend moves byte frames)")
            if ("", "user") in p.fields and p.width("", "user") > 64:
                raise ValueError(f"member {p.member!r}: tuser wider than 64 bits")
            (lay.sources if p.is_input else lay.sinks).append(p)
        elif p.kind == "signal":
            (vname, _, d, w), = p.ports
            lay.signals.append((vname, w, d == "i"))
        else:
            role = "slave" if p.is_input else "master"
            raise ValueError(f"member {p.member!r}: an {p.kind} {role} port is not supported by "
                             f"the Verilator backend (it drives AXI4-Lite slaves, AXI4 masters and "
                             f"AXI-Stream ports)")
    return lay


def _mask(width):
    return (1 << width) - 1


def _set(dst, width, buf):
    if width <= 32:
        return f"{dst} = {buf}[0] & {_mask(width):#x}u;"
    if width <= 64:
        return f"{dst} = ((QData){buf}[0] | ((QData){buf}[1] << 32)) & {_mask(width):#x}ULL;"
    n = (width + 31) // 32
    top = _mask(width - 32 * (n - 1))
    return " ".join(f"{dst}[{i}] = {buf}[{i}]" + (f" & {top:#x}u;" if i == n - 1 else ";")
                    for i in range(n))


def _get(src, width, buf):
    if width <= 32:
        return f"{buf}[0] = {src};"
    if width <= 64:
        return f"{buf}[0] = (uint32_t){src}; {buf}[1] = (uint32_t)((QData){src} >> 32);"
    return " ".join(f"{buf}[{i}] = {src}[{i}];" for i in range((width + 31) // 32))


def _scalar_set(dst, width, expr):
    return f"{dst} = ({expr}) & {_mask(width):#x}ULL;"


def generate_cpp(lay: Layout, top: str = "top", trace: bool = False) -> str:
    """The C++ harness of a design with ports ``lay``. ``trace``: the build has ``--trace-fst``
    and the harness can write an FST of a window of cycles (``mcf_trace_open``): cycle ``c`` is
    dumped at time ``2c`` (after the falling edge's evaluation, inputs driven) and ``2c + 1``
    (after the rising edge), in nanoseconds, so one clock period is 2 ns on the waveform."""
    V = f"V{top}"
    L = []
    a = L.append
    a(f'#include "{V}.h"')
    a('#include "verilated.h"')
    if trace:
        a('#include "verilated_fst_c.h"')
    a('#include "mcf_harness.h"')
    a("using namespace mcf;")
    a("// Verilator links a main-less shared library; it still wants this symbol.")
    a("double sc_time_stamp() { return 0; }")
    a("struct Sim {")
    a("  VerilatedContext* ctx; " + V + "* top; uint64_t cycle = 0;")
    a(f"  Mem mem[{max(1, len(lay.mems))}]; AxisSource src[{max(1, len(lay.sources))}]; "
      f"AxisSink snk[{max(1, len(lay.sinks))}]; AxilMaster axil;")
    a("  bool src_v[%d];" % max(1, len(lay.sources)))
    L.extend(_TRACE_MEMBERS if trace else ["  inline void dump(uint64_t) {}"])
    a("  Sim() {")
    a("    ctx = new VerilatedContext; ctx->randReset(0);")
    if trace:
        a("    ctx->traceEverOn(true);")
    a(f"    top = new {V}{{ctx}};")
    for i, p in enumerate(lay.mems):
        a(f"    mem[{i}].init({p.width('r', 'data')});")
    for i, p in enumerate(lay.sources):
        a(f"    src[{i}].init({p.width('', 'data')});")
    for i, p in enumerate(lay.sinks):
        a(f"    snk[{i}].init({p.width('', 'data')});")
    a("    top->clk = 0; top->rst = 0; top->eval();")
    a("  }")
    a("  ~Sim() { " + ("trace_close(); " if trace else "") + "top->final(); delete top; delete ctx; }")

    # ---- drive: set all model outputs as DUT inputs
    a("  inline void drive() {")
    for i, p in enumerate(lay.mems):
        f = lambda ch, fl: "top->" + p.fields[(ch, fl)][0]
        a(f"    {{ Mem& m = mem[{i}]; m.outputs(); MemOut& o = m.out;")
        a(f"      {f('ar','ready')} = o.arready; {f('aw','ready')} = o.awready; {f('w','ready')} = o.wready;")
        a(f"      {f('r','valid')} = o.rvalid; {_scalar_set(f('r','id'), p.width('r','id'), 'o.rid')}")
        a(f"      {_set(f('r','data'), p.width('r','data'), 'o.rdata')}")
        a(f"      {f('r','resp')} = o.rresp; {f('r','last')} = o.rlast;")
        a(f"      {f('b','valid')} = o.bvalid; {_scalar_set(f('b','id'), p.width('b','id'), 'o.bid')} "
          f"{f('b','resp')} = o.bresp; }}")
    for i, p in enumerate(lay.sources):
        f = lambda fl: "top->" + p.fields[("", fl)][0]
        a(f"    {{ AxisSource& s = src[{i}]; src_v[{i}] = s.valid(); {f('valid')} = src_v[{i}];")
        a(f"      if (src_v[{i}]) {{ s.prepare(); {_set(f('data'), p.width('', 'data'), 's.data')}")
        if ("", "keep") in p.fields:
            a(f"        {_set(f('keep'), p.width('', 'keep'), 's.keep')}")
        if ("", "last") in p.fields:
            a(f"        {f('last')} = s.last;")
        if ("", "user") in p.fields:
            a(f"        {_scalar_set(f('user'), p.width('', 'user'), 's.user')}")
        a("      } }")
    for i, p in enumerate(lay.sinks):
        a(f"    top->{p.fields[('', 'ready')][0]} = snk[{i}].ready;")
    if lay.axil is not None:
        p = lay.axil
        f = lambda ch, fl: "top->" + p.fields[(ch, fl)][0]
        a(f"    {f('aw','valid')} = axil.awvalid(); {f('w','valid')} = axil.wvalid(); "
          f"{f('b','ready')} = axil.bready();")
        a(f"    {f('ar','valid')} = axil.arvalid(); {f('r','ready')} = axil.rready();")
        a(f"    {_scalar_set(f('aw','addr'), p.width('aw','addr'), 'axil.addr')} "
          f"{_scalar_set(f('ar','addr'), p.width('ar','addr'), 'axil.addr')}")
        a(f"    {_scalar_set(f('w','data'), p.width('w','data'), 'axil.wdata')} "
          f"{_scalar_set(f('w','strb'), p.width('w','strb'), 'axil.wstrb')}")
    a("  }")

    # ---- sample + edge
    a("  inline void sample_and_edge() {")
    for i, p in enumerate(lay.mems):
        f = lambda ch, fl: "top->" + p.fields[(ch, fl)][0]
        a(f"    {{ MemIn& n = mem[{i}].in;")
        for ch in ("ar", "aw"):
            a(f"      n.{ch}valid = {f(ch,'valid')}; n.{ch}id = {f(ch,'id')}; n.{ch}addr = {f(ch,'addr')}; "
              f"n.{ch}len = {f(ch,'len')}; n.{ch}size = {f(ch,'size')}; n.{ch}burst = {f(ch,'burst')};")
        a(f"      n.wvalid = {f('w','valid')}; {_get(f('w','data'), p.width('w','data'), 'n.wdata')}")
        a(f"      {_get(f('w','strb'), p.width('w','strb'), 'n.wstrb')}")
        a(f"      n.rready = {f('r','ready')}; n.bready = {f('b','ready')}; }}")
    for i, p in enumerate(lay.sinks):
        f = lambda fl: "top->" + p.fields[("", fl)][0]
        last = f("last") if ("", "last") in p.fields else "true"
        user = f("user") if ("", "user") in p.fields else "0"
        keep = ("", "keep") in p.fields
        a(f"    bool snk_x{i} = {f('valid')} && snk[{i}].ready;")
        a(f"    if (snk_x{i}) {{ AxisSink& k = snk[{i}]; {_get(f('data'), p.width('', 'data'), 'k.data')}")
        if keep:
            a(f"      {_get(f('keep'), p.width('', 'keep'), 'k.keep')}")
        a(f"      k.accept({last}, {user}, {'true' if keep else 'false'}); }}")
    for i, p in enumerate(lay.sources):
        a(f"    bool src_x{i} = src_v[{i}] && top->{p.fields[('', 'ready')][0]};")
    if lay.axil is not None:
        p = lay.axil
        f = lambda ch, fl: "top->" + p.fields[(ch, fl)][0]
        a(f"    bool ax_aw = {f('aw','ready')}, ax_w = {f('w','ready')}, ax_b = {f('b','valid')}, "
          f"ax_ar = {f('ar','ready')}, ax_r = {f('r','valid')};")
        a(f"    uint64_t ax_bresp = {f('b','resp')}, ax_rdata = {f('r','data')}, ax_rresp = {f('r','resp')};")
    a("    top->clk = 1; top->eval(); dump(2 * cycle + 1);")
    for i, _ in enumerate(lay.mems):
        a(f"    mem[{i}].edge();")
    for i, _ in enumerate(lay.sources):
        a(f"    if (src_x{i}) src[{i}].advance();")
    for i, _ in enumerate(lay.sinks):
        a(f"    snk[{i}].draw();")
    if lay.axil is not None:
        a("    axil.edge(ax_aw, ax_w, ax_b, ax_bresp, ax_ar, ax_r, ax_rdata, ax_rresp);")
    a("    cycle++;")
    a("  }")
    # Every entry point that evaluates the model first names its context as the calling thread's
    # (Verilator's rule for models stepped from threads the wrapper creates: sim.verilator.Cluster
    # steps nodes from a pool), so any runtime message or fatal error lands in this model's context.
    a("  void step(uint64_t n) {")
    a("    Verilated::threadContextp(ctx);")
    a("    for (uint64_t i = 0; i < n; i++) { drive(); top->clk = 0; top->eval(); dump(2 * cycle); "
      "sample_and_edge(); }")
    a("  }")
    a("  void reset(uint64_t n) {")
    a("    Verilated::threadContextp(ctx);")
    a("    top->rst = 1;")
    a("    for (uint64_t i = 0; i < n; i++) { top->clk = 0; top->eval(); top->clk = 1; top->eval(); }")
    a("    top->rst = 0; top->clk = 0; top->eval();")
    for i, _ in enumerate(lay.mems):
        a(f"    mem[{i}].reset_state();")
    a("    axil.st = AxilMaster::IDLE; cycle = 0;")
    a("  }")
    # peek/poke
    a("  uint64_t peek(int i) {")
    a("    switch (i) {")
    for i, (n, w, _) in enumerate(lay.signals):
        if w <= 64:
            a(f"    case {i}: return (uint64_t)top->{n};")
    a("    default: return 0; } }")
    a("  int poke(int i, uint64_t v) {")
    a("    Verilated::threadContextp(ctx);")
    a("    switch (i) {")
    for i, (n, w, is_in) in enumerate(lay.signals):
        if w <= 64 and is_in:
            a(f"    case {i}: {_scalar_set('top->' + n, w, 'v')} top->eval(); return 0;")
    a("    default: return -1; } }")
    a("};")
    a(_ABI)
    if trace:
        a(_ABI_TRACE)
    return "\n".join(L) + "\n"


_ABI = r"""
#define SIM(h) (static_cast<Sim*>(h))
extern "C" {
void* mcf_new() { return new Sim(); }
void mcf_free(void* h) { delete SIM(h); }
void mcf_reset(void* h, uint64_t n) { SIM(h)->reset(n); }
void mcf_step(void* h, uint64_t n) { SIM(h)->step(n); }
uint64_t mcf_cycle(void* h) { return SIM(h)->cycle; }
uint64_t mcf_peek(void* h, int i) { return SIM(h)->peek(i); }
int mcf_poke(void* h, int i, uint64_t v) { return SIM(h)->poke(i, v); }

// AXI4-Lite: returns the response (0..3), or -1 if it did not finish within `timeout` cycles.
int mcf_axil_write(void* h, uint64_t addr, uint64_t data, uint64_t strb, uint64_t timeout) {
    Sim* s = SIM(h);
    s->axil.start_write(addr, data, strb);
    for (uint64_t i = 0; i < timeout && s->axil.st != AxilMaster::DONE; i++) s->step(1);
    bool ok = s->axil.st == AxilMaster::DONE;
    s->axil.st = AxilMaster::IDLE;
    return ok ? (int)s->axil.resp : -1;
}
int mcf_axil_read(void* h, uint64_t addr, uint64_t* data, uint64_t timeout) {
    Sim* s = SIM(h);
    s->axil.start_read(addr);
    for (uint64_t i = 0; i < timeout && s->axil.st != AxilMaster::DONE; i++) s->step(1);
    bool ok = s->axil.st == AxilMaster::DONE;
    s->axil.st = AxilMaster::IDLE;
    *data = s->axil.rdata;
    return ok ? (int)s->axil.resp : -1;
}

void mcf_mem_config(void* h, int k, uint64_t size, uint64_t base, uint64_t latency, uint64_t bpc,
                    uint64_t max_out, int has_seed, uint64_t seed) {
    SIM(h)->mem[k].configure(size, base, latency, bpc, max_out, has_seed != 0, seed);
}
void mcf_mem_add_error(void* h, int k, uint64_t start, uint64_t end, uint64_t resp) {
    SIM(h)->mem[k].errors.emplace_back(start, end, resp);
}
void mcf_mem_share(void* h, int k, int j) { SIM(h)->mem[k].share(SIM(h)->mem[j]); }
void mcf_mem_load(void* h, int k, uint64_t off, const uint8_t* p, uint64_t n) {
    std::memcpy(SIM(h)->mem[k].bytes(off), p, n);
}
void mcf_mem_dump(void* h, int k, uint64_t off, uint8_t* p, uint64_t n) {
    std::memcpy(p, SIM(h)->mem[k].bytes(off), n);
}
uint64_t mcf_mem_log_count(void* h, int k) { return SIM(h)->mem[k].log.size(); }
void mcf_mem_log_get(void* h, int k, uint64_t i, uint64_t* out) {
    const LogEntry& e = SIM(h)->mem[k].log[i];
    out[0] = e.cycle; out[1] = e.kind; out[2] = e.addr; out[3] = e.len; out[4] = e.resp;
}
void mcf_mem_log_clear(void* h, int k) { SIM(h)->mem[k].log.clear(); }

void mcf_axis_push(void* h, int k, const uint8_t* p, uint64_t n, uint64_t user) {
    Frame f; f.data.assign(p, p + n); f.user = user;
    SIM(h)->src[k].q.push_back(std::move(f));
}
uint64_t mcf_axis_source_pending(void* h, int k) { return SIM(h)->src[k].pending_bytes(); }
void mcf_axis_sink_seed(void* h, int k, int has_seed, uint64_t seed) {
    AxisSink& s = SIM(h)->snk[k]; s.has_seed = has_seed != 0; s.rng.state = seed; s.draw();
}
uint64_t mcf_axis_frames(void* h, int k) { return SIM(h)->snk[k].frames.size(); }
// Length of the oldest received frame, or -1 if none.
int64_t mcf_axis_peek_len(void* h, int k) {
    AxisSink& s = SIM(h)->snk[k];
    return s.frames.empty() ? -1 : (int64_t)s.frames.front().data.size();
}
// Copies the oldest frame into p (capacity >= mcf_axis_peek_len) and drops it; returns its user.
uint64_t mcf_axis_pop(void* h, int k, uint8_t* p) {
    AxisSink& s = SIM(h)->snk[k];
    Frame& f = s.frames.front();
    std::memcpy(p, f.data.data(), f.data.size());
    uint64_t u = f.user;
    s.frames.pop_front();
    return u;
}
}
"""


#: the Sim members of a tracing build: the FST writer, the window, dump()
_TRACE_MEMBERS = [
    "  VerilatedFstC* tfp = nullptr; uint64_t t_from = 0, t_to = 0;",
    "  inline void dump(uint64_t t) { if (tfp && cycle >= t_from && cycle < t_to) tfp->dump(t); }",
    "  int trace_open(const char* path, uint64_t from, uint64_t to) {",
    "    Verilated::threadContextp(ctx); trace_close();",
    '    tfp = new VerilatedFstC; top->trace(tfp, 99); tfp->set_time_unit("1ns");',
    '    tfp->set_time_resolution("1ns"); tfp->open(path);',
    "    if (!tfp->isOpen()) { delete tfp; tfp = nullptr; return -1; }",
    "    t_from = from; t_to = to; return 0;",
    "  }",
    "  void trace_close() { if (tfp) { tfp->close(); delete tfp; tfp = nullptr; } }",
]

_ABI_TRACE = r"""
extern "C" {
// Write an FST of cycles [from, to) to `path` (closes an open one first); -1 if it cannot open.
int mcf_trace_open(void* h, const char* path, uint64_t from, uint64_t to) {
    return SIM(h)->trace_open(path, from, to);
}
void mcf_trace_close(void* h) { SIM(h)->trace_close(); }
}
"""
