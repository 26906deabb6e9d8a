// MCF Verilator harness: models that sit around a Verilated top (see docs/harness.md).
//
// Mem         -- AXI4 slave memory; the same cycle behaviour as mcf_fpga/hdl/sim/axi4_memory.py
//                (read that file's docstring: this is a line-by-line port of outputs()/edge()).
//                share() makes a port read and write another port's image (one DDR, two masters).
// AxisSource  -- drives a DUT s_axis port from a queue of byte frames.
// AxisSink    -- collects byte frames from a DUT m_axis port.
// AxilMaster  -- one AXI4-Lite read or write at a time on the DUT's s_axi port.
//
// Wide values travel as little-endian arrays of 32-bit words (Verilator's VlWide layout).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <tuple>
#include <vector>

namespace mcf {

enum { OKAY = 0, EXOKAY = 1, SLVERR = 2, DECERR = 3 };
enum { FIXED = 0, INCR = 1, WRAP = 2 };

struct SplitMix64 {
    uint64_t state = 0;
    uint64_t next() {
        state += 0x9E3779B97F4A7C15ULL;
        uint64_t z = state;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        return z ^ (z >> 31);
    }
};

static inline int words_for(int bits) { return std::max(2, (bits + 31) / 32); }

struct LogEntry { uint64_t cycle, kind, addr, len, resp; };  // kind 0 = R, 1 = W

struct MemIn {
    bool arvalid = false, awvalid = false, wvalid = false, rready = false, bready = false;
    uint64_t arid = 0, araddr = 0, arlen = 0, arsize = 0, arburst = 0;
    uint64_t awid = 0, awaddr = 0, awlen = 0, awsize = 0, awburst = 0;
    std::vector<uint32_t> wdata, wstrb;
};

struct MemOut {
    bool arready = false, awready = false, wready = false, rvalid = false, rlast = false, bvalid = false;
    uint64_t rid = 0, rresp = 0, bid = 0, bresp = 0;
    std::vector<uint32_t> rdata;
};

class Mem {
  public:
    // parameters
    int data_width = 128, bpb = 16;
    uint64_t size = 0, base = 0, latency = 20, bpc = 16, max_out = 8;
    bool has_seed = false;
    uint64_t seed = 0;
    std::vector<std::tuple<uint64_t, uint64_t, uint64_t>> errors;
    std::vector<uint8_t> own;             // this port's image (empty while it shares another's)
    std::vector<uint8_t>* img = &own;     // the bytes this port reads and writes
    std::vector<LogEntry> log;
    MemIn in;
    MemOut out;

    void init(int dw) {
        data_width = dw;
        bpb = dw / 8;
        in.wdata.assign(words_for(dw), 0);
        in.wstrb.assign(words_for(bpb), 0);
        out.rdata.assign(words_for(dw), 0);
    }
    void configure(uint64_t size_, uint64_t base_, uint64_t latency_, uint64_t bpc_, uint64_t max_out_,
                   bool has_seed_, uint64_t seed_) {
        size = size_; base = base_; latency = latency_; bpc = bpc_; max_out = max_out_;
        has_seed = has_seed_; seed = seed_;
        own.assign(size, 0);
        img = &own;
        errors.clear();
        log.clear();
        reset_state();
    }
    // Read and write the image of `other` (same base and size) instead of an own one; this port
    // keeps its own latency, stalls, outstanding limit, error ranges and log.
    void share(Mem& other) {
        img = other.img; size = other.size; base = other.base;
        std::vector<uint8_t>().swap(own);
    }
    uint8_t* bytes(uint64_t off) { return img->data() + off; }
    void reset_state() {
        cycle = 0;
        reads.clear(); writes.clear(); bq.clear();
        n_writes = 0;
        cap = tokens = std::max<uint64_t>(bpc, (uint64_t)bpb);
        rng.state = seed;
        draw();
    }

    void outputs() {
        out.arready = reads.size() < max_out && ok_ar;
        out.awready = n_writes < max_out && ok_aw;
        out.wready = !writes.empty() && ok_w;
        out.rvalid = false;
        if (!reads.empty()) {
            const Rd& t = reads.front();
            if (cycle >= t.accepted + latency && tokens >= (uint64_t)bpb) {
                uint64_t a = beat_addr(t.addr, t.size, t.beat);
                uint64_t resp = beat_resp(a, t.size, t.burst);
                std::fill(out.rdata.begin(), out.rdata.end(), 0);
                if (resp == OKAY) {
                    uint64_t off = (a & ~(uint64_t)(bpb - 1)) - base;
                    std::memcpy(out.rdata.data(), bytes(off), bpb);  // little-endian host
                }
                out.rvalid = true;
                out.rid = t.id;
                out.rresp = resp;
                out.rlast = t.beat == t.len;
            }
        }
        out.bvalid = !bq.empty();
        if (out.bvalid) { out.bid = bq.front().first; out.bresp = bq.front().second; }
    }

    void edge() {
        if (out.rvalid && in.rready) {
            Rd& t = reads.front();
            t.beat++;
            tokens -= bpb;
            if (t.beat > t.len) reads.pop_front();
        }
        if (out.bvalid && in.bready) {
            bq.pop_front();
            n_writes--;
        }
        if (in.wvalid && out.wready) {
            Wr& t = writes.front();
            const size_t wd = in.wdata.size(), ws = in.wstrb.size();
            t.data.insert(t.data.end(), in.wdata.begin(), in.wdata.end());
            t.strb.insert(t.strb.end(), in.wstrb.begin(), in.wstrb.end());
            t.beats++;
            if (t.beats > t.len) {
                if (t.resp == OKAY) {
                    for (uint64_t i = 0; i < t.beats; i++) {
                        uint64_t a = beat_addr(t.addr, t.size, i);
                        uint64_t off = (a & ~(uint64_t)(bpb - 1)) - base;
                        const uint8_t* d = reinterpret_cast<const uint8_t*>(&t.data[i * wd]);
                        const uint32_t* st = &t.strb[i * ws];
                        for (int j = 0; j < bpb; j++)
                            if ((st[j / 32] >> (j % 32)) & 1) (*img)[off + j] = d[j];
                    }
                }
                bq.emplace_back(t.id, t.resp);
                writes.pop_front();
            }
        }
        if (in.arvalid && out.arready) {
            reads.push_back(Rd{in.arid, in.araddr, in.arlen, in.arsize, in.arburst, cycle, 0});
            log.push_back(LogEntry{cycle, 0, in.araddr, in.arlen,
                                   burst_resp(in.araddr, in.arlen, in.arsize, in.arburst)});
        }
        if (in.awvalid && out.awready) {
            uint64_t resp = burst_resp(in.awaddr, in.awlen, in.awsize, in.awburst);
            Wr w;
            w.id = in.awid; w.addr = in.awaddr; w.len = in.awlen; w.size = in.awsize;
            w.burst = in.awburst; w.resp = resp;
            writes.push_back(std::move(w));
            n_writes++;
            log.push_back(LogEntry{cycle, 1, in.awaddr, in.awlen, resp});
        }
        tokens = std::min(cap, tokens + bpc);
        cycle++;
        draw();
    }

  private:
    struct Rd { uint64_t id, addr, len, size, burst, accepted, beat; };
    struct Wr {
        uint64_t id, addr, len, size, burst, resp, beats = 0;
        std::vector<uint32_t> data, strb;  // beats * words, flat
    };
    std::deque<Rd> reads;
    std::deque<Wr> writes;
    std::deque<std::pair<uint64_t, uint64_t>> bq;
    uint64_t n_writes = 0, tokens = 0, cap = 0, cycle = 0;
    SplitMix64 rng;
    bool ok_ar = true, ok_aw = true, ok_w = true;

    void draw() {
        if (!has_seed) { ok_ar = ok_aw = ok_w = true; return; }
        uint64_t r = rng.next();
        ok_ar = (r & 3) != 0; ok_aw = ((r >> 2) & 3) != 0; ok_w = ((r >> 4) & 3) != 0;
    }
    static uint64_t beat_addr(uint64_t addr, uint64_t sz, uint64_t i) {
        uint64_t n = 1ULL << sz;
        return i == 0 ? addr : (addr & ~(n - 1)) + i * n;
    }
    uint64_t beat_resp(uint64_t addr, uint64_t sz, uint64_t burst) const {
        if (burst != INCR || (1ULL << sz) > (uint64_t)bpb) return SLVERR;
        uint64_t lo = addr, hi = (addr & ~((1ULL << sz) - 1)) + (1ULL << sz);
        if (lo < base || hi > base + size) return DECERR;
        for (auto& e : errors)
            if (lo < std::get<1>(e) && std::get<0>(e) < hi) return std::get<2>(e);
        return OKAY;
    }
    uint64_t burst_resp(uint64_t addr, uint64_t len, uint64_t sz, uint64_t burst) const {
        uint64_t r = OKAY;
        for (uint64_t i = 0; i <= len; i++) r = std::max(r, beat_resp(beat_addr(addr, sz, i), sz, burst));
        return r;
    }
};

struct Frame { std::vector<uint8_t> data; uint64_t user = 0; };

class AxisSource {
  public:
    int nb = 8;
    std::deque<Frame> q;
    size_t off = 0;
    std::vector<uint32_t> data, keep;
    bool last = false;
    uint64_t user = 0;
    void init(int data_width) {
        nb = data_width / 8;
        data.assign(words_for(data_width), 0);
        keep.assign(words_for(nb), 0);
    }
    bool valid() const { return !q.empty(); }
    void prepare() {  // fill data/keep/last/user for the current beat (call when valid())
        const Frame& f = q.front();
        size_t n = std::min((size_t)nb, f.data.size() - off);
        std::fill(data.begin(), data.end(), 0);
        std::memcpy(data.data(), f.data.data() + off, n);
        std::fill(keep.begin(), keep.end(), 0);
        for (size_t j = 0; j < n; j++) keep[j / 32] |= 1u << (j % 32);
        last = off + n >= f.data.size();
        user = f.user;
    }
    void advance() {
        off += nb;
        if (off >= q.front().data.size()) { q.pop_front(); off = 0; }
    }
    uint64_t pending_bytes() const {
        uint64_t n = 0;
        for (auto& f : q) n += f.data.size();
        return n - off;
    }
};

class AxisSink {
  public:
    int nb = 8;
    bool has_seed = false;
    SplitMix64 rng;
    bool ready = true;
    std::vector<uint32_t> data, keep;
    std::deque<Frame> frames;
    Frame cur;
    bool in_frame = false;
    void init(int data_width) {
        nb = data_width / 8;
        data.assign(words_for(data_width), 0);
        keep.assign(words_for(nb), 0);
    }
    void draw() { ready = has_seed ? ((rng.next() & 3) != 0) : true; }
    void accept(bool last, uint64_t user, bool has_keep) {
        const uint8_t* d = reinterpret_cast<const uint8_t*>(data.data());
        if (!in_frame) { cur.user = user; in_frame = true; }
        for (int j = 0; j < nb; j++)
            if (!has_keep || ((keep[j / 32] >> (j % 32)) & 1)) cur.data.push_back(d[j]);
        if (last) { frames.push_back(std::move(cur)); cur = Frame(); in_frame = false; }
    }
};

class AxilMaster {
  public:
    enum State { IDLE, WADDR, WRESP, RADDR, RRESP, DONE };
    State st = IDLE;
    uint64_t addr = 0, wdata = 0, wstrb = 0, rdata = 0, resp = 0;
    bool aw_done = false, w_done = false;
    // drive values
    bool awvalid() const { return st == WADDR && !aw_done; }
    bool wvalid() const { return st == WADDR && !w_done; }
    bool bready() const { return st == WRESP; }
    bool arvalid() const { return st == RADDR; }
    bool rready() const { return st == RRESP; }
    void start_write(uint64_t a, uint64_t d, uint64_t s) { addr = a; wdata = d; wstrb = s; aw_done = w_done = false; st = WADDR; }
    void start_read(uint64_t a) { addr = a; st = RADDR; }
    // sampled handshakes at the edge
    void edge(bool awready, bool wready, bool bvalid, uint64_t bresp, bool arready, bool rvalid,
              uint64_t rdata_, uint64_t rresp) {
        switch (st) {
        case WADDR:
            if (awready) aw_done = true;
            if (wready) w_done = true;
            if (aw_done && w_done) st = WRESP;
            break;
        case WRESP:
            if (bvalid) { resp = bresp; st = DONE; }
            break;
        case RADDR:
            if (arready) st = RRESP;
            break;
        case RRESP:
            if (rvalid) { rdata = rdata_; resp = rresp; st = DONE; }
            break;
        default: break;
        }
    }
};

}  // namespace mcf
