// Per-thread record buffers: a single writer (the owning thread) appends without locks or
// allocation; a drainer (any thread, holding the recorder's lock) copies out what was
// committed and recycles chunks the writer has left behind.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace pytimings {

// One row of pytimings/_records.py RECORD_SCHEMA, plus what the native side needs until the
// GPU times are resolved.
struct Record {
  uint32_t name;
  uint32_t kind;
  uint32_t thread;
  uint16_t depth;
  uint16_t flags;
  int64_t start_ns;
  int64_t end_ns;
  int64_t gpu_start_ns;
  int64_t gpu_end_ns;
  uint64_t stream;
  int64_t nbytes;
  int64_t payload;
  // native only
  void* ev_start;  // cudaEvent_t, until resolved
  void* ev_end;
  int32_t device;
  uint32_t anchor;  // index of the anchor (per device) in force when the region ended
};

// Mirrors pytimings._records.RecordFlag.
enum RecordFlag : uint16_t {
  kGpuTimed = 1,
  kGpuResolved = 2,
  kMark = 4,
  kGraphCapture = 8,
  kGpuFailed = 16,
  kHasStream = 32,
  kHasPayload = 64,
  kError = 128,
};

constexpr int64_t kNoTime = INT64_MIN;

// Testing: the n-th allocation_point() from now (0 = the next) throws std::bad_alloc, as an
// allocation there would; n < 0 turns it off. allocation_point() marks where the drain
// allocates (tests/recorder/test_drain_faults.py).
void fail_allocation_after(int64_t n) noexcept;
void allocation_point();

// A header followed by `size` records in the same allocation. Chunks start small (a thread
// that records a handful of regions holds a few KiB) and double up to kMaxRecords.
struct Chunk {
  static constexpr uint32_t kMinRecords = 64;
  static constexpr uint32_t kMaxRecords = 1024;
  explicit Chunk(uint32_t records) : size(records) {}
  static Chunk* make(uint32_t records) noexcept;  // nullptr when out of memory
  static void destroy(Chunk* c) noexcept;
  static size_t bytes(uint32_t records) { return sizeof(Chunk) + records * sizeof(Record); }
  Record* records() noexcept { return reinterpret_cast<Record*>(this + 1); }

  std::atomic<uint32_t> committed{0};  // records [0, committed) are complete
  uint32_t capacity = 0;               // slots reserved from the budget (writer only)
  const uint32_t size;                 // slots allocated
  std::atomic<Chunk*> next{nullptr};   // set by the writer once it leaves this chunk
};
static_assert(sizeof(Chunk) % alignof(Record) == 0, "records follow the header");

// Free record slots shared by all threads (the memory cap). Threads reserve slots in blocks,
// so the shared cache line is touched about once per block, not per record; a block is at
// most 1/64 of what is left, so near the cap slots go one at a time and the cap fills up
// (threads still holding unused slots when others run out leave it short by a few records).
class Budget {
 public:
  explicit Budget(int64_t slots) : free_(slots) {}
  uint32_t reserve(uint32_t want) noexcept {
    int64_t have = free_.load(std::memory_order_relaxed);
    while (have > 0) {
      int64_t take = have / 64 < 1 ? 1 : have / 64;
      if (take > want) take = want;
      if (free_.compare_exchange_weak(have, have - take, std::memory_order_relaxed))
        return static_cast<uint32_t>(take);
    }
    return 0;
  }
  void release(int64_t slots) noexcept { free_.fetch_add(slots, std::memory_order_relaxed); }

 private:
  alignas(64) std::atomic<int64_t> free_;
};

class RecordBuffer {
 public:
  RecordBuffer() = default;
  ~RecordBuffer();
  RecordBuffer(const RecordBuffer&) = delete;
  RecordBuffer& operator=(const RecordBuffer&) = delete;

  // Writer side. False when the budget is exhausted (the caller counts the drop).
  bool append(const Record& r, Budget& budget) noexcept {
    if (pos_ == tail_->capacity && !grow(budget)) return false;
    tail_->records()[pos_] = r;
    tail_->committed.store(++pos_, std::memory_order_release);
    return true;
  }

  // Drainer side (serialised by the caller). Appends every committed record to `out`.
  void drain(std::vector<Record>& out);
  // Drainer side, once the writer thread has exited and everything is drained: free all
  // memory (the buffer stays usable, empty).
  void release() noexcept;
  // Bytes of chunk memory held (any thread).
  int64_t bytes() const noexcept { return bytes_.load(std::memory_order_relaxed); }

 private:
  bool grow(Budget& budget) noexcept;  // more reserved slots: in this chunk, or a new one
  void free_chain(Chunk* c) noexcept;

  Chunk sentinel_{0};  // the empty first chunk: no allocation until the first record
  // writer-owned
  Chunk* tail_ = &sentinel_;
  uint32_t pos_ = 0;
  uint32_t next_size_ = Chunk::kMinRecords;
  Chunk* spare_ = nullptr;  // chunks taken back from recycled_, linked through next
  // drainer-owned
  Chunk* head_ = &sentinel_;
  uint32_t consumed_ = 0;
  // drainer pushes, writer takes all at once (so no ABA)
  std::atomic<Chunk*> recycled_{nullptr};
  std::atomic<int64_t> bytes_{0};
};

}  // namespace pytimings
