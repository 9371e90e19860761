#include "pytimings/recorder.hpp"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <system_error>

#include "pytimings/exceptions.hpp"
#include "pytimings/nvtx.hpp"

namespace pytimings {
namespace {

struct StringTable {
  std::mutex mu;
  std::unordered_map<std::string, uint32_t> ids;
  std::vector<std::string> strings;
  std::vector<bool> is_kind;
  size_t bytes = 0;            // of the strings (see kMaxNameBytes)
  uint64_t over_limit = 0;     // interns refused a new id (see kMaxNames)
  uint32_t over_limit_id = 0;  // the id they got instead (0: none yet)
  Nvtx nvtx;
};

StringTable& table() {
  static StringTable* t = new StringTable;  // lives until exit: NVTX handles refer to it
  return *t;
}

std::atomic<uint64_t> g_serial{0};

bool live(uint64_t serial);  // g_live_mu held

// This thread's state in each recorder it has recorded into, on the heap; null until its
// first region. The slot is plain data in initial-exec TLS: a C++ `thread_local` with a
// destructor registers it with glibc on first touch, which allocates and aborts the process
// when no memory is left. The cleanup runs instead as the destructor of a pthread key (its
// value is the same list; pthread_setspecific reports ENOMEM rather than aborting): the
// thread's states are marked so that the next drain frees their buffers and events.
struct TlsStates {
  std::vector<std::pair<uint64_t, ThreadState*>> v;
};
thread_local TlsStates* tls_states __attribute__((tls_model("initial-exec"))) = nullptr;
pthread_key_t g_exit_key;  // made by the first Recorder, destructor Recorder::thread_exited

// A runtime without a driver or device stays that way for the life of the process.
std::atomic<bool> g_no_device{false};
std::mutex g_live_mu;  // live recorders by serial (a recorder unlists itself first thing in
std::vector<std::pair<uint64_t, Recorder*>> g_live;  // its destructor: listed ones are valid)

bool live(uint64_t serial) {
  return std::any_of(g_live.begin(), g_live.end(),
                     [serial](const auto& e) { return e.first == serial; });
}

// fork(): take every lock a drain, a clear or a thread exit may hold (they run without the
// GIL, so another thread may be inside one when a thread forks), release them in the parent,
// and in the child (where the holders do not exist) release them and empty every recorder.
void fork_prepare() {
  g_live_mu.lock();
  for (auto& [serial, r] : g_live) r->lock_for_fork();
}
void fork_parent() {
  for (auto it = g_live.rbegin(); it != g_live.rend(); ++it) it->second->unlock_after_fork();
  g_live_mu.unlock();
}
void fork_child() {
  for (auto it = g_live.rbegin(); it != g_live.rend(); ++it) {
    it->second->after_fork_child();
    it->second->unlock_after_fork();
  }
  g_live_mu.unlock();
}

const cuda::Api* cuda_api() noexcept {
  const cuda::Runtime& rt = cuda::runtime();
  return rt.loaded ? &rt.api : nullptr;
}

int64_t ms_to_ns(float ms) { return std::llround(static_cast<double>(ms) * 1e6); }

constexpr uint32_t kEventBatch = 8;
// Events a thread may create before a region end tries to resolve finished ones itself.
constexpr uint64_t kCollectAfter = 4096;

}  // namespace

uint32_t intern(const std::string& s, bool is_kind, bool* over_limit) {
  StringTable& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.ids.find(s);
  uint32_t id;
  if (it == t.ids.end() &&
      (t.strings.size() >= kMaxNames || s.size() > kMaxNameBytes - t.bytes)) {
    // The table is process-wide and never shrinks (NVTX handles point into it): past the
    // limit a new name is recorded as kOverLimitName, and counted.
    ++t.over_limit;
    if (over_limit != nullptr) *over_limit = true;
    if (t.over_limit_id == 0) {
      t.over_limit_id = static_cast<uint32_t>(t.strings.size());
      t.strings.emplace_back(kOverLimitName);
      t.is_kind.push_back(false);
      t.ids.emplace(kOverLimitName, t.over_limit_id);
      t.nvtx.register_string(t.over_limit_id, kOverLimitName);
    }
    return t.over_limit_id;
  }
  if (it == t.ids.end()) {
    id = static_cast<uint32_t>(t.strings.size());
    t.strings.push_back(s);
    t.is_kind.push_back(false);
    t.ids.emplace(s, id);
    t.bytes += s.size();
    t.nvtx.register_string(id, s);
  } else {
    id = it->second;
  }
  if (is_kind && !t.is_kind[id]) {
    t.is_kind[id] = true;
    t.nvtx.name_category(id, s);
  }
  return id;
}

uint64_t names_over_limit() {
  StringTable& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  return t.over_limit;
}

std::vector<std::string> interned_strings() {
  StringTable& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  return t.strings;
}

thread_local Recorder::TlsSlot Recorder::tls_last_ __attribute__((tls_model("initial-exec")));

Recorder::Recorder(int64_t max_records, int64_t reanchor_interval_ns)
    : serial_(++g_serial),
      max_records_(max_records < 0 ? -1 : max_records),
      unnamed_drop_(intern(kUnnamedDropName, false)),
      reanchor_interval_ns_(reanchor_interval_ns),
      budget_(max_records < 0 ? std::numeric_limits<int64_t>::max() : max_records) {
  table();  // create the NVTX domain before the first region
  static const bool keyed = [] {
    if (const int err = pthread_key_create(&g_exit_key, &Recorder::thread_exited); err != 0)
      throw std::system_error(err, std::generic_category(), "pytimings: pthread_key_create");
    return true;
  }();
  (void)keyed;
  static const int atfork = pthread_atfork(fork_prepare, fork_parent, fork_child);
  (void)atfork;
  std::lock_guard<std::mutex> lock(g_live_mu);
  g_live.emplace_back(serial_, this);
}

Recorder::~Recorder() {
  {
    std::lock_guard<std::mutex> lock(g_live_mu);
    g_live.erase(std::find_if(g_live.begin(), g_live.end(),
                              [this](const auto& e) { return e.first == serial_; }));
  }
  const cuda::Api* api = cuda::runtime().loaded ? cuda_api() : nullptr;
  if (api == nullptr) return;
  // Events still in flight are destroyed too: CUDA defers the release until they complete.
  for (auto& ts : threads_) {
    for (auto& pool : ts->pool)
      for (cuda::Event e : pool) api->eventDestroy(e);
    if (auto* v = ts->returned.exchange(nullptr)) {
      for (auto& [dev, e] : *v) api->eventDestroy(e);
      delete v;
    }
    std::vector<Record> rest;
    ts->buffer.drain(rest);
    for (Record& r : rest) pending_.push_back(r);
    for (Frame& f : ts->frames)
      if (f.ev_start) api->eventDestroy(f.ev_start);
  }
  for (Record& r : pending_) {
    if (r.ev_start) api->eventDestroy(r.ev_start);
    if (r.ev_end) api->eventDestroy(r.ev_end);
  }
  for (auto& list : anchors_)
    for (Anchor& a : list) api->eventDestroy(a.event);
}

// --- threads

ThreadState* Recorder::local_slow() const noexcept {
  if (TlsStates* list = tls_states) {
    for (auto& [serial, state] : list->v) {
      if (serial == serial_) {
        tls_last_ = {serial_, state};
        return state;
      }
    }
  }
  return nullptr;
}

ThreadState* Recorder::register_thread(const char* name) noexcept {
  if (!exceptions_ready()) return nullptr;  // a bad_alloc below must be catchable
  ThreadState* raw;
  try {
    if (tls_states == nullptr) {
      auto list = std::make_unique<TlsStates>();
      if (pthread_setspecific(g_exit_key, list.get()) != 0) return nullptr;  // ENOMEM
      tls_states = list.release();
    }
    auto& v = tls_states->v;
    {
      // Forget this thread's states in recorders that no longer exist (their serials never
      // come back), so the list stays as short as the set of live recorders.
      std::lock_guard<std::mutex> lock(g_live_mu);
      v.erase(std::remove_if(v.begin(), v.end(), [](const auto& e) { return !live(e.first); }),
              v.end());
    }
    v.reserve(v.size() + 1);  // before the state is listed: the emplace below cannot fail
    auto ts = std::make_unique<ThreadState>();
    ts->tid = static_cast<int64_t>(syscall(SYS_gettid));
    ts->name = name;
    ts->frames.reserve(64);
    raw = ts.get();
    std::lock_guard<std::mutex> lock(mu_);
    ts->index = static_cast<uint32_t>(threads_.size());
    threads_.push_back(std::move(ts));
  } catch (...) {  // out of memory (or a lock that cannot be taken): no state, nothing listed
    return nullptr;
  }
  tls_states->v.emplace_back(serial_, raw);
  tls_last_ = {serial_, raw};
  return raw;
}

void Recorder::thread_exited(void* states) noexcept {
  auto* list = static_cast<TlsStates*>(states);
  tls_last_ = {};  // a region after this (another key's destructor) registers afresh
  tls_states = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_live_mu);
    for (auto& [serial, state] : list->v)
      if (live(serial)) state->exited.store(true, std::memory_order_release);
  }
  delete list;
}

std::vector<std::pair<int64_t, std::string>> Recorder::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<int64_t, std::string>> out;
  for (auto& ts : threads_) out.emplace_back(ts->tid, ts->name);
  return out;
}

void Recorder::start() {
  wall_ = sample_wall_offset();
  started_ns_ = now_ns();
  started_.store(true, std::memory_order_relaxed);
  enabled_.store(true, std::memory_order_relaxed);
  update();
}

// --- hot path

uint16_t Recorder::enter(ThreadState& ts, const RegionSpec& spec, const void* owner) noexcept {
  pop_abandoned(ts);
  try {
    ts.frames.push_back(Frame{owner, spec, spec.flags, 0, nullptr, -1});
  } catch (...) {  // out of memory for a deeper stack: not recorded, counted
    count_drop(ts, spec.name);
    return kNotEntered;
  }
  Frame& f = ts.frames.back();
  if (spec.flags & kHasStream) {
    bool timed = true;
    if (spec.sample_every > 1) {
      try {
        if (ts.sample_counter.size() <= spec.name) ts.sample_counter.resize(spec.name + 1, 0);
        timed = ts.sample_counter[spec.name]++ % spec.sample_every == 0;
      } catch (...) {  // out of memory for the counter: this instance is timed
      }
    }
    if (timed) gpu_begin(ts, f);
  }
  table().nvtx.push(spec.name, spec.kind, spec.flags & kHasPayload, spec.payload);
  f.start_ns = now_ns();  // last: the recorder's own work stays outside the region
  return f.flags;
}

void Recorder::abort_enter(ThreadState& ts) noexcept {
  Frame& f = ts.frames.back();
  table().nvtx.pop();
  if (f.ev_start) keep_event(ts, f.device, f.ev_start);
  ts.frames.pop_back();
}

ExitResult Recorder::exit(ThreadState& ts, const void* owner, bool error) noexcept {
  const int64_t end = now_ns();  // first: the recorder's own work stays outside the region
  if (ts.frames.empty()) return ExitResult::kNotInnermost;
  if (ts.frames.back().owner != owner || ts.frames.back().abandoned) {
    // Abandoned frames on top (exited from another thread) are skipped: `owner` must be the
    // innermost frame that is not. Failing that, an abandoned innermost frame of `owner`
    // closes normally: its own thread exits it after all.
    size_t i = ts.frames.size();
    while (i > 0 && ts.frames[i - 1].abandoned) --i;
    if (i > 0 && ts.frames[i - 1].owner == owner)
      pop_abandoned(ts);
    else if (ts.frames.back().owner != owner)
      return ExitResult::kNotInnermost;
  }
  Frame& f = ts.frames.back();
  table().nvtx.pop();
  ExitResult result = ExitResult::kClosed;
  if (f.abandoned) {
    f.abandoned = false;
    ts.abandoned.fetch_sub(1, std::memory_order_relaxed);
    result = ExitResult::kClosedUnowned;
  }
  if (f.inherited) {
    ts.frames.pop_back();
    return result;
  }
  Record r;
  r.name = f.spec.name;
  r.kind = f.spec.kind;
  r.thread = ts.index;
  r.depth = static_cast<uint16_t>(ts.frames.size() - 1);
  r.flags = static_cast<uint16_t>(f.flags | (error ? kError : 0));
  r.start_ns = f.start_ns;
  r.end_ns = end;
  r.gpu_start_ns = r.gpu_end_ns = kNoTime;
  r.stream = f.spec.stream;
  r.nbytes = f.spec.nbytes;
  r.payload = f.spec.payload;
  r.ev_start = r.ev_end = nullptr;
  r.device = -1;
  r.anchor = 0;
  if (f.flags & kGpuTimed) gpu_end(ts, f, r);
  ts.frames.pop_back();
  commit(ts, r);
  return result;
}

void Recorder::mark(ThreadState& ts, uint32_t name, uint32_t kind, bool has_payload,
                    int64_t payload) noexcept {
  pop_abandoned(ts);
  table().nvtx.mark(name, kind, has_payload, payload);
  Record r{};
  r.name = name;
  r.kind = kind;
  r.thread = ts.index;
  r.depth = static_cast<uint16_t>(ts.frames.size());
  r.flags = static_cast<uint16_t>(kMark | (has_payload ? kHasPayload : 0));
  r.start_ns = r.end_ns = now_ns();
  r.gpu_start_ns = r.gpu_end_ns = kNoTime;
  r.nbytes = -1;
  r.payload = payload;
  r.device = -1;
  commit(ts, r);
}

void Recorder::commit(ThreadState& ts, Record& r) noexcept {
  if (ts.buffer.append(r, budget_)) return;
  // Over the cap: count it by name, and take the events back at once (re-recording an event
  // that is still pending is allowed).
  if (r.ev_start) keep_event(ts, r.device, r.ev_start);
  if (r.ev_end) keep_event(ts, r.device, r.ev_end);
  count_drop(ts, r.name);
}

void Recorder::count_drop(ThreadState& ts, uint32_t name) noexcept {
  std::lock_guard<std::mutex> lock(ts.drop_mu);
  try {
    ++ts.drops[name];
  } catch (...) {  // no memory for the name's entry: counted all the same, without it
    ++ts.drops_unnamed;
  }
}

void Recorder::keep_event(ThreadState& ts, int device, cuda::Event e) noexcept {
  try {
    ts.pool[device].push_back(e);
  } catch (...) {  // the pool cannot grow: one event fewer to reuse
    if (const cuda::Api* api = cuda_api()) api->eventDestroy(e);
  }
}

void Recorder::pop_abandoned_slow(ThreadState& ts) noexcept {
  uint32_t popped = 0;
  while (!ts.frames.empty() && ts.frames.back().abandoned) {
    const Frame& f = ts.frames.back();
    table().nvtx.pop();  // on the thread that pushed it
    if (f.ev_start) keep_event(ts, f.device, f.ev_start);
    {
      std::lock_guard<std::mutex> lock(ts.drop_mu);
      try {
        ++ts.lost_open[f.spec.name];
      } catch (...) {  // out of memory: the count is lost, never the region's thread
      }
    }
    ts.frames.pop_back();
    ++popped;
  }
  if (popped) ts.abandoned.fetch_sub(popped, std::memory_order_relaxed);
}

bool Recorder::abandon_elsewhere(const ThreadState* caller, const void* owner) {
  // open on the caller's own thread too: an out-of-order exit there, not a wrong thread
  if (caller != nullptr && std::any_of(caller->frames.begin(), caller->frames.end(),
                                       [owner](const Frame& f) { return f.owner == owner; }))
    return false;
  // The most recently entered instance, not the first thread's: a thread that Python has
  // already joined keeps its open frames until its pthread key destructor marks it exited,
  // a moment later, and the OS may already run a new thread (often with the same id) that
  // entered the same region since. The dead thread's frames are the older ones.
  std::lock_guard<std::mutex> lock(mu_);
  ThreadState* found_thread = nullptr;
  Frame* found = nullptr;
  for (auto& ts : threads_) {
    if (ts.get() == caller || ts->released || ts->exited.load(std::memory_order_acquire))
      continue;
    for (auto f = ts->frames.rbegin(); f != ts->frames.rend(); ++f) {
      if (f->owner == owner && !f->abandoned) {
        if (found == nullptr || f->start_ns >= found->start_ns) {
          found = &*f;
          found_thread = ts.get();
        }
        break;  // this thread's innermost instance
      }
    }
  }
  if (found == nullptr) return false;
  found->abandoned = true;
  found_thread->abandoned.fetch_add(1, std::memory_order_relaxed);
  return true;
}

cuda::Event Recorder::take_event(ThreadState& ts, int device) noexcept {
  std::vector<cuda::Event>& pool = ts.pool[device];
  auto take_returned = [&ts] {
    if (auto* back = ts.returned.exchange(nullptr, std::memory_order_acquire)) {
      for (auto& [dev, e] : *back) keep_event(ts, dev, e);
      delete back;
    }
  };
  if (pool.empty()) take_returned();
  if (pool.empty() && ts.events_created >= kCollectAfter) {
    // Nobody has drained for a while: resolve what the GPU has finished (non-blocking
    // queries, and only if no drain is running) so events are reused instead of piling up.
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (lock.owns_lock()) {
      try {
        collect(false, ready_);
      } catch (...) {  // out of memory: keep the events out; never fail the region for it
      }
      lock.unlock();
      take_returned();
    }
  }
  if (pool.empty()) {  // warm-up: grow the pool a batch at a time
    const cuda::Api* api = cuda_api();
    for (uint32_t i = 0; i < kEventBatch; ++i) {
      cuda::Event e = nullptr;
      if (api->eventCreateWithFlags(&e, cuda::kEventDefault) != cuda::kSuccess) break;
      keep_event(ts, device, e);
      ++ts.events_created;
    }
    if (pool.empty()) return nullptr;
  }
  cuda::Event e = pool.back();
  pool.pop_back();
  return e;
}

void Recorder::gpu_begin(ThreadState& ts, Frame& f) noexcept {
  const cuda::Api* api = cuda_api();
  if (api == nullptr) return;  // no CUDA: host time only
  if (g_no_device.load(std::memory_order_relaxed)) {
    f.flags |= kGpuFailed;
    return;
  }
  int dev = -1;
  auto* stream = reinterpret_cast<cuda::Stream>(f.spec.stream);
  int capturing = cuda::kCaptureStatusNone;
  const cuda::Error e = api->getDevice(&dev);
  if (e == cuda::kErrorInsufficientDriver || e == cuda::kErrorNoDevice)
    g_no_device.store(true, std::memory_order_relaxed);  // for good: stop asking
  if (e != cuda::kSuccess || dev < 0 || dev >= kMaxDevices ||
      api->streamIsCapturing(stream, &capturing) != cuda::kSuccess) {
    f.flags |= kGpuFailed;
    return;
  }
  if (capturing != cuda::kCaptureStatusNone) {
    // Recording a timing event here would become a node of the graph being captured (or
    // invalidate the capture): host time + NVTX only for this instance.
    f.flags |= kGraphCapture;
    capture_fallbacks_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  cuda::Event ev;
  if (!ensure_anchor(dev) || (ev = take_event(ts, dev)) == nullptr) {
    f.flags |= kGpuFailed;
    return;
  }
  if (api->eventRecord(ev, stream) != cuda::kSuccess) {
    keep_event(ts, dev, ev);
    f.flags |= kGpuFailed;
    return;
  }
  f.ev_start = ev;
  f.device = dev;
  f.flags |= kGpuTimed;
}

void Recorder::gpu_end(ThreadState& ts, const Frame& f, Record& r) noexcept {
  const cuda::Api* api = cuda_api();
  auto* stream = reinterpret_cast<cuda::Stream>(f.spec.stream);
  int capturing = cuda::kCaptureStatusNone;
  cuda::Event ev = nullptr;
  const bool ok = api->streamIsCapturing(stream, &capturing) == cuda::kSuccess &&
                  capturing == cuda::kCaptureStatusNone &&
                  (ev = take_event(ts, f.device)) != nullptr &&
                  api->eventRecord(ev, stream) == cuda::kSuccess;
  if (!ok) {
    if (ev) keep_event(ts, f.device, ev);
    keep_event(ts, f.device, f.ev_start);
    r.flags = static_cast<uint16_t>((r.flags & ~kGpuTimed) |
                                    (capturing != cuda::kCaptureStatusNone ? kGraphCapture
                                                                          : kGpuFailed));
    if (capturing != cuda::kCaptureStatusNone)
      capture_fallbacks_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  r.ev_start = f.ev_start;
  r.ev_end = ev;
  r.device = f.device;
  r.anchor = anchor_index_[f.device].load(std::memory_order_acquire) - 1;
}

// --- anchors: where the GPU clock sits on the host clock

bool Recorder::anchor_slow(int device) noexcept {
  std::lock_guard<std::mutex> lock(anchor_mu_);
  if (anchor_index_[device].load(std::memory_order_relaxed) != 0) return true;
  try {
    return take_anchor(device);
  } catch (...) {
    return false;
  }
}

bool Recorder::take_anchor(int device) {
  const cuda::Api* api = cuda_api();
  // Record on the legacy default stream and poll until the GPU has passed it: the event's GPU
  // time lies between the last "not ready" poll and the first "ready" one. Three tries; the
  // tightest bracket wins.
  Anchor best{device, nullptr, 0, 0, 0, false};
  int64_t best_width = std::numeric_limits<int64_t>::max();
  for (int attempt = 0; attempt < 3; ++attempt) {
    cuda::Event ev = nullptr;
    if (api->eventCreateWithFlags(&ev, cuda::kEventDefault) != cuda::kSuccess) break;
    const int64_t t_record = now_ns();
    if (api->eventRecord(ev, nullptr) != cuda::kSuccess) {
      api->eventDestroy(ev);
      break;
    }
    int64_t lo = t_record, hi = 0;
    for (;;) {
      const int64_t t = now_ns();
      const cuda::Error q = api->eventQuery(ev);
      if (q == cuda::kSuccess) {
        hi = now_ns();
        break;
      }
      if (q != cuda::kErrorNotReady) break;
      lo = t;
    }
    if (hi == 0 || hi - lo >= best_width) {
      api->eventDestroy(ev);
      continue;
    }
    if (best.event) api->eventDestroy(best.event);
    best_width = hi - lo;
    best.event = ev;
    best.host_ns = lo + (hi - lo) / 2;
    best.uncertainty_ns = (hi - lo + 1) / 2;
  }
  if (best.event == nullptr) return false;
  std::deque<Anchor>& list = anchors_[device];
  if (!list.empty()) {
    float ms = 0;
    if (api->eventElapsedTime(&ms, list.back().event, best.event) == cuda::kSuccess) {
      best.residual_ns = best.host_ns - (list.back().host_ns + ms_to_ns(ms));
      best.has_residual = true;
    }
  }
  list.push_back(best);
  anchor_index_[device].store(static_cast<uint32_t>(list.size()), std::memory_order_release);
  return true;
}

void Recorder::reanchor() {
  const cuda::Api* api = cuda_api();
  if (api == nullptr) return;
  std::lock_guard<std::mutex> lock(anchor_mu_);
  int current = -1;
  bool switched = false;
  for (int dev = 0; dev < kMaxDevices; ++dev) {
    if (anchors_[dev].empty() || now_ns() - anchors_[dev].back().host_ns < reanchor_interval_ns_)
      continue;
    if (current < 0 && api->getDevice(&current) != cuda::kSuccess) return;
    if (dev != current) {
      if (api->setDevice(dev) != cuda::kSuccess) continue;
      switched = true;
    }
    take_anchor(dev);
  }
  if (switched) api->setDevice(current);
}

// --- draining

void Recorder::release_thread(ThreadState& ts) {
  {
    std::lock_guard<std::mutex> lock(ts.drop_mu);
    for (const Frame& f : ts.frames)  // open when it exited
      if (!f.inherited) ++ts.lost_open[f.spec.name];
  }
  ts.buffer.release();
  std::vector<Frame>().swap(ts.frames);
  std::vector<uint32_t>().swap(ts.sample_counter);
  const cuda::Api* api = cuda_api();  // events exist only if the runtime was loaded
  for (auto& pool : ts.pool) {
    for (cuda::Event e : pool) api->eventDestroy(e);
    std::vector<cuda::Event>().swap(pool);
  }
  if (auto* v = ts.returned.exchange(nullptr)) {
    for (auto& [dev, e] : *v) api->eventDestroy(e);
    delete v;
  }
  ts.released = true;
}

void Recorder::release_events(std::vector<Record>& recs) {
  std::vector<std::vector<std::pair<int, cuda::Event>>> back(threads_.size());
  for (Record& r : recs) {
    if (r.ev_start) back[r.thread].emplace_back(r.device, r.ev_start);
    if (r.ev_end) back[r.thread].emplace_back(r.device, r.ev_end);
    r.ev_start = r.ev_end = nullptr;
  }
  for (size_t i = 0; i < back.size(); ++i) {
    if (back[i].empty()) continue;
    if (threads_[i]->released) {  // its thread is gone: nobody will reuse them
      const cuda::Api* api = cuda_api();
      for (auto& [dev, e] : back[i]) api->eventDestroy(e);
      continue;
    }
    // The owner only ever swaps nullptr in, so what we take out is still ours to extend.
    auto* v = threads_[i]->returned.exchange(nullptr, std::memory_order_acquire);
    if (v == nullptr) v = new std::vector<std::pair<int, cuda::Event>>;
    v->insert(v->end(), back[i].begin(), back[i].end());
    threads_[i]->returned.store(v, std::memory_order_release);
  }
}

std::vector<Record> Recorder::drain(bool sync) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Record> out;
  out.swap(ready_);
  try {
    collect(sync, out);
  } catch (...) {  // out of memory: what collect moved out stays for the next drain
    ready_.swap(out);
    throw;
  }
  if (sync) reanchor();
  drained_ += static_cast<int64_t>(out.size());
  return out;
}

void Recorder::restore(std::vector<Record>& recs) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  drained_ -= static_cast<int64_t>(recs.size());
  if (ready_.empty()) {
    ready_.swap(recs);
    return;
  }
  try {
    recs.insert(recs.end(), ready_.begin(), ready_.end());
    ready_.swap(recs);
  } catch (...) {  // no memory even for that: counted, never silently gone
    lost_ += static_cast<int64_t>(recs.size());
    release_events(recs);
  }
}

void Recorder::collect(bool sync, std::vector<Record>& out) {
  std::vector<Record> batch;
  batch.swap(pending_);
  std::vector<Record> done_events;
  try {
    for (auto& ts : threads_) {
      // Read `exited` first: if set, the thread's last commit happened before it.
      const bool gone = !ts->released && ts->exited.load(std::memory_order_acquire);
      ts->buffer.drain(batch);
      if (gone) release_thread(*ts);
    }
    // every allocation of the loop below, made before it moves a record
    allocation_point();
    out.reserve(out.size() + batch.size());
    pending_.reserve(batch.size());
    done_events.reserve(batch.size());
  } catch (...) {  // out of memory: the records drained so far wait in pending_
    pending_.swap(batch);
    throw;
  }
  const cuda::Api* api = cuda::runtime().loaded ? cuda_api() : nullptr;
  {
    std::lock_guard<std::mutex> alock(anchor_mu_);
    for (Record& r : batch) {
      if (r.ev_end == nullptr) {
        out.push_back(r);
        continue;
      }
      const cuda::Error q = sync ? api->eventSynchronize(r.ev_end) : api->eventQuery(r.ev_end);
      if (q == cuda::kErrorNotReady) {
        pending_.push_back(r);
        continue;
      }
      float since_anchor = 0, duration = 0;
      const Anchor& a = anchors_[r.device][r.anchor];
      if (q == cuda::kSuccess &&
          api->eventElapsedTime(&since_anchor, a.event, r.ev_start) == cuda::kSuccess &&
          api->eventElapsedTime(&duration, r.ev_start, r.ev_end) == cuda::kSuccess) {
        // The duration comes from its own event pair, not from two anchor offsets, so float
        // milliseconds lose no precision on it however far the anchor is.
        r.gpu_start_ns = a.host_ns + ms_to_ns(since_anchor);
        r.gpu_end_ns = r.gpu_start_ns + ms_to_ns(duration);
        r.flags |= kGpuResolved;
      } else {
        r.flags |= kGpuFailed;
      }
      done_events.push_back(r);
      out.push_back(r);
    }
  }
  try {
    release_events(done_events);
  } catch (...) {  // no memory to hand them back to their threads: destroy them instead
    for (Record& r : done_events) {
      if (r.ev_start) api->eventDestroy(r.ev_start);
      if (r.ev_end) api->eventDestroy(r.ev_end);
    }
  }
  for (Record& r : out) r.ev_start = r.ev_end = nullptr;
}

std::vector<Record> Recorder::take_all() {
  std::vector<Record> all;
  all.swap(pending_);
  all.insert(all.end(), ready_.begin(), ready_.end());
  ready_.clear();
  for (auto& ts : threads_) ts->buffer.drain(all);
  budget_.release(drained_ + static_cast<int64_t>(all.size()));
  drained_ = 0;
  return all;
}

void Recorder::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Record> discard = take_all();
  release_events(discard);  // pending events may be re-recorded while in flight
  for (auto& ts : threads_) {
    std::lock_guard<std::mutex> dlock(ts->drop_mu);
    ts->drops.clear();
    ts->drops_unnamed = 0;
    ts->lost_open.clear();
  }
  drops_stateless_.store(0, std::memory_order_relaxed);
}

std::vector<std::pair<uint32_t, uint64_t>> Recorder::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::unordered_map<uint32_t, uint64_t> total;
  for (auto& ts : threads_) {
    std::lock_guard<std::mutex> dlock(ts->drop_mu);
    for (auto& [name, n] : ts->drops) total[name] += n;
    if (ts->drops_unnamed) total[unnamed_drop_] += ts->drops_unnamed;
  }
  if (const uint64_t n = drops_stateless_.load(std::memory_order_relaxed))
    total[unnamed_drop_] += n;
  std::vector<std::pair<uint32_t, uint64_t>> out(total.begin(), total.end());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::pair<uint32_t, uint64_t>> Recorder::open_regions() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::unordered_map<uint32_t, uint64_t> total;
  for (auto& ts : threads_) {
    std::lock_guard<std::mutex> dlock(ts->drop_mu);
    for (auto& [name, n] : ts->lost_open) total[name] += n;
    for (const Frame& f : ts->frames)
      if (!f.inherited) ++total[f.spec.name];
  }
  std::vector<std::pair<uint32_t, uint64_t>> out(total.begin(), total.end());
  std::sort(out.begin(), out.end());
  return out;
}

// --- fork

void Recorder::lock_for_fork() noexcept {
  mu_.lock();
  anchor_mu_.lock();
  for (auto& ts : threads_) ts->drop_mu.lock();
}

void Recorder::unlock_after_fork() noexcept {
  for (auto it = threads_.rbegin(); it != threads_.rend(); ++it) (*it)->drop_mu.unlock();
  anchor_mu_.unlock();
  mu_.unlock();
}

// The child starts empty: what the parent recorded (drained or not) and its drop and open
// counts stay the parent's, so saving in both processes counts nothing twice. The forking
// thread's open regions close without a record here (the parent records them); the other
// threads do not exist in the child. CUDA events and anchors belong to the parent's context
// (unusable after fork): forgotten, never destroyed or queried.
void Recorder::after_fork_child() noexcept {
  ThreadState* me = local();
  take_all();  // (out of memory here ends the child: noexcept, never a silent double count)
  drops_stateless_.store(0, std::memory_order_relaxed);
  for (auto& ts : threads_) {
    ts->drops.clear();
    ts->drops_unnamed = 0;
    ts->lost_open.clear();
    for (auto& pool : ts->pool) pool.clear();
    delete ts->returned.exchange(nullptr);
    if (ts.get() == me) {
      ts->tid = static_cast<int64_t>(syscall(SYS_gettid));
      for (Frame& f : ts->frames) {
        f.inherited = true;
        f.ev_start = nullptr;
      }
    } else {
      ts->frames.clear();
      ts->exited.store(true, std::memory_order_release);
    }
  }
  for (int dev = 0; dev < kMaxDevices; ++dev) {
    anchors_[dev].clear();
    anchor_index_[dev].store(0, std::memory_order_relaxed);
  }
}

RecorderMeta Recorder::meta() const {
  RecorderMeta m;
  m.wall = wall_;
  m.started_ns = started_ns_;
  m.max_records = max_records_;
  m.capture_fallbacks = capture_fallbacks_.load(std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    m.gpu_pending = pending_.size();
    m.lost_out_of_memory = lost_;
    m.buffer_bytes = 0;
    for (auto& ts : threads_) m.buffer_bytes += ts->buffer.bytes();
  }
  std::lock_guard<std::mutex> alock(anchor_mu_);
  for (auto& list : anchors_) m.anchors.insert(m.anchors.end(), list.begin(), list.end());
  return m;
}

}  // namespace pytimings
