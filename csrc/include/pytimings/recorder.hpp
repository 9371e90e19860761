// The native recorder: regions on per-thread stacks, records into per-thread buffers, GPU
// times from pooled CUDA events placed on the host clock through anchors. No Python here.
#pragma once
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pytimings/buffer.hpp"
#include "pytimings/clock.hpp"
#include "pytimings/cuda_runtime.hpp"

namespace pytimings {

// Process-wide interned strings (region names and kinds). NVTX registrations are process-wide
// too, so ids are shared by every Recorder.
uint32_t intern(const std::string& s, bool is_kind);
std::vector<std::string> interned_strings();

struct RegionSpec {
  uint32_t name = 0;
  uint32_t kind = 0;
  uint16_t flags = 0;  // kHasStream | kHasPayload
  uint32_t sample_every = 1;
  uint64_t stream = 0;
  int64_t nbytes = -1;
  int64_t payload = 0;
};

struct Frame {
  const void* owner;
  RegionSpec spec;
  uint16_t flags;
  int64_t start_ns;
  cuda::Event ev_start;
  int32_t device;
};

constexpr int kMaxDevices = 64;

struct ThreadState {
  uint32_t index;
  int64_t tid;
  std::string name;
  RecordBuffer buffer;
  std::vector<Frame> frames;             // open regions, innermost last
  std::vector<uint32_t> sample_counter;  // per name id, for sample_every
  std::vector<cuda::Event> pool[kMaxDevices];  // idle timing events, per device
  // events handed back by the drainer: it stores, the owner takes all with exchange
  std::atomic<std::vector<std::pair<int, cuda::Event>>*> returned{nullptr};
  uint64_t events_created = 0;  // by this thread, for its pools
  std::mutex drop_mu;  // taken only when a record is dropped (the cap is reached) or read
  std::unordered_map<uint32_t, uint64_t> drops;
};

struct Anchor {
  int device;
  cuda::Event event;
  int64_t host_ns;         // host time at which the GPU reached `event`
  int64_t uncertainty_ns;  // half-width of the polling bracket
  int64_t residual_ns;     // measured - predicted from the previous anchor (0 for the first)
  bool has_residual;
};

struct RecorderMeta {
  WallOffset wall;
  int64_t started_ns;
  int64_t max_records;  // -1: unlimited
  uint64_t capture_fallbacks;
  uint64_t gpu_pending;
  std::vector<Anchor> anchors;
};

class Recorder {
 public:
  // max_records < 0: unlimited. Anchors are retaken at flush at most every
  // reanchor_interval_ns.
  Recorder(int64_t max_records, int64_t reanchor_interval_ns);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // --- threads
  ThreadState* local() const noexcept {
    return tls_last_.serial == serial_ ? tls_last_.state : local_slow();
  }
  ThreadState* register_thread(const std::string& name);
  std::vector<std::pair<int64_t, std::string>> threads() const;

  // --- control
  void start();
  void stop() noexcept { started_.store(false, std::memory_order_relaxed); update(); }
  void set_enabled(bool on) noexcept { enabled_.store(on, std::memory_order_relaxed); update(); }
  bool enabled() const noexcept { return enabled_.load(std::memory_order_relaxed); }
  bool started() const noexcept { return started_.load(std::memory_order_relaxed); }
  bool active() const noexcept { return active_.load(std::memory_order_relaxed); }

  // --- hot path (owner: identity of the Python region object, for exit checks)
  uint16_t enter(ThreadState& ts, const RegionSpec& spec, const void* owner) noexcept;
  void abort_enter(ThreadState& ts) noexcept;  // undo the last enter (its notice failed)
  bool exit(ThreadState& ts, const void* owner, bool error) noexcept;  // false: not innermost
  void mark(ThreadState& ts, uint32_t name, uint32_t kind, bool has_payload,
            int64_t payload) noexcept;
  // True exactly once per recorder: the first region that fell back under graph capture.
  bool take_capture_notice() noexcept { return !capture_noticed_.exchange(true); }

  // --- draining (locks; may synchronise on GPU events when sync)
  // Every committed record whose GPU times are resolved (all of them when sync); records
  // still waiting on the GPU stay inside until a later drain.
  std::vector<Record> drain(bool sync);
  void clear();
  std::vector<std::pair<uint32_t, uint64_t>> dropped() const;  // by name id, since clear
  RecorderMeta meta() const;

 private:
  struct TlsSlot {
    uint64_t serial = 0;
    ThreadState* state = nullptr;
  };
  static thread_local TlsSlot tls_last_;
  ThreadState* local_slow() const noexcept;
  void update() noexcept {
    active_.store(started() && enabled(), std::memory_order_relaxed);
  }
  void commit(ThreadState& ts, Record& r) noexcept;
  void gpu_begin(ThreadState& ts, Frame& f) noexcept;
  void gpu_end(ThreadState& ts, const Frame& f, Record& r) noexcept;
  cuda::Event take_event(ThreadState& ts, int device) noexcept;
  bool ensure_anchor(int device) noexcept {
    return anchor_index_[device].load(std::memory_order_acquire) != 0 || anchor_slow(device);
  }
  bool anchor_slow(int device) noexcept;
  bool take_anchor(int device);  // with `device` current and anchor_mu_ held
  void reanchor();
  void release_events(std::vector<Record>& recs);
  // Moves committed records out of the thread buffers, resolving those whose GPU work is done
  // (all of them when sync) into `out`; the rest wait in pending_. mu_ held.
  void collect(bool sync, std::vector<Record>& out);

  const uint64_t serial_;
  const int64_t max_records_;
  const int64_t reanchor_interval_ns_;
  Budget budget_;
  std::atomic<bool> started_{false}, enabled_{true}, active_{false};
  std::atomic<bool> capture_noticed_{false};
  std::atomic<uint64_t> capture_fallbacks_{0};
  WallOffset wall_;
  int64_t started_ns_ = 0;

  mutable std::mutex mu_;  // threads_, pending_, ready_, drained_, draining
  std::vector<std::unique_ptr<ThreadState>> threads_;
  std::vector<Record> pending_;  // drained, GPU events not yet complete
  std::vector<Record> ready_;    // resolved by an opportunistic collect, for the next drain
  int64_t drained_ = 0;          // records handed out since the last clear (budget held)

  mutable std::mutex anchor_mu_;
  std::deque<Anchor> anchors_[kMaxDevices];
  std::atomic<uint32_t> anchor_index_[kMaxDevices] = {};  // 1 + index of the newest anchor
};

}  // namespace pytimings
