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
// *over_limit (when given) is set when `s` is beyond the limit below (its id is then
// kOverLimitName's: a caller must not keep it as the id of `s`).
uint32_t intern(const std::string& s, bool is_kind, bool* over_limit = nullptr);
std::vector<std::string> interned_strings();
// The table never shrinks, so its size is bounded: a name beyond the first kMaxNames
// distinct ones, or one that would take the table past kMaxNameBytes of text, is recorded
// as kOverLimitName, and counted at each intern (names_over_limit). 65,536 names cost about
// 24 MB (a name that varies per call, f"decode {request_id}", is the usual way to reach it).
constexpr size_t kMaxNames = size_t{1} << 16;
constexpr size_t kMaxNameBytes = size_t{64} << 20;
constexpr const char* kOverLimitName = "<names beyond the limit>";
uint64_t names_over_limit();

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
  // its exit came from another thread (refused there): popped by the owner thread at its next
  // enter/exit/mark, counted as an open region (read and written under the GIL)
  bool abandoned = false;
  // opened in the parent before a fork: in the child it closes without a record (the parent
  // records it), so the region is not counted twice
  bool inherited = false;
};

constexpr int kMaxDevices = 64;
constexpr uint16_t kNotEntered = 0xFFFF;  // Recorder::enter found no memory for the frame
constexpr const char* kUnnamedDropName = "<dropped out of memory, name not counted>";

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
  std::atomic<bool> exited{false};  // the thread is gone: the drainer may free its memory
  bool released = false;            // ...and has (drainer only)
  std::mutex drop_mu;  // taken only when a record is dropped (the cap is reached) or read
  std::unordered_map<uint32_t, uint64_t> drops;
  uint64_t drops_unnamed = 0;  // drops no memory was left to count by name; drop_mu
  // regions that will never end (abandoned, or open when the thread exited), by name; drop_mu
  std::unordered_map<uint32_t, uint64_t> lost_open;
  std::atomic<uint32_t> abandoned{0};  // frames marked abandoned and not yet popped
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
  int64_t buffer_bytes;  // native chunk memory held by all threads
  int64_t lost_out_of_memory;  // drained records no memory was left to give back
  std::vector<Anchor> anchors;
};

enum class ExitResult {
  kNotInnermost,   // refused: `owner` is not this thread's innermost open region
  kClosed,         // closed: the caller drops the frame's reference to `owner`
  kClosedUnowned,  // closed, its reference already dropped (by abandon_elsewhere)
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
  // This thread's state, made on its first record; nullptr when no memory is left for it.
  ThreadState* register_thread(const char* name) noexcept;
  // A record made on a thread that has no state (register_thread failed): counted as dropped
  // under kUnnamedDropName.
  void count_stateless_drop() noexcept {
    drops_stateless_.fetch_add(1, std::memory_order_relaxed);
  }
  std::vector<std::pair<int64_t, std::string>> threads() const;

  // --- control
  void start();
  void stop() noexcept { started_.store(false, std::memory_order_relaxed); update(); }
  void set_enabled(bool on) noexcept { enabled_.store(on, std::memory_order_relaxed); update(); }
  bool enabled() const noexcept { return enabled_.load(std::memory_order_relaxed); }
  bool started() const noexcept { return started_.load(std::memory_order_relaxed); }
  bool active() const noexcept { return active_.load(std::memory_order_relaxed); }

  // --- hot path (owner: identity of the Python region object, for exit checks)
  // kNotEntered: no memory for the frame; the region is not recorded (counted as dropped)
  uint16_t enter(ThreadState& ts, const RegionSpec& spec, const void* owner) noexcept;
  void abort_enter(ThreadState& ts) noexcept;  // undo the last enter (its notice failed)
  ExitResult exit(ThreadState& ts, const void* owner, bool error) noexcept;
  void mark(ThreadState& ts, uint32_t name, uint32_t kind, bool has_payload,
            int64_t payload) noexcept;
  // A refused exit of `owner` on thread `caller` (null: one that never recorded) where it is
  // not open: mark the most recently entered frame of `owner` on another live thread
  // abandoned (its
  // owner thread pops it). True when one was found (the caller then drops the frame's
  // reference to `owner`). GIL held.
  bool abandon_elsewhere(const ThreadState* caller, const void* owner);
  // True exactly once per recorder: the first region that fell back under graph capture.
  bool take_capture_notice() noexcept { return !capture_noticed_.exchange(true); }

  // --- draining (locks; may synchronise on GPU events when sync)
  // Every committed record whose GPU times are resolved (all of them when sync); records
  // still waiting on the GPU stay inside until a later drain.
  std::vector<Record> drain(bool sync);
  // Give records from drain() back (the caller could not take them: out of memory while
  // converting them); they come out first at the next drain.
  void restore(std::vector<Record>& recs) noexcept;
  void clear();
  std::vector<std::pair<uint32_t, uint64_t>> dropped() const;  // by name id, since clear
  // Regions entered and not (yet) closed, by name id: open now on a live thread, open when
  // their thread exited, or abandoned (exited from another thread). GIL held.
  std::vector<std::pair<uint32_t, uint64_t>> open_regions() const;

  // --- fork (pthread_atfork, registered by the first Recorder): every recorder lock is taken
  // before fork and released after it in both processes; the child starts empty (see
  // after_fork_child).
  void lock_for_fork() noexcept;
  void unlock_after_fork() noexcept;
  void after_fork_child() noexcept;
  RecorderMeta meta() const;

 private:
  struct TlsSlot {
    uint64_t serial = 0;
    ThreadState* state = nullptr;
  };
  static thread_local TlsSlot tls_last_;  // trivially destructible: nothing registered
  ThreadState* local_slow() const noexcept;
  static void thread_exited(void* states) noexcept;  // the pthread key's destructor
  void update() noexcept {
    active_.store(started() && enabled(), std::memory_order_relaxed);
  }
  void commit(ThreadState& ts, Record& r) noexcept;
  void count_drop(ThreadState& ts, uint32_t name) noexcept;
  // An event back into the thread's pool; destroyed when the pool cannot grow.
  static void keep_event(ThreadState& ts, int device, cuda::Event e) noexcept;
  void pop_abandoned(ThreadState& ts) noexcept {  // abandoned frames on top of the stack
    if (ts.abandoned.load(std::memory_order_relaxed) != 0) pop_abandoned_slow(ts);
  }
  void pop_abandoned_slow(ThreadState& ts) noexcept;
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
  void release_thread(ThreadState& ts);  // an exited, drained thread's memory and events
  // Moves committed records out of the thread buffers, resolving those whose GPU work is done
  // (all of them when sync) into `out`; the rest wait in pending_. mu_ held.
  void collect(bool sync, std::vector<Record>& out);
  // Every record held (pending, ready, in the thread buffers) moved out, and the budget
  // they and the records drained since the last clear held given back. mu_ held.
  std::vector<Record> take_all();

  const uint64_t serial_;
  const int64_t max_records_;
  const uint32_t unnamed_drop_;  // the name drops_unnamed are reported under
  const int64_t reanchor_interval_ns_;
  Budget budget_;
  std::atomic<bool> started_{false}, enabled_{true}, active_{false};
  std::atomic<bool> capture_noticed_{false};
  std::atomic<uint64_t> capture_fallbacks_{0};
  std::atomic<uint64_t> drops_stateless_{0};  // see count_stateless_drop; since clear
  WallOffset wall_;
  int64_t started_ns_ = 0;

  mutable std::mutex mu_;  // threads_, pending_, ready_, drained_, draining
  std::vector<std::unique_ptr<ThreadState>> threads_;
  std::vector<Record> pending_;  // drained, GPU events not yet complete
  std::vector<Record> ready_;    // resolved by an opportunistic collect, for the next drain
  int64_t drained_ = 0;          // records handed out since the last clear (budget held)
  int64_t lost_ = 0;             // records restore() had no memory to keep (counted)

  mutable std::mutex anchor_mu_;
  std::deque<Anchor> anchors_[kMaxDevices];
  std::atomic<uint32_t> anchor_index_[kMaxDevices] = {};  // 1 + index of the newest anchor
};

}  // namespace pytimings
