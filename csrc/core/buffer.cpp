#include "pytimings/buffer.hpp"

#include <new>

namespace pytimings {

RecordBuffer::RecordBuffer() : tail_(new Chunk), head_(tail_) {}  // capacity 0: reserve first

RecordBuffer::~RecordBuffer() {
  auto free_list = [](Chunk* c) {
    while (c != nullptr) {
      Chunk* n = c->next.load(std::memory_order_relaxed);
      delete c;
      c = n;
    }
  };
  free_list(head_);
  free_list(spare_);
  free_list(recycled_.load(std::memory_order_relaxed));
}

bool RecordBuffer::grow(Budget& budget) noexcept {
  if (tail_->capacity > 0 && tail_->capacity < Chunk::kRecords) {
    const uint32_t more = budget.reserve(Chunk::kRecords - tail_->capacity);
    tail_->capacity += more;
    return more > 0;
  }
  const uint32_t slots = budget.reserve(Chunk::kRecords);
  if (slots == 0) return false;
  if (spare_ == nullptr) spare_ = recycled_.exchange(nullptr, std::memory_order_acquire);
  Chunk* c = spare_;
  if (c != nullptr) {
    spare_ = c->next.load(std::memory_order_relaxed);
  } else {
    c = new (std::nothrow) Chunk;  // warm-up, or the drainer has not caught up
    if (c == nullptr) {
      budget.release(slots);
      return false;
    }
  }
  c->committed.store(0, std::memory_order_relaxed);
  c->next.store(nullptr, std::memory_order_relaxed);
  c->capacity = slots;
  pos_ = 0;
  // Publishing `next` tells the drainer this thread is done with the old tail.
  tail_->next.store(c, std::memory_order_release);
  tail_ = c;
  return true;
}

void RecordBuffer::drain(std::vector<Record>& out) {
  Chunk* c = head_;
  for (;;) {
    Chunk* next = c->next.load(std::memory_order_acquire);
    // After seeing `next`, every commit to c is visible; re-reading committed is then final.
    const uint32_t n = c->committed.load(std::memory_order_acquire);
    out.insert(out.end(), c->records + consumed_, c->records + n);
    consumed_ = n;
    if (next == nullptr) break;
    Chunk* top = recycled_.load(std::memory_order_relaxed);
    do {
      c->next.store(top, std::memory_order_relaxed);
    } while (!recycled_.compare_exchange_weak(top, c, std::memory_order_release,
                                              std::memory_order_relaxed));
    c = next;
    consumed_ = 0;
  }
  head_ = c;
}

}  // namespace pytimings
