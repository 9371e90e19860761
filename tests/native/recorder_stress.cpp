// Stress of the native recorder without Python, built by tests/recorder/test_sanitizers.py
// with ThreadSanitizer and with AddressSanitizer+UBSan: writer threads open and close nested
// regions while a drainer thread drains concurrently and writer threads exit (so their
// buffers are released under the drainer's feet). Checks that nothing is lost, duplicated or
// reordered, and, with a cap (argv[1]), that kept + dropped == issued and kept <= cap.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "pytimings/recorder.hpp"

using namespace pytimings;

#define CHECK(cond)                                                       \
  do {                                                                    \
    if (!(cond)) {                                                        \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::exit(1);                                                       \
    }                                                                     \
  } while (0)

int main(int argc, char** argv) {
  const int64_t cap = argc > 1 ? std::atoll(argv[1]) : -1;
  constexpr int kWriters = 8;
  constexpr int kRegions = 20000;
  Recorder rec(cap, 0);
  rec.start();
  const uint32_t name = intern("stress", false);
  const uint32_t kind = intern("host", true);

  std::atomic<int> finished{0};
  std::vector<Record> got;
  std::thread drainer([&] {
    while (finished.load() < kWriters) {
      std::vector<Record> v = rec.drain(false);
      got.insert(got.end(), v.begin(), v.end());
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      ThreadState* ts = rec.local();
      if (ts == nullptr) ts = rec.register_thread(("writer-" + std::to_string(w)).c_str());
      RegionSpec spec;
      spec.name = name;
      spec.kind = kind;
      spec.flags = kHasPayload;
      int outer = 0, inner = 0;  // owners: any distinct addresses
      for (int i = 0; i < kRegions; ++i) {
        spec.payload = (static_cast<int64_t>(w) << 32) | i;
        rec.enter(*ts, spec, &outer);
        rec.enter(*ts, spec, &inner);
        CHECK(rec.exit(*ts, &outer, false) == ExitResult::kNotInnermost);
        CHECK(rec.exit(*ts, &inner, false) == ExitResult::kClosed);
        CHECK(rec.exit(*ts, &outer, i % 7 == 0) == ExitResult::kClosed);
      }
      finished.fetch_add(1);
    });
  }
  for (auto& t : writers) t.join();
  drainer.join();
  std::vector<Record> rest = rec.drain(true);
  got.insert(got.end(), rest.begin(), rest.end());

  uint64_t dropped = 0;
  for (auto& [id, n] : rec.dropped()) {
    CHECK(id == name);
    dropped += n;
  }
  const uint64_t issued = 2ull * kWriters * kRegions;
  CHECK(got.size() + dropped == issued);
  if (cap >= 0) {
    CHECK(static_cast<int64_t>(got.size()) <= cap);
  } else {
    CHECK(dropped == 0);
    // Per writer and depth: every region exactly once, in order.
    std::vector<int64_t> next(kWriters * 2, 0);
    for (const Record& r : got) {
      const int w = static_cast<int>(r.payload >> 32);
      const int64_t i = r.payload & 0xffffffff;
      CHECK(w >= 0 && w < kWriters && r.depth < 2);
      CHECK(i == next[w * 2 + r.depth]++);
      CHECK(r.end_ns >= r.start_ns);
      CHECK(((r.flags & kError) != 0) == (r.depth == 0 && i % 7 == 0));
    }
    for (int64_t n : next) CHECK(n == kRegions);
  }
  std::printf("ok %zu kept %llu dropped\n", got.size(), static_cast<unsigned long long>(dropped));
  return 0;
}
