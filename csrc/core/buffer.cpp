#include "pytimings/buffer.hpp"

#include <new>

namespace pytimings {

Chunk* Chunk::make(uint32_t records) noexcept {
  void* mem = ::operator new(bytes(records), std::nothrow);
  return mem ? new (mem) Chunk(records) : nullptr;
}

void Chunk::destroy(Chunk* c) noexcept {
  c->~Chunk();
  ::operator delete(c);
}

void RecordBuffer::free_chain(Chunk* c) noexcept {
  while (c != nullptr) {
    Chunk* n = c->next.load(std::memory_order_relaxed);
    if (c != &sentinel_) {
      bytes_.fetch_sub(static_cast<int64_t>(Chunk::bytes(c->size)), std::memory_order_relaxed);
      Chunk::destroy(c);
    }
    c = n;
  }
}

RecordBuffer::~RecordBuffer() {
  free_chain(head_);
  free_chain(spare_);
  free_chain(recycled_.load(std::memory_order_relaxed));
}

void RecordBuffer::release() noexcept {
  free_chain(head_);
  free_chain(spare_);
  free_chain(recycled_.exchange(nullptr, std::memory_order_relaxed));
  sentinel_.next.store(nullptr, std::memory_order_relaxed);
  sentinel_.committed.store(0, std::memory_order_relaxed);
  head_ = tail_ = &sentinel_;
  spare_ = nullptr;
  pos_ = consumed_ = 0;
  next_size_ = Chunk::kMinRecords;
}

bool RecordBuffer::grow(Budget& budget) noexcept {
  if (tail_->capacity > 0 && tail_->capacity < tail_->size) {
    const uint32_t more = budget.reserve(tail_->size - tail_->capacity);
    tail_->capacity += more;
    return more > 0;
  }
  if (spare_ == nullptr) spare_ = recycled_.exchange(nullptr, std::memory_order_acquire);
  Chunk* c = spare_;
  if (c != nullptr) {
    spare_ = c->next.load(std::memory_order_relaxed);
  } else {
    // warm-up, or the drainer has not caught up
    if ((c = Chunk::make(next_size_)) == nullptr) return false;
    bytes_.fetch_add(static_cast<int64_t>(Chunk::bytes(c->size)), std::memory_order_relaxed);
    if (next_size_ < Chunk::kMaxRecords) next_size_ *= 2;
  }
  const uint32_t slots = budget.reserve(c->size);
  c->committed.store(0, std::memory_order_relaxed);
  c->next.store(nullptr, std::memory_order_relaxed);
  c->capacity = slots;
  if (slots == 0) {  // over the cap: keep the chunk for later
    c->next.store(spare_, std::memory_order_relaxed);
    spare_ = c;
    return false;
  }
  pos_ = 0;
  // Publishing `next` tells the drainer this thread is done with the old tail.
  tail_->next.store(c, std::memory_order_release);
  tail_ = c;
  return true;
}

namespace {
std::atomic<int64_t> g_fail_after{-1};  // testing: allocations left before one fails
}  // namespace

void fail_allocation_after(int64_t n) noexcept {
  g_fail_after.store(n, std::memory_order_relaxed);
}

void allocation_point() {
  int64_t left = g_fail_after.load(std::memory_order_relaxed);
  while (left >= 0) {
    if (g_fail_after.compare_exchange_weak(left, left - 1, std::memory_order_relaxed)) {
      if (left == 0) throw std::bad_alloc();
      return;
    }
  }
}

void RecordBuffer::drain(std::vector<Record>& out) {
  // Exception-safe: each chunk's records are copied before the chunk is let go, and head_
  // and consumed_ move only past what was copied, so an allocation that fails part-way
  // leaves the rest in the buffer for the next drain (a chunk already recycled is never
  // read again: reading it once did corrupt records and free it twice).
  for (;;) {
    Chunk* c = head_;
    Chunk* next = c->next.load(std::memory_order_acquire);
    // After seeing `next`, every commit to c is visible; re-reading committed is then final.
    const uint32_t n = c->committed.load(std::memory_order_acquire);
    if (n > consumed_) {
      allocation_point();
      out.insert(out.end(), c->records() + consumed_, c->records() + n);
    }
    consumed_ = n;
    if (next == nullptr) break;
    head_ = next;
    consumed_ = 0;
    if (c != &sentinel_) {
      Chunk* top = recycled_.load(std::memory_order_relaxed);
      do {
        c->next.store(top, std::memory_order_relaxed);
      } while (!recycled_.compare_exchange_weak(top, c, std::memory_order_release,
                                                std::memory_order_relaxed));
    }
  }
}

}  // namespace pytimings
